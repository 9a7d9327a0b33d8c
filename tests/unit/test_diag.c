/* Diagnostics list: formatting, counting, ownership. */
#include <string.h>

#include "test_util.h"
#include "util/diag_internal.h"

static void test_format_and_count(void **state)
{
    (void)state;
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    assert_int_equal(dcp_diag_add(d, DCP_DIAG_ERROR, "dep.yaml", 12, 9, "parallel.dcp",
                                  "dcp=%u does not divide %u", 3u, 4u), DCP_OK);
    assert_int_equal(dcp_diag_add(d, DCP_DIAG_WARNING, "dep.yaml", 3, 1, "", "odd"), DCP_OK);
    assert_int_equal(dcp_diag_add(d, DCP_DIAG_ERROR, NULL, 0, 0, "model.layers", "missing"), DCP_OK);
    assert_int_equal(dcp_diag_count(d), 3);
    assert_int_equal(dcp_diag_error_count(d), 2);

    char buf[256];
    dcp_diag_format(dcp_diag_get(d, 0), buf, sizeof(buf));
    assert_string_equal(buf, "dep.yaml:12:9: parallel.dcp: dcp=3 does not divide 4");
    dcp_diag_format(dcp_diag_get(d, 1), buf, sizeof(buf));
    assert_string_equal(buf, "dep.yaml:3:1: warning: odd");
    dcp_diag_format(dcp_diag_get(d, 2), buf, sizeof(buf));
    assert_string_equal(buf, "model.layers: missing");

    /* snprintf contract: returns the full length even when truncated. */
    int n = dcp_diag_format(dcp_diag_get(d, 0), buf, 8);
    assert_int_equal(n, (int)strlen("dep.yaml:12:9: parallel.dcp: dcp=3 does not divide 4"));
    assert_int_equal(strlen(buf), 7);

    assert_null(dcp_diag_get(d, 3));
    dcp_diag_clear(d);
    assert_int_equal(dcp_diag_count(d), 0);
    assert_int_equal(dcp_diag_error_count(d), 0);
    dcp_diag_destroy(&d);
    assert_null(d);
    dcp_diag_destroy(&d); /* NULL is fine */
}

static void test_null_diag_is_ignored(void **state)
{
    (void)state;
    assert_int_equal(dcp_diag_add(NULL, DCP_DIAG_ERROR, "f", 1, 1, "p", "m"), DCP_OK);
    assert_int_equal(dcp_diag_count(NULL), 0);
}

static void test_strerror(void **state)
{
    (void)state;
    assert_string_equal(dcp_strerror(DCP_ENOSPC), "no free KV blocks");
    assert_string_equal(dcp_strerror(12345), "unknown error");
    assert_int_equal(dcp_error(DCP_EINVAL, "bad %s", "thing"), DCP_EINVAL);
    assert_string_equal(dcp_last_error(), "bad thing");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_and_count),
        cmocka_unit_test(test_null_diag_is_ignored),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
