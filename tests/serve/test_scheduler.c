/* Serving scheduler on a standalone block pool: admission under the watermark,
 * chunked prefill, prefix hits and LRU eviction, refusal to write shared or published
 * blocks, preemption, MTP truncation, rejection, and a randomized run; the invariants
 * (dcp_sched_check) are checked after every step. */
#include <math.h>
#include <string.h>

#include "dcp/serve.h"
#include "dcp/tools.h"
#include "kv/kv_manager.h"
#include "test_util.h"

static dcp_sched *make(uint64_t blocks, uint32_t block_size, uint32_t group, const struct dcp_sched_params *p)
{
    const struct dcp_sched_pool pool = {
        .num_blocks = blocks, .block_size = block_size, .group_size = group, .max_seqs = 64, .max_context = 1 << 20,
    };
    struct dcp_sched_params d;
    dcp_sched_default_params(&d);
    dcp_sched *s = NULL;
    if (dcp_sched_create(&pool, p ? p : &d, &s))
        fail_msg("%s", dcp_last_error());
    return s;
}

static uint32_t add(dcp_sched *s, double arrival, uint64_t prompt, uint32_t output, const uint64_t *h, uint32_t nh,
                    uint32_t hb)
{
    const struct dcp_serve_request r = {
        .arrival = arrival, .prompt_tokens = prompt, .output_tokens = output, .hashes = h, .num_hashes = nh,
        .hash_block_tokens = hb,
    };
    uint32_t id = UINT32_MAX;
    assert_int_equal(dcp_sched_add(s, &r, &id), DCP_OK);
    return id;
}

static void check(const dcp_sched *s)
{
    if (dcp_sched_check(s))
        fail_msg("invariant: %s", dcp_last_error());
}

/* One step of dt seconds at *now; returns the planned step (valid until the next call). */
static struct dcp_sched_step step(dcp_sched *s, double *now, double dt)
{
    struct dcp_sched_step st;
    assert_int_equal(dcp_sched_plan_step(s, *now, &st), DCP_OK);
    if (st.num_entries) {
        *now += dt;
        assert_int_equal(dcp_sched_complete(s, *now), DCP_OK);
    } else {
        *now = dcp_sched_next_arrival(s);
    }
    check(s);
    return st;
}

/* Runs to the end; returns the steps taken. */
static uint32_t run_all(dcp_sched *s, double *now)
{
    uint32_t n = 0;
    while (!dcp_sched_done(s)) {
        step(s, now, 0.01);
        assert_true(isfinite(*now));
        assert_true(++n < 100000);
    }
    return n;
}

static void test_admission_and_watermark(void **state)
{
    (void)state;
    struct dcp_sched_params p;
    dcp_sched_default_params(&p);
    p.watermark = 0.25; /* 4 of 16 blocks kept free once something runs */
    dcp_sched *s = make(16, 4, 1, &p);
    /* Each request needs 3 blocks for its prompt (10 tokens / 4). */
    for (int i = 0; i < 5; i++)
        add(s, 0, 10, 3, NULL, 0, 0);
    double now = 0;
    struct dcp_sched_step st = step(s, &now, 0.01);
    /* 3 + 3 + 3 + 3 = 12 taken leaves 4 = the watermark: the fourth fits, the fifth not. */
    assert_int_equal(st.admitted, 4);
    assert_int_equal(st.num_decode, 0);
    assert_int_equal(st.prefill_tokens, 40);
    struct dcp_sched_stats ss;
    dcp_sched_get_stats(s, &ss);
    assert_int_equal(ss.running, 4);
    assert_int_equal(ss.waiting, 1);
    assert_int_equal(ss.used_blocks, 12);
    run_all(s, &now);
    for (uint32_t i = 0; i < 5; i++) {
        const struct dcp_sched_request_info *in = dcp_sched_request(s, i);
        assert_int_equal(in->state, DCP_REQ_FINISHED);
        assert_int_equal(in->generated, 3);
        assert_true(in->first_token > in->arrival && in->finish >= in->first_token);
    }
    dcp_sched_get_stats(s, &ss);
    assert_int_equal(ss.used_blocks, 0);
    dcp_sched_destroy(&s);
}

