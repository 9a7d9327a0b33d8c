/*
 * host.c: the host backend. Each rank is a CPU thread (plus optional workers);
 * "device" memory is host memory; kernels run their CPU implementations; the DCP
 * group's collectives go through shared memory between the rank threads with an
 * abortable barrier. Results are deterministic (sums in group-rank order).
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/group.h"
#include "dcp_kernels/convert.h"
#include "backend/host/host_pool.h"
#include "backend/select.h"
#include "engine/engine_internal.h"
#include "ptx/cpu/isa.h"
#include "util/util.h"

struct host_engine {
    uint32_t threads_per_rank;
    uint32_t num_groups;
    struct rank_group *groups;
};

struct host_rank {
    struct host_pool pool;
    struct rank_group *group;
    double timer_start;   ///< Profiling: start of the operation in flight.
};

static struct host_engine *H(const struct dcp_engine *e) { return e->backend; }
static struct host_rank *HR(const struct dcp_rank *r) { return r->backend; }

static uint32_t online_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (uint32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

/* ---- groups ------------------------------------------------------------------ */

/* Publishes this member's send address and waits for the others'. */
static int group_publish(struct dcp_rank *r, uint64_t send)
{
    return rank_group_publish(HR(r)->group, r->group_rank, send);
}

static int host_all_gather(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct rank_group *g = HR(r)->group;
    int err = group_publish(r, send);
    if (err)
        return err;
    for (uint32_t s = 0; s < g->size; s++) {
        memcpy((char *)(uintptr_t)recv + s * bytes, (const void *)(uintptr_t)g->published[s], bytes);
        rank_group_count_sent(g, r->group_rank, s, bytes);
    }
    return rank_group_barrier(g); /* nobody reuses its send buffer before all have read it */
}

/* Sums in fp32 in rank order; a 16-bit dtype is rounded once per element, as the
 * reduce kernel does (dcpk_reduce), so host and CUDA virtual ranks agree. */
static int host_reduce_scatter(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t count, uint32_t dtype)
{
    struct rank_group *g = HR(r)->group;
    int err = group_publish(r, send);
    if (err)
        return err;
    const size_t es = dcpk_dtype_size(dtype), bytes = count * es;
    const size_t offset = (size_t)r->group_rank * count;
    for (uint32_t s = 0; s < g->size; s++)
        rank_group_count_sent(g, r->group_rank, s, bytes);
    if (dtype == DCPK_FP32) {
        float *restrict dst = (float *)(uintptr_t)recv;
        memcpy(dst, (const float *)(uintptr_t)g->published[0] + offset, bytes);
        for (uint32_t s = 1; s < g->size; s++) {
            const float *restrict src = (const float *)(uintptr_t)g->published[s] + offset;
            for (size_t i = 0; i < count; i++)
                dst[i] += src[i];
        }
    } else {
        for (size_t i = 0; i < count; i++) {
            float acc = dcpk_load_as_f32((const void *)(uintptr_t)g->published[0], offset + i, dtype);
            for (uint32_t s = 1; s < g->size; s++)
                acc += dcpk_load_as_f32((const void *)(uintptr_t)g->published[s], offset + i, dtype);
            dcpk_store_as((void *)(uintptr_t)recv, i, dtype, acc);
        }
    }
    return rank_group_barrier(g);
}

static int host_all_to_all(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes)
{
    struct rank_group *g = HR(r)->group;
    int err = group_publish(r, send);
    if (err)
        return err;
    for (uint32_t s = 0; s < g->size; s++) {
        memcpy((char *)(uintptr_t)recv + s * bytes,
               (const char *)(uintptr_t)g->published[s] + (size_t)r->group_rank * bytes, bytes);
        rank_group_count_sent(g, r->group_rank, s, bytes);
    }
    return rank_group_barrier(g);
}

/* ---- one-sided peer stores (parallel.comm p2p) ---------------------------------- */

static int host_copy(struct dcp_rank *r, uint64_t dst, uint64_t src, size_t bytes);

/* The ranks share one address space: a peer's memory is reached at its own address. The
 * copy completes before the release store, so a member that loads the epoch with acquire
 * sees the bytes. */
static int host_peer_put(struct dcp_rank *r, uint32_t peer, uint64_t dst, uint64_t src, size_t bytes, uint64_t flag,
                         uint64_t epoch)
{
    int err = host_copy(r, dst, src, bytes);
    if (err)
        return err;
    rank_group_count_sent(HR(r)->group, peer, r->group_rank, bytes);
    atomic_store_explicit((_Atomic uint64_t *)(uintptr_t)flag, epoch, memory_order_release);
    return DCP_OK;
}

/* Polls the epochs (acquire loads) at dcp_poll's pace (a short spin, then sleeps doubling
 * from 20 us to 1 ms); gives up after the group's timeout. */
