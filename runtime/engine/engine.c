/*
 * engine.c: engine creation, the scheduler front end, step metadata, rank threads.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/plan.h"
#include "comm/launch_env.h"
#include "dcp_kernels/placement.h"
#include "engine/engine_internal.h"
#include "util/util.h"

/* Workspace for split-KV partials is capped so huge shapes fall back to fewer splits. */
#define SPLIT_WORKSPACE_CAP (256ull << 20)

DCP_API void dcp_engine_default_params(struct dcp_engine_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof(*p));
    p->max_batch = 64;
    p->max_seqs = 4096;
}

/* ---- shape -------------------------------------------------------------- */

/* Checks that dcp suits the model and tp (the deployment validated its own dcp;
 * an override such as the baseline's dcp = 1 is checked here). */
static int check_dcp(const struct dcp_config *cfg, uint32_t dcp)
{
    const uint32_t tp = cfg->parallel.tp;
    if (dcp == 0 || tp % dcp)
        return dcp_error(DCP_EINVAL, "dcp=%u does not divide tp=%u", dcp, tp);
    if (cfg->model.attention != DCP_ATTN_MLA) {
        const uint32_t kv = cfg->model.num_kv_heads;
        const uint32_t replicas = tp >= kv ? tp / kv : 1;
        if (replicas % dcp)
            return dcp_error(DCP_EINVAL, "dcp=%u does not divide the %u KV replicas (tp=%u, kv_heads=%u)",
                             dcp, replicas, tp, kv);
    }
    return DCP_OK;
}

/* Started by a launcher (srun, mpirun, torchrun) as one process per GPU: this
 * process drives the one TP rank the launcher gave it, unless the caller chose. */
static int adopt_launcher_rank(struct dcp_engine *e)
{
    if (e->params.rank_count || e->params.rank_begin || e->cfg->runtime.backend == DCP_BACKEND_HOST)
        return DCP_OK;
    struct dcp_launch_env env;
    int err = dcp_launch_env_detect(&env);
    if (err || env.world_size <= 1)
        return err;
    if (env.world_size != e->tp)
        return dcp_error(DCP_EINVAL, "%s started %u processes but tp=%u: start one process per TP rank",
                         env.launcher, env.world_size, e->tp);
    e->params.rank_begin = env.rank;
    e->params.rank_count = 1;
    return DCP_OK;
}

static int resolve_shape(struct dcp_engine *e)
{
    const struct dcp_config *cfg = e->cfg;
    const struct dcp_model_config *m = &cfg->model;
    e->tp = cfg->parallel.tp;
    e->dcp = e->params.dcp ? e->params.dcp : cfg->parallel.dcp;
    int err = check_dcp(cfg, e->dcp);
    if (err)
        return err;
    e->interleave = cfg->parallel.interleave;
    e->block_size = cfg->memory.block_size;
    e->num_layers = e->params.num_layers ? e->params.num_layers : m->num_layers;
    e->mla = m->attention == DCP_ATTN_MLA;
    e->q_heads_per_rank = m->num_q_heads / e->tp;
    if (e->mla)
        e->kv_heads_per_rank = 1;
    else
        e->kv_heads_per_rank = e->tp >= m->num_kv_heads ? 1 : m->num_kv_heads / e->tp;
    e->gathered_heads = e->dcp * e->q_heads_per_rank;
    dcp_model_attention_dims(m, &e->qk_dim, &e->v_dim);
    e->v_row_stride = e->mla ? e->qk_dim : e->v_dim;
    e->dtype = (uint32_t)m->kv_dtype;
    e->scale = (float)m->softmax_scale;
    e->kv_scale = (float)m->kv_scale;
    e->comm = cfg->parallel.comm;
    if (e->interleave == 0 || e->block_size % e->interleave)
        return dcp_error(DCP_EINVAL, "block_size=%u is not a multiple of interleave=%u",
                         e->block_size, e->interleave);
    int lerr = adopt_launcher_rank(e);
    if (lerr)
        return lerr;
    if (e->params.rank_begin >= e->tp)
        return dcp_error(DCP_EINVAL, "rank_begin=%u but tp=%u", e->params.rank_begin, e->tp);
    e->num_ranks = e->params.rank_count ? e->params.rank_count : e->tp - e->params.rank_begin;
    if (e->params.rank_begin + e->num_ranks > e->tp)
        return dcp_error(DCP_EINVAL, "ranks %u..%u exceed tp=%u", e->params.rank_begin,
                         e->params.rank_begin + e->num_ranks - 1, e->tp);
    return DCP_OK;
}

