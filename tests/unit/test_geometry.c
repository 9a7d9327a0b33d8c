/* Per-rank geometry (docs/design.md, "Per-rank geometry"): the published KV sizes,
 * the validity rules, and every rank's KV head against brute-force assignment. */
#include <string.h>

#include "dcp/dcp.h"
#include "test_util.h"

static struct dcp_model_config gqa(uint32_t q, uint32_t kv, uint32_t dim)
{
    return (struct dcp_model_config){.attention = DCP_ATTN_GQA, .num_q_heads = q, .num_kv_heads = kv,
                                     .head_dim = dim, .kv_dtype = DCP_DTYPE_BF16};
}

/* docs/design.md "KV bytes per token": per-layer bytes of the whole model, i.e. tp = 1. */
static void test_published_sizes(void **state)
{
    (void)state;
    struct dcp_rank_geometry g;
    const struct dcp_model_config ds = {.attention = DCP_ATTN_MLA, .num_q_heads = 128, .num_kv_heads = 1,
                                        .kv_lora_rank = 512, .rope_dim = 64, .kv_dtype = DCP_DTYPE_BF16};
    assert_int_equal(dcp_rank_geometry_init(&ds, 8, 8, &g), DCP_OK);
    assert_int_equal(g.token_layer_bytes, 1152);
    assert_int_equal(g.k_token_bytes, 1152); /* the latent + RoPE row holds the values too */
    assert_int_equal(g.v_token_bytes, 0);
    assert_int_equal(g.q_heads_per_rank, 16);
    assert_int_equal(g.kv_heads_per_rank, 1);
    assert_int_equal(g.kv_replicas, 8);
    assert_int_equal(g.gathered_heads, 128);
    assert_int_equal(g.q_per_kv_head, 128);
    assert_int_equal(g.qk_dim, 576);
    assert_int_equal(g.v_dim, 512);
    const struct dcp_model_config llama = gqa(64, 8, 128), qwen = gqa(64, 4, 128);
    assert_int_equal(dcp_rank_geometry_init(&llama, 1, 1, &g), DCP_OK);
    assert_int_equal(g.token_layer_bytes, 4096);
    assert_int_equal(g.token_layer_bytes, dcp_model_kv_bytes_per_token_layer(&llama));
    assert_int_equal(dcp_rank_geometry_init(&qwen, 1, 1, &g), DCP_OK);
    assert_int_equal(g.token_layer_bytes, 2048);
    /* tp = 8 over 4 KV heads: two replicas of each head, so DCP may pair them. */
    assert_int_equal(dcp_rank_geometry_init(&qwen, 8, 2, &g), DCP_OK);
    assert_int_equal(g.kv_heads_per_rank, 1);
    assert_int_equal(g.kv_replicas, 2);
    assert_int_equal(g.gathered_heads, 16);
    assert_int_equal(g.token_layer_bytes, 512);
    assert_int_equal(g.k_token_bytes, 256);
    assert_int_equal(g.v_token_bytes, 256);
    /* K and V rows of different lengths are not possible for GQA, but the split is per head:
     * tp = 2 over 4 KV heads keeps 2 heads, 2 x 128 x 2 bytes of each. */
    assert_int_equal(dcp_rank_geometry_init(&qwen, 2, 1, &g), DCP_OK);
    assert_int_equal(g.k_token_bytes, 512);
    assert_int_equal(g.v_token_bytes, 512);
}

/* docs/design.md "Validity rules": GQA needs (tp / kv) % dcp == 0; everyone needs tp % dcp == 0. */
static void test_validity(void **state)
{
    (void)state;
    struct dcp_rank_geometry g;
    const struct dcp_model_config llama = gqa(64, 8, 128);
    assert_int_equal(dcp_rank_geometry_init(&llama, 8, 2, &g), DCP_EINVAL); /* no replicas to shard */
    assert_int_equal(dcp_rank_geometry_init(&llama, 16, 2, &g), DCP_OK);
    assert_int_equal(dcp_rank_geometry_init(&llama, 16, 4, &g), DCP_EINVAL);
    assert_int_equal(dcp_rank_geometry_init(&llama, 8, 3, &g), DCP_EINVAL);
    assert_int_equal(dcp_rank_geometry_init(&llama, 8, 0, &g), DCP_EINVAL);
    assert_int_equal(dcp_rank_geometry_init(&llama, 0, 1, &g), DCP_EINVAL);
    assert_int_equal(dcp_rank_geometry_init(&llama, 3, 1, &g), DCP_EINVAL); /* 64 query heads */
    assert_non_null(strstr(dcp_last_error(), "tp=3"));
    assert_int_equal(dcp_rank_geometry_init(NULL, 8, 1, &g), DCP_EINVAL);
}

