/*
 * attn.c: paged decode attention on the CPU (dcpk_attn, params.h).
 *
 * A work item is (split, kv head, head tile, sequence). Its query rows (head_tile
 * heads x the sequence's query tokens, at most ATTN_MAX_ROWS at a time) share
 * every KV byte they read: the item walks its KV range in tiles of ATTN_TILE
 * tokens, converts each tile to fp32 once, and updates all rows from it:
 *
 *   S[t][r] = q_r . k_t        (q pre-scaled; rows are the vector lanes)
 *   online softmax per row: m' = max(m, S), alpha = exp(m - m'), P = exp(S - m'),
 *                           l = l * alpha + sum P
 *   O^T[d][r] = O^T[d][r] * alpha + sum_t V[t][d] * P[t][r]
 *
 * Rows are the vector lanes (queries and the output accumulator are kept
 * transposed in scratch), so scores, softmax and P x V are all lane-parallel
 * with no horizontal sums, and a tile of K/V is broadcast from L1.
 * The causal mask is per row: row r sees local indices below
 * dcpk_local_length(pos_r + 1) (the rank's keys at global positions <= pos_r),
 * and with a sliding window of W tokens from dcpk_local_length(pos_r + 1 - W) on.
 * Queries (q_dtype) are converted to fp32 as they are staged, outputs rounded to
 * out_dtype as they are written (split-KV partials stay fp32).
 */
#include <math.h>
#include <string.h>

#include "dcp_build_config.h"
#include "dcp_kernels/cpu.h"
#include "dcp_kernels/paged.h"
#include "dcp_kernels/placement.h"
#include "ptx/cpu/isa.h"
#include "ptx/cpu/simd.h"

/* The hot loops are written as a * b + c; let the compiler fuse them into FMAs
 * (ISO C mode turns contraction off by default). */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

/** KV tokens converted and processed per step (a multiple of SCORE_TOKENS). */
#define ATTN_TILE 24
/** Most query rows processed together (a multiple of DCPK_VL). */
#define ATTN_MAX_ROWS 128
/** Alignment of every scratch region. */
#define ATTN_ALIGN 64

/** The fixed shape of one launch, derived from its params. */
struct attn_shape {
    uint32_t splits;     ///< num_splits (0 read as 1).
    uint32_t heads_per_kv;
    uint32_t head_tile;
    uint32_t head_tiles; ///< Head tiles per KV head.
    uint32_t heads_per_chunk;
    uint32_t row_cap;    ///< Rows per group: a multiple of DCPK_VL.
    uint32_t esize;      ///< Bytes per cache element.
    int v_in_k;          ///< V rows are the leading v_dim values of the K rows (MLA).
};

/** Per-thread scratch, carved out of the caller's buffer. */
struct attn_scratch {
    float *qt;        ///< [qk_dim][row_cap] scaled queries, transposed.
    float *ot;        ///< [v_dim][row_cap] output accumulators, transposed.
    float *s;         ///< [ATTN_TILE][row_cap] scores, then probabilities.
    float *m;         ///< [row_cap] running max.
    float *l;         ///< [row_cap] running denominator.
    float *alpha;     ///< [row_cap] rescale of the current tile.
    uint64_t *row_begin;///< [row_cap] local index of each row's first visible key (sliding window; else lo).
    uint64_t *row_end;///< [row_cap] local index past each row's last visible key.
    float *kt;        ///< [ATTN_TILE][qk_dim] K tile in fp32.
    float *vt;        ///< [ATTN_TILE][v_dim] V tile in fp32 (unused when v_in_k).
};

/** The keys and queries one group of rows works on. */
struct attn_group {
    uint32_t split;
    uint32_t kv_head;
    uint32_t seq;
    uint32_t head0;    ///< First gathered head of the item.
    uint32_t nheads;   ///< Heads of the item.
    uint32_t tok0;     ///< First query token of the sequence.
    uint32_t ntok;     ///< Query tokens of the sequence.
    uint64_t seq_len;  ///< Global context length.
    uint64_t lo, hi;   ///< The split's local index range.
    uint32_t row0;     ///< First row of the group (rows are token-major: r = ti * nheads + h).
    uint32_t nrows;
};

static uint32_t round_up_u32(uint32_t x, uint32_t m)
{
    return (x + m - 1) / m * m;
}

static size_t align_size(size_t x)
{
    return (x + ATTN_ALIGN - 1) & ~(size_t)(ATTN_ALIGN - 1);
}

static struct attn_shape attn_shape_of(const struct dcpk_attn_params *p)
{
    struct attn_shape sh;
    memset(&sh, 0, sizeof(sh));
    sh.splits = p->num_splits ? p->num_splits : 1;
    if (!p->num_kv_heads || p->num_heads < p->num_kv_heads)
        return sh; /* no work: heads_per_kv = 0 gives an empty grid */
    sh.heads_per_kv = p->num_heads / p->num_kv_heads;
    sh.head_tile = p->head_tile && p->head_tile < sh.heads_per_kv ? p->head_tile : sh.heads_per_kv;
    sh.head_tiles = (sh.heads_per_kv + sh.head_tile - 1) / sh.head_tile;
    sh.heads_per_chunk = p->heads_per_chunk ? p->heads_per_chunk : p->num_heads;
    uint64_t rows = (uint64_t)sh.head_tile * (p->num_q_tokens ? p->num_q_tokens : 1);
    sh.row_cap = rows < ATTN_MAX_ROWS ? round_up_u32((uint32_t)rows, DCPK_VL) : ATTN_MAX_ROWS;
    sh.esize = dcpk_dtype_size(p->dtype);
    /* V read straight from the decoded K tile (MLA): only when the V part of a
     * decoded K row is a whole number of decode blocks, i.e. holds exactly the
     * first v_dim elements (permuted); otherwise V is decoded on its own. */
    sh.v_in_k = p->v_cache == p->k_cache && p->v_row_stride == p->qk_dim && p->v_dim <= p->qk_dim &&
                (p->v_dim == p->qk_dim || p->v_dim % dcpk_decode_block(p->dtype) == 0);
    return sh;
}