/* KV budget per rank: explicit, else the host's emulated memory, else the plan's budget. */
static double kv_budget(const struct dcp_engine *e, bool host)
{
    if (e->params.kv_budget_bytes > 0)
        return e->params.kv_budget_bytes;
    const struct dcp_config *cfg = e->cfg;
    if (host && cfg->runtime.host.memory_bytes > 0)
        return cfg->runtime.host.memory_bytes * cfg->memory.gpu_fraction;
    const double usable = cfg->hardware.memory_bytes * cfg->memory.gpu_fraction;
    const double weights = cfg->model.num_params * dcp_weight_dtype_bytes(cfg->model.weight_dtype) /
                           cfg->parallel.tp;
    return usable - weights - cfg->memory.reserve_bytes;
}

static int size_pools(struct dcp_engine *e, bool host)
{
    const struct dcp_config *cfg = e->cfg;
    const uint64_t esize = dcpk_dtype_size(e->dtype);
    e->k_page_bytes = (uint64_t)e->kv_heads_per_rank * e->block_size * e->qk_dim * esize;
    e->v_page_bytes = e->mla ? 0 : (uint64_t)e->kv_heads_per_rank * e->block_size * e->v_dim * esize;
    const uint64_t page_all_layers = (e->k_page_bytes + e->v_page_bytes) * e->num_layers;
    const double budget = kv_budget(e, host);
    if (budget < (double)page_all_layers)
        return dcp_error(DCP_ENOSPC, "KV budget of %.0f bytes per rank holds no page of %llu bytes "
                         "(%u layers x %u tokens)", budget, (unsigned long long)page_all_layers,
                         e->num_layers, e->block_size);
    e->num_blocks = (uint64_t)(budget / (double)page_all_layers);
    if (e->num_blocks > INT32_MAX)
        e->num_blocks = INT32_MAX;
    e->layer_bytes = (e->k_page_bytes + e->v_page_bytes) * e->num_blocks;
    e->kv_bytes = e->layer_bytes * e->num_layers;

    uint64_t longest = 0;
    for (uint32_t i = 0; i < cfg->workload.num_context_lengths; i++)
        longest = DCP_MAX(longest, cfg->workload.context_lengths[i]);
    e->max_context = e->params.max_context ? e->params.max_context : longest + 1024;
    const uint64_t per_block = (uint64_t)e->block_size * e->dcp;
    const uint64_t mb = dcp_div_ceil_u64(e->max_context, per_block);
    if (mb > INT32_MAX)
        return dcp_error(DCP_EINVAL, "max_context=%llu is too long", (unsigned long long)e->max_context);
    e->max_blocks_per_seq = (uint32_t)mb;
    e->max_batch = e->params.max_batch ? e->params.max_batch : 64;
    e->max_qtokens = e->params.max_query_tokens ? e->params.max_query_tokens
                                                : e->max_batch * DCP_MAX(1u, cfg->workload.q_len);
    e->max_tokens = DCP_MAX(e->params.max_step_tokens, e->max_qtokens);
    e->max_seqs = e->params.max_seqs ? e->params.max_seqs : 4096;
    return DCP_OK;
}

/* ---- per-rank buffers --------------------------------------------------- */

