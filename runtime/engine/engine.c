/*
 * engine.c: engine creation, the scheduler front end, step metadata, rank threads.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/geometry.h"
#include "dcp/plan.h"
#include "backend/select.h"
#include "comm/launch_env.h"
#include "dcp_kernels/placement.h"
#include "engine/engine_internal.h"
#include "util/util.h"

/* Workspace for split-KV partials is capped so huge shapes fall back to fewer splits. */
#define SPLIT_WORKSPACE_CAP (256ull << 20)

/* Every entry clears the thread's last error, so after a success dcp_last_error()
 * is "" and after a failure it is that failure's message. */
static int need_engine(const struct dcp_engine *e, const char *op)
{
    dcp_clear_error();
    return e ? DCP_OK : dcp_error(DCP_EINVAL, "%s: engine is NULL", op);
}

/* The engine whose rank function this thread is running inside dcp_engine_run, or NULL. */
static _Thread_local const struct dcp_engine *rank_fn_engine;

int dcp_engine_check_idle(const struct dcp_engine *e, const char *op)
{
    if (rank_fn_engine == e)
        return dcp_error(DCP_EINVAL, "%s: called from inside a rank function of dcp_engine_run; call it between "
                         "steps, from the thread that calls dcp_engine_run", op);
    if (atomic_load(&e->running))
        return dcp_error(DCP_EINVAL, "%s: called while dcp_engine_run runs this engine's rank functions (from "
                         "another thread); call it between steps", op);
    return DCP_OK;
}

/* need_engine() for the entries that change the engine's steps or sequences. */
static int need_idle_engine(const struct dcp_engine *e, const char *op)
{
    int err = need_engine(e, op);
    return err ? err : dcp_engine_check_idle(e, op);
}

/* Creating, destroying or running an engine inside a rank function (of any engine)
 * would start or join rank threads from a rank thread. */
static int outside_rank_function(const char *op)
{
    return rank_fn_engine ? dcp_error(DCP_EINVAL, "%s: called from inside a rank function of dcp_engine_run; call "
                                      "it between steps, from the thread that calls dcp_engine_run", op)
                          : DCP_OK;
}

DCP_API void dcp_engine_default_params(struct dcp_engine_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof(*p));
    p->max_batch = 64;
    p->max_seqs = 4096;
}

/* ---- shape -------------------------------------------------------------- */

/* Started by a launcher (srun, mpirun, torchrun) as one process per GPU: this
 * process drives the one TP rank the launcher gave it, unless the caller chose. */
static int adopt_launcher_rank(struct dcp_engine *e)
{
    if (e->params.rank_count || e->params.rank_begin || !dcp_backend_spans_processes(e->cfg->runtime.backend))
        return DCP_OK;
    struct dcp_launch_env env;
    int err = dcp_launch_env_detect(&env);
    if (err || env.world_size <= 1)
        return err;
    if (env.world_size != e->geo.tp)
        return dcp_error(DCP_EINVAL, "%s started %u processes but tp=%u: start one process per TP rank",
                         env.launcher, env.world_size, e->geo.tp);
    e->params.rank_begin = env.rank;
    e->params.rank_count = 1;
    return DCP_OK;
}

static int resolve_shape(struct dcp_engine *e)
{
    const struct dcp_config *cfg = e->cfg;
    const struct dcp_model_config *m = &cfg->model;
    const uint32_t dcp = e->params.dcp ? e->params.dcp : cfg->parallel.dcp;
    /* The deployment validated its own dcp; an override (the baseline's dcp = 1) is checked here. */
    int err = dcp_rank_geometry_init(m, cfg->parallel.tp, dcp, &e->geo);
    if (err)
        return err;
    e->interleave = cfg->parallel.interleave;
    e->block_size = cfg->memory.block_size;
    if (e->params.num_layers > m->num_layers)
        return dcp_error(DCP_EINVAL, "params.num_layers=%u: the model (%s) has %u layers", e->params.num_layers,
                         m->name, m->num_layers);
    e->num_layers = e->params.num_layers ? e->params.num_layers : m->num_layers;
    e->mla = m->attention == DCP_ATTN_MLA;
    e->v_row_stride = e->mla ? e->geo.qk_dim : e->geo.v_dim;
    e->dtype = (uint32_t)m->kv_dtype;
    if (!dcpk_act_dtype_ok((uint32_t)e->params.act_dtype))
        return dcp_error(DCP_EINVAL, "act_dtype=%s (%d): q, k, v and out are fp32, bf16 or fp16",
                         dcp_dtype_name(e->params.act_dtype), (int)e->params.act_dtype);
    e->act_dtype = (uint32_t)e->params.act_dtype;
    /* parallel.comm_dtype: the wire type of the gathered queries and the partial outputs
     * (the LSEs stay fp32); auto: the activations' own. The config rules accept fp32,
     * bf16, fp16 and auto only; enum dcp_dtype and enum dcpk_dtype share their values. */
    e->part_dtype = (uint32_t)dcp_wire_dtype_of(cfg->parallel.comm_dtype, e->params.act_dtype);
    if (!dcpk_act_dtype_ok(e->part_dtype))
        return dcp_error(DCP_EINVAL, "parallel.comm_dtype=%s (%d): the wire carries fp32, bf16 or fp16",
                         dcp_wire_dtype_name(cfg->parallel.comm_dtype), (int)cfg->parallel.comm_dtype);
    e->scale = (float)m->softmax_scale;
    e->kv_scale = (float)m->kv_scale;
    e->comm = cfg->parallel.comm;
    e->replicate_q = cfg->parallel.replicate_q && e->geo.dcp > 1;
    if (e->geo.dcp > 1 && e->replicate_q != e->params.replicate_q)
        return dcp_error(DCP_EINVAL, e->replicate_q
                         ? "the deployment sets parallel.replicate_q, which makes q every gathered head, "
                           "[dcp][T][H_l][qk], not [T][H_l][qk]: an engine reading that from a q buffer of the "
                           "smaller layout reads past it. Set dcp_engine_params.replicate_q = true if your code "
                           "passes that layout, or remove the key"
                         : "dcp_engine_params.replicate_q is true but the deployment does not set "
                           "parallel.replicate_q: the engine would read q as [T][H_l][qk] and gather the queries");
    e->merge_uv = cfg->parallel.merge_after_uv && e->mla;
    e->out_dim = dcp_merged_v_dim(cfg, e->geo.v_dim);
    if (e->merge_uv != (e->params.w_uv != NULL))
        return dcp_error(DCP_EINVAL, e->merge_uv ? "parallel.merge_after_uv is true but dcp_engine_params.w_uv is NULL: "
                                                   "the engine needs the W_UV of every layer (fp32 [query_heads]"
                                                   "[kv_lora_rank][v_head_dim]), which dcp-run run and replay do not have"
                                                 : "engine params give w_uv, but the deployment does not set "
                                                   "parallel.merge_after_uv (an MLA-only option): nothing would use it");
    for (uint32_t l = 0; e->merge_uv && l < e->num_layers; l++)
        if (!e->params.w_uv[l])
            return dcp_error(DCP_EINVAL, "w_uv[%u] is NULL: merge_after_uv needs the W_UV of each of the %u layers", l,
                             e->num_layers);
    if (e->interleave == 0 || e->block_size % e->interleave)
        return dcp_error(DCP_EINVAL, "block_size=%u is not a multiple of interleave=%u",
                         e->block_size, e->interleave);
    if ((err = dcp_engine_layers_resolve(e))) /* each layer's kind (layers.c) */
        return err;
    int lerr = adopt_launcher_rank(e);
    if (lerr)
        return lerr;
    if (e->params.rank_begin >= e->geo.tp)
        return dcp_error(DCP_EINVAL, "rank_begin=%u but tp=%u", e->params.rank_begin, e->geo.tp);
    e->num_ranks = e->params.rank_count ? e->params.rank_count : e->geo.tp - e->params.rank_begin;
    if (e->params.rank_begin + e->num_ranks > e->geo.tp)
        return dcp_error(DCP_EINVAL, "ranks %u..%u exceed tp=%u", e->params.rank_begin,
                         e->params.rank_begin + e->num_ranks - 1, e->geo.tp);
    return DCP_OK;
}

