/*
 * options.h: the one command-line parser of dcp-run.
 *
 * Every subcommand describes its options as a table of struct cli_option (name,
 * argument kind, metavariable, help text, accepted range, destination). cli_parse()
 * reads argv with that table and cli_help() prints the option list from the same
 * table, so what --help says and what the parser accepts cannot disagree.
 *
 * The contract, the same for every subcommand:
 *  - "--name VALUE" and "--name=VALUE" are the same; a flag given a value
 *    ("--json=1"), an unknown option, a missing value or a bad value prints one
 *    line naming the option and the accepted values, then the usage line, on
 *    stderr, and cli_parse() returns CLI_EXIT_USAGE (2);
 *  - numbers are parsed without overflow (an out-of-range value is an error,
 *    never a wrapped one) and checked against the option's range;
 *  - "--help" or "-h" prints the help to stdout (CLI_PARSE_HELP: exit 0);
 *  - "--" ends the options; "-" alone is a positional argument.
 */
#ifndef DCP_CLI_OPTIONS_H
#define DCP_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dcp/dcp.h"

/** What an option takes and the type of its destination. */
enum cli_arg {
    CLI_ARG_FLAG,      ///< No value; sets the bool destination to true.
    CLI_ARG_FLAG_OFF,  ///< No value; sets the bool destination to false (--no-check).
    CLI_ARG_U32,       ///< Unsigned integer (k/M/G binary suffixes) into a uint32_t, in [min, max].
    CLI_ARG_U64,       ///< Unsigned integer (k/M/G binary suffixes) into a uint64_t, in [min, max].
    CLI_ARG_REAL,      ///< Finite decimal number in [min, max], times scale, into a double.
    CLI_ARG_STRING,    ///< Any non-empty string; the destination is a const char *.
    CLI_ARG_CUSTOM,    ///< Parsed by the option's parse function.
};

/**
 * A parse function of a CLI_ARG_CUSTOM option: stores value at dest and returns
 * true, or returns false after writing what is accepted into why (a phrase such
 * as "one of auto, host, cuda").
 */
typedef bool (*cli_parse_fn)(const char *value, void *dest, char *why, size_t why_size);

/** One option of a subcommand. */
struct cli_option {
    const char *name;      ///< "--steps".
    enum cli_arg kind;     ///< What it takes.
    const char *metavar;   ///< Shown after the name in the help ("N", "FILE"); NULL for flags.
    const char *help;      ///< One line (more lines are separated by '\n').
    double min, max;       ///< Accepted range of a number (inclusive); shown in the help.
    double scale;          ///< CLI_ARG_REAL: the value stored is the one given times this (0 means 1).
    size_t offset;         ///< offsetof() the destination in the subcommand's options struct.
    cli_parse_fn parse;    ///< CLI_ARG_CUSTOM only.
};

/** A subcommand's command line. */
struct cli_spec {
    const char *command;       ///< "run": messages start with "dcp-run run: ".
    const char *usage;         ///< Arguments after the command name ("[FILE] [options]"); more
                               ///< usage lines are separated by '\n'.
    const char *description;   ///< Paragraph(s) printed before the options.
    const char *positional;    ///< Name of the one positional argument ("FILE"), NULL for none.
    size_t positional_offset;  ///< offsetof() its const char * destination.
    bool default_deployment;   ///< The positional defaults to the default deployment: say which.
    const struct cli_option *options;
    size_t num_options;
    const char *epilogue;      ///< Printed after the options (exit status etc.), or NULL.
};

/** cli_parse() returned after printing the help: the command exits 0. */
#define CLI_PARSE_HELP (-1)

/**
 * Parses argv[1..argc) into opts (the subcommand's options struct, already holding
 * the defaults). Returns 0, CLI_PARSE_HELP, or CLI_EXIT_USAGE after printing why.
 */
int cli_parse(const struct cli_spec *spec, int argc, char **argv, void *opts);

/** Prints the subcommand's help: usage, description, options (from the table), epilogue. */
void cli_help(const struct cli_spec *spec, FILE *out);

/** Parses an unsigned decimal integer with an optional k/M/G (binary) suffix; false on
 *  anything else, including a value that does not fit in 64 bits. */
bool cli_parse_u64(const char *s, unsigned long long *out);

/** The --backend option's destination: whether it was given, and the backend. */
struct cli_backend_opt {
    bool given;
    enum dcp_backend_kind kind;
};

/** CLI_ARG_CUSTOM parser of a backend name into a struct cli_backend_opt. */
bool cli_parse_backend_opt(const char *value, void *dest, char *why, size_t why_size);

#endif /* DCP_CLI_OPTIONS_H */
