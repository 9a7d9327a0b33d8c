/*
 * cli.h: shared pieces of dcp-run's subcommands.
 */
#ifndef DCP_CLI_H
#define DCP_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "dcp/dcp.h"
#include "dcp/tools.h"
#include "json.h"
#include "options.h"

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
int cmd_calibrate(int argc, char **argv);

/** Path of the default deployment: DCP_DEFAULT_DEPLOYMENT when set, else configs/default.yaml
 *  installed beside the executable (<bindir>/../share/dcp/configs), else the build tree's
 *  source, else the install prefix's. Never NULL. */
const char *cli_default_deployment(void);

/** Why a file cannot be written at path (what writing it later would find out), or NULL: an
 *  existing path that is a directory or not writable, or a directory that is missing or not
 *  writable. For checks before long work whose result goes there; creates nothing. */
const char *cli_unwritable(const char *path, char *why, size_t size);

/**
 * Loads a deployment, printing every diagnostic to stderr. Returns NULL on
 * failure (after printing).
 */
dcp_deployment *cli_load_deployment(const char *path);

#endif /* DCP_CLI_H */
