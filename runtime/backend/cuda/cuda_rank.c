/*
 * cuda_rank.c: CUDA ranks: streams and events, kernel launch, synchronize, and
 * profiling timers (see cuda_backend.c for the backend as a whole).
 */
#include <stdlib.h>
#include <time.h>

#include "backend/cuda/cuda_internal.h"
#include "dcp_kernels/variants.h"
#include "util/util.h"

int cuda_rank_init(struct dcp_rank *r)
{
    struct dcp_engine *e = r->engine;
    struct cuda_engine *ce = CE(e);
    struct cuda_rank *cr = calloc(1, sizeof(*cr));
    if (!cr)
        return dcp_error(DCP_ENOMEM, "cuda rank");
    r->backend = cr;
    cr->dev = &ce->devices[ce->num_devices == 1 ? 0 : r->local_index];
    if (pthread_mutex_init(&cr->comm_mu, NULL))
        return dcp_error(DCP_ENOMEM, "cuda rank mutex");
    cr->comm_mu_init = true;
    int err = use_rank(r);
    const struct dcp_cuda_api *api = &ce->cu->api;
    if (!err)
        err = CU_CALL(api, cuStreamCreate, &cr->own_stream, CU_STREAM_NON_BLOCKING);
    cr->compute = cr->own_stream;
    if (!err)
        err = CU_CALL(api, cuStreamCreate, &cr->comm_stream, CU_STREAM_NON_BLOCKING);
    for (int i = 0; i < CUDA_RANK_EVENTS && !err; i++)
        err = CU_CALL(api, cuEventCreate, &cr->events[i], CU_EVENT_DISABLE_TIMING);
    for (int i = 0; i < CUDA_TIMER_PAIRS && !err && e->params.profile; i++) {
        err = CU_CALL(api, cuEventCreate, &cr->timer_start[i], CU_EVENT_DEFAULT);
        if (!err)
            err = CU_CALL(api, cuEventCreate, &cr->timer_end[i], CU_EVENT_DEFAULT);
    }
    /* Pinned staging for uploads: two halves of room for one step's metadata (its
     * buffers, each rounded up to 16 bytes), so begin_step's copies are truly
     * asynchronous and the next begin_step need not wait for them. */
    cr->staging_bytes =
        dcp_step_upload_bytes(e->max_batch, e->max_blocks_per_seq, e->max_tokens, e->ring_pages) + DCP_STEP_UPLOADS * 16;
    if (!err)
        err = CU_CALL(api, cuMemAllocHost, (void **)&cr->staging, 2 * cr->staging_bytes);
    return err ? err : cuda_comm_rank_init(r);
}

/* After cuda_engine_stop: the rank's streams are idle, or it is stuck. A stuck
 * rank's memory (device and pinned) may still be read or written by the work that
 * never finished, and freeing it would wait for that work (the driver synchronizes
 * in cuMemFree): it is leaked. Streams and events are released either way (the
 * driver defers that until their work is done, without blocking). */
void cuda_rank_fini(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    if (!cr)
        return;
    struct cuda_engine *ce = CE(r->engine);
    const struct dcp_cuda_api *api = &ce->cu->api;
    use_rank(r);
    const bool leak = atomic_load(&cr->stuck);
    if (leak)
        cr->dev->busy = true;
    cuda_comm_rank_fini(r);
    cuda_memory_rank_fini(r);
    if (cr->staging && !leak)
        api->cuMemFreeHost(cr->staging);
    for (int i = 0; i < CUDA_RANK_EVENTS; i++)
        if (cr->events[i])
            api->cuEventDestroy(cr->events[i]);
    for (int i = 0; i < CUDA_TIMER_PAIRS; i++) {
        if (cr->timer_start[i])
            api->cuEventDestroy(cr->timer_start[i]);
        if (cr->timer_end[i])
            api->cuEventDestroy(cr->timer_end[i]);
    }
    if (cr->comm_stream)
        api->cuStreamDestroy(cr->comm_stream);
    if (cr->own_stream)
        api->cuStreamDestroy(cr->own_stream);
    if (cr->comm_mu_init)
        pthread_mutex_destroy(&cr->comm_mu);
    free(cr);
    r->backend = NULL;
}

/* Block size of each simple (non-attention) family, from its DCPK_SIMPLE_KERNELS
 * entry (variants.h). A family without an entry fails the build: the count below
 * must match, and an entry that names no family does not compile. */
