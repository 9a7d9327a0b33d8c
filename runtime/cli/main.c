/*
 * dcp-run: plan, run and benchmark Decode Context Parallelism deployments.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const struct cli_command commands[] = {
    {"plan", "what DCP buys over TP for a deployment: memory, capacity, communication", cmd_plan},
    {"run", "run the deployment: TP baseline vs DCP concurrency, speed and a correctness check", cmd_run},
    {"bench", "decode attention bandwidth next to a copy of the same bytes, GQA and MLA", cmd_bench},
    {"replay", "a request trace through the serving scheduler: TP vs DCP, simulated or executed", cmd_replay},
    {"calibrate", "measure the performance model's inputs on this backend for plan/replay --calibration", cmd_calibrate},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dcp-run [--version] [--help] <command> [args]\n"
            "\n"
            "Decode Context Parallelism: shard the KV cache along the sequence across GPUs.\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\n"
            "Every command takes --help. Deployment files are YAML; see docs/configuration.md.\n"
            "With no deployment argument, commands use the default deployment:\n"
            "  %s\n",
            cli_default_deployment());
}

const char *cli_default_deployment(void)
{
    const char *env = getenv("DCP_DEFAULT_DEPLOYMENT");
    if (env && *env)
        return env;
    if (access(DCP_SOURCE_DEFAULT_DEPLOYMENT, R_OK) == 0)
        return DCP_SOURCE_DEFAULT_DEPLOYMENT;
    return DCP_INSTALLED_DEFAULT_DEPLOYMENT;
}

dcp_deployment *cli_load_deployment(const char *path)
{
    dcp_diag *diag = NULL;
    dcp_deployment *dep = NULL;
    if (dcp_diag_create(&diag)) {
        fprintf(stderr, "dcp-run: out of memory\n");
        return NULL;
    }
    int err = dcp_deployment_load_file(path, diag, &dep);
    dcp_diag_print(diag, stderr);
    if (err && dcp_diag_count(diag) == 0)
        fprintf(stderr, "%s: %s\n", path, dcp_strerror(err));
    /* The library's summary counts every error, also those past the listing cap. */
    if (err == DCP_ECONFIG && dcp_diag_error_count(diag) > 1)
        fprintf(stderr, "%s\n", dcp_last_error());
    const char *env = getenv("DCP_DEFAULT_DEPLOYMENT");
    if (err == DCP_EIO && env && *env && !strcmp(path, env))
        fprintf(stderr, "dcp-run: (that file is the default deployment named by DCP_DEFAULT_DEPLOYMENT)\n");
    dcp_diag_destroy(&diag);
    return err ? NULL : dep;
}

/*
 * Output that could not be written is a failure: `dcp-run plan > /dev/full` must
 * not exit 0. Flushes stdout and turns a write error into exit status 1 with a
 * message on stderr.
 */
static int finish_output(int rc)
{
    errno = 0;
    const bool bad = fflush(stdout) != 0 || ferror(stdout);
    const int err = errno;
    if (!bad)
        return rc;
    fprintf(stderr, "dcp-run: cannot write the output: %s\n", err ? strerror(err) : "write error");
    return rc == CLI_EXIT_OK ? CLI_EXIT_FAIL : rc;
}

static int run_command(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("dcp-run %s\n", dcp_version());
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(cmd, commands[i].name))
            return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "dcp-run: unknown command '%s' (try dcp-run --help)\n", cmd);
    return CLI_EXIT_USAGE;
}

int main(int argc, char **argv) { return finish_output(run_command(argc, argv)); }
