/*
 * DCP emulated on one machine: a sequence set sharded over N ranks with
 * interleave I (kv_append with slots from the placement formulas, each rank its
 * own pages), attention on every rank over all gathered heads in the chunked
 * layout, then the two merge schemes (docs/design.md §3):
 *   a2a:   rank d merges chunk d of every rank's partials with dcpk_merge;
 *   ag_rs: every rank scales its partials with dcpk_lse_scale (all LSEs gathered),
 *          then chunk d is summed over ranks with dcpk_reduce (the ReduceScatter);
 * both compared with the single-rank oracle over the whole sequence, including
 * L < N*I (empty shards) and multi-token queries across shard boundaries.
 * The layer kinds (docs/design.md §13) run the same way: a sliding window (with
 * the keys in per-sequence rings or not, windows shorter than a shard), sparse
 * top-k lists (tokens of one rank only, empty lists, positions past the query),
 * and the per-head sink, applied once to each destination's merged rows.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_harness.h"
#include "dcp_kernels/placement.h"
#include "ptx/cpu/isa.h"

#define DCP_TOLERANCE 1e-5

/** Every rank's partial result, in one allocation so a merge can stride over ranks. */
struct partials {
    uint32_t ranks;
    uint64_t rows_per_chunk; ///< tokens * heads_per_chunk
    uint64_t rank_stride_o;  ///< ranks * rows_per_chunk * v_dim (no padding: ag_rs needs rows contiguous)
    uint64_t rank_stride_lse;
    float *o;
    float *lse;
};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    assert_non_null(p);
    return p;
}

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

static void random_problem(struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t block,
                           struct test_rng *rng)
{
    static const uint32_t q_lens[] = {1, 2, 4};
    static const uint32_t dims[] = {64, 40, 128};
    memset(pb, 0, sizeof(*pb));
    pb->mla = test_rng_range(rng, 0, 3) == 0;
    /* Gathered heads split evenly over the group: heads = N * (1 or 2). */
    pb->heads = n * (uint32_t)test_rng_range(rng, 1, 2);
    if (pb->mla) {
        pb->kv_heads = 1;
        pb->qk_dim = 576;
        pb->v_dim = 512;
    } else {
        pb->kv_heads = pb->heads % 2 == 0 && test_rng_range(rng, 0, 1) ? 2 : 1;
        pb->qk_dim = pb->v_dim = dims[test_rng_range(rng, 0, 2)];
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
                                                   : (uint32_t)test_rng_range(rng, 1, 300);
        const uint32_t q = q_lens[test_rng_range(rng, 0, 2)];
        pb->q_len[b] = q < pb->seq_len[b] ? q : pb->seq_len[b];
    }
    problem_fill(pb, rng, 2.0f);
}

/**
 * Runs a problem over a group of n ranks with interleave il, each rank with
 * `splits` split-KV (0: 1 to 3 at random), merges it both ways and checks every
 * destination against the oracle.
 */
static void run_problem(const struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t splits,
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
        run.variant = (int)test_rng_range(rng, 0, DCPK_CPU_ISA_COUNT); /* 0: the default pick */
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
        check_against_oracle(pb, d * hpc, hpc, hpc, &res, DCP_TOLERANCE, what);

        reduce_ag_rs(pb, &pt, scaled, d, rng, out);
        memcpy(lse, rs_lse + d * pt.rows_per_chunk, pt.rows_per_chunk * sizeof(float));
        apply_sinks(pb, d, hpc, pt.rows_per_chunk, rng, out, lse);
        snprintf(what, sizeof(what), "ag_rs dest %u: %s", d, desc);
        check_against_oracle(pb, d * hpc, hpc, hpc, &res, DCP_TOLERANCE, what);
    }
    free(out);
    free(lse);
    free(scaled);
    free(rs_lse);
    free(pt.o);
    free(pt.lse);
}

static void run_case(uint32_t n, uint32_t il, uint32_t block, struct test_rng *rng)
{
    struct attn_problem pb;
    random_problem(&pb, n, il, block, rng);
    run_problem(&pb, n, il, 0, rng);
    problem_free(&pb);
}

