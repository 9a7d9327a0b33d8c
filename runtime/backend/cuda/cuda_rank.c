/*
 * cuda_rank.c: CUDA ranks: streams and events, kernel launch, synchronize, and
 * profiling timers (see cuda_backend.c for the backend as a whole).
 */
#include <stdlib.h>

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
    int err = use_rank(r);
    const struct dcp_cuda_api *api = &ce->cu->api;
    if (!err)
        err = CU_CALL(api, cuStreamCreate, &cr->compute, CU_STREAM_NON_BLOCKING);
    if (!err)
        err = CU_CALL(api, cuStreamCreate, &cr->comm_stream, CU_STREAM_NON_BLOCKING);
    for (int i = 0; i < CUDA_RANK_EVENTS && !err; i++)
        err = CU_CALL(api, cuEventCreate, &cr->events[i], CU_EVENT_DISABLE_TIMING);
    for (int i = 0; i < CUDA_TIMER_PAIRS && !err && e->params.profile; i++) {
        err = CU_CALL(api, cuEventCreate, &cr->timer_start[i], CU_EVENT_DEFAULT);
        if (!err)
            err = CU_CALL(api, cuEventCreate, &cr->timer_end[i], CU_EVENT_DEFAULT);
    }
    /* Pinned staging for uploads: room for one step's metadata (5 buffers, each
     * rounded up to 16 bytes), so begin_step's copies are truly asynchronous. */
    cr->staging_bytes = dcp_step_upload_bytes(e->max_batch, e->max_blocks_per_seq, e->max_tokens) + 5 * 16;
    if (!err)
        err = CU_CALL(api, cuMemAllocHost, (void **)&cr->staging, cr->staging_bytes);
    return err ? err : cuda_comm_rank_init(r);
}

void cuda_rank_fini(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    if (!cr)
        return;
    struct cuda_engine *ce = CE(r->engine);
    const struct dcp_cuda_api *api = &ce->cu->api;
    use_rank(r);
    if (cr->compute)
        api->cuStreamSynchronize(cr->compute);
    cuda_comm_rank_fini(r);
    cuda_memory_rank_fini(r);
    if (cr->staging)
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
    if (cr->compute)
        api->cuStreamDestroy(cr->compute);
    free(cr);
    r->backend = NULL;
}

/* Kernel block size of a simple (non-attention) family. */
static uint32_t simple_threads(enum dcpk_kernel_id k)
{
#define DCPK_THREADS_(name, threads) \
    if (k == DCPK_KERNEL_##name)     \
        return threads;
    DCPK_SIMPLE_KERNELS(DCPK_THREADS_)
#undef DCPK_THREADS_
    return 128;
}

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
    uint32_t threads = simple_threads(kernel), smem = 0;
    if (kernel == DCPK_KERNEL_attn) {
        threads = ce->attn->threads;
        smem = ce->attn->smem_bytes;
    }
    const char *problem = cuda_launch_problem(ce->attn, kernel, params, threads, smem);
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

/* With NCCL the event is polled together with the communicator's error state,
 * so a failed or hung peer ends in ncclCommAbort and an error, never a hang. */
int cuda_wait_event(struct dcp_rank *r, CUevent ev, const char *what)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_rank *cr = CR(r);
    if (!cr->nccl_comm && ce->nccl)
        return dcp_error(DCP_EABORTED, "the NCCL communicator was aborted");
    if (!cr->nccl_comm)
        return CU_CALL(&ce->cu->api, cuEventSynchronize, ev);
    return dcp_nccl_wait(ce->nccl, &cr->nccl_comm, ce->cu, ev, r->engine->cfg->runtime.cuda.nccl_timeout_s, what);
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
    if (!err)
        cr->queued = false;
    return err;
}

/* ---- profiling --------------------------------------------------------------------------- */

int cuda_timer_collect(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    if (cr->timers_used == 0)
        return DCP_OK;
    int err = use_rank(r);
    if (!err)
        err = CU_CALL(api, cuEventSynchronize, cr->timer_end[cr->timers_used - 1]);
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