/** Lays the scratch regions out in buf (NULL: only measures); returns the bytes used. */
static size_t attn_scratch_layout(const struct dcpk_attn_params *p, const struct attn_shape *sh,
                                  void *buf, struct attn_scratch *w)
{
    const size_t rc = sh->row_cap;
    char *base = buf ? (char *)(((uintptr_t)buf + ATTN_ALIGN - 1) & ~(uintptr_t)(ATTN_ALIGN - 1)) : NULL;
    size_t off = 0;
#define ATTN_CARVE(field, type, count)                     \
    do {                                                   \
        if (base)                                          \
            w->field = (type *)(void *)(base + off);       \
        off += align_size((size_t)(count) * sizeof(type)); \
    } while (0)
    ATTN_CARVE(qt, float, (size_t)p->qk_dim * rc);
    ATTN_CARVE(ot, float, (size_t)p->v_dim * rc);
    ATTN_CARVE(s, float, ATTN_TILE * rc);
    ATTN_CARVE(m, float, rc);
    ATTN_CARVE(l, float, rc);
    ATTN_CARVE(alpha, float, rc);
    ATTN_CARVE(row_begin, uint64_t, rc);
    ATTN_CARVE(row_end, uint64_t, rc);
    ATTN_CARVE(kt, float, (size_t)ATTN_TILE * p->qk_dim);
    ATTN_CARVE(vt, float, sh->v_in_k ? 0 : (size_t)ATTN_TILE * p->v_dim);
#undef ATTN_CARVE
    return off + ATTN_ALIGN; /* room to align the caller's buffer */
}

struct dcpk_grid dcpk_attn_grid(const void *params)
{
    const struct dcpk_attn_params *p = params;
    const struct attn_shape sh = attn_shape_of(p);
    struct dcpk_grid g = {sh.splits, p->num_kv_heads * sh.head_tiles, p->batch};
    return g;
}

size_t dcpk_attn_scratch_bytes(const void *params)
{
    const struct dcpk_attn_params *p = params;
    const struct attn_shape sh = attn_shape_of(p);
    struct attn_scratch w;
    return attn_scratch_layout(p, &sh, NULL, &w);
}

/* ---- row bookkeeping ---------------------------------------------------- */

/** Query token (absolute) and gathered head of row i of a group. */
static void group_row(const struct attn_group *gr, uint32_t i, uint32_t *tok, uint32_t *head)
{
    const uint32_t r = gr->row0 + i;
    *tok = gr->tok0 + r / gr->nheads;
    *head = gr->head0 + r % gr->nheads;
}

/** Local indices of the rank's keys at global positions below pos (0 for pos <= 0). */
static uint64_t local_below(const struct dcpk_attn_params *p, int64_t pos)
{
    return pos > 0 ? dcpk_local_length((uint64_t)pos, p->rank, p->group_size, p->interleave) : 0;
}

/** Clips a local index to the split's range [lo, hi]. */
static uint64_t clip_to_split(const struct attn_group *gr, uint64_t c)
{
    c = c < gr->hi ? c : gr->hi;
    return c > gr->lo ? c : gr->lo;
}

/**
 * Local index past the last key row i of a group may see in the split: the
 * rank's keys at global positions <= the row's position, clipped to [lo, hi].
 */
static uint64_t group_row_end(const struct dcpk_attn_params *p, const struct attn_group *gr,
                              uint32_t i)
{
    const uint32_t ti = (gr->row0 + i) / gr->nheads;
    /* Positions [0, visible) are visible: visible = pos + 1. */
    const int64_t visible = (int64_t)gr->seq_len - (int64_t)gr->ntok + (int64_t)ti + 1;
    return clip_to_split(gr, local_below(p, visible));
}

/**
 * Local index of the first key row i may see in the split: with a sliding window
 * of W tokens, the rank's first key at a global position above pos - W (the
 * inverse placement map: local indices follow global positions); else lo.
 */
static uint64_t group_row_begin(const struct dcpk_attn_params *p, const struct attn_group *gr,
                                uint32_t i)
{
    if (!p->window)
        return gr->lo;
    const uint32_t ti = (gr->row0 + i) / gr->nheads;
    const int64_t visible = (int64_t)gr->seq_len - (int64_t)gr->ntok + (int64_t)ti + 1;
    return clip_to_split(gr, local_below(p, visible - (int64_t)p->window));
}

/** Where row i of a group writes: its output row (element out_idx of out, of dtype out_dtype) and LSE. */
struct row_dst {
    void *out;
    uint64_t out_idx;
    uint32_t out_dtype;
    float *lse;
};

static struct row_dst group_row_dst(const struct dcpk_attn_params *p, const struct attn_shape *sh,
                                    const struct attn_group *gr, uint32_t i)
{
    uint32_t tok, head;
    group_row(gr, i, &tok, &head);
    const uint64_t chunk = head / sh->heads_per_chunk;
    const uint64_t row = (uint64_t)tok * sh->heads_per_chunk + head % sh->heads_per_chunk;
    struct row_dst dst;
    if (sh->splits == 1) {
        dst.out = (void *)(uintptr_t)p->out;
        dst.out_idx = chunk * p->out_chunk_stride + row * p->v_dim;
        dst.out_dtype = p->out_dtype;
        dst.lse = (float *)(uintptr_t)p->lse + chunk * p->lse_chunk_stride + row;
    } else {
        const uint64_t rows_per_chunk = (uint64_t)p->num_q_tokens * sh->heads_per_chunk;
        dst.out = (void *)(uintptr_t)p->ws_o;
        dst.out_idx = gr->split * p->ws_split_stride_o + (chunk * rows_per_chunk + row) * p->v_dim;
        dst.out_dtype = DCPK_FP32;
        dst.lse = (float *)(uintptr_t)p->ws_lse + gr->split * p->ws_split_stride_lse + chunk * rows_per_chunk + row;
    }
    return dst;
}

/* ---- the hot loops (always inlined into each instruction-set variant) --- */

