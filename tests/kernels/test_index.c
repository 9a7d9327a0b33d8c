/*
 * DeepSeek Sparse Attention's indexer under DCP (docs/design.md §13): the index
 * keys sharded over N ranks like the KV (written by dcpk_kv_append, one head),
 * every rank scoring the index queries against its shard (dcpk_index_score),
 * keeping its local top-k (dcpk_topk over its local keys), and the group's
 * gathered candidates merged into the global top-k (dcpk_topk over N sources).
 * Checked against the float64 oracle over the whole sequence: the scores, and
 * the global top-k with ties broken by the lower position (integer data, where
 * fp32 is exact and ties are common, must match position for position; random
 * data must match wherever the oracle's scores are not within rounding of the
 * k-th), identical on every rank.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_harness.h"
#include "dcp_kernels/convert.h"
#include "dcp_kernels/placement.h"
#include "oracle.h"

#define MAX_SEQS 3

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    assert_non_null(p);
    return p;
}

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

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
                    fail_msg("rank %u/%u token %u local key %d: score %.9g, oracle %.9g", r, n, t, c, got, want);
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
                    fail_msg("group of %u, token %u, entry %u of %u: position %d, oracle %d", n, t, e, ip->k, g, want[e]);
            }
        }
    free(want);
}

static void run_index_case(uint32_t n, uint32_t il, uint32_t block, struct test_rng *rng)
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

static void test_index_groups(void **state)
{
    (void)state;
    static const uint32_t groups[] = {1, 2, 3, 4, 8};
    static const uint32_t interleaves[] = {1, 2, 4};
    static const uint32_t blocks[] = {4, 8, 16};
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x1d3);
    const int reps = test_quick() ? 3 : 10;
    for (size_t g = 0; g < 5; g++)
        for (size_t i = 0; i < 3; i++)
            for (int rep = 0; rep < reps; rep++)
                run_index_case(groups[g], interleaves[i], blocks[test_rng_range(&rng, i, 2)], &rng);
}

/** The top-k order and validity rules on hand-made candidates. */
static void test_topk_rules(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x70f);
    /* Two sources of one row: ties at 2.0 go to the lower position; NaN, -inf and
     * negative positions are never taken; +inf is the best; the row is padded. */
    const float s[2][4] = {{2.0f, NAN, 1.0f, INFINITY}, {2.0f, -INFINITY, 2.0f, 5.0f}};
    const int32_t p[2][4] = {{9, 1, 4, 7}, {3, 2, 11, -1}};
    float os[8];
    int32_t op[8];
    const struct dcpk_topk_params tp = {
        .scores = ADDR(s), .positions = ADDR(p), .out_scores = ADDR(os), .out_positions = ADDR(op),
        .src_stride = 4, .row_stride = 4, .rows = 1, .n_src = 2, .n_entries = 4, .k = 8,
    };
    run_kernel(DCPK_KERNEL_topk, &tp, &rng);
    const int32_t want[8] = {7, 3, 9, 11, 4, -1, -1, -1};
    assert_memory_equal(op, want, sizeof(want));
    assert_true(os[0] == INFINITY && os[1] == 2.0f && os[4] == 1.0f && os[5] == -INFINITY);
    /* Local keys: entry e of rank 1 of 2 (interleave 2) is position (e / 2) * 4 + 2 + e % 2; row_lens cut. */
    const float ls[6] = {0, 3, 3, 1, 7, 0};
    const int32_t lens[1] = {5};
    const struct dcpk_topk_params lp = {
        .scores = ADDR(ls), .row_lens = ADDR(lens), .out_scores = ADDR(os), .out_positions = ADDR(op),
        .row_stride = 6, .rows = 1, .n_src = 1, .n_entries = 6, .k = 3, .rank = 1, .group_size = 2, .interleave = 2,
    };
    run_kernel(DCPK_KERNEL_topk, &lp, &rng);
    const int32_t lwant[3] = {10, 3, 6}; /* 7 at e=4 -> 10; 3 at e=1 -> 3 and e=2 -> 6 */
    assert_memory_equal(op, lwant, sizeof(lwant));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_rules),
        cmocka_unit_test(test_index_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