/* Largest KV budget accepted (8 PiB): doubles are exact integers up to here, and
 * a larger figure is a mistake, not a memory size. */
#define KV_BUDGET_MAX 9007199254740992.0 /* 2^53 */
/* Most tokens one step may append or attend: beyond this a request is a mistake
 * (and T * heads must fit the kernels' 32-bit row counts). */
#define STEP_TOKENS_MAX (1u << 24)

/* KV budget per rank: explicit, else the host's emulated memory, else the plan's budget. */
static int kv_budget(const struct dcp_engine *e, bool host, double *out)
{
    const double asked = e->params.kv_budget_bytes;
    if (!isfinite(asked) || asked < 0 || asked > KV_BUDGET_MAX)
        return dcp_error(DCP_EINVAL, "kv_budget_bytes=%g: expected 0 (from the deployment) or a byte count "
                         "up to 2^53", asked);
    const struct dcp_config *cfg = e->cfg;
    double budget;
    if (asked > 0)
        budget = asked;
    else if (host && cfg->runtime.host.memory_bytes > 0)
        budget = cfg->runtime.host.memory_bytes * cfg->memory.gpu_fraction;
    else {
        struct dcp_kv_budget b;
        dcp_kv_budget_init(cfg, &b);
        budget = b.kv_bytes;
    }
    if (!isfinite(budget) || budget > KV_BUDGET_MAX)
        return dcp_error(DCP_EINVAL, "the deployment's KV budget of %g bytes per rank is not a usable size",
                         budget);
    *out = budget;
    return DCP_OK;
}

/* Pages: bytes of one page per layer, how many pages the budget holds once the
 * sliding-window rings (a fixed arena per sequence slot) are taken from it, and
 * where each layer's pages go (layers.c). */
static int size_pages(struct dcp_engine *e, bool host)
{
    bool ovf = false;
    e->k_page_bytes = dcp_mul_u64(e->geo.k_token_bytes, e->block_size, &ovf);
    e->v_page_bytes = dcp_mul_u64(e->geo.v_token_bytes, e->block_size, &ovf);
    uint64_t page_all_layers = 0, rings = 0;
    int err = ovf ? dcp_error(DCP_EINVAL, "a KV page of %u tokens has no representable size", e->block_size)
                  : dcp_engine_layers_size(e, &page_all_layers, &rings);
    if (err)
        return err;
    double budget = 0;
    if ((err = kv_budget(e, host, &budget)))
        return err;
    if (budget < (double)rings + (double)page_all_layers)
        return dcp_error(DCP_ENOSPC, "KV budget of %.0f bytes per rank holds no page of %llu bytes "
                         "(%u layers x %u tokens)%s", budget, (unsigned long long)page_all_layers,
                         e->num_layers, e->block_size, rings ? " after the sliding-window rings" : "");
    /* budget <= 2^53, so the quotient is below 2^53 and converts exactly. */
    e->num_blocks = DCP_MIN((uint64_t)((budget - (double)rings) / (double)page_all_layers), (uint64_t)INT32_MAX);
    /* A block table holds distinct blocks, so it never needs more than num_blocks entries. */
    const uint64_t per_block = (uint64_t)e->block_size * e->geo.dcp;
    e->max_blocks_per_seq = (uint32_t)DCP_MIN(dcp_div_ceil_u64(e->max_context, per_block), e->num_blocks);
    /* num_blocks * page_all_layers <= budget: the arena's products cannot overflow. */
    dcp_engine_layers_place(e);
    return DCP_OK;
}

/* Limits of a step and of the scheduler, each checked against what the device
 * formats can hold (int32 positions and block ids, 32-bit row counts). */
static int size_limits(struct dcp_engine *e)
{
    const struct dcp_config *cfg = e->cfg;
    bool ovf = false;
    uint64_t longest = 0;
    for (uint32_t i = 0; i < cfg->workload.num_context_lengths; i++)
        longest = DCP_MAX(longest, cfg->workload.context_lengths[i]);
    e->max_context = e->params.max_context ? e->params.max_context : dcp_add_u64(longest, 1024, &ovf);
    if (ovf || e->max_context > INT32_MAX)
        return dcp_error(DCP_EINVAL, "max_context=%llu%s: positions are 32-bit on the device, at most %d tokens",
                         (unsigned long long)e->max_context, ovf ? " (longest workload context + 1024)" : "",
                         INT32_MAX);
    e->max_seqs = e->params.max_seqs ? e->params.max_seqs : 4096;
    if (e->max_seqs > DCP_KV_MAX_SEQS)
        return dcp_error(DCP_EINVAL, "max_seqs=%u: at most %u live sequences", e->max_seqs, DCP_KV_MAX_SEQS);
    /* A batch holds distinct live sequences. */
    e->max_batch = DCP_MIN(e->params.max_batch ? e->params.max_batch : 64, e->max_seqs);
    const uint64_t qtokens = e->params.max_query_tokens
                                 ? e->params.max_query_tokens
                                 : dcp_mul_u64(e->max_batch, DCP_MAX(1u, cfg->workload.q_len), &ovf);
    const uint64_t tokens = DCP_MAX(e->params.max_step_tokens, qtokens);
    if (ovf || tokens > STEP_TOKENS_MAX)
        return dcp_error(DCP_EINVAL, "max_query_tokens=%llu, max_step_tokens=%u: a step holds at most %u tokens",
                         (unsigned long long)qtokens, e->params.max_step_tokens, STEP_TOKENS_MAX);
    e->max_qtokens = (uint32_t)qtokens;
    e->max_tokens = (uint32_t)tokens;
    return DCP_OK;
}

/* The step limits first: the rings' size depends on max_seqs and max_query_tokens. */
static int size_pools(struct dcp_engine *e, bool host)
{
    int err = size_limits(e);
    return err ? err : size_pages(e, host);
}

/* ---- per-rank buffers --------------------------------------------------- */

