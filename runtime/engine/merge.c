/*
 * merge.c: the merge schemes (merge.h, docs/design.md §3) as one operations table.
 *
 * A row per scheme, indexed by enum dcp_comm_scheme:
 *   plan_rows     the exchanges per layer the planner prices (struct dcp_plan_comm_row);
 *   plan_buffers  the per-rank buffers beyond the query gather's;
 *   target        where the local attention writes its partial outputs;
 *   run           the exchange and merge after attention.
 * The query gather (an AllGather in the wire dtype, unless replicate_q) is shared.
 * Every figure the engine moves and the planner prices is derived here, once.
 */
#include <stdlib.h>
#include <string.h>

#include "dcp/geometry.h"
#include "engine/engine_internal.h"
#include "engine/merge.h"
#include "util/util.h"

/* Bytes of one fp32 log-sum-exp value on the wire. */
#define LSE_BYTES 4u

uint32_t dcp_merged_v_dim(const struct dcp_config *cfg, uint32_t v_dim)
{
    return cfg->parallel.merge_after_uv && cfg->model.attention == DCP_ATTN_MLA ? cfg->model.v_head_dim : v_dim;
}

void dcp_buffer_plan_add(struct dcp_buffer_plan *bp, uint64_t *dst, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    if (bp->n == (int)DCP_ARRAY_SIZE(bp->bytes)) {
        bp->overflow = true; /* a plan with more buffers than the table holds is a programming error */
        return;
    }
    bp->bytes[bp->n] = dcp_mul_u64(dcp_mul_u64(dcp_mul_u64(a, b, &bp->overflow), c, &bp->overflow), d,
                                   &bp->overflow);
    bp->dst[bp->n] = dst;
    bp->n++;
}

/* ---- shapes ------------------------------------------------------------------- */

/**
 * One destination's chunk of partial results with their LSEs packed behind them
 * (a2a): rows partial output rows of v elements of the wire dtype, then rows fp32
 * LSEs. The LSEs start at a 4-byte boundary and the chunk is a whole number of
 * 4-byte words, so every offset and stride is a whole number of elements of both
 * arrays (dcpk params count in elements); with fp32 partials nothing is padded.
 */
struct packed_chunk {
    uint64_t lse_offset; ///< Bytes from the chunk's start to its LSEs.
    uint64_t bytes;      ///< Bytes of the chunk (the stride between destinations).
};

static struct packed_chunk packed_chunk_of(uint64_t rows, uint64_t v, uint32_t wire_dtype, bool *ovf)
{
    const uint64_t o_bytes = dcp_mul_u64(dcp_mul_u64(rows, v, ovf), dcpk_dtype_size(wire_dtype), ovf);
    struct packed_chunk c;
    c.lse_offset = dcp_mul_u64(dcp_div_ceil_u64(o_bytes, sizeof(float)), sizeof(float), ovf);
    c.bytes = dcp_add_u64(c.lse_offset, dcp_mul_u64(rows, sizeof(float), ovf), ovf);
    return c;
}

/* The chunk of rows = T * H_l partial rows of the engine (T: the step's tokens, or
 * max_query_tokens for the buffers). Sizes were checked when the buffers were
 * planned for the largest T, so a step's chunk cannot overflow. */
static struct packed_chunk engine_chunk(const struct dcp_engine *e, uint64_t tokens, bool *ovf)
{
    return packed_chunk_of(dcp_mul_u64(tokens, e->geo.q_heads_per_rank, ovf), e->out_dim, e->part_dtype, ovf);
}

static struct packed_chunk step_chunk(const struct dcp_engine *e)
{
    bool ovf = false;
    return engine_chunk(e, e->step.tokens, &ovf);
}

/* What the planner's rows depend on, per rank, per query token. */
struct comm_dims {
    uint32_t n;        ///< DCP group size.
    double peers;      ///< n - 1.
    double heads;      ///< H_l.
    double qk;         ///< Query row length.
    double v;          ///< Merged value row length (v_dim, or v_head_dim with merge_after_uv).
    double wire;       ///< Bytes per element of comm_dtype.
    bool replicate_q;  ///< No query gather.
};

static void add_row(struct dcp_plan_comm *c, enum dcp_plan_comm_kind kind, const char *what, const struct comm_dims *d,
                    double bytes)
{
    if (c->num_rows == DCP_PLAN_COMM_MAX_ROWS)
        return;
    c->rows[c->num_rows++] = (struct dcp_plan_comm_row){
        .kind = kind, .what = what, .ranks = d->n, .send_bytes = bytes, .recv_bytes = bytes};
}