/*
 * tp must divide the KV heads or be a multiple of them (the config rules said so,
 * the geometry did not): 24 query heads, 8 KV heads at tp 3 gave 2 KV heads per
 * rank (6 of 8 stored) and at tp 12 gave "1 replica" per head, both DCP_OK.
 */
static void test_tp_must_split_kv_heads(void **state)
{
    (void)state;
    struct dcp_rank_geometry g;
    const struct dcp_model_config m = gqa(24, 8, 128);
    assert_int_equal(dcp_rank_geometry_init(&m, 3, 1, &g), DCP_EINVAL);
    assert_string_equal(dcp_last_error(), "tp=3 does not divide kv_heads=8");
    assert_int_equal(g.kv_heads_per_rank, 0);
    assert_int_equal(dcp_rank_geometry_init(&m, 12, 1, &g), DCP_EINVAL);
    assert_string_equal(dcp_last_error(), "tp=12 is not a multiple of kv_heads=8 (above kv_heads, tp must "
                                          "replicate every KV head equally)");
    assert_int_equal(dcp_rank_geometry_init(&m, 4, 1, &g), DCP_OK);
    assert_int_equal(g.kv_heads_per_rank, 2);
    assert_int_equal(dcp_rank_geometry_init(&m, 4, 2, &g), DCP_EINVAL);
    assert_string_equal(dcp_last_error(),
                        "dcp=2 needs KV replicas, but tp=4 splits 8 KV heads without replication");
    assert_int_equal(dcp_rank_geometry_init(&m, 8, 1, &g), DCP_OK);
    assert_int_equal(g.kv_replicas, 1);
}

/* Every rank's first KV head, against dealing heads to ranks one by one. */
static void test_kv_head0(void **state)
{
    (void)state;
    static const uint32_t kvs[] = {1, 2, 4, 8, 16};
    for (size_t i = 0; i < sizeof(kvs) / sizeof(kvs[0]); i++)
        for (uint32_t tp = 1; tp <= 32; tp *= 2) {
            const struct dcp_model_config m = gqa(64, kvs[i], 64);
            struct dcp_rank_geometry g;
            assert_int_equal(dcp_rank_geometry_init(&m, tp, 1, &g), DCP_OK);
            for (uint32_t r = 0; r < tp; r++) {
                /* Ranks split the heads evenly while there are more heads than ranks;
                 * then consecutive ranks share one head. */
                const uint32_t want = tp <= kvs[i] ? r * (kvs[i] / tp) : r / (tp / kvs[i]);
                assert_int_equal(dcp_rank_geometry_kv_head0(&g, r), want);
                assert_true(want + g.kv_heads_per_rank <= kvs[i]);
            }
        }
    const struct dcp_model_config mla = {.attention = DCP_ATTN_MLA, .num_q_heads = 16, .kv_lora_rank = 32,
                                         .rope_dim = 16, .kv_dtype = DCP_DTYPE_FP8_E4M3};
    struct dcp_rank_geometry g;
    assert_int_equal(dcp_rank_geometry_init(&mla, 8, 4, &g), DCP_OK);
    assert_int_equal(g.token_layer_bytes, 48);
    for (uint32_t r = 0; r < 8; r++)
        assert_int_equal(dcp_rank_geometry_kv_head0(&g, r), 0);
}

static void test_token_key(void **state)
{
    (void)state;
    assert_int_equal(dcp_token_key(0, 5), 5);
    assert_int_equal(dcp_token_key(3, (1ull << 40) - 1), (3ull << 40) | ((1ull << 40) - 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_sizes),
        cmocka_unit_test(test_validity),
        cmocka_unit_test(test_tp_must_split_kv_heads),
        cmocka_unit_test(test_kv_head0),
        cmocka_unit_test(test_token_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
