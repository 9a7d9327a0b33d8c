/*
 * select.h: the backends and how one is chosen (the backend layer's policy; the
 * engine only calls dcp_backend_open and reads the capabilities it returns).
 */
#ifndef DCP_BACKEND_SELECT_H
#define DCP_BACKEND_SELECT_H

#include <stddef.h>

#include "engine/engine_internal.h"

extern const struct dcp_backend_ops dcp_host_backend;
extern const struct dcp_backend_ops dcp_cuda_backend;

/** The backend chosen for an engine. */
struct dcp_backend_choice {
    const struct dcp_backend_ops *ops; ///< The backend's operations.
    void *state;                       ///< Its engine state (for engine->backend).
    struct dcp_backend_caps caps;      ///< What it can do.
    char notice[512];                  ///< Why auto did not take its first choice ("" if it did).
};

/**
 * Opens the backend e->cfg->runtime.backend asks for: cuda or host as named, or
 * for auto the first of (cuda, host) that opens; a backend that is unavailable on
 * this machine (no driver, no device, no kernels) is skipped with a notice, any
 * other failure is returned. On failure nothing is left open.
 */
int dcp_backend_open(const struct dcp_engine *e, struct dcp_backend_choice *out);

/**
 * Whether a backend of this kind may run one TP rank per process (a launcher's
 * rank): the host backend keeps every rank in this process; cuda and auto may
 * drive one GPU per process over NCCL.
 */
bool dcp_backend_spans_processes(enum dcp_backend_kind kind);

#endif /* DCP_BACKEND_SELECT_H */
