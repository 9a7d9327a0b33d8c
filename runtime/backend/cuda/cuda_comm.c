/*
 * cuda_comm.c: collectives of the CUDA backend. Virtual ranks (all on one GPU)
 * copy between the members' buffers, ordered with events; NCCL ranks use
 * non-blocking communicators polled with a timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/group.h"
#include "comm/rendezvous.h"
#include "util/util.h"

/* Multi-process NCCL: rank and world from the launcher, one unique id per DCP
 * group made by world rank 0 and shared through the rendezvous that DCP_RENDEZVOUS,
 * the job tag and the job secret describe (docs/rendezvous.md). */
static int exchange_unique_ids(const struct dcp_engine *e, struct cuda_engine *ce)
{
    struct dcp_rendezvous_env env;
    int err = dcp_rendezvous_env_read(&env);
    for (uint32_t g = 0; g < ce->num_groups && !err && ce->world_rank == 0; g++)
        err = dcp_nccl_check(ce->nccl, ce->nccl->api.ncclGetUniqueId(&ce->ids[g]), "ncclGetUniqueId", NULL);
    const struct dcp_rendezvous_params rp = {
        .spec = env.spec,
        .rank = ce->world_rank,
        .world_size = ce->world_size,
        .tag = env.tag,
        .secret = env.secret,
        .secret_len = env.secret_len,
        .timeout_s = e->cfg->runtime.cuda.nccl_timeout_s,
    };
    if (!err)
        err = dcp_rendezvous_broadcast(&rp, ce->ids, ce->num_groups * sizeof(*ce->ids));
    dcp_rendezvous_env_clear(&env);
    return err;
}

/* Engine-wide: NCCL unique ids (one per DCP group) or the virtual groups' host rendezvous. */
int cuda_comm_engine_init(const struct dcp_engine *e, struct cuda_engine *ce, bool multi_process)
{
    int err = DCP_OK;
    if (ce->comm == CUDA_COMM_NCCL && e->geo.dcp > 1) {
        if ((err = dcp_nccl_open(&(struct dcp_nccl_open_params){0}, &ce->nccl)))
            return err;
        ce->ids = calloc(ce->num_groups, sizeof(*ce->ids));
        if (!ce->ids)
            return dcp_error(DCP_ENOMEM, "nccl ids");
        if (multi_process)
            err = exchange_unique_ids(e, ce);
        else
            for (uint32_t g = 0; g < ce->num_groups && !err; g++)
                err = dcp_nccl_check(ce->nccl, ce->nccl->api.ncclGetUniqueId(&ce->ids[g]), "ncclGetUniqueId",
                                     NULL);
        if (err)
            return err;
    } else if (e->geo.dcp > 1) {
        ce->groups = calloc(ce->num_groups, sizeof(*ce->groups));
        if (!ce->groups)
            return dcp_error(DCP_ENOMEM, "cuda groups");
        for (uint32_t g = 0; g < ce->num_groups; g++) {
            if ((err = rank_group_init(&ce->groups[g], e->geo.dcp)))
                return err;
            /* A rank that failed without aborting costs its peers one comm timeout, as with NCCL. */
            rank_group_set_timeout(&ce->groups[g], e->cfg->runtime.cuda.nccl_timeout_s);
        }
    }
    return DCP_OK;
}

void cuda_comm_engine_fini(struct cuda_engine *ce)
{
    for (uint32_t g = 0; ce->groups && g < ce->num_groups; g++)
        rank_group_fini(&ce->groups[g]);
    free(ce->groups);
    free(ce->ids);
    dcp_nccl_close(&ce->nccl);
}

/* Per rank: the virtual group and its reduce source table, or the NCCL communicator
 * (started without blocking; cuda_engine_start waits for it). */
int cuda_comm_rank_init(struct dcp_rank *r)
{
    struct dcp_engine *e = r->engine;
    struct cuda_engine *ce = CE(e);
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &ce->cu->api;
    int err = DCP_OK;
    if (ce->groups) {
        cr->group = &ce->groups[r->group_id];
        /* Source table of the virtual ReduceScatter's reduce kernel. */
        if ((err = CU_CALL(api, cuMemAlloc, &cr->d_src_ptrs, e->geo.dcp * sizeof(uint64_t))) ||
            (err = CU_CALL(api, cuMemAllocHost, (void **)&cr->h_src_ptrs, e->geo.dcp * sizeof(uint64_t))))
            return err;
    }
    if (ce->nccl) {
        ncclConfig_t config;
        dcp_nccl_config_nonblocking(&config);
        err = dcp_nccl_check(ce->nccl,
                             ce->nccl->api.ncclCommInitRankConfig(&cr->nccl_comm, (int)e->geo.dcp, ce->ids[r->group_id],
                                                                  (int)r->group_rank, &config),
                             "ncclCommInitRankConfig", cr->nccl_comm);
    }
    return err;
}