static void test_chunked_prefill(void **state)
{
    (void)state;
    struct dcp_sched_params p;
    dcp_sched_default_params(&p);
    p.step_tokens = 8;
    dcp_sched *s = make(64, 4, 1, &p);
    add(s, 0, 20, 2, NULL, 0, 0);
    add(s, 0, 3, 4, NULL, 0, 0);
    double now = 0;
    struct dcp_sched_step st = step(s, &now, 1);
    assert_int_equal(st.num_entries, 1); /* the budget is spent on the first prompt */
    assert_int_equal(st.entries[0].q_len, 8);
    assert_int_equal(st.entries[0].start, 0);
    st = step(s, &now, 1);
    assert_int_equal(st.entries[0].q_len, 8);
    assert_int_equal(st.entries[0].start, 8);
    assert_true(dcp_sched_request(s, 0)->first_token < 0);
    st = step(s, &now, 1);
    /* 4 tokens finish the first prompt; the rest of the budget starts the second. */
    assert_int_equal(st.num_entries, 2);
    assert_int_equal(st.entries[0].q_len, 4);
    assert_int_equal(st.entries[1].request, 1);
    assert_int_equal(st.entries[1].q_len, 3);
    assert_true(dcp_sched_request(s, 0)->first_token == 3);
    st = step(s, &now, 1);
    /* Both decode now: one token each, appended at the end of their sequences. */
    assert_int_equal(st.num_decode, 2);
    assert_int_equal(st.entries[0].start, 20);
    assert_int_equal(st.entries[0].q_len, 1);
    assert_int_equal(dcp_sched_request(s, 0)->state, DCP_REQ_FINISHED);
    run_all(s, &now);
    dcp_sched_destroy(&s);
}

/* A P/D decode instance (prompts_loaded): an admitted prompt arrives whole in one
 * loaded entry, outside the token budget, and its step counts the first token; the
 * next step decodes it. */
static void test_prompts_loaded(void **state)
{
    (void)state;
    struct dcp_sched_params p;
    dcp_sched_default_params(&p);
    p.step_tokens = 8;
    p.prompts_loaded = true;
    dcp_sched *s = make(64, 4, 1, &p);
    add(s, 0, 20, 3, NULL, 0, 0);
    add(s, 0, 30, 2, NULL, 0, 0);
    double now = 0;
    struct dcp_sched_step st = step(s, &now, 1);
    assert_int_equal(st.num_entries, 2); /* 50 prompt tokens past the 8-token budget */
    assert_true(st.entries[0].loaded && st.entries[1].loaded);
    assert_int_equal(st.entries[0].q_len, 20);
    assert_int_equal(st.entries[1].q_len, 30);
    assert_int_equal(st.loaded_tokens, 50);
    assert_int_equal(st.prefill_tokens, 0);
    assert_int_equal(dcp_sched_request(s, 0)->generated, 1);
    assert_true(dcp_sched_request(s, 0)->first_token == 1);
    st = step(s, &now, 1);
    assert_int_equal(st.num_decode, 2);
    assert_false(st.entries[0].loaded);
    run_all(s, &now);
    assert_int_equal(dcp_sched_request(s, 0)->generated, 3);
    dcp_sched_destroy(&s);
}

static void test_prefix_hits_and_eviction(void **state)
{
    (void)state;
    /* 8-token blocks, 16-token hash blocks: a 40-token prompt with 2 full hash blocks
     * has 32 hashed tokens = 4 cacheable blocks. */
    dcp_sched *s = make(12, 8, 1, NULL);
    const uint64_t ha[3] = {7, 8, 9}, hb[3] = {7, 8, 10}, hc[3] = {100, 101, 102};
    add(s, 0, 40, 2, ha, 3, 16);
    add(s, 1, 40, 2, hb, 3, 16); /* shares 2 hash blocks = 4 KV blocks */
    add(s, 2, 48, 2, ha, 3, 16); /* shares all three, but only full hash blocks count */
    double now = 0;
    while (dcp_sched_request(s, 0)->state != DCP_REQ_FINISHED)
        step(s, &now, 0.1);
    struct dcp_sched_stats ss;
    dcp_sched_get_stats(s, &ss);
    assert_int_equal(ss.idle_blocks, 4); /* kept after the last user left */
    assert_int_equal(ss.used_blocks, 0);
    run_all(s, &now);
    const struct dcp_sched_request_info *b = dcp_sched_request(s, 1), *c = dcp_sched_request(s, 2);
    assert_int_equal(dcp_sched_request(s, 0)->cached_tokens, 0);
    assert_int_equal(b->cached_tokens, 32);
    assert_int_equal(b->computed_tokens, 8);
    /* The third prompt's 48 tokens cover 3 full hash blocks; the first two were cached (32 tokens). */
    assert_int_equal(c->cached_tokens, 32);
    assert_int_equal(c->computed_tokens, 16);
    dcp_sched_get_stats(s, &ss);
    assert_int_equal(ss.prompt_tokens, 128);
    assert_int_equal(ss.cached_tokens, 64);
    /* A request with other content needs 6 blocks + 1 = 7 of 12: idle cached blocks are evicted LRU. */
    const uint64_t before = ss.idle_blocks;
    assert_true(before >= 4);
    add(s, now, 90, 2, hc, 3, 16);
    run_all(s, &now);
    dcp_sched_get_stats(s, &ss);
    assert_true(ss.evictions > 0);
    dcp_sched_destroy(&s);
}

