/* nccl_api.c: loading NCCL with dlopen; result names; polling with abort. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dl.h"
#include "nccl_api.h"
#include "util/util.h"

static const char *const nccl_result_names[] = {
    "ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
    "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
    "ncclRemoteError",   "ncclInProgress",
};

const char *dcp_nccl_result_name(int result)
{
    if (result >= 0 && (size_t)result < DCP_ARRAY_SIZE(nccl_result_names))
        return nccl_result_names[result];
    return "ncclUnknownResult";
}

/* NCCL_VERSION(X,Y,Z) is X*1000+Y*100+Z up to 2.8 and X*10000+Y*100+Z after. */
char *dcp_nccl_version_string(int code, char *buf, size_t size)
{
    if (code < 10000)
        snprintf(buf, size, "%d.%d.%d", code / 1000, code % 1000 / 100, code % 100);
    else
        snprintf(buf, size, "%d.%d.%d", code / 10000, code % 10000 / 100, code % 100);
    return buf;
}

/* What NCCL said about the failure, if it says anything. */
static const char *nccl_detail(const struct dcp_nccl *nccl, int result, ncclComm_t comm)
{
    const char *text = NULL;
    if (nccl && nccl->api.ncclGetLastError)
        text = nccl->api.ncclGetLastError(comm);
    if ((!text || !*text) && nccl && nccl->api.ncclGetErrorString)
        text = nccl->api.ncclGetErrorString(result);
    return text ? text : "";
}

int dcp_nccl_check(const struct dcp_nccl *nccl, int result, const char *call, ncclComm_t comm)
{
    if (result == ncclSuccess || result == ncclInProgress)
        return DCP_OK;
    const char *detail = nccl_detail(nccl, result, comm);
    return dcp_error(DCP_ENCCL, "%s: %s (%d)%s%s", call, dcp_nccl_result_name(result), result,
                     *detail ? ": " : "", detail);
}

void dcp_nccl_config_nonblocking(ncclConfig_t *config)
{
    *config = (ncclConfig_t){
        .size = sizeof(*config),
        .magic = DCP_NCCL_CONFIG_MAGIC,
        .version = DCP_NCCL_CONFIG_VERSION,
        .blocking = 0,
        .cgaClusterSize = DCP_NCCL_CONFIG_UNDEF_INT,
        .minCTAs = DCP_NCCL_CONFIG_UNDEF_INT,
        .maxCTAs = DCP_NCCL_CONFIG_UNDEF_INT,
        .netName = NULL,
        .splitShare = DCP_NCCL_CONFIG_UNDEF_INT,
    };
}

/* ------------------------------------------------------------------------- */
/* Loading. */

struct nccl_symbol {
    const char *name;
    int required;
    size_t offset;
};