/** qt[d][i] = scale * q_i[d]; padding rows are 0. */
DCPK_INLINE void load_queries(const struct dcpk_attn_params *p, const struct attn_shape *sh,
                              const struct attn_group *gr, uint32_t nrp, float *restrict qt)
{
    const uint32_t qk = p->qk_dim;
    for (uint32_t i = 0; i < nrp; i++) {
        if (i >= gr->nrows) {
            for (uint32_t d = 0; d < qk; d++)
                qt[(size_t)d * nrp + i] = 0.0f;
            continue;
        }
        uint32_t tok, head;
        group_row(gr, i, &tok, &head);
        const uint64_t chunk = head / sh->heads_per_chunk;
        const void *q = (const void *)(uintptr_t)p->q;
        const uint64_t q0 = chunk * p->q_chunk_stride +
                            ((uint64_t)tok * sh->heads_per_chunk + head % sh->heads_per_chunk) * qk;
        /* In the order the K tile is decoded in (see simd.h). */
        for (uint32_t d = 0; d < qk; d++)
            qt[(size_t)d * nrp + i] =
                dcpk_load_as_f32(q, q0 + dcpk_decode_source(p->dtype, qk, d), p->q_dtype) * p->scale;
    }
}

/** Rows of one tile of K or V in the cache: where each row starts, and its bytes. */
struct tile_rows {
    const char *row[ATTN_TILE];
    uint32_t n;     ///< Rows in the tile.
    uint32_t bytes; ///< Bytes per row.
};

/**
 * Finds rows [c0, c0 + nt) of the sequence's local K or V (cache, row stride
 * stride, len elements used). One division per tile: the offset in the page is
 * stepped, the page looked up again only when it changes.
 */
DCPK_INLINE void find_rows(const struct dcpk_attn_params *p, const struct attn_shape *sh,
                           const struct attn_group *gr, uint64_t c0, uint32_t nt, uint64_t cache,
                           uint32_t len, uint32_t stride, struct tile_rows *rows)
{
    const int32_t *table = (const int32_t *)(uintptr_t)p->block_table + (uint64_t)gr->seq * p->max_blocks;
    const size_t row_bytes = (size_t)stride * sh->esize;
    uint64_t page = c0 / p->block_size;
    uint32_t off = (uint32_t)(c0 % p->block_size);
    const char *base = NULL;
    for (uint32_t t = 0; t < nt; t++, off++) {
        if (off == p->block_size) {
            page++;
            off = 0;
        }
        if (t == 0 || off == 0) {
            const uint64_t entry = p->ring_pages ? page % p->ring_pages : page;
            const uint64_t slot = (uint64_t)(uint32_t)table[entry] * p->block_size;
            base = (const char *)(uintptr_t)cache +
                   dcpk_kv_row_index(slot, gr->kv_head, p->num_kv_heads, p->block_size, stride) * sh->esize;
        }
        rows->row[t] = base + off * row_bytes;
    }
    rows->n = nt;
    rows->bytes = len * sh->esize;
}

/**
 * Converts the rows to fp32 at dst[t][len] (decode order), zero-padding rows up
 * to ntp. f16c (a constant in each variant): fp16 rows through vcvtph2ps.
 */
DCPK_INLINE void load_tile(const struct tile_rows *rows, uint32_t len, uint32_t ntp, uint32_t dtype,
                           float fp8_scale, float *restrict dst, int f16c)
{
    if (f16c && dtype == DCPK_FP16)
        for (uint32_t t = 0; t < rows->n; t++)
            dcpk_decode_fp16_f16c(dst + (size_t)t * len, (const uint16_t *)(const void *)rows->row[t], len);
    else
        for (uint32_t t = 0; t < rows->n; t++)
            dcpk_decode_row(dst + (size_t)t * len, rows->row[t], len, dtype, fp8_scale);
    memset(dst + (size_t)rows->n * len, 0, (size_t)(ntp - rows->n) * len * sizeof(float));
}

/**
 * Prefetching of the next tile while this one is computed. Without it each
 * tile starts with a stall on memory (the hardware prefetchers lose the stream
 * at every page and at every switch between K and V); issued all at once, the
 * prefetches stall on the line fill buffers instead. So the compute loops issue
 * them a few lines at a time (prefetch_step), spread over the whole tile.
 */
struct prefetch_cursor {
    const struct tile_rows *rows[2]; ///< Next tile's K rows, then its V rows.
    uint32_t which, row;             ///< The next row to ask for.
    uint32_t per_step;               ///< Rows per prefetch_step.
};

DCPK_INLINE void prefetch_start(struct prefetch_cursor *pc, const struct tile_rows *k,
                                const struct tile_rows *v, uint32_t steps)
{
    pc->rows[0] = k;
    pc->rows[1] = v;
    pc->which = k->n ? 0 : 1;
    pc->row = 0;
    /* One step spare: a step that finishes K stops there, V starts with the next. */
    steps = steps > 1 ? steps - 1 : 1;
    pc->per_step = (k->n + v->n + steps - 1) / steps;
}

DCPK_INLINE void prefetch_step(struct prefetch_cursor *pc)
{
    if (pc->which > 1)
        return;
    const struct tile_rows *r = pc->rows[pc->which];
    const uint32_t end = pc->row + pc->per_step < r->n ? pc->row + pc->per_step : r->n;
    for (uint32_t t = pc->row; t < end; t++)
        for (uint32_t b = 0; b < r->bytes; b += 64)
            __builtin_prefetch(r->row[t] + b, 0, 2);
    pc->row = end;
    if (end == r->n) {
        pc->row = 0;
        pc->which = pc->which == 0 && pc->rows[1]->n ? 1 : 2;
    }
}

/*
 * The two products are register-blocked: 12 accumulators (vectors of query rows)
 * per block, enough to cover the FMA latency with 16 vector registers, each step
 * one vector load and 12 broadcast-FMAs. SCORE_TOKENS tokens per score block;
 * P x V blocks of 12, 8, 4 and 1 output dims. Each comes in two widths: 8 rows
 * (dcpk_vf) and, for the AVX-512 variant, 16 rows (attn_vf16, a zmm register);
 * only the products are widened (they are nearly all of the arithmetic), the
 * softmax stays 8 rows wide.
 */
#define SCORE_TOKENS 12

/** 16 fp32 lanes (a zmm register in the AVX-512 variant; never executed in the others). */
typedef float attn_vf16 __attribute__((vector_size(64)));

/** Rows per vector of the wide products. */
#define ATTN_WIDE_ROWS 16

