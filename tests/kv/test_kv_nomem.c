/* KV block manager under failing allocations: ENOMEM and nothing changed.
 * Linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc, so every allocation
 * of the library (and of this file) goes through the wrappers below. */
#include <string.h>

#include "kv/kv_manager.h"
#include "test_util.h"

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);

/* Allocations left before the next one fails; negative = never fail. */
static long allocs_until_failure = -1;

static bool next_alloc_fails(void)
{
    if (allocs_until_failure < 0)
        return false;
    return allocs_until_failure-- == 0;
}

void *__wrap_malloc(size_t size) { return next_alloc_fails() ? NULL : __real_malloc(size); }
void *__wrap_calloc(size_t n, size_t size) { return next_alloc_fails() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t size) { return next_alloc_fails() ? NULL : __real_realloc(p, size); }

static const struct dcp_kv_manager_params many_seqs = {
    /* 2^20 slots leave 16 preallocated table entries each, so long tables allocate. */
    .num_blocks = 200, .block_size = 1, .group_size = 1, .max_seqs = 1u << 20, .max_context = 200,
};

/* Failing the k-th allocation of create, for every k, fails cleanly (valgrind: no leak). */
static void test_create_fails_cleanly(void **state)
{
    (void)state;
    int failures = 0;
    for (long k = 0; k < 20; k++) {
        struct dcp_kv_manager *m = NULL;
        allocs_until_failure = k;
        int st = dcp_kv_manager_create(&many_seqs, &m);
        allocs_until_failure = -1;
        if (st == DCP_OK) {
            assert_non_null(m);
            dcp_kv_manager_destroy(&m);
            break; /* k exceeds the allocations create makes */
        }
        assert_int_equal(st, DCP_ENOMEM);
        assert_null(m);
        failures++;
    }
    assert_true(failures >= 5); /* the manager struct and its four arrays */
}

static void test_extend_and_fork_fail_cleanly(void **state)
{
    (void)state;
    struct dcp_kv_manager *m = NULL;
    assert_int_equal(dcp_kv_manager_create(&many_seqs, &m), DCP_OK);
    uint32_t a;
    assert_int_equal(dcp_kv_seq_create(m, &a), DCP_OK);
    assert_int_equal(dcp_kv_seq_extend(m, a, 16), DCP_OK); /* fills the preallocated slice */

    /* Growing the table off the slab fails: nothing taken. */
    allocs_until_failure = 0;
    assert_int_equal(dcp_kv_seq_extend(m, a, 40), DCP_ENOMEM);
    allocs_until_failure = -1;
    assert_int_equal(dcp_kv_seq_length(m, a), 16);
    assert_int_equal(dcp_kv_free_blocks(m), 200 - 16);
    assert_int_equal(dcp_kv_seq_extend(m, a, 40), DCP_OK);

    /* Growing a heap table (realloc) fails: the old table is intact. */
    allocs_until_failure = 0;
    assert_int_equal(dcp_kv_seq_extend(m, a, 100), DCP_ENOMEM);
    allocs_until_failure = -1;
    uint32_t count;
    const int32_t *t = dcp_kv_seq_blocks(m, a, &count);
    assert_int_equal(count, 56);
    for (uint32_t i = 0; i < count; i++)
        assert_int_equal(t[i], (int32_t)i);
    assert_int_equal(dcp_kv_free_blocks(m), 200 - 56);

    /* Forking the 56-block table into a fresh slot needs a heap table: fails cleanly. */
    uint32_t child = 12345;
    allocs_until_failure = 0;
    assert_int_equal(dcp_kv_seq_fork(m, a, &child), DCP_ENOMEM);
    allocs_until_failure = -1;
    assert_int_equal(child, 12345);
    assert_int_equal(dcp_kv_live_seqs(m), 1);
    for (uint32_t i = 0; i < count; i++)
        assert_int_equal(dcp_kv_block_refcount(m, (int32_t)i), 1);
    assert_int_equal(dcp_kv_seq_fork(m, a, &child), DCP_OK);
    assert_int_equal(child, 1);
    assert_int_equal(dcp_kv_block_refcount(m, 0), 2);
    dcp_kv_manager_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_fails_cleanly),
        cmocka_unit_test(test_extend_and_fork_fail_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