/* The KV manager refuses every write into a shared or published block: truncating
 * into one, and there is no other way (extend appends to private blocks only). */
static void test_shared_blocks_are_never_written(void **state)
{
    (void)state;
    const struct dcp_kv_manager_params kp = {.num_blocks = 8, .block_size = 4, .group_size = 1, .max_seqs = 4,
                                             .max_context = 64};
    struct dcp_kv_manager *m = NULL;
    assert_int_equal(dcp_kv_manager_create(&kp, &m), DCP_OK);
    assert_int_equal(dcp_kv_prefix_cache_enable(m), DCP_OK);
    uint32_t a, b;
    assert_int_equal(dcp_kv_seq_create(m, &a), DCP_OK);
    assert_int_equal(dcp_kv_seq_extend(m, a, 8), DCP_OK);
    const uint64_t keys[2] = {11, 12};
    uint32_t published = 0;
    assert_int_equal(dcp_kv_seq_publish(m, a, keys, 0, 2, &published), DCP_OK);
    assert_int_equal(published, 2);
    /* Cutting into a published block (refcount 1) would let the next append overwrite it. */
    assert_int_equal(dcp_kv_seq_truncate(m, a, 6), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "prefix cache publishes it"));
    assert_int_equal(dcp_kv_seq_truncate(m, a, 4), DCP_OK); /* whole blocks: fine */
    assert_int_equal(dcp_kv_seq_create(m, &b), DCP_OK);
    uint32_t hits = 0;
    assert_int_equal(dcp_kv_seq_attach_prefix(m, b, keys, 2, &hits), DCP_OK);
    assert_int_equal(hits, 2); /* block 2 is idle but still cached */
    assert_int_equal(dcp_kv_seq_length(m, b), 8);
    assert_int_equal(dcp_kv_seq_truncate(m, b, 5), DCP_EINVAL); /* shared with a */
    /* Appending takes a fresh block: the shared ones stay read-only. */
    const int32_t *t = dcp_kv_seq_blocks(m, b, NULL);
    const int32_t b0 = t[0], b1 = t[1];
    assert_int_equal(dcp_kv_seq_extend(m, b, 1), DCP_OK);
    t = dcp_kv_seq_blocks(m, b, NULL);
    assert_true(t[2] != b0 && t[2] != b1);
    assert_false(dcp_kv_block_published(m, t[2]));
    assert_int_equal(dcp_kv_block_refcount(m, b0), 2);
    assert_int_equal(dcp_kv_check(m), DCP_OK);
    /* Attach needs an empty sequence. */
    assert_int_equal(dcp_kv_seq_attach_prefix(m, b, keys, 2, &hits), DCP_EINVAL);
    assert_int_equal(dcp_kv_seq_release(m, a), DCP_OK);
    assert_int_equal(dcp_kv_seq_release(m, b), DCP_OK);
    assert_int_equal(dcp_kv_idle_blocks(m), 2);
    assert_int_equal(dcp_kv_available_blocks(m), 8);
    assert_int_equal(dcp_kv_check(m), DCP_OK);
    dcp_kv_manager_destroy(&m);
}

/* dcp_kv_check() fails with DCP_EINVAL and names what is wrong. */
static void expect_kv_broken(const struct dcp_kv_manager *m, const char *what)
{
    assert_int_equal(dcp_kv_check(m), DCP_EINVAL);
    if (!strstr(dcp_last_error(), "kv check: ") || !strstr(dcp_last_error(), what))
        fail_msg("expected \"%s\", got \"%s\"", what, dcp_last_error());
}