struct buffer_plan {
    size_t bytes[12];
    uint64_t *dst[12];
    int n;
};

static void plan_buffer(struct buffer_plan *bp, uint64_t *dst, size_t bytes)
{
    bp->bytes[bp->n] = bytes;
    bp->dst[bp->n] = dst;
    bp->n++;
}

/* Lays out every per-rank buffer; the same plan sizes the workspace figure. */
static void plan_rank_buffers(struct dcp_engine *e, struct dcp_rank_buffers *b, struct buffer_plan *bp)
{
    const size_t T = e->max_qtokens, H = e->q_heads_per_rank, N = e->dcp;
    const size_t Hg = e->gathered_heads, v = e->v_dim, f = sizeof(float);
    const bool a2a = e->comm == DCP_COMM_A2A;
    bp->n = 0;
    plan_buffer(bp, &b->block_table, (size_t)e->max_batch * e->max_blocks_per_seq * sizeof(int32_t));
    plan_buffer(bp, &b->seq_lens, e->max_batch * sizeof(int32_t));
    plan_buffer(bp, &b->q_start, (e->max_batch + 1) * sizeof(int32_t));
    plan_buffer(bp, &b->slots, e->max_tokens * sizeof(int64_t));
    plan_buffer(bp, &b->token_keys, e->max_tokens * sizeof(uint64_t));
    plan_buffer(bp, &b->lse_scratch, T * H * f);
    if (N > 1) {
        plan_buffer(bp, &b->q_gathered, N * T * H * e->qk_dim * f);
        plan_buffer(bp, &b->part, N * T * H * (a2a ? v + 1 : v) * f);
        if (!a2a)
            plan_buffer(bp, &b->part_lse, N * T * H * f);
        plan_buffer(bp, &b->recv, (a2a ? N * T * H * (v + 1) : N * N * T * H) * f);
    }
    if (e->split_rows) {
        plan_buffer(bp, &b->ws_o, e->split_rows * Hg * v * f);
        plan_buffer(bp, &b->ws_lse, e->split_rows * Hg * f);
    }
}

static int alloc_rank_buffers(struct dcp_rank *r)
{
    struct dcp_engine *e = r->engine;
    struct buffer_plan bp;
    plan_rank_buffers(e, &r->buf, &bp);
    for (int i = 0; i < bp.n; i++) {
        int err = e->ops->alloc(r, bp.bytes[i], bp.dst[i]);
        if (err)
            return err;
    }
    if (e->ops->alloc_arena)
        return e->ops->alloc_arena(r, e->kv_bytes, &r->kv_arena);
    return e->ops->alloc(r, e->kv_bytes, &r->kv_arena);
}

static void free_rank_buffers(struct dcp_rank *r)
{
    struct dcp_engine *e = r->engine;
    struct buffer_plan bp;
    struct dcp_rank_buffers copy = r->buf;
    plan_rank_buffers(e, &copy, &bp);
    for (int i = 0; i < bp.n; i++)
        e->ops->free(r, *bp.dst[i]);
    e->ops->free(r, r->kv_arena);
    memset(&r->buf, 0, sizeof(r->buf));
    r->kv_arena = 0;
}

/* The split-KV workspace is sized once, here: rows of (split, query token) for
 * up to max_splits splits of the largest step, within SPLIT_WORKSPACE_CAP. A step
 * of T query tokens can then use split_rows / T splits (choose_splits), so a
 * decode step of one token gets the most and a long multi-token step fewer. */