/** A page size interleave il fits (I <= B, B % I == 0; il 0: I = B), at random. */
static uint32_t random_block(struct test_rng *rng, uint32_t il)
{
    static const uint32_t blocks[] = {1, 4, 16, 64};
    uint32_t block;
    do
        block = blocks[test_rng_range(rng, 0, 3)];
    while (il && (block < il || block % il));
    return block;
}

static void test_dcp_groups(void **state)
{
    (void)state;
    static const uint32_t groups[] = {1, 2, 3, 4, 8};
    static const uint32_t interleaves[] = {1, 2, 16, 0}; /* 0: I = B */
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xdc9);
    for (size_t g = 0; g < 5; g++)
        for (size_t i = 0; i < 4; i++)
            for (int rep = 0; rep < 10; rep++) {
                const uint32_t il = interleaves[i], block = random_block(&rng, il);
                run_case(groups[g], il ? il : block, block, &rng);
            }
}

/* ---- NaN (docs/design.md §4) -------------------------------------------------- */

/** Where the one NaN of a problem goes. */
enum nan_site {
    NAN_KEY,          ///< A key of sequence 0 that all its queries see.
    NAN_VALUE,        ///< A value of such a key (MLA: the latent part of the K row).
    NAN_QUERY,        ///< One query row of sequence 0.
    NAN_MASKED_VALUE, ///< The value at sequence 0's last position: only its last query token sees it.
    NAN_SITES
};

static const char *const nan_site_names[NAN_SITES] = {"key", "value", "query", "masked value"};

/**
 * Puts the NaN of `site` into a random problem whose sequence 0 has room for it
 * (at least 2 query tokens for NAN_MASKED_VALUE), and checks that the oracle makes
 * some of sequence 0's rows NaN (and, for NAN_MASKED_VALUE, leaves the rows of its
 * earlier query tokens finite).
 */
static void nan_problem(struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t block, enum nan_site site,
                        struct test_rng *rng)
{
    const uint32_t min_q = site == NAN_MASKED_VALUE ? 2 : 1;
    for (;;) {
        random_problem(pb, n, il, block, rng);
        if (pb->seq_len[0] >= 2 && pb->q_len[0] >= min_q)
            break;
        problem_free(pb);
    }
    const uint32_t len = pb->seq_len[0], q_len = pb->q_len[0];
    /* Positions [0, len - q_len] are visible to every query token of the sequence. */
    const uint32_t pos = site == NAN_MASKED_VALUE ? len - 1 : (uint32_t)test_rng_range(rng, 0, len - q_len);
    const uint32_t kvh = (uint32_t)test_rng_range(rng, 0, pb->kv_heads - 1);
    const uint32_t vd = (uint32_t)test_rng_range(rng, 0, pb->v_dim - 1);
    float *v_rows = pb->mla ? pb->k_src[0] : pb->v_src[0]; /* MLA: V is the head of the K row */
    const size_t v_row_len = pb->mla ? pb->qk_dim : pb->v_dim;
    switch (site) {
    case NAN_KEY:
        pb->k_src[0][((size_t)pos * pb->kv_heads + kvh) * pb->qk_dim + test_rng_range(rng, 0, pb->qk_dim - 1)] = NAN;
        break;
    case NAN_VALUE:
    case NAN_MASKED_VALUE:
        v_rows[((size_t)pos * pb->kv_heads + kvh) * v_row_len + vd] = NAN;
        break;
    default: {
        const size_t row = (size_t)test_rng_range(rng, 0, q_len - 1) * pb->heads + test_rng_range(rng, 0, pb->heads - 1);
        pb->q[0][row * pb->qk_dim + test_rng_range(rng, 0, pb->qk_dim - 1)] = NAN;
        break;
    }
    }
    double *o = calloc((size_t)q_len * pb->heads * pb->v_dim, sizeof(double));
    double *l = calloc((size_t)q_len * pb->heads, sizeof(double));
    assert_true(o && l);
    problem_oracle(pb, 0, o, l);
    uint32_t nan_rows = 0, nan_first_token = 0;
    for (uint32_t i = 0; i < q_len * pb->heads; i++) {
        nan_rows += isnan(l[i]) != 0;
        nan_first_token += i < pb->heads && isnan(l[i]);
    }
    assert_true(nan_rows > 0);
    if (site == NAN_MASKED_VALUE)
        assert_int_equal(nan_first_token, 0);
    free(o);
    free(l);
}

