/*
 * layers.c: the layer kinds in the engine (docs/design.md §13). Each layer's kind
 * decides where its KV lives and which path its attention takes:
 *   full            paged KV, sharded; gathered queries, dcpk_attn, the merge;
 *   sliding_window  a ring of ring_pages pages per sequence slot (ring_arena):
 *                   sharded (window_kv sharded: like full, with the window and the
 *                   ring in dcpk_attn) or replicated (every rank keeps the whole
 *                   window and attends its own heads: no gather, no merge);
 *   sparse_topk     paged KV, sharded; dcpk_sparse_attn over each query token's
 *                   top-k, given by the caller (sparse_index caller) or selected
 *                   here from the sharded index keys (index_score, a local top-k,
 *                   the group's all-gather of candidates and their merge);
 *   none            nothing: the caller's linear-attention layer keeps its state.
 * A layer with sink: true gets dcpk_sink on its merged rows, once.
 */
#include <stdlib.h>
#include <string.h>

#include "dcp/placement.h"
#include "dcp_kernels/placement.h"
#include "engine/engine_internal.h"
#include "engine/merge.h"
#include "model/model.h"
#include "util/util.h"

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

int dcp_engine_layers_resolve(struct dcp_engine *e)
{
    const struct dcp_model_config *m = &e->cfg->model;
    e->layers = calloc(e->num_layers, sizeof(*e->layers));
    e->layer_kinds = calloc(e->num_layers, sizeof(*e->layer_kinds));
    if (!e->layers || !e->layer_kinds)
        return dcp_error(DCP_ENOMEM, "engine: %u layers", e->num_layers);
    e->window_sharded = m->window_kv == DCP_WINDOW_KV_SHARDED;
    e->sharded_index = e->cfg->parallel.sparse_index == DCP_SPARSE_INDEX_SHARDED;
    uint32_t attending = 0;
    for (uint32_t l = 0; l < e->num_layers; l++) {
        const struct dcp_layer_kind k = dcp_model_layer_kind(m, l);
        e->layers[l].kind = e->layer_kinds[l] = k;
        attending += k.type != DCP_LAYER_NONE;
        if (k.type == DCP_LAYER_SLIDING_WINDOW)
            e->max_window = DCP_MAX(e->max_window, k.window);
        if (k.type == DCP_LAYER_SPARSE_TOPK)
            e->max_topk = DCP_MAX(e->max_topk, k.topk);
        if (k.sink && e->params.sinks && e->params.sinks[l])
            e->has_sink_params = true;
    }
    if (!attending)
        return dcp_error(DCP_EINVAL, "every one of the engine's %u layers is none (KV-free): nothing to run",
                         e->num_layers);
    if (e->max_window && !e->window_sharded && e->merge_uv && e->geo.dcp > 1)
        return dcp_error(DCP_ENOTSUP, "merge_after_uv with replicated sliding-window layers: those layers are not "
                         "merged (model.window_kv: sharded, or no merge_after_uv)");
    return DCP_OK;
}

void dcp_engine_layers_free(struct dcp_engine *e)
{
    free(e->layers);
    free(e->layer_kinds);
    e->layers = NULL;
    e->layer_kinds = NULL;
}

int dcp_engine_layers_check_backend(const struct dcp_engine *e)
{
    for (uint32_t l = 0; l < e->num_layers; l++) {
        const struct dcp_layer_kind *k = &e->layers[l].kind;
        if (!(e->caps.layer_types & (1u << k->type)) || (k->sink && !e->caps.sinks))
            return dcp_error(DCP_ENOTSUP, "layer %u is %s%s, which the %s backend does not run for this model "
                             "(its attention entry does not read windows); use runtime.backend: host", l,
                             dcp_layer_type_name(k->type), k->sink ? " with a sink" : "", e->ops->name);
    }
    return DCP_OK;
}

/* ---- sizes ------------------------------------------------------------------ */