static const struct nccl_symbol nccl_symbols[] = {
#define DCP_NCCL_SLOT(name, required, ret, params) \
    {#name, required, offsetof(struct dcp_nccl_api, name)},
    DCP_NCCL_FUNCTIONS(DCP_NCCL_SLOT)
#undef DCP_NCCL_SLOT
};

static int resolve_nccl(struct dcp_nccl *nccl)
{
    for (size_t i = 0; i < DCP_ARRAY_SIZE(nccl_symbols); i++) {
        void *fn = dlsym(nccl->dl, nccl_symbols[i].name);
        if (!fn && nccl_symbols[i].required)
            return dcp_error(DCP_ENCCL, "NCCL %s lacks %s (older than %d.%d?)", nccl->path,
                             nccl_symbols[i].name, DCP_NCCL_MIN_VERSION / 10000,
                             DCP_NCCL_MIN_VERSION % 10000 / 100);
        memcpy((char *)&nccl->api + nccl_symbols[i].offset, &fn, sizeof(fn));
    }
    return DCP_OK;
}

static int check_nccl_version(struct dcp_nccl *nccl)
{
    int status = dcp_nccl_check(nccl, nccl->api.ncclGetVersion(&nccl->version), "ncclGetVersion",
                                NULL);
    if (status || nccl->version >= DCP_NCCL_MIN_VERSION)
        return status;
    char have[24], need[24];
    return dcp_error(DCP_ENCCL, "NCCL %s (%s) is older than %s, the oldest libdcp supports",
                     dcp_nccl_version_string(nccl->version, have, sizeof(have)), nccl->path,
                     dcp_nccl_version_string(DCP_NCCL_MIN_VERSION, need, sizeof(need)));
}

int dcp_nccl_open(const struct dcp_nccl_open_params *p, struct dcp_nccl **out)
{
    if (!out)
        return dcp_error(DCP_EINVAL, "dcp_nccl_open: out is NULL");
    *out = NULL;
    const struct dcp_dl_choice lib = dcp_dl_choose(p ? p->library : NULL, DCP_NCCL_LIBRARY_ENV, "libnccl.so.2");
    struct dcp_nccl *nccl = calloc(1, sizeof(*nccl));
    if (!nccl)
        return dcp_error(DCP_ENOMEM, "dcp_nccl_open: out of memory");
    nccl->dl = dlopen(lib.library, RTLD_NOW | RTLD_LOCAL);
    if (!nccl->dl) {
        const char *why = dlerror();
        free(nccl);
        return dcp_dl_open_error(DCP_ENCCL, "NCCL", &lib, why);
    }
    nccl->path = dcp_dl_loaded_path(nccl->dl, lib.library);
    if (!nccl->path) {
        dcp_nccl_close(&nccl);
        return dcp_error(DCP_ENOMEM, "dcp_nccl_open: out of memory");
    }
    int status = resolve_nccl(nccl);
    if (!status)
        status = check_nccl_version(nccl);
    if (status) {
        dcp_nccl_close(&nccl);
        return dcp_dl_blame_origin(status, &lib);
    }
    *out = nccl;
    return DCP_OK;
}

int dcp_nccl_describe(const struct dcp_nccl *nccl, char *buf, size_t size)
{
    char version[24];
    return snprintf(buf, size, "NCCL %s (%s)",
                    dcp_nccl_version_string(nccl->version, version, sizeof(version)), nccl->path);
}

void dcp_nccl_close(struct dcp_nccl **nccl)
{
    if (!nccl || !*nccl)
        return;
    if ((*nccl)->dl)
        dlclose((*nccl)->dl);
    free((*nccl)->path);
    free(*nccl);
    *nccl = NULL;
}

/* ------------------------------------------------------------------------- */
/* Waiting. */

/* Aborts *comm and records the failure; the message was formatted beforehand
 * because NCCL's last-error text dies with the communicator. */
static int abort_comm(const struct dcp_nccl *nccl, ncclComm_t *comm, int status,
                      const char *message)
{
    nccl->api.ncclCommAbort(*comm);
    *comm = NULL;
    return dcp_error(status, "%s; NCCL communicator aborted", message);
}

static int async_failure(const struct dcp_nccl *nccl, ncclComm_t *comm, int result,
                         const char *what)
{
    char message[384];
    const char *detail = nccl_detail(nccl, result, *comm);
    snprintf(message, sizeof(message), "%s: NCCL reported %s (%d)%s%s", what,
             dcp_nccl_result_name(result), result, *detail ? ": " : "", detail);
    return abort_comm(nccl, comm, DCP_ENCCL, message);
}

static int event_failure(const struct dcp_nccl *nccl, ncclComm_t *comm, int result,
                         const char *what)
{
    char message[384];
    snprintf(message, sizeof(message), "%s: cuEventQuery: %s (%d): %s", what,
             dcp_cuda_result_name(result), result, dcp_cuda_result_message(result));
    return abort_comm(nccl, comm, DCP_ECUDA, message);
}

static int timeout_failure(const struct dcp_nccl *nccl, ncclComm_t *comm, double timeout_s,
                           int async, const char *what)
{
    char message[384];
    snprintf(message, sizeof(message), "%s did not complete within %.3g s (%s)", what, timeout_s,
             async == ncclInProgress ? "NCCL still in progress"
                                     : "stream work not finished: a peer may be hung or dead");
    return abort_comm(nccl, comm, DCP_ETIMEOUT, message);
}

int dcp_nccl_wait(const struct dcp_nccl *nccl, ncclComm_t *comm, const struct dcp_cuda *cu,
                  CUevent done, double timeout_s, const char *what)
{
    return dcp_nccl_wait_cancellable(nccl, comm, cu, done, timeout_s, what, NULL);
}

int dcp_nccl_wait_cancellable(const struct dcp_nccl *nccl, ncclComm_t *comm, const struct dcp_cuda *cu,
                              CUevent done, double timeout_s, const char *what, const atomic_int *cancel)
{
    if (!nccl || !comm || !*comm || (done && !cu))
        return dcp_error(DCP_EINVAL, "dcp_nccl_wait: NULL argument");
    what = what ? what : "NCCL operation";
    double deadline = dcp_now_seconds() + (timeout_s > 0 ? timeout_s : 0);
    struct dcp_poll poll; /* an enqueue or collective takes microseconds: spin first (util.h) */
    dcp_poll_init(&poll);
    for (;;) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = nccl->api.ncclCommGetAsyncError(*comm, &async);
        if (r != ncclSuccess)
            async = r;
        if (async != ncclSuccess && async != ncclInProgress)
            return async_failure(nccl, comm, async, what);
        CUresult event = CUDA_ERROR_NOT_READY;
        if (async == ncclSuccess)
            event = done ? cu->api.cuEventQuery(done) : CUDA_SUCCESS;
        if (event == CUDA_SUCCESS)
            return DCP_OK;
        if (event != CUDA_ERROR_NOT_READY)
            return event_failure(nccl, comm, event, what);
        if (cancel && atomic_load(cancel)) {
            char message[384];
            snprintf(message, sizeof(message), "%s: the step was aborted (another rank failed)", what);
            return abort_comm(nccl, comm, DCP_EABORTED, message);
        }
        if (dcp_now_seconds() >= deadline)
            return timeout_failure(nccl, comm, timeout_s, async, what);
        dcp_poll_pause(&poll);
    }
}