/* ---- the query gather (shared) --------------------------------------------------------- */

/* The query AllGather moves each rank's H_l query rows to the n - 1 others. */
static void q_gather_row(const struct comm_dims *d, struct dcp_plan_comm *c, enum dcp_plan_comm_kind kind)
{
    if (!d->replicate_q)
        add_row(c, kind, "queries", d, d->peers * d->heads * d->qk * d->wire);
}

static void plan_q_buffers(const struct dcp_engine *e, struct dcp_merge_buffers *b, struct dcp_buffer_plan *bp)
{
    const uint64_t T = e->max_qtokens, H = e->geo.q_heads_per_rank, N = e->geo.dcp, part = dcpk_dtype_size(e->part_dtype);
    if (e->replicate_q)
        return;
    /* p2p: two slots the peers store into, by the exchange's parity (p2p_exchange). */
    dcp_buffer_plan_add(bp, &b->q_gathered, (e->comm == DCP_COMM_P2P ? 2 : 1) * N * T, H, e->geo.qk_dim, part);
    if (e->act_dtype != e->part_dtype) { /* this rank's queries, converted (convert_q) */
        dcp_buffer_plan_add(bp, &b->q_own, T, H, e->geo.qk_dim, part);
        dcp_buffer_plan_add(bp, &b->q_lse_zero, T, H, sizeof(float), 1);
    }
}

/* Copies the step's T * H_l rows of dim values from src (src_dtype) to dst (dst_dtype)
 * with the merge kernel, one source: where a row's src_lse is the row's own LSE (or 0),
 * its weight is exp(0) = 1 exactly, so each value is rounded once (NaN and inf pass
 * through: 1 * x; a row whose LSE is -inf becomes 0, as it already is). No new kernel. */
static int convert_rows(struct dcp_rank *r, enum dcp_prof_cat cat, uint64_t src, uint64_t src_lse, uint64_t dst,
                        uint32_t dim, uint32_t src_dtype, uint32_t dst_dtype)
{
    const struct dcp_engine *e = r->engine;
    const uint64_t rows = (uint64_t)e->step.tokens * e->geo.q_heads_per_rank;
    const struct dcpk_merge_params m = {
        .src_o = src,
        .src_lse = src_lse,
        .out = dst,
        .n_src = 1,
        .rows = (uint32_t)rows,
        .rows_per_chunk = (uint32_t)rows,
        .v_dim = dim,
        .src_dtype = src_dtype,
        .out_dtype = dst_dtype,
    };
    return dcp_rank_launch(r, cat, DCPK_KERNEL_merge, &m);
}

/* The gather moves queries in the wire dtype (part_dtype); when the caller's are of another
 * act_dtype, this rank's chunk is converted first into q_own. Converting only the own
 * chunk (T * H_l * qk values, 1/dcp of what attention reads) before the gather costs less
 * than gathering act_dtype and converting all chunks after it, and the attention kernel
 * then reads one dtype for every chunk (q_dtype). The LSEs are 0 (q_lse_zero). */
static int gather_q_collective(struct dcp_rank *r, uint64_t q)
{
    const struct dcp_engine *e = r->engine;
    const struct dcp_merge_buffers *b = &r->buf.merge;
    const bool convert = e->act_dtype != e->part_dtype;
    int err = convert ? convert_rows(r, PROF_OTHER, q, b->q_lse_zero, b->q_own, e->geo.qk_dim, e->act_dtype,
                                     e->part_dtype)
                      : DCP_OK;
    const uint64_t bytes = (uint64_t)e->step.tokens * e->geo.q_heads_per_rank * e->geo.qk_dim * dcpk_dtype_size(e->part_dtype);
    return err ? err : dcp_rank_collective(r, DCP_ALL_GATHER, convert ? b->q_own : q, b->q_gathered, bytes);
}

/* ---- ag_rs: AllGather the LSEs, scale locally, ReduceScatter (sum) the outputs ------------- */

/* Every rank sends the LSEs of all n * H_l heads it attended, then the ReduceScatter of
 * H_l value rows per peer. */
