/* group_harness.c: see group_harness.h. */
#include "group_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_kernels/convert.h"
#include "dcp_kernels/placement.h"
#include "oracle.h"
#include "ptx/cpu/isa.h"

#define ADDR(p) ((uint64_t)(uintptr_t)(p))
/** Sequences of an indexer problem. */
#define MAX_SEQS 3

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    assert_non_null(p);
    return p;
}

/* ---- attention through a DCP group ----------------------------------------------- */

/** Every rank's partial result, in one allocation so a merge can stride over ranks. */
struct partials {
    uint32_t ranks;
    uint64_t rows_per_chunk; ///< tokens * heads_per_chunk
    uint64_t rank_stride_o;  ///< ranks * rows_per_chunk * v_dim (no padding: ag_rs needs rows contiguous)
    uint64_t rank_stride_lse;
    float *o;
    float *lse;
};

static struct attn_output rank_output(const struct partials *pt, uint32_t r, uint32_t v_dim)
{
    const struct attn_output o = {
        .out = pt->o + r * pt->rank_stride_o, .lse = pt->lse + r * pt->rank_stride_lse,
        .out_chunk_stride = pt->rows_per_chunk * v_dim, .lse_chunk_stride = pt->rows_per_chunk,
    };
    return o;
}

/** a2a: destination d merges chunk d of every rank. */
static void merge_a2a(const struct attn_problem *pb, const struct partials *pt, uint32_t d,
                      struct test_rng *rng, float *out, float *lse)
{
    const struct dcpk_merge_params mp = {
        .src_o = (uint64_t)(uintptr_t)(pt->o + d * pt->rows_per_chunk * pb->v_dim),
        .src_lse = (uint64_t)(uintptr_t)(pt->lse + d * pt->rows_per_chunk),
        .out = (uint64_t)(uintptr_t)out, .out_lse = (uint64_t)(uintptr_t)lse,
        .src_stride_o = pt->rank_stride_o, .src_stride_lse = pt->rank_stride_lse,
        .n_src = pt->ranks, .rows = (uint32_t)pt->rows_per_chunk,
        .rows_per_chunk = (uint32_t)pt->rows_per_chunk, .v_dim = pb->v_dim,
    };
    run_kernel(DCPK_KERNEL_merge, &mp, rng);
}

/** ag_rs, step 1 on rank r: scale its partials by exp(lse_r - Lambda); own chunk's Lambda to lse. */
static void scale_ag_rs(const struct attn_problem *pb, const struct partials *pt, uint32_t r,
                        struct test_rng *rng, float *o, float *lse)
{
    const struct dcpk_lse_scale_params sp = {
        .lse_all = (uint64_t)(uintptr_t)pt->lse, .o = (uint64_t)(uintptr_t)o,
        .out_lse = (uint64_t)(uintptr_t)lse, .n_src = pt->ranks, .self = r,
        .rows = (uint32_t)(pt->rows_per_chunk * pt->ranks),
        .rows_per_chunk = (uint32_t)pt->rows_per_chunk, .own_chunk = r, .v_dim = pb->v_dim,
    };
    run_kernel(DCPK_KERNEL_lse_scale, &sp, rng);
}

/** ag_rs, step 2 for destination d: chunk d summed over the scaled partials of every rank. */
static void reduce_ag_rs(const struct attn_problem *pb, const struct partials *pt, const float *scaled,
                         uint32_t d, struct test_rng *rng, float *out)
{
    uint64_t *srcs = xcalloc(pt->ranks, sizeof(uint64_t));
    for (uint32_t r = 0; r < pt->ranks; r++)
        srcs[r] = (uint64_t)(uintptr_t)(scaled + r * pt->rank_stride_o);
    const struct dcpk_reduce_params rp = {
        .dst = (uint64_t)(uintptr_t)out, .src_ptrs = (uint64_t)(uintptr_t)srcs,
        .src_offset = d * pt->rows_per_chunk * pb->v_dim, .count = pt->rows_per_chunk * pb->v_dim,
        .n_src = pt->ranks,
    };
    run_kernel(DCPK_KERNEL_reduce, &rp, rng);
    free(srcs);
}

