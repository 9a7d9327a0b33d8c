/*
 * cuda_backend.c: the CUDA driver-API backend.
 *
 * Ranks run on GPUs through libcuda loaded with dlopen (loader/cuda_api.h); the
 * kernels come from the embedded fatbin (loader/modules.h). Two ways to connect
 * a DCP group:
 *  - virtual ranks: every rank of the process on one GPU; collectives are device
 *    copies and a reduce kernel, ordered across the ranks' streams with events
 *    (rank threads meet at a host barrier only to exchange addresses);
 *  - NCCL: one GPU per rank, in this process or one process per GPU started by a
 *    launcher (srun, mpirun, torchrun); non-blocking communicators, polled with a
 *    timeout so a failed peer ends in ncclCommAbort and a clear error, not a hang.
 * Each rank has a compute stream and a communication stream with events between
 * them. All memory is allocated at engine creation; the decode path allocates none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/group.h"
#include "comm/launch_env.h"
#include "comm/rendezvous.h"
#include "dcp_kernels/variants.h"
#include "embedded.h"
#include "util/util.h"

/* Calls a driver entry point and turns its result into a status naming it. */
#define CU_CALL(api, fn, ...) dcp_cuda_check((api)->fn(__VA_ARGS__), #fn)

/* ---- helpers ---------------------------------------------------------------- */

static struct cuda_engine *CE(const struct dcp_engine *e) { return e->backend; }
static struct cuda_rank *CR(const struct dcp_rank *r) { return r->backend; }

static int set_device(const struct cuda_engine *ce, const struct cuda_device *d)
{
    return CU_CALL(&ce->cu->api, cuCtxSetCurrent, d->ctx);
}

/* Makes this rank's device current on the calling thread. */
static int use_rank(const struct dcp_rank *r)
{
    return set_device(CE(r->engine), CR(r)->dev);
}

/* ---- engine ------------------------------------------------------------------- */

static enum cuda_comm_mode choose_comm(const struct dcp_engine *e, const struct cuda_engine *ce,
                                       bool multi_process)
{
    const enum dcp_cuda_comm want = e->cfg->runtime.cuda.comm;
    if (want == DCP_CUDA_COMM_VIRTUAL)
        return CUDA_COMM_VIRTUAL;
    if (want == DCP_CUDA_COMM_NCCL || multi_process)
        return CUDA_COMM_NCCL;
    /* auto: a GPU per rank (NCCL between them) when there are enough, else all on one. */
    const int first = e->cfg->runtime.cuda.device;
    if (ce->cu->device_count - first >= (int)e->num_ranks)
        return CUDA_COMM_NCCL;
    return CUDA_COMM_VIRTUAL;
}

static int open_device(struct cuda_engine *ce, struct cuda_device *d, int ordinal,
                       const struct dcp_engine *e)
{
    const struct dcp_cuda_api *api = &ce->cu->api;
    d->ordinal = ordinal;
    if (ordinal >= ce->cu->device_count)
        return dcp_error(DCP_ENODEVICE, "CUDA device %d requested but only %d visible", ordinal,
                         ce->cu->device_count);
    int err = CU_CALL(api, cuDeviceGet, &d->dev, ordinal);
    if (!err)
        err = dcp_cuda_device_info(ce->cu, ordinal, &d->info);
    if (!err)
        err = CU_CALL(api, cuDevicePrimaryCtxRetain, &d->ctx, d->dev);
    if (err)
        return err;
    d->ctx_retained = true;
    if ((err = set_device(ce, d)))
        return err;
    int optin = 0;
    if ((err = CU_CALL(api, cuDeviceGetAttribute, &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                               d->dev)))
        return err;
    const struct dcp_embedded_module *m = dcp_embedded_module_find("dcp_kernels");
    if (!m)
        return dcp_error(DCP_EMODULE, "the embedded module dcp_kernels is missing");
    if ((err = dcp_module_load(ce->cu, m, &d->module)))
        return err;
    for (int k = 0; k < DCPK_KERNEL_COUNT; k++) {
        if (k == DCPK_KERNEL_attn)
            continue;
        char name[64];
        snprintf(name, sizeof(name), "dcpk_%s", dcpk_kernels[k].name);
        if ((err = dcp_module_get_function(d->module, name, &d->fn[k])))
            return err;
    }
    if ((err = dcp_module_get_function(d->module, ce->attn->entry, &d->fn[DCPK_KERNEL_attn])))
        return err;
    if (ce->attn->smem_bytes > (uint32_t)optin)
        return dcp_error(DCP_ENOTSUP, "%s needs %u bytes of shared memory per block; %s allows %d",
                         ce->attn->entry, ce->attn->smem_bytes, d->info.name, optin);
    if ((err = CU_CALL(api, cuFuncSetAttribute, d->fn[DCPK_KERNEL_attn],
                                             CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             (int)ce->attn->smem_bytes)))
        return err;
    d->vmm = d->info.vmm_supported && e->cfg->runtime.cuda.use_vmm;
    return DCP_OK;
}