/* Lays out every per-rank buffer; the same plan sizes the workspace figure. */
static void plan_rank_buffers(struct dcp_engine *e, struct dcp_rank_buffers *b, struct dcp_buffer_plan *bp)
{
    const uint64_t T = e->max_qtokens, H = e->geo.q_heads_per_rank, N = e->geo.dcp;
    const uint64_t Hg = e->geo.gathered_heads, v = e->geo.v_dim, o = e->out_dim, f = sizeof(float);
    bp->n = 0;
    bp->overflow = false;
    dcp_buffer_plan_add(bp, &b->block_table, e->max_batch, e->max_blocks_per_seq, sizeof(int32_t), 1);
    dcp_buffer_plan_add(bp, &b->seq_lens, e->max_batch, sizeof(int32_t), 1, 1);
    dcp_buffer_plan_add(bp, &b->q_start, (uint64_t)e->max_batch + 1, sizeof(int32_t), 1, 1);
    dcp_buffer_plan_add(bp, &b->slots, e->max_tokens, sizeof(int64_t), 1, 1);
    dcp_buffer_plan_add(bp, &b->token_keys, e->max_tokens, sizeof(uint64_t), 1, 1);
    dcp_buffer_plan_add(bp, &b->lse_scratch, T, H, f, 1);
    dcp_engine_layers_plan_buffers(e, &b->kinds, bp);
    if (e->merge_uv) {
        dcp_buffer_plan_add(bp, &b->latent, N * T, H, v, f);
        dcp_buffer_plan_add(bp, &b->w_uv, (uint64_t)e->num_layers * Hg, v, o, f);
    }
    dcp_merge_plan_buffers(e, &b->merge, bp);
    if (e->split_rows) {
        dcp_buffer_plan_add(bp, &b->ws_o, e->split_rows, Hg, v, f);
        dcp_buffer_plan_add(bp, &b->ws_lse, e->split_rows, Hg, f, 1);
        /* a work item per (sequence, kv head, head tile): at most max_batch x Hg of them */
        dcp_buffer_plan_add(bp, &b->split_counters, e->max_batch, Hg, sizeof(uint32_t), 1);
    }
}

static int alloc_rank_buffers(struct dcp_rank *r)
{
    struct dcp_engine *e = r->engine;
    struct dcp_buffer_plan bp;
    plan_rank_buffers(e, &r->buf, &bp);
    for (int i = 0; i < bp.n; i++) {
        int err = e->ops->alloc(r, bp.bytes[i], bp.dst[i]);
        if (err)
            return err;
    }
    if (e->ring_bytes) { /* the sliding-window rings */
        int err = e->ops->alloc(r, e->ring_bytes, &r->ring_arena);
        if (err)
            return err;
    }
    if (e->ops->alloc_arena)
        return e->ops->alloc_arena(r, e->kv_bytes, &r->kv_arena);
    return e->ops->alloc(r, e->kv_bytes, &r->kv_arena);
}

/* The rank's copy of W_UV: per layer, the group's heads, which are consecutive in
 * the caller's global head order (the first is the group's first rank's). */
static int upload_w_uv(struct dcp_rank *r)
{
    const struct dcp_engine *e = r->engine;
    if (!e->merge_uv)
        return DCP_OK;
    const size_t head = (size_t)e->geo.v_dim * e->out_dim, layer = head * e->geo.gathered_heads;
    const size_t first = (size_t)r->group_id * e->geo.gathered_heads * head;
    for (uint32_t l = 0; l < e->num_layers; l++) {
        int err = e->ops->upload(r, r->buf.w_uv + l * layer * sizeof(float), e->params.w_uv[l] + first,
                                 layer * sizeof(float));
        if (err)
            return err;
    }
    return DCP_OK;
}

/* The fused split-KV combine's counters start at 0 (each launch leaves them so). */
static int zero_split_counters(struct dcp_rank *r)
{
    const struct dcp_engine *e = r->engine;
    if (!e->split_rows)
        return DCP_OK;
    const size_t bytes = (size_t)e->max_batch * e->geo.gathered_heads * sizeof(uint32_t);
    uint32_t *zeros = calloc(1, bytes);
    if (!zeros)
        return dcp_error(DCP_ENOMEM, "zeroing the split-KV counters: out of host memory");
    int err = e->ops->upload(r, r->buf.split_counters, zeros, bytes);
    free(zeros);
    return err;
}

static void free_rank_buffers(struct dcp_rank *r)
{
    struct dcp_engine *e = r->engine;
    struct dcp_buffer_plan bp;
    struct dcp_rank_buffers copy = r->buf;
    plan_rank_buffers(e, &copy, &bp);
    for (int i = 0; i < bp.n; i++)
        e->ops->free(r, *bp.dst[i]);
    e->ops->free(r, r->kv_arena);
    e->ops->free(r, r->ring_arena);
    memset(&r->buf, 0, sizeof(r->buf));
    r->kv_arena = 0;
    r->ring_arena = 0;
    free(r->user_bufs); /* the table; buffers the caller did not free stay the caller's leak */
    r->user_bufs = NULL;
    r->num_user_bufs = r->cap_user_bufs = 0;
}

/* Sizes the workspace once; every size is checked, so later plans cannot
 * overflow. The split-KV part holds rows of (split, query token) for up to
 * max_splits splits of the largest step, within SPLIT_WORKSPACE_CAP: a step of T
 * query tokens can use split_rows / T splits (choose_splits), so a one-token
 * decode step gets the most and a long multi-token step fewer. */
static int size_workspace(struct dcp_engine *e)
{
    /* Rows of one attention call (T * gathered heads) are 32-bit in the kernels. */
    const uint64_t rows = (uint64_t)e->max_qtokens * e->geo.gathered_heads;
    if (rows > INT32_MAX)
        return dcp_error(DCP_EINVAL, "max_query_tokens=%u x %u gathered heads = %llu rows: at most %d",
                         e->max_qtokens, e->geo.gathered_heads, (unsigned long long)rows, INT32_MAX);
    if (e->caps.max_splits == 0)
        e->caps.max_splits = 1;
    bool ovf = false;
    const uint64_t row_bytes = dcp_mul_u64(e->geo.gathered_heads, ((uint64_t)e->geo.v_dim + 1) * sizeof(float), &ovf);
    uint64_t split_rows = dcp_mul_u64(e->caps.max_splits, e->max_qtokens, &ovf);
    split_rows = DCP_MIN(split_rows, row_bytes ? SPLIT_WORKSPACE_CAP / row_bytes : 0);
    e->split_rows = e->caps.max_splits > 1 && split_rows >= 2 ? split_rows : 0; /* two splits of a token at least */
    struct dcp_rank_buffers b;
    struct dcp_buffer_plan bp;
    plan_rank_buffers(e, &b, &bp);
    e->workspace_bytes = 0;
    for (int i = 0; i < bp.n; i++)
        e->workspace_bytes = dcp_add_u64(e->workspace_bytes, bp.bytes[i], &bp.overflow);
    if (bp.overflow)
        return dcp_error(DCP_EINVAL, "the per-rank workspace for max_batch=%u, max_query_tokens=%u, "
                         "max_step_tokens=%u and %u gathered heads does not fit 64 bits",
                         e->max_batch, e->max_qtokens, e->max_tokens, e->geo.gathered_heads);
    return DCP_OK;
}

