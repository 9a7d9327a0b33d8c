/* The scheduler over an engine's own block manager: its sequence ids are engine
 * sequence ids, every planned batch is accepted by dcp_engine_begin_step() (which
 * refuses writes into shared or published blocks), and the engine's free-block count
 * agrees with the scheduler's view after every step. */
#include <math.h>
#include <string.h>

#include "../engine/engine_fixture.h"
#include "dcp/serve.h"
#include "dcp/tools.h"
#include "test_util.h"

static void begin(dcp_engine *e, const struct dcp_sched_entry *en, uint32_t n)
{
    if (!n)
        return;
    uint32_t ids[16], lens[16];
    assert_true(n <= 16);
    for (uint32_t i = 0; i < n; i++) {
        ids[i] = en[i].seq_id;
        lens[i] = en[i].q_len;
        assert_int_equal(dcp_seq_length(e, en[i].seq_id), en[i].start + en[i].q_len);
    }
    const struct dcp_batch b = {.num_seqs = n, .seq_ids = ids, .q_lens = lens};
    if (dcp_engine_begin_step(e, &b))
        fail_msg("begin_step refused a planned batch: %s", dcp_last_error());
}

static void test_engine_scheduler(void **state)
{
    (void)state;
    struct fixture_shape shape = fixture_default_shape();
    fixture_adapt_to_backend(&shape);
    dcp_deployment *dep = fixture_deployment(&shape);
    dcp_engine *e = fixture_engine(dep, 0, 24, 16, 256, 4096);
    struct dcp_engine_info info;
    dcp_engine_get_info(e, &info);
    struct dcp_sched_params p;
    dcp_sched_default_params(&p);
    p.max_running = 8;
    p.step_tokens = 64;
    p.mtp_drafts = 1;
    p.watermark = 0;
    dcp_sched *s = NULL;
    /* An engine with a live sequence is refused: the scheduler must own them all. */
    uint32_t seq;
    assert_int_equal(dcp_seq_create(e, &seq), DCP_OK);
    assert_int_equal(dcp_sched_create_for_engine(e, &p, &s), DCP_EINVAL);
    assert_int_equal(dcp_seq_release(e, seq), DCP_OK);
    assert_int_equal(dcp_sched_create_for_engine(e, &p, &s), DCP_OK);
    /* Requests in two families sharing 4 hash blocks of 16 tokens. */
    static uint64_t h[12][8];
    for (uint32_t i = 0; i < 12; i++) {
        for (uint32_t j = 0; j < 8; j++)
            h[i][j] = j < 4 ? (i % 2) * 1000 + j : i * 100 + j;
        const struct dcp_serve_request r = {
            .arrival = 0.01 * i, .prompt_tokens = 64 + 8 * i, .output_tokens = 5 + i % 4,
            .hashes = h[i], .num_hashes = 8, .hash_block_tokens = 16,
        };
        assert_int_equal(dcp_sched_add(s, &r, NULL), DCP_OK);
    }
    double now = 0;
    uint32_t steps = 0;
    while (!dcp_sched_done(s)) {
        struct dcp_sched_step st;
        assert_int_equal(dcp_sched_plan_step(s, now, &st), DCP_OK);
        if (!st.num_entries) {
            now = dcp_sched_next_arrival(s);
            assert_true(isfinite(now));
            continue;
        }
        begin(e, st.entries, st.num_decode);
        begin(e, st.entries + st.num_decode, st.num_entries - st.num_decode);
        now += 0.01;
        assert_int_equal(dcp_sched_complete(s, now), DCP_OK);
        if (dcp_sched_check(s))
            fail_msg("invariant: %s", dcp_last_error());
        struct dcp_sched_stats ss;
        dcp_sched_get_stats(s, &ss);
        assert_int_equal(ss.num_blocks, info.num_blocks);
        assert_int_equal(dcp_engine_free_blocks(e) + ss.idle_blocks + ss.used_blocks, info.num_blocks);
        assert_true(++steps < 10000);
    }
    struct dcp_sched_stats ss;
    dcp_sched_get_stats(s, &ss);
    assert_int_equal(ss.finished, 12);
    assert_true(ss.cached_tokens > 0);
    dcp_sched_destroy(&s);
    /* The scheduler released its sequences: the engine is empty again. */
    assert_int_equal(dcp_seq_create(e, &seq), DCP_OK);
    assert_int_equal(dcp_seq_release(e, seq), DCP_OK);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* An engine created with max_seqs = 0 (the engine resolves it to its default) still
 * admits requests: the scheduler takes the engine's resolved limit, not the raw 0. */
static void test_engine_default_max_seqs(void **state)
{
    (void)state;
    struct fixture_shape shape = fixture_default_shape();
    fixture_adapt_to_backend(&shape);
    dcp_deployment *dep = fixture_deployment(&shape);
    struct dcp_engine_params ep;
    dcp_engine_default_params(&ep);
    ep.deployment = dep;
    ep.max_context = 4096;
    ep.max_batch = 4;
    ep.max_query_tokens = 64;
    ep.max_step_tokens = 64;
    ep.max_seqs = 0; /* accepted: the engine resolves it to its default */
    dcp_engine *e = NULL;
    if (dcp_engine_create(&ep, &e))
        fail_msg("engine: %s", dcp_last_error());
    struct dcp_sched_params p;
    dcp_sched_default_params(&p);
    p.step_tokens = 64;
    dcp_sched *s = NULL;
    assert_int_equal(dcp_sched_create_for_engine(e, &p, &s), DCP_OK);
    const struct dcp_serve_request r = {.arrival = 0, .prompt_tokens = 32, .output_tokens = 2};
    assert_int_equal(dcp_sched_add(s, &r, NULL), DCP_OK);
    struct dcp_sched_step st;
    assert_int_equal(dcp_sched_plan_step(s, 0, &st), DCP_OK);
    assert_true(st.num_entries > 0);
    dcp_sched_destroy(&s);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

int main(void)
{
    const int pre = fixture_backend_check();
    if (pre)
        return pre;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_scheduler),
        cmocka_unit_test(test_engine_default_max_seqs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