#define ATTN_VLOAD(vtype, p)          \
    __extension__({                   \
        vtype v_;                     \
        memcpy(&v_, (p), sizeof(v_)); \
        v_;                           \
    })
#define ATTN_VSTORE(p, v)                    \
    do {                                     \
        const __typeof__(v) vs_ = (v);       \
        memcpy((p), &vs_, sizeof(vs_));      \
    } while (0)

/** s[t][r] for SCORE_TOKENS tokens of kt (rows qk apart) and the vector of rows at qt (row stride nrp). */
#define ATTN_DEFINE_SCORE_BLOCK(name, vtype)                                                       \
    DCPK_INLINE void name(float *restrict s, const float *restrict kt, const float *restrict qt, \
                          uint32_t qk, uint32_t nrp)                                             \
    {                                                                                            \
        vtype acc[SCORE_TOKENS];                                                                 \
        DCPK_UNROLL                                                                              \
        for (int j = 0; j < SCORE_TOKENS; j++)                                                   \
            acc[j] = (vtype){0};                                                                 \
        DCPK_UNROLL2                                                                             \
        for (uint32_t d = 0; d < qk; d++) {                                                      \
            const vtype qv = ATTN_VLOAD(vtype, qt + (size_t)d * nrp);                           \
            DCPK_UNROLL                                                                          \
            for (int j = 0; j < SCORE_TOKENS; j++)                                               \
                acc[j] += kt[d + (size_t)j * qk] * qv;                                           \
        }                                                                                        \
        DCPK_UNROLL                                                                              \
        for (int j = 0; j < SCORE_TOKENS; j++)                                                   \
            ATTN_VSTORE(s + (size_t)j * nrp, acc[j]);                                            \
    }
ATTN_DEFINE_SCORE_BLOCK(score_block, dcpk_vf)
ATTN_DEFINE_SCORE_BLOCK(score_block16, attn_vf16)

/** Rows of a vector at row rv of nrp: 16 in the wide variant where 16 are left, else 8. */
DCPK_INLINE uint32_t row_step(uint32_t rv, uint32_t nrp, int wide)
{
    return wide && rv + ATTN_WIDE_ROWS <= nrp ? ATTN_WIDE_ROWS : DCPK_VL;
}

/** Row vectors of nrp rows (the blocks per token block of each product). */
DCPK_INLINE uint32_t row_vectors(uint32_t nrp, int wide)
{
    return wide ? nrp / ATTN_WIDE_ROWS + nrp % ATTN_WIDE_ROWS / DCPK_VL : nrp / DCPK_VL;
}

/**
 * s[t][r] = qt[.][r] . kt[t] for t < ntp (a multiple of SCORE_TOKENS), all nrp
 * rows. Inlined with a constant qk for the common head sizes, so the K rows of
 * a block are one pointer plus constant offsets.
 */
DCPK_INLINE void tile_scores_qk(float *restrict s, const float *restrict kt, const float *restrict qt,
                                uint32_t qk, uint32_t nrp, uint32_t ntp, struct prefetch_cursor *pc, int wide)
{
    for (uint32_t rv = 0, step; rv < nrp; rv += step) {
        step = row_step(rv, nrp, wide);
        for (uint32_t t0 = 0; t0 < ntp; t0 += SCORE_TOKENS) {
            prefetch_step(pc);
            if (step == ATTN_WIDE_ROWS)
                score_block16(s + (size_t)t0 * nrp + rv, kt + (size_t)t0 * qk, qt + rv, qk, nrp);
            else
                score_block(s + (size_t)t0 * nrp + rv, kt + (size_t)t0 * qk, qt + rv, qk, nrp);
        }
    }
}

DCPK_INLINE void tile_scores(float *restrict s, const float *restrict kt, const float *restrict qt,
                             uint32_t qk, uint32_t nrp, uint32_t ntp, struct prefetch_cursor *pc, int wide)
{
    switch (qk) {
    case 64:
        tile_scores_qk(s, kt, qt, 64, nrp, ntp, pc, wide);
        break;
    case 128:
        tile_scores_qk(s, kt, qt, 128, nrp, ntp, pc, wide);
        break;
    case 256:
        tile_scores_qk(s, kt, qt, 256, nrp, ntp, pc, wide);
        break;
    case 576:
        tile_scores_qk(s, kt, qt, 576, nrp, ntp, pc, wide);
        break;
    default:
        tile_scores_qk(s, kt, qt, qk, nrp, ntp, pc, wide);
        break;
    }
}

/** Where the rows of a group see keys: the extremes of their [row_begin, row_end). */
struct row_span {
    uint64_t begin_min, begin_max; ///< Earliest and latest first visible key (sliding window).
    uint64_t end_min, end_max;     ///< Earliest and latest end of the visible keys.
};

/** Tile positions [0, lead) are before row i's first visible key, [first, nt) past its end. */
static void row_visible(uint64_t begin, uint64_t end, uint64_t c0, uint32_t nt, uint32_t *lead, uint32_t *first)
{
    const uint64_t b = begin > c0 ? begin - c0 : 0, e = end > c0 ? end - c0 : 0;
    *lead = (uint32_t)(b < nt ? b : nt);
    *first = (uint32_t)(e < nt ? e : nt);
}

/** Sets s[t][i] = -inf where key c0 + t is outside row i's visible keys [row_begin, row_end). */
static void mask_tile(float *restrict s, const uint64_t *restrict row_begin, const uint64_t *restrict row_end,
                      uint64_t c0, uint32_t nt, uint32_t nrp)
{
    const float neg_inf = dcpk_neg_inf();
    for (uint32_t i = 0; i < nrp; i++) {
        uint32_t lead, first;
        row_visible(row_begin[i], row_end[i], c0, nt, &lead, &first);
        for (uint32_t t = 0; t < lead; t++)
            s[(size_t)t * nrp + i] = neg_inf;
        for (uint32_t t = first; t < nt; t++)
            s[(size_t)t * nrp + i] = neg_inf;
    }
}

