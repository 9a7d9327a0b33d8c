/*
 * The validity rules across keys: for each, accepted and rejected layouts with
 * the exact "what would be valid" text. Most cases go through the struct path
 * (dcp_deployment_from_config); the YAML cases check the positions rules blame
 * and that the rule code is shared.
 */
#include "config_test_structs.h"

static void test_mla_dcp_divides_tp(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    for (uint32_t dcp = 1; dcp <= 8; dcp *= 2) {
        c.parallel.dcp = dcp;
        expect_config_accepted(&c);
    }
    c.parallel.dcp = 3;
    expect_config_error(&c, "parallel.dcp: dcp=3 does not divide tp=8; valid dcp: 1, 2, 4, 8");
    c.parallel.dcp = 16;
    expect_config_error(&c, "parallel.dcp: dcp=16 does not divide tp=8; valid dcp: 1, 2, 4, 8");
    /* tp=6 would split 128 heads unevenly; tp=4 with dcp=4 is fine. */
    c.parallel.tp = 4;
    c.parallel.dcp = 4;
    c.model.weight_dtype = DCP_WEIGHT_NVFP4;
    expect_config_accepted(&c);
}

static void test_gqa_dcp_divides_kv_replicas(void **state)
{
    (void)state;
    struct dcp_config c = llama_70b_h200();
    c.hardware.nodes = 4; /* 32 GPUs */
    /* tp=32 over 8 KV heads: each head on 4 ranks, so a DCP group of 1, 2 or 4. */
    c.parallel.tp = 32;
    for (uint32_t dcp = 1; dcp <= 4; dcp *= 2) {
        c.parallel.dcp = dcp;
        expect_config_accepted(&c);
    }
    c.parallel.dcp = 3;
    expect_config_error(&c, "parallel.dcp: dcp=3 does not divide tp/num_kv_heads=4; valid dcp: 1, 2, 4");
    c.parallel.dcp = 8;
    expect_config_error(&c, "parallel.dcp: dcp=8 does not divide tp/num_kv_heads=4; valid dcp: 1, 2, 4");
    /* tp = kv_heads: no replicas, nothing to shard. */
    c.parallel.tp = 8;
    c.parallel.dcp = 2;
    expect_config_error(&c, "parallel.dcp: dcp=2 does not divide tp/num_kv_heads=1; valid dcp: 1");
    /* tp < kv_heads: every rank holds distinct heads. */
    c.parallel.tp = 4;
    c.parallel.dcp = 1;
    expect_config_accepted(&c);
    c.parallel.dcp = 2;
    expect_config_error(&c, "parallel.dcp: dcp=2 needs KV replicas, but tp=4 splits 8 KV heads "
                                "without replication; valid dcp: 1");
}

/* merge_after_uv projects an MLA latent: refused for GQA/MHA, accepted for MLA. */
static void test_merge_after_uv_needs_mla(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    c.parallel.merge_after_uv = true;
    expect_config_accepted(&c);
    struct dcp_config g = llama_70b_h200();
    g.parallel.merge_after_uv = true;
    expect_config_error(&g, "parallel.merge_after_uv: merge_after_uv applies to mla (it projects the latent output "
                            "with W_UV before the merge); gqa outputs are already values: set it to false");
}

static void test_gqa_query_heads_group_kv_heads(void **state)
{
    (void)state;
    struct dcp_config c = llama_70b_h200();
    c.model.num_kv_heads = 6;
    /* Only this error: tp and dcp rules need a valid kv_heads and are skipped. */
    expect_config_error(&c, "model.kv_heads: query_heads=64 is not a multiple of kv_heads=6; valid "
                            "kv_heads: 1, 2, 4, 8, 16, 32, 64");
    c.model.num_kv_heads = 64; /* GQA with as many KV heads as query heads is MHA; allowed */
    expect_config_accepted(&c);
    c.model.num_kv_heads = 128;
    expect_config_error(&c, "model.kv_heads: query_heads=64 is not a multiple of kv_heads=128; valid "
                            "kv_heads: 1, 2, 4, 8, 16, 32, 64");
}