/*
 * One NaN in sequence 0 (in a visible key or value, a query, or a value only its
 * last query token sees), for split-KV factors 1 to 9 and groups of 1, 2 and 4: the
 * rows it reaches are NaN in their LSE and every output element, through both
 * merges; every other row (the other sequences, the other heads, the query tokens
 * that mask it) keeps the oracle's finite result.
 */
static void test_nan_propagates(void **state)
{
    (void)state;
    static const uint32_t groups[] = {1, 2, 4};
    static const uint32_t interleaves[] = {1, 2, 16, 0};
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x4a4e);
    for (uint32_t splits = 1; splits <= 9; splits++)
        for (size_t g = 0; g < 3; g++)
            for (int site = 0; site < NAN_SITES; site++) {
                const uint32_t il = interleaves[test_rng_range(&rng, 0, 3)], block = random_block(&rng, il);
                struct attn_problem pb;
                nan_problem(&pb, groups[g], il ? il : block, block, (enum nan_site)site, &rng);
                run_problem(&pb, groups[g], il ? il : block, splits, &rng);
                problem_free(&pb);
            }
    print_message("NaN in a %s, %s, %s and %s: NaN rows for every split count and group, both merges\n",
                  nan_site_names[0], nan_site_names[1], nan_site_names[2], nan_site_names[3]);
}

/* ---- layer kinds (docs/design.md §13) ------------------------------------------ */

/** Cases per (group, interleave) of the kind tests: fewer with DCP_TEST_QUICK. */
static int kind_reps(void)
{
    return test_quick() ? 2 : 6;
}

/**
 * Sliding windows from 1 token (shorter than any shard) to longer than the
 * sequence, with the keys in the paged cache or in per-sequence rings of the
 * fewest pages that hold the window, through both merges: every destination
 * against the windowed oracle.
 */
static void test_window_groups(void **state)
{
    (void)state;
    static const uint32_t groups[] = {1, 2, 3, 4, 8};
    static const uint32_t interleaves[] = {1, 2, 16, 0};
    static const uint32_t windows[] = {1, 2, 3, 5, 17, 64, 1000};
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x5a1d);
    for (size_t g = 0; g < 5; g++)
        for (size_t i = 0; i < 4; i++)
            for (int rep = 0; rep < kind_reps(); rep++) {
                const uint32_t il = interleaves[i], block = random_block(&rng, il);
                struct attn_problem pb;
                random_problem(&pb, groups[g], il ? il : block, block, &rng);
                pb.window = windows[test_rng_range(&rng, 0, 6)];
                pb.ring = test_rng_range(&rng, 0, 1) && pb.window < 1000;
                run_problem(&pb, groups[g], il ? il : block, 0, &rng);
                problem_free(&pb);
            }
}

/** Fills the top-k rows of a problem; shape 0: random positions (some past the query, some
 *  repeated -1), 1: only positions rank `only` owns, 2: empty (all -1), 3: every position. */
static void random_topk(struct attn_problem *pb, uint32_t n, uint32_t il, int shape, uint32_t only,
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

/**
 * Sparse top-k (DSA's attention over selected tokens, MLA and GQA): each rank
 * attends the listed positions it owns (positions past a query token are not
 * its keys), both merges give the oracle's attention over the listed keys;
 * lists of one rank's tokens only leave the other ranks empty (LSE -inf), and
 * an empty list gives 0 and -inf everywhere.
 */
static void test_sparse_groups(void **state)
{
    (void)state;
    static const uint32_t groups[] = {1, 2, 3, 4, 8};
    static const uint32_t interleaves[] = {1, 2, 16, 0};
    static const uint32_t ks[] = {1, 3, 8, 64};
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x70bc);
    for (size_t g = 0; g < 5; g++)
        for (size_t i = 0; i < 4; i++)
            for (int rep = 0; rep < kind_reps(); rep++) {
                const uint32_t il = interleaves[i], block = random_block(&rng, il), n = groups[g];
                struct attn_problem pb;
                random_problem(&pb, n, il ? il : block, block, &rng);
                pb.num_topk = ks[test_rng_range(&rng, 0, 3)];
                random_topk(&pb, n, il ? il : block, rep % 4, (uint32_t)test_rng_range(&rng, 0, n - 1), &rng);
                run_problem(&pb, n, il ? il : block, 1, &rng);
                problem_free(&pb);
            }
}

