/*
 * The struct path (dcp_config_defaults, dcp_deployment_from_config), its
 * agreement with the YAML path, and the name/size/geometry helpers.
 */
#include <math.h>
#include <string.h>

#include "config/config_internal.h"
#include "config_test_structs.h"

static void test_defaults(void **state)
{
    (void)state;
    struct dcp_config c;
    memset(&c, 0xAB, sizeof(c));
    dcp_config_defaults(&c);
    /* Required fields are left unset; "derive" fields 0. */
    assert_null(c.model.name);
    assert_int_equal(c.model.num_layers, 0);
    assert_int_equal(c.model.num_kv_heads, 0);
    assert_int_equal(c.model.head_dim, 0);
    assert_float_equal(c.model.softmax_scale, 0, 0);
    assert_null(c.hardware.gpu);
    assert_float_equal(c.hardware.memory_bytes, 0, 0);
    assert_int_equal(c.parallel.tp, 0);
    assert_int_equal(c.workload.num_context_lengths, 0);
    assert_null(c.workload.trace);
    /* The documented defaults. */
    assert_int_equal(c.model.kv_lora_rank, 512);
    assert_int_equal(c.model.rope_dim, 64);
    assert_int_equal(c.model.qk_nope_head_dim, 128);
    assert_int_equal(c.model.kv_dtype, DCP_DTYPE_BF16);
    assert_float_equal(c.model.kv_scale, 1.0, 0);
    assert_float_equal(c.model.num_params, 0, 0);
    assert_int_equal(c.model.weight_dtype, DCP_WEIGHT_BF16);
    assert_float_equal(c.hardware.collective_latency, 12e-6, 1e-12);
    assert_int_equal(c.hardware.gpus_per_node, 8);
    assert_int_equal(c.hardware.nodes, 1);
    assert_int_equal(c.parallel.dcp, 1);
    assert_int_equal(c.parallel.interleave, 1);
    assert_int_equal(c.parallel.comm, DCP_COMM_A2A);
    assert_false(c.parallel.replicate_q);
    assert_int_equal(c.parallel.comm_dtype, DCP_WIRE_AUTO);
    assert_float_equal(c.memory.gpu_fraction, 0.9, 0);
    assert_int_equal(c.memory.block_size, 64);
    assert_float_equal(c.memory.reserve_bytes, 4e9, 1);
    assert_int_equal(c.workload.requests, 64);
    assert_int_equal(c.workload.decode_steps, 16);
    assert_int_equal(c.workload.q_len, 1);
    assert_int_equal(c.workload.seed, 1);
    assert_int_equal(c.runtime.backend, DCP_BACKEND_AUTO);
    assert_int_equal(c.runtime.host.threads, 0);
    assert_float_equal(c.runtime.host.memory_bytes, 0, 0);
    assert_int_equal(c.runtime.cuda.comm, DCP_CUDA_COMM_AUTO);
    assert_int_equal(c.runtime.cuda.device, 0);
    assert_float_equal(c.runtime.cuda.nccl_timeout_s, 120, 0);
    assert_true(c.runtime.cuda.use_vmm);
    dcp_config_defaults(NULL); /* accepted */
}

static void test_from_config_copies_and_derives(void **state)
{
    (void)state;
    char name[] = "DeepSeek-V3";
    struct dcp_config c = deepseek_v3_h200();
    c.model.name = name;
    dcp_deployment *dep = expect_config_ok(&c);
    const struct dcp_config *d = dcp_deployment_config(dep);
    assert_string_equal(dcp_deployment_source(dep), "<config>");
    /* Derived values are resolved in the deployment, not written back. */
    assert_int_equal(d->model.num_kv_heads, 1);
    assert_float_equal(d->model.softmax_scale, 1.0 / sqrt(192.0), 1e-15);
    assert_int_equal(c.model.num_kv_heads, 0);
    assert_float_equal(c.model.softmax_scale, 0, 0);
    /* Strings are the deployment's own copies. */
    assert_ptr_not_equal(d->model.name, name);
    name[0] = 'X';
    assert_string_equal(d->model.name, "DeepSeek-V3");
    dcp_deployment_destroy(&dep);

    /* A given scale is kept. */
    struct dcp_config g = llama_70b_h200();
    g.model.softmax_scale = 0.1;
    dep = expect_config_ok(&g);
    assert_float_equal(dcp_deployment_config(dep)->model.softmax_scale, 0.1, 0);
    dcp_deployment_destroy(&dep);
    g.model.softmax_scale = 0;
    dep = expect_config_ok(&g);
    assert_float_equal(dcp_deployment_config(dep)->model.softmax_scale, 1.0 / sqrt(128.0), 1e-15);
    dcp_deployment_destroy(&dep);
}