/** The sink on destination d's merged rows (rows of hpc heads, from head d * hpc), once. */
static void apply_sinks(const struct attn_problem *pb, uint32_t d, uint32_t hpc, uint64_t rows,
                        struct test_rng *rng, float *out, float *lse)
{
    if (!pb->sinks)
        return;
    const struct dcpk_sink_params sp = {
        .out = (uint64_t)(uintptr_t)out, .lse = (uint64_t)(uintptr_t)lse,
        .sinks = (uint64_t)(uintptr_t)(pb->sinks + d * hpc), .rows = (uint32_t)rows, .num_heads = hpc,
        .v_dim = pb->v_dim, .out_dtype = DCPK_FP32,
    };
    run_kernel(DCPK_KERNEL_sink, &sp, rng);
}

void random_problem_shaped(struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t block,
                           const struct problem_limits *lim, struct test_rng *rng)
{
    static const uint32_t q_lens[] = {1, 2, 4};
    static const uint32_t default_dims[] = {64, 40, 128};
    const uint32_t *dims = lim && lim->dims ? lim->dims : default_dims;
    const uint32_t n_dims = lim && lim->dims ? lim->n_dims : 3;
    const uint32_t max_len = lim && lim->max_len ? lim->max_len : 300;
    memset(pb, 0, sizeof(*pb));
    pb->mla = lim && lim->mla >= 0 ? lim->mla : test_rng_range(rng, 0, 3) == 0;
    /* Gathered heads split evenly over the group: heads = N * (1 or 2). */
    pb->heads = n * (uint32_t)test_rng_range(rng, 1, 2);
    if (pb->mla) {
        pb->kv_heads = 1;
        pb->qk_dim = 576;
        pb->v_dim = 512;
    } else {
        pb->kv_heads = pb->heads % 2 == 0 && test_rng_range(rng, 0, 1) ? 2 : 1;
        pb->qk_dim = pb->v_dim = dims[test_rng_range(rng, 0, n_dims - 1)];
    }
    pb->dtype = (uint32_t)test_rng_range(rng, DCPK_FP32, DCPK_FP8_E4M3);
    pb->block_size = block;
    pb->kv_scale = pb->dtype == DCPK_FP8_E4M3 ? 1.0f / 32.0f : 1.0f;
    pb->scale = (float)(1.0 / sqrt((double)pb->qk_dim));
    pb->batch = (uint32_t)test_rng_range(rng, 1, 3);
    for (uint32_t b = 0; b < pb->batch; b++) {
        /* Half the sequences shorter than one round of the group: some ranks hold nothing. */
        const uint32_t span = n * il;
        pb->seq_len[b] = test_rng_range(rng, 0, 1) ? (uint32_t)test_rng_range(rng, 0, span + 2)
                                                   : (uint32_t)test_rng_range(rng, 1, max_len);
        const uint32_t q = q_lens[test_rng_range(rng, 0, 2)];
        pb->q_len[b] = q < pb->seq_len[b] ? q : pb->seq_len[b];
    }
    problem_fill(pb, rng, 2.0f);
}

void random_problem(struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t block, struct test_rng *rng)
{
    random_problem_shaped(pb, n, il, block, NULL, rng);
}

void run_problem_tol(const struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t splits, double tol,
                     struct test_rng *rng)
{
    const uint32_t hpc = pb->heads / n, v = pb->v_dim;
    struct partials pt = {.ranks = n, .rows_per_chunk = (uint64_t)problem_tokens(pb) * hpc};
    pt.rank_stride_o = n * pt.rows_per_chunk * v;
    pt.rank_stride_lse = n * pt.rows_per_chunk;
    pt.o = xcalloc(n * pt.rank_stride_o, sizeof(float));
    pt.lse = xcalloc(n * pt.rank_stride_lse, sizeof(float));

