/*
 * cli.h: shared pieces of dcp-run's subcommands.
 */
#ifndef DCP_CLI_H
#define DCP_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "dcp/dcp.h"
#include "json.h"

/** Exit codes of dcp-run. */
enum cli_exit {
    CLI_EXIT_OK = 0,      ///< Success.
    CLI_EXIT_FAIL = 1,    ///< The command ran and failed (bad config, failed check, runtime error).
    CLI_EXIT_USAGE = 2,   ///< Bad command line.
};

/** A subcommand: argv[0] is its name. Returns an enum cli_exit. */
struct cli_command {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
};

/** Subcommands (each in its own cmd_*.c). */
int cmd_plan(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_replay(int argc, char **argv);

/** Path of the default deployment (configs/default.yaml, found relative to the
 *  executable, the build tree, or the install prefix). Never NULL. */
const char *cli_default_deployment(void);

/**
 * Loads a deployment, printing every diagnostic to stderr. Returns NULL on
 * failure (after printing).
 */
dcp_deployment *cli_load_deployment(const char *path);

/** true if the option at argv[*i] is name; consumes its value into *value when the
 *  option takes one ("--x v" or "--x=v"). Prints an error and sets *bad on a missing value. */
bool cli_opt(int argc, char **argv, int *i, const char *name, const char **value, bool *bad);

/** Parses a backend name ("auto", "host", "cuda"); false if it is none of them. */
bool cli_parse_backend(const char *s, enum dcp_backend_kind *out);

/** Parses an unsigned integer option value (accepts k/M/G binary suffixes). */
bool cli_parse_u64(const char *s, unsigned long long *out);

#endif /* DCP_CLI_H */