int dcp_engine_layers_size(struct dcp_engine *e, uint64_t *paged_bytes_per_block, uint64_t *ring_arena_bytes)
{
    bool ovf = false;
    const uint64_t kv_page = dcp_add_u64(e->k_page_bytes, e->v_page_bytes, &ovf);
    if (e->sharded_index && e->max_topk)
        e->index_page_bytes = dcp_mul_u64(dcp_mul_u64(e->cfg->model.index_head_dim, e->block_size, &ovf),
                                          dcpk_dtype_size((uint32_t)e->cfg->model.index_dtype), &ovf);
    if (e->max_window) {
        const uint64_t tokens = dcp_window_ring_tokens(e->max_window, e->max_qtokens, e->window_sharded, e->geo.dcp,
                                                       e->interleave);
        const uint64_t pages = dcp_div_ceil_u64(tokens, e->block_size);
        if (pages > INT32_MAX / DCP_MAX(1u, e->max_seqs))
            return dcp_error(DCP_EINVAL, "a window of %u tokens for %u sequences needs more ring pages than block ids "
                             "hold", e->max_window, e->max_seqs);
        e->ring_pages = (uint32_t)pages;
    }
    uint64_t per_block = 0, ring = 0;
    const uint64_t ring_layer_pages = (uint64_t)e->ring_pages * e->max_seqs;
    for (uint32_t l = 0; l < e->num_layers; l++) {
        const enum dcp_layer_type t = e->layers[l].kind.type;
        if (t == DCP_LAYER_FULL || t == DCP_LAYER_SPARSE_TOPK) {
            per_block = dcp_add_u64(per_block, kv_page, &ovf);
            if (t == DCP_LAYER_SPARSE_TOPK)
                per_block = dcp_add_u64(per_block, e->index_page_bytes, &ovf);
        } else if (t == DCP_LAYER_SLIDING_WINDOW) {
            ring = dcp_add_u64(ring, dcp_mul_u64(kv_page, ring_layer_pages, &ovf), &ovf);
        }
    }
    if (ovf)
        return dcp_error(DCP_EINVAL, "the KV of %u layers of %u-token pages has no representable size", e->num_layers,
                         e->block_size);
    if (per_block == 0)
        return dcp_error(DCP_ENOTSUP, "no full or sparse_topk layer: every layer is a sliding window or KV-free, and "
                         "the engine pages the KV of the others only");
    *paged_bytes_per_block = per_block;
    *ring_arena_bytes = ring;
    return DCP_OK;
}

void dcp_engine_layers_place(struct dcp_engine *e)
{
    /* Paged layers in the KV arena: K pages, V pages, then (sparse, sharded index) index-key pages.
     * Ring layers in the ring arena: K ring pages, then V ring pages. Sizes were checked. */
    const uint64_t kv = (e->k_page_bytes + e->v_page_bytes) * e->num_blocks;
    const uint64_t ring_pages = (uint64_t)e->ring_pages * e->max_seqs;
    uint64_t paged = 0, ring = 0;
    for (uint32_t l = 0; l < e->num_layers; l++) {
        struct dcp_engine_layer *L = &e->layers[l];
        switch (L->kind.type) {
        case DCP_LAYER_FULL:
        case DCP_LAYER_SPARSE_TOPK:
            L->kv_offset = paged;
            paged += kv;
            if (L->kind.type == DCP_LAYER_SPARSE_TOPK && e->index_page_bytes) {
                L->index_offset = paged;
                paged += e->index_page_bytes * e->num_blocks;
            }
            break;
        case DCP_LAYER_SLIDING_WINDOW:
            L->kv_offset = ring;
            ring += (e->k_page_bytes + e->v_page_bytes) * ring_pages;
            break;
        case DCP_LAYER_NONE: break;
        }
    }
    e->kv_bytes = paged;
    e->ring_bytes = ring;
    e->score_stride = (uint64_t)e->max_blocks_per_seq * e->block_size;
}

struct dcp_layer_pages dcp_layer_pages(const struct dcp_rank *r, uint32_t layer)
{
    const struct dcp_engine *e = r->engine;
    const struct dcp_engine_layer *L = &e->layers[layer];
    const bool ring = L->kind.type == DCP_LAYER_SLIDING_WINDOW;
    const uint64_t pages = ring ? (uint64_t)e->ring_pages * e->max_seqs : e->num_blocks;
    struct dcp_layer_pages p;
    p.k = (ring ? r->ring_arena : r->kv_arena) + L->kv_offset;
    p.v = e->mla ? p.k : p.k + e->k_page_bytes * pages;
    p.index = L->index_offset ? r->kv_arena + L->index_offset : 0;
    p.ring = ring;
    return p;
}

/* ---- step metadata: the rings ------------------------------------------------ */

/*
 * The ring slot of a token at global position p of a sequence of len tokens (this
 * step's included) for group rank r: -1 where r keeps no copy (sharded: not its
 * owner) or where a later token of the same step overwrites it in the ring (so no
 * slot is written twice in one launch). Local index c (the global position when
 * replicated) lives at ring entry (c / B) % P of the sequence slot's ring.
 */
