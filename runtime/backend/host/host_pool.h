/*
 * host_pool.h: a rank's worker threads for the host backend.
 *
 * A kernel launch is a list of independent work items (dcp_kernels/cpu.h); the
 * rank's own thread and its workers take chunks of items from a shared counter
 * until none are left, each with its own preallocated scratch buffer.
 */
#ifndef DCP_HOST_POOL_H
#define DCP_HOST_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "dcp_kernels/cpu.h"

struct host_pool {
    uint32_t num_workers;        ///< Threads besides the caller.
    pthread_t *workers;
    uint32_t started;            ///< Workers actually running.
    void **scratch;              ///< [num_workers + 1] buffers; [0] is the caller's.
    size_t scratch_bytes;        ///< Size of each scratch buffer.

    pthread_mutex_t mu;
    pthread_cond_t wake;         ///< Workers wait here for a new job.
    pthread_cond_t done;         ///< The caller waits here for workers to finish.
    uint64_t generation;         ///< Incremented per job.
    uint32_t busy;               ///< Workers still on the current job.
    bool stop;

    /* the current job */
    const struct dcpk_kernel_desc *kernel;
    const void *params;
    uint64_t items;
    uint64_t chunk;
    atomic_uint_fast64_t next;
};

/** Starts num_workers threads and allocates num_workers + 1 scratch buffers. */
int host_pool_init(struct host_pool *pool, uint32_t num_workers, size_t scratch_bytes);

/** Stops the workers and frees everything. Accepts a zeroed or partly initialised pool. */
void host_pool_fini(struct host_pool *pool);

/** Runs every work item of one launch and returns when all are done. */
int host_pool_run(struct host_pool *pool, const struct dcpk_kernel_desc *kernel, const void *params);

#endif /* DCP_HOST_POOL_H */
