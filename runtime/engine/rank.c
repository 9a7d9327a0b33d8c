/*
 * rank.c: one rank's decode-path operations: KV append and the DCP attention step
 * (the queries of the group -> local attention -> W_UV projection with
 * merge_after_uv -> exchange and merge, the last and the first by the merge scheme,
 * merge.c), plus its buffers.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_kernels/convert.h"
#include "dcp_kernels/params.h"
#include "dcp/tools.h"
#include "engine/engine_internal.h"
#include "util/util.h"

/* runtime.cuda.precision reaches the kernels as dcpk_attn_params.precision unchanged. */
_Static_assert((int)DCP_CUDA_PRECISION_FAST == (int)DCPK_PRECISION_FAST &&
                   (int)DCP_CUDA_PRECISION_EXACT == (int)DCPK_PRECISION_EXACT,
               "enum dcp_cuda_precision and enum dcpk_precision differ");

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

/* Every public entry clears the thread's last error first, so after a success
 * dcp_last_error() is "" and after a failure it is that failure's message. */
static int need_rank(const struct dcp_rank *r, const char *op)
{
    dcp_clear_error();
    return r ? DCP_OK : dcp_error(DCP_EINVAL, "%s: rank is NULL", op);
}

struct dcp_rank *dcp_rank_claim(struct dcp_rank *r, const char *op)
{
    int idle = 0;
    if (atomic_compare_exchange_strong(&r->in_call, &idle, 1))
        return r;
    dcp_error(DCP_EBUSY, "%s: rank %u is inside another call (from another thread); a rank takes one call at a "
              "time, from the one thread that drives it", op, r->tp_rank);
    return NULL;
}

void dcp_rank_release(struct dcp_rank *const *claim)
{
    if (*claim)
        atomic_store(&(*claim)->in_call, 0);
}

static uint64_t this_thread(void) { return (uint64_t)pthread_self(); }

/* Notes the thread of a step's append or attention (check_group_threads). */
static void note_step_thread(struct dcp_rank *r)
{
    atomic_store(&r->step_thread, this_thread());
    atomic_store(&r->step_thread_step, r->engine->step_id);
}

/* Before a collective: a local member of the group whose append or attention of this
 * step this thread made, and that is inside no call now, can only be called by this
 * thread, which is about to wait for it: it would wait for itself until the timeout.
 * Refused at once (the step is aborted, so members already waiting return). */
static int check_group_threads(struct dcp_rank *r)
{
    const struct dcp_engine *e = r->engine;
    const uint64_t self = this_thread();
    for (uint32_t m = 0; m < e->geo.dcp; m++) {
        const uint32_t tp = r->group_id * e->geo.dcp + m;
        if (m == r->group_rank || tp < e->params.rank_begin || tp - e->params.rank_begin >= e->num_ranks)
            continue; /* this rank, or one of another process */
        struct dcp_rank *p = &e->ranks[tp - e->params.rank_begin];
        if (!atomic_load(&p->in_call) && atomic_load(&p->step_thread) == self &&
            atomic_load(&p->step_thread_step) == e->step_id) {
            dcp_engine_abort(r->engine);
            return dcp_error(DCP_EINVAL, "rank %u: its collective waits for rank %u of its DCP group, which this "
                             "same thread drives (it made rank %u's calls of this step): one thread cannot be in "
                             "both; drive each rank from its own thread (dcp_engine_run)", r->tp_rank, p->tp_rank,
                             p->tp_rank);
        }
    }
    return DCP_OK;
}

/* Argument checks of a step's rank function. They depend on the engine's state
 * and the caller's arguments only, and fail before anything is queued. */
static int check_step(const struct dcp_rank *r, const char *op, uint32_t layer)
{
    const struct dcp_engine *e = r->engine;
    int err = dcp_engine_check_usable(e);
    if (err)
        return err;
    if (!e->step.valid)
        return dcp_error(DCP_EINVAL, "%s: no step: call dcp_engine_begin_step() after changing sequences", op);
    if (layer >= e->num_layers)
        return dcp_error(DCP_EINVAL, "%s: layer %u out of range (%u layers)", op, layer, e->num_layers);
    return DCP_OK;
}