static int64_t ring_slot(const struct dcp_engine *e, uint32_t seq_slot, uint64_t p, uint64_t len, uint32_t r)
{
    const uint32_t N = e->window_sharded ? e->geo.dcp : 1, I = e->window_sharded ? e->interleave : 1;
    const uint32_t owner = dcpk_owner_rank(p, N, I);
    if (e->window_sharded && owner != r)
        return -1;
    const uint64_t c = dcpk_local_index(p, N, I);
    const uint64_t held = (uint64_t)e->ring_pages * e->block_size;
    if (c + held < dcpk_local_length(len, e->window_sharded ? owner : 0, N, I))
        return -1;
    const uint64_t page = (uint64_t)seq_slot * e->ring_pages + (c / e->block_size) % e->ring_pages;
    return (int64_t)(page * e->block_size + c % e->block_size);
}

void dcp_engine_layers_build_step(struct dcp_engine *e, const struct dcp_batch *b)
{
    if (!e->ring_pages)
        return;
    struct dcp_step *s = &e->step;
    const uint32_t N = e->geo.dcp, P = e->ring_pages;
    uint32_t t = 0;
    for (uint32_t i = 0; i < b->num_seqs; i++) {
        const uint32_t slot = dcp_kv_seq_slot(e->kv, b->seq_ids[i]);
        for (uint32_t j = 0; j < P; j++)
            s->ring_table[(size_t)i * P + j] = (int32_t)((uint64_t)slot * P + j);
        const uint64_t len = (uint64_t)s->seq_lens[i];
        e->ring_hi[slot] = DCP_MAX(e->ring_hi[slot], len);
        for (uint64_t p = len - b->q_lens[i]; p < len; p++, t++)
            for (uint32_t r = 0; r < N; r++)
                s->ring_slots[(size_t)r * e->max_tokens + t] = ring_slot(e, slot, p, len, r);
    }
}

int dcp_engine_layers_upload_step(struct dcp_rank *r)
{
    const struct dcp_engine *e = r->engine;
    const struct dcp_step *s = &e->step;
    if (!e->ring_pages)
        return DCP_OK;
    int err = e->ops->upload(r, r->buf.kinds.ring_table, s->ring_table, (size_t)s->batch * e->ring_pages * sizeof(int32_t));
    if (!err)
        err = e->ops->upload(r, r->buf.kinds.ring_slots, s->ring_slots + (size_t)r->group_rank * e->max_tokens,
                             (size_t)s->tokens * sizeof(int64_t));
    return err;
}

/* ---- sequences ------------------------------------------------------------------ */

int dcp_engine_layers_fork(struct dcp_engine *e, uint32_t src, uint32_t child)
{
    if (!e->ring_pages)
        return DCP_OK;
    /* The child's rings start as copies of the parent's: its window is the parent's. */
    const uint64_t bytes_k = e->k_page_bytes * e->ring_pages, bytes_v = e->v_page_bytes * e->ring_pages;
    const uint64_t from = (uint64_t)dcp_kv_seq_slot(e->kv, src) * e->ring_pages;
    const uint64_t to = (uint64_t)dcp_kv_seq_slot(e->kv, child) * e->ring_pages;
    for (uint32_t i = 0; i < e->num_ranks; i++) {
        struct dcp_rank *r = &e->ranks[i];
        for (uint32_t l = 0; l < e->num_layers; l++) {
            if (e->layers[l].kind.type != DCP_LAYER_SLIDING_WINDOW)
                continue;
            const struct dcp_layer_pages p = dcp_layer_pages(r, l);
            int err = e->ops->copy(r, p.k + to * e->k_page_bytes, p.k + from * e->k_page_bytes, bytes_k);
            if (!err && bytes_v)
                err = e->ops->copy(r, p.v + to * e->v_page_bytes, p.v + from * e->v_page_bytes, bytes_v);
            if (err)
                return err;
        }
    }
    return DCP_OK;
}

