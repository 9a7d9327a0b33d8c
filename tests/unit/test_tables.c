/* The one-list tables (docs/design.md §11): every dtype row agrees with the public
 * API, every kernel family is registered with a CPU implementation, and every merge
 * scheme of the operations table has its own name. */
#include <stdio.h>
#include <string.h>

#include "dcp/dcp.h"
#include "dcp/tools.h"
#include "dcp_kernels/cpu.h"
#include "engine/merge.h"
#include "test_util.h"

static void test_dtype_rows(void **state)
{
    (void)state;
    uint32_t rows = 0, wire = 0;
#define CHECK_ROW(NAME, name, bytes, scaled, is_wire, codec)                                        \
    do {                                                                                          \
        const enum dcp_dtype d = DCP_DTYPE_##NAME;                                                \
        assert_int_equal((int)d, (int)DCPK_##NAME);                                               \
        assert_string_equal(dcp_dtype_name(d), #name);                                            \
        assert_int_equal(dcp_dtype_size(d), bytes);                                               \
        assert_int_equal(dcpk_dtype_size(DCPK_##NAME), bytes);                                    \
        assert_int_equal(!!dcpk_dtype_scaled(DCPK_##NAME), scaled);                               \
        /* 300 is exact in every dtype; a scaled one stores 600, saturates to 448, reads 224. */ \
        assert_true(dcp_dtype_round(d, 300.0f, 0.5f) == ((scaled) ? 224.0f : 300.0f));           \
        assert_true(dcp_dtype_round(d, 1.0f, 2.0f) == 1.0f);                                      \
        wire += (is_wire);                                                                        \
        rows++;                                                                                   \
    } while (0);
    DCPK_DTYPES(CHECK_ROW)
#undef CHECK_ROW
    assert_int_equal(rows, DCPK_DTYPE_COUNT);
    assert_int_equal(wire, DCPK_WIRE_DTYPE_COUNT);
    assert_string_equal(dcp_dtype_name((enum dcp_dtype)DCPK_DTYPE_COUNT), "unknown");
}

/* Every family of DCPK_KERNEL_FAMILIES has a CPU implementation, grid and scratch,
 * and its GPU entry names map back to it. */
static void test_kernel_families(void **state)
{
    (void)state;
    for (int k = 0; k < DCPK_KERNEL_COUNT; k++) {
        const struct dcpk_kernel_desc *f = &dcpk_kernels[k];
        assert_non_null(f->name);
        assert_non_null(f->cpu);
        assert_non_null(f->grid);
        assert_non_null(f->scratch);
        assert_true(f->params_size > 0);
        char entry[64];
        snprintf(entry, sizeof(entry), "dcpk_%s", f->name);
        assert_ptr_equal(dcpk_kernel_by_entry_name(entry), f);
    }
}

/* Each row of the merge table (engine/merge.c) has a distinct name, which is the
 * public name of its enum value; the value after the last is unknown. */
static void test_merge_schemes(void **state)
{
    (void)state;
    for (int s = 0; s < DCP_MERGE_SCHEME_COUNT; s++) {
        assert_non_null(dcp_merge_scheme_names[s]);
        assert_string_equal(dcp_comm_scheme_name((enum dcp_comm_scheme)s), dcp_merge_scheme_names[s]);
        for (int t = 0; t < s; t++)
            assert_string_not_equal(dcp_merge_scheme_names[s], dcp_merge_scheme_names[t]);
    }
    assert_string_equal(dcp_comm_scheme_name((enum dcp_comm_scheme)DCP_MERGE_SCHEME_COUNT), "unknown");
    assert_string_equal(dcp_plan_comm_kind_name(DCP_PLAN_COMM_PEER_WRITE), "peer_write");
    assert_string_equal(dcp_plan_comm_kind_name((enum dcp_plan_comm_kind)5), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_rows),
        cmocka_unit_test(test_kernel_families),
        cmocka_unit_test(test_merge_schemes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