static void close_device(struct cuda_engine *ce, struct cuda_device *d)
{
    if (d->ctx_retained) {
        ce->cu->api.cuCtxSetCurrent(d->ctx);
        dcp_module_unload(&d->module);
        ce->cu->api.cuDevicePrimaryCtxRelease(d->dev);
    }
    memset(d, 0, sizeof(*d));
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

/* Multi-process NCCL: rank and world from the launcher, one unique id per DCP
 * group made by world rank 0 and shared through the rendezvous that DCP_RENDEZVOUS,
 * the job tag and the job secret describe (docs/rendezvous.md). */
static int exchange_unique_ids(struct dcp_engine *e, struct cuda_engine *ce)
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

static int cuda_engine_init(struct dcp_engine *e)
{
    if (dcp_embedded_module_count == 0)
        return dcp_error(DCP_ENOTSUP, "libdcp was built without CUDA kernels (no nvcc at build time)");
    struct cuda_engine *ce = calloc(1, sizeof(*ce));
    if (!ce)
        return dcp_error(DCP_ENOMEM, "cuda backend");
    e->backend = ce;
    int err = dcp_cuda_open(&(struct dcp_cuda_open_params){0}, &ce->cu);
    if (err)
        return err;

    const uint32_t shared_kv = e->mla ? 1 : 0;
    ce->attn = dcpk_attn_variant_find(e->qk_dim, e->v_dim, shared_kv, e->dtype);
    if (!ce->attn)
        return dcp_error(DCP_ENOTSUP, "no GPU attention kernel for qk_dim=%u v_dim=%u (%s) with %s KV; "
                         "GPU kernels cover head_dim 64/128/256 and MLA 576/512",
                         e->qk_dim, e->v_dim, e->mla ? "mla" : "gqa/mha", dcp_dtype_name(e->dtype));

    struct dcp_launch_env env;
    if ((err = dcp_launch_env_detect(&env)))
        return err;
    const bool multi_process = e->num_ranks < e->tp;
    ce->world_rank = env.rank;
    ce->world_size = env.world_size;
    ce->comm = choose_comm(e, ce, multi_process);
    ce->num_groups = e->tp / e->dcp;

    /* Devices: one for virtual ranks, one per local rank for NCCL. */
    const int first = e->cfg->runtime.cuda.device;
    ce->num_devices = ce->comm == CUDA_COMM_VIRTUAL ? 1 : e->num_ranks;
    ce->devices = calloc(ce->num_devices, sizeof(*ce->devices));
    if (!ce->devices)
        return dcp_error(DCP_ENOMEM, "cuda devices");
    for (uint32_t i = 0; i < ce->num_devices; i++) {
        const int ordinal = multi_process ? first + (int)(env.local_rank % (uint32_t)ce->cu->device_count)
                                          : first + (int)i;
        if ((err = open_device(ce, &ce->devices[i], ordinal, e)))
            return err;
    }

    if (ce->comm == CUDA_COMM_NCCL && e->dcp > 1) {
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
    } else if (e->dcp > 1) {
        ce->groups = calloc(ce->num_groups, sizeof(*ce->groups));
        if (!ce->groups)
            return dcp_error(DCP_ENOMEM, "cuda groups");
        for (uint32_t g = 0; g < ce->num_groups; g++)
            if ((err = rank_group_init(&ce->groups[g], e->dcp)))
                return err;
    }

    const struct cuda_device *d0 = &ce->devices[0];
    const uint32_t heads_per_kv = e->gathered_heads / e->kv_heads_per_rank;
    e->shape = (struct dcp_launch_shape){
        .parallelism = (uint32_t)d0->info.sm_count * 2,
        .head_tile = dcpk_attn_pick_head_tile(ce->attn, heads_per_kv, DCP_MAX(1u, e->cfg->workload.q_len)),
        .max_splits = 32,
    };
    snprintf(e->detail, sizeof(e->detail), "%s (sm_%d%d, %d SMs), %s%s, %s; %s", d0->info.name,
             d0->info.cc_major, d0->info.cc_minor, d0->info.sm_count,
             ce->comm == CUDA_COMM_VIRTUAL ? (e->dcp > 1 ? "virtual ranks on one GPU" : "ranks on one GPU")
                                           : (e->dcp > 1 ? "one GPU per rank, NCCL" : "one GPU per rank"),
             multi_process ? " (one process per GPU)" : "", ce->attn->entry, dcp_module_report(d0->module));
    return DCP_OK;
}

static void cuda_engine_fini(struct dcp_engine *e)
{
    struct cuda_engine *ce = CE(e);
    if (!ce)
        return;
    for (uint32_t g = 0; ce->groups && g < ce->num_groups; g++)
        rank_group_fini(&ce->groups[g]);
    free(ce->groups);
    free(ce->ids);
    for (uint32_t i = 0; ce->devices && i < ce->num_devices; i++)
        close_device(ce, &ce->devices[i]);
    free(ce->devices);
    dcp_nccl_close(&ce->nccl);
    dcp_cuda_close(&ce->cu);
    free(ce);
    e->backend = NULL;
}

/* ---- ranks --------------------------------------------------------------------- */

static int cuda_rank_init(struct dcp_rank *r)
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
    if (err)
        return err;
    if (ce->groups) {
        cr->group = &ce->groups[r->group_id];
        /* Source table of the virtual ReduceScatter's reduce kernel. */
        if ((err = CU_CALL(api, cuMemAlloc, &cr->d_src_ptrs, e->dcp * sizeof(uint64_t))) ||
            (err = CU_CALL(api, cuMemAllocHost, (void **)&cr->h_src_ptrs, e->dcp * sizeof(uint64_t))))
            return err;
    }
    if (ce->nccl) {
        ncclConfig_t config;
        dcp_nccl_config_nonblocking(&config);
        err = dcp_nccl_check(ce->nccl,
                             ce->nccl->api.ncclCommInitRankConfig(&cr->nccl_comm, (int)e->dcp, ce->ids[r->group_id],
                                                                  (int)r->group_rank, &config),
                             "ncclCommInitRankConfig", cr->nccl_comm);
    }
    return err;
}