int dcp_engine_layers_check_truncate(const struct dcp_engine *e, uint32_t seq, uint64_t len)
{
    if (!e->ring_pages || len == 0)
        return DCP_OK;
    /* The rings hold, of every sequence, the keys of the last window + max_query_tokens - 1 positions
     * below the longest length it reached (dcp_window_ring_tokens): a query at len sees back to
     * len - window + 1, so len may lie at most max_query_tokens below that longest length. */
    const uint64_t hi = e->ring_hi[dcp_kv_seq_slot(e->kv, seq)];
    if (hi <= len || hi - len <= e->max_qtokens)
        return DCP_OK;
    return dcp_error(DCP_EINVAL, "seq_truncate: sequence %u to %llu tokens: it reached %llu, and its sliding-window "
                     "layers keep only the last window + max_query_tokens (%u) positions in rings, so a cut of more "
                     "than %u below that would need keys the rings dropped (truncate to 0 and refill)", seq,
                     (unsigned long long)len, (unsigned long long)hi, e->max_qtokens, e->max_qtokens);
}

void dcp_engine_layers_seq_reset(struct dcp_engine *e, uint32_t seq, uint32_t from)
{
    if (e->ring_hi)
        e->ring_hi[dcp_kv_seq_slot(e->kv, seq)] = from == UINT32_MAX ? 0 : e->ring_hi[dcp_kv_seq_slot(e->kv, from)];
}

/* ---- rank functions ---------------------------------------------------------------- */

int dcp_rank_layer_check(const struct dcp_rank *r, const char *op, uint32_t layer,
                         const struct dcp_attention_extra *x)
{
    const struct dcp_engine *e = r->engine;
    const struct dcp_layer_kind *k = &e->layers[layer].kind;
    if (k->type == DCP_LAYER_NONE)
        return dcp_error(DCP_EINVAL, "%s: layer %u is none (a KV-free linear-attention layer): the library keeps "
                         "nothing for it", op, layer);
    if (!x) /* append: nothing more to check */
        return DCP_OK;
    if (k->sink && !x->sinks && !(e->params.sinks && e->params.sinks[layer]))
        return dcp_error(DCP_EINVAL, "%s: layer %u has a sink, but neither dcp_engine_params.sinks[%u] nor "
                         "dcp_attention_extra.sinks gives its logits", op, layer, layer);
    if (k->type == DCP_LAYER_SPARSE_TOPK && !e->sharded_index && !x->topk)
        return dcp_error(DCP_EINVAL, "%s: layer %u is sparse_topk with parallel.sparse_index: caller, so "
                         "dcp_attention_extra.topk (int32 [T][%u] global positions) is required", op, layer, k->topk);
    if (k->type == DCP_LAYER_SPARSE_TOPK && e->sharded_index && (!x->index_q || !x->index_weights))
        return dcp_error(DCP_EINVAL, "%s: layer %u is sparse_topk with parallel.sparse_index: sharded, so "
                         "dcp_attention_extra.index_q and index_weights are required", op, layer);
    return DCP_OK;
}

uint64_t dcp_rank_layer_slots(const struct dcp_rank *r, uint32_t layer)
{
    return r->engine->layers[layer].kind.type == DCP_LAYER_SLIDING_WINDOW ? r->buf.kinds.ring_slots : r->buf.slots;
}

DCP_API int dcp_rank_append_index_k(dcp_rank *r, uint32_t layer, const void *k)
{
    if (!r)
        return dcp_rank_check_step(r, "append_index_k", layer); /* "rank is NULL" */
    DCP_RANK_ENTRY(r, "append_index_k", DCP_EBUSY);
    int err = dcp_rank_check_step(r, "append_index_k", layer);
    if (err)
        return err;
    const struct dcp_engine *e = r->engine;
    if (e->layers[layer].kind.type != DCP_LAYER_SPARSE_TOPK || !e->sharded_index)
        return dcp_error(DCP_EINVAL, "append_index_k: layer %u is %s%s: only sparse_topk layers with "
                         "parallel.sparse_index: sharded keep index keys", layer,
                         dcp_layer_type_name(e->layers[layer].kind.type),
                         e->layers[layer].kind.type == DCP_LAYER_SPARSE_TOPK ? " with sparse_index: caller" : "");
    if (!k)
        return dcp_error(DCP_EINVAL, "append_index_k: k is NULL");
    if (e->step.tokens == 0)
        return DCP_OK;
    const struct dcp_model_config *m = &e->cfg->model;
    const struct dcpk_kv_append_params p = {
        .k_cache = dcp_layer_pages(r, layer).index,
        .k_src = ADDR(k),
        .slots = r->buf.slots, /* sharded like the KV: only the owner writes */
        .num_tokens = e->step.tokens,
        .num_kv_heads = 1,
        .k_dim = m->index_head_dim,
        .block_size = e->block_size,
        .dtype = (uint32_t)m->index_dtype,
        .inv_scale = (float)(1.0 / m->index_scale),
        .src_dtype = e->act_dtype,
    };
    return dcp_rank_launch(r, PROF_APPEND, DCPK_KERNEL_kv_append, &p);
}