static int host_peer_wait(struct dcp_rank *r, uint64_t flags, uint32_t n, uint64_t epoch)
{
    struct rank_group *g = HR(r)->group;
    const _Atomic uint64_t *f = (const _Atomic uint64_t *)(uintptr_t)flags;
    const double start = dcp_now_seconds();
    struct dcp_poll poll;
    dcp_poll_init(&poll);
    for (uint32_t m = 0; m < n; m++) {
        while (atomic_load_explicit(&f[m], memory_order_acquire) < epoch) {
            if (__atomic_load_n(&g->aborted, __ATOMIC_ACQUIRE))
                return dcp_error(DCP_EABORTED, "rank %u: the step was aborted while it waited for group rank %u's "
                                 "partial results (p2p)", r->tp_rank, m);
            if (dcp_now_seconds() - start > g->timeout_s) {
                const uint64_t has = atomic_load_explicit(&f[m], memory_order_acquire);
                rank_group_abort(g);
                return dcp_error(DCP_ETIMEOUT, "rank %u: group rank %u did not publish epoch %llu of its p2p stores "
                                 "within %.3g s (it published %llu): that rank failed, or never reached this layer "
                                 "(runtime.cuda.nccl_timeout_s)", r->tp_rank, m, (unsigned long long)epoch,
                                 g->timeout_s, (unsigned long long)has);
            }
            dcp_poll_pause(&poll);
        }
    }
    return DCP_OK;
}

/* Wire bytes of the rank's collectives: what its peers copied from it. */
static uint64_t host_wire_bytes(const struct dcp_rank *r)
{
    return HR(r)->group ? rank_group_sent(HR(r)->group, r->group_rank) : 0;
}

static void host_abort(struct dcp_engine *e)
{
    struct host_engine *h = H(e);
    for (uint32_t i = 0; h && i < h->num_groups; i++)
        rank_group_abort(&h->groups[i]);
}

/* Shared-memory collectives keep no state between steps: resetting the groups
 * is all a restart takes. */
static int host_recover(struct dcp_engine *e)
{
    struct host_engine *h = H(e);
    for (uint32_t i = 0; h && i < h->num_groups; i++)
        rank_group_reset(&h->groups[i]);
    return DCP_OK;
}

/* ---- engine / rank ---------------------------------------------------------- */

static int host_engine_init(const struct dcp_engine *e, void **state, struct dcp_backend_caps *caps)
{
    if (e->params.rank_begin != 0 || e->num_ranks != e->geo.tp)
        return dcp_error(DCP_ENOTSUP, "the host backend runs all %u ranks in one process "
                         "(rank_begin=%u, rank_count=%u)", e->geo.tp, e->params.rank_begin, e->num_ranks);
    struct host_engine *h = calloc(1, sizeof(*h));
    if (!h)
        return dcp_error(DCP_ENOMEM, "host backend");
    *state = h;
    const uint32_t cpus = online_cpus();
    const uint32_t configured = e->cfg->runtime.host.threads;
    h->threads_per_rank = configured ? configured : DCP_MAX(1u, cpus / e->num_ranks);
    h->num_groups = e->geo.tp / e->geo.dcp;
    h->groups = calloc(h->num_groups, sizeof(*h->groups));
    if (!h->groups)
        return dcp_error(DCP_ENOMEM, "host groups");
    for (uint32_t i = 0; i < h->num_groups; i++) {
        int err = rank_group_init(&h->groups[i], e->geo.dcp);
        if (err)
            return err;
        rank_group_set_timeout(&h->groups[i], e->cfg->runtime.cuda.nccl_timeout_s);
    }
    caps->parallelism = 2 * h->threads_per_rank; /* two items per thread balance uneven ones */
    caps->head_tile = 0;
    caps->max_splits = h->threads_per_rank > 1 ? 2 * h->threads_per_rank : 1;
    caps->host_memory = true;
    /* Every kernel family has a CPU implementation: every layer kind runs here. */
    caps->layer_types = (1u << DCP_LAYER_FULL) | (1u << DCP_LAYER_SLIDING_WINDOW) | (1u << DCP_LAYER_SPARSE_TOPK) |
                        (1u << DCP_LAYER_NONE);
    caps->sinks = true;
    caps->peer_writes = true; /* one address space */
    snprintf(caps->detail, sizeof(caps->detail), "%u CPU thread%s per rank, %u CPUs, attention kernel %s",
             h->threads_per_rank, h->threads_per_rank == 1 ? "" : "s", cpus, dcpk_cpu_isa_name(dcpk_cpu_isa_active()));
    return DCP_OK;
}

static void host_engine_fini(void *state)
{
    struct host_engine *h = state;
    if (!h)
        return;
    for (uint32_t i = 0; h->groups && i < h->num_groups; i++)
        rank_group_fini(&h->groups[i]);
    free(h->groups);
    free(h);
}

static int host_rank_init(struct dcp_rank *r)
{
    struct dcp_engine *e = r->engine;
    struct host_rank *hr = calloc(1, sizeof(*hr));
    if (!hr)
        return dcp_error(DCP_ENOMEM, "host rank");
    r->backend = hr;
    hr->group = &H(e)->groups[r->group_id];
    return host_pool_init(&hr->pool, H(e)->threads_per_rank - 1, e->kernel_scratch_bytes);
}