static void test_kv_heads_of_mha_and_mla(void **state)
{
    (void)state;
    struct dcp_config c = llama_70b_h200();
    c.model.attention = DCP_ATTN_MHA;
    c.model.num_kv_heads = 0; /* derived: = query_heads */
    dcp_deployment *dep = expect_config_ok(&c);
    assert_int_equal(dcp_deployment_config(dep)->model.num_kv_heads, 64);
    dcp_deployment_destroy(&dep);
    c.model.num_kv_heads = 64;
    expect_config_accepted(&c);
    c.model.num_kv_heads = 8;
    expect_config_error(&c, "model.kv_heads: mha has one KV head per query head; kv_heads must equal "
                            "query_heads=64, got 8 (use attention: gqa for grouped KV heads)");

    struct dcp_config m = deepseek_v3_h200();
    m.model.num_kv_heads = 1;
    expect_config_accepted(&m);
    m.model.num_kv_heads = 8;
    expect_config_error(&m, "model.kv_heads: mla caches one latent vector per token for all heads; "
                            "kv_heads must be 1, got 8");
}

static void test_tp_splits_heads(void **state)
{
    (void)state;
    struct dcp_config c = llama_70b_h200();
    c.parallel.tp = 3;
    expect_config_error(&c, "parallel.tp: query_heads=64 is not divisible by tp=3; valid tp: 1, 2, 4, 8");

    /* 96 query heads, 8 KV heads, 16 GPUs: tp must divide 96 and divide or be a multiple of 8. */
    c.model.num_q_heads = 96;
    c.hardware.nodes = 2;
    c.parallel.tp = 12;
    expect_config_error(&c, "parallel.tp: tp=12 is not a multiple of kv_heads=8 (above kv_heads, tp "
                            "must replicate every KV head equally); valid tp: 1, 2, 4, 8, 16");
    c.parallel.tp = 6;
    expect_config_error(&c, "parallel.tp: tp=6 does not divide kv_heads=8; valid tp: 1, 2, 4, 8, 16");
    c.parallel.tp = 16;
    c.parallel.dcp = 2;
    expect_config_accepted(&c);

    /* MLA splits only query heads. */
    struct dcp_config m = deepseek_v3_h200();
    m.parallel.tp = 6;
    m.parallel.dcp = 1;
    expect_config_error(&m, "parallel.tp: query_heads=128 is not divisible by tp=6; valid tp: 1, 2, 4, 8");
}

static void test_interleave_fits_block(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    c.parallel.interleave = 64;
    expect_config_accepted(&c);
    c.parallel.interleave = 128;
    expect_config_error(&c, "parallel.interleave: interleave=128 exceeds block_size=64; valid "
                            "interleave: 1, 2, 4, 8, 16, 32, 64");
    c.parallel.interleave = 3;
    expect_config_error(&c, "parallel.interleave: interleave=3 does not divide block_size=64; valid "
                            "interleave: 1, 2, 4, 8, 16, 32, 64");
    c.memory.block_size = 1;
    c.parallel.interleave = 1;
    expect_config_accepted(&c);
}

static void test_tp_fits_gpus(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    c.parallel.tp = 16;
    expect_config_error(&c, "parallel.tp: tp=16 needs 16 GPUs but the hardware has 8 (gpus_per_node=8 x "
                            "nodes=1)");
    c.hardware.nodes = 2;
    expect_config_accepted(&c);
    c.hardware.nodes = 1;
    c.hardware.gpus_per_node = 16;
    expect_config_accepted(&c);
}