/*
 * Mode (b): the global top-k of every query token into buf.kinds.topk (stride K):
 * the indexer's scores against this rank's index keys, its local top-k, the
 * group's candidates gathered and merged (the same list on every rank).
 */
static int select_topk(struct dcp_rank *r, uint32_t layer, const struct dcp_attention_extra *x)
{
    const struct dcp_engine *e = r->engine;
    const struct dcp_layer_buffers *b = &r->buf.kinds;
    const struct dcp_model_config *m = &e->cfg->model;
    const uint32_t T = e->step.tokens, K = e->layers[layer].kind.topk, N = e->geo.dcp;
    const struct dcpk_index_score_params sp = {
        .q = ADDR(x->index_q),
        .weights = ADDR(x->index_weights),
        .k_cache = dcp_layer_pages(r, layer).index,
        .block_table = r->buf.block_table,
        .seq_lens = r->buf.seq_lens,
        .q_start = r->buf.q_start,
        .scores = b->scores,
        .score_lens = b->score_lens,
        .score_stride = e->score_stride,
        .batch = e->step.batch,
        .num_q_tokens = T,
        .num_index_heads = m->index_heads,
        .index_dim = m->index_head_dim,
        .block_size = e->block_size,
        .max_blocks = e->step.max_blocks,
        .rank = r->group_rank,
        .group_size = N,
        .interleave = e->interleave,
        .dtype = (uint32_t)m->index_dtype,
        .kv_scale = (float)m->index_scale,
        .q_dtype = e->act_dtype,
    };
    int err = dcp_rank_launch(r, PROF_ATTENTION, DCPK_KERNEL_index_score, &sp);
    if (err)
        return err;
    /* Candidates: [T][K] scores then [T][K] positions, the layout the group gathers. */
    const uint64_t half = (uint64_t)T * K * sizeof(float);
    const struct dcpk_topk_params local = {
        .scores = b->scores,
        .row_lens = b->score_lens,
        .out_scores = N > 1 ? b->cand : b->topk_scores,
        .out_positions = N > 1 ? b->cand + half : b->topk,
        .row_stride = e->score_stride,
        .rows = T,
        .n_src = 1,
        .n_entries = (uint32_t)e->score_stride,
        .k = K,
        .rank = r->group_rank,
        .group_size = N,
        .interleave = e->interleave,
    };
    if ((err = dcp_rank_launch(r, PROF_ATTENTION, DCPK_KERNEL_topk, &local)) || N == 1)
        return err;
    if ((err = dcp_rank_collective(r, DCP_ALL_GATHER, b->cand, b->cand_recv, 2 * half)))
        return err;
    const struct dcpk_topk_params global = {
        .scores = b->cand_recv,
        .positions = b->cand_recv + half,
        .out_scores = b->topk_scores,
        .out_positions = b->topk,
        .src_stride = 2 * (uint64_t)T * K,
        .row_stride = K,
        .rows = T,
        .n_src = N,
        .n_entries = K,
        .k = K,
    };
    return dcp_rank_launch(r, PROF_MERGE, DCPK_KERNEL_topk, &global);
}