/* The invariant check catches a corrupted refcount and a corrupted free count (set
 * through the test hooks, then restored: the check passes again). */
static void test_kv_check_detects_corruption(void **state)
{
    (void)state;
    const struct dcp_kv_manager_params kp = {.num_blocks = 4, .block_size = 4, .group_size = 1, .max_seqs = 2,
                                             .max_context = 64};
    struct dcp_kv_manager *m = NULL;
    assert_int_equal(dcp_kv_manager_create(&kp, &m), DCP_OK);
    uint32_t a, b;
    assert_int_equal(dcp_kv_seq_create(m, &a), DCP_OK);
    assert_int_equal(dcp_kv_seq_extend(m, a, 8), DCP_OK); /* blocks 0 and 1; 2 and 3 free */
    assert_int_equal(dcp_kv_seq_fork(m, a, &b), DCP_OK);  /* 0 and 1 shared: refcount 2 */
    assert_int_equal(dcp_kv_check(m), DCP_OK);
    const int32_t held = dcp_kv_seq_blocks(m, a, NULL)[0];

    /* A held block counted once too often, and a free block counted as held. */
    uint32_t old = dcp_kv_test_poke_refcount(m, held, 3);
    assert_int_equal(old, 2);
    expect_kv_broken(m, "refcount differs from the tables holding the block (3 vs 2)");
    dcp_kv_test_poke_refcount(m, held, old);
    assert_int_equal(dcp_kv_check(m), DCP_OK);
    old = dcp_kv_test_poke_refcount(m, 2, 1);
    assert_int_equal(old, 0);
    expect_kv_broken(m, "refcount differs from the tables holding the block (1 vs 0)");
    dcp_kv_test_poke_refcount(m, 2, old);
    assert_int_equal(dcp_kv_check(m), DCP_OK);

    /* A free block lost from the free list, and a held block back on it. */
    const uint64_t nfree = dcp_kv_test_poke_free_count(m, 1);
    assert_int_equal(nfree, 2);
    expect_kv_broken(m, "free + idle + used != num_blocks (3 vs 4)");
    dcp_kv_test_poke_free_count(m, 3);
    expect_kv_broken(m, "a free block is in use or published");
    dcp_kv_test_poke_free_count(m, nfree);
    assert_int_equal(dcp_kv_check(m), DCP_OK);

    /* Releasing a sequence twice is refused and leaves everything consistent. */
    assert_int_equal(dcp_kv_seq_release(m, a), DCP_OK);
    assert_int_equal(dcp_kv_seq_release(m, a), DCP_EINVAL);
    assert_int_equal(dcp_kv_check(m), DCP_OK);
    dcp_kv_manager_destroy(&m);
}

/* dcp_sched_check() fails with DCP_EINVAL and names what is wrong. */
static void expect_sched_broken(const dcp_sched *s, const char *what)
{
    assert_int_equal(dcp_sched_check(s), DCP_EINVAL);
    if (!strstr(dcp_last_error(), "sched check: ") || !strstr(dcp_last_error(), what))
        fail_msg("expected \"%s\", got \"%s\"", what, dcp_last_error());
}

/* The scheduler's check catches a request counted under the wrong outcome, one that
 * lost its sequence and one generating past its end. The corruption is written through
 * the request's info (heap memory handed out const), then undone. */
static void test_sched_check_detects_corruption(void **state)
{
    (void)state;
    dcp_sched *s = make(16, 4, 1, NULL);
    const uint32_t done = add(s, 0, 4, 1, NULL, 0, 0);    /* finishes with its prefill */
    const uint32_t running = add(s, 0, 4, 10, NULL, 0, 0);
    double now = 0;
    for (int i = 0; i < 3; i++)
        step(s, &now, 0.01);
    struct dcp_sched_request_info *d = (struct dcp_sched_request_info *)dcp_sched_request(s, done);
    struct dcp_sched_request_info *r = (struct dcp_sched_request_info *)dcp_sched_request(s, running);
    assert_int_equal(d->state, DCP_REQ_FINISHED);
    assert_int_equal(r->state, DCP_REQ_DECODE);
    assert_int_equal(dcp_sched_check(s), DCP_OK);

    d->state = DCP_REQ_REJECTED; /* finished, but counted as rejected */
    expect_sched_broken(s, "counts disagree (waiting 0/0, running 1/1, finished 0/1, rejected 1/0");
    d->state = DCP_REQ_FINISHED;
    assert_int_equal(dcp_sched_check(s), DCP_OK);

    const uint32_t seq = r->seq_id;
    r->seq_id = UINT32_MAX; /* running without its sequence: its KV blocks are lost */
    expect_sched_broken(s, "has sequence 4294967295");
    r->seq_id = seq;
    r->state = DCP_REQ_WAITING; /* out of the running set, not in the queue, holding KV */
    expect_sched_broken(s, "has sequence");
    r->state = DCP_REQ_DECODE;
    assert_int_equal(dcp_sched_check(s), DCP_OK);

    const uint32_t gen = r->generated;
    r->generated = r->output_tokens + 1;
    expect_sched_broken(s, "generated 11 of 10");
    r->generated = gen;
    assert_int_equal(dcp_sched_check(s), DCP_OK);

    double t = now;
    run_all(s, &t);
    dcp_sched_destroy(&s);
}