/* NCCL communicators were started without blocking; wait until all are connected. */
static int cuda_engine_start(struct dcp_engine *e)
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

static void free_allocation(struct cuda_engine *ce, struct cuda_alloc *a)
{
    const struct dcp_cuda_api *api = &ce->cu->api;
    if (!a->vmm) {
        api->cuMemFree(a->addr);
        return;
    }
    for (uint32_t c = 0; c < a->chunks; c++) {
        api->cuMemUnmap(a->addr + c * a->chunk_bytes, a->chunk_bytes);
        api->cuMemRelease(a->handles[c]);
    }
    api->cuMemAddressFree(a->addr, a->reserved);
    free(a->handles);
}

static void cuda_rank_fini(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    if (!cr)
        return;
    struct cuda_engine *ce = CE(r->engine);
    const struct dcp_cuda_api *api = &ce->cu->api;
    use_rank(r);
    if (cr->compute)
        api->cuStreamSynchronize(cr->compute);
    if (cr->nccl_comm) {
        /* Finalize flushes pending work; dcp_nccl_wait aborts a communicator that
         * fails or does not finish in time (and then leaves nothing to destroy). */
        ce->nccl->api.ncclCommFinalize(cr->nccl_comm);
        dcp_nccl_wait(ce->nccl, &cr->nccl_comm, ce->cu, NULL, 10.0, "NCCL finalize");
        if (cr->nccl_comm)
            ce->nccl->api.ncclCommDestroy(cr->nccl_comm);
    }
    for (size_t i = 0; i < cr->num_allocs; i++)
        free_allocation(ce, &cr->allocs[i]);
    free(cr->allocs);
    if (cr->d_src_ptrs)
        api->cuMemFree(cr->d_src_ptrs);
    if (cr->h_src_ptrs)
        api->cuMemFreeHost(cr->h_src_ptrs);
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

/* ---- memory ---------------------------------------------------------------------- */

static int track(struct cuda_rank *cr, const struct cuda_alloc *a)
{
    if (dcp_grow_array((void **)&cr->allocs, &cr->cap_allocs, cr->num_allocs + 1, sizeof(*cr->allocs)))
        return dcp_error(DCP_ENOMEM, "allocation table");
    cr->allocs[cr->num_allocs++] = *a;
    return DCP_OK;
}

static int cuda_alloc(struct dcp_rank *r, size_t bytes, uint64_t *addr)
{
    struct cuda_engine *ce = CE(r->engine);
    int err = use_rank(r);
    struct cuda_alloc a = {0};
    if (!err)
        err = CU_CALL(&ce->cu->api, cuMemAlloc, &a.addr, bytes ? bytes : 256);
    if (err)
        return err == DCP_EDEVMEM ? dcp_error(DCP_EDEVMEM, "cuMemAlloc of %zu bytes on %s: out of device memory",
                                              bytes, CR(r)->dev->info.name)
                                  : err;
    if ((err = track(CR(r), &a))) {
        ce->cu->api.cuMemFree(a.addr);
        return err;
    }
    *addr = a.addr;
    return DCP_OK;
}

/* The KV arena with virtual memory management: one reserved range, backed by
 * physical chunks mapped in order, so a shortfall is reported by how much fit. */
static int cuda_alloc_arena(struct dcp_rank *r, size_t bytes, uint64_t *addr)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_device *d = CR(r)->dev;
    if (!d->vmm)
        return cuda_alloc(r, bytes, addr);
    const struct dcp_cuda_api *api = &ce->cu->api;
    int err = use_rank(r);
    const CUmemAllocationProp prop = {
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d->ordinal},
    };
    size_t gran = 0;
    if (!err)
        err = CU_CALL(api, cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (err)
        return err;
    struct cuda_alloc a = {.vmm = true};
    a.chunk_bytes = DCP_MAX(gran, (size_t)1 << 30) / gran * gran;
    const uint64_t want = dcp_div_ceil_u64(bytes ? bytes : 1, gran) * gran;
    a.chunk_bytes = (size_t)DCP_MIN((uint64_t)a.chunk_bytes, want);
    const uint32_t chunks = (uint32_t)dcp_div_ceil_u64(want, a.chunk_bytes);
    a.reserved = (size_t)chunks * a.chunk_bytes;
    a.handles = calloc(chunks, sizeof(*a.handles));
    if (!a.handles)
        return dcp_error(DCP_ENOMEM, "arena handles");
    if ((err = CU_CALL(api, cuMemAddressReserve, &a.addr, a.reserved, 0, 0, 0))) {
        free(a.handles);
        return err;
    }
    const CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (; a.chunks < chunks && !err; a.chunks++) {
        const CUdeviceptr at = a.addr + (uint64_t)a.chunks * a.chunk_bytes;
        err = CU_CALL(api, cuMemCreate, &a.handles[a.chunks], a.chunk_bytes, &prop, 0);
        if (err)
            break;
        if ((err = CU_CALL(api, cuMemMap, at, a.chunk_bytes, 0, a.handles[a.chunks], 0))) {
            api->cuMemRelease(a.handles[a.chunks]);
            break;
        }
        if ((err = CU_CALL(api, cuMemSetAccess, at, a.chunk_bytes, &access, 1))) {
            api->cuMemUnmap(at, a.chunk_bytes);
            api->cuMemRelease(a.handles[a.chunks]);
            break;
        }
    }
    if (err) {
        const size_t mapped = (size_t)a.chunks * a.chunk_bytes;
        free_allocation(ce, &a);
        return err == DCP_EDEVMEM
                   ? dcp_error(DCP_EDEVMEM, "KV arena of %zu bytes on %s: out of device memory after mapping %zu bytes",
                               bytes, d->info.name, mapped)
                   : err;
    }
    if ((err = track(CR(r), &a))) {
        free_allocation(ce, &a);
        return err;
    }
    *addr = a.addr;
    return DCP_OK;
}