/* The same deployment written in YAML and filled in a struct gives the same config, key by key. */
static void test_yaml_and_struct_agree(void **state)
{
    (void)state;
    dcp_deployment *from_yaml = expect_load(
        "model: {name: DeepSeek-V3, attention: mla, layers: 61, query_heads: 128, parameters: 671B,"
        " weight_dtype: fp8}\n"
        "hardware: {gpu: H200, memory_gb: 141, hbm_gbps: 4800, link_gbps: 450}\n"
        "parallel: {tp: 8, dcp: 8}\n"
        "workload: {context_lengths: [128k]}\n");
    struct dcp_config c = deepseek_v3_h200();
    dcp_deployment *from_struct = expect_config_ok(&c);
    const struct dcp_config *a = dcp_deployment_config(from_yaml), *b = dcp_deployment_config(from_struct);
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        const char *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;
        print_message("  %s\n", k->path);
        switch (k->kind) {
        case CONFIG_SECTION: break;
        case CONFIG_STRING:
        case CONFIG_PATH: {
            const char *sa = config_load_string(a, k), *sb = config_load_string(b, k);
            assert_true((sa == NULL) == (sb == NULL));
            if (sa)
                assert_string_equal(sa, sb);
            break;
        }
        case CONFIG_NUMBER:
        case CONFIG_PARAM_COUNT: {
            double da, db;
            memcpy(&da, fa, sizeof(da));
            memcpy(&db, fb, sizeof(db));
            assert_float_equal(da, db, fabs(db) * 1e-15);
            break;
        }
        case CONFIG_TOKEN_LIST:
            assert_memory_equal(fa, fb, k->size);
            assert_memory_equal((const char *)a + k->count_offset, (const char *)b + k->count_offset,
                                sizeof(uint32_t));
            break;
        case CONFIG_LAYERS: /* the count, then the pattern */
            assert_memory_equal(fa, fb, k->size);
            assert_memory_equal(&a->model.layer_pattern, &b->model.layer_pattern, sizeof(a->model.layer_pattern));
            assert_int_equal(a->model.num_layer_kinds, b->model.num_layer_kinds);
            break;
        case CONFIG_INT:
        case CONFIG_BOOL:
        case CONFIG_ENUM: assert_memory_equal(fa, fb, k->size); break;
        }
    }
    dcp_deployment_destroy(&from_yaml);
    dcp_deployment_destroy(&from_struct);
}

