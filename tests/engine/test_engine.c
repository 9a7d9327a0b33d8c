/* Engine API behaviour on the host backend: shapes, scheduler errors, step
 * validation, and failure propagation between rank threads. */
#include <string.h>

#include "engine_fixture.h"
#include "test_util.h"

static void test_info_matches_shape(void **state)
{
    (void)state;
    struct fixture_shape s = fixture_default_shape();
    s.tp = 4;
    s.dcp = 2;
    s.q_heads = 8;
    dcp_deployment *dep = fixture_deployment(&s);
    dcp_engine *e = fixture_engine(dep, 0, 10, 4, 8, 512);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    if (fixture_backend() != DCP_BACKEND_AUTO)
        assert_string_equal(in.backend, dcp_backend_kind_name(fixture_backend()));
    assert_int_equal(in.tp, 4);
    assert_int_equal(in.dcp, 2);
    assert_int_equal(in.num_local_ranks, 4);
    assert_int_equal(in.q_heads_per_rank, 2);
    assert_int_equal(in.gathered_heads, 4);
    assert_int_equal(in.kv_heads_per_rank, 1);
    assert_int_equal(in.qk_dim, 80);
    assert_int_equal(in.v_dim, 64);
    assert_int_equal(in.num_blocks, 10);
    assert_int_equal(in.tokens_per_block, 8);
    assert_int_equal(dcp_engine_blocks_for(e, 17), 3);
    for (uint32_t i = 0; i < 4; i++) {
        dcp_rank *r = dcp_engine_rank(e, i);
        uint32_t q0, kv0;
        dcp_rank_head_offsets(r, &q0, &kv0);
        assert_int_equal(dcp_rank_tp_rank(r), i);
        assert_int_equal(dcp_rank_group_rank(r), i % 2);
        assert_int_equal(q0, 2 * i);
        assert_int_equal(kv0, 0);
    }
    assert_null(dcp_engine_rank(e, 4));
    dcp_engine_destroy(&e);
    assert_null(e);
    dcp_deployment_destroy(&dep);
}

/* GQA: tp 8 over 2 KV heads gives 4 replicas; DCP 2 splits each replica in two. */
static void test_gqa_heads(void **state)
{
    (void)state;
    struct fixture_shape s = fixture_default_shape();
    s.kind = DCP_ATTN_GQA;
    s.tp = 8;
    s.dcp = 2;
    s.q_heads = 16;
    s.kv_heads = 2;
    s.head_dim = 32;
    dcp_deployment *dep = fixture_deployment(&s);
    dcp_engine *e = fixture_engine(dep, 0, 4, 2, 2, 64);
    for (uint32_t i = 0; i < 8; i++) {
        uint32_t q0, kv0;
        dcp_rank_head_offsets(dcp_engine_rank(e, i), &q0, &kv0);
        assert_int_equal(q0, 2 * i);
        assert_int_equal(kv0, i / 4);
    }
    dcp_engine_destroy(&e);
    /* dcp = 3 does not divide the 4 replicas. */
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.dcp = 3;
    assert_int_equal(dcp_engine_create(&p, &e), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "dcp=3"));
    assert_null(e);
    dcp_deployment_destroy(&dep);
}

static void test_budget_too_small(void **state)
{
    (void)state;
    struct fixture_shape s = fixture_default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.kv_budget_bytes = 100;
    dcp_engine *e = NULL;
    assert_int_equal(dcp_engine_create(&p, &e), DCP_ENOSPC);
    assert_non_null(strstr(dcp_last_error(), "holds no page"));
    dcp_deployment_destroy(&dep);
}