static void cuda_free(struct dcp_rank *r, uint64_t addr)
{
    struct cuda_rank *cr = CR(r);
    if (!addr || !cr)
        return;
    for (size_t i = 0; i < cr->num_allocs; i++)
        if (cr->allocs[i].addr == addr) {
            use_rank(r);
            if (cr->compute)
                CE(r->engine)->cu->api.cuStreamSynchronize(cr->compute);
            free_allocation(CE(r->engine), &cr->allocs[i]);
            cr->allocs[i] = cr->allocs[--cr->num_allocs];
            return;
        }
}

static int cuda_synchronize(struct dcp_rank *r);

/* Uploads wait for the rank's queued work first: per-step metadata is rewritten
 * in place, and the previous step's kernels may still be reading it. Only the
 * first upload after queued work waits (begin_step uploads several buffers). */
static int cuda_upload(struct dcp_rank *r, uint64_t dst, const void *src, size_t bytes)
{
    int err = CR(r)->queued ? cuda_synchronize(r) : use_rank(r);
    return err ? err : CU_CALL(&CE(r->engine)->cu->api, cuMemcpyHtoD, dst, src, bytes);
}

static int cuda_download(struct dcp_rank *r, void *dst, uint64_t src, size_t bytes)
{
    int err = cuda_synchronize(r);
    return err ? err : CU_CALL(&CE(r->engine)->cu->api, cuMemcpyDtoH, dst, src, bytes);
}

