/* Placement formulas (docs/design.md §2) against brute-force counting. */
#include <stdlib.h>

#include "dcp/placement.h"
#include "test_util.h"

/* Brute force: deal positions 0..L-1 out one by one by owner and count. */
static void check_one(uint64_t len, uint32_t n, uint32_t il)
{
    uint64_t *count = calloc(n, sizeof(*count));
    assert_non_null(count);
    for (uint64_t p = 0; p < len; p++) {
        uint32_t r = dcp_kv_owner_rank(p, n, il);
        assert_true(r < n);
        /* Positions on a rank, in order, get local indices 0, 1, 2, ... */
        assert_int_equal(dcp_kv_local_index(p, n, il), count[r]);
        assert_int_equal(dcp_kv_global_position(count[r], r, n, il), p);
        count[r]++;
    }
    uint64_t sum = 0, lo = UINT64_MAX, hi = 0;
    for (uint32_t r = 0; r < n; r++) {
        assert_int_equal(dcp_kv_local_length(len, r, n, il), count[r]);
        sum += count[r];
        lo = count[r] < lo ? count[r] : lo;
        hi = count[r] > hi ? count[r] : hi;
    }
    assert_int_equal(sum, len);
    assert_true(hi - lo <= il);
    free(count);
}

static void test_brute_force(void **state)
{
    (void)state;
    static const uint32_t ns[] = {1, 2, 3, 4, 5, 8, 16};
    static const uint32_t ils[] = {1, 2, 3, 4, 16, 64};
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
        for (size_t b = 0; b < sizeof(ils) / sizeof(ils[0]); b++)
            for (uint64_t len = 0; len <= 300; len++)
                check_one(len, ns[a], ils[b]);
}

/* Every rank's local tokens fit in ceil(L / (B*N)) pages when B % I == 0. */
static void test_blocks_cover_local_tokens(void **state)
{
    (void)state;
    static const uint32_t ns[] = {1, 2, 3, 4, 8};
    static const uint32_t bs[] = {1, 4, 16, 64};
    for (size_t a = 0; a < 5; a++)
        for (size_t c = 0; c < 4; c++)
            for (uint32_t il = 1; il <= bs[c]; il *= 2) {
                if (bs[c] % il)
                    continue;
                for (uint64_t len = 0; len <= 700; len += 7) {
                    uint64_t blocks = dcp_kv_blocks_for_length(len, bs[c], ns[a]);
                    assert_int_equal(blocks, (len + (uint64_t)bs[c] * ns[a] - 1) / ((uint64_t)bs[c] * ns[a]));
                    for (uint32_t r = 0; r < ns[a]; r++)
                        assert_true(dcp_kv_local_length(len, r, ns[a], il) <= blocks * bs[c]);
                }
            }
}

/* Positions beyond 32 bits: no overflow in the 64-bit arithmetic. */
static void test_large_positions(void **state)
{
    (void)state;
    const uint64_t p = (1ull << 40) + 12345;
    for (uint32_t n = 1; n <= 8; n++)
        for (uint32_t il = 1; il <= 64; il *= 4) {
            uint32_t r = dcp_kv_owner_rank(p, n, il);
            uint64_t c = dcp_kv_local_index(p, n, il);
            assert_int_equal(dcp_kv_global_position(c, r, n, il), p);
            uint64_t total = 0;
            for (uint32_t k = 0; k < n; k++)
                total += dcp_kv_local_length(p, k, n, il);
            assert_int_equal(total, p);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_brute_force),
        cmocka_unit_test(test_blocks_cover_local_tokens),
        cmocka_unit_test(test_large_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