static void size_workspace(struct dcp_engine *e)
{
    if (e->shape.max_splits == 0)
        e->shape.max_splits = 1;
    const uint64_t row_bytes = (uint64_t)e->gathered_heads * (e->v_dim + 1) * sizeof(float);
    uint64_t rows = (uint64_t)e->shape.max_splits * e->max_qtokens;
    rows = DCP_MIN(rows, row_bytes ? SPLIT_WORKSPACE_CAP / row_bytes : 0);
    e->split_rows = e->shape.max_splits > 1 && rows >= 2 ? rows : 0; /* two splits of one token at least */
    struct dcp_rank_buffers b;
    struct buffer_plan bp;
    plan_rank_buffers(e, &b, &bp);
    e->workspace_bytes = 0;
    for (int i = 0; i < bp.n; i++)
        e->workspace_bytes += bp.bytes[i];
}

/* ---- step host arrays --------------------------------------------------- */

static int alloc_step(struct dcp_engine *e)
{
    struct dcp_step *s = &e->step;
    s->block_table = calloc((size_t)e->max_batch * e->max_blocks_per_seq, sizeof(int32_t));
    s->seq_lens = calloc(e->max_batch, sizeof(int32_t));
    s->q_start = calloc(e->max_batch + 1, sizeof(int32_t));
    s->token_keys = calloc(e->max_tokens, sizeof(uint64_t));
    s->slots = calloc((size_t)e->dcp * e->max_tokens, sizeof(int64_t));
    s->seen = calloc(e->max_seqs, sizeof(uint32_t));
    if (!s->block_table || !s->seq_lens || !s->q_start || !s->token_keys || !s->slots || !s->seen)
        return dcp_error(DCP_ENOMEM, "step metadata");
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
    memset(s, 0, sizeof(*s));
}

/* ---- backend selection --------------------------------------------------- */

static bool cuda_unavailable(int err)
{
    return err == DCP_ENODRIVER || err == DCP_ESTUBDRIVER || err == DCP_EDRIVERVERSION ||
           err == DCP_ENODEVICE || err == DCP_ENOTSUP || err == DCP_EMODULE;
}

static int init_backend(struct dcp_engine *e)
{
    const enum dcp_backend_kind kind = e->cfg->runtime.backend;
    if (kind == DCP_BACKEND_CUDA || kind == DCP_BACKEND_AUTO) {
        e->ops = &dcp_cuda_backend;
        int err = e->ops->engine_init(e);
        if (!err || kind == DCP_BACKEND_CUDA || !cuda_unavailable(err))
            return err;
        snprintf(e->notice, sizeof(e->notice), "CUDA backend unavailable (%s); using the host backend",
                 dcp_last_error()[0] ? dcp_last_error() : dcp_strerror(err));
        e->ops->engine_fini(e);
        e->backend = NULL;
    }
    e->ops = &dcp_host_backend;
    return e->ops->engine_init(e);
}

/* ---- create / destroy ----------------------------------------------------- */

DCP_API int dcp_engine_create(const struct dcp_engine_params *params, dcp_engine **out)
{
    if (!params || !out || !params->deployment)
        return dcp_error(DCP_EINVAL, "dcp_engine_create: params, deployment and out are required");
    *out = NULL;
    struct dcp_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return dcp_error(DCP_ENOMEM, "engine");
    e->params = *params;
    e->cfg = dcp_deployment_config(params->deployment);
    int err = resolve_shape(e);
    if (err)
        goto fail;
    err = init_backend(e);
    if (err)
        goto fail;
    err = size_pools(e, e->ops == &dcp_host_backend);
    if (err)
        goto fail;
    size_workspace(e);
    struct dcp_kv_manager_params kp = {
        .num_blocks = e->num_blocks,
        .block_size = e->block_size,
        .group_size = e->dcp,
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
        r->group_rank = r->tp_rank % e->dcp;
        r->group_id = r->tp_rank / e->dcp;
        err = e->ops->rank_init(r);
        e->ranks_initialised = i + 1;
        if (err)
            goto fail;
        err = alloc_rank_buffers(r);
        if (err)
            goto fail;
    }
    if (e->ops->engine_start && (err = e->ops->engine_start(e)))
        goto fail;
    *out = e;
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
    if (e->ranks) {
        for (uint32_t i = 0; i < e->ranks_initialised; i++) {
            free_rank_buffers(&e->ranks[i]);
            e->ops->rank_fini(&e->ranks[i]);
        }
        free(e->ranks);
    }
    if (e->ops)
        e->ops->engine_fini(e);
    free_step(&e->step);
    dcp_kv_manager_destroy(&e->kv);
    free(e);
    *engine = NULL;
}