/** Online softmax over a tile: s becomes P, m/l are updated, alpha = exp(m_old - m_new). */
DCPK_INLINE void tile_softmax(float *restrict s, float *restrict m, float *restrict l,
                              float *restrict alpha, uint32_t nrp, uint32_t nt)
{
    const dcpk_vf neg_inf = dcpk_vf_set1(dcpk_neg_inf());
    for (uint32_t rv = 0; rv < nrp; rv += DCPK_VL) {
        const dcpk_vf m_old = dcpk_vf_load(m + rv);
        /* Two running maxima: a max is a compare and a blend, too slow for one chain. */
        dcpk_vf m_even = m_old, m_odd = m_old;
        uint32_t t = 0;
        for (; t + 2 <= nt; t += 2) {
            const dcpk_vf s0 = dcpk_vf_load(s + (size_t)t * nrp + rv);
            const dcpk_vf s1 = dcpk_vf_load(s + (size_t)(t + 1) * nrp + rv);
            m_even = DCPK_VF_MAX(m_even, s0);
            m_odd = DCPK_VF_MAX(m_odd, s1);
        }
        if (t < nt) {
            const dcpk_vf s0 = dcpk_vf_load(s + (size_t)t * nrp + rv);
            m_even = DCPK_VF_MAX(m_even, s0);
        }
        const dcpk_vf m_new = DCPK_VF_MAX(m_even, m_odd);
        /* A row with nothing visible yet keeps m = -inf; shift by 0 so no -inf - -inf. */
        const dcpk_vf shift = DCPK_VF_SELECT(m_new == neg_inf, dcpk_vf_set1(0.0f), m_new);
        const dcpk_vf rescale = m_old - shift;
        const dcpk_vf a = dcpk_vf_exp_nonpos(&rescale);
        dcpk_vf sum = {0};
        for (t = 0; t < nt; t++) {
            const dcpk_vf x = dcpk_vf_load(s + (size_t)t * nrp + rv) - shift;
            const dcpk_vf e = dcpk_vf_exp_nonpos(&x);
            DCPK_VF_STORE(s + (size_t)t * nrp + rv, e);
            sum += e;
        }
        DCPK_VF_STORE(l + rv, dcpk_vf_load(l + rv) * a + sum);
        DCPK_VF_STORE(m + rv, m_new);
        DCPK_VF_STORE(alpha + rv, a);
    }
}

/** ot[d][r] = ot[d][r] * alpha[r] + sum_t vt[t][d] * s[t][r] for n dims from d = 0 of ot/vt, one vector of rows. */
#define ATTN_DEFINE_ACCUMULATE_BLOCK(name, vtype)                                                        \
    DCPK_INLINE void name(float *restrict ot, const float *restrict s, const float *restrict vt,         \
                          uint32_t vstride, const float *restrict alpha, uint32_t nrp, uint32_t nt, int n) \
    {                                                                                                    \
        const vtype a = ATTN_VLOAD(vtype, alpha);                                                        \
        vtype acc[12];                                                                                   \
        DCPK_UNROLL                                                                                      \
        for (int j = 0; j < n; j++)                                                                      \
            acc[j] = ATTN_VLOAD(vtype, ot + (size_t)j * nrp) * a;                                        \
        DCPK_UNROLL2                                                                                     \
        for (uint32_t t = 0; t < nt; t++, vt += vstride) {                                               \
            const vtype pt = ATTN_VLOAD(vtype, s + (size_t)t * nrp);                                     \
            DCPK_UNROLL                                                                                  \
            for (int j = 0; j < n; j++)                                                                  \
                acc[j] += vt[j] * pt;                                                                    \
        }                                                                                                \
        DCPK_UNROLL                                                                                      \
        for (int j = 0; j < n; j++)                                                                      \
            ATTN_VSTORE(ot + (size_t)j * nrp, acc[j]);                                                   \
    }
ATTN_DEFINE_ACCUMULATE_BLOCK(accumulate_block8, dcpk_vf)
ATTN_DEFINE_ACCUMULATE_BLOCK(accumulate_block16, attn_vf16)

/** The block of the row vector's width (step: row_step()). */
DCPK_INLINE void accumulate_block(float *restrict ot, const float *restrict s, const float *restrict vt,
                                  uint32_t vstride, const float *restrict alpha, uint32_t nrp,
                                  uint32_t nt, int n, uint32_t step)
{
    if (step == ATTN_WIDE_ROWS)
        accumulate_block16(ot, s, vt, vstride, alpha, nrp, nt, n);
    else
        accumulate_block8(ot, s, vt, vstride, alpha, nrp, nt, n);
}

/** P x V blocks of a v_dim: 12 dims at a time, then 8, 4 and 1. */
static uint32_t accumulate_blocks(uint32_t v)
{
    const uint32_t r = v % 12;
    return v / 12 + r / 8 + r % 8 / 4 + r % 4;
}

/** ot[d][r] = ot[d][r] * alpha[r] + sum_t vt[t][d] * s[t][r]. */
DCPK_INLINE void tile_accumulate(float *restrict ot, const float *restrict s, const float *restrict vt,
                                 uint32_t vstride, const float *restrict alpha, uint32_t v,
                                 uint32_t nrp, uint32_t nt, struct prefetch_cursor *pc, int wide)
{
    for (uint32_t rv = 0, step; rv < nrp; rv += step) {
        step = row_step(rv, nrp, wide);
        const float *a = alpha + rv;
        uint32_t d = 0;
        for (; d + 12 <= v; d += 12) {
            prefetch_step(pc);
            accumulate_block(ot + (size_t)d * nrp + rv, s + rv, vt + d, vstride, a, nrp, nt, 12, step);
        }
        if (d + 8 <= v) {
            prefetch_step(pc);
            accumulate_block(ot + (size_t)d * nrp + rv, s + rv, vt + d, vstride, a, nrp, nt, 8, step);
            d += 8;
        }
        if (d + 4 <= v) {
            prefetch_step(pc);
            accumulate_block(ot + (size_t)d * nrp + rv, s + rv, vt + d, vstride, a, nrp, nt, 4, step);
            d += 4;
        }
        for (; d < v; d++) {
            prefetch_step(pc);
            accumulate_block(ot + (size_t)d * nrp + rv, s + rv, vt + d, vstride, a, nrp, nt, 1, step);
        }
    }
}

