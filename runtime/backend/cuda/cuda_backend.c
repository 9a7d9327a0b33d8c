/*
 * cuda_backend.c: the CUDA driver-API backend: engine set-up, devices, and the
 * operations table.
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
 *
 * The backend is split by concern, sharing cuda_internal.h:
 *   cuda_backend.c  engine and devices, the operations table
 *   cuda_rank.c     rank streams and events, kernel launch, synchronize, profiling
 *   cuda_comm.c     collectives: virtual groups and NCCL communicators
 *   cuda_memory.c   device allocations, the VMM KV arena, copies
 *   cuda_graph.c    caller streams, double-buffered step uploads, stream capture
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/select.h"
#include "comm/launch_env.h"
#include "dcp_kernels/variants.h"
#include "embedded.h"
#include "util/util.h"

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
        if (k == DCPK_KERNEL_attn || k == DCPK_KERNEL_sparse_attn)
            continue;
        char name[64];
        snprintf(name, sizeof(name), "dcpk_%s", dcpk_kernels[k].name);
        if ((err = dcp_module_get_function(d->module, name, &d->fn[k])))
            return err;
    }
    /* The entries of the engine's shape and dtype, with the shared memory they ask for. */
    const struct dcpk_attn_variant *const entries[2] = {ce->attn, ce->sparse};
    const int families[2] = {DCPK_KERNEL_attn, DCPK_KERNEL_sparse_attn};
    for (int i = 0; i < 2; i++) {
        const struct dcpk_attn_variant *v = entries[i];
        if ((err = dcp_module_get_function(d->module, v->entry, &d->fn[families[i]])))
            return err;
        if (v->smem_bytes > (uint32_t)optin)
            return dcp_error(DCP_ENOTSUP, "%s needs %u bytes of shared memory per block; %s allows %d", v->entry,
                             v->smem_bytes, d->info.name, optin);
        if ((err = CU_CALL(api, cuFuncSetAttribute, d->fn[families[i]], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                           (int)v->smem_bytes)))
            return err;
    }
    d->vmm = d->info.vmm_supported && e->cfg->runtime.cuda.use_vmm;
    return DCP_OK;
}

/* A device where a rank was stuck keeps its module and context: unloading or
 * destroying them under a running kernel would wait for it. Only the host-side
 * bookkeeping of its module is freed. */
static void close_device(struct cuda_engine *ce, struct cuda_device *d)
{
    if (d->ctx_retained && !d->busy) {
        ce->cu->api.cuCtxSetCurrent(d->ctx);
        dcp_module_unload(&d->module);
        ce->cu->api.cuDevicePrimaryCtxRelease(d->dev);
    }
    dcp_module_abandon(&d->module);
    memset(d, 0, sizeof(*d));
}

/* "CUDA driver 12.4 (/usr/lib/.../libcuda.so.1); NCCL 2.21.5 (/.../libnccl.so.2)": the files
 * loaded, as resolved, so a user can tell which driver and NCCL a run used. */
static void describe_libraries(const struct cuda_engine *ce, char *buf, size_t size)
{
    char cuda[240], nccl[240];
    dcp_cuda_describe(ce->cu, cuda, sizeof(cuda));
    if (ce->nccl)
        dcp_nccl_describe(ce->nccl, nccl, sizeof(nccl));
    else
        snprintf(nccl, sizeof(nccl), "NCCL not loaded (no NCCL collective in this layout)");
    snprintf(buf, size, "%s; %s", cuda, nccl);
}

/* What arithmetic the attention entry does, for the detail line: the tensor-core
 * MLA entry rounds its operands as runtime.cuda.precision says, the tensor-core
 * GQA entries always split them (memory-bound: the key does not apply), the
 * others are fp32. */
static const char *attn_arithmetic(const struct dcpk_attn_variant *v, const struct dcp_engine *e)
{
    if (!v->tensor_core)
        return "SIMT fp32";
    if (!v->shared_kv)
        return "tensor cores, hi/lo Q and P (always; runtime.cuda.precision not used)";
    return e->cfg->runtime.cuda.precision == DCP_CUDA_PRECISION_EXACT ? "tensor cores, precision exact: hi/lo Q and P"
                                                                        : "tensor cores, precision fast: bf16/fp16 Q and P";
}

