/* The pacing of polling loops (util.h, dcp_poll): the first polls spin, bounded in
 * time and count, before any sleep; then sleeps start at 20 us and double up to
 * 1 ms. A loop that slept from the first poll (what the NCCL and device waits did)
 * fails the first test; one that spins without a bound fails the second. */
#include <stdio.h>

#include "test_util.h"
#include "util/util.h"

static void test_spins_before_sleeping(void **state)
{
    (void)state;
    struct dcp_poll p;
    dcp_poll_init(&p);
    p.spin_until = dcp_now_seconds() + 60; /* only the count can end spinning here */
    uint32_t spins = 0;
    long slept = 0;
    while ((slept = dcp_poll_pause(&p)) == 0 && spins <= DCP_POLL_SPIN_MAX)
        spins++;
    assert_int_equal(spins, DCP_POLL_SPIN_MAX); /* spun, and no more than the bound */
    assert_int_equal(slept, DCP_POLL_FIRST_SLEEP_NS);
}

static void test_spin_time_bound(void **state)
{
    (void)state;
    struct dcp_poll p;
    const double t0 = dcp_now_seconds();
    dcp_poll_init(&p);
    uint32_t spins = 0;
    long slept = 0;
    while ((slept = dcp_poll_pause(&p)) == 0)
        spins++;
    const double spun = dcp_now_seconds() - t0;
    assert_true(spins <= DCP_POLL_SPIN_MAX);
    assert_int_equal(slept, DCP_POLL_FIRST_SLEEP_NS);
    /* Spinning ended by the time budget unless the count ran out first, and not
     * much later (generous: a loaded machine or valgrind). */
    if (spins < DCP_POLL_SPIN_MAX)
        assert_true(spun >= DCP_POLL_SPIN_S);
    assert_true(spun < DCP_POLL_SPIN_S + 0.5);
}

static void test_sleeps_double_to_the_cap(void **state)
{
    (void)state;
    struct dcp_poll p;
    dcp_poll_init(&p);
    p.spin_until = 0; /* spinning over */
    long want = DCP_POLL_FIRST_SLEEP_NS;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(dcp_poll_pause(&p), want);
        want = DCP_MIN(want * 2, DCP_POLL_MAX_SLEEP_NS);
    }
    assert_int_equal(want, DCP_POLL_MAX_SLEEP_NS);
    /* Spinning never resumes once a sleep happened, even within the time budget. */
    p.spin_until = dcp_now_seconds() + 10;
    assert_int_equal(dcp_poll_pause(&p), DCP_POLL_MAX_SLEEP_NS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spins_before_sleeping),
        cmocka_unit_test(test_spin_time_bound),
        cmocka_unit_test(test_sleeps_double_to_the_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