static void ag_rs_rows(const struct comm_dims *d, struct dcp_plan_comm *c)
{
    q_gather_row(d, c, DCP_PLAN_COMM_ALL_GATHER);
    add_row(c, DCP_PLAN_COMM_ALL_GATHER, "LSEs", d, d->peers * d->n * d->heads * LSE_BYTES);
    add_row(c, DCP_PLAN_COMM_REDUCE_SCATTER, "outputs", d, d->peers * d->heads * d->v * d->wire);
}

static void ag_rs_buffers(const struct dcp_engine *e, struct dcp_merge_buffers *b, struct dcp_buffer_plan *bp)
{
    const uint64_t T = e->max_qtokens, H = e->geo.q_heads_per_rank, N = e->geo.dcp, o = e->out_dim;
    const uint64_t part = dcpk_dtype_size(e->part_dtype), f = sizeof(float);
    dcp_buffer_plan_add(bp, &b->part, N * T, H, o, part);
    dcp_buffer_plan_add(bp, &b->part_lse, N * T, H, f, 1);
    dcp_buffer_plan_add(bp, &b->recv, N * N, T, H, f);
    if (e->act_dtype != e->part_dtype)
        dcp_buffer_plan_add(bp, &b->rs_out, T, H, o, part);
}

static struct dcp_attn_target ag_rs_target(const struct dcp_rank *r)
{
    const struct dcp_engine *e = r->engine;
    const uint64_t rows = (uint64_t)e->step.tokens * e->geo.q_heads_per_rank;
    return (struct dcp_attn_target){
        .out = r->buf.merge.part,
        .lse = r->buf.merge.part_lse,
        .out_chunk_stride = rows * e->out_dim,
        .lse_chunk_stride = rows,
        .out_dtype = e->part_dtype,
    };
}

/* Gather every rank's LSEs, scale the local partials, ReduceScatter (sum). When out is
 * not of part_dtype, the sum lands in rs_out and is stored into out in act_dtype with its
 * merged LSE as the weight's (one pass over T * H * out_dim values that a ReduceScatter
 * in act_dtype does not need). */
static int ag_rs_run(struct dcp_rank *r, uint64_t out, uint64_t lse)
{
    const struct dcp_engine *e = r->engine;
    const struct dcp_merge_buffers *b = &r->buf.merge;
    const uint64_t T = e->step.tokens, H = e->geo.q_heads_per_rank, N = e->geo.dcp, v = e->out_dim;
    const uint64_t rows = N * T * H;
    int err = dcp_rank_collective(r, DCP_ALL_GATHER, b->part_lse, b->recv, rows * sizeof(float));
    if (err)
        return err;
    const struct dcpk_lse_scale_params p = {
        .lse_all = b->recv,
        .o = b->part,
        .out_lse = lse,
        .n_src = (uint32_t)N,
        .self = r->group_rank,
        .rows = (uint32_t)rows,
        .rows_per_chunk = (uint32_t)(T * H),
        .own_chunk = r->group_rank,
        .v_dim = (uint32_t)v,
        .o_dtype = e->part_dtype,
    };
    if ((err = dcp_rank_launch(r, PROF_MERGE, DCPK_KERNEL_lse_scale, &p)))
        return err;
    const bool direct = e->act_dtype == e->part_dtype;
    err = dcp_rank_collective(r, DCP_REDUCE_SCATTER, b->part, direct ? out : b->rs_out, T * H * v);
    return err || direct ? err : convert_rows(r, PROF_MERGE, b->rs_out, lse, out, v, e->part_dtype, e->act_dtype);
}

/* ---- a2a: one all-to-all of outputs + LSEs, merged in fp32 by the receiver ----------------- */

/* The queries (kind q_kind), then H_l value rows plus their LSEs per peer (kind kind). */
static void packed_rows(const struct comm_dims *d, struct dcp_plan_comm *c, enum dcp_plan_comm_kind q_kind,
                        enum dcp_plan_comm_kind kind)
{
    q_gather_row(d, c, q_kind);
    add_row(c, kind, "outputs + LSEs", d, d->peers * d->heads * (d->v * d->wire + LSE_BYTES));
}

/* dcp send chunks and `areas` receive areas of dcp chunks. */
static void packed_buffers(const struct dcp_engine *e, struct dcp_merge_buffers *b, struct dcp_buffer_plan *bp,
                           uint32_t areas)
{
    const struct packed_chunk c = engine_chunk(e, e->max_qtokens, &bp->overflow);
    dcp_buffer_plan_add(bp, &b->part, e->geo.dcp, c.bytes, 1, 1);
    dcp_buffer_plan_add(bp, &b->recv, (uint64_t)areas * e->geo.dcp, c.bytes, 1, 1);
}