/* ---- step host arrays --------------------------------------------------- */

static int alloc_step(struct dcp_engine *e)
{
    struct dcp_step *s = &e->step;
    s->block_table = calloc((size_t)e->max_batch * e->max_blocks_per_seq, sizeof(int32_t));
    s->seq_lens = calloc(e->max_batch, sizeof(int32_t));
    s->q_start = calloc(e->max_batch + 1, sizeof(int32_t));
    s->token_keys = calloc(e->max_tokens, sizeof(uint64_t));
    s->slots = calloc((size_t)e->geo.dcp * e->max_tokens, sizeof(int64_t));
    s->seen = calloc(e->max_seqs, sizeof(uint32_t));
    if (!s->block_table || !s->seq_lens || !s->q_start || !s->token_keys || !s->slots || !s->seen)
        return dcp_error(DCP_ENOMEM, "step metadata");
    if (e->ring_pages) { /* the sliding-window rings (layers.c) */
        s->ring_table = calloc((size_t)e->max_batch * e->ring_pages, sizeof(int32_t));
        s->ring_slots = calloc((size_t)e->geo.dcp * e->max_tokens, sizeof(int64_t));
        e->ring_hi = calloc(e->max_seqs, sizeof(uint64_t));
        if (!s->ring_table || !s->ring_slots || !e->ring_hi)
            return dcp_error(DCP_ENOMEM, "step metadata of the rings");
    }
    return DCP_OK;
}

static void free_step(struct dcp_step *s)
{
    free(s->block_table);
    free(s->seq_lens);
    free(s->q_start);
    free(s->token_keys);
    free(s->slots);
    free(s->seen);
    free(s->ring_table);
    free(s->ring_slots);
    memset(s, 0, sizeof(*s));
}

/* ---- backend ----------------------------------------------------------------- */

static int open_backend(struct dcp_engine *e)
{
    struct dcp_backend_choice c;
    int err = dcp_backend_open(e, &c);
    if (err)
        return err;
    e->ops = c.ops;
    e->backend = c.state;
    e->caps = c.caps;
    snprintf(e->notice, sizeof(e->notice), "%s", c.notice);
    return DCP_OK;
}

/* Scratch one CPU work item needs for the largest launch of each kernel this
 * engine makes (the attention, merge, scale, append, reduce and fill launches
 * of rank.c at their largest), computed once from the final sizes. */
static size_t kernel_scratch(const struct dcp_engine *e)
{
    const uint32_t heads_per_kv = e->geo.q_per_kv_head;
    const uint32_t rows = e->max_qtokens * e->geo.gathered_heads;
    const struct dcpk_attn_params attn = {
        /* Distinct cache addresses unless V lives in the K rows (MLA): the CPU
         * kernel needs a V tile only when they differ. */
        .k_cache = 64,
        .v_cache = e->mla ? 64 : 128,
        .batch = e->max_batch,
        .num_q_tokens = e->max_qtokens,
        .num_heads = e->geo.gathered_heads,
        .heads_per_chunk = e->geo.q_heads_per_rank,
        .num_kv_heads = e->geo.kv_heads_per_rank,
        .head_tile = heads_per_kv,
        .qk_dim = e->geo.qk_dim,
        .v_dim = e->geo.v_dim,
        .v_row_stride = e->v_row_stride,
        .block_size = e->block_size,
        .max_blocks = e->max_blocks_per_seq,
        .group_size = e->geo.dcp,
        .interleave = e->interleave,
        .num_splits = e->caps.max_splits,
        .dtype = e->dtype,
        .q_dtype = e->act_dtype,
        .out_dtype = e->act_dtype,
    };
    const struct dcpk_merge_params merge = {
        .n_src = DCP_MAX(e->geo.dcp, e->caps.max_splits),
        .rows = rows,
        .rows_per_chunk = rows,
        .v_dim = e->geo.v_dim,
    };
    const struct dcpk_lse_scale_params scale = {
        .n_src = e->geo.dcp, .rows = rows, .rows_per_chunk = rows, .v_dim = e->geo.v_dim,
    };
    const struct dcpk_kv_append_params append = {
        .num_tokens = e->max_tokens, .num_kv_heads = e->geo.kv_heads_per_rank, .k_dim = e->geo.qk_dim,
        .v_dim = e->geo.v_dim, .block_size = e->block_size, .dtype = e->dtype,
    };
    const struct dcpk_reduce_params reduce = {.n_src = e->geo.dcp, .count = (uint64_t)rows * e->geo.v_dim};
    const struct dcpk_fill_params fill = {
        .rows = e->max_tokens, .heads = e->geo.gathered_heads, .dim = e->geo.qk_dim, .dtype = e->dtype,
    };
    const struct dcpk_uv_proj_params uv = {
        .num_tokens = e->max_qtokens, .num_heads = e->geo.gathered_heads, .heads_per_chunk = e->geo.q_heads_per_rank,
        .in_dim = e->geo.v_dim, .out_dim = e->out_dim, .dst_dtype = e->act_dtype,
    };
    /* The layer kinds' (layers.c): the sink needs none. */
    const struct dcpk_sink_params sink = {.rows = rows, .num_heads = e->geo.q_heads_per_rank, .v_dim = e->out_dim};
    const struct dcpk_sparse_attn_params sparse = {
        .num_heads = e->geo.gathered_heads, .num_kv_heads = e->geo.kv_heads_per_rank, .head_tile = heads_per_kv,
        .qk_dim = e->geo.qk_dim, .v_dim = e->geo.v_dim,
    };
    const struct dcpk_index_score_params index = {
        .num_index_heads = e->cfg->model.index_heads, .index_dim = e->cfg->model.index_head_dim,
    };
    const struct dcpk_topk_params topk = {.k = e->max_topk};
    /* Every family is sized here: a new one in DCPK_KERNEL_FAMILIES must be added. */
    _Static_assert(DCPK_KERNEL_COUNT == 11, "kernel_scratch: size the scratch of every kernel family");
    size_t need = dcpk_kernels[DCPK_KERNEL_attn].scratch(&attn);
    need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_sink].scratch(&sink));
    if (e->max_topk) {
        need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_sparse_attn].scratch(&sparse));
        need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_index_score].scratch(&index));
        need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_topk].scratch(&topk));
    }
    need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_merge].scratch(&merge));
    need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_lse_scale].scratch(&scale));
    need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_kv_append].scratch(&append));
    need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_reduce].scratch(&reduce));
    need = DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_uv_proj].scratch(&uv));
    return DCP_MAX(need, dcpk_kernels[DCPK_KERNEL_fill].scratch(&fill));
}

/* ---- create / destroy ----------------------------------------------------- */