int dcp_rank_sparse_partials(struct dcp_rank *r, uint32_t layer, uint64_t q, uint32_t q_dtype, uint64_t q_chunk_stride,
                             uint32_t heads, const struct dcp_attn_target *t, const struct dcp_attention_extra *x)
{
    const struct dcp_engine *e = r->engine;
    const uint32_t K = e->layers[layer].kind.topk, T = e->step.tokens;
    uint64_t topk = ADDR(x->topk);
    int err;
    if (e->sharded_index) {
        if ((err = select_topk(r, layer, x)))
            return err;
        topk = r->buf.kinds.topk;
        if (x->topk_out && (err = e->ops->copy(r, ADDR(x->topk_out), topk, (size_t)T * K * sizeof(int32_t))))
            return err;
    }
    const struct dcp_layer_pages pages = dcp_layer_pages(r, layer);
    const struct dcpk_sparse_attn_params p = {
        .q = q,
        .k_cache = pages.k,
        .v_cache = pages.v,
        .block_table = r->buf.block_table,
        .seq_lens = r->buf.seq_lens,
        .q_start = r->buf.q_start,
        .topk = topk,
        .out = t->out,
        .lse = t->lse,
        .q_chunk_stride = q_chunk_stride,
        .out_chunk_stride = t->out_chunk_stride,
        .lse_chunk_stride = t->lse_chunk_stride,
        .topk_stride = K,
        .num_topk = K,
        .batch = e->step.batch,
        .num_q_tokens = T,
        .num_heads = heads,
        .heads_per_chunk = e->geo.q_heads_per_rank,
        .num_kv_heads = e->geo.kv_heads_per_rank,
        .head_tile = dcp_engine_head_tile(e),
        .qk_dim = e->geo.qk_dim,
        .v_dim = e->geo.v_dim,
        .v_row_stride = e->v_row_stride,
        .block_size = e->block_size,
        .max_blocks = e->step.max_blocks,
        .rank = r->group_rank,
        .group_size = e->geo.dcp,
        .interleave = e->interleave,
        .dtype = e->dtype,
        .scale = e->scale,
        .kv_scale = e->kv_scale,
        .q_dtype = q_dtype,
        .out_dtype = t->out_dtype,
        .precision = (uint32_t)e->cfg->runtime.cuda.precision, /* as dcpk_attn's (rank.c) */
    };
    return dcp_rank_launch(r, PROF_ATTENTION, DCPK_KERNEL_sparse_attn, &p);
}

int dcp_rank_apply_sink(struct dcp_rank *r, uint32_t layer, uint64_t out, uint64_t lse,
                        const struct dcp_attention_extra *x)
{
    const struct dcp_engine *e = r->engine;
    const uint32_t H = e->geo.q_heads_per_rank;
    const uint64_t sinks = x && x->sinks ? ADDR(x->sinks)
                                         : r->buf.kinds.sinks + (uint64_t)layer * H * sizeof(float);
    const struct dcpk_sink_params p = {
        .out = out,
        .lse = lse,
        .sinks = sinks,
        .rows = e->step.tokens * H,
        .num_heads = H,
        .v_dim = e->out_dim,
        .out_dtype = e->act_dtype,
    };
    return dcp_rank_launch(r, PROF_MERGE, DCPK_KERNEL_sink, &p);
}

/* ---- per-rank buffers --------------------------------------------------------------- */

void dcp_engine_layers_plan_buffers(const struct dcp_engine *e, struct dcp_layer_buffers *b, struct dcp_buffer_plan *bp)
{
    const uint64_t T = e->max_qtokens, K = e->max_topk, w = sizeof(float);
    if (e->ring_pages) {
        dcp_buffer_plan_add(bp, &b->ring_table, e->max_batch, e->ring_pages, sizeof(int32_t), 1);
        dcp_buffer_plan_add(bp, &b->ring_slots, e->max_tokens, sizeof(int64_t), 1, 1);
    }
    if (e->has_sink_params)
        dcp_buffer_plan_add(bp, &b->sinks, e->num_layers, e->geo.q_heads_per_rank, w, 1);
    if (K && e->sharded_index) {
        dcp_buffer_plan_add(bp, &b->topk, T, K, sizeof(int32_t), 1);
        dcp_buffer_plan_add(bp, &b->topk_scores, T, K, w, 1);
        dcp_buffer_plan_add(bp, &b->scores, T, e->score_stride ? e->score_stride : 1, w, 1);
        dcp_buffer_plan_add(bp, &b->score_lens, T, sizeof(int32_t), 1, 1);
        if (e->geo.dcp > 1) {
            dcp_buffer_plan_add(bp, &b->cand, 2 * T, K, w, 1);
            dcp_buffer_plan_add(bp, &b->cand_recv, e->geo.dcp, 2 * T, K, w);
        }
    }
}

int dcp_engine_layers_rank_init(struct dcp_rank *r)
{
    const struct dcp_engine *e = r->engine;
    const uint32_t H = e->geo.q_heads_per_rank;
    for (uint32_t l = 0; e->has_sink_params && l < e->num_layers; l++) {
        if (!e->layers[l].kind.sink || !e->params.sinks[l])
            continue;
        /* This rank's heads are the model's [tp_rank * H, (tp_rank + 1) * H). */
        int err = e->ops->upload(r, r->buf.kinds.sinks + (uint64_t)l * H * sizeof(float),
                                 e->params.sinks[l] + (size_t)r->tp_rank * H, H * sizeof(float));
        if (err)
            return err;
    }
    return DCP_OK;
}