/* Outputs + LSEs in one collective. */
static void a2a_rows(const struct comm_dims *d, struct dcp_plan_comm *c)
{
    packed_rows(d, c, DCP_PLAN_COMM_ALL_GATHER, DCP_PLAN_COMM_ALL_TO_ALL);
}

static void a2a_buffers(const struct dcp_engine *e, struct dcp_merge_buffers *b, struct dcp_buffer_plan *bp)
{
    packed_buffers(e, b, bp, 1);
}

/* Partial rows and their LSEs go to one packed chunk per destination (strides in elements). */
static struct dcp_attn_target a2a_target(const struct dcp_rank *r)
{
    const struct dcp_engine *e = r->engine;
    const struct packed_chunk c = step_chunk(e);
    return (struct dcp_attn_target){
        .out = r->buf.merge.part,
        .lse = r->buf.merge.part + c.lse_offset,
        .out_chunk_stride = c.bytes / dcpk_dtype_size(e->part_dtype),
        .lse_chunk_stride = c.bytes / sizeof(float),
        .out_dtype = e->part_dtype,
    };
}

/* Merges the n_src packed chunks at src (source s at src + s * chunk bytes) into out. */
static int merge_packed(struct dcp_rank *r, uint64_t src, uint64_t out, uint64_t lse)
{
    const struct dcp_engine *e = r->engine;
    const struct packed_chunk c = step_chunk(e);
    const uint32_t rows = e->step.tokens * e->geo.q_heads_per_rank;
    const struct dcpk_merge_params m = {
        .src_o = src,
        .src_lse = src + c.lse_offset,
        .out = out,
        .out_lse = lse,
        .src_stride_o = c.bytes / dcpk_dtype_size(e->part_dtype),
        .src_stride_lse = c.bytes / sizeof(float),
        .n_src = e->geo.dcp,
        .rows = rows,
        .rows_per_chunk = rows,
        .v_dim = e->out_dim,
        .src_dtype = e->part_dtype,
        .out_dtype = e->act_dtype,
    };
    return dcp_rank_launch(r, PROF_MERGE, DCPK_KERNEL_merge, &m);
}

static int a2a_run(struct dcp_rank *r, uint64_t out, uint64_t lse)
{
    const struct dcp_merge_buffers *b = &r->buf.merge;
    const int err = dcp_rank_collective(r, DCP_ALL_TO_ALL, b->part, b->recv, step_chunk(r->engine).bytes);
    return err ? err : merge_packed(r, b->recv, out, lse);
}

/* ---- p2p: a2a's chunks stored straight into the peers' receive slots, published by an epoch ---- */

enum dcp_p2p_mutant dcp_p2p_test_mutant = DCP_P2P_MUTANT_NONE;

/* The same rows as a2a (queries, then outputs + LSEs), each one round of peer writes. */
static void p2p_rows(const struct comm_dims *d, struct dcp_plan_comm *c)
{
    packed_rows(d, c, DCP_PLAN_COMM_PEER_WRITE, DCP_PLAN_COMM_PEER_WRITE);
}

/* a2a's send chunks; two receive areas of dcp chunks (by the exchange's parity: a slot is
 * stored into again two exchanges later, when every peer has consumed it, see p2p_exchange);
 * the epochs the members publish. The query slots are planned with the gather's (plan_q_buffers). */
static void p2p_buffers(const struct dcp_engine *e, struct dcp_merge_buffers *b, struct dcp_buffer_plan *bp)
{
    packed_buffers(e, b, bp, 2);
    dcp_buffer_plan_add(bp, &b->p2p_flags, e->geo.dcp, sizeof(uint64_t), 1, 1);
}

/* Member g of r's group (dcp_merge_resolve made sure every member is a local rank). */
static const struct dcp_rank *member(const struct dcp_rank *r, uint32_t g)
{
    return &r->engine->ranks[r->local_index - r->group_rank + g];
}

/* Which receive area of a kind an exchange uses. */
struct p2p_slot {
    uint64_t area_bytes;   ///< Bytes of one parity's area (sized for max_query_tokens).
    bool queries;          ///< The query slots (q_gathered), else the outputs' (recv).
};

static uint64_t slot_base(const struct dcp_rank *m, const struct p2p_slot *s, uint64_t epoch)
{
    return (s->queries ? m->buf.merge.q_gathered : m->buf.merge.recv) + (epoch & 1) * s->area_bytes;
}