    struct rank_run run = {.group_size = n, .interleave = il, .chunks = n};
    char desc[512];
    for (uint32_t r = 0; r < n; r++) {
        run.rank = r;
        run.num_splits = splits ? splits : (uint32_t)test_rng_range(rng, 1, 3);
        run.head_tile = (uint32_t)test_rng_range(rng, 0, pb->heads / pb->kv_heads);
        /* 0: the default pick (and the only one harness_launch takes) */
        run.variant = harness_launch ? 0 : (int)test_rng_range(rng, 0, DCPK_CPU_ISA_COUNT);
        const struct attn_output dst = rank_output(&pt, r, v);
        rank_attention(pb, &run, rng, &dst);
    }
    run.rank = 0;
    problem_describe(pb, &run, desc, sizeof(desc));

    /* ag_rs works on a copy: the a2a path reads the unscaled partials. */
    float *scaled = xcalloc(n * pt.rank_stride_o, sizeof(float));
    memcpy(scaled, pt.o, n * pt.rank_stride_o * sizeof(float));
    float *rs_lse = xcalloc(n * pt.rows_per_chunk, sizeof(float));
    for (uint32_t r = 0; r < n; r++)
        scale_ag_rs(pb, &pt, r, rng, scaled + r * pt.rank_stride_o, rs_lse + r * pt.rows_per_chunk);

    float *out = xcalloc(pt.rows_per_chunk * v, sizeof(float));
    float *lse = xcalloc(pt.rows_per_chunk, sizeof(float));
    for (uint32_t d = 0; d < n; d++) {
        const struct attn_output res = {.out = out, .lse = lse};
        char what[600];
        merge_a2a(pb, &pt, d, rng, out, lse);
        apply_sinks(pb, d, hpc, pt.rows_per_chunk, rng, out, lse);
        snprintf(what, sizeof(what), "a2a dest %u: %s", d, desc);
        check_against_oracle(pb, d * hpc, hpc, hpc, &res, tol, what);

        reduce_ag_rs(pb, &pt, scaled, d, rng, out);
        memcpy(lse, rs_lse + d * pt.rows_per_chunk, pt.rows_per_chunk * sizeof(float));
        apply_sinks(pb, d, hpc, pt.rows_per_chunk, rng, out, lse);
        snprintf(what, sizeof(what), "ag_rs dest %u: %s", d, desc);
        check_against_oracle(pb, d * hpc, hpc, hpc, &res, tol, what);
    }
    free(out);
    free(lse);
    free(scaled);
    free(rs_lse);
    free(pt.o);
    free(pt.lse);
}

void run_problem(const struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t splits, struct test_rng *rng)
{
    run_problem_tol(pb, n, il, splits, GROUP_TOLERANCE, rng);
}

uint32_t random_block(struct test_rng *rng, uint32_t il)
{
    static const uint32_t blocks[] = {1, 4, 16, 64};
    uint32_t block;
    do
        block = blocks[test_rng_range(rng, 0, 3)];
    while (il && (block < il || block % il));
    return block;
}