DCP_API int dcp_engine_create(const struct dcp_engine_params *params, dcp_engine **out)
{
    dcp_clear_error();
    if (out)
        *out = NULL;
    if (!params || !out || !params->deployment)
        return dcp_error(DCP_EINVAL, "engine_create: params, params->deployment and out are required");
    int err = outside_rank_function("engine_create");
    if (err)
        return err;
    struct dcp_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return dcp_error(DCP_ENOMEM, "engine");
    e->params = *params;
    e->cfg = dcp_deployment_config(params->deployment);
    err = resolve_shape(e);
    if (err)
        goto fail;
    err = open_backend(e);
    if (err || (err = dcp_engine_layers_check_backend(e)) || (err = dcp_merge_resolve(e)))
        goto fail;
    err = size_pools(e, e->caps.host_memory);
    if (err)
        goto fail;
    err = size_workspace(e);
    if (err)
        goto fail;
    e->kernel_scratch_bytes = kernel_scratch(e);
    struct dcp_kv_manager_params kp = {
        .num_blocks = e->num_blocks,
        .block_size = e->block_size,
        .group_size = e->geo.dcp,
        .max_seqs = e->max_seqs,
        .max_context = e->max_context,
    };
    err = dcp_kv_manager_create(&kp, &e->kv);
    if (err)
        goto fail;
    err = alloc_step(e);
    if (err)
        goto fail;
    e->ranks = calloc(e->num_ranks, sizeof(*e->ranks));
    if (!e->ranks) {
        err = dcp_error(DCP_ENOMEM, "ranks");
        goto fail;
    }
    for (uint32_t i = 0; i < e->num_ranks; i++) {
        struct dcp_rank *r = &e->ranks[i];
        r->engine = e;
        r->local_index = i;
        r->tp_rank = e->params.rank_begin + i;
        r->group_rank = r->tp_rank % e->geo.dcp;
        r->group_id = r->tp_rank / e->geo.dcp;
        err = e->ops->rank_init(r);
        e->ranks_initialised = i + 1;
        if (err)
            goto fail;
        err = alloc_rank_buffers(r);
        if (!err)
            err = upload_w_uv(r);
        if (!err)
            err = zero_split_counters(r);
        if (!err)
            err = dcp_merge_rank_init(r);
        if (!err)
            err = dcp_engine_layers_rank_init(r);
        if (err)
            goto fail;
    }
    if (e->ops->engine_start && (err = e->ops->engine_start(e)))
        goto fail;
    *out = e;
    dcp_clear_error(); /* a CUDA backend that fell back to host left its reason */
    return DCP_OK;
fail:
    dcp_engine_destroy(&e);
    return err;
}

DCP_API void dcp_engine_destroy(dcp_engine **engine)
{
    if (!engine || !*engine)
        return;
    struct dcp_engine *e = *engine;
    /* Refused (the engine stays as it was, *engine too): its rank threads are running. */
    if (outside_rank_function("engine_destroy") || dcp_engine_check_idle(e, "engine_destroy"))
        return;
    if (e->ranks && e->ops && e->ops->engine_stop)
        e->ops->engine_stop(e);
    if (e->ranks) {
        for (uint32_t i = 0; i < e->ranks_initialised; i++) {
            free_rank_buffers(&e->ranks[i]);
            e->ops->rank_fini(&e->ranks[i]);
        }
        free(e->ranks);
    }
    if (e->ops)
        e->ops->engine_fini(e->backend);
    free_step(&e->step);
    free(e->ring_hi);
    dcp_engine_layers_free(e);
    dcp_kv_manager_destroy(&e->kv);
    free(e);
    *engine = NULL;
}

DCP_API void dcp_engine_get_info(const dcp_engine *e, struct dcp_engine_info *info)
{
    if (need_engine(e, "engine_get_info") || !info)
        return;
    *info = (struct dcp_engine_info){
        .backend = e->ops->name,
        .backend_detail = e->caps.detail,
        .backend_notice = e->notice,
        .backend_libraries = e->caps.libraries,
        .tp = e->geo.tp,
        .dcp = e->geo.dcp,
        .num_local_ranks = e->num_ranks,
        .num_layers = e->num_layers,
        .q_heads_per_rank = e->geo.q_heads_per_rank,
        .kv_heads_per_rank = e->geo.kv_heads_per_rank,
        .gathered_heads = e->geo.gathered_heads,
        .qk_dim = e->geo.qk_dim,
        .v_dim = e->geo.v_dim,
        .out_dim = e->out_dim,
        .replicate_q = e->replicate_q,
        .merge_after_uv = e->merge_uv,
        .block_size = e->block_size,
        .num_blocks = e->num_blocks,
        .tokens_per_block = (uint64_t)e->block_size * e->geo.dcp,
        .kv_bytes_per_rank = e->kv_bytes + e->ring_bytes,
        .workspace_bytes_per_rank = e->workspace_bytes,
        .max_batch = e->max_batch,
        .max_query_tokens = e->max_qtokens,
        .max_step_tokens = e->max_tokens,
        .max_seqs = e->max_seqs,
        .max_context = e->max_context,
        .act_dtype = (enum dcp_dtype)e->act_dtype,
        .comm_dtype = (enum dcp_dtype)e->part_dtype,
        .comm = e->comm,
        .layers = e->layer_kinds,
        .ring_pages = e->ring_pages,
    };
}

DCP_API dcp_rank *dcp_engine_rank(dcp_engine *e, uint32_t i)
{
    dcp_clear_error();
    if (!e || i >= e->num_ranks) {
        dcp_error(DCP_EINVAL, "engine_rank: no local rank %u (%u local ranks)", i, e ? e->num_ranks : 0);
        return NULL;
    }
    return &e->ranks[i];
}

/* ---- failure, abort and recovery ------------------------------------------ */

DCP_API void dcp_engine_abort(dcp_engine *e)
{
    if (!e)
        return;
    atomic_store(&e->aborted, 1);
    if (e->ops && e->ops->abort)
        e->ops->abort(e);
}

/* Called between steps (no rank function runs): an engine whose step was aborted
 * is made usable again when the backend can restart its collectives; otherwise,
 * or when it failed before, every call from now on is refused. */
/* Forgets which thread made the ranks' step calls (check_group_threads, rank.c): a
 * step run again after an abort, or by new threads (whose ids may be those of the
 * last run's), starts afresh. */
static void forget_step_threads(struct dcp_engine *e)
{
    for (uint32_t i = 0; i < e->num_ranks; i++)
        atomic_store(&e->ranks[i].step_thread, 0);
}

static int settle(struct dcp_engine *e)
{
    if (!atomic_load(&e->failed) && atomic_exchange(&e->aborted, 0)) {
        forget_step_threads(e);
        int err = e->ops->recover ? e->ops->recover(e)
                                  : dcp_error(DCP_EABORTED, "the %s backend cannot restart its collectives",
                                              e->ops->name);
        if (!err)
            err = dcp_merge_recover(e);
        if (err)
            dcp_engine_fail(e, dcp_last_error()[0] ? dcp_last_error() : dcp_strerror(err));
    }
    if (atomic_load(&e->failed))
        return dcp_error(DCP_EABORTED, "the engine failed after an abort (%s): destroy it", e->failure);
    return DCP_OK;
}