static void test_from_config_rejects_bad_fields(void **state)
{
    (void)state;
    struct dcp_config c = deepseek_v3_h200();
    c.model.name = NULL;
    expect_config_error(&c, "model.name: missing required key 'name'");
    c = deepseek_v3_h200();
    c.hardware.gpu = "";
    expect_config_error(&c, "hardware.gpu: must not be empty");
    c = deepseek_v3_h200();
    c.model.attention = (enum dcp_attention_kind)7;
    expect_config_error(&c, "model.attention: invalid value 7; valid: mla, gqa, mha");
    c = deepseek_v3_h200();
    c.parallel.tp = 0;
    expect_config_error(&c, "parallel.tp: missing required key 'tp'");
    c = deepseek_v3_h200();
    c.parallel.dcp = 0;
    expect_config_error(&c, "parallel.dcp: dcp=0 is out of range; valid: 1..65536");
    c = deepseek_v3_h200();
    c.memory.block_size = 48;
    expect_config_error(&c, "memory.block_size: block_size=48 is not a power of two; valid: 1, 2, 4, 8, "
                            "16, 32, 64, 128, 256, 512, 1024");
    c = deepseek_v3_h200();
    c.hardware.memory_bytes = -141e9; /* shown in the YAML unit */
    expect_config_error(&c, "hardware.memory_gb: memory_gb=-141 is out of range; valid: > 0 and <= 100000");
    c = deepseek_v3_h200();
    c.model.kv_scale = NAN;
    expect_config_error(&c, "model.kv_scale: kv_scale=nan is out of range; valid: > 0 and <= 1e+09");
    c = deepseek_v3_h200();
    c.parallel.comm_dtype = (enum dcp_wire_dtype)4;
    expect_config_error(&c, "parallel.comm_dtype: invalid value 4; valid: fp32, bf16, fp16, auto");
    c = deepseek_v3_h200();
    c.runtime.cuda.device = -1;
    expect_config_error(&c, "runtime.cuda.device: device=-1 is out of range; valid: 0..4095");
    c = deepseek_v3_h200();
    c.workload.num_context_lengths = 0;
    expect_config_error(&c, "workload.context_lengths: missing required key 'context_lengths'");
    c = deepseek_v3_h200();
    c.workload.num_context_lengths = 33;
    expect_config_error(&c, "workload.context_lengths: too many entries: 33 given, at most 32");
    c = deepseek_v3_h200();
    c.workload.num_context_lengths = 2;
    c.workload.context_lengths[1] = 0;
    expect_config_error(&c, "workload.context_lengths[1]: context_lengths[1]=0 is out of range; valid: 1..4294967296");
    c = deepseek_v3_h200();
    c.workload.trace = "";
    expect_config_error(&c, "workload.trace: must not be empty");
    c = llama_70b_h200();
    c.model.num_kv_heads = 0;
    expect_config_error(&c, "model.kv_heads: missing required key 'kv_heads' (required for gqa)");
    c = llama_70b_h200();
    c.model.head_dim = 0;
    expect_config_error(&c, "model.head_dim: missing required key 'head_dim' (required for gqa/mha)");
    /* Keys of another attention kind are ignored in a struct (they have defaults there). */
    c = deepseek_v3_h200();
    c.model.head_dim = 5000;
    expect_config_accepted(&c);
    c = llama_70b_h200();
    c.model.kv_lora_rank = 0;
    expect_config_accepted(&c);
}