static void test_weights_fit(void **state)
{
    (void)state;
    /* 671B in bf16 is 167.75 GB per GPU at tp=8: more than an H200 holds. */
    struct dcp_config c = deepseek_v3_h200();
    c.model.weight_dtype = DCP_WEIGHT_BF16;
    expect_config_error(&c, "parallel.tp: weights do not fit: 671B parameters x 2 bytes (bf16) / tp=8 = "
                            "167.8 GB per GPU, which with reserve 4.0 GB leaves no room in usable "
                            "126.9 GB (memory_gb=141 x gpu_fraction=0.9); no valid tp up to 8 GPUs fits");
    c.hardware.nodes = 2;
    expect_config_error(&c, "parallel.tp: weights do not fit: 671B parameters x 2 bytes (bf16) / tp=8 = "
                            "167.8 GB per GPU, which with reserve 4.0 GB leaves no room in usable "
                            "126.9 GB (memory_gb=141 x gpu_fraction=0.9); smallest tp that fits: 16");
    c.parallel.tp = 16;
    expect_config_accepted(&c);

    /* Kimi K2 (1.04T) in nvfp4, 4.5 bits per parameter: 73 GB per GPU at tp=8. */
    struct dcp_config k = deepseek_v3_h200();
    k.model.num_q_heads = 64;
    k.model.num_params = 1.04e12;
    k.model.weight_dtype = DCP_WEIGHT_NVFP4;
    expect_config_accepted(&k);
    k.parallel.tp = 4;
    k.parallel.dcp = 4;
    expect_config_error(&k, "parallel.tp: weights do not fit: 1.04T parameters x 0.5625 bytes (nvfp4) / "
                            "tp=4 = 146.2 GB per GPU, which with reserve 4.0 GB leaves no room in usable "
                            "126.9 GB (memory_gb=141 x gpu_fraction=0.9); smallest tp that fits: 8");

    /* The boundary: weights + reserve must stay strictly below the usable memory. */
    struct dcp_config b = deepseek_v3_h200();
    b.hardware.memory_bytes = 100e9;
    b.memory.gpu_fraction = 1.0;
    b.memory.reserve_bytes = 0;
    b.parallel.tp = 1;
    b.parallel.dcp = 1;
    b.model.weight_dtype = DCP_WEIGHT_BF16;
    b.model.num_params = 49.5e9;
    expect_config_accepted(&b);
    b.model.num_params = 50e9;
    expect_config_error(&b, "parallel.tp: weights do not fit: 50B parameters x 2 bytes (bf16) / tp=1 = "
                            "100.0 GB per GPU, which with reserve 0.0 GB leaves no room in usable "
                            "100.0 GB (memory_gb=100 x gpu_fraction=1); smallest tp that fits: 2");

    /* A reserve that takes everything leaves nothing to plan with, weights or not. */
    struct dcp_config r = deepseek_v3_h200();
    r.model.num_params = 0;
    r.memory.reserve_bytes = 130e9;
    expect_config_error(&r, "memory.reserve_gb: reserve_gb=130 leaves no memory for weights and KV "
                            "cache: usable 126.9 GB (memory_gb=141 x gpu_fraction=0.9)");
}

static void test_trace_must_be_readable(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    c.workload.trace = "/nonexistent/trace.txt";
    expect_config_error(&c, "workload.trace: trace /nonexistent/trace.txt: cannot open: No such file "
                            "or directory");
    char dir[64], path[256];
    temp_dir_make(dir);
    temp_file_write(dir, "trace.txt", "1024\n", path);
    c.workload.trace = path;
    dcp_deployment *dep = expect_config_ok(&c);
    assert_string_equal(dcp_deployment_config(dep)->workload.trace, path);
    dcp_deployment_destroy(&dep);
    const char *names[] = {"trace.txt"};
    temp_dir_remove(dir, names, 1);
}

static void test_kv_scale_warning(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    c.model.kv_scale = 0.5;
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_from_config(&c, d, &dep), DCP_OK); /* a warning only */
    assert_int_equal(dcp_diag_count(d), 1);
    assert_int_equal(dcp_diag_error_count(d), 0);
    assert_string_equal(diag_text(d, 0), "model.kv_scale: warning: kv_scale=0.5 has no effect: kv_dtype "
                                         "is bf16 (only fp8_e4m3 is scaled)");
    dcp_deployment_destroy(&dep);
    c.model.kv_dtype = DCP_DTYPE_FP8_E4M3;
    expect_config_accepted(&c);
    dcp_diag_destroy(&d);
}