int dcp_rank_check_step(const struct dcp_rank *r, const char *op, uint32_t layer)
{
    const int err = need_rank(r, op);
    return err ? err : check_step(r, op, layer);
}

/* ---- timed backend calls (profile = true) -------------------------------------- */

static int timer_begin(struct dcp_rank *r, uint32_t *token)
{
    return r->engine->params.profile ? r->engine->ops->timer_begin(r, token) : DCP_OK;
}

static int timer_end(struct dcp_rank *r, uint32_t token, enum dcp_prof_cat cat, int err)
{
    if (!err && r->engine->params.profile) {
        r->prof_calls[cat]++;
        err = r->engine->ops->timer_end(r, token, cat);
    }
    return err;
}

int dcp_rank_timed_begin(struct dcp_rank *r, uint32_t *token) { return timer_begin(r, token); }

int dcp_rank_timed_end(struct dcp_rank *r, uint32_t token, enum dcp_prof_cat cat, int err)
{
    return timer_end(r, token, cat, err);
}

int dcp_rank_check_group(struct dcp_rank *r) { return check_group_threads(r); }

int dcp_rank_launch(struct dcp_rank *r, enum dcp_prof_cat cat, enum dcpk_kernel_id kernel, const void *params)
{
    uint32_t t = 0;
    int err = timer_begin(r, &t);
    if (!err)
        err = r->engine->ops->launch(r, kernel, params);
    return timer_end(r, t, cat, err);
}

int dcp_rank_collective(struct dcp_rank *r, enum dcp_collective kind, uint64_t send, uint64_t recv, size_t n)
{
    const struct dcp_backend_ops *ops = r->engine->ops;
    uint32_t t = 0;
    int err = check_group_threads(r);
    if (!err)
        err = timer_begin(r, &t);
    if (!err)
        err = kind == DCP_ALL_GATHER       ? ops->all_gather(r, send, recv, n)
              : kind == DCP_REDUCE_SCATTER ? ops->reduce_scatter(r, send, recv, n, r->engine->part_dtype)
                                           : ops->all_to_all(r, send, recv, n);
    return timer_end(r, t, PROF_COMM, err);
}

DCP_API uint32_t dcp_rank_tp_rank(const dcp_rank *r) { return need_rank(r, "rank_tp_rank") ? 0 : r->tp_rank; }

DCP_API uint32_t dcp_rank_group_rank(const dcp_rank *r)
{
    return need_rank(r, "rank_group_rank") ? 0 : r->group_rank;
}

DCP_API dcp_engine *dcp_rank_engine(dcp_rank *r) { return need_rank(r, "rank_engine") ? NULL : r->engine; }

DCP_API void dcp_rank_head_offsets(const dcp_rank *r, uint32_t *q_head0, uint32_t *kv_head0)
{
    if (need_rank(r, "rank_head_offsets"))
        return;
    const struct dcp_engine *e = r->engine;
    if (q_head0)
        *q_head0 = r->tp_rank * e->geo.q_heads_per_rank;
    if (kv_head0)
        *kv_head0 = dcp_rank_geometry_kv_head0(&e->geo, r->tp_rank);
}

DCP_API const void *dcp_rank_step_token_keys(const dcp_rank *r)
{
    return need_rank(r, "rank_step_token_keys") ? NULL : (const void *)(uintptr_t)r->buf.token_keys;
}

/* ---- append ---------------------------------------------------------------- */