static void test_from_config_reports_all(void **state)
{
    (void)state;
    struct dcp_config c = llama_70b_h200();
    c.model.num_layers = 0;
    c.memory.gpu_fraction = 2;
    c.parallel.dcp = 3;
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_from_config(&c, d, &dep), DCP_ECONFIG);
    diag_dump(d);
    assert_int_equal(dcp_diag_count(d), 3);
    assert_string_equal(diag_text(d, 0), "model.layers: missing required key 'layers'");
    assert_string_equal(diag_text(d, 1), "memory.gpu_fraction: gpu_fraction=2 is out of range; valid: > 0 "
                                         "and <= 1");
    assert_string_equal(diag_text(d, 2), "parallel.dcp: dcp=3 does not divide tp/num_kv_heads=1; valid dcp: 1");
    assert_string_equal(dcp_last_error(), "<config>: invalid deployment (3 errors)");
    dcp_diag_destroy(&d);

    assert_int_equal(dcp_deployment_from_config(NULL, NULL, &dep), DCP_EINVAL);
    assert_null(dep);
    assert_int_equal(dcp_deployment_from_config(&c, NULL, NULL), DCP_EINVAL);
    /* No diag: still rejected. */
    assert_int_equal(dcp_deployment_from_config(&c, NULL, &dep), DCP_ECONFIG);
    assert_null(dep);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(dcp_attention_kind_name(DCP_ATTN_MLA), "mla");
    assert_string_equal(dcp_attention_kind_name(DCP_ATTN_GQA), "gqa");
    assert_string_equal(dcp_attention_kind_name(DCP_ATTN_MHA), "mha");
    assert_string_equal(dcp_attention_kind_name((enum dcp_attention_kind)3), "unknown");
    assert_string_equal(dcp_dtype_name(DCP_DTYPE_FP32), "fp32");
    assert_string_equal(dcp_dtype_name(DCP_DTYPE_BF16), "bf16");
    assert_string_equal(dcp_dtype_name(DCP_DTYPE_FP16), "fp16");
    assert_string_equal(dcp_dtype_name(DCP_DTYPE_FP8_E4M3), "fp8_e4m3");
    assert_string_equal(dcp_dtype_name((enum dcp_dtype)-1), "unknown");
    /* dcp_dtype_from_name() is dcp_dtype_name()'s inverse and refuses anything else. */
    for (int i = 0; i < 4; i++) {
        enum dcp_dtype d = (enum dcp_dtype)-1;
        assert_int_equal(dcp_dtype_from_name(dcp_dtype_name((enum dcp_dtype)i), &d), DCP_OK);
        assert_int_equal((int)d, i);
    }
    enum dcp_dtype kept = DCP_DTYPE_FP16;
    assert_int_equal(dcp_dtype_from_name("BF16", &kept), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "one of fp32, bf16, fp16, fp8_e4m3"));
    assert_int_equal(dcp_dtype_from_name("fp8", &kept), DCP_EINVAL);
    assert_int_equal(dcp_dtype_from_name("", &kept), DCP_EINVAL);
    assert_int_equal(dcp_dtype_from_name(NULL, &kept), DCP_EINVAL);
    assert_int_equal(dcp_dtype_from_name("fp32", NULL), DCP_EINVAL);
    assert_int_equal((int)kept, (int)DCP_DTYPE_FP16);
    const char *weights[] = {"fp32", "bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4"};
    for (int i = 0; i < 7; i++)
        assert_string_equal(dcp_weight_dtype_name((enum dcp_weight_dtype)i), weights[i]);
    assert_string_equal(dcp_weight_dtype_name((enum dcp_weight_dtype)7), "unknown");
    assert_string_equal(dcp_comm_scheme_name(DCP_COMM_AG_RS), "ag_rs");
    assert_string_equal(dcp_comm_scheme_name(DCP_COMM_A2A), "a2a");
    assert_string_equal(dcp_comm_scheme_name(DCP_COMM_P2P), "p2p");
    assert_string_equal(dcp_comm_scheme_name(DCP_COMM_AUTO), "auto");
    assert_string_equal(dcp_comm_scheme_name((enum dcp_comm_scheme)4), "unknown");
    assert_string_equal(dcp_backend_kind_name(DCP_BACKEND_AUTO), "auto");
    assert_string_equal(dcp_backend_kind_name(DCP_BACKEND_CUDA), "cuda");
    assert_string_equal(dcp_backend_kind_name(DCP_BACKEND_HOST), "host");
    assert_string_equal(dcp_backend_kind_name((enum dcp_backend_kind)9), "unknown");
}

static void test_sizes(void **state)
{
    (void)state;
    assert_int_equal(dcp_dtype_size(DCP_DTYPE_FP32), 4);
    assert_int_equal(dcp_dtype_size(DCP_DTYPE_BF16), 2);
    assert_int_equal(dcp_dtype_size(DCP_DTYPE_FP16), 2);
    assert_int_equal(dcp_dtype_size(DCP_DTYPE_FP8_E4M3), 1);
    assert_int_equal(dcp_dtype_size((enum dcp_dtype)4), 0);
    assert_float_equal(dcp_weight_dtype_bytes(DCP_WEIGHT_FP32), 4, 0);
    assert_float_equal(dcp_weight_dtype_bytes(DCP_WEIGHT_BF16), 2, 0);
    assert_float_equal(dcp_weight_dtype_bytes(DCP_WEIGHT_FP16), 2, 0);
    assert_float_equal(dcp_weight_dtype_bytes(DCP_WEIGHT_FP8), 1, 0);
    assert_float_equal(dcp_weight_dtype_bytes(DCP_WEIGHT_NVFP4), 4.5 / 8, 0);
    assert_float_equal(dcp_weight_dtype_bytes(DCP_WEIGHT_MXFP4), 4.25 / 8, 0);
    assert_float_equal(dcp_weight_dtype_bytes(DCP_WEIGHT_INT4), 4.125 / 8, 0);
    assert_float_equal(dcp_weight_dtype_bytes((enum dcp_weight_dtype)7), 0, 0);
}