void random_topk(struct attn_problem *pb, uint32_t n, uint32_t il, int shape, uint32_t only,
                        struct test_rng *rng)
{
    for (uint32_t b = 0; b < pb->batch; b++) {
        const uint32_t len = pb->seq_len[b];
        pb->topk[b] = malloc((size_t)(pb->q_len[b] ? pb->q_len[b] : 1) * pb->num_topk * sizeof(int32_t));
        assert_non_null(pb->topk[b]);
        for (uint32_t i = 0; i < pb->q_len[b]; i++) {
            int32_t *row = pb->topk[b] + (size_t)i * pb->num_topk;
            uint32_t e = 0;
            for (uint32_t p = 0; p < len && e < pb->num_topk; p++) {
                const int take = shape == 3   ? 1
                                 : shape == 2 ? 0
                                 : shape == 1 ? dcpk_owner_rank(p, n, il) == only && test_rng_range(rng, 0, 1)
                                              : test_rng_range(rng, 0, 2) == 0;
                if (take)
                    row[e++] = (int32_t)p;
            }
            for (; e < pb->num_topk; e++)
                row[e] = -1;
            for (uint32_t x = pb->num_topk; x > 1; x--) { /* any order */
                const uint32_t y = (uint32_t)test_rng_range(rng, 0, x - 1);
                const int32_t t = row[x - 1];
                row[x - 1] = row[y];
                row[y] = t;
            }
        }
    }
}

/* ---- the DSA indexer through a DCP group ------------------------------------------ */

/** One indexer problem: sequences, index queries, weights and keys (values exact in dtype). */
struct index_problem {
    uint32_t batch, len[MAX_SEQS], q_len[MAX_SEQS];
    uint32_t heads, dim, k, dtype;
    int integers;     ///< Small integers: every score exact in fp32, ties common.
    float *q[MAX_SEQS]; ///< [q_len][heads][dim]
    float *w[MAX_SEQS]; ///< [q_len][heads]
    float *key[MAX_SEQS]; ///< [len][dim], exact in dtype
};

static float draw(struct test_rng *rng, int integers, int weight)
{
    if (integers)
        return weight ? (float)(1 << test_rng_range(rng, 0, 2)) * 0.5f : (float)((int)test_rng_range(rng, 0, 4) - 2);
    return (float)(test_rng_unit(rng) * (weight ? 1.0 : 2.0));
}

static void problem_make(struct index_problem *ip, uint32_t n, uint32_t il, struct test_rng *rng)
{
    static const uint32_t dims[] = {16, 32, 128};
    static const uint32_t dtypes[] = {DCPK_FP32, DCPK_BF16, DCPK_FP8_E4M3};
    memset(ip, 0, sizeof(*ip));
    ip->integers = test_rng_range(rng, 0, 1) == 0;
    ip->heads = (uint32_t)test_rng_range(rng, 1, 4);
    ip->dim = dims[test_rng_range(rng, 0, 2)];
    ip->dtype = dtypes[test_rng_range(rng, 0, 2)];
    ip->batch = (uint32_t)test_rng_range(rng, 1, MAX_SEQS);
    uint32_t longest = 1;
    for (uint32_t b = 0; b < ip->batch; b++) {
        ip->len[b] = test_rng_range(rng, 0, 1) ? (uint32_t)test_rng_range(rng, 1, n * il + 2)
                                               : (uint32_t)test_rng_range(rng, 1, 200);
        const uint32_t q = (uint32_t)test_rng_range(rng, 1, 3);
        ip->q_len[b] = q < ip->len[b] ? q : ip->len[b];
        longest = ip->len[b] > longest ? ip->len[b] : longest;
        ip->q[b] = xcalloc((size_t)ip->q_len[b] * ip->heads * ip->dim, sizeof(float));
        ip->w[b] = xcalloc((size_t)ip->q_len[b] * ip->heads, sizeof(float));
        ip->key[b] = xcalloc((size_t)ip->len[b] * ip->dim, sizeof(float));
        for (size_t i = 0; i < (size_t)ip->q_len[b] * ip->heads * ip->dim; i++)
            ip->q[b][i] = act_round(DCPK_BF16, draw(rng, ip->integers, 0));
        for (size_t i = 0; i < (size_t)ip->q_len[b] * ip->heads; i++)
            ip->w[b][i] = draw(rng, ip->integers, 1);
        for (size_t i = 0; i < (size_t)ip->len[b] * ip->dim; i++) { /* exact in the cache dtype */
            unsigned char bits[4];
            dcpk_store_as(bits, 0, ip->dtype, draw(rng, ip->integers, 0));
            ip->key[b][i] = dcpk_load_as_f32(bits, 0, ip->dtype);
        }
    }
    static const uint32_t ks[] = {1, 2, 5, 16};
    ip->k = test_rng_range(rng, 0, 4) ? ks[test_rng_range(rng, 0, 3)] : longest + 3; /* K beyond every length */
}