/* Per rank, after cuda_engine_stop; the rank's device is current. A healthy
 * communicator is finalized (bounded); one of a stuck rank is aborted, and the
 * reduce source table, which its unfinished work may read, is leaked. */
void cuda_comm_rank_fini(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    struct cuda_engine *ce = CE(r->engine);
    const struct dcp_cuda_api *api = &ce->cu->api;
    const bool leak = atomic_load(&cr->stuck);
    if (cr->nccl_comm && leak) {
        ce->nccl->api.ncclCommAbort(cr->nccl_comm);
        cr->nccl_comm = NULL;
    }
    if (cr->nccl_comm) {
        /* Finalize flushes pending work; dcp_nccl_wait aborts a communicator that
         * fails or does not finish in time (and then leaves nothing to destroy). */
        ce->nccl->api.ncclCommFinalize(cr->nccl_comm);
        dcp_nccl_wait(ce->nccl, &cr->nccl_comm, ce->cu, NULL, DCP_MIN(10.0, cuda_wait_bound(r->engine)),
                      "NCCL finalize");
        if (cr->nccl_comm)
            ce->nccl->api.ncclCommDestroy(cr->nccl_comm);
        cr->nccl_comm = NULL;
    }
    if (leak)
        return;
    if (cr->d_src_ptrs)
        api->cuMemFree(cr->d_src_ptrs);
    if (cr->h_src_ptrs)
        api->cuMemFreeHost(cr->h_src_ptrs);
}

void cuda_comm_abort_all(struct dcp_engine *e, bool wait)
{
    struct cuda_engine *ce = CE(e);
    if (!ce || !ce->nccl || !e->ranks)
        return;
    for (uint32_t i = 0; i < e->ranks_initialised; i++) {
        struct cuda_rank *cr = CR(&e->ranks[i]);
        if (!cr || !cr->comm_mu_init)
            continue;
        /* A rank thread inside an NCCL call holds the lock: it sees the step's abort
         * flag in its wait and aborts its communicator itself. */
        if (wait ? pthread_mutex_lock(&cr->comm_mu) : pthread_mutex_trylock(&cr->comm_mu))
            continue;
        if (cr->nccl_comm) {
            ce->nccl->api.ncclCommAbort(cr->nccl_comm);
            cr->nccl_comm = NULL;
        }
        pthread_mutex_unlock(&cr->comm_mu);
    }
}

/* Teardown, before any buffer is freed and while no rank function runs. After an
 * aborted or failed step the communicators are aborted first (a peer's collective
 * may never complete otherwise); then every rank's streams are polled with one
 * common bound. If some are still busy on a healthy-looking engine, the
 * communicators are aborted and the device gets a short grace. Ranks busy after
 * that are stuck: their memory is leaked by the rest of the teardown instead of
 * freed under running work (or waited for without end). */
void cuda_engine_stop(struct dcp_engine *e)
{
    struct cuda_engine *ce = CE(e);
    if (!ce || !e->ranks || !ce->cu)
        return;
    const bool failed = atomic_load(&e->aborted) || atomic_load(&e->failed);
    const double bound = cuda_wait_bound(e);
    if (failed)
        cuda_comm_abort_all(e, true);
    uint32_t busy = cuda_wait_ranks_idle(e, dcp_now_seconds() + bound);
    if (busy && !failed && ce->nccl) {
        cuda_comm_abort_all(e, true);
        busy = cuda_wait_ranks_idle(e, dcp_now_seconds() + DCP_MIN(bound, 1.0));
    }
    if (busy)
        dcp_error(DCP_ETIMEOUT, "engine_destroy: %u rank(s) still had device work %.3g s after the end (a hung kernel "
                  "or collective); their device memory, pinned buffers, kernels and context were leaked, not freed",
                  busy, bound);
}

/* An aborted step left the collectives aborted. Virtual ranks restart once every
 * rank's device work has finished (it may still read buffers the next step
 * rewrites); NCCL communicators were aborted with the step and are not rebuilt. */