DCP_API int dcp_rank_append_kv(dcp_rank *r, uint32_t layer, const void *k, const void *v)
{
    int err = need_rank(r, "append_kv");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "append_kv", DCP_EBUSY);
    if ((err = check_step(r, "append_kv", layer)))
        return err;
    note_step_thread(r);
    if (!k)
        return dcp_error(DCP_EINVAL, "append_kv: k is NULL");
    const struct dcp_engine *e = r->engine;
    if (!e->mla && !v)
        return dcp_error(DCP_EINVAL, "append_kv: v is required for %s",
                         dcp_attention_kind_name(e->cfg->model.attention));
    if ((err = dcp_rank_layer_check(r, "append_kv", layer, NULL)))
        return err;
    if (e->step.tokens == 0)
        return DCP_OK;
    const struct dcp_layer_pages pages = dcp_layer_pages(r, layer);
    const struct dcpk_kv_append_params p = {
        .k_cache = pages.k,
        .v_cache = e->mla ? 0 : pages.v,
        .k_src = ADDR(k),
        .v_src = e->mla ? 0 : ADDR(v),
        .slots = dcp_rank_layer_slots(r, layer), /* the rings' for a sliding window */
        .num_tokens = e->step.tokens,
        .num_kv_heads = e->geo.kv_heads_per_rank,
        .k_dim = e->geo.qk_dim,
        .v_dim = e->geo.v_dim,
        .block_size = e->block_size,
        .dtype = e->dtype,
        .inv_scale = 1.0f / e->kv_scale,
        .src_dtype = e->act_dtype,
    };
    return dcp_rank_launch(r, PROF_APPEND, DCPK_KERNEL_kv_append, &p);
}

/* ---- attention --------------------------------------------------------------- */

/*
 * Dense attention of a full or sliding-window layer over `heads` query heads: the
 * gathered ones (the chunked q of every group rank) or, with no gather, the rank's
 * own. A window's keys are in its rings (ring table, ring_pages per sequence); with
 * model.window_kv replicated every rank holds the whole window by global position,
 * so the kernel sees a group of one.
 */
static int launch_attention(struct dcp_rank *r, uint32_t layer, uint64_t q, uint32_t q_dtype, uint64_t q_chunk_stride,
                            uint32_t heads, const struct dcp_attn_target *t)
{
    const struct dcp_engine *e = r->engine;
    const struct dcp_step *s = &e->step;
    const uint64_t T = s->tokens, Hg = e->geo.gathered_heads, H = e->geo.q_heads_per_rank, v = e->geo.v_dim;
    const struct dcp_layer_kind *kind = &e->layers[layer].kind;
    const struct dcp_layer_pages pages = dcp_layer_pages(r, layer);
    const bool whole = pages.ring && !e->window_sharded; /* every rank holds the whole window */
    struct dcpk_attn_params p = {
        .q = q,
        .k_cache = pages.k,
        .v_cache = pages.v,
        .block_table = pages.ring ? r->buf.kinds.ring_table : r->buf.block_table,
        .seq_lens = r->buf.seq_lens,
        .q_start = r->buf.q_start,
        .out = t->out,
        .lse = t->lse,
        .ws_o = r->buf.ws_o,
        .ws_lse = r->buf.ws_lse,
        .q_chunk_stride = q_chunk_stride,
        .out_chunk_stride = t->out_chunk_stride,
        .lse_chunk_stride = t->lse_chunk_stride,
        .ws_split_stride_o = T * Hg * v,
        .ws_split_stride_lse = T * Hg,
        .batch = s->batch,
        .num_q_tokens = (uint32_t)T,
        .num_heads = heads,
        .heads_per_chunk = e->geo.q_heads_per_rank,
        .num_kv_heads = e->geo.kv_heads_per_rank,
        .head_tile = dcp_engine_head_tile(e),
        .qk_dim = e->geo.qk_dim,
        .v_dim = e->geo.v_dim,
        .v_row_stride = e->v_row_stride,
        .block_size = e->block_size,
        .max_blocks = pages.ring ? e->ring_pages : s->max_blocks,
        .rank = whole ? 0 : r->group_rank,
        .group_size = whole ? 1 : e->geo.dcp,
        .interleave = whole ? 1 : e->interleave,
        .num_splits = s->num_splits,
        .dtype = e->dtype,
        .scale = e->scale,
        .kv_scale = e->kv_scale,
        .precision = (uint32_t)e->cfg->runtime.cuda.precision,
        .q_dtype = q_dtype,
        .out_dtype = t->out_dtype,
        .window = kind->type == DCP_LAYER_SLIDING_WINDOW ? kind->window : 0,
        .ring_pages = pages.ring ? e->ring_pages : 0,
        .split_counters = s->num_splits > 1 ? r->buf.split_counters : 0,
    };
    /* With split_counters the launch combines its splits itself (the last split of each
     * work item merges them into the target, params.h): no dcpk_merge launch. */
    int err = dcp_rank_launch(r, PROF_ATTENTION, DCPK_KERNEL_attn, &p);
    if (err || s->num_splits == 1 || p.split_counters)
        return err;
    /* Combine the splits: source s row i lives at ws + s * stride + i * v, rows in the
     * chunked order (chunk c = destination rank), written to the target's chunks. */
    const struct dcpk_merge_params m = {
        .src_o = r->buf.ws_o,
        .src_lse = r->buf.ws_lse,
        .out = t->out,
        .out_lse = t->lse,
        .src_stride_o = T * Hg * v,
        .src_stride_lse = T * Hg,
        .out_chunk_stride = t->out_chunk_stride,
        .out_lse_chunk_stride = t->lse_chunk_stride,
        .n_src = s->num_splits,
        .rows = (uint32_t)(T * heads),
        .rows_per_chunk = (uint32_t)(T * H),
        .v_dim = e->geo.v_dim,
        .src_dtype = DCPK_FP32, /* the split workspace */
        .out_dtype = t->out_dtype,
    };
    return dcp_rank_launch(r, PROF_MERGE, DCPK_KERNEL_merge, &m);
}

