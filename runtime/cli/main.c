/*
 * dcp-run: plan, run and benchmark Decode Context Parallelism deployments.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* <the directory of this executable>/DCP_DATADIR_FROM_BINDIR/dcp/configs/default.yaml when
 * it exists: an installed dcp-run takes the configs installed beside it, wherever the
 * install tree is (also when the source tree it was built from is still there). */
static const char *beside_binary(void)
{
    static char path[4096];
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    const char *data = DCP_DATADIR_FROM_BINDIR;
    char joined[sizeof(exe) + 64];
    const int len = data[0] == '/' ? snprintf(joined, sizeof(joined), "%s/dcp/configs/default.yaml", data)
                                   : snprintf(joined, sizeof(joined), "%s/%s/dcp/configs/default.yaml", exe, data);
    /* realpath: the path without "bin/..", as messages show it. */
    return len > 0 && (size_t)len < sizeof(joined) && realpath(joined, path) && access(path, R_OK) == 0 ? path
                                                                                                         : NULL;
}

const char *cli_default_deployment(void)
{
    const char *env = getenv("DCP_DEFAULT_DEPLOYMENT");
    if (env && *env)
        return env;
    const char *installed = beside_binary();
    if (installed)
        return installed;
    if (access(DCP_SOURCE_DEFAULT_DEPLOYMENT, R_OK) == 0) /* run from the build tree */
        return DCP_SOURCE_DEFAULT_DEPLOYMENT;
    return DCP_INSTALLED_DEFAULT_DEPLOYMENT;
}

const char *cli_unwritable(const char *path, char *why, size_t size)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            snprintf(why, size, "is a directory");
        else if (access(path, W_OK) != 0)
            snprintf(why, size, "cannot be written: %s", strerror(errno));
        else
            return NULL;
        return why;
    }
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        snprintf(why, size, "its directory %s does not exist", dir);
    else if (access(dir, W_OK | X_OK) != 0)
        snprintf(why, size, "its directory %s is not writable: %s", dir, strerror(errno));
    else
        return NULL;
    return why;
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