int cuda_recover(struct dcp_engine *e)
{
    struct cuda_engine *ce = CE(e);
    if (ce->nccl)
        return dcp_error(DCP_EABORTED, "NCCL communicators are aborted with the step and cannot be restarted");
    bool stuck = false;
    for (uint32_t i = 0; i < e->num_ranks; i++)
        stuck |= atomic_load(&CR(&e->ranks[i])->stuck);
    /* A rank that already ran out of time gets one more look, not another bound. */
    const double deadline = dcp_now_seconds() + (stuck ? 0 : cuda_wait_bound(e));
    const uint32_t busy = cuda_wait_ranks_idle(e, deadline);
    if (busy)
        return dcp_error(DCP_EABORTED, "%u rank(s) still have device work after the aborted step (a hung kernel or "
                         "copy)", busy);
    for (uint32_t g = 0; ce->groups && g < ce->num_groups; g++)
        rank_group_reset(&ce->groups[g]);
    for (uint32_t i = 0; i < e->num_ranks; i++)
        CR(&e->ranks[i])->src_ptrs_valid = false;
    return DCP_OK;
}

/* NCCL communicators were started without blocking; wait until all are connected. */
int cuda_engine_start(struct dcp_engine *e)
{
    struct cuda_engine *ce = CE(e);
    if (!ce->nccl)
        return DCP_OK;
    for (uint32_t i = 0; i < e->num_ranks; i++) {
        struct cuda_rank *cr = CR(&e->ranks[i]);
        int err = dcp_nccl_wait(ce->nccl, &cr->nccl_comm, ce->cu, NULL, e->cfg->runtime.cuda.nccl_timeout_s,
                                "NCCL communicator initialisation");
        if (err)
            return err;
    }
    return DCP_OK;
}

/* ---- collectives: virtual ranks ------------------------------------------------------ */

/* The cuda_rank of member s of r's DCP group (all members are local for virtual ranks). */
const struct cuda_rank *cuda_group_member(const struct dcp_rank *r, uint32_t s)
{
    const struct dcp_engine *e = r->engine;
    return CR(&e->ranks[r->tp_rank - r->group_rank + s - e->params.rank_begin]);
}

/* Orders the copy phase of a virtual collective: every member's producer work is
 * done before anyone reads its buffer, and nobody reuses its send buffer before
 * everyone has read it. Address exchange goes through the host barrier. */
static int virtual_begin(struct dcp_rank *r, uint64_t send)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int err = use_rank(r);
    cr->queued = true;
    if (!err)
        err = CU_CALL(api, cuEventRecord, cr->events[EV_READY], cr->compute);
    if (!err)
        err = rank_group_publish(cr->group, r->group_rank, send);
    for (uint32_t s = 0; s < cr->group->size && !err; s++) {
        err = CU_CALL(api, cuStreamWaitEvent, cr->compute, cuda_group_member(r, s)->events[EV_READY], 0);
    }
    return err;
}

static int virtual_end(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int err = CU_CALL(api, cuEventRecord, cr->events[EV_DONE], cr->compute);
    if (!err)
        err = rank_group_barrier(cr->group);
    for (uint32_t s = 0; s < cr->group->size && !err; s++) {
        err = CU_CALL(api, cuStreamWaitEvent, cr->compute, cuda_group_member(r, s)->events[EV_DONE], 0);
    }
    return err;
}

static int virtual_all_gather(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int err = virtual_begin(r, send);
    for (uint32_t s = 0; s < cr->group->size && !err; s++) {
        err = CU_CALL(api, cuMemcpyDtoDAsync, recv + s * bytes, cr->group->published[s], bytes, cr->compute);
        rank_group_count_sent(cr->group, r->group_rank, s, err ? 0 : bytes);
    }
    return err ? err : virtual_end(r);
}

static int virtual_all_to_all(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int err = virtual_begin(r, send);
    for (uint32_t s = 0; s < cr->group->size && !err; s++) {
        err = CU_CALL(api, cuMemcpyDtoDAsync, recv + s * bytes, cr->group->published[s] + r->group_rank * bytes,
                                           bytes, cr->compute);
        rank_group_count_sent(cr->group, r->group_rank, s, err ? 0 : bytes);
    }
    return err ? err : virtual_end(r);
}