/* merge_after_uv: the latent rows (chunk stride T * H_l * v, fp32) of every gathered head
 * times its W_UV of this layer, into dst's chunks (rows of out_dim, dst_dtype: the wire's
 * part_dtype when dcp > 1, the caller's act_dtype when dcp = 1). */
static int project_uv(struct dcp_rank *r, uint32_t layer, uint64_t dst, uint64_t dst_chunk_stride,
                      uint32_t dst_dtype)
{
    const struct dcp_engine *e = r->engine;
    const uint64_t T = e->step.tokens, H = e->geo.q_heads_per_rank, Hg = e->geo.gathered_heads;
    const uint64_t head = (uint64_t)e->geo.v_dim * e->out_dim;
    const struct dcpk_uv_proj_params p = {
        .src = r->buf.latent,
        .w = r->buf.w_uv + (uint64_t)layer * Hg * head * sizeof(float),
        .dst = dst,
        .src_chunk_stride = T * H * e->geo.v_dim,
        .dst_chunk_stride = dst_chunk_stride,
        .num_tokens = (uint32_t)T,
        .num_heads = e->geo.gathered_heads,
        .heads_per_chunk = e->geo.q_heads_per_rank,
        .in_dim = e->geo.v_dim,
        .out_dim = e->out_dim,
        .dst_dtype = dst_dtype,
    };
    return dcp_rank_launch(r, PROF_MERGE, DCPK_KERNEL_uv_proj, &p);
}

/* A layer's partial outputs into t, by its kind: dense attention (full, sliding window) or the
 * sparse top-k's. */
static int layer_partials(struct dcp_rank *r, uint32_t layer, uint64_t q, uint32_t q_dtype, uint64_t q_chunk_stride,
                          uint32_t heads, const struct dcp_attn_target *t, const struct dcp_attention_extra *x)
{
    if (r->engine->layers[layer].kind.type == DCP_LAYER_SPARSE_TOPK)
        return dcp_rank_sparse_partials(r, layer, q, q_dtype, q_chunk_stride, heads, t, x);
    return launch_attention(r, layer, q, q_dtype, q_chunk_stride, heads, t);
}

/* The attention flow once its arguments are checked; its failures are the backend's.
 * Queries: the caller's (dcp = 1, or replicate_q: all gathered heads already) or
 * gathered. Partial outputs: straight into the merge's chunks, or (merge_after_uv)
 * into the latent buffer and from there, projected, into them. A layer that keeps its
 * whole KV on every rank (dcp = 1, a replicated sliding window) attends the rank's own
 * heads straight into out. A sink is applied once, to the merged rows. */