/** True when row i's accumulators (ot[.][i], nrp apart) and denominator l are all finite. */
static int row_finite(const float *ot, uint32_t v, uint32_t nrp, float l)
{
    int finite = !dcpk_f32_is_nonfinite(l);
    for (uint32_t d = 0; d < v; d++)
        finite &= !dcpk_f32_is_nonfinite(ot[(size_t)d * nrp]);
    return finite;
}

/**
 * Writes each row's normalised output and LSE: 0 and -inf for a row that saw no
 * key (decided from the lengths) or whose visible scores were all -inf (l = 0);
 * NaN everywhere for a row whose result is not finite (docs/design.md §4).
 */
static void write_rows(const struct dcpk_attn_params *p, const struct attn_shape *sh,
                       const struct attn_group *gr, const struct attn_scratch *w, uint32_t nrp)
{
    /* MLA's V is the head of a decoded K row: its order is that of the K row. */
    const uint32_t vdec = sh->v_in_k ? p->qk_dim : p->v_dim;
    for (uint32_t i = 0; i < gr->nrows; i++) {
        const struct row_dst dst = group_row_dst(p, sh, gr, i);
        const int empty = w->row_end[i] <= w->row_begin[i]; /* then ot and l were never set */
        if (!empty && !row_finite(w->ot + i, p->v_dim, nrp, w->l[i])) {
            for (uint32_t d = 0; d < p->v_dim; d++)
                dcpk_store_as(dst.out, dst.out_idx + d, dst.out_dtype, dcpk_qnan());
            *dst.lse = dcpk_qnan();
            continue;
        }
        if (empty || w->l[i] == 0.0f) {
            for (uint32_t d = 0; d < p->v_dim; d++)
                dcpk_store_as(dst.out, dst.out_idx + d, dst.out_dtype, 0.0f);
            *dst.lse = dcpk_neg_inf();
            continue;
        }
        /* ot holds the V dims in decode order (see simd.h); put them back. */
        const float inv = 1.0f / w->l[i];
        for (uint32_t d = 0; d < p->v_dim; d++)
            dcpk_store_as(dst.out, dst.out_idx + dcpk_decode_source(p->dtype, vdec, d), dst.out_dtype,
                          w->ot[(size_t)d * nrp + i] * inv);
        *dst.lse = w->m[i] + logf(w->l[i]);
    }
}

/**
 * True when a value some row must not see is not finite: V rows [0, lead) and
 * [first, nt) of the tile (rows v_stride apart, v values used), the keys before
 * the last row's window starts and past the first row's visible end. 0 * NaN (or
 * 0 * inf) would carry it into rows that mask the key.
 */
static int masked_values_nonfinite(const float *vt, uint32_t vstride, uint32_t v, uint32_t lead, uint32_t first,
                                   uint32_t nt)
{
    for (uint64_t t = 0; t < nt; t++)
        for (uint32_t d = 0; (t < lead || t >= first) && d < v; d++)
            if (dcpk_f32_is_nonfinite(vt[t * vstride + d]))
                return 1;
    return 0;
}

/**
 * tile_accumulate for a tile where a masked value is not finite: each row sums
 * only the keys it sees (the products are skipped, not multiplied by P = 0), so a
 * NaN in a key masked for a row never reaches it. Scalar and slow, and only such
 * tiles (a NaN or infinity in the cache under the causal mask) take it.
 */
static void tile_accumulate_masked(float *restrict ot, const float *restrict s, const float *restrict vt,
                                   uint32_t vstride, const float *restrict alpha, uint32_t v, uint32_t nrp,
                                   uint32_t nt, const uint64_t *restrict row_begin, const uint64_t *restrict row_end,
                                   uint64_t c0)
{
    for (uint32_t i = 0; i < nrp; i++) {
        uint32_t lead, n;
        row_visible(row_begin[i], row_end[i], c0, nt, &lead, &n);
        for (uint32_t d = 0; d < v; d++) {
            float acc = ot[(size_t)d * nrp + i] * alpha[i];
            for (uint32_t t = lead; t < n; t++)
                acc += vt[(size_t)t * vstride + d] * s[(size_t)t * nrp + i];
            ot[(size_t)d * nrp + i] = acc;
        }
    }
}

/**
 * The tiles of local keys [sp->begin_min, sp->end_max) for the nrp rows of a
 * group whose queries are in w->qt: converts each tile (while the next one is
 * prefetched) and folds it into every row's online softmax and output accumulator.
 */
DCPK_INLINE void run_tiles(const struct dcpk_attn_params *p, const struct attn_shape *sh,
                           const struct attn_group *gr, const struct attn_scratch *w, uint32_t nrp,
                           const struct row_span *sp, enum dcpk_cpu_isa isa)
{
    const uint64_t start = sp->begin_min, end = sp->end_max;
    const int wide = isa >= DCPK_CPU_ISA_AVX512, f16c = isa >= DCPK_CPU_ISA_F16C;
    const float *vt = sh->v_in_k ? w->kt : w->vt;
    const uint32_t vstride = sh->v_in_k ? p->qk_dim : p->v_dim;
    struct tile_rows k_rows[2], v_rows[2]; /* this tile's and the next one's */
    uint32_t nt = (uint32_t)(end - start < ATTN_TILE ? end - start : ATTN_TILE);
    find_rows(p, sh, gr, start, nt, p->k_cache, p->qk_dim, p->qk_dim, &k_rows[0]);
    find_rows(p, sh, gr, start, sh->v_in_k ? 0 : nt, p->v_cache, p->v_dim, p->v_row_stride, &v_rows[0]);
    for (uint64_t c0 = start, it = 0; c0 < end; c0 += ATTN_TILE, it ^= 1) {
        const struct tile_rows *kr = &k_rows[it], *vr = &v_rows[it];
        struct tile_rows *kn = &k_rows[it ^ 1], *vn = &v_rows[it ^ 1];
        const uint64_t c1 = c0 + ATTN_TILE;
        const uint32_t nt1 = (uint32_t)(c1 < end ? (end - c1 < ATTN_TILE ? end - c1 : ATTN_TILE) : 0);
        find_rows(p, sh, gr, c1, nt1, p->k_cache, p->qk_dim, p->qk_dim, kn);
        find_rows(p, sh, gr, c1, sh->v_in_k ? 0 : nt1, p->v_cache, p->v_dim, p->v_row_stride, vn);
        nt = kr->n;
        const uint32_t ntp = round_up_u32(nt, SCORE_TOKENS);
        load_tile(kr, p->qk_dim, ntp, p->dtype, p->kv_scale, w->kt, f16c);
        if (!sh->v_in_k)
            load_tile(vr, p->v_dim, nt, p->dtype, p->kv_scale, w->vt, f16c);
        /* One prefetch step per score block and per P x V block. */
        struct prefetch_cursor pc;
        prefetch_start(&pc, kn, vn, row_vectors(nrp, wide) * (ntp / SCORE_TOKENS + accumulate_blocks(p->v_dim)));
        tile_scores(w->s, w->kt, w->qt, p->qk_dim, nrp, ntp, &pc, wide);
        const int masked = c0 + nt > sp->end_min || c0 < sp->begin_max;
        if (masked)
            mask_tile(w->s, w->row_begin, w->row_end, c0, nt, nrp);
        tile_softmax(w->s, w->m, w->l, w->alpha, nrp, nt);
        uint32_t lead, first;
        row_visible(sp->begin_max, sp->end_min, c0, nt, &lead, &first);
        if (masked && masked_values_nonfinite(vt, vstride, p->v_dim, lead, first, nt))
            tile_accumulate_masked(w->ot, w->s, vt, vstride, w->alpha, p->v_dim, nrp, nt, w->row_begin, w->row_end,
                                   c0);
        else
            tile_accumulate(w->ot, w->s, vt, vstride, w->alpha, p->v_dim, nrp, nt, &pc, wide);
    }
}