static void test_preemption_requeues_youngest(void **state)
{
    (void)state;
    struct dcp_sched_params p;
    dcp_sched_default_params(&p);
    p.watermark = 0;
    /* 10 blocks of 4 tokens: three 12-token prompts fit (9 blocks) but cannot all grow by 20. */
    dcp_sched *s = make(10, 4, 1, &p);
    for (int i = 0; i < 3; i++)
        add(s, 0, 12, 20, NULL, 0, 0);
    double now = 0;
    struct dcp_sched_step st = step(s, &now, 0.01);
    assert_int_equal(st.admitted, 3);
    uint32_t first_preempted = UINT32_MAX;
    uint32_t n = 0;
    while (!dcp_sched_done(s)) {
        st = step(s, &now, 0.01);
        if (st.preempted && first_preempted == UINT32_MAX)
            for (uint32_t i = 0; i < 3; i++)
                if (dcp_sched_request(s, i)->preemptions)
                    first_preempted = i;
        assert_true(++n < 10000);
    }
    assert_int_equal(first_preempted, 2); /* the youngest went first */
    struct dcp_sched_stats ss;
    dcp_sched_get_stats(s, &ss);
    assert_true(ss.preemptions >= 1);
    assert_int_equal(ss.finished, 3);
    for (uint32_t i = 0; i < 3; i++) {
        const struct dcp_sched_request_info *in = dcp_sched_request(s, i);
        assert_int_equal(in->generated, 20);
        /* A recompute prefills the prompt and the outputs so far again. */
        if (in->preemptions)
            assert_true(in->computed_tokens > 12);
    }
    dcp_sched_destroy(&s);
}

static void test_mtp_truncation(void **state)
{
    (void)state;
    struct dcp_sched_params p;
    dcp_sched_default_params(&p);
    p.mtp_drafts = 3;
    for (int pass = 0; pass < 3; pass++) {
        p.mtp_acceptance = pass == 0 ? 1.0 : pass == 1 ? 0.0 : 0.5;
        dcp_sched *s = make(64, 4, 1, &p);
        add(s, 0, 10, 9, NULL, 0, 0);
        double now = 0;
        step(s, &now, 1); /* prefill: the first token */
        uint32_t steps = 0;
        while (!dcp_sched_done(s)) {
            struct dcp_sched_step st = step(s, &now, 1);
            /* q_len = 1 + drafts, less near the end; the check above confirmed the
             * sequence was truncated to prompt + generated - 1 after the step. */
            assert_int_equal(st.entries[0].q_len, steps == 0 ? 4 : st.entries[0].q_len);
            steps++;
        }
        const struct dcp_sched_request_info *in = dcp_sched_request(s, 0);
        assert_int_equal(in->generated, 9);
        struct dcp_sched_stats ss;
        dcp_sched_get_stats(s, &ss);
        if (pass == 0) {
            assert_int_equal(steps, 2); /* 1 + 4 + 4 */
            assert_int_equal(ss.accepted_drafts, 6);
        } else if (pass == 1) {
            assert_int_equal(steps, 8); /* one token a step */
            assert_int_equal(ss.accepted_drafts, 0);
        } else {
            assert_true(steps > 2 && steps < 8);
        }
        assert_int_equal(ss.generated_tokens, 9);
        dcp_sched_destroy(&s);
    }
}