/* In YAML, a rule error points at the value of the key it blames. */
static void test_rules_in_yaml_point_at_values(void **state)
{
    (void)state;
    const char *model = "model:\n  name: Llama-3.1-70B\n  attention: gqa\n  layers: 80\n"
                        "  query_heads: 64\n  kv_heads: 8\n  head_dim: 128\n  parameters: 70B\n";
    const char *hw = "hardware:\n  gpu: H200\n  memory_gb: 141\n  hbm_gbps: 4800\n  link_gbps: 450\n"
                     "  nodes: 4\n";
    char text[1024];
    snprintf(text, sizeof(text), "%s%sparallel:\n  tp: 32\n  dcp: 3\nworkload:\n  context_lengths: [8k]\n",
             model, hw);
    expect_one_error(text, "t.yaml:17:8: parallel.dcp: dcp=3 does not divide tp/num_kv_heads=4; "
                           "valid dcp: 1, 2, 4");
    /* A defaulted key is blamed at the closest mapping that was written: here the document. */
    snprintf(text, sizeof(text),
             "%shardware:\n  gpu: small\n  memory_gb: 4\n  hbm_gbps: 100\n  link_gbps: 10\n"
             "parallel:\n  tp: 1\nworkload:\n  context_lengths: [8k]\n",
             "model:\n  name: tiny\n  attention: mha\n  layers: 2\n  query_heads: 4\n  head_dim: 16\n");
    expect_one_error(text, "t.yaml:1:1: memory.reserve_gb: reserve_gb=4 leaves no memory for weights and "
                           "KV cache: usable 3.6 GB (memory_gb=4 x gpu_fraction=0.9)");
    /* A key that failed to parse keeps the rules that need it quiet. */
    snprintf(text, sizeof(text), "%s%sparallel:\n  tp: many\n  dcp: 3\nworkload:\n  context_lengths: [8k]\n",
             model, hw);
    expect_one_error(text, "t.yaml:16:7: parallel.tp: expected an integer, got \"many\"");
}

/* An MoE model gives all four MoE fields; a dense one none of the per-token ones. */
static void test_moe_fields(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    c.model.experts = 256;
    expect_config_error(&c, "model.experts: an MoE model (experts=256) must also give experts_per_token, "
                            "active_parameters, hidden_size: without them every parameter would be priced as "
                            "read by every step");
    c.model.experts_per_token = 8;
    c.model.active_params = 37e9;
    expect_config_error(&c, "model.experts: an MoE model (experts=256) must also give hidden_size: without them "
                            "every parameter would be priced as read by every step");
    c.model.hidden_size = 7168;
    expect_config_accepted(&c);
    c.model.experts_per_token = 300;
    expect_config_error(&c, "model.experts_per_token: experts_per_token=300 exceeds experts=256");
    c = deepseek_v3_h200();
    c.model.active_params = 37e9;
    expect_config_error(&c, "model.active_parameters: active_parameters is given but experts is 0 (a dense "
                            "model); an MoE model gives experts, experts_per_token, active_parameters and "
                            "hidden_size");
}

/* Nothing is planned past the model's window. */
static void test_context_window(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    c.model.context_window = 163840;
    c.workload.context_lengths[0] = 163840;
    c.workload.num_context_lengths = 1;
    expect_config_accepted(&c);
    c.workload.context_lengths[1] = 262144;
    c.workload.num_context_lengths = 2;
    expect_config_error(&c, "workload.context_lengths: context length 262144 exceeds the model's "
                            "context_window=163840 tokens");
    c.model.context_window = 0; /* not given: no check */
    expect_config_accepted(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mla_dcp_divides_tp),
        cmocka_unit_test(test_gqa_dcp_divides_kv_replicas),
        cmocka_unit_test(test_merge_after_uv_needs_mla),
        cmocka_unit_test(test_gqa_query_heads_group_kv_heads),
        cmocka_unit_test(test_kv_heads_of_mha_and_mla),
        cmocka_unit_test(test_tp_splits_heads),
        cmocka_unit_test(test_interleave_fits_block),
        cmocka_unit_test(test_tp_fits_gpus),
        cmocka_unit_test(test_weights_fit),
        cmocka_unit_test(test_trace_must_be_readable),
        cmocka_unit_test(test_kv_scale_warning),
        cmocka_unit_test(test_rules_in_yaml_point_at_values),
        cmocka_unit_test(test_moe_fields),
        cmocka_unit_test(test_context_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