/** One group of rows of a work item: its visible ranges, its tiles, then its outputs. */
DCPK_INLINE void attn_group_run(const struct dcpk_attn_params *p, const struct attn_shape *sh,
                                const struct attn_group *gr, const struct attn_scratch *w,
                                enum dcpk_cpu_isa isa)
{
    const uint32_t nrp = round_up_u32(gr->nrows, DCPK_VL);
    /* Padding rows (zero queries, never written out) see every key, so they
     * never force masking: the span covers the real rows only. */
    struct row_span sp = {gr->hi, gr->lo, gr->hi, gr->lo};
    int any = 0; /* some row sees a key */
    for (uint32_t i = 0; i < nrp; i++) {
        w->row_begin[i] = i < gr->nrows ? group_row_begin(p, gr, i) : gr->lo;
        w->row_end[i] = i < gr->nrows ? group_row_end(p, gr, i) : gr->hi;
        if (i < gr->nrows && w->row_end[i] > w->row_begin[i]) {
            any = 1;
            sp.begin_min = w->row_begin[i] < sp.begin_min ? w->row_begin[i] : sp.begin_min;
            sp.end_max = w->row_end[i] > sp.end_max ? w->row_end[i] : sp.end_max;
        }
        if (i < gr->nrows) {
            sp.begin_max = w->row_begin[i] > sp.begin_max ? w->row_begin[i] : sp.begin_max;
            sp.end_min = w->row_end[i] < sp.end_min ? w->row_end[i] : sp.end_min;
        }
    }
    if (any) {
        load_queries(p, sh, gr, nrp, w->qt);
        for (uint32_t i = 0; i < nrp; i++) {
            w->m[i] = dcpk_neg_inf();
            w->l[i] = 0.0f;
        }
        memset(w->ot, 0, (size_t)p->v_dim * nrp * sizeof(float));
        run_tiles(p, sh, gr, w, nrp, &sp, isa);
    }
    write_rows(p, sh, gr, w, nrp);
}

/** Work item `item`: its split's key range, then its rows group by group. */
DCPK_INLINE void attn_item(const struct dcpk_attn_params *p, const struct attn_shape *sh,
                           uint64_t item, const struct attn_scratch *w, enum dcpk_cpu_isa isa)
{
    const uint64_t gy = (uint64_t)p->num_kv_heads * sh->head_tiles;
    struct attn_group gr;
    gr.split = (uint32_t)(item % sh->splits);
    const uint32_t y = (uint32_t)(item / sh->splits % gy);
    gr.seq = (uint32_t)(item / sh->splits / gy);
    gr.kv_head = y / sh->head_tiles;
    const uint32_t tile = y % sh->head_tiles;
    gr.head0 = gr.kv_head * sh->heads_per_kv + tile * sh->head_tile;
    gr.nheads = sh->heads_per_kv - tile * sh->head_tile;
    gr.nheads = gr.nheads < sh->head_tile ? gr.nheads : sh->head_tile;

    const int32_t *q_start = (const int32_t *)(uintptr_t)p->q_start;
    const int32_t *seq_lens = (const int32_t *)(uintptr_t)p->seq_lens;
    gr.tok0 = (uint32_t)q_start[gr.seq];
    gr.ntok = q_start[gr.seq + 1] > q_start[gr.seq] ? (uint32_t)(q_start[gr.seq + 1] - q_start[gr.seq]) : 0;
    gr.seq_len = seq_lens[gr.seq] > 0 ? (uint64_t)seq_lens[gr.seq] : 0;

    const uint64_t local_len = dcpk_local_length(gr.seq_len, p->rank, p->group_size, p->interleave);
    /* Sliding window: no query token of the sequence sees a key before its first one's window. */
    const uint64_t first = p->window ? local_below(p, (int64_t)gr.seq_len - gr.ntok + 1 - (int64_t)p->window) : 0;
    const uint64_t base = first / p->block_size * p->block_size;
    const uint64_t pages = local_len > base ? (local_len - base + p->block_size - 1) / p->block_size : 0;
    const uint64_t span = (pages + sh->splits - 1) / sh->splits * p->block_size;
    gr.lo = base + gr.split * span < local_len ? base + gr.split * span : local_len;
    gr.hi = gr.lo + span < local_len ? gr.lo + span : local_len;

    const uint32_t rows = gr.nheads * gr.ntok;
    for (gr.row0 = 0; gr.row0 < rows; gr.row0 += sh->row_cap) {
        gr.nrows = rows - gr.row0 < sh->row_cap ? rows - gr.row0 : sh->row_cap;
        attn_group_run(p, sh, &gr, w, isa);
    }
}