static int cuda_copy(struct dcp_rank *r, uint64_t dst, uint64_t src, size_t bytes)
{
    int err = use_rank(r);
    CR(r)->queued = true;
    return err ? err : CU_CALL(&CE(r->engine)->cu->api, cuMemcpyDtoDAsync, dst, src, bytes, CR(r)->compute);
}

/* ---- kernels ----------------------------------------------------------------------- */

static int cuda_launch(struct dcp_rank *r, enum dcpk_kernel_id kernel, const void *params)
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
    void *args[1] = {(void *)params};
    cr->queued = true;
    err = CU_CALL(&ce->cu->api, cuLaunchKernel, cr->dev->fn[kernel], g.x, g.y, g.z, threads, 1, 1, smem, cr->compute,
                                           args, NULL);
    if (err)
        return dcp_error(err, "launching dcpk_%s: %s", dcpk_kernels[kernel].name, dcp_last_error());
    return DCP_OK;
}

/* ---- collectives: virtual ranks ------------------------------------------------------ */

/* The cuda_rank of member s of r's DCP group (all members are local for virtual ranks). */
static const struct cuda_rank *group_member(const struct dcp_rank *r, uint32_t s)
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
        err = CU_CALL(api, cuStreamWaitEvent, cr->compute, group_member(r, s)->events[EV_READY], 0);
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
        err = CU_CALL(api, cuStreamWaitEvent, cr->compute, group_member(r, s)->events[EV_DONE], 0);
    }
    return err;
}

static int virtual_all_gather(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int err = virtual_begin(r, send);
    for (uint32_t s = 0; s < cr->group->size && !err; s++)
        err = CU_CALL(api, cuMemcpyDtoDAsync, recv + s * bytes, cr->group->published[s], bytes, cr->compute);
    return err ? err : virtual_end(r);
}