static void test_rejection(void **state)
{
    (void)state;
    dcp_sched *s = make(8, 4, 2, NULL); /* 8 tokens a block: 64 tokens */
    add(s, 0, 60, 5, NULL, 0, 0);       /* 64 tokens: fits exactly */
    const uint32_t big = add(s, 0, 60, 6, NULL, 0, 0);
    add(s, 1, 10, 3, NULL, 0, 0);
    const struct dcp_sched_request_info *in = dcp_sched_request(s, big);
    assert_int_equal(in->state, DCP_REQ_REJECTED);
    assert_int_equal(in->reject, DCP_REJECT_POOL);
    assert_string_equal(dcp_reject_reason_name(in->reject), "pool");
    double now = 0;
    run_all(s, &now);
    struct dcp_sched_stats ss;
    dcp_sched_get_stats(s, &ss);
    assert_int_equal(ss.rejected, 1);
    assert_int_equal(ss.finished, 2);
    /* Bad requests are argument errors. */
    const struct dcp_serve_request bad = {.arrival = 0, .prompt_tokens = 0, .output_tokens = 1};
    assert_int_equal(dcp_sched_add(s, &bad, NULL), DCP_EINVAL);
    const struct dcp_serve_request early = {.arrival = 0.5, .prompt_tokens = 1, .output_tokens = 1};
    assert_int_equal(dcp_sched_add(s, &early, NULL), DCP_EINVAL);
    struct dcp_sched_step st;
    assert_int_equal(dcp_sched_complete(s, 0), DCP_EINVAL);
    assert_int_equal(dcp_sched_plan_step(s, now, &st), DCP_OK);
    dcp_sched_destroy(&s);
}

/* Random requests with shared prefixes, MTP and a tight pool: everything finishes,
 * invariants hold after every step, and nothing is lost or duplicated. */
static void test_randomized(void **state)
{
    (void)state;
    struct test_rng rng;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        test_rng_seed(&rng, seed);
        struct dcp_sched_params p;
        dcp_sched_default_params(&p);
        p.step_tokens = (uint32_t)test_rng_range(&rng, 16, 200);
        p.mtp_drafts = (uint32_t)test_rng_range(&rng, 0, 3);
        p.mtp_acceptance = 0.6;
        p.max_running = (uint32_t)test_rng_range(&rng, 2, 32);
        p.prefix_caching = seed % 3 != 0;
        p.seed = seed;
        dcp_sched *s = make(test_rng_range(&rng, 20, 80), 4, (uint32_t)test_rng_range(&rng, 1, 4), &p);
        static uint64_t hashes[60][8];
        double t = 0;
        for (int i = 0; i < 60; i++) {
            const uint64_t family = test_rng_range(&rng, 0, 3);
            for (int j = 0; j < 8; j++)
                hashes[i][j] = j < 4 ? family * 100 + j : test_rng_next(&rng);
            t += (double)test_rng_range(&rng, 0, 3) * 0.01;
            const uint64_t prompt = test_rng_range(&rng, 1, 128);
            add(s, t, prompt, (uint32_t)test_rng_range(&rng, 1, 40), hashes[i], (uint32_t)((prompt + 15) / 16), 16);
        }
        double now = 0;
        run_all(s, &now);
        struct dcp_sched_stats ss;
        dcp_sched_get_stats(s, &ss);
        assert_int_equal(ss.finished + ss.rejected, 60);
        uint64_t gen = 0;
        for (uint32_t i = 0; i < 60; i++) {
            const struct dcp_sched_request_info *in = dcp_sched_request(s, i);
            if (in->state == DCP_REQ_FINISHED) {
                assert_int_equal(in->generated, in->output_tokens);
                gen += in->generated;
            } else {
                assert_int_equal(in->state, DCP_REQ_REJECTED);
            }
        }
        assert_int_equal(gen, ss.generated_tokens);
        assert_int_equal(ss.used_blocks, 0);
        dcp_sched_destroy(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admission_and_watermark),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_prompts_loaded),
        cmocka_unit_test(test_prefix_hits_and_eviction),
        cmocka_unit_test(test_shared_blocks_are_never_written),
        cmocka_unit_test(test_kv_check_detects_corruption),
        cmocka_unit_test(test_sched_check_detects_corruption),
        cmocka_unit_test(test_preemption_requeues_youngest),
        cmocka_unit_test(test_mtp_truncation),
        cmocka_unit_test(test_rejection),
        cmocka_unit_test(test_randomized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