/*
 * One exchange: this rank's chunk for member g (bytes at src + g * src_stride) is stored into
 * member g's slot of this rank in its receive area of this exchange's parity, and this rank's
 * epoch into member g's flags; then the rank waits until every member's epoch is this
 * exchange's. Every rank runs the same exchanges in the same order, so the epochs agree.
 * A slot is stored into again two exchanges later: by then its owner has consumed it (a member
 * stores exchange e + 2 only after its wait of e + 1, which needs the owner's stores of e + 1,
 * queued after the owner's consumer of e). Returns the epoch in *epoch.
 */
static int p2p_exchange(struct dcp_rank *r, const struct p2p_slot *s, uint64_t src, uint64_t src_stride,
                        uint64_t bytes, uint64_t *epoch)
{
    const struct dcp_engine *e = r->engine;
    const uint32_t n = e->geo.dcp, self = r->group_rank;
    const enum dcp_p2p_mutant mutant = dcp_p2p_test_mutant;
    uint32_t t = 0;
    int err = dcp_rank_check_group(r);
    if (err || (err = dcp_rank_timed_begin(r, &t)))
        return err;
    struct dcp_merge_buffers *b = &r->buf.merge;
    const uint64_t ep = mutant == DCP_P2P_MUTANT_NO_EPOCH_BUMP ? 1 : ++b->p2p_epoch;
    const uint64_t published = mutant == DCP_P2P_MUTANT_NO_PUBLISH ? ep - 1 : ep;
    /* Peers from the next one round, this rank's own slot last. */
    for (uint32_t k = 1; k <= n && !err; k++) {
        const uint32_t g = (self + k) % n;
        const struct dcp_rank *m = member(r, g);
        const uint32_t slot = mutant == DCP_P2P_MUTANT_WRONG_SLOT ? g : self;
        err = e->ops->peer_put(r, g, slot_base(m, s, ep) + slot * bytes, src + g * src_stride, bytes,
                               m->buf.merge.p2p_flags + self * sizeof(uint64_t), published);
    }
    if (!err)
        err = e->ops->peer_wait(r, b->p2p_flags, n, ep);
    *epoch = ep;
    return dcp_rank_timed_end(r, t, PROF_COMM, err);
}

/* The query gather as one exchange: this rank's T x H_l queries (converted to the wire dtype
 * first, as gather_q_collective does) into every member's query slot; *q_all: this rank's slots. */
static int gather_q_p2p(struct dcp_rank *r, uint64_t q, uint64_t *q_all)
{
    const struct dcp_engine *e = r->engine;
    const struct dcp_merge_buffers *b = &r->buf.merge;
    const bool convert = e->act_dtype != e->part_dtype;
    int err = convert ? convert_rows(r, PROF_OTHER, q, b->q_lse_zero, b->q_own, e->geo.qk_dim, e->act_dtype,
                                     e->part_dtype)
                      : DCP_OK;
    const uint64_t row = (uint64_t)e->geo.q_heads_per_rank * e->geo.qk_dim * dcpk_dtype_size(e->part_dtype);
    const struct p2p_slot slot = {.area_bytes = (uint64_t)e->geo.dcp * e->max_qtokens * row, .queries = true};
    uint64_t ep = 0;
    if (!err)
        err = p2p_exchange(r, &slot, convert ? b->q_own : q, 0, e->step.tokens * row, &ep);
    *q_all = slot_base(r, &slot, ep);
    return err;
}

static int p2p_run(struct dcp_rank *r, uint64_t out, uint64_t lse)
{
    const struct dcp_engine *e = r->engine;
    bool ovf = false;
    const struct p2p_slot slot = {.area_bytes = dcp_mul_u64(e->geo.dcp, engine_chunk(e, e->max_qtokens, &ovf).bytes,
                                                            &ovf),
                                  .queries = false};
    const uint64_t chunk = step_chunk(e).bytes;
    uint64_t ep = 0;
    const int err = p2p_exchange(r, &slot, r->buf.merge.part, chunk, chunk, &ep);
    return err ? err : merge_packed(r, slot_base(r, &slot, ep), out, lse);
}

/* ---- the table ----------------------------------------------------------------------------- */

