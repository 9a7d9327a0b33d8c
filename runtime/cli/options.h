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

/** Options several subcommands share, each defined once: --json, --quiet and --backend
 *  (help is the backend option's help, which says its default). */
#define CLI_OPTION_JSON(type, field) \
    {"--json", CLI_ARG_FLAG, NULL, "machine-readable output", .offset = offsetof(type, field)}
#define CLI_OPTION_QUIET(type, field) \
    {"--quiet", CLI_ARG_FLAG, NULL, "no progress line", .offset = offsetof(type, field)}
#define CLI_OPTION_BACKEND(type, field, help) \
    {"--backend", CLI_ARG_CUSTOM, "B", help, .offset = offsetof(type, field), .parse = cli_parse_backend_opt}

/** The positional argument of a struct cli_spec: a deployment file that defaults to
 *  the default deployment, named name in the help, stored at field of type. */
#define CLI_SPEC_DEPLOYMENT(name, type, field) \
    .positional = (name), .positional_offset = offsetof(type, field), .default_deployment = true

/** The .options and .num_options of a struct cli_spec, from a table. */
#define CLI_SPEC_OPTIONS(table) .options = (table), .num_options = sizeof(table) / sizeof((table)[0])

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

/** Options of the subcommands that execute the engine (run, replay). */
struct cli_exec_opts {
    uint32_t layers;                ///< --layers: only the first layers (0: all).
    uint64_t kv_mb;                 ///< --kv-mb: KV budget per rank in MB (0: from the deployment).
    struct cli_backend_opt backend; ///< --backend.
    bool check;                     ///< Not --no-check: compare outputs with float64 attention.
};

/** The table entries of struct cli_exec_opts at field of type; help_prefix starts each
 *  help line ("execute: " where other options do not execute). */
#define CLI_EXEC_OPTIONS(type, field, help_prefix)                                                           \
    {"--layers", CLI_ARG_U32, "N", help_prefix "run only the first N layers (default all; at most the model's)", \
     1, 65536, .offset = offsetof(type, field.layers)},                                                     \
    {"--kv-mb", CLI_ARG_U64, "N", help_prefix "KV budget per rank in MB (default: from the deployment)", 1, 1e9, \
     .offset = offsetof(type, field.kv_mb)},                                                                \
    CLI_OPTION_BACKEND(type, field.backend, help_prefix "auto, host or cuda (default runtime.backend)"),     \
    {"--no-check", CLI_ARG_FLAG_OFF, NULL, help_prefix "skip the correctness check",                       \
     .offset = offsetof(type, field.check)}

/** Most values a list option takes. */
#define CLI_LIST_MAX 32

/** A list option's destination: values given as "1,2,4", or the word "all". */
struct cli_u32_list {
    uint32_t v[CLI_LIST_MAX]; ///< The values, ascending and distinct.
    uint32_t n;               ///< How many (0: the option was not given, or "all").
    bool all;                 ///< "all" was given (only where cli_parse_list_or_all parsed it).
};

/** CLI_ARG_CUSTOM parser of "N,N,..." (1 to 1,000,000 each, ascending, at most CLI_LIST_MAX)
 *  into a struct cli_u32_list. */
bool cli_parse_list(const char *value, void *dest, char *why, size_t why_size);

/** Like cli_parse_list(), also accepting "all". */
bool cli_parse_list_or_all(const char *value, void *dest, char *why, size_t why_size);

/** CLI_ARG_CUSTOM parser of a backend name into a struct cli_backend_opt. */
bool cli_parse_backend_opt(const char *value, void *dest, char *why, size_t why_size);

#endif /* DCP_CLI_OPTIONS_H */
