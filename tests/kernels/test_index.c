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

#include "group_harness.h"
#include "dcp_kernels/convert.h"
#include "dcp_kernels/placement.h"
#include "oracle.h"

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

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
