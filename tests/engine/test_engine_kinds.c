/*
 * The layer kinds through the whole engine (docs/design.md §13), against the float64
 * oracle: one model whose layers are a sliding window (with a sink), a sparse top-k,
 * a KV-free layer and a full layer with a sink, for DCP 1, 2, 4 and 8, both merge
 * schemes, interleave 1 and 2, windows replicated and sharded (windows of 3 tokens:
 * shorter than a shard), sinks given at creation and per call, top-k lists given by
 * the caller (some of one rank's tokens only) and selected from the sharded index keys,
 * MLA and GQA, decode and multi-token steps, sequences shorter than a group's round
 * (empty shards) and longer than the window. Then the two sparse modes against each
 * other: given the lists the sharded indexer selected, the caller's mode gives the
 * same bits.
 */
#include <stdio.h>
#include <string.h>

#include "dcp/serve.h"
#include "kinds_harness.h"
#include "test_util.h"

/* The model: [window 3 + sink, sparse top-4, none, full + sink], repeated to `layers`. */
static struct kinds_case mixed_case(enum dcp_attention_kind attn, uint32_t dcp, uint32_t interleave,
                                    enum dcp_comm_scheme comm, enum dcp_window_kv window_kv,
                                    enum dcp_sparse_index index, bool sinks_at_creation)
{
    struct kinds_case c = {0};
    c.shape = fixture_default_shape();
    c.shape.kind = attn;
    c.shape.tp = 8;
    c.shape.dcp = dcp;
    c.shape.interleave = interleave;
    c.shape.block_size = 4;
    c.shape.comm = comm;
    c.shape.layers = 4;
    c.shape.host_threads = 1;
    /* Small heads on the host; on the CUDA doubles the shapes its kernels have (variants.h). */
    const bool gpu = fixture_backend() != DCP_BACKEND_HOST;
    if (attn == DCP_ATTN_MLA) {
        c.shape.q_heads = 16; /* 2 per rank */
        c.shape.kv_lora_rank = gpu ? 512 : 24;
        c.shape.rope_dim = gpu ? 64 : 8;
    } else {
        c.shape.q_heads = 16;
        c.shape.kv_heads = 1; /* 8 replicas at tp 8: DCP up to 8 */
        c.shape.head_dim = gpu ? 64 : 16;
    }
    c.pattern[0] = (struct dcp_layer_kind){.type = DCP_LAYER_SLIDING_WINDOW, .window = 3, .sink = true};
    c.pattern[1] = (struct dcp_layer_kind){.type = DCP_LAYER_SPARSE_TOPK, .topk = 4};
    c.pattern[2] = (struct dcp_layer_kind){.type = DCP_LAYER_NONE};
    c.pattern[3] = (struct dcp_layer_kind){.type = DCP_LAYER_FULL, .sink = true};
    c.pattern_len = 4;
    c.window_kv = window_kv;
    c.sparse_index = index;
    c.sinks_at_creation = sinks_at_creation;
    return c;
}

/* One step of k, and of its follower (kinds_follow) with the same batch. */
static bool step_both(struct kinds *k, struct kinds *follower, uint32_t count, const uint32_t *seqs,
                      const uint32_t *grow, int one_rank)
{
    const bool attended = kinds_step(k, count, seqs, grow, one_rank);
    if (follower)
        assert_true(kinds_step(follower, count, seqs, grow, one_rank) == attended);
    return attended;
}

/* A few steps: prefill chunks (one too large to attend), decodes and multi-token steps, lengths
 * from under one round of the group to past the window, and one step of max_query_tokens (12)
 * tokens of one sequence. */
static void run_steps(struct kinds *k, struct kinds *follower, struct test_rng *rng, int one_rank)
{
    uint32_t seqs[3];
    for (int i = 0; i < 3; i++) {
        seqs[i] = kinds_seq_create(k);
        if (follower)
            assert_int_equal(kinds_seq_create(follower), seqs[i]);
    }
    uint32_t grow[3] = {1, 2, 3};
    step_both(k, follower, 3, seqs, grow, one_rank); /* shorter than a round: empty shards */
    grow[0] = 40; /* a chunk that only appends (more than max_query_tokens) */
    grow[1] = 5;
    grow[2] = 1;
    assert_false(step_both(k, follower, 3, seqs, grow, one_rank));
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 3; i++)
            grow[i] = (uint32_t)test_rng_range(rng, 1, 3);
        assert_true(step_both(k, follower, 3, seqs, grow, one_rank));
    }
    /* One sequence with a whole step of query tokens: its first sees keys the step's last
     * would overwrite in a ring sized for fewer (the window plus max_query_tokens - 1). */
    grow[0] = 12;
    assert_true(step_both(k, follower, 1, seqs, grow, one_rank));
}

