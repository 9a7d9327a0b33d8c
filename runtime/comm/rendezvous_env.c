/* rendezvous_env.c: the rendezvous spec, job tag and job secret of a multi-process
 * job, from the environment (docs/rendezvous.md). */
#include "comm/rendezvous.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"
#include "util/sha256.h"
#include "util/util.h"

static const char tag_vars[] = "DCP_JOB_TAG, SLURM_JOB_ID, PMIX_NAMESPACE or TORCHELASTIC_RUN_ID";

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* The job tag: the first of DCP_JOB_TAG, SLURM_JOB_ID[.STEP][.rRESTARTS],
 * PMIX_NAMESPACE, TORCHELASTIC_RUN_ID (unless torchrun's default "none"). */
static int read_tag(struct dcp_rendezvous_env *out)
{
    char tag[256];
    const char *v, *step, *restarts;
    if ((v = env_nonempty("DCP_JOB_TAG"))) {
        snprintf(tag, sizeof(tag), "%s", v);
        out->tag_source = "DCP_JOB_TAG";
    } else if ((v = env_nonempty("SLURM_JOB_ID"))) {
        step = env_nonempty("SLURM_STEP_ID");
        restarts = env_nonempty("SLURM_RESTART_COUNT");
        snprintf(tag, sizeof(tag), "%s%s%s%s%s", v, step ? "." : "", step ? step : "", restarts ? ".r" : "",
                 restarts ? restarts : "");
        out->tag_source = "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT";
    } else if ((v = env_nonempty("PMIX_NAMESPACE"))) {
        snprintf(tag, sizeof(tag), "%s", v);
        out->tag_source = "PMIX_NAMESPACE";
    } else if ((v = env_nonempty("TORCHELASTIC_RUN_ID")) && strcmp(v, "none")) {
        snprintf(tag, sizeof(tag), "%s", v);
        out->tag_source = "TORCHELASTIC_RUN_ID";
    } else {
        return dcp_error(DCP_EINVAL, "rendezvous: no job tag: set %s to a value unique to this run (the same on"
                         " every rank), so that a file or server of another run is never taken", tag_vars);
    }
    if (strlen(tag) > DCP_RENDEZVOUS_MAX_TAG)
        return dcp_error(DCP_EINVAL, "rendezvous: job tag '%.40s...' from %s is longer than %d bytes: set a"
                         " shorter DCP_JOB_TAG", tag, out->tag_source, DCP_RENDEZVOUS_MAX_TAG);
    memcpy(out->tag, tag, strlen(tag) + 1);
    return DCP_OK;
}

/* Reads the secret file: opened through the library's input-file reader (a FIFO is
 * refused, not waited on; a huge file is refused), private to this user; one
 * trailing newline dropped. */
static int read_secret_file(const char *path, struct dcp_rendezvous_env *out)
{
    static const char var[] = "DCP_RENDEZVOUS_SECRET_FILE";
    int fd = dcp_file_open(path, var, DCP_RENDEZVOUS_MAX_SECRET + 1, 0);
    if (fd < 0) {
        char why[512]; /* dcp_last_error()'s buffer is rewritten by dcp_error() */
        snprintf(why, sizeof(why), "%s", dcp_last_error());
        return dcp_error(DCP_EINVAL, "rendezvous: %s", why);
    }
    struct stat st;
    char why[160];
    int status = DCP_OK;
    if (fstat(fd, &st))
        status = dcp_error(DCP_EINVAL, "rendezvous: %s=%s: cannot stat: %s", var, path, strerror(errno));
    else if (dcp_rendezvous_private_file_problem(&st, why, sizeof(why)))
        status = dcp_error(DCP_EINVAL, "rendezvous: %s=%s %s; the secret file must be private (chmod 600)", var,
                           path, why);
    ssize_t n = 0;
    if (!status) {
        uint8_t buf[DCP_RENDEZVOUS_MAX_SECRET + 2];
        do
            n = read(fd, buf, sizeof(buf));
        while (n < 0 && errno == EINTR);
        if (n < 0)
            status = dcp_error(DCP_EINVAL, "rendezvous: %s=%s: cannot read: %s", var, path, strerror(errno));
        if (n > 0 && buf[n - 1] == '\n')
            n--;
        if (!status && (n < DCP_RENDEZVOUS_MIN_SECRET || n > DCP_RENDEZVOUS_MAX_SECRET))
            status = dcp_error(DCP_EINVAL, "rendezvous: %s=%s holds %zd bytes; a secret has %d..%d (for example"
                               " `openssl rand -hex 32`)", var, path, n, DCP_RENDEZVOUS_MIN_SECRET,
                               DCP_RENDEZVOUS_MAX_SECRET);
        if (!status) {
            memcpy(out->secret, buf, (size_t)n);
            out->secret_len = (size_t)n;
        }
        dcp_wipe(buf, sizeof(buf));
    }
    close(fd);
    return status;
}

static int read_secret(struct dcp_rendezvous_env *out)
{
    const char *value = getenv("DCP_RENDEZVOUS_SECRET"), *file = env_nonempty("DCP_RENDEZVOUS_SECRET_FILE");
    if (value && file)
        return dcp_error(DCP_EINVAL, "rendezvous: both DCP_RENDEZVOUS_SECRET and DCP_RENDEZVOUS_SECRET_FILE are"
                         " set: set only one");
    if (file)
        return read_secret_file(file, out);
    if (!value)
        return DCP_OK;
    const size_t n = strlen(value);
    if (n < DCP_RENDEZVOUS_MIN_SECRET || n > DCP_RENDEZVOUS_MAX_SECRET)
        return dcp_error(DCP_EINVAL, "rendezvous: DCP_RENDEZVOUS_SECRET is %zu bytes; a secret has %d..%d (for"
                         " example `openssl rand -hex 32`)", n, DCP_RENDEZVOUS_MIN_SECRET, DCP_RENDEZVOUS_MAX_SECRET);
    memcpy(out->secret, value, n);
    out->secret_len = n;
    return DCP_OK;
}

int dcp_rendezvous_env_read(struct dcp_rendezvous_env *out)
{
    memset(out, 0, sizeof(*out));
    out->spec = env_nonempty("DCP_RENDEZVOUS");
    if (!out->spec)
        return dcp_error(DCP_EINVAL, "rendezvous: DCP_RENDEZVOUS is not set: with one process per GPU, set it to"
                         " file:/shared/path or tcp:host:port so that rank 0 can share the NCCL ids");
    int st = read_tag(out);
    return st ? st : read_secret(out);
}

void dcp_rendezvous_env_clear(struct dcp_rendezvous_env *e)
{
    if (e)
        dcp_wipe(e, sizeof(*e));
}
