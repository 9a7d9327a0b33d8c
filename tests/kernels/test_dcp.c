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

#include "group_harness.h"
#include "dcp_kernels/placement.h"
#include "ptx/cpu/isa.h"

static void run_case(uint32_t n, uint32_t il, uint32_t block, struct test_rng *rng)
{
    struct attn_problem pb;
    random_problem(&pb, n, il, block, rng);
    run_problem(&pb, n, il, 0, rng);
    problem_free(&pb);
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