static const uint32_t simple_threads[DCPK_KERNEL_COUNT] = {
#define DCPK_THREADS_(name, threads) [DCPK_KERNEL_##name] = threads,
    DCPK_SIMPLE_KERNELS(DCPK_THREADS_)
#undef DCPK_THREADS_
};
#define DCPK_COUNT_(name, threads) +1
_Static_assert(0 DCPK_SIMPLE_KERNELS(DCPK_COUNT_) + 2 == DCPK_KERNEL_COUNT,
               "every kernel family of DCPK_KERNEL_FAMILIES but attn and sparse_attn (entries per shape and "
               "dtype: variants.h) needs a DCPK_SIMPLE_KERNELS entry");
#undef DCPK_COUNT_

int cuda_launch(struct dcp_rank *r, enum dcpk_kernel_id kernel, const void *params)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_rank *cr = CR(r);
    int err = use_rank(r);
    if (err)
        return err;
    const struct dcpk_grid g = dcpk_kernels[kernel].grid(params);
    if (dcpk_grid_items(g) == 0)
        return DCP_OK;
    /* attn and sparse_attn: the engine's entries (variants.h), with their block size and shared memory. */
    const struct dcpk_attn_variant *v = kernel == DCPK_KERNEL_sparse_attn ? ce->sparse : ce->attn;
    uint32_t threads = simple_threads[kernel], smem = 0;
    if (kernel == DCPK_KERNEL_attn || kernel == DCPK_KERNEL_sparse_attn) {
        threads = v->threads;
        smem = v->smem_bytes;
    }
    const char *problem = cuda_launch_problem(v, kernel, params, threads, smem);
    if (problem)
        return dcp_error(DCP_EINVAL, "dcpk_%s cannot serve this launch (%s): refused rather than left to "
                         "do nothing on the GPU", dcpk_kernels[kernel].name, problem);
    void *args[1] = {(void *)params};
    cr->queued = true;
    err = CU_CALL(&ce->cu->api, cuLaunchKernel, cr->dev->fn[kernel], g.x, g.y, g.z, threads, 1, 1, smem, cr->compute,
                                           args, NULL);
    if (err)
        return dcp_error(err, "launching dcpk_%s: %s", dcpk_kernels[kernel].name, dcp_last_error());
    return DCP_OK;
}

double cuda_wait_bound(const struct dcp_engine *e)
{
    const double t = e->cfg->runtime.cuda.nccl_timeout_s;
    return t > 0 ? t : 0;
}

/* One look at ev, or at both streams of the rank: CUDA_SUCCESS (done),
 * CUDA_ERROR_NOT_READY, or the driver's error. The rank's device is current. */
static CUresult query(const struct dcp_rank *r, CUevent ev)
{
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    const struct cuda_rank *cr = CR(r);
    if (ev)
        return api->cuEventQuery(ev);
    CUresult res = cr->compute ? api->cuStreamQuery(cr->compute) : CUDA_SUCCESS;
    if (res == CUDA_SUCCESS && cr->comm_stream)
        res = api->cuStreamQuery(cr->comm_stream);
    return res;
}

int cuda_wait_device(struct dcp_rank *r, CUevent ev, const char *what)
{
    struct cuda_rank *cr = CR(r);
    const double bound = cuda_wait_bound(r->engine);
    if (atomic_load(&cr->stuck)) /* the engine failed then (engine.h, Errors) */
        return dcp_error(DCP_EABORTED, "%s: the engine failed: earlier device work of rank %u never finished (a hung "
                         "kernel or collective): destroy it", what, r->tp_rank);
    int err = use_rank(r);
    if (err)
        return err;
    const double deadline = dcp_now_seconds() + bound;
    struct dcp_poll poll; /* spins briefly, then sleeps (util.h) */
    dcp_poll_init(&poll);
    for (;;) {
        const CUresult res = query(r, ev);
        if (res != CUDA_ERROR_NOT_READY)
            return dcp_cuda_check(res, ev ? "cuEventQuery" : "cuStreamQuery");
        if (dcp_now_seconds() >= deadline) {
            atomic_store(&cr->stuck, true);
            const int st = dcp_error(DCP_ETIMEOUT, "%s: device work of rank %u did not finish within %.3g s "
                                     "(runtime.cuda.nccl_timeout_s): a kernel or copy may be hung", what, r->tp_rank,
                                     bound);
            /* Nothing can run after it on this rank: every later step and rank function
             * returns DCP_EABORTED at once instead of waiting for the bound again. */
            dcp_engine_fail(r->engine, dcp_last_error());
            return st;
        }
        dcp_poll_pause(&poll);
    }
}