/** One merge scheme's behaviour. */
struct merge_scheme {
    /** Appends the scheme's exchanges per layer (the query gather's included) to c. */
    void (*plan_rows)(const struct comm_dims *d, struct dcp_plan_comm *c);
    /** Adds the per-rank buffers beyond the query gather's (dcp > 1). */
    void (*plan_buffers)(const struct dcp_engine *e, struct dcp_merge_buffers *b, struct dcp_buffer_plan *bp);
    /** Where the step's partial outputs go. */
    struct dcp_attn_target (*target)(const struct dcp_rank *r);
    /** Exchange and merge into out and lse. */
    int (*run)(struct dcp_rank *r, uint64_t out, uint64_t lse);
};

const char *const dcp_merge_scheme_names[DCP_MERGE_SCHEME_COUNT] = {
    [DCP_COMM_AG_RS] = "ag_rs",
    [DCP_COMM_A2A] = "a2a",
    [DCP_COMM_P2P] = "p2p",
    [DCP_COMM_AUTO] = "auto",
};

/* p2p sends its partial outputs from a2a's chunks (a2a_target). auto has no row: the
 * engine (dcp_merge_resolve) and the planner (plan_scheme) resolve it first. */
static const struct merge_scheme schemes[DCP_COMM_AUTO] = {
    [DCP_COMM_AG_RS] = {ag_rs_rows, ag_rs_buffers, ag_rs_target, ag_rs_run},
    [DCP_COMM_A2A] = {a2a_rows, a2a_buffers, a2a_target, a2a_run},
    [DCP_COMM_P2P] = {p2p_rows, p2p_buffers, a2a_target, p2p_run},
};

/* The row of a scheme (configs are validated and auto is resolved: a value outside the
 * table is a programming error, and gets a2a's row rather than a crash). */
static const struct merge_scheme *scheme_of(enum dcp_comm_scheme s)
{
    return (unsigned)s < DCP_COMM_AUTO ? &schemes[s] : &schemes[DCP_COMM_A2A];
}

/* ---- the interface (merge.h) ------------------------------------------------------------- */

void dcp_merge_plan_buffers(const struct dcp_engine *e, struct dcp_merge_buffers *b, struct dcp_buffer_plan *bp)
{
    if (e->geo.dcp == 1)
        return;
    plan_q_buffers(e, b, bp);
    scheme_of(e->comm)->plan_buffers(e, b, bp);
}

/* The zero LSEs with which the merge kernel converts this rank's queries to the wire
 * dtype (one source of weight exp(0 - 0) = 1: gather_q_collective). */
int dcp_merge_rank_init(struct dcp_rank *r)
{
    const struct dcp_engine *e = r->engine;
    if (!r->buf.merge.q_lse_zero)
        return DCP_OK;
    const size_t n = (size_t)e->max_qtokens * e->geo.q_heads_per_rank; /* planned, so no overflow */
    float *zeros = calloc(n, sizeof(float));
    if (!zeros)
        return dcp_error(DCP_ENOMEM, "%zu zero LSEs for the query conversion", n);
    int err = e->ops->upload(r, r->buf.merge.q_lse_zero, zeros, n * sizeof(float));
    free(zeros);
    return err;
}

int dcp_merge_resolve(struct dcp_engine *e)
{
    const uint32_t n = e->geo.dcp;
    const bool groups_here = e->params.rank_begin % n == 0 && e->num_ranks % n == 0;
    const bool can = e->caps.peer_writes && e->ops->peer_put && e->ops->peer_wait;
    if (e->comm == DCP_COMM_AUTO)
        e->comm = n > 1 && can && groups_here ? DCP_COMM_P2P : DCP_COMM_A2A;
    if (e->comm != DCP_COMM_P2P || n == 1)
        return DCP_OK;
    if (!can)
        return dcp_error(DCP_ENOTSUP, "parallel.comm p2p: the %s backend cannot store into the other ranks' memory "
                         "here; use a2a, or auto (a2a where p2p cannot run)", e->ops->name);
    if (!groups_here)
        return dcp_error(DCP_ENOTSUP, "parallel.comm p2p: this process runs ranks %u..%u, and p2p needs every rank "
                         "of a DCP group (dcp=%u) in one process; use a2a, or auto", e->params.rank_begin,
                         e->params.rank_begin + e->num_ranks - 1, n);
    return DCP_OK;
}