void dcp_engine_fail(struct dcp_engine *e, const char *why)
{
    int first = 0;
    if (atomic_compare_exchange_strong(&e->failing, &first, 1)) {
        snprintf(e->failure, sizeof(e->failure), "%s", why);
        atomic_store(&e->failed, 1);
    }
}

int dcp_engine_check_usable(const struct dcp_engine *e)
{
    return atomic_load(&e->failed) ? dcp_error(DCP_EABORTED, "the engine failed after an abort (%s): destroy it",
                                               e->failure)
                                   : DCP_OK;
}

/* ---- scheduler front end -------------------------------------------------- */

DCP_API int dcp_seq_create(dcp_engine *e, uint32_t *seq_id)
{
    int err = need_idle_engine(e, "seq_create");
    if (!err && !seq_id)
        err = dcp_error(DCP_EINVAL, "seq_create: seq_id is NULL");
    if (err || (err = dcp_kv_seq_create(e->kv, seq_id)))
        return err;
    dcp_engine_layers_seq_reset(e, *seq_id, UINT32_MAX); /* its rings start empty */
    return DCP_OK;
}

/* Changing a sequence invalidates the step (its block tables and slots). */
DCP_API int dcp_seq_extend(dcp_engine *e, uint32_t seq_id, uint32_t n)
{
    int err = need_idle_engine(e, "seq_extend");
    if (err)
        return err;
    e->step.valid = false;
    return dcp_kv_seq_extend(e->kv, seq_id, n);
}

DCP_API int dcp_seq_truncate(dcp_engine *e, uint32_t seq_id, uint64_t len)
{
    int err = need_idle_engine(e, "seq_truncate");
    if (err)
        return err;
    if ((err = dcp_kv_seq_check(e->kv, seq_id, "seq_truncate")) ||
        (err = dcp_engine_layers_check_truncate(e, seq_id, len)))
        return err;
    e->step.valid = false;
    if ((err = dcp_kv_seq_truncate(e->kv, seq_id, len)))
        return err;
    if (len == 0)
        dcp_engine_layers_seq_reset(e, seq_id, UINT32_MAX);
    return DCP_OK;
}

DCP_API int dcp_seq_fork(dcp_engine *e, uint32_t src, uint32_t *seq_id)
{
    int err = need_idle_engine(e, "seq_fork");
    if (!err && !seq_id)
        err = dcp_error(DCP_EINVAL, "seq_fork: seq_id is NULL");
    if (err || (err = dcp_kv_seq_fork(e->kv, src, seq_id)))
        return err;
    /* The child's window rings are copies of the parent's. */
    dcp_engine_layers_seq_reset(e, *seq_id, src);
    return dcp_engine_layers_fork(e, src, *seq_id);
}

DCP_API int dcp_seq_release(dcp_engine *e, uint32_t seq_id)
{
    int err = need_idle_engine(e, "seq_release");
    if (err)
        return err;
    e->step.valid = false;
    return dcp_kv_seq_release(e->kv, seq_id);
}

DCP_API uint64_t dcp_seq_length(const dcp_engine *e, uint32_t seq_id)
{
    if (need_engine(e, "seq_length") || dcp_kv_seq_check(e->kv, seq_id, "seq_length"))
        return 0;
    return dcp_kv_seq_length(e->kv, seq_id);
}

DCP_API uint64_t dcp_engine_free_blocks(const dcp_engine *e)
{
    return need_engine(e, "engine_free_blocks") ? 0 : dcp_kv_free_blocks(e->kv);
}

DCP_API uint64_t dcp_engine_blocks_for(const dcp_engine *e, uint64_t len)
{
    return need_engine(e, "engine_blocks_for") ? 0 : dcp_kv_blocks_for(e->kv, len);
}

/* ---- step metadata -------------------------------------------------------- */

/* The step writes positions [from, len) of sequence id: refuse when one lies in a
 * block that another sequence shares (a fork's prefix) or that the prefix cache
 * published, whose KV others read. */
static int check_writable(const struct dcp_engine *e, uint32_t id, uint64_t from, uint64_t len)
{
    const int32_t *blocks = dcp_kv_seq_blocks(e->kv, id, NULL);
    const uint64_t per_block = dcp_kv_tokens_per_block(e->kv);
    for (uint64_t i = from / per_block; i <= (len - 1) / per_block; i++)
        if (dcp_kv_block_refcount(e->kv, blocks[i]) > 1 || dcp_kv_block_published(e->kv, blocks[i]))
            return dcp_error(DCP_EINVAL, "begin_step: sequence %u would write positions %llu..%llu, but positions "
                             "%llu..%llu are in a block it shares with a fork or the prefix cache (a shared "
                             "prefix is read-only; query only positions from %llu on)", id, (unsigned long long)from,
                             (unsigned long long)(len - 1), (unsigned long long)(i * per_block),
                             (unsigned long long)((i + 1) * per_block - 1), (unsigned long long)((i + 1) * per_block));
    return DCP_OK;
}

static int check_batch(struct dcp_engine *e, const struct dcp_batch *b)
{
    if (!b || (b->num_seqs && (!b->seq_ids || !b->q_lens)))
        return dcp_error(DCP_EINVAL, "begin_step: batch arrays missing");
    if (b->num_seqs > e->max_batch)
        return dcp_error(DCP_EINVAL, "begin_step: %u sequences, max_batch is %u", b->num_seqs,
                         e->max_batch);
    struct dcp_step *s = &e->step;
    if (++s->stamp == 0) {
        memset(s->seen, 0, e->max_seqs * sizeof(*s->seen));
        s->stamp = 1;
    }
    uint64_t tokens = 0;
    for (uint32_t i = 0; i < b->num_seqs; i++) {
        const uint32_t id = b->seq_ids[i];
        int err = dcp_kv_seq_check(e->kv, id, "begin_step");
        if (err)
            return err;
        const uint32_t slot = dcp_kv_seq_slot(e->kv, id);
        if (s->seen[slot] == s->stamp)
            return dcp_error(DCP_EINVAL, "begin_step: sequence %u appears twice", id);
        s->seen[slot] = s->stamp;
        const uint64_t len = dcp_kv_seq_length(e->kv, id);
        if (b->q_lens[i] == 0 || b->q_lens[i] > len)
            return dcp_error(DCP_EINVAL, "begin_step: sequence %u has %llu tokens, q_len %u", id,
                             (unsigned long long)len, b->q_lens[i]);
        tokens += b->q_lens[i];
        if (tokens > e->max_tokens)
            return dcp_error(DCP_EINVAL, "begin_step: more than max_step_tokens=%u query tokens (%llu up to "
                             "sequence %u)", e->max_tokens, (unsigned long long)tokens, id);
        if ((err = check_writable(e, id, len - b->q_lens[i], len)))
            return err;
    }
    return DCP_OK;
}

/* Fills the host copy of the step: block tables, lengths, query offsets, and for
 * every group rank the slot each new token is written to (or -1). */
