/*
 * dcp_deployment_to_json: the settings in the deployment file's vocabulary, which
 * load back (JSON is YAML flow syntax) to the very same struct dcp_config.
 */
#include <stdlib.h>
#include <unistd.h>

#include "config/config_internal.h"
#include "config_test_structs.h"

/* Asserts that a and b hold the same settings: strings by content, all else bit for bit. */
static void assert_same_config(const struct dcp_config *a, const struct dcp_config *b)
{
    struct dcp_config x = *a, y = *b;
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->kind != CONFIG_STRING && k->kind != CONFIG_PATH)
            continue;
        const char *sa = config_load_string(&x, k), *sb = config_load_string(&y, k);
        if (!sa || !sb)
            assert_ptr_equal(sa, sb);
        else
            assert_string_equal(sa, sb);
        config_store_string(&x, k, NULL);
        config_store_string(&y, k, NULL);
    }
    assert_memory_equal(&x, &y, sizeof(x));
}

/* Exports dep, loads the text back as "t.json" and checks the settings are unchanged. */
static void round_trip(const dcp_deployment *dep)
{
    char *text = NULL;
    assert_int_equal(dcp_deployment_to_json(dep, &text), DCP_OK);
    struct load_result r = load_yaml(text);
    diag_dump(r.diag);
    if (r.status)
        print_message("%s\n", text);
    assert_int_equal(r.status, DCP_OK);
    assert_int_equal(dcp_diag_count(r.diag), 0);
    assert_same_config(dcp_deployment_config(dep), dcp_deployment_config(r.dep));
    /* And once more: the export of the reloaded deployment is the same text. */
    char *again = NULL;
    assert_int_equal(dcp_deployment_to_json(r.dep, &again), DCP_OK);
    assert_string_equal(text, again);
    free(again);
    free(text);
    load_result_free(&r);
}

static void test_shipped_shapes_round_trip(void **state)
{
    (void)state;
    const struct dcp_config shapes[] = {deepseek_v3_h200(), llama_70b_h200()};
    for (size_t i = 0; i < DCP_ARRAY_SIZE(shapes); i++) {
        dcp_deployment *dep = expect_config_ok(&shapes[i]);
        round_trip(dep);
        dcp_deployment_destroy(&dep);
    }
}

/* Every key off its default, numbers that are not round in YAML units, a string to escape. */
static void test_every_key_round_trips(void **state)
{
    (void)state;
    char dir[64], trace[256];
    temp_dir_make(dir);
    temp_file_write(dir, "a trace.jsonl", "{\"input_length\": 10, \"output_length\": 2}\n", trace);
    struct dcp_config c = llama_70b_h200();
    c.model.name = "Llama \"3.1\" \\ 70B\tx";
    c.model.softmax_scale = 0.0883883476483184; /* not 1/sqrt(128) exactly */
    c.model.kv_dtype = DCP_DTYPE_FP8_E4M3;
    c.model.kv_scale = 0.37;
    c.model.num_params = 70553706496.5;
    c.model.experts = 8;
    c.model.experts_per_token = 2;
    c.model.active_params = 13e9;
    c.model.hidden_size = 8192;
    c.model.context_window = 131072;
    c.hardware.flops_bf16 = 989.5e12;
    c.hardware.flops_fp8 = 1979e12;
    c.hardware.flops_fp4 = 3.3e15;
    c.hardware.internode_bandwidth = 50.5e9;
    c.hardware.internode_latency = 3.1e-6;
    c.hardware.memory_bytes = 141.7e9;
    c.hardware.hbm_bandwidth = 4.8e12 / 3;
    c.hardware.link_bandwidth = 450.1e9;
    c.hardware.collective_latency = 17.3e-6;
    c.hardware.gpus_per_node = 4;
    c.hardware.nodes = 4;
    c.parallel.tp = 16;
    c.parallel.dcp = 2;
    c.parallel.interleave = 8;
    c.parallel.comm = DCP_COMM_AG_RS;
    c.parallel.replicate_q = true;
    c.parallel.comm_dtype = DCP_WIRE_FP16;
    c.memory.gpu_fraction = 0.85;
    c.memory.block_size = 32;
    c.memory.reserve_bytes = 3.3e9;
    c.workload.requests = 7;
    c.workload.decode_steps = 3;
    c.workload.q_len = 2;
    c.workload.seed = UINT64_MAX;
    c.workload.trace = trace;
    c.runtime.backend = DCP_BACKEND_HOST;
    c.runtime.host.threads = 3;
    c.runtime.host.memory_bytes = 123.456e6;
    c.runtime.cuda.comm = DCP_CUDA_COMM_VIRTUAL;
    c.runtime.cuda.device = 5;
    c.runtime.cuda.nccl_timeout_s = 33.5;
    c.runtime.cuda.use_vmm = false;
    dcp_deployment *dep = expect_config_ok(&c);
    round_trip(dep);
    char *text = NULL;
    assert_int_equal(dcp_deployment_to_json(dep, &text), DCP_OK);
    /* The file's names and units, not the struct's. */
    assert_non_null(strstr(text, "\"memory_gb\": 141.7,"));
    assert_non_null(strstr(text, "\"collective_latency_us\": 17.3,"));
    assert_non_null(strstr(text, "\"query_heads\": 64,"));
    assert_non_null(strstr(text, "\"name\": \"Llama \\\"3.1\\\" \\\\ 70B\\u0009x\","));
    assert_null(strstr(text, "num_q_heads"));
    assert_null(strstr(text, "memory_bytes"));
    /* GQA: MLA's keys are left out. */
    assert_null(strstr(text, "kv_lora_rank"));
    free(text);
    dcp_deployment_destroy(&dep);
    const char *names[] = {"a trace.jsonl"};
    temp_dir_remove(dir, names, 1);
}

static void test_arguments(void **state)
{
    (void)state;
    char *text = (char *)"x";
    assert_int_equal(dcp_deployment_to_json(NULL, &text), DCP_EINVAL);
    assert_null(text);
    const struct dcp_config c = llama_70b_h200();
    dcp_deployment *dep = expect_config_ok(&c);
    assert_int_equal(dcp_deployment_to_json(dep, NULL), DCP_EINVAL);
    dcp_deployment_destroy(&dep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_shapes_round_trip),
        cmocka_unit_test(test_every_key_round_trips),
        cmocka_unit_test(test_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