static int attention(struct dcp_rank *r, uint32_t layer, const void *q, void *out, void *lse,
                     const struct dcp_attention_extra *x)
{
    const struct dcp_engine *e = r->engine;
    const uint64_t T = e->step.tokens, H = e->geo.q_heads_per_rank, v = e->geo.v_dim, o = e->out_dim, qk = e->geo.qk_dim;
    const uint64_t out_lse = lse ? ADDR(lse) : r->buf.lse_scratch;
    const uint64_t latent_stride = T * H * v;
    const struct dcp_engine_layer *L = &e->layers[layer];
    int err;
    if (e->geo.dcp == 1 || (L->kind.type == DCP_LAYER_SLIDING_WINDOW && !e->window_sharded)) {
        /* With replicate_q, q holds the group's heads: this rank's are its chunk. */
        const uint64_t own = e->replicate_q ? (uint64_t)r->group_rank * T * H * qk * dcpk_dtype_size(e->act_dtype) : 0;
        /* merge_after_uv (dcp = 1): fp32 latent, projected straight into out in act_dtype. */
        const struct dcp_attn_target t = {.out = e->merge_uv ? r->buf.latent : ADDR(out), .lse = out_lse,
                                          .out_chunk_stride = latent_stride,
                                          .out_dtype = e->merge_uv ? DCPK_FP32 : e->act_dtype};
        if ((err = layer_partials(r, layer, ADDR(q) + own, e->act_dtype, 0, (uint32_t)H, &t, x)))
            return err;
        if (e->merge_uv && (err = project_uv(r, layer, ADDR(out), T * H * o, e->act_dtype)))
            return err;
    } else {
        /* Every rank attends all N * H_l heads' queries, laid out [N][T][H_l][qk]. */
        uint64_t q_all = 0;
        uint32_t q_dtype = 0;
        if ((err = dcp_merge_gather_q(r, ADDR(q), &q_all, &q_dtype)))
            return err;
        /* The partial outputs go where the scheme exchanges them from, or (merge_after_uv)
         * to the fp32 latent buffer first and from there, projected, to it. */
        const struct dcp_attn_target part = dcp_merge_target(r);
        struct dcp_attn_target t = part;
        if (e->merge_uv) {
            t.out = r->buf.latent;
            t.out_chunk_stride = latent_stride;
            t.out_dtype = DCPK_FP32;
        }
        if ((err = layer_partials(r, layer, q_all, q_dtype, T * H * qk, e->geo.gathered_heads, &t, x)))
            return err;
        if (e->merge_uv && (err = project_uv(r, layer, part.out, part.out_chunk_stride, part.out_dtype)))
            return err;
        if ((err = dcp_merge_run(r, ADDR(out), out_lse)))
            return err;
    }
    return L->kind.sink ? dcp_rank_apply_sink(r, layer, ADDR(out), out_lse, x) : DCP_OK;
}

DCP_API int dcp_rank_attention(dcp_rank *r, uint32_t layer, const void *q, void *out, void *lse)
{
    return dcp_rank_attention_ex(r, layer, q, out, lse, NULL);
}

DCP_API int dcp_rank_attention_ex(dcp_rank *r, uint32_t layer, const void *q, void *out, void *lse,
                                  const struct dcp_attention_extra *extra)
{
    static const struct dcp_attention_extra none = {0};
    const struct dcp_attention_extra *x = extra ? extra : &none;
    int err = need_rank(r, "attention");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "attention", DCP_EBUSY);
    if ((err = check_step(r, "attention", layer)) || (err = dcp_rank_layer_check(r, "attention", layer, x)))
        return err;
    note_step_thread(r);
    if (!q || !out)
        return dcp_error(DCP_EINVAL, "attention: q and out are required");
    const struct dcp_engine *e = r->engine;
    if (e->step.tokens == 0)
        return DCP_OK;
    if (e->step.tokens > e->max_qtokens)
        return dcp_error(DCP_EINVAL, "attention: the step has %u query tokens, more than max_query_tokens=%u: "
                         "dcp_engine_begin_step() accepted it as an append-only step (prefill chunk)",
                         e->step.tokens, e->max_qtokens);
    /* A failed launch or collective aborts the step, so that peers waiting for this
     * rank in a collective return DCP_EABORTED instead of waiting for the timeout. */
    err = attention(r, layer, q, out, lse, x);
    if (err && err != DCP_EABORTED)
        dcp_engine_abort(r->engine);
    return err;
}

uint64_t dcp_rank_wire_bytes(const struct dcp_rank *r)
{
    return r->engine->ops->wire_bytes ? r->engine->ops->wire_bytes(r) : 0;
}