static int virtual_reduce_scatter(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t count, uint32_t dtype)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int err = virtual_begin(r, send);
    if (err)
        return err;
    /* The members' send buffers are fixed after set-up, so the device table of
     * source addresses is rewritten only when it changes. */
    const uint32_t n = cr->group->size;
    if (!cr->src_ptrs_valid || memcmp(cr->h_src_ptrs, cr->group->published, n * sizeof(uint64_t))) {
        /* The pinned table is read when the copy runs: rewrite it only once the
         * previous copy and the reduces reading the device table are done. A first
         * table (or the first after a recovery, which waited for the device) has no
         * earlier reader, so the decode path (and a capture) never waits here: the
         * members' send buffers are fixed after set-up. */
        if (cr->src_ptrs_valid && (err = cuda_wait_device(r, NULL, "ReduceScatter source table")))
            return err;
        memcpy(cr->h_src_ptrs, cr->group->published, n * sizeof(uint64_t));
        if ((err = CU_CALL(api, cuMemcpyHtoDAsync, cr->d_src_ptrs, cr->h_src_ptrs, n * sizeof(uint64_t),
                           cr->compute)))
            return err;
        cr->src_ptrs_valid = true;
    }
    const struct dcpk_reduce_params p = {
        .dst = recv,
        .src_ptrs = cr->d_src_ptrs,
        .src_offset = (uint64_t)r->group_rank * count,
        .count = count,
        .n_src = n,
        .dtype = dtype,
    };
    if ((err = cuda_launch(r, DCPK_KERNEL_reduce, &p)))
        return err;
    for (uint32_t s = 0; s < n; s++) /* the reduce kernel reads every member's chunk of this rank */
        rank_group_count_sent(cr->group, r->group_rank, s, count * dcpk_dtype_size(dtype));
    return virtual_end(r);
}

/* ---- collectives: NCCL ------------------------------------------------------------------ */

/* NCCL runs on the communication stream after the compute stream's producers;
 * the compute stream waits for it before consuming the result. The rank holds
 * comm_mu from nccl_begin to nccl_end (cuda_abort aborts only free communicators). */
static int nccl_begin(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    pthread_mutex_lock(&cr->comm_mu);
    if (cr->nccl_comm && atomic_load(&r->engine->aborted)) {
        CE(r->engine)->nccl->api.ncclCommAbort(cr->nccl_comm);
        cr->nccl_comm = NULL;
    }
    if (!cr->nccl_comm)
        return dcp_error(DCP_EABORTED, "the step was aborted (another rank failed); NCCL communicator aborted");
    int err = use_rank(r);
    cr->queued = true;
    if (!err)
        err = CU_CALL(api, cuEventRecord, cr->events[EV_READY], cr->compute);
    return err ? err : CU_CALL(api, cuStreamWaitEvent, cr->comm_stream, cr->events[EV_READY], 0);
}

/* ncclInProgress: a non-blocking communicator is still enqueueing the operation. */
#define NCCL_IN_PROGRESS 7

/* A collective that failed because the step was aborted meanwhile (a peer's
 * communicator was aborted) is a consequence, not a cause: this rank aborts its
 * own communicator and reports DCP_EABORTED. */
static int nccl_failed_by_abort(struct dcp_rank *r, int err)
{
    struct cuda_rank *cr = CR(r);
    if (!err || err == DCP_EABORTED || !atomic_load(&r->engine->aborted))
        return err;
    char why[256];
    snprintf(why, sizeof(why), "%s", dcp_last_error());
    if (cr->nccl_comm) {
        CE(r->engine)->nccl->api.ncclCommAbort(cr->nccl_comm);
        cr->nccl_comm = NULL;
    }
    return dcp_error(DCP_EABORTED, "the step was aborted (%s); NCCL communicator aborted", why);
}

/* Ends what nccl_begin started (result: the enqueue call's) and releases comm_mu. */
static int nccl_end(struct dcp_rank *r, int begun, int result, const char *call)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_rank *cr = CR(r);
    int err = begun ? begun : dcp_nccl_check(ce->nccl, result, call, cr->nccl_comm);
    /* NCCL requires the enqueue to finish before the next call on the communicator. */
    if (!err && result == NCCL_IN_PROGRESS)
        err = dcp_nccl_wait_cancellable(ce->nccl, &cr->nccl_comm, ce->cu, NULL, cuda_wait_bound(r->engine), call,
                                        &r->engine->aborted);
    if (!err)
        err = CU_CALL(&ce->cu->api, cuEventRecord, cr->events[EV_DONE], cr->comm_stream);
    if (!err)
        err = CU_CALL(&ce->cu->api, cuStreamWaitEvent, cr->compute, cr->events[EV_DONE], 0);
    err = nccl_failed_by_abort(r, err);
    pthread_mutex_unlock(&cr->comm_mu);
    return err;
}