DCP_API void dcp_engine_get_info(const dcp_engine *e, struct dcp_engine_info *info)
{
    if (!e || !info)
        return;
    *info = (struct dcp_engine_info){
        .backend = e->ops->name,
        .backend_detail = e->detail,
        .backend_notice = e->notice,
        .tp = e->tp,
        .dcp = e->dcp,
        .num_local_ranks = e->num_ranks,
        .num_layers = e->num_layers,
        .q_heads_per_rank = e->q_heads_per_rank,
        .kv_heads_per_rank = e->kv_heads_per_rank,
        .gathered_heads = e->gathered_heads,
        .qk_dim = e->qk_dim,
        .v_dim = e->v_dim,
        .block_size = e->block_size,
        .num_blocks = e->num_blocks,
        .tokens_per_block = (uint64_t)e->block_size * e->dcp,
        .kv_bytes_per_rank = e->kv_bytes,
        .workspace_bytes_per_rank = e->workspace_bytes,
        .max_batch = e->max_batch,
        .max_query_tokens = e->max_qtokens,
        .max_step_tokens = e->max_tokens,
        .max_seqs = e->max_seqs,
        .max_context = e->max_context,
    };
}

DCP_API dcp_rank *dcp_engine_rank(dcp_engine *e, uint32_t i)
{
    return e && i < e->num_ranks ? &e->ranks[i] : NULL;
}

/* ---- scheduler front end -------------------------------------------------- */

DCP_API int dcp_seq_create(dcp_engine *e, uint32_t *seq_id)
{
    return e && seq_id ? dcp_kv_seq_create(e->kv, seq_id) : DCP_EINVAL;
}

DCP_API int dcp_seq_extend(dcp_engine *e, uint32_t seq_id, uint32_t n)
{
    if (!e)
        return DCP_EINVAL;
    e->step.valid = false;
    return dcp_kv_seq_extend(e->kv, seq_id, n);
}

DCP_API int dcp_seq_truncate(dcp_engine *e, uint32_t seq_id, uint64_t len)
{
    if (!e)
        return DCP_EINVAL;
    e->step.valid = false;
    return dcp_kv_seq_truncate(e->kv, seq_id, len);
}

DCP_API int dcp_seq_fork(dcp_engine *e, uint32_t src, uint32_t *seq_id)
{
    return e && seq_id ? dcp_kv_seq_fork(e->kv, src, seq_id) : DCP_EINVAL;
}

DCP_API int dcp_seq_release(dcp_engine *e, uint32_t seq_id)
{
    if (!e)
        return DCP_EINVAL;
    e->step.valid = false;
    return dcp_kv_seq_release(e->kv, seq_id);
}

DCP_API uint64_t dcp_seq_length(const dcp_engine *e, uint32_t seq_id)
{
    return e ? dcp_kv_seq_length(e->kv, seq_id) : 0;
}

DCP_API uint64_t dcp_engine_free_blocks(const dcp_engine *e)
{
    return e ? dcp_kv_free_blocks(e->kv) : 0;
}

DCP_API uint64_t dcp_engine_blocks_for(const dcp_engine *e, uint64_t len)
{
    return e ? dcp_kv_blocks_for(e->kv, len) : 0;
}