static int virtual_all_to_all(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int err = virtual_begin(r, send);
    for (uint32_t s = 0; s < cr->group->size && !err; s++)
        err = CU_CALL(api, cuMemcpyDtoDAsync, recv + s * bytes, cr->group->published[s] + r->group_rank * bytes,
                                           bytes, cr->compute);
    return err ? err : virtual_end(r);
}

static int virtual_reduce_scatter(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t floats)
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
        if ((err = CU_CALL(api, cuStreamSynchronize, cr->compute)))
            return err;
        memcpy(cr->h_src_ptrs, cr->group->published, n * sizeof(uint64_t));
        if ((err = CU_CALL(api, cuMemcpyHtoD, cr->d_src_ptrs, cr->h_src_ptrs, n * sizeof(uint64_t))))
            return err;
        cr->src_ptrs_valid = true;
    }
    const struct dcpk_reduce_params p = {
        .dst = recv,
        .src_ptrs = cr->d_src_ptrs,
        .src_offset = (uint64_t)r->group_rank * floats,
        .count = floats,
        .n_src = n,
    };
    if ((err = cuda_launch(r, DCPK_KERNEL_reduce, &p)))
        return err;
    return virtual_end(r);
}

/* ---- collectives: NCCL ------------------------------------------------------------------ */

/* NCCL runs on the communication stream after the compute stream's producers;
 * the compute stream waits for it before consuming the result. */
static int nccl_begin(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    if (!cr->nccl_comm)
        return dcp_error(DCP_EABORTED, "the NCCL communicator was aborted");
    int err = use_rank(r);
    cr->queued = true;
    if (!err)
        err = CU_CALL(api, cuEventRecord, cr->events[EV_READY], cr->compute);
    return err ? err : CU_CALL(api, cuStreamWaitEvent, cr->comm_stream, cr->events[EV_READY], 0);
}

/* ncclInProgress: a non-blocking communicator is still enqueueing the operation. */
#define NCCL_IN_PROGRESS 7

static int nccl_end(struct dcp_rank *r, int result, const char *call)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_rank *cr = CR(r);
    int err = dcp_nccl_check(ce->nccl, result, call, cr->nccl_comm);
    /* NCCL requires the enqueue to finish before the next call on the communicator. */
    if (!err && result == NCCL_IN_PROGRESS)
        err = dcp_nccl_wait(ce->nccl, &cr->nccl_comm, ce->cu, NULL, r->engine->cfg->runtime.cuda.nccl_timeout_s,
                            call);
    if (!err)
        err = CU_CALL(&ce->cu->api, cuEventRecord, cr->events[EV_DONE], cr->comm_stream);
    return err ? err : CU_CALL(&ce->cu->api, cuStreamWaitEvent, cr->compute, cr->events[EV_DONE], 0);
}