uint32_t cuda_wait_ranks_idle(struct dcp_engine *e, double deadline)
{
    struct dcp_poll poll;
    dcp_poll_init(&poll);
    for (;;) {
        uint32_t busy = 0;
        for (uint32_t i = 0; i < e->ranks_initialised; i++) {
            struct dcp_rank *r = &e->ranks[i];
            if (!CR(r) || use_rank(r))
                continue;
            /* An error other than NOT_READY: nothing more runs there (a failed context). */
            busy += query(r, NULL) == CUDA_ERROR_NOT_READY;
        }
        const bool late = busy && dcp_now_seconds() >= deadline;
        if (!busy || late) {
            for (uint32_t i = 0; i < e->ranks_initialised; i++) {
                struct dcp_rank *r = &e->ranks[i];
                if (CR(r) && !use_rank(r))
                    atomic_store(&CR(r)->stuck, query(r, NULL) == CUDA_ERROR_NOT_READY);
            }
            return busy;
        }
        dcp_poll_pause(&poll);
    }
}

/* With NCCL the event is polled together with the communicator's error state,
 * so a failed or hung peer ends in ncclCommAbort and an error, never a hang; an
 * abort of the step (another rank failed) ends the wait too. Without NCCL the
 * event is polled with the same bound. */
int cuda_wait_event(struct dcp_rank *r, CUevent ev, const char *what)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_rank *cr = CR(r);
    if (!ce->nccl)
        return cuda_wait_device(r, ev, what);
    int err = use_rank(r);
    if (err)
        return err;
    pthread_mutex_lock(&cr->comm_mu);
    err = cr->nccl_comm ? dcp_nccl_wait_cancellable(ce->nccl, &cr->nccl_comm, ce->cu, ev, cuda_wait_bound(r->engine),
                                                    what, &r->engine->aborted)
                        : dcp_error(DCP_EABORTED, "%s: the step was aborted; NCCL communicator aborted", what);
    pthread_mutex_unlock(&cr->comm_mu);
    return err;
}

int cuda_synchronize(struct dcp_rank *r)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_rank *cr = CR(r);
    int err = use_rank(r);
    if (!err)
        err = CU_CALL(&ce->cu->api, cuEventRecord, cr->events[EV_SYNC], cr->compute);
    if (!err)
        err = cuda_wait_event(r, cr->events[EV_SYNC], "rank synchronize");
    if (!err) { /* every copy out of the staging halves ran too */
        cr->queued = false;
        cr->stage_pending[0] = cr->stage_pending[1] = false;
    }
    return err;
}

/* ---- profiling --------------------------------------------------------------------------- */

int cuda_timer_collect(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    if (cr->timers_used == 0)
        return DCP_OK;
    int err = cuda_wait_device(r, cr->timer_end[cr->timers_used - 1], "profile timers");
    for (uint32_t i = 0; i < cr->timers_used && !err; i++) {
        float ms = 0;
        err = CU_CALL(api, cuEventElapsedTime, &ms, cr->timer_start[i], cr->timer_end[i]);
        r->prof_seconds[cr->timer_cat[i]] += ms * 1e-3;
    }
    cr->timers_used = 0;
    return err;
}

/* Timing events go on the compute stream: collectives end there too (it waits for
 * the communication stream), so each pair spans the operation's device time. */
int cuda_timer_begin(struct dcp_rank *r, uint32_t *token)
{
    struct cuda_rank *cr = CR(r);
    int err = cr->timers_used == CUDA_TIMER_PAIRS ? cuda_timer_collect(r) : use_rank(r);
    if (err)
        return err;
    *token = cr->timers_used;
    return CU_CALL(&CE(r->engine)->cu->api, cuEventRecord, cr->timer_start[*token], cr->compute);
}

int cuda_timer_end(struct dcp_rank *r, uint32_t token, enum dcp_prof_cat cat)
{
    struct cuda_rank *cr = CR(r);
    cr->timer_cat[token] = (uint8_t)cat;
    cr->timers_used = token + 1;
    return CU_CALL(&CE(r->engine)->cu->api, cuEventRecord, cr->timer_end[token], cr->compute);
}