static void build_step(struct dcp_engine *e, const struct dcp_batch *b)
{
    struct dcp_step *s = &e->step;
    const uint32_t N = e->geo.dcp, I = e->interleave, B = e->block_size;
    /* The row stride: the step's longest table, or in graph mode the longest any
     * step may have, so that a captured step's stride holds for every later one. */
    uint32_t max_blocks = 1;
    for (uint32_t i = 0; i < b->num_seqs && !e->params.graphs; i++) {
        uint32_t n = 0;
        dcp_kv_seq_blocks(e->kv, b->seq_ids[i], &n);
        max_blocks = DCP_MAX(max_blocks, n);
    }
    if (e->params.graphs)
        max_blocks = DCP_MAX(1u, e->max_blocks_per_seq);
    s->batch = b->num_seqs;
    s->max_blocks = max_blocks;
    uint32_t t = 0;
    s->q_start[0] = 0;
    for (uint32_t i = 0; i < b->num_seqs; i++) {
        uint32_t n = 0;
        const int32_t *blocks = dcp_kv_seq_blocks(e->kv, b->seq_ids[i], &n);
        int32_t *row = s->block_table + (size_t)i * max_blocks;
        memcpy(row, blocks, n * sizeof(int32_t));
        memset(row + n, 0, (max_blocks - n) * sizeof(int32_t));
        const uint64_t len = dcp_kv_seq_length(e->kv, b->seq_ids[i]);
        s->seq_lens[i] = (int32_t)len;
        for (uint64_t p = len - b->q_lens[i]; p < len; p++, t++) {
            s->token_keys[t] = dcp_token_key(b->seq_ids[i], p);
            const uint32_t owner = dcpk_owner_rank(p, N, I);
            const uint64_t local = dcpk_local_index(p, N, I);
            const int64_t slot = (int64_t)row[local / B] * B + (int64_t)(local % B);
            for (uint32_t r = 0; r < N; r++)
                s->slots[(size_t)r * e->max_tokens + t] = r == owner ? slot : -1;
        }
        s->q_start[i + 1] = (int32_t)t;
    }
    s->tokens = t;
}

/*
 * Split-KV factor of this step, from its real sizes and the backend's slots (the
 * attention blocks it runs at once: SMs x resident blocks per SM): the step's
 * work items (sequences x KV heads x head tiles) are split as far as one whole
 * wave holds, never into a partial second wave; a step that fills the slots
 * already is not split. Never more splits than the longest local sequence has
 * pages, than max_splits, or than the workspace holds for this step's tokens.
 * In graph mode (params.graphs) the longest sequence any step may have stands in
 * for the step's longest, so the factor depends on the batch and tokens only (a
 * captured step replays with it; shorter sequences leave the last splits empty,
 * which the kernels and the merge handle).
 */
static uint32_t choose_splits(const struct dcp_engine *e)
{
    const struct dcp_step *s = &e->step;
    if (e->split_rows == 0 || s->batch == 0 || s->tokens == 0)
        return 1;
    const uint32_t heads_per_kv = e->geo.q_per_kv_head;
    const uint32_t tile = dcp_engine_head_tile(e);
    const uint64_t base = (uint64_t)s->batch * e->geo.kv_heads_per_rank * dcp_div_ceil_u64(heads_per_kv, tile);
    if (e->split_override)
        return (uint32_t)DCP_MAX(1, DCP_MIN(DCP_MIN(e->split_override, e->caps.max_splits), e->split_rows / s->tokens));
    uint64_t want = e->caps.parallelism / base;
    uint64_t longest_pages = e->params.graphs ? e->max_blocks_per_seq : 0;
    for (uint32_t i = 0; i < s->batch && !e->params.graphs; i++) {
        const uint64_t local = dcpk_local_length((uint64_t)s->seq_lens[i], 0, e->geo.dcp, e->interleave);
        longest_pages = DCP_MAX(longest_pages, dcp_div_ceil_u64(local, e->block_size));
    }
    want = DCP_MIN(want, longest_pages);
    want = DCP_MIN(want, (uint64_t)e->caps.max_splits);
    want = DCP_MIN(want, e->split_rows / s->tokens);
    return (uint32_t)DCP_MAX(want, 1);
}

DCP_API int dcp_engine_begin_step(dcp_engine *e, const struct dcp_batch *b)
{
    int err = need_idle_engine(e, "begin_step");
    if (err)
        return err;
    if (atomic_load(&e->capturing))
        return dcp_error(DCP_EINVAL, "begin_step: %u rank(s) are capturing a graph (dcp_rank_capture_begin): end "
                         "the capture first; the graph reads the metadata begin_step writes",
                         atomic_load(&e->capturing));
    e->step.valid = false;
    if ((err = settle(e)) || (err = check_batch(e, b)))
        return err;
    build_step(e, b);
    dcp_engine_layers_build_step(e, b);
    e->step_id++;
    struct dcp_step *s = &e->step;
    s->num_splits = choose_splits(e);
    for (uint32_t i = 0; i < e->num_ranks; i++) {
        struct dcp_rank *r = &e->ranks[i];
        const struct dcp_backend_ops *ops = e->ops;
        const int64_t *slots = s->slots + (size_t)r->group_rank * e->max_tokens;
        /* The device buffers stay where they are (a captured step reads them there). */
        if ((ops->step_uploads && (err = ops->step_uploads(r))) ||
            (err = ops->upload(r, r->buf.block_table, s->block_table,
                               (size_t)s->batch * s->max_blocks * sizeof(int32_t))) ||
            (err = ops->upload(r, r->buf.seq_lens, s->seq_lens, s->batch * sizeof(int32_t))) ||
            (err = ops->upload(r, r->buf.q_start, s->q_start, (s->batch + 1) * sizeof(int32_t))) ||
            (err = ops->upload(r, r->buf.slots, slots, s->tokens * sizeof(int64_t))) ||
            (err = ops->upload(r, r->buf.token_keys, s->token_keys, s->tokens * sizeof(uint64_t))) ||
            (err = dcp_engine_layers_upload_step(r)))
            return err;
    }
    s->valid = true;
    return DCP_OK;
}

DCP_API int dcp_engine_step_launch(const dcp_engine *e, struct dcp_step_launch *out)
{
    if (!e || !out || !e->step.valid)
        return dcp_error(DCP_EINVAL, "step_launch: no step (call dcp_engine_begin_step first)");
    const struct dcpk_attn_params p = {
        .batch = e->step.batch,
        .num_heads = e->geo.gathered_heads,
        .num_kv_heads = e->geo.kv_heads_per_rank,
        .head_tile = dcp_engine_head_tile(e),
        .num_splits = e->step.num_splits,
    };
    const struct dcpk_grid g = dcpk_kernels[DCPK_KERNEL_attn].grid(&p);
    *out = (struct dcp_step_launch){
        .num_splits = e->step.num_splits,
        .grid = {g.x, g.y, g.z},
        .blocks = dcpk_grid_items(g),
        .slots = e->caps.parallelism,
        .blocks_per_sm = e->caps.blocks_per_sm,
        .max_splits = e->caps.max_splits,
    };
    return DCP_OK;
}

/* ---- graph shapes ----------------------------------------------------------- */