/* docs/design.md §6: KV bytes per token per layer and over all layers. */
static void test_kv_geometry(void **state)
{
    (void)state;
    struct dcp_config ds = deepseek_v3_h200();
    uint32_t qk = 0, v = 0;
    dcp_model_attention_dims(&ds.model, &qk, &v);
    assert_int_equal(qk, 576);
    assert_int_equal(v, 512);
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&ds.model), 1152);
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&ds.model) * ds.model.num_layers, 70272);
    ds.model.kv_dtype = DCP_DTYPE_FP8_E4M3;
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&ds.model) * ds.model.num_layers, 35136);

    struct dcp_config llama = llama_70b_h200();
    dcp_model_attention_dims(&llama.model, &qk, &v);
    assert_int_equal(qk, 128);
    assert_int_equal(v, 128);
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&llama.model), 4096);
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&llama.model) * llama.model.num_layers, 327680);
    llama.model.kv_dtype = DCP_DTYPE_FP8_E4M3;
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&llama.model) * llama.model.num_layers, 163840);

    struct dcp_config qwen = llama_70b_h200(); /* Qwen3-235B-A22B: 4 KV heads x 128, 94 layers */
    qwen.model.num_kv_heads = 4;
    qwen.model.num_layers = 94;
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&qwen.model), 2048);
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&qwen.model) * qwen.model.num_layers, 192512);
    qwen.model.kv_dtype = DCP_DTYPE_FP8_E4M3;
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&qwen.model) * qwen.model.num_layers, 96256);

    /* The loaded MHA deployment derives kv_heads = query_heads. */
    struct dcp_config mha = llama_70b_h200();
    mha.model.attention = DCP_ATTN_MHA;
    mha.model.num_kv_heads = 0;
    dcp_deployment *dep = expect_config_ok(&mha);
    assert_int_equal(dcp_model_kv_bytes_per_token_layer(&dcp_deployment_config(dep)->model),
                     2 * 64 * 128 * 2);
    dcp_deployment_destroy(&dep);

    assert_int_equal(dcp_model_kv_bytes_per_token_layer(NULL), 0);
    dcp_model_attention_dims(NULL, &qk, &v);
    assert_int_equal(qk, 0);
    assert_int_equal(v, 0);
    dcp_model_attention_dims(&ds.model, NULL, NULL); /* outputs optional */
}

/*
 * docs/configuration.md documents every key of the schema, and no other: one table
 * row "| `key` |" per key under its section's "## section" heading (keys of
 * runtime.host as `host.threads` under "## runtime").
 */
static void test_every_key_documented(void **state)
{
    (void)state;
    const char *root = getenv("DCP_SOURCE_ROOT");
    if (!root)
        skip();
    char path[512];
    snprintf(path, sizeof(path), "%s/docs/configuration.md", root);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    bool documented[CONFIG_KEY_MAX] = {false};
    char section[64] = "", line[2048];
    int rows = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "## ", 3) == 0) {
            snprintf(section, sizeof(section), "%.*s", (int)strcspn(line + 3, " \n"), line + 3);
            continue;
        }
        const struct config_key *sec = config_key_find(section);
        if (!sec || sec->kind != CONFIG_SECTION || strncmp(line, "| `", 3) != 0)
            continue;
        char key[160];
        snprintf(key, sizeof(key), "%s.%.*s", section, (int)strcspn(line + 3, "`"), line + 3);
        const struct config_key *k = config_key_find(key);
        if (!k)
            print_message("docs/configuration.md documents '%s', which the schema does not have\n", key);
        assert_non_null(k);
        documented[config_key_index(k)] = true;
        rows++;
    }
    fclose(f);
    for (size_t i = 0; i < config_key_count; i++) {
        if (config_keys[i].kind != CONFIG_SECTION && !documented[i])
            print_message("docs/configuration.md lacks a row for '%s'\n", config_keys[i].path);
        assert_true(config_keys[i].kind == CONFIG_SECTION || documented[i]);
    }
    assert_true(rows > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_from_config_copies_and_derives),
        cmocka_unit_test(test_yaml_and_struct_agree),
        cmocka_unit_test(test_from_config_rejects_bad_fields),
        cmocka_unit_test(test_from_config_reports_all),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_kv_geometry),
        cmocka_unit_test(test_every_key_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