static void host_rank_fini(struct dcp_rank *r)
{
    struct host_rank *hr = HR(r);
    if (!hr)
        return;
    host_pool_fini(&hr->pool);
    free(hr);
    r->backend = NULL;
}

static int host_alloc(struct dcp_rank *r, size_t bytes, uint64_t *addr)
{
    (void)r;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64))
        return dcp_error(DCP_EDEVMEM, "host backend: cannot allocate %zu bytes of this machine's memory (each rank's "
                         "KV arena takes runtime.host.memory_mb x memory.gpu_fraction, or with memory_mb 0 the GPU "
                         "budget of hardware.memory_gb: set runtime.host.memory_mb to what this machine has, or "
                         "give dcp_engine_params.kv_budget_bytes)", bytes);
    memset(p, 0, bytes);
    *addr = (uint64_t)(uintptr_t)p;
    return DCP_OK;
}

static void host_free(struct dcp_rank *r, uint64_t addr)
{
    (void)r;
    free((void *)(uintptr_t)addr);
}

static int host_upload(struct dcp_rank *r, uint64_t dst, const void *src, size_t bytes)
{
    (void)r;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return DCP_OK;
}

static int host_download(struct dcp_rank *r, void *dst, uint64_t src, size_t bytes)
{
    (void)r;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return DCP_OK;
}

/* Copies run on the rank's threads in 1 MiB items, like a kernel, so a copy and
 * an attention launch are measured with the same parallelism. */
#define COPY_ITEM_BYTES (1u << 20)

struct copy_params {
    uint64_t dst, src, bytes;
};

static struct dcpk_grid copy_grid(const void *params)
{
    const struct copy_params *p = params;
    return (struct dcpk_grid){(uint32_t)dcp_div_ceil_u64(p->bytes, COPY_ITEM_BYTES), 1, 1};
}

static size_t copy_scratch(const void *params)
{
    (void)params;
    return 0;
}

static void copy_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    (void)scratch;
    const struct copy_params *p = params;
    const uint64_t lo = begin * COPY_ITEM_BYTES, hi = DCP_MIN(end * COPY_ITEM_BYTES, p->bytes);
    memcpy((char *)(uintptr_t)p->dst + lo, (const char *)(uintptr_t)p->src + lo, hi - lo);
}

static const struct dcpk_kernel_desc copy_desc = {
    .name = "copy", .params_size = sizeof(struct copy_params),
    .cpu = copy_cpu, .grid = copy_grid, .scratch = copy_scratch,
};

static int host_copy(struct dcp_rank *r, uint64_t dst, uint64_t src, size_t bytes)
{
    if ((dst < src + bytes && src < dst + bytes) || bytes < COPY_ITEM_BYTES) {
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
        return DCP_OK;
    }
    const struct copy_params p = {.dst = dst, .src = src, .bytes = bytes};
    return host_pool_run(&HR(r)->pool, &copy_desc, &p);
}

static int host_launch(struct dcp_rank *r, enum dcpk_kernel_id kernel, const void *params)
{
    return host_pool_run(&HR(r)->pool, &dcpk_kernels[kernel], params);
}

static int host_synchronize(struct dcp_rank *r)
{
    (void)r;
    return DCP_OK; /* launches complete before they return */
}

/* Host operations complete before they return, so wall time is their time. */
static int host_timer_begin(struct dcp_rank *r, uint32_t *token)
{
    *token = 0;
    HR(r)->timer_start = dcp_now_seconds();
    return DCP_OK;
}

static int host_timer_end(struct dcp_rank *r, uint32_t token, enum dcp_prof_cat cat)
{
    (void)token;
    r->prof_seconds[cat] += dcp_now_seconds() - HR(r)->timer_start;
    return DCP_OK;
}

static int host_timer_collect(struct dcp_rank *r)
{
    (void)r;
    return DCP_OK;
}

const struct dcp_backend_ops dcp_host_backend = {
    .name = "host",
    .engine_init = host_engine_init,
    .engine_fini = host_engine_fini,
    .rank_init = host_rank_init,
    .rank_fini = host_rank_fini,
    .alloc = host_alloc,
    .free = host_free,
    .upload = host_upload,
    .download = host_download,
    .copy = host_copy,
    .launch = host_launch,
    .all_gather = host_all_gather,
    .reduce_scatter = host_reduce_scatter,
    .all_to_all = host_all_to_all,
    .peer_put = host_peer_put,
    .peer_wait = host_peer_wait,
    .wire_bytes = host_wire_bytes,
    .synchronize = host_synchronize,
    .abort = host_abort,
    .recover = host_recover,
    .timer_begin = host_timer_begin,
    .timer_end = host_timer_end,
    .timer_collect = host_timer_collect,
};