static void problem_release(struct index_problem *ip)
{
    for (uint32_t b = 0; b < ip->batch; b++) {
        free(ip->q[b]);
        free(ip->w[b]);
        free(ip->key[b]);
    }
}

static uint32_t tokens_of(const struct index_problem *ip)
{
    uint32_t t = 0;
    for (uint32_t b = 0; b < ip->batch; b++)
        t += ip->q_len[b];
    return t;
}

/** What one rank computes: its scores and its local top-k. */
struct rank_index {
    float *scores;      ///< [T][stride]
    int32_t *lens;      ///< [T]
    uint64_t stride;
};

/**
 * Rank r of a group of n (interleave il, pages of block tokens): appends the keys it owns
 * into its own pages, scores every query token and takes its local top k into
 * cand_s / cand_p ([T][k]).
 */
static void rank_index(const struct index_problem *ip, uint32_t r, uint32_t n, uint32_t il, uint32_t block,
                       struct test_rng *rng, struct rank_index *ri, float *cand_s, int32_t *cand_p)
{
    const uint32_t T = tokens_of(ip), es = dcpk_dtype_size(ip->dtype);
    uint32_t max_blocks = 1, pages = 0, blocks[MAX_SEQS];
    uint64_t longest_local = 0;
    for (uint32_t b = 0; b < ip->batch; b++) {
        blocks[b] = (ip->len[b] + block * n - 1) / (block * n);
        max_blocks = blocks[b] > max_blocks ? blocks[b] : max_blocks;
        pages += blocks[b];
        const uint64_t l = dcpk_local_length(ip->len[b], r, n, il);
        longest_local = l > longest_local ? l : longest_local;
    }
    int32_t *table = xcalloc((size_t)ip->batch * max_blocks, sizeof(int32_t));
    for (uint32_t b = 0, next = pages; b < ip->batch; b++) /* pages handed out from the top down */
        for (uint32_t i = 0; i < blocks[b]; i++)
            table[b * max_blocks + i] = (int32_t)--next;
    unsigned char *cache = xcalloc((size_t)pages * block * ip->dim * es + 1, 1);
    memset(cache, 0xff, (size_t)pages * block * ip->dim * es); /* NaN: a key never written shows */
    int32_t seq_lens[MAX_SEQS], q_start[MAX_SEQS + 1];
    q_start[0] = 0;
    for (uint32_t b = 0; b < ip->batch; b++) {
        seq_lens[b] = (int32_t)ip->len[b];
        q_start[b + 1] = q_start[b] + (int32_t)ip->q_len[b];
        int64_t *slots = xcalloc(ip->len[b], sizeof(int64_t));
        for (uint32_t p = 0; p < ip->len[b]; p++) {
            const uint64_t c = dcpk_local_index(p, n, il);
            slots[p] = dcpk_owner_rank(p, n, il) == r
                           ? (int64_t)table[b * max_blocks + c / block] * block + (int64_t)(c % block)
                           : -1;
        }
        const struct dcpk_kv_append_params ap = {
            .k_cache = ADDR(cache), .k_src = ADDR(ip->key[b]), .slots = ADDR(slots), .num_tokens = ip->len[b],
            .num_kv_heads = 1, .k_dim = ip->dim, .block_size = block, .dtype = ip->dtype, .inv_scale = 1.0f,
            .src_dtype = DCPK_FP32,
        };
        run_kernel(DCPK_KERNEL_kv_append, &ap, rng);
        free(slots);
    }
    float *q = xcalloc((size_t)T * ip->heads * ip->dim, sizeof(float)), *w = xcalloc((size_t)T * ip->heads, sizeof(float));
    for (uint32_t b = 0; b < ip->batch; b++) {
        memcpy(q + (size_t)q_start[b] * ip->heads * ip->dim, ip->q[b], (size_t)ip->q_len[b] * ip->heads * ip->dim * sizeof(float));
        memcpy(w + (size_t)q_start[b] * ip->heads, ip->w[b], (size_t)ip->q_len[b] * ip->heads * sizeof(float));
    }
    void *qb = act_encode(q, (size_t)T * ip->heads * ip->dim, DCPK_BF16);
    ri->stride = longest_local + test_rng_range(rng, 0, 3);
    ri->scores = xcalloc((size_t)T * (ri->stride ? ri->stride : 1), sizeof(float));
    ri->lens = xcalloc(T, sizeof(int32_t));
    const struct dcpk_index_score_params sp = {
        .q = ADDR(qb), .weights = ADDR(w), .k_cache = ADDR(cache), .block_table = ADDR(table),
        .seq_lens = ADDR(seq_lens), .q_start = ADDR(q_start), .scores = ADDR(ri->scores), .score_lens = ADDR(ri->lens),
        .score_stride = ri->stride, .batch = ip->batch, .num_q_tokens = T, .num_index_heads = ip->heads,
        .index_dim = ip->dim, .block_size = block, .max_blocks = max_blocks, .rank = r, .group_size = n,
        .interleave = il, .dtype = ip->dtype, .kv_scale = 1.0f, .q_dtype = DCPK_BF16,
    };
    run_kernel(DCPK_KERNEL_index_score, &sp, rng);
    const struct dcpk_topk_params tp = {
        .scores = ADDR(ri->scores), .row_lens = ADDR(ri->lens), .out_scores = ADDR(cand_s), .out_positions = ADDR(cand_p),
        .row_stride = ri->stride, .rows = T, .n_src = 1, .n_entries = (uint32_t)ri->stride, .k = ip->k, .rank = r,
        .group_size = n, .interleave = il,
    };
    run_kernel(DCPK_KERNEL_topk, &tp, rng);
    free(qb);
    free(q);
    free(w);
    free(cache);
    free(table);
}