static void test_kinds_matrix(void **state)
{
    (void)state;
    static const uint32_t dcps[] = {1, 2, 4, 8};
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x6b1d5);
    int cases = 0;
    for (size_t d = 0; d < 4; d++)
        for (int v = 0; v < (fixture_quick() ? 2 : 4); v++) {
            const enum dcp_attention_kind attn = (v + d) % 2 ? DCP_ATTN_MLA : DCP_ATTN_GQA;
            const uint32_t il = v % 4 >= 2 ? 2 : 1;
            const enum dcp_comm_scheme comm = v % 2 ? DCP_COMM_AG_RS : DCP_COMM_A2A;
            const enum dcp_window_kv wkv = (v / 2 + d) % 2 ? DCP_WINDOW_KV_SHARDED : DCP_WINDOW_KV_REPLICATED;
            const enum dcp_sparse_index idx = (v + d / 2) % 2 ? DCP_SPARSE_INDEX_SHARDED : DCP_SPARSE_INDEX_CALLER;
            const struct kinds_case c = mixed_case(attn, dcps[d], il, comm, wkv, idx, v % 3 != 0);
            struct kinds *k = kinds_create(&c, test_seed() + 17 * (uint64_t)cases);
            if (!k)
                skip();
            /* Caller lists of one rank's tokens on every other case. */
            run_steps(k, NULL, &rng, idx == DCP_SPARSE_INDEX_CALLER && v % 2 ? (int)(cases % dcps[d]) : -1);
            kinds_destroy(&k);
            cases++;
        }
    const struct kinds_stats *s = kinds_get_stats();
    print_message("%d cases: rows checked full %llu, window %llu, sparse %llu (%llu with a sink); %llu rows with a rank "
                  "holding none of their keys; %llu top-k entries equal to the oracle's; worst relative L2 %.2g\n",
                  cases, (unsigned long long)s->rows[DCP_LAYER_FULL],
                  (unsigned long long)s->rows[DCP_LAYER_SLIDING_WINDOW],
                  (unsigned long long)s->rows[DCP_LAYER_SPARSE_TOPK], (unsigned long long)s->sink_rows,
                  (unsigned long long)s->empty_rank_rows, (unsigned long long)s->topk_checked, s->worst_out);
    assert_true(s->rows[DCP_LAYER_SLIDING_WINDOW] && s->rows[DCP_LAYER_SPARSE_TOPK] && s->rows[DCP_LAYER_FULL]);
    assert_true(s->empty_rank_rows > 0 && s->topk_checked > 0);
}

/* Mode (a) given the lists mode (b) selected gives mode (b)'s bits, every layer, every rank. */
static void test_sparse_modes_same_bits(void **state)
{
    (void)state;
    static const uint32_t dcps[] = {2, 4, 8};
    for (size_t d = 0; d < 3; d++) {
        const enum dcp_attention_kind attn = d % 2 ? DCP_ATTN_GQA : DCP_ATTN_MLA;
        const struct kinds_case cb = mixed_case(attn, dcps[d], 1 + (uint32_t)(d == 1), DCP_COMM_A2A,
                                                DCP_WINDOW_KV_SHARDED, DCP_SPARSE_INDEX_SHARDED, true);
        struct kinds_case ca = cb;
        ca.sparse_index = DCP_SPARSE_INDEX_CALLER;
        struct kinds *b = kinds_create(&cb, test_seed() ^ 0xab);
        struct kinds *a = kinds_create(&ca, test_seed() ^ 0xab);
        if (!a || !b)
            skip();
        kinds_follow(a, b);
        struct test_rng rng;
        test_rng_seed(&rng, 5);
        run_steps(b, a, &rng, -1);
        kinds_destroy(&b);
        kinds_destroy(&a);
    }
}

/* ---- the kinds' argument errors: each refused before anything runs ---------------------------- */

enum refused_call { CALL_APPEND_KV, CALL_ATTENTION, CALL_APPEND_INDEX_K };

/* Every rank makes one call on one layer; rank 0's result and message are kept. */
struct refusal {
    enum refused_call call;
    uint32_t layer;
    bool with_list; ///< attention with a top-k list (and sink logits) in dcp_attention_extra
    int err;
    char message[512];
};

static int refuse_rank(dcp_rank *rank, void *arg)
{
    struct refusal *c = arg;
    void *dev = NULL;
    int err = dcp_rank_alloc(rank, 1 << 16, &dev);
    if (err)
        return err;
    const struct dcp_attention_extra x = {.topk = dev, .sinks = dev};
    switch (c->call) {
    case CALL_APPEND_KV: err = dcp_rank_append_kv(rank, c->layer, dev, dev); break;
    case CALL_APPEND_INDEX_K: err = dcp_rank_append_index_k(rank, c->layer, dev); break;
    case CALL_ATTENTION: err = dcp_rank_attention_ex(rank, c->layer, dev, dev, NULL, c->with_list ? &x : NULL); break;
    }
    char message[sizeof(c->message)];
    snprintf(message, sizeof(message), "%s", dcp_last_error()); /* before the next call clears it */
    if (dcp_rank_tp_rank(rank) == 0) {
        c->err = err;
        memcpy(c->message, message, sizeof(message));
    }
    dcp_rank_free(rank, dev);
    return DCP_OK; /* the refusal is what is checked */
}