/* What an NCCL collective of per-peer share bytes sends to the other members. */
static void nccl_count_sent(struct dcp_rank *r, uint64_t share)
{
    CR(r)->nccl_sent += (uint64_t)(r->engine->geo.dcp - 1) * share;
}

uint64_t cuda_wire_bytes(const struct dcp_rank *r)
{
    const struct cuda_rank *cr = CR(r);
    return cr->group ? rank_group_sent(cr->group, r->group_rank) : cr->nccl_sent;
}

static int nccl_all_gather(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    nccl_count_sent(r, bytes);
    const struct dcp_nccl_api *nc = &CE(r->engine)->nccl->api;
    const int err = nccl_begin(r);
    return nccl_end(r, err,
                    err ? 0 : nc->ncclAllGather((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, bytes,
                                                ncclUint8, cr->nccl_comm, cr->comm_stream),
                    "ncclAllGather");
}

/* NCCL's element type of an engine wire dtype (fp32, bf16 or fp16). */
static ncclDataType_t nccl_type(uint32_t dtype)
{
    return dtype == DCPK_BF16 ? ncclBfloat16 : dtype == DCPK_FP16 ? ncclFloat16 : ncclFloat32;
}

static int nccl_reduce_scatter(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t count, uint32_t dtype)
{
    struct cuda_rank *cr = CR(r);
    nccl_count_sent(r, count * dcpk_dtype_size(dtype));
    const struct dcp_nccl_api *nc = &CE(r->engine)->nccl->api;
    const int err = nccl_begin(r);
    return nccl_end(r, err,
                    err ? 0 : nc->ncclReduceScatter((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count,
                                                    nccl_type(dtype), ncclSum, cr->nccl_comm, cr->comm_stream),
                    "ncclReduceScatter");
}

/* All-to-all as one group of sends and receives (what NCCL itself recommends). */
static int nccl_all_to_all(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    nccl_count_sent(r, bytes);
    const struct dcp_nccl_api *nc = &CE(r->engine)->nccl->api;
    const int err = nccl_begin(r);
    if (err)
        return nccl_end(r, err, 0, "ncclSend/ncclRecv all-to-all");
    int res = nc->ncclGroupStart();
    for (uint32_t s = 0; s < r->engine->geo.dcp && (res == 0 || res == NCCL_IN_PROGRESS); s++) {
        res = nc->ncclSend((const void *)(uintptr_t)(send + s * bytes), bytes, ncclUint8, (int)s, cr->nccl_comm,
                           cr->comm_stream);
        if (res == 0 || res == NCCL_IN_PROGRESS)
            res = nc->ncclRecv((void *)(uintptr_t)(recv + s * bytes), bytes, ncclUint8, (int)s, cr->nccl_comm,
                               cr->comm_stream);
    }
    const int end = nc->ncclGroupEnd();
    return nccl_end(r, 0, res == 0 || res == NCCL_IN_PROGRESS ? end : res, "ncclSend/ncclRecv all-to-all");
}

int cuda_all_gather(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    return CR(r)->group ? virtual_all_gather(r, send, recv, bytes) : nccl_all_gather(r, send, recv, bytes);
}

int cuda_reduce_scatter(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t count, uint32_t dtype)
{
    return CR(r)->group ? virtual_reduce_scatter(r, send, recv, count, dtype)
                        : nccl_reduce_scatter(r, send, recv, count, dtype);
}

int cuda_all_to_all(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    return CR(r)->group ? virtual_all_to_all(r, send, recv, bytes) : nccl_all_to_all(r, send, recv, bytes);
}


/* Any thread, any time (the engine set its abort flag first): wakes the virtual
 * groups' barriers and aborts every local NCCL communicator not in use at this
 * moment, so that peers waiting for a failed rank return now instead of after the
 * timeout. A rank inside an NCCL call sees the flag and aborts its own. */
void cuda_abort(struct dcp_engine *e)
{
    struct cuda_engine *ce = CE(e);
    for (uint32_t g = 0; ce && ce->groups && g < ce->num_groups; g++)
        rank_group_abort(&ce->groups[g]);
    cuda_comm_abort_all(e, false);
}