/*
 * The fused split-KV combine (params.h, split_counters) after work item `item` stored
 * its split's partials: it counts itself in (acquire-release: the partials the other
 * splits stored before their counts are seen), and the split that counts last sets
 * the counter back to 0 and merges the item's rows from the workspace with
 * dcpk_merge_cpu, one row at a time (the bits of a separate dcpk_merge launch); its
 * scratch is the item's output accumulators (v_dim * row_cap floats, 64-byte aligned),
 * free once the item's rows are written.
 */
static void attn_split_combine(const struct dcpk_attn_params *p, const struct attn_shape *sh, uint64_t item,
                               const struct attn_scratch *w)
{
    uint32_t *counter = (uint32_t *)(uintptr_t)p->split_counters + item / sh->splits;
    if (__atomic_fetch_add(counter, 1u, __ATOMIC_ACQ_REL) != sh->splits - 1)
        return;
    __atomic_store_n(counter, 0u, __ATOMIC_RELAXED); /* no other split of this launch counts here again */
    const uint64_t gy = (uint64_t)p->num_kv_heads * sh->head_tiles;
    const uint32_t y = (uint32_t)(item / sh->splits % gy), seq = (uint32_t)(item / sh->splits / gy);
    const uint32_t kv_head = y / sh->head_tiles, tile = y % sh->head_tiles;
    const uint32_t head0 = kv_head * sh->heads_per_kv + tile * sh->head_tile;
    const uint32_t nheads = sh->heads_per_kv - tile * sh->head_tile < sh->head_tile
                                ? sh->heads_per_kv - tile * sh->head_tile
                                : sh->head_tile;
    const int32_t *q_start = (const int32_t *)(uintptr_t)p->q_start;
    const uint32_t tok0 = (uint32_t)q_start[seq];
    const uint32_t ntok = q_start[seq + 1] > q_start[seq] ? (uint32_t)(q_start[seq + 1] - q_start[seq]) : 0;
    const uint64_t rows_per_chunk = (uint64_t)p->num_q_tokens * sh->heads_per_chunk;
    const uint32_t out_size = dcpk_dtype_size(p->out_dtype);
    for (uint32_t r = 0; r < ntok * nheads; r++) {
        const uint32_t tok = tok0 + r / nheads, head = head0 + r % nheads;
        const uint64_t chunk = head / sh->heads_per_chunk;
        const uint64_t in_chunk = (uint64_t)tok * sh->heads_per_chunk + head % sh->heads_per_chunk;
        const uint64_t ws_row = chunk * rows_per_chunk + in_chunk;
        const struct dcpk_merge_params mp = {
            .src_o = p->ws_o + 4 * ws_row * p->v_dim,
            .src_lse = p->ws_lse + 4 * ws_row,
            .out = p->out + out_size * (chunk * p->out_chunk_stride + in_chunk * p->v_dim),
            .out_lse = p->lse ? p->lse + 4 * (chunk * p->lse_chunk_stride + in_chunk) : 0,
            .src_stride_o = p->ws_split_stride_o,
            .src_stride_lse = p->ws_split_stride_lse,
            .n_src = sh->splits,
            .rows = 1,
            .rows_per_chunk = 1,
            .v_dim = p->v_dim,
            .src_dtype = DCPK_FP32,
            .out_dtype = p->out_dtype,
        };
        dcpk_merge_cpu(&mp, 0, 1, w->ot);
    }
}

/** Items [begin, end) in variant isa (a constant in each caller, so each gets its own code). */
DCPK_INLINE void attn_items(const struct dcpk_attn_params *p, uint64_t begin, uint64_t end,
                            void *scratch, enum dcpk_cpu_isa isa)
{
    if (!dcpk_act_dtype_ok(p->q_dtype) || !dcpk_act_dtype_ok(p->out_dtype))
        return; /* refused, as the GPU entries do (params.h) */
    const struct attn_shape sh = attn_shape_of(p);
    struct attn_scratch w;
    attn_scratch_layout(p, &sh, scratch, &w);
    for (uint64_t item = begin; item < end; item++) {
        attn_item(p, &sh, item, &w, isa);
        if (sh.splits > 1 && p->split_counters)
            attn_split_combine(p, &sh, item, &w);
    }
}

#if DCP_ARCH_X86_64
__attribute__((target("avx2,fma"))) static void attn_items_avx2(const struct dcpk_attn_params *p,
                                                                uint64_t begin, uint64_t end,
                                                                void *scratch)
{
    attn_items(p, begin, end, scratch, DCPK_CPU_ISA_AVX2);
}

__attribute__((target("avx2,fma,f16c"))) static void attn_items_f16c(const struct dcpk_attn_params *p,
                                                                     uint64_t begin, uint64_t end,
                                                                     void *scratch)
{
    attn_items(p, begin, end, scratch, DCPK_CPU_ISA_F16C);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static void
attn_items_avx512(const struct dcpk_attn_params *p, uint64_t begin, uint64_t end, void *scratch)
{
    attn_items(p, begin, end, scratch, DCPK_CPU_ISA_AVX512);
}
#endif

static void attn_items_baseline(const struct dcpk_attn_params *p, uint64_t begin, uint64_t end,
                                void *scratch)
{
    attn_items(p, begin, end, scratch, DCPK_CPU_ISA_BASELINE);
}

void dcpk_attn_cpu_isa(const void *params, uint64_t begin, uint64_t end, void *scratch,
                       enum dcpk_cpu_isa isa)
{
    /* The best variant at or below isa that this CPU runs. */
    while (isa > DCPK_CPU_ISA_BASELINE && !dcpk_cpu_has_isa(isa))
        isa--;
    switch (isa) {
#if DCP_ARCH_X86_64
    case DCPK_CPU_ISA_AVX512:
        attn_items_avx512(params, begin, end, scratch);
        return;
    case DCPK_CPU_ISA_F16C:
        attn_items_f16c(params, begin, end, scratch);
        return;
    case DCPK_CPU_ISA_AVX2:
        attn_items_avx2(params, begin, end, scratch);
        return;
#endif
    default:
        attn_items_baseline(params, begin, end, scratch);
        return;
    }
}

void dcpk_attn_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    dcpk_attn_cpu_isa(params, begin, end, scratch, dcpk_cpu_isa_active());
}