/** Checks rank r's scores (every local key a token sees) against the oracle's. */
static void check_scores(const struct index_problem *ip, uint32_t r, uint32_t n, uint32_t il,
                         const struct rank_index *ri, double *const *ref)
{
    for (uint32_t b = 0, t = 0; b < ip->batch; b++)
        for (uint32_t i = 0; i < ip->q_len[b]; i++, t++) {
            const uint64_t pos = ip->len[b] - ip->q_len[b] + i;
            assert_int_equal(ri->lens[t], dcpk_local_length(pos + 1, r, n, il));
            for (int32_t c = 0; c < ri->lens[t]; c++) {
                const double want = ref[b][(size_t)i * ip->len[b] + dcpk_global_position((uint64_t)c, r, n, il)];
                const double got = ri->scores[(size_t)t * ri->stride + c];
                if (ip->integers ? got != want : !(fabs(got - want) <= 1e-5 * (1.0 + fabs(want))))
                    harness_fail("rank %u/%u token %u local key %d: score %.9g, oracle %.9g", r, n, t, c, got, want);
            }
        }
}

/** The global top-k of every token against the oracle's. */
static void check_topk(const struct index_problem *ip, const int32_t *got, double *const *ref, uint32_t n)
{
    int32_t *want = xcalloc(ip->k, sizeof(int32_t));
    for (uint32_t b = 0, t = 0; b < ip->batch; b++)
        for (uint32_t i = 0; i < ip->q_len[b]; i++, t++) {
            const double *row = ref[b] + (size_t)i * ip->len[b];
            oracle_topk(row, ip->len[b], ip->k, want);
            /* Random data: a place where the oracle's scores are too close for fp32 may differ. */
            const double kth = want[ip->k - 1] >= 0 ? row[want[ip->k - 1]] : -INFINITY;
            for (uint32_t e = 0; e < ip->k; e++) {
                const int32_t g = got[(size_t)t * ip->k + e];
                if (g == want[e])
                    continue;
                const int close = !ip->integers && g >= 0 && want[e] >= 0 &&
                                  fabs(row[g] - row[want[e]]) <= 1e-5 * (1.0 + fabs(kth));
                if (!close)
                    harness_fail("group of %u, token %u, entry %u of %u: position %d, oracle %d", n, t, e, ip->k, g, want[e]);
            }
        }
    free(want);
}