/**
 * The per-head sink after the merge, on full and windowed layers: sinks from
 * -inf (no sink) to values that dominate the row; rows that see no key get the
 * sink's LSE and stay 0.
 */
static void test_sink_groups(void **state)
{
    (void)state;
    static const uint32_t groups[] = {1, 2, 4, 8};
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x51c);
    float sinks[16];
    for (size_t g = 0; g < 4; g++)
        for (int rep = 0; rep < 2 * kind_reps(); rep++) {
            const uint32_t il = rep % 2 ? 2 : 1, block = random_block(&rng, il), n = groups[g];
            struct attn_problem pb;
            random_problem(&pb, n, il, block, &rng);
            for (uint32_t h = 0; h < pb.heads; h++)
                sinks[h] = h % 5 == 4 ? -INFINITY : (float)(test_rng_unit(&rng) * 8.0 - 2.0);
            pb.sinks = sinks;
            pb.window = rep % 3 == 0 ? (uint32_t)test_rng_range(&rng, 1, 40) : 0;
            run_problem(&pb, n, il, 0, &rng);
            problem_free(&pb);
        }
}

/**
 * The sink kernel's rules on rows the merge can produce: an empty row takes
 * the sink's LSE and stays 0; s = -inf changes nothing, bit for bit; a NaN in
 * the row or the sink makes the whole row NaN; and a second application (a sink
 * applied per rank, or twice) moves the LSE away from the once-applied value.
 */
static void test_sink_rules(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x5157);
    float out[5][3] = {{1, 2, 3}, {0, 0, 0}, {4, 5, 6}, {1, 1, 1}, {7, 8, 9}};
    float lse[5] = {0.5f, -INFINITY, 1.0f, NAN, 2.0f};
    const float sinks[5] = {0.25f, 3.0f, -INFINITY, 0.0f, NAN};
    const float before[5][3] = {{1, 2, 3}, {0, 0, 0}, {4, 5, 6}, {1, 1, 1}, {7, 8, 9}};
    const struct dcpk_sink_params sp = {
        .out = (uint64_t)(uintptr_t)out, .lse = (uint64_t)(uintptr_t)lse, .sinks = (uint64_t)(uintptr_t)sinks,
        .rows = 5, .num_heads = 5, .v_dim = 3, .out_dtype = DCPK_FP32,
    };
    run_kernel(DCPK_KERNEL_sink, &sp, &rng);
    const double l0 = log(exp(0.5) + exp(0.25));
    assert_true(fabs(lse[0] - l0) < 1e-6);
    for (int d = 0; d < 3; d++)
        assert_true(fabs(out[0][d] - before[0][d] * exp(0.5 - l0)) < 1e-6);
    assert_true(lse[1] == 3.0f && out[1][0] == 0.0f && out[1][2] == 0.0f); /* empty row: the sink's LSE, 0 */
    assert_true(lse[2] == 1.0f);                                          /* no sink: unchanged, exactly */
    assert_memory_equal(out[2], before[2], sizeof(out[2]));
    assert_true(isnan(lse[3]) && isnan(out[3][0]) && isnan(out[3][2]));
    assert_true(isnan(lse[4]) && isnan(out[4][1]));
    /* Twice: a different row, so a test that applies it once can tell. */
    const float once = lse[0];
    run_kernel(DCPK_KERNEL_sink, &sp, &rng);
    assert_true(fabs(lse[0] - once) > 1e-3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dcp_groups),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_window_groups),
        cmocka_unit_test(test_sparse_groups),
        cmocka_unit_test(test_sink_groups),
        cmocka_unit_test(test_sink_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
