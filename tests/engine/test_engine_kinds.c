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
    if (attn == DCP_ATTN_MLA) {
        c.shape.q_heads = 16; /* 2 per rank */
        c.shape.kv_lora_rank = 24;
        c.shape.rope_dim = 8;
    } else {
        c.shape.q_heads = 16;
        c.shape.kv_heads = 1; /* 8 replicas at tp 8: DCP up to 8 */
        c.shape.head_dim = 16;
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

int main(void)
{
    const int skip_all = fixture_backend_check();
    if (skip_all)
        return skip_all;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds_matrix),
        cmocka_unit_test(test_sparse_modes_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