void run_index_case(uint32_t n, uint32_t il, uint32_t block, struct test_rng *rng)
{
    struct index_problem ip;
    problem_make(&ip, n, il, rng);
    const uint32_t T = tokens_of(&ip), K = ip.k;
    double *ref[MAX_SEQS];
    for (uint32_t b = 0; b < ip.batch; b++) {
        double *q = xcalloc((size_t)ip.q_len[b] * ip.heads * ip.dim, sizeof(double));
        double *w = xcalloc((size_t)ip.q_len[b] * ip.heads, sizeof(double));
        double *k = xcalloc((size_t)ip.len[b] * ip.dim, sizeof(double));
        for (size_t x = 0; x < (size_t)ip.q_len[b] * ip.heads * ip.dim; x++)
            q[x] = ip.q[b][x];
        for (size_t x = 0; x < (size_t)ip.q_len[b] * ip.heads; x++)
            w[x] = ip.w[b][x];
        for (size_t x = 0; x < (size_t)ip.len[b] * ip.dim; x++)
            k[x] = ip.key[b][x];
        ref[b] = xcalloc((size_t)ip.q_len[b] * ip.len[b], sizeof(double));
        oracle_index_scores(ip.len[b], ip.q_len[b], ip.heads, ip.dim, q, w, k, ref[b]);
        free(q);
        free(w);
        free(k);
    }
    /* The gathered candidates [n][T][K], as the group's all-gather lays them out. */
    float *gs = xcalloc((size_t)n * T * K, sizeof(float));
    int32_t *gp = xcalloc((size_t)n * T * K, sizeof(int32_t));
    for (uint32_t r = 0; r < n; r++) {
        struct rank_index ri;
        rank_index(&ip, r, n, il, block, rng, &ri, gs + (size_t)r * T * K, gp + (size_t)r * T * K);
        check_scores(&ip, r, n, il, &ri, ref);
        free(ri.scores);
        free(ri.lens);
    }
    /* Every rank merges the same gathered candidates: one result, checked once per rank. */
    float *out_s = xcalloc((size_t)T * K, sizeof(float));
    int32_t *out_p = xcalloc((size_t)T * K, sizeof(int32_t)), *first = xcalloc((size_t)T * K, sizeof(int32_t));
    for (uint32_t r = 0; r < n; r++) {
        const struct dcpk_topk_params tp = {
            .scores = ADDR(gs), .positions = ADDR(gp), .out_scores = ADDR(out_s), .out_positions = ADDR(out_p),
            .src_stride = (uint64_t)T * K, .row_stride = K, .rows = T, .n_src = n, .n_entries = K, .k = K,
        };
        run_kernel(DCPK_KERNEL_topk, &tp, rng);
        if (r == 0)
            memcpy(first, out_p, (size_t)T * K * sizeof(int32_t));
        else
            assert_memory_equal(first, out_p, (size_t)T * K * sizeof(int32_t));
    }
    check_topk(&ip, out_p, ref, n);
    for (uint32_t b = 0; b < ip.batch; b++)
        free(ref[b]);
    free(gs);
    free(gp);
    free(out_s);
    free(out_p);
    free(first);
    problem_release(&ip);
}