static void expect_refused(dcp_engine *e, enum refused_call call, uint32_t layer, bool with_list, const char *needle)
{
    struct refusal c = {.call = call, .layer = layer, .with_list = with_list};
    assert_int_equal(dcp_engine_run(e, refuse_rank, &c), DCP_OK);
    if (c.err != DCP_EINVAL || !strstr(c.message, needle))
        fail_msg("call %d on layer %u: %s (\"%s\"), expected DCP_EINVAL naming \"%s\"", (int)call, layer,
                 dcp_strerror(c.err), c.message, needle);
}

static void test_kinds_errors(void **state)
{
    (void)state;
    /* [window 3 + sink, sparse top-4, none, full + sink], sinks per call, caller's lists. */
    const struct kinds_case c = mixed_case(DCP_ATTN_GQA, 2, 1, DCP_COMM_A2A, DCP_WINDOW_KV_SHARDED,
                                           DCP_SPARSE_INDEX_CALLER, false);
    struct kinds *k = kinds_create(&c, test_seed());
    if (!k)
        skip();
    dcp_engine *e = kinds_engine(k);
    struct dcp_engine_info info;
    dcp_engine_get_info(e, &info);
    assert_int_equal(info.num_layers, 4);
    assert_int_equal(info.layers[0].type, DCP_LAYER_SLIDING_WINDOW);
    assert_int_equal(info.layers[0].window, 3);
    assert_true(info.layers[0].sink && info.layers[3].sink && !info.layers[1].sink);
    assert_int_equal(info.layers[1].type, DCP_LAYER_SPARSE_TOPK);
    assert_int_equal(info.layers[2].type, DCP_LAYER_NONE);
    assert_true(info.ring_pages > 0);
    /* A step to call into (kinds_step leaves it valid). */
    const uint32_t s = kinds_seq_create(k);
    uint32_t grow = 30;
    assert_false(kinds_step(k, 1, &s, &grow, -1)); /* append only: 30 > max_query_tokens */
    expect_refused(e, CALL_APPEND_KV, 2, false, "none");
    expect_refused(e, CALL_ATTENTION, 2, true, "none");
    expect_refused(e, CALL_ATTENTION, 0, false, "sink");            /* no logits at creation or per call */
    expect_refused(e, CALL_ATTENTION, 3, false, "sink");
    expect_refused(e, CALL_APPEND_INDEX_K, 3, false, "sparse_topk"); /* a full layer keeps no index keys */
    expect_refused(e, CALL_APPEND_INDEX_K, 1, false, "sparse_index: caller");
    expect_refused(e, CALL_ATTENTION, 4, true, "out of range");
    {
        /* The sparse layer without its list: sinks given, so the list is what is missing. */
        struct refusal r = {.call = CALL_ATTENTION, .layer = 1};
        assert_int_equal(dcp_engine_run(e, refuse_rank, &r), DCP_OK);
        assert_int_equal(r.err, DCP_EINVAL);
        assert_non_null(strstr(r.message, "topk"));
    }
    /* The rings keep window + max_query_tokens - 1 positions: a deeper cut is refused, a
     * shallower one (and a cut to 0) is not. */
    const uint32_t id = kinds_seq_id(k, s);
    assert_int_equal(dcp_seq_length(e, id), 30);
    assert_int_equal(dcp_seq_truncate(e, id, 30 - 13), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "rings"));
    assert_int_equal(dcp_seq_truncate(e, id, 30 - 12), DCP_OK);
    assert_int_equal(dcp_seq_truncate(e, id, 0), DCP_OK);
    /* Prefix caching reuses a prefix's pages but not the windows' rings. */
    struct dcp_sched_params sp;
    dcp_sched_default_params(&sp);
    sp.prefix_caching = true;
    dcp_sched *sched = NULL;
    assert_int_equal(dcp_sched_create_for_engine(e, &sp, &sched), DCP_ENOTSUP);
    assert_non_null(strstr(dcp_last_error(), "sliding-window"));
    assert_null(sched);
    kinds_destroy(&k);
}

int main(void)
{
    const int skip_all = fixture_backend_check();
    if (skip_all)
        return skip_all;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds_matrix),
        cmocka_unit_test(test_sparse_modes_same_bits),
        cmocka_unit_test(test_kinds_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