static int cuda_engine_init(const struct dcp_engine *e, void **state, struct dcp_backend_caps *caps)
{
    if (dcp_embedded_module_count == 0)
        return dcp_error(DCP_ENOTSUP, "libdcp was built without CUDA kernels (no nvcc at build time)");
    struct cuda_engine *ce = calloc(1, sizeof(*ce));
    if (!ce)
        return dcp_error(DCP_ENOMEM, "cuda backend");
    *state = ce;
    int err = dcp_cuda_open(&(struct dcp_cuda_open_params){0}, &ce->cu);
    if (err)
        return err;

    const uint32_t shared_kv = e->mla ? 1 : 0;
    ce->attn = dcpk_attn_variant_find(e->geo.qk_dim, e->geo.v_dim, shared_kv, e->dtype);
    if (!ce->attn)
        return dcp_error(DCP_ENOTSUP, "no GPU attention kernel for qk_dim=%u v_dim=%u (%s) with %s KV; "
                         "GPU kernels cover head_dim 64/128/256 and MLA 576/512",
                         e->geo.qk_dim, e->geo.v_dim, e->mla ? "mla" : "gqa/mha", dcp_dtype_name(e->dtype));
    /* Every attention shape and dtype has a sparse entry too (variants.h: one per SIMT entry). */
    ce->sparse = dcpk_sparse_variant_find(e->geo.qk_dim, e->geo.v_dim, shared_kv, e->dtype);
    if (!ce->sparse)
        return dcp_error(DCP_ENOTSUP, "no GPU sparse attention kernel for qk_dim=%u v_dim=%u with %s KV",
                         e->geo.qk_dim, e->geo.v_dim, dcp_dtype_name(e->dtype));

    struct dcp_launch_env env;
    if ((err = dcp_launch_env_detect(&env)))
        return err;
    const bool multi_process = e->num_ranks < e->geo.tp;
    ce->world_rank = env.rank;
    ce->world_size = env.world_size;
    ce->comm = choose_comm(e, ce, multi_process);
    ce->num_groups = e->geo.tp / e->geo.dcp;

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

    if ((err = cuda_comm_engine_init(e, ce, multi_process)))
        return err;

    const struct cuda_device *d0 = &ce->devices[0];
    const uint32_t heads_per_kv = e->geo.q_per_kv_head;
    /* One wave of attention blocks: the SMs times the blocks of the attention
     * kernel one SM holds at once (its registers, threads and shared memory). A
     * step may split up to one wave's worth; the workspace is sized for that. */
    int per_sm = 0;
    if ((err = CU_CALL(&ce->cu->api, cuOccupancyMaxActiveBlocksPerMultiprocessor, &per_sm, d0->fn[DCPK_KERNEL_attn],
                       (int)ce->attn->threads, (size_t)ce->attn->smem_bytes)))
        return err;
    if (per_sm <= 0)
        return dcp_error(DCP_ENOTSUP, "%s cannot run on %s: no block fits on an SM (%u threads, %u bytes of "
                         "shared memory)", ce->attn->entry, d0->info.name, ce->attn->threads, ce->attn->smem_bytes);
    const uint32_t slots = (uint32_t)d0->info.sm_count * (uint32_t)per_sm;
    caps->parallelism = slots;
    caps->blocks_per_sm = (uint32_t)per_sm;
    caps->head_tile = dcpk_attn_pick_head_tile(ce->attn, heads_per_kv, DCP_MAX(1u, e->cfg->workload.q_len));
    caps->max_splits = slots;
    caps->host_memory = false;
    caps->layer_types = (1u << DCP_LAYER_FULL) | (1u << DCP_LAYER_NONE) | (1u << DCP_LAYER_SPARSE_TOPK) |
                        (1u << DCP_LAYER_SLIDING_WINDOW);
    caps->sinks = true;
    snprintf(caps->detail, sizeof(caps->detail), "%s (sm_%d%d, %d SMs), %s%s, %s (%s); %s", d0->info.name,
             d0->info.cc_major, d0->info.cc_minor, d0->info.sm_count,
             ce->comm == CUDA_COMM_VIRTUAL ? (e->geo.dcp > 1 ? "virtual ranks on one GPU" : "ranks on one GPU")
                                           : (e->geo.dcp > 1 ? "one GPU per rank, NCCL" : "one GPU per rank"),
             multi_process ? " (one process per GPU)" : "", ce->attn->entry, attn_arithmetic(ce->attn, e),
             dcp_module_report(d0->module));
    describe_libraries(ce, caps->libraries, sizeof(caps->libraries));
    return DCP_OK;
}

static void cuda_engine_fini(void *state)
{
    struct cuda_engine *ce = state;
    if (!ce)
        return;
    for (uint32_t i = 0; ce->devices && i < ce->num_devices; i++)
        close_device(ce, &ce->devices[i]);
    free(ce->devices);
    cuda_comm_engine_fini(ce);
    dcp_cuda_close(&ce->cu);
    free(ce);
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
    .wire_bytes = cuda_wire_bytes,
    .synchronize = cuda_synchronize,
    .abort = cuda_abort,
    .recover = cuda_recover,
    .engine_stop = cuda_engine_stop,
    .timer_begin = cuda_timer_begin,
    .timer_end = cuda_timer_end,
    .timer_collect = cuda_timer_collect,
    .set_stream = cuda_set_stream,
    .step_uploads = cuda_step_uploads,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .get_stream = cuda_get_stream,
};