int dcp_merge_recover(struct dcp_engine *e)
{
    if (e->comm != DCP_COMM_P2P || e->geo.dcp == 1)
        return DCP_OK;
    const uint64_t zeros[64] = {0};
    for (uint32_t i = 0; i < e->num_ranks; i++) {
        struct dcp_rank *r = &e->ranks[i];
        r->buf.merge.p2p_epoch = 0;
        for (uint32_t g = 0; g < e->geo.dcp; g += 64) {
            const uint32_t k = DCP_MIN(64u, e->geo.dcp - g);
            int err = e->ops->upload(r, r->buf.merge.p2p_flags + g * sizeof(uint64_t), zeros, k * sizeof(uint64_t));
            if (err)
                return err;
        }
    }
    return DCP_OK;
}

int dcp_merge_gather_q(struct dcp_rank *r, uint64_t q, uint64_t *q_all, uint32_t *q_dtype)
{
    const struct dcp_engine *e = r->engine;
    if (e->replicate_q) {
        *q_all = q;
        *q_dtype = e->act_dtype;
        return DCP_OK;
    }
    *q_dtype = e->part_dtype;
    if (e->comm == DCP_COMM_P2P)
        return gather_q_p2p(r, q, q_all);
    *q_all = r->buf.merge.q_gathered;
    return gather_q_collective(r, q);
}

struct dcp_attn_target dcp_merge_target(const struct dcp_rank *r)
{
    return scheme_of(r->engine->comm)->target(r);
}

int dcp_merge_run(struct dcp_rank *r, uint64_t out, uint64_t lse)
{
    return scheme_of(r->engine->comm)->run(r, out, lse);
}

/* Per-rank geometry without DCP (the heads a rank owns), as the planner uses it.
 * The deployment was validated, so dcp = 1 always has a geometry. */
/* The scheme the planner prices: auto is p2p unless a DCP group spans nodes (peer stores
 * reach only this node's GPUs), where it is a2a. */
static enum dcp_comm_scheme plan_scheme(const struct dcp_config *cfg)
{
    if (cfg->parallel.comm != DCP_COMM_AUTO)
        return cfg->parallel.comm;
    const uint64_t per_node = cfg->hardware.gpus_per_node ? cfg->hardware.gpus_per_node : 1;
    const uint64_t n = cfg->parallel.dcp ? cfg->parallel.dcp : 1;
    const uint64_t gpus = per_node * (cfg->hardware.nodes ? cfg->hardware.nodes : 1);
    for (uint64_t first = 0; first + n <= gpus; first += n) /* groups are n consecutive GPUs */
        if (first / per_node != (first + n - 1) / per_node)
            return DCP_COMM_A2A;
    return DCP_COMM_P2P;
}

void dcp_merge_plan_comm(const struct dcp_config *cfg, struct dcp_plan_comm *out)
{
    memset(out, 0, sizeof(*out));
    out->scheme = plan_scheme(cfg);
    const uint32_t n = cfg->parallel.dcp;
    if (n <= 1)
        return;
    struct dcp_rank_geometry g;
    dcp_rank_geometry_init(&cfg->model, cfg->parallel.tp, 1, &g);
    const struct comm_dims d = {
        .n = n,
        .peers = n - 1,
        .heads = g.q_heads_per_rank,
        .qk = g.qk_dim,
        .v = dcp_merged_v_dim(cfg, g.v_dim),
        .wire = dcp_dtype_size(dcp_wire_dtype_of(cfg->parallel.comm_dtype, DCP_PLAN_ACT_DTYPE)),
        .replicate_q = cfg->parallel.replicate_q,
    };
    scheme_of(out->scheme)->plan_rows(&d, out);
    for (uint32_t i = 0; i < out->num_rows; i++) {
        out->total_send += out->rows[i].send_bytes;
        out->total_recv += out->rows[i].recv_bytes;
    }
    out->collectives = out->num_rows;
}

DCP_API const char *dcp_plan_comm_kind_name(enum dcp_plan_comm_kind kind)
{
    static const char *const names[] = {
        [DCP_PLAN_COMM_ALL_GATHER] = "all_gather",   [DCP_PLAN_COMM_REDUCE_SCATTER] = "reduce_scatter",
        [DCP_PLAN_COMM_ALL_TO_ALL] = "all_to_all",   [DCP_PLAN_COMM_ALL_REDUCE] = "all_reduce",
        [DCP_PLAN_COMM_PEER_WRITE] = "peer_write",
    };
    return (unsigned)kind < DCP_ARRAY_SIZE(names) ? names[kind] : "unknown";
}