/* ---- step metadata -------------------------------------------------------- */

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
        if (!dcp_kv_seq_exists(e->kv, id))
            return dcp_error(DCP_EINVAL, "begin_step: no sequence %u", id);
        if (s->seen[id] == s->stamp)
            return dcp_error(DCP_EINVAL, "begin_step: sequence %u appears twice", id);
        s->seen[id] = s->stamp;
        const uint64_t len = dcp_kv_seq_length(e->kv, id);
        if (b->q_lens[i] == 0 || b->q_lens[i] > len)
            return dcp_error(DCP_EINVAL, "begin_step: sequence %u has %llu tokens, q_len %u", id,
                             (unsigned long long)len, b->q_lens[i]);
        if (len > INT32_MAX)
            return dcp_error(DCP_EINVAL, "begin_step: sequence %u is longer than 2^31 tokens", id);
        tokens += b->q_lens[i];
    }
    if (tokens > e->max_tokens)
        return dcp_error(DCP_EINVAL, "begin_step: %llu query tokens, max_step_tokens is %u",
                         (unsigned long long)tokens, e->max_tokens);
    return DCP_OK;
}

/* Fills the host copy of the step: block tables, lengths, query offsets, and for
 * every group rank the slot each new token is written to (or -1). */
static void build_step(struct dcp_engine *e, const struct dcp_batch *b)
{
    struct dcp_step *s = &e->step;
    const uint32_t N = e->dcp, I = e->interleave, B = e->block_size;
    uint32_t max_blocks = 1;
    for (uint32_t i = 0; i < b->num_seqs; i++) {
        uint32_t n = 0;
        dcp_kv_seq_blocks(e->kv, b->seq_ids[i], &n);
        max_blocks = DCP_MAX(max_blocks, n);
    }
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
            s->token_keys[t] = ((uint64_t)b->seq_ids[i] << 40) | p;
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
 */
static uint32_t choose_splits(const struct dcp_engine *e)
{
    const struct dcp_step *s = &e->step;
    if (e->split_rows == 0 || s->batch == 0 || s->tokens == 0)
        return 1;
    const uint32_t heads_per_kv = e->gathered_heads / e->kv_heads_per_rank;
    const uint32_t tile = dcp_engine_head_tile(e);
    const uint64_t base = (uint64_t)s->batch * e->kv_heads_per_rank * dcp_div_ceil_u64(heads_per_kv, tile);
    if (e->split_override)
        return (uint32_t)DCP_MAX(1, DCP_MIN(DCP_MIN(e->split_override, e->shape.max_splits), e->split_rows / s->tokens));
    uint64_t want = e->shape.parallelism / base;
    uint64_t longest_pages = 0;
    for (uint32_t i = 0; i < s->batch; i++) {
        const uint64_t local = dcpk_local_length((uint64_t)s->seq_lens[i], 0, e->dcp, e->interleave);
        longest_pages = DCP_MAX(longest_pages, dcp_div_ceil_u64(local, e->block_size));
    }
    want = DCP_MIN(want, longest_pages);
    want = DCP_MIN(want, (uint64_t)e->shape.max_splits);
    want = DCP_MIN(want, e->split_rows / s->tokens);
    return (uint32_t)DCP_MAX(want, 1);
}

DCP_API int dcp_engine_begin_step(dcp_engine *e, const struct dcp_batch *b)
{
    if (!e)
        return DCP_EINVAL;
    e->step.valid = false;
    int err = check_batch(e, b);
    if (err)
        return err;
    build_step(e, b);
    struct dcp_step *s = &e->step;
    s->num_splits = choose_splits(e);
    for (uint32_t i = 0; i < e->num_ranks; i++) {
        struct dcp_rank *r = &e->ranks[i];
        const struct dcp_backend_ops *ops = e->ops;
        const int64_t *slots = s->slots + (size_t)r->group_rank * e->max_tokens;
        if ((err = ops->upload(r, r->buf.block_table, s->block_table,
                               (size_t)s->batch * s->max_blocks * sizeof(int32_t))) ||
            (err = ops->upload(r, r->buf.seq_lens, s->seq_lens, s->batch * sizeof(int32_t))) ||
            (err = ops->upload(r, r->buf.q_start, s->q_start, (s->batch + 1) * sizeof(int32_t))) ||
            (err = ops->upload(r, r->buf.slots, slots, s->tokens * sizeof(int64_t))) ||
            (err = ops->upload(r, r->buf.token_keys, s->token_keys, s->tokens * sizeof(uint64_t))))
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
        .num_heads = e->gathered_heads,
        .num_kv_heads = e->kv_heads_per_rank,
        .head_tile = dcp_engine_head_tile(e),
        .num_splits = e->step.num_splits,
    };
    const struct dcpk_grid g = dcpk_kernels[DCPK_KERNEL_attn].grid(&p);
    *out = (struct dcp_step_launch){
        .num_splits = e->step.num_splits,
        .grid = {g.x, g.y, g.z},
        .blocks = dcpk_grid_items(g),
        .slots = e->shape.parallelism,
        .blocks_per_sm = e->shape.blocks_per_sm,
        .max_splits = e->shape.max_splits,
    };
    return DCP_OK;
}

/* ---- rank threads --------------------------------------------------------- */

struct rank_job {
    dcp_rank_fn fn;
    void *arg;
    struct dcp_rank *rank;
    int result;
    char message[256]; /* the rank thread's dcp_last_error() when it failed */
};

static void *rank_thread(void *p)
{
    struct rank_job *job = p;
    job->result = job->fn(job->rank, job->arg);
    if (job->result) {
        snprintf(job->message, sizeof(job->message), "%s", dcp_last_error());
        if (job->result != DCP_EABORTED)
            dcp_engine_fail(job->rank->engine);
    }
    return NULL;
}

void dcp_engine_fail(struct dcp_engine *e)
{
    atomic_store(&e->failed, 1);
    if (e->ops && e->ops->abort)
        e->ops->abort(e);
}

DCP_API int dcp_engine_run(dcp_engine *e, dcp_rank_fn fn, void *arg)
{
    if (!e || !fn)
        return DCP_EINVAL;
    if (atomic_load(&e->failed))
        return dcp_error(DCP_EABORTED, "a rank failed earlier; destroy the engine");
    if (e->num_ranks == 1) {
        int err = fn(&e->ranks[0], arg);
        if (err && err != DCP_EABORTED)
            dcp_engine_fail(e);
        return err;
    }
    struct rank_job *jobs = calloc(e->num_ranks, sizeof(*jobs));
    pthread_t *threads = calloc(e->num_ranks, sizeof(*threads));
    if (!jobs || !threads) {
        free(jobs);
        free(threads);
        return dcp_error(DCP_ENOMEM, "rank threads");
    }
    uint32_t started = 0;
    int err = DCP_OK;
    for (; started < e->num_ranks; started++) {
        jobs[started] = (struct rank_job){.fn = fn, .arg = arg, .rank = &e->ranks[started]};
        if (pthread_create(&threads[started], NULL, rank_thread, &jobs[started])) {
            err = dcp_error(DCP_ENOMEM, "pthread_create failed for rank %u", started);
            dcp_engine_fail(e);
            break;
        }
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    /* Report the root cause: the first failure that is not a consequence of another,
     * with its message carried over to the calling thread. */
    int culprit = -1;
    for (uint32_t i = 0; i < started && culprit < 0; i++)
        if (jobs[i].result && jobs[i].result != DCP_EABORTED)
            culprit = (int)i;
    for (uint32_t i = 0; i < started && culprit < 0; i++)
        if (jobs[i].result)
            culprit = (int)i;
    if (!err && culprit >= 0)
        err = dcp_error(jobs[culprit].result, "rank %u: %s", jobs[culprit].rank->tp_rank,
                        jobs[culprit].message[0] ? jobs[culprit].message : dcp_strerror(jobs[culprit].result));
    free(jobs);
    free(threads);
    return err;
}