DCP_API int dcp_rank_synchronize(dcp_rank *r)
{
    int err = need_rank(r, "rank_synchronize");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "rank_synchronize", DCP_EBUSY);
    return r->engine->ops->synchronize(r);
}

/* ---- buffers ------------------------------------------------------------------ */

DCP_API int dcp_rank_alloc(dcp_rank *r, size_t bytes, void **ptr)
{
    int err = need_rank(r, "rank_alloc");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "rank_alloc", DCP_EBUSY);
    if (!ptr || !bytes)
        return dcp_error(DCP_EINVAL, "rank_alloc: ptr and a size of at least one byte are required");
    *ptr = NULL;
    if (dcp_grow_array((void **)&r->user_bufs, &r->cap_user_bufs, r->num_user_bufs + 1, sizeof(*r->user_bufs)))
        return dcp_error(DCP_ENOMEM, "rank_alloc: the table of buffers");
    uint64_t addr = 0;
    if ((err = r->engine->ops->alloc(r, bytes, &addr)))
        return err;
    /* Sorted, so dcp_rank_free() finds it by bisection. */
    size_t at = r->num_user_bufs;
    while (at && r->user_bufs[at - 1] > addr)
        at--;
    memmove(r->user_bufs + at + 1, r->user_bufs + at, (r->num_user_bufs - at) * sizeof(*r->user_bufs));
    r->user_bufs[at] = addr;
    r->num_user_bufs++;
    *ptr = (void *)(uintptr_t)addr;
    return DCP_OK;
}

/* Index of addr among the rank's live buffers, or -1. */
static ptrdiff_t find_user_buf(const struct dcp_rank *r, uint64_t addr)
{
    size_t lo = 0, hi = r->num_user_bufs;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (r->user_bufs[mid] < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->num_user_bufs && r->user_bufs[lo] == addr ? (ptrdiff_t)lo : -1;
}

DCP_API void dcp_rank_free(dcp_rank *r, void *ptr)
{
    if (need_rank(r, "rank_free") || !ptr)
        return;
    DCP_RANK_ENTRY_VOID(r, "rank_free");
    const ptrdiff_t i = find_user_buf(r, ADDR(ptr));
    if (i < 0) {
        dcp_error(DCP_EINVAL, "rank_free: %p is no live buffer of rank %u (freed already, or not from "
                  "dcp_rank_alloc on this rank): nothing freed", ptr, r->tp_rank);
        return;
    }
    memmove(r->user_bufs + i, r->user_bufs + i + 1, (r->num_user_bufs - (size_t)i - 1) * sizeof(*r->user_bufs));
    r->num_user_bufs--;
    r->engine->ops->free(r, ADDR(ptr));
}

DCP_API int dcp_rank_upload(dcp_rank *r, void *dst, const void *src, size_t bytes)
{
    int err = need_rank(r, "rank_upload");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "rank_upload", DCP_EBUSY);
    if (bytes && (!dst || !src))
        return dcp_error(DCP_EINVAL, "rank_upload: dst and src are required (%zu bytes)", bytes);
    return bytes ? r->engine->ops->upload(r, ADDR(dst), src, bytes) : DCP_OK;
}

DCP_API int dcp_rank_download(dcp_rank *r, void *dst, const void *src, size_t bytes)
{
    int err = need_rank(r, "rank_download");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "rank_download", DCP_EBUSY);
    if (bytes && (!dst || !src))
        return dcp_error(DCP_EINVAL, "rank_download: dst and src are required (%zu bytes)", bytes);
    return bytes ? r->engine->ops->download(r, dst, ADDR(src), bytes) : DCP_OK;
}

DCP_API void dcp_rank_kv_arena(const dcp_rank *r, void **ptr, size_t *bytes)
{
    need_rank(r, "rank_kv_arena");
    if (ptr)
        *ptr = r ? (void *)(uintptr_t)r->kv_arena : NULL;
    if (bytes)
        *bytes = r ? (size_t)r->engine->kv_bytes : 0;
}

