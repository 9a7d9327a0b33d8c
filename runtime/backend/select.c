/*
 * select.c: backend selection (see select.h).
 */
#include <stdio.h>
#include <string.h>

#include "backend/select.h"
#include "util/util.h"

/* Failures that mean "no usable GPU here", after which auto moves on. */
static bool backend_unavailable(int err)
{
    return err == DCP_ENODRIVER || err == DCP_ESTUBDRIVER || err == DCP_EDRIVERVERSION ||
           err == DCP_ENODEVICE || err == DCP_ENOTSUP || err == DCP_EMODULE;
}

static int try_open(const struct dcp_engine *e, const struct dcp_backend_ops *ops, struct dcp_backend_choice *out)
{
    void *state = NULL;
    memset(&out->caps, 0, sizeof(out->caps));
    int err = ops->engine_init(e, &state, &out->caps);
    if (err) {
        ops->engine_fini(state);
        return err;
    }
    out->ops = ops;
    out->state = state;
    return DCP_OK;
}

int dcp_backend_open(const struct dcp_engine *e, struct dcp_backend_choice *out)
{
    /* auto: the first backend of this list that is available on the machine. */
    static const struct {
        const struct dcp_backend_ops *ops;
        const char *label; /* in the notice */
    } auto_order[] = {{&dcp_cuda_backend, "CUDA"}, {&dcp_host_backend, "host"}};
    const size_t n = sizeof(auto_order) / sizeof(auto_order[0]);
    memset(out, 0, sizeof(*out));
    switch (e->cfg->runtime.backend) {
    case DCP_BACKEND_CUDA:
        return try_open(e, &dcp_cuda_backend, out);
    case DCP_BACKEND_HOST:
        return try_open(e, &dcp_host_backend, out);
    case DCP_BACKEND_AUTO:
        break;
    }
    for (size_t i = 0;; i++) {
        int err = try_open(e, auto_order[i].ops, out);
        if (!err || i + 1 == n || !backend_unavailable(err))
            return err;
        snprintf(out->notice, sizeof(out->notice), "%s backend unavailable (%s); using the %s backend",
                 auto_order[i].label, dcp_last_error()[0] ? dcp_last_error() : dcp_strerror(err),
                 auto_order[i + 1].label);
    }
}

bool dcp_backend_spans_processes(enum dcp_backend_kind kind)
{
    return kind != DCP_BACKEND_HOST;
}