static struct dcp_graph_shape step_shape(const struct dcp_engine *e)
{
    return (struct dcp_graph_shape){
        .num_seqs = e->step.batch,
        .num_tokens = e->step.tokens,
        .num_splits = e->step.num_splits,
        .block_stride = e->step.max_blocks,
    };
}

DCP_API int dcp_engine_graph_shape(const dcp_engine *e, struct dcp_graph_shape *out)
{
    int err = need_engine(e, "engine_graph_shape");
    if (err)
        return err;
    if (!out || !e->step.valid)
        return dcp_error(DCP_EINVAL, "engine_graph_shape: %s", out ? "no step (call dcp_engine_begin_step first)"
                                                                    : "out is NULL");
    if (!e->params.graphs)
        return dcp_error(DCP_ENOTSUP, "engine_graph_shape: the engine was created without params.graphs = true: "
                         "its block table stride and split-KV factor follow the lengths, so no captured step "
                         "would replay");
    *out = step_shape(e);
    return DCP_OK;
}

DCP_API int dcp_engine_graph_check(const dcp_engine *e, const struct dcp_graph_shape *g)
{
    int err = need_engine(e, "engine_graph_check");
    if (err)
        return err;
    if (!g || !e->step.valid)
        return dcp_error(DCP_EINVAL, "graph_check: %s", g ? "no step (call dcp_engine_begin_step first)"
                                                          : "the captured shape is NULL");
    const struct dcp_graph_shape s = step_shape(e);
    if (s.num_seqs != g->num_seqs || s.num_tokens != g->num_tokens)
        return dcp_error(DCP_EINVAL, "graph_check: this step has %u sequences and %u query tokens, the graph was "
                         "captured for %u sequences and %u query tokens: replaying it would be wrong; run the step "
                         "eagerly or capture a graph of this shape", s.num_seqs, s.num_tokens, g->num_seqs,
                         g->num_tokens);
    if (s.num_splits != g->num_splits || s.block_stride != g->block_stride)
        return dcp_error(DCP_EINVAL, "graph_check: this step uses %u split(s) and a block table stride of %u, the "
                         "graph was captured with %u and %u%s: replaying it would be wrong", s.num_splits,
                         s.block_stride, g->num_splits, g->block_stride,
                         e->params.graphs ? "" : " (create the engine with params.graphs = true)");
    return DCP_OK;
}

/* ---- rank threads --------------------------------------------------------- */

/* Rank threads start only once all of them exist, so a failed pthread_create
 * cancels the run before any rank function ran. */
struct run_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0: wait, 1: run, -1: cancelled */
};

struct rank_job {
    dcp_rank_fn fn;
    void *arg;
    struct dcp_rank *rank;
    struct run_gate *gate;
    int result;
    char message[256]; /* the rank thread's dcp_last_error() when it failed */
};

/* A rank function failed inside dcp_engine_run: its peers may wait for it in a
 * collective, so the step is aborted (they return DCP_EABORTED). */
static int run_rank(struct rank_job *job)
{
    const struct dcp_engine *outer = rank_fn_engine;
    rank_fn_engine = job->rank->engine;
    job->result = job->fn(job->rank, job->arg);
    rank_fn_engine = outer;
    if (job->result) {
        snprintf(job->message, sizeof(job->message), "%s", dcp_last_error());
        if (job->result != DCP_EABORTED)
            dcp_engine_abort(job->rank->engine);
    }
    return job->result;
}

static void *rank_thread(void *p)
{
    struct rank_job *job = p;
    pthread_mutex_lock(&job->gate->mu);
    while (job->gate->state == 0)
        pthread_cond_wait(&job->gate->cv, &job->gate->mu);
    const bool run = job->gate->state > 0;
    pthread_mutex_unlock(&job->gate->mu);
    if (run)
        run_rank(job);
    return NULL;
}

static void open_gate(struct run_gate *g, int state)
{
    pthread_mutex_lock(&g->mu);
    g->state = state;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* The root cause among the jobs: the first failure that is not a consequence of
 * another, with its message carried over to the calling thread. */
static int report_jobs(const struct rank_job *jobs, uint32_t n)
{
    int culprit = -1;
    for (uint32_t i = 0; i < n && culprit < 0; i++)
        if (jobs[i].result && jobs[i].result != DCP_EABORTED)
            culprit = (int)i;
    for (uint32_t i = 0; i < n && culprit < 0; i++)
        if (jobs[i].result)
            culprit = (int)i;
    if (culprit < 0)
        return DCP_OK;
    const struct rank_job *j = &jobs[culprit];
    return dcp_error(j->result, "rank %u: %s", j->rank->tp_rank, j->message[0] ? j->message : dcp_strerror(j->result));
}

static int run_threads(struct dcp_engine *e, struct rank_job *jobs, pthread_t *threads)
{
    struct run_gate gate = {.state = 0};
    pthread_mutex_init(&gate.mu, NULL);
    pthread_cond_init(&gate.cv, NULL);
    uint32_t started = 0;
    int create_err = 0;
    for (; started < e->num_ranks; started++) {
        jobs[started].gate = &gate;
        if ((create_err = pthread_create(&threads[started], NULL, rank_thread, &jobs[started])))
            break;
    }
    open_gate(&gate, create_err ? -1 : 1);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    pthread_cond_destroy(&gate.cv);
    pthread_mutex_destroy(&gate.mu);
    if (create_err)
        return dcp_error(DCP_ENOMEM, "engine_run: cannot start a thread for rank %u (pthread_create: %s); "
                         "no rank function ran", e->ranks[started].tp_rank, strerror(create_err));
    return report_jobs(jobs, e->num_ranks);
}

DCP_API int dcp_engine_run(dcp_engine *e, dcp_rank_fn fn, void *arg)
{
    dcp_clear_error();
    if (!e || !fn)
        return dcp_error(DCP_EINVAL, "engine_run: engine and fn are required");
    int err = outside_rank_function("engine_run");
    if (err)
        return err;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&e->running, &idle, 1))
        return dcp_error(DCP_EINVAL, "engine_run: called while another thread's dcp_engine_run runs this "
                         "engine's rank functions; one run at a time");
    if ((err = settle(e))) {
        atomic_store(&e->running, 0);
        return err;
    }
    forget_step_threads(e);
    struct rank_job *jobs = calloc(e->num_ranks, sizeof(*jobs));
    if (!jobs) {
        atomic_store(&e->running, 0);
        return dcp_error(DCP_ENOMEM, "engine_run: rank jobs");
    }
    for (uint32_t i = 0; i < e->num_ranks; i++)
        jobs[i] = (struct rank_job){.fn = fn, .arg = arg, .rank = &e->ranks[i]};
    if (e->num_ranks == 1) {
        err = run_rank(&jobs[0]) ? report_jobs(jobs, 1) : DCP_OK;
    } else {
        pthread_t *threads = calloc(e->num_ranks, sizeof(*threads));
        err = threads ? run_threads(e, jobs, threads) : dcp_error(DCP_ENOMEM, "engine_run: rank threads");
        free(threads);
    }
    free(jobs);
    atomic_store(&e->running, 0);
    if (!err)
        dcp_clear_error();
    return err;
}