DCP_API int dcp_rank_copy(dcp_rank *r, void *dst, const void *src, size_t bytes)
{
    int err = need_rank(r, "rank_copy");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "rank_copy", DCP_EBUSY);
    if (bytes && (!dst || !src))
        return dcp_error(DCP_EINVAL, "rank_copy: dst and src are required (%zu bytes)", bytes);
    if (!bytes)
        return DCP_OK;
    uint32_t t = 0;
    err = timer_begin(r, &t);
    if (!err)
        err = r->engine->ops->copy(r, ADDR(dst), ADDR(src), bytes);
    return timer_end(r, t, PROF_OTHER, err);
}

DCP_API int dcp_rank_fill_synthetic(dcp_rank *r, void *dst, const struct dcp_synth_desc *d)
{
    int err = need_rank(r, "fill_synthetic");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "fill_synthetic", DCP_EBUSY);
    if (!dst || !d)
        return dcp_error(DCP_EINVAL, "fill_synthetic: dst and desc are required");
    if (!dcpk_act_dtype_ok((uint32_t)d->dtype))
        return dcp_error(DCP_EINVAL, "fill_synthetic: dtype=%s (%d): fp32, bf16 or fp16", dcp_dtype_name(d->dtype),
                         (int)d->dtype);
    if (d->rows == 0)
        return DCP_OK;
    const struct dcpk_fill_params p = {
        .dst = ADDR(dst),
        .row_keys = ADDR(d->row_keys),
        .key_base = d->key_base,
        .seed = d->seed,
        .rows = d->rows,
        .heads = d->heads,
        .dim = d->dim,
        .head_offset = d->head_offset,
        .dtype = (uint32_t)d->dtype,
        .amplitude = d->amplitude,
        .inv_scale = 1.0f,
    };
    return dcp_rank_launch(r, PROF_OTHER, DCPK_KERNEL_fill, &p);
}

DCP_API float dcp_synth_value(uint64_t seed, uint64_t key, uint32_t head, uint32_t d)
{
    return dcpk_synth_unit(seed, key, head, d);
}

DCP_API float dcp_dtype_round(enum dcp_dtype dtype, float value, float scale)
{
    /* Exactly what kv_append stores and attention reads back. */
    const bool scaled = dcpk_dtype_scaled((uint32_t)dtype);
    const float stored = scaled ? value * (1.0f / scale) : value;
    unsigned char bits[4];
    dcpk_store_as(bits, 0, (uint32_t)dtype, stored);
    const float back = dcpk_load_as_f32(bits, 0, (uint32_t)dtype);
    return scaled ? back * scale : back;
}

DCP_API int dcp_rank_get_profile(dcp_rank *r, struct dcp_profile *out)
{
    int err = need_rank(r, "get_profile");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "get_profile", DCP_EBUSY);
    if (!out)
        return dcp_error(DCP_EINVAL, "get_profile: out is NULL");
    if (!r->engine->params.profile)
        return dcp_error(DCP_ENOTSUP, "the engine was created without profile = true");
    if ((err = r->engine->ops->timer_collect(r)))
        return err;
    *out = (struct dcp_profile){
        .append_seconds = r->prof_seconds[PROF_APPEND],
        .attention_seconds = r->prof_seconds[PROF_ATTENTION],
        .merge_seconds = r->prof_seconds[PROF_MERGE],
        .comm_seconds = r->prof_seconds[PROF_COMM],
        .other_seconds = r->prof_seconds[PROF_OTHER],
        .append_calls = r->prof_calls[PROF_APPEND],
        .attention_calls = r->prof_calls[PROF_ATTENTION],
        .merge_calls = r->prof_calls[PROF_MERGE],
        .comm_calls = r->prof_calls[PROF_COMM],
        .other_calls = r->prof_calls[PROF_OTHER],
    };
    return DCP_OK;
}

DCP_API void dcp_rank_reset_profile(dcp_rank *r)
{
    if (need_rank(r, "reset_profile"))
        return;
    DCP_RANK_ENTRY_VOID(r, "reset_profile");
    if (r->engine->params.profile)
        r->engine->ops->timer_collect(r);
    memset(r->prof_seconds, 0, sizeof(r->prof_seconds));
    memset(r->prof_calls, 0, sizeof(r->prof_calls));
}