static void test_step_validation(void **state)
{
    (void)state;
    struct fixture_shape s = fixture_default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    dcp_engine *e = fixture_engine(dep, 0, 8, 2, 4, 64);
    uint32_t a, b;
    assert_int_equal(dcp_seq_create(e, &a), DCP_OK);
    assert_int_equal(dcp_seq_create(e, &b), DCP_OK);
    assert_int_equal(dcp_seq_extend(e, a, 5), DCP_OK);
    assert_int_equal(dcp_seq_extend(e, b, 2), DCP_OK);
    uint32_t ids[3] = {a, a, b}, lens[3] = {1, 1, 1};
    struct dcp_batch batch = {.num_seqs = 2, .seq_ids = ids, .q_lens = lens};
    assert_int_equal(dcp_engine_begin_step(e, &batch), DCP_EINVAL); /* duplicate */
    ids[1] = b;
    lens[1] = 3;
    assert_int_equal(dcp_engine_begin_step(e, &batch), DCP_EINVAL); /* q_len > length */
    lens[1] = 1;
    ids[1] = 999;
    assert_int_equal(dcp_engine_begin_step(e, &batch), DCP_EINVAL); /* unknown sequence */
    ids[1] = b;
    lens[0] = 4;
    assert_int_equal(dcp_engine_begin_step(e, &batch), DCP_EINVAL); /* 5 tokens > 4 */
    batch.num_seqs = 3;
    ids[2] = a;
    assert_int_equal(dcp_engine_begin_step(e, &batch), DCP_EINVAL); /* 3 > max_batch */
    batch.num_seqs = 2;
    lens[0] = 3;
    assert_int_equal(dcp_engine_begin_step(e, &batch), DCP_OK);
    /* Changing a sequence invalidates the step: rank calls are refused until the next begin. */
    assert_int_equal(dcp_seq_extend(e, a, 1), DCP_OK);
    float buf[4096] = {0};
    dcp_rank *r = dcp_engine_rank(e, 0);
    assert_int_equal(dcp_rank_append_kv(r, 0, buf, NULL), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "begin_step"));
    assert_int_equal(dcp_engine_begin_step(e, &batch), DCP_OK);
    assert_int_equal(dcp_rank_append_kv(r, 2, buf, NULL), DCP_EINVAL); /* layer out of range */
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* Running out of blocks is an error that leaves every sequence as it was. */
static void test_exhaustion_keeps_state(void **state)
{
    (void)state;
    struct fixture_shape s = fixture_default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    dcp_engine *e = fixture_engine(dep, 0, 3, 2, 4, 64); /* 3 blocks of 8 tokens */
    uint32_t a, b;
    assert_int_equal(dcp_seq_create(e, &a), DCP_OK);
    assert_int_equal(dcp_seq_create(e, &b), DCP_OK);
    assert_int_equal(dcp_seq_extend(e, a, 16), DCP_OK);
    assert_int_equal(dcp_engine_free_blocks(e), 1);
    assert_int_equal(dcp_seq_extend(e, b, 9), DCP_ENOSPC);
    assert_int_equal(dcp_seq_length(e, b), 0);
    assert_int_equal(dcp_seq_length(e, a), 16);
    assert_int_equal(dcp_engine_free_blocks(e), 1);
    assert_int_equal(dcp_seq_extend(e, b, 8), DCP_OK);
    assert_int_equal(dcp_seq_release(e, a), DCP_OK);
    assert_int_equal(dcp_engine_free_blocks(e), 2);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* One rank fails while the others wait in a collective: they are released with
 * DCP_EABORTED and the caller sees the failing rank's own error and message. */
static int fail_on_rank1(dcp_rank *r, void *arg)
{
    float **bufs = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    if (i == 1)
        return dcp_rank_attention(r, 7, bufs[i], bufs[i], NULL); /* bad layer */
    return dcp_rank_attention(r, 0, bufs[i], bufs[i + 2], NULL);
}

static void test_failure_propagates(void **state)
{
    (void)state;
    struct fixture_shape s = fixture_default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    dcp_engine *e = fixture_engine(dep, 0, 8, 1, 1, 64);
    uint32_t a;
    assert_int_equal(dcp_seq_create(e, &a), DCP_OK);
    assert_int_equal(dcp_seq_extend(e, a, 3), DCP_OK);
    const uint32_t one = 1;
    const struct dcp_batch batch = {.num_seqs = 1, .seq_ids = &a, .q_lens = &one};
    assert_int_equal(dcp_engine_begin_step(e, &batch), DCP_OK);
    static float q0[512], q1[512], o0[512], o1[512];
    float *bufs[4] = {q0, q1, o0, o1};
    int err = dcp_engine_run(e, fail_on_rank1, bufs);
    assert_int_equal(err, DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "rank 1: attention: layer 7 out of range"));
    /* An argument error fails that run only: the next one meets the same error, not a dead engine. */
    assert_int_equal(dcp_engine_run(e, fail_on_rank1, bufs), DCP_EINVAL);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

int main(void)
{
    const int status = fixture_backend_check();
    if (status)
        return status;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_matches_shape),
        cmocka_unit_test(test_gqa_heads),
        cmocka_unit_test(test_budget_too_small),
        cmocka_unit_test(test_step_validation),
        cmocka_unit_test(test_exhaustion_keeps_state),
        cmocka_unit_test(test_failure_propagates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