static int nccl_all_gather(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_nccl_api *nc = &CE(r->engine)->nccl->api;
    int err = nccl_begin(r);
    return err ? err
               : nccl_end(r, nc->ncclAllGather((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, bytes,
                                               ncclUint8, cr->nccl_comm, cr->comm_stream),
                          "ncclAllGather");
}

static int nccl_reduce_scatter(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t floats)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_nccl_api *nc = &CE(r->engine)->nccl->api;
    int err = nccl_begin(r);
    return err ? err
               : nccl_end(r, nc->ncclReduceScatter((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, floats,
                                                   ncclFloat32, ncclSum, cr->nccl_comm, cr->comm_stream),
                          "ncclReduceScatter");
}

/* All-to-all as one group of sends and receives (what NCCL itself recommends). */
static int nccl_all_to_all(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_nccl_api *nc = &CE(r->engine)->nccl->api;
    int err = nccl_begin(r);
    if (err)
        return err;
    int res = nc->ncclGroupStart();
    for (uint32_t s = 0; s < r->engine->dcp && (res == 0 || res == NCCL_IN_PROGRESS); s++) {
        res = nc->ncclSend((const void *)(uintptr_t)(send + s * bytes), bytes, ncclUint8, (int)s, cr->nccl_comm,
                           cr->comm_stream);
        if (res == 0 || res == NCCL_IN_PROGRESS)
            res = nc->ncclRecv((void *)(uintptr_t)(recv + s * bytes), bytes, ncclUint8, (int)s, cr->nccl_comm,
                               cr->comm_stream);
    }
    const int end = nc->ncclGroupEnd();
    return nccl_end(r, res == 0 || res == NCCL_IN_PROGRESS ? end : res, "ncclSend/ncclRecv all-to-all");
}

static int cuda_all_gather(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    return CR(r)->group ? virtual_all_gather(r, send, recv, bytes) : nccl_all_gather(r, send, recv, bytes);
}

static int cuda_reduce_scatter(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t floats)
{
    return CR(r)->group ? virtual_reduce_scatter(r, send, recv, floats) : nccl_reduce_scatter(r, send, recv, floats);
}

static int cuda_all_to_all(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    return CR(r)->group ? virtual_all_to_all(r, send, recv, bytes) : nccl_all_to_all(r, send, recv, bytes);
}

/* With NCCL, completion is polled together with the communicator's error state,
 * so a failed or hung peer ends in ncclCommAbort and an error, never a hang. */
static int cuda_synchronize(struct dcp_rank *r)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_rank *cr = CR(r);
    int err = use_rank(r);
    if (err)
        return err;
    if (!cr->nccl_comm && ce->nccl)
        return dcp_error(DCP_EABORTED, "the NCCL communicator was aborted");
    if (!cr->nccl_comm)
        err = CU_CALL(&ce->cu->api, cuStreamSynchronize, cr->compute);
    else if (!(err = CU_CALL(&ce->cu->api, cuEventRecord, cr->events[EV_SYNC], cr->compute)))
        err = dcp_nccl_wait(ce->nccl, &cr->nccl_comm, ce->cu, cr->events[EV_SYNC],
                            r->engine->cfg->runtime.cuda.nccl_timeout_s, "rank synchronize");
    if (!err)
        cr->queued = false;
    return err;
}

/* ---- profiling --------------------------------------------------------------------------- */

static int cuda_timer_collect(struct dcp_rank *r)
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
static int cuda_timer_begin(struct dcp_rank *r, uint32_t *token)
{
    struct cuda_rank *cr = CR(r);
    int err = cr->timers_used == CUDA_TIMER_PAIRS ? cuda_timer_collect(r) : use_rank(r);
    if (err)
        return err;
    *token = cr->timers_used;
    return CU_CALL(&CE(r->engine)->cu->api, cuEventRecord, cr->timer_start[*token], cr->compute);
}

static int cuda_timer_end(struct dcp_rank *r, uint32_t token, enum dcp_prof_cat cat)
{
    struct cuda_rank *cr = CR(r);
    cr->timer_cat[token] = (uint8_t)cat;
    cr->timers_used = token + 1;
    return CU_CALL(&CE(r->engine)->cu->api, cuEventRecord, cr->timer_end[token], cr->compute);
}

static void cuda_abort(struct dcp_engine *e)
{
    struct cuda_engine *ce = CE(e);
    for (uint32_t g = 0; ce && ce->groups && g < ce->num_groups; g++)
        rank_group_abort(&ce->groups[g]);
}

const struct dcp_backend_ops dcp_cuda_backend = {
    .name = "cuda",
    .engine_init = cuda_engine_init,
    .engine_fini = cuda_engine_fini,
    .rank_init = cuda_rank_init,
    .engine_start = cuda_engine_start,
    .rank_fini = cuda_rank_fini,
    .alloc = cuda_alloc,
    .alloc_arena = cuda_alloc_arena,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .launch = cuda_launch,
    .all_gather = cuda_all_gather,
    .reduce_scatter = cuda_reduce_scatter,
    .all_to_all = cuda_all_to_all,
    .synchronize = cuda_synchronize,
    .abort = cuda_abort,
    .timer_begin = cuda_timer_begin,
    .timer_end = cuda_timer_end,
    .timer_collect = cuda_timer_collect,
};
