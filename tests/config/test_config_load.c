/*
 * Loading YAML deployments: valid files with their defaults, and every class of
 * problem with its exact message and position.
 */
#include <math.h>
#include <stdlib.h>

#include "config_test.h"

/* Lines 1-7. */
#define MLA_MODEL                                                                             \
    "model:\n  name: DeepSeek-V3\n  attention: mla\n  layers: 61\n  query_heads: 128\n"      \
    "  parameters: 671B\n  weight_dtype: fp8\n"
/* Lines 8-12 after MLA_MODEL. */
#define H200 "hardware:\n  gpu: H200\n  memory_gb: 141\n  hbm_gbps: 4800\n  link_gbps: 450\n"
/* Lines 13-15. */
#define TP8_DCP8 "parallel:\n  tp: 8\n  dcp: 8\n"
/* Lines 16-17. */
#define WORKLOAD "workload:\n  context_lengths: [32k, 128k]\n"

static void test_valid_mla_with_defaults(void **state)
{
    (void)state;
    dcp_deployment *dep = expect_load(MLA_MODEL H200 TP8_DCP8 WORKLOAD);
    const struct dcp_config *c = dcp_deployment_config(dep);
    assert_string_equal(dcp_deployment_source(dep), "t.yaml");

    assert_string_equal(c->model.name, "DeepSeek-V3");
    assert_int_equal(c->model.attention, DCP_ATTN_MLA);
    assert_int_equal(c->model.num_layers, 61);
    assert_int_equal(c->model.num_q_heads, 128);
    assert_int_equal(c->model.num_kv_heads, 1); /* derived */
    assert_int_equal(c->model.head_dim, 0);
    assert_int_equal(c->model.kv_lora_rank, 512);
    assert_int_equal(c->model.rope_dim, 64);
    assert_int_equal(c->model.qk_nope_head_dim, 128);
    assert_float_equal(c->model.softmax_scale, 1.0 / sqrt(192.0), 1e-15);
    assert_int_equal(c->model.kv_dtype, DCP_DTYPE_BF16);
    assert_float_equal(c->model.kv_scale, 1.0, 0);
    assert_float_equal(c->model.num_params, 671e9, 1);
    assert_int_equal(c->model.weight_dtype, DCP_WEIGHT_FP8);

    assert_string_equal(c->hardware.gpu, "H200");
    assert_float_equal(c->hardware.memory_bytes, 141e9, 1);
    assert_float_equal(c->hardware.hbm_bandwidth, 4800e9, 1);
    assert_float_equal(c->hardware.link_bandwidth, 450e9, 1);
    assert_float_equal(c->hardware.collective_latency, 12e-6, 1e-12);
    assert_int_equal(c->hardware.gpus_per_node, 8);
    assert_int_equal(c->hardware.nodes, 1);

    assert_int_equal(c->parallel.tp, 8);
    assert_int_equal(c->parallel.dcp, 8);
    assert_int_equal(c->parallel.interleave, 1);
    assert_int_equal(c->parallel.comm, DCP_COMM_A2A);
    assert_false(c->parallel.replicate_q);
    assert_int_equal(c->parallel.comm_dtype, DCP_WIRE_AUTO);

    assert_float_equal(c->memory.gpu_fraction, 0.9, 0);
    assert_int_equal(c->memory.block_size, 64);
    assert_float_equal(c->memory.reserve_bytes, 4e9, 1);

    assert_int_equal(c->workload.num_context_lengths, 2);
    assert_int_equal(c->workload.context_lengths[0], 32768);
    assert_int_equal(c->workload.context_lengths[1], 131072);
    assert_int_equal(c->workload.requests, 64);
    assert_int_equal(c->workload.decode_steps, 16);
    assert_int_equal(c->workload.q_len, 1);
    assert_int_equal(c->workload.seed, 1);
    assert_null(c->workload.trace);

    assert_int_equal(c->runtime.backend, DCP_BACKEND_AUTO);
    assert_int_equal(c->runtime.host.threads, 0);
    assert_float_equal(c->runtime.host.memory_bytes, 0, 0);
    assert_int_equal(c->runtime.cuda.comm, DCP_CUDA_COMM_AUTO);
    assert_int_equal(c->runtime.cuda.device, 0);
    assert_float_equal(c->runtime.cuda.nccl_timeout_s, 120, 0);
    assert_int_equal(c->runtime.cuda.precision, DCP_CUDA_PRECISION_FAST);
    assert_true(c->runtime.cuda.use_vmm);
    dcp_deployment_destroy(&dep);
    assert_null(dep);
    dcp_deployment_destroy(&dep); /* NULL is fine */
    dcp_deployment_destroy(NULL);
}

/* Every key given, none at its default: the whole table is exercised. */
static const char *const every_key_gqa =
    "# Llama-3.1-70B on two nodes\n"
    "model:\n"
    "  name: Llama-3.1-70B\n"
    "  attention: GQA          # enum names are case-insensitive\n"
    "  layers: 80\n"
    "  query_heads: 64\n"
    "  kv_heads: 8\n"
    "  head_dim: 128\n"
    "  softmax_scale: 0.125\n"
    "  kv_dtype: fp8_e4m3\n"
    "  kv_scale: 0.5\n"
    "  parameters: 70.6B\n"
    "  weight_dtype: nvfp4\n"
    "hardware:\n"
    "  gpu: 'B200'\n"
    "  memory_gb: 180.5\n"
    "  hbm_gbps: 8e3\n"
    "  link_gbps: 900\n"
    "  collective_latency_us: 15.5\n"
    "  gpus_per_node: 4\n"
    "  nodes: 4\n"
    "parallel:\n"
    "  tp: 16\n"
    "  dcp: 2\n"
    "  interleave: 16\n"
    "  comm: ag_rs\n"
    "  replicate_q: yes\n"
    "  comm_dtype: fp32\n"
    "memory:\n"
    "  gpu_fraction: 0.85\n"
    "  block_size: 128\n"
    "  reserve_gb: 6\n"
    "workload:\n"
    "  context_lengths:\n"
    "    - 4096\n"
    "    - 1M\n"
    "    - 96K\n"
    "  requests: 512\n"
    "  decode_steps: 32\n"
    "  q_len: 4\n"
    "  seed: 18446744073709551615\n"
    "runtime:\n"
    "  backend: host\n"
    "  host:\n"
    "    threads: 3\n"
    "    memory_mb: 512\n"
    "  cuda:\n"
    "    comm: virtual\n"
    "    device: 2\n"
    "    nccl_timeout_s: 30\n"
    "    vmm: false\n"
    "    precision: exact\n";

static void test_valid_gqa_every_key(void **state)
{
    (void)state;
    dcp_deployment *dep = expect_load(every_key_gqa);
    const struct dcp_config *c = dcp_deployment_config(dep);
    assert_string_equal(c->model.name, "Llama-3.1-70B");
    assert_int_equal(c->model.attention, DCP_ATTN_GQA);
    assert_int_equal(c->model.num_layers, 80);
    assert_int_equal(c->model.num_q_heads, 64);
    assert_int_equal(c->model.num_kv_heads, 8);
    assert_int_equal(c->model.head_dim, 128);
    assert_float_equal(c->model.softmax_scale, 0.125, 0); /* given, not derived */
    assert_int_equal(c->model.kv_dtype, DCP_DTYPE_FP8_E4M3);
    assert_float_equal(c->model.kv_scale, 0.5, 0);
    assert_float_equal(c->model.num_params, 70.6e9, 1);
    assert_int_equal(c->model.weight_dtype, DCP_WEIGHT_NVFP4);
    assert_string_equal(c->hardware.gpu, "B200");
    assert_float_equal(c->hardware.memory_bytes, 180.5e9, 1);
    assert_float_equal(c->hardware.hbm_bandwidth, 8000e9, 1);
    assert_float_equal(c->hardware.link_bandwidth, 900e9, 1);
    assert_float_equal(c->hardware.collective_latency, 15.5e-6, 1e-12);
    assert_int_equal(c->hardware.gpus_per_node, 4);
    assert_int_equal(c->hardware.nodes, 4);
    assert_int_equal(c->parallel.tp, 16);
    assert_int_equal(c->parallel.dcp, 2);
    assert_int_equal(c->parallel.interleave, 16);
    assert_int_equal(c->parallel.comm, DCP_COMM_AG_RS);
    assert_true(c->parallel.replicate_q);
    assert_int_equal(c->parallel.comm_dtype, DCP_WIRE_FP32);
    assert_float_equal(c->memory.gpu_fraction, 0.85, 0);
    assert_int_equal(c->memory.block_size, 128);
    assert_float_equal(c->memory.reserve_bytes, 6e9, 1);
    assert_int_equal(c->workload.num_context_lengths, 3);
    assert_int_equal(c->workload.context_lengths[0], 4096);
    assert_int_equal(c->workload.context_lengths[1], 1048576);
    assert_int_equal(c->workload.context_lengths[2], 96 * 1024);
    assert_int_equal(c->workload.requests, 512);
    assert_int_equal(c->workload.decode_steps, 32);
    assert_int_equal(c->workload.q_len, 4);
    assert_true(c->workload.seed == UINT64_MAX);
    assert_int_equal(c->runtime.backend, DCP_BACKEND_HOST);
    assert_int_equal(c->runtime.host.threads, 3);
    assert_float_equal(c->runtime.host.memory_bytes, 512e6, 1);
    assert_int_equal(c->runtime.cuda.comm, DCP_CUDA_COMM_VIRTUAL);
    assert_int_equal(c->runtime.cuda.device, 2);
    assert_float_equal(c->runtime.cuda.nccl_timeout_s, 30, 0);
    assert_false(c->runtime.cuda.use_vmm);
    assert_int_equal(c->runtime.cuda.precision, DCP_CUDA_PRECISION_EXACT);
    dcp_deployment_destroy(&dep);
}

static void test_valid_mha_derives_kv_heads_and_scale(void **state)
{
    (void)state;
    dcp_deployment *dep = expect_load(
        "model: {name: Llama-2-7B, attention: mha, layers: 32, query_heads: 32, head_dim: 128,"
        " parameters: 6.7B}\n"
        "hardware: {gpu: L40S, memory_gb: 48, hbm_gbps: 864, link_gbps: 32}\n"
        "parallel: {tp: 4}\n"
        "workload: {context_lengths: [4k]}\n");
    const struct dcp_config *c = dcp_deployment_config(dep);
    assert_int_equal(c->model.attention, DCP_ATTN_MHA);
    assert_int_equal(c->model.num_kv_heads, 32);
    assert_float_equal(c->model.softmax_scale, 1.0 / sqrt(128.0), 1e-15);
    assert_int_equal(c->parallel.dcp, 1);
    /* Defaults of the MLA-only keys stay as documented; they do not apply here. */
    assert_int_equal(c->model.kv_lora_rank, 512);
    dcp_deployment_destroy(&dep);
}

static void test_load_file_resolves_trace_next_to_it(void **state)
{
    (void)state;
    char dir[64], dep_path[256], trace_path[256];
    temp_dir_make(dir);
    temp_file_write(dir, "trace.txt", "4096\n131072\n", trace_path);
    temp_file_write(dir, "dep.yaml",
                    MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: [32k]\n  trace: trace.txt\n",
                    dep_path);
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_load_file(dep_path, d, &dep), DCP_OK);
    assert_int_equal(dcp_diag_count(d), 0);
    assert_string_equal(dcp_deployment_source(dep), dep_path);
    assert_string_equal(dcp_deployment_config(dep)->workload.trace, trace_path);
    dcp_deployment_destroy(&dep);

    /* An absolute trace path is kept as written. */
    char text[1024];
    snprintf(text, sizeof(text), "%s%s%sworkload:\n  context_lengths: [32k]\n  trace: %s\n",
             MLA_MODEL H200, TP8_DCP8, "", trace_path);
    dep = expect_load(text);
    assert_string_equal(dcp_deployment_config(dep)->workload.trace, trace_path);
    dcp_deployment_destroy(&dep);

    /* A missing trace is an error at the trace value, naming the resolved path. */
    temp_file_write(dir, "dep.yaml",
                    MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: [32k]\n  trace: gone.txt\n",
                    dep_path);
    dcp_diag_clear(d);
    assert_int_equal(dcp_deployment_load_file(dep_path, d, &dep), DCP_ECONFIG);
    assert_null(dep);
    char expected[512];
    snprintf(expected, sizeof(expected),
             "%s:18:10: workload.trace: trace %s/gone.txt: cannot open: No such file or directory",
             dep_path, dir);
    assert_int_equal(dcp_diag_count(d), 1);
    assert_string_equal(diag_text(d, 0), expected);

    /* A directory is not a trace. */
    snprintf(text, sizeof(text), "%s%s%sworkload:\n  context_lengths: [32k]\n  trace: %s\n",
             MLA_MODEL H200, TP8_DCP8, "", dir);
    struct load_result r = load_yaml(text);
    assert_int_equal(r.status, DCP_ECONFIG);
    snprintf(expected, sizeof(expected),
             "t.yaml:18:10: workload.trace: trace %s: not a regular file (a directory); give a regular file", dir);
    assert_string_equal(diag_text(r.diag, 0), expected);
    load_result_free(&r);

    dcp_diag_destroy(&d);
    const char *names[] = {"trace.txt", "dep.yaml"};
    temp_dir_remove(dir, names, 2);
}

static void test_malformed_yaml(void **state)
{
    (void)state;
    expect_one_error("model:\n  name: x\n   attention: mla\n",
                     "t.yaml:3:13: malformed YAML: mapping values are not allowed in this context");
    expect_one_error("model:\n  name: x\n  attention: [mla\nhardware: 1\n",
                     "t.yaml:4:9: malformed YAML: did not find expected ',' or ']' "
                     "(while parsing a flow sequence at line 3, column 14)");
    /* Invalid UTF-8: libyaml reports only a byte offset; we turn it into line:col. */
    expect_one_error("model:\n  name: \xff\n",
                     "t.yaml:2:9: malformed YAML: invalid leading UTF-8 octet (byte 0xff)");
    /* A tab in indentation: libyaml's message does not say "tab"; the hint names it. */
    expect_one_error("\tmodel:\n  name: x\n",
                     "t.yaml:1:1: malformed YAML: found character that cannot start any token (while "
                     "scanning for the next token at line 1, column 1); a tab indents line 1 (column 1): "
                     "YAML indents with spaces only");
    expect_one_error("model:\n  name: x\n \tattention: mla\n",
                     "t.yaml:3:2: malformed YAML: found a tab character that violates indentation "
                     "(while scanning a plain scalar at line 2, column 9); a tab indents line 3 "
                     "(column 2): YAML indents with spaces only");
    /* A tab after a key's colon is fine, and a malformed file without tabs gets no hint. */
    dcp_deployment *dep = expect_load(MLA_MODEL "  kv_dtype:\tbf16\n" H200 TP8_DCP8 WORKLOAD);
    dcp_deployment_destroy(&dep);
    /* Trailing garbage after a valid document is malformed too. */
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "---\n[\n",
                     "t.yaml:20:1: malformed YAML: did not find expected node content "
                     "(while parsing a flow node at line 20, column 1)");
}

static void test_document_shape(void **state)
{
    (void)state;
    expect_one_error("",
                     "t.yaml:1:1: empty document; expected a mapping with sections model, hardware, "
                     "parallel, workload");
    expect_one_error("# only a comment\n",
                     "t.yaml:1:1: empty document; expected a mapping with sections model, hardware, "
                     "parallel, workload");
    expect_one_error("- model\n- hardware\n",
                     "t.yaml:1:1: expected a mapping with sections model, hardware, parallel, "
                     "workload, got a list");
    expect_one_error("deployment\n",
                     "t.yaml:1:1: expected a mapping with sections model, hardware, parallel, "
                     "workload, got \"deployment\"");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory: 0.9\n",
                     "t.yaml:18:9: memory: expected a mapping, got \"0.9\"");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "runtime:\n",
                     "t.yaml:18:9: runtime: expected a mapping, got an empty value");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "---\nmodel: {}\n",
                     "t.yaml:18:1: a second YAML document starts here; a deployment file holds one");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "? [a, b]\n: 1\n",
                     "t.yaml:18:3: expected a key name, got a list");
}

static void test_unknown_keys(void **state)
{
    (void)state;
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  dpc: 8\n" WORKLOAD,
                     "t.yaml:15:3: parallel.dpc: unknown key 'dpc'; did you mean 'dcp'?");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "modle:\n  x: 1\n",
                     "t.yaml:18:1: modle: unknown section 'modle'; did you mean 'model'?");
    /* Case differences and prefixes count as close. */
    expect_one_error(MLA_MODEL H200 "parallel:\n  TP: 8\n  tp: 8\n" WORKLOAD,
                     "t.yaml:14:3: parallel.TP: unknown key 'TP'; did you mean 'tp'?");
    expect_one_error(MLA_MODEL "hardware:\n  gpu: H200\n  memory_gb: 141\n  hbm_gbps: 4800\n"
                               "  link_gbps: 450\n  collective_latency: 20\n" TP8_DCP8 WORKLOAD,
                     "t.yaml:13:3: hardware.collective_latency: unknown key 'collective_latency'; "
                     "did you mean 'collective_latency_us'?");
    /* Pipeline parallelism gets the reason, not "did you mean 'tp'?". */
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  pp: 2\n" WORKLOAD,
                     "t.yaml:15:3: parallel.pp: pipeline parallelism (pp) is outside the model: one instance "
                     "is one TP group (tp GPUs, with dcp sharding its KV cache); plan each pipeline stage as "
                     "its own deployment, or use a larger tp");
    /* Nothing close: list what is allowed. */
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  pages: 4\n",
                     "t.yaml:19:3: memory.pages: unknown key 'pages'; allowed keys: gpu_fraction, "
                     "block_size, reserve_gb");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "cluster: {}\n",
                     "t.yaml:18:1: cluster: unknown section 'cluster'; allowed sections: model, "
                     "hardware, parallel, memory, workload, runtime");
    /* A key of another section says where it belongs. */
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  interleave: 4\n",
                     "t.yaml:19:3: memory.interleave: unknown key 'interleave' here; it belongs in "
                     "'parallel'");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "runtime:\n  cuda:\n    threads: 4\n",
                     "t.yaml:20:5: runtime.cuda.threads: unknown key 'threads' here; it belongs in "
                     "'runtime.host'");
    /* Long or odd keys are shown escaped and cut. */
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD
                     "runtime:\n  \"a\\tb_0123456789012345678901234567890123456789\": 1\n",
                     "t.yaml:19:3: runtime.a\\x09b_012345678901234567890123456789012345...: unknown "
                     "key 'a\\x09b_012345678901234567890123456789012345...'; allowed keys: backend, "
                     "host, cuda");
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  dcp: 8\n  tp: 4\n" WORKLOAD,
                     "t.yaml:16:3: parallel.tp: duplicate key 'tp' (first defined at line 14)");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "hardware:\n  gpu: B200\n",
                     "t.yaml:18:1: hardware: duplicate section 'hardware' (first defined at line 8)");
}

static void test_wrong_types(void **state)
{
    (void)state;
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: x\n" WORKLOAD,
                     "t.yaml:14:7: parallel.tp: expected an integer, got \"x\"");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: \"8\"\n" WORKLOAD,
                     "t.yaml:14:7: parallel.tp: expected an integer, got \"8\" (quoted, so a string)");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 3.5\n" WORKLOAD,
                     "t.yaml:14:7: parallel.tp: expected an integer, got \"3.5\"");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp:\n" WORKLOAD,
                     "t.yaml:14:6: parallel.tp: expected an integer, got an empty value");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: [8]\n" WORKLOAD,
                     "t.yaml:14:7: parallel.tp: expected an integer, got a list");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  reserve_gb: lots\n",
                     "t.yaml:19:15: memory.reserve_gb: expected a number, got \"lots\"");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  reserve_gb: .inf\n",
                     "t.yaml:19:15: memory.reserve_gb: expected a number, got \".inf\"");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  reserve_gb: 1e999\n",
                     "t.yaml:19:15: memory.reserve_gb: expected a number, got \"1e999\"");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  replicate_q: 1\n" WORKLOAD,
                     "t.yaml:15:16: parallel.replicate_q: expected true or false, got \"1\"");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  replicate_q: 'yes'\n" WORKLOAD,
                     "t.yaml:15:16: parallel.replicate_q: expected true or false, got \"yes\" "
                     "(quoted, so a string)");
    expect_one_error(MLA_MODEL "hardware:\n  gpu: {name: H200}\n  memory_gb: 141\n  hbm_gbps: 4800\n"
                               "  link_gbps: 450\n" TP8_DCP8 WORKLOAD,
                     "t.yaml:9:8: hardware.gpu: expected a string, got a mapping");
    expect_one_error(MLA_MODEL "hardware:\n  gpu: ''\n  memory_gb: 141\n  hbm_gbps: 4800\n"
                               "  link_gbps: 450\n" TP8_DCP8 WORKLOAD,
                     "t.yaml:9:8: hardware.gpu: must not be empty");
    /* "\0" in a double-quoted scalar: the name was cut there silently. */
    expect_one_error(MLA_MODEL "hardware:\n  gpu: \"H200\\0evil\"\n  memory_gb: 141\n  hbm_gbps: 4800\n"
                               "  link_gbps: 450\n" TP8_DCP8 WORKLOAD,
                     "t.yaml:9:8: hardware.gpu: holds a NUL byte (\\0), which a name or path cannot");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "runtime:\n  backend: [cuda]\n",
                     "t.yaml:19:12: runtime.backend: expected one of auto, cuda, host, got a list");
    expect_one_error("model:\n  name: DeepSeek-V3\n  attention: mla\n  layers: 61\n  query_heads: 128\n"
                     "  parameters: many\n" H200 TP8_DCP8 WORKLOAD,
                     "t.yaml:6:15: model.parameters: expected a parameter count such as 671B or "
                     "1.04T, got \"many\"");
}

static void test_out_of_range(void **state)
{
    (void)state;
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 0\n" WORKLOAD,
                     "t.yaml:14:7: parallel.tp: tp=0 is out of range; valid: 1..65536");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: -8\n" WORKLOAD,
                     "t.yaml:14:7: parallel.tp: tp=-8 is out of range; valid: 1..65536");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 99999999999999999999999\n" WORKLOAD,
                     "t.yaml:14:7: parallel.tp: tp=99999999999999999999999 is out of range; valid: 1..65536");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 4294967296\n" WORKLOAD,
                     "t.yaml:14:7: parallel.tp: tp=4294967296 is out of range; valid: 1..65536");
    expect_one_error("model:\n  name: m\n  attention: gqa\n  layers: 1\n  query_heads: 8\n"
                     "  kv_heads: 8\n  head_dim: 2048\n" H200 "parallel: {tp: 1}\n" WORKLOAD,
                     "t.yaml:7:13: model.head_dim: head_dim=2048 is out of range; valid: 1..1024");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  gpu_fraction: 1.5\n",
                     "t.yaml:19:17: memory.gpu_fraction: gpu_fraction=1.5 is out of range; valid: > 0 "
                     "and <= 1");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  gpu_fraction: 0\n",
                     "t.yaml:19:17: memory.gpu_fraction: gpu_fraction=0 is out of range; valid: > 0 "
                     "and <= 1");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  reserve_gb: -1\n",
                     "t.yaml:19:15: memory.reserve_gb: reserve_gb=-1 is out of range; valid: >= 0 and <= 100000");
    /* Every number has an upper bound (docs/configuration.md). */
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  reserve_gb: 1e300\n",
                     "t.yaml:19:15: memory.reserve_gb: reserve_gb=1e300 is out of range; valid: >= 0 "
                     "and <= 100000");
    /* memory_gb 1e15 wrapped the planner's context count, 1e17 gave 0 pages (issue 7). */
    expect_one_error("model:\n  name: DeepSeek-V3\n  attention: mla\n  layers: 61\n  query_heads: 128\n"
                     "  parameters: 671B\n  weight_dtype: fp8\n"
                     "hardware:\n  gpu: H200\n  memory_gb: 1e15\n  hbm_gbps: 4800\n  link_gbps: 450\n"
                     TP8_DCP8 WORKLOAD,
                     "t.yaml:10:14: hardware.memory_gb: memory_gb=1e15 is out of range; valid: > 0 and "
                     "<= 100000");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: [18446744073709551615]\n",
                     "t.yaml:17:21: workload.context_lengths[0]: context_lengths[0]=18446744073709551615 is "
                     "out of range; valid: 1..4294967296");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: [1k]\n  requests: 4294967295\n",
                     "t.yaml:18:13: workload.requests: requests=4294967295 is out of range; valid: 1..1048576");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  block_size: 48\n",
                     "t.yaml:19:15: memory.block_size: block_size=48 is not a power of two; valid: 1, "
                     "2, 4, 8, 16, 32, 64, 128, 256, 512, 1024");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "memory:\n  block_size: 2048\n",
                     "t.yaml:19:15: memory.block_size: block_size=2048 is out of range; valid: 1, 2, "
                     "4, 8, 16, 32, 64, 128, 256, 512, 1024");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: [1k]\n  q_len: 65\n",
                     "t.yaml:18:10: workload.q_len: q_len=65 is out of range; valid: 1..64");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "runtime:\n  cuda:\n    device: -1\n",
                     "t.yaml:20:13: runtime.cuda.device: device=-1 is out of range; valid: 0..4095");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "runtime:\n  cuda:\n    device: 2147483648\n",
                     "t.yaml:20:13: runtime.cuda.device: device=2147483648 is out of range; valid: 0..4095");
}

static void test_bad_enum(void **state)
{
    (void)state;
    expect_one_error("model:\n  name: x\n  attention: xla\n  layers: 1\n  query_heads: 8\n" H200
                     "parallel: {tp: 1}\n" WORKLOAD,
                     "t.yaml:3:14: model.attention: invalid value \"xla\"; did you mean 'mla'? valid: "
                     "mla, gqa, mha");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  comm_dtype: fp8_e4m3\n" WORKLOAD,
                     "t.yaml:15:15: parallel.comm_dtype: invalid value \"fp8_e4m3\"; valid: fp32, bf16, "
                     "fp16, auto");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 WORKLOAD "runtime:\n  cuda:\n    comm: mpi\n",
                     "t.yaml:20:11: runtime.cuda.comm: invalid value \"mpi\"; valid: auto, nccl, virtual");
}

/* A near-miss enum value gets a suggestion from the key's own choices. */
static void test_enum_did_you_mean(void **state)
{
    (void)state;
    /* A shortened name: "fp8" is the start of fp8_e4m3 (not a typo of fp32, 2 edits away). */
    expect_one_error(MLA_MODEL "  kv_dtype: fp8\n" H200 TP8_DCP8 WORKLOAD,
                     "t.yaml:8:13: model.kv_dtype: invalid value \"fp8\"; did you mean 'fp8_e4m3'? "
                     "valid: fp32, bf16, fp16, fp8_e4m3");
    /* A typo (swapped characters). */
    expect_one_error(MLA_MODEL "  kv_dtype: bf61\n" H200 TP8_DCP8 WORKLOAD,
                     "t.yaml:8:13: model.kv_dtype: invalid value \"bf61\"; did you mean 'bf16'? "
                     "valid: fp32, bf16, fp16, fp8_e4m3");
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  comm: a2\n" WORKLOAD,
                     "t.yaml:15:9: parallel.comm: invalid value \"a2\"; did you mean 'a2a'? valid: ag_rs, a2a, p2p, auto");
    /* Nothing alike: no guess. */
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  comm: ring\n" WORKLOAD,
                     "t.yaml:15:9: parallel.comm: invalid value \"ring\"; valid: ag_rs, a2a, p2p, auto");
}

static void test_missing_required(void **state)
{
    (void)state;
    /* A missing key points at the mapping it belongs in. */
    expect_one_error(MLA_MODEL "hardware:\n  gpu: H200\n  memory_gb: 141\n  link_gbps: 450\n"
                     TP8_DCP8 WORKLOAD,
                     "t.yaml:9:3: hardware.hbm_gbps: missing required key 'hbm_gbps'");
    expect_one_error("model:\n  name: L\n  attention: gqa\n  layers: 2\n  query_heads: 8\n"
                     "  head_dim: 64\n" H200 "parallel: {tp: 1}\n" WORKLOAD,
                     "t.yaml:2:3: model.kv_heads: missing required key 'kv_heads' (required for gqa)");
    expect_one_error("model:\n  name: L\n  attention: mha\n  layers: 2\n  query_heads: 8\n" H200
                     "parallel: {tp: 1}\n" WORKLOAD,
                     "t.yaml:2:3: model.head_dim: missing required key 'head_dim' (required for gqa/mha)");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 "workload:\n  requests: 4\n",
                     "t.yaml:17:3: workload.context_lengths: missing required key 'context_lengths'");
}

static void test_missing_section(void **state)
{
    (void)state;
    expect_one_error(MLA_MODEL H200 WORKLOAD,
                     "t.yaml:1:1: parallel: missing required section 'parallel'");
    /* memory and runtime are optional: MLA_MODEL H200 TP8_DCP8 WORKLOAD loads (other tests). */
}

static void test_unreadable_file(void **state)
{
    (void)state;
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    dcp_deployment *dep = (dcp_deployment *)d; /* must be reset to NULL */
    assert_int_equal(dcp_deployment_load_file("/nonexistent/dep.yaml", d, &dep), DCP_EIO);
    assert_null(dep);
    assert_int_equal(dcp_diag_count(d), 1);
    assert_string_equal(diag_text(d, 0), "deployment file /nonexistent/dep.yaml: cannot open: No such file or directory");
    assert_string_equal(dcp_last_error(), "deployment file /nonexistent/dep.yaml: cannot open: No such file or directory");

    char dir[64];
    temp_dir_make(dir);
    dcp_diag_clear(d);
    assert_int_equal(dcp_deployment_load_file(dir, d, &dep), DCP_EIO);
    char expected[256];
    snprintf(expected, sizeof(expected),
             "deployment file %s: not a regular file (a directory); give a regular file", dir);
    assert_string_equal(diag_text(d, 0), expected);
    temp_dir_remove(dir, NULL, 0);

    /* Without a diag the status still says what happened. */
    assert_int_equal(dcp_deployment_load_file("/nonexistent/dep.yaml", NULL, &dep), DCP_EIO);
    dcp_diag_destroy(&d);
}

static void test_keys_for_other_attention(void **state)
{
    (void)state;
    expect_one_error("model:\n  name: DeepSeek-V3\n  attention: mla\n  layers: 61\n  query_heads: 128\n"
                     "  head_dim: 128\n" H200 TP8_DCP8 WORKLOAD,
                     "t.yaml:6:3: model.head_dim: head_dim applies to gqa/mha; mla uses kv_lora_rank "
                     "and rope_dim");
    expect_one_error("model:\n  name: L\n  attention: gqa\n  layers: 2\n  query_heads: 8\n"
                     "  kv_heads: 2\n  head_dim: 64\n  rope_dim: 64\n" H200 "parallel: {tp: 1}\n" WORKLOAD,
                     "t.yaml:8:3: model.rope_dim: rope_dim applies to mla; gqa uses head_dim and kv_heads");
}

/* One file with many mistakes: every one is reported, in file order, then the rules. */
static void test_several_errors_at_once(void **state)
{
    (void)state;
    struct load_result r = load_yaml("model:\n"                   /* 1 */
                                     "  name: Llama\n"            /* 2 */
                                     "  attention: gqa\n"         /* 3 */
                                     "  layers: 80\n"             /* 4 */
                                     "  query_heads: 64\n"        /* 5 */
                                     "  kv_heads: 8\n"            /* 6 */
                                     "  head_dim: 128\n"          /* 7 */
                                     "  kv_lora_rank: 512\n"      /* 8 */
                                     "hardware:\n"                /* 9 */
                                     "  gpu: H200\n"              /* 10 */
                                     "  memory_gb: 141\n"         /* 11 */
                                     "  hbm_gbps: 4800\n"         /* 12 */
                                     "  link_gbps: \"450\"\n"     /* 13 */
                                     "  nodez: 2\n"               /* 14 */
                                     "parallel:\n"                /* 15 */
                                     "  tp: 16\n"                 /* 16 */
                                     "  dcp: 3\n"                 /* 17 */
                                     "  tp: 4\n"                  /* 18 */
                                     "  comm: allreduce\n"        /* 19 */
                                     "memory:\n"                  /* 20 */
                                     "  gpu_fraction: 1.5\n"      /* 21 */
                                     "workload:\n"                /* 22 */
                                     "  context_lengths: [0, 128k]\n"); /* 23 */
    diag_dump(r.diag);
    assert_int_equal(r.status, DCP_ECONFIG);
    const char *expected[] = {
        "t.yaml:13:14: hardware.link_gbps: expected a number, got \"450\" (quoted, so a string)",
        "t.yaml:14:3: hardware.nodez: unknown key 'nodez'; did you mean 'nodes'?",
        "t.yaml:18:3: parallel.tp: duplicate key 'tp' (first defined at line 16)",
        "t.yaml:19:9: parallel.comm: invalid value \"allreduce\"; valid: ag_rs, a2a, p2p, auto",
        "t.yaml:21:17: memory.gpu_fraction: gpu_fraction=1.5 is out of range; valid: > 0 and <= 1",
        "t.yaml:23:21: workload.context_lengths[0]: context_lengths[0]=0 is out of range; valid: 1..4294967296",
        "t.yaml:8:3: model.kv_lora_rank: kv_lora_rank applies to mla; gqa uses head_dim and kv_heads",
        "t.yaml:17:8: parallel.dcp: dcp=3 does not divide tp/num_kv_heads=2; valid dcp: 1, 2",
        "t.yaml:16:7: parallel.tp: tp=16 needs 16 GPUs but the hardware has 8 (gpus_per_node=8 x nodes=1)",
    };
    assert_int_equal(dcp_diag_count(r.diag), DCP_ARRAY_SIZE(expected));
    assert_int_equal(dcp_diag_error_count(r.diag), DCP_ARRAY_SIZE(expected));
    for (size_t i = 0; i < DCP_ARRAY_SIZE(expected); i++)
        assert_string_equal(diag_text(r.diag, i), expected[i]);
    assert_string_equal(dcp_last_error(), "t.yaml: invalid deployment (9 errors)");
    load_result_free(&r);
}

static void test_aliases_rejected(void **state)
{
    (void)state;
    expect_one_error(MLA_MODEL "hardware: &hw\n  gpu: H200\n  memory_gb: 141\n  hbm_gbps: 4800\n"
                     "  link_gbps: 450\n" TP8_DCP8 WORKLOAD "runtime:\n  host: *hw\n",
                     "t.yaml:19:9: YAML alias *hw is not supported; write the value out");
    /* A list that contains itself would make a naive walker loop forever. */
    struct load_result r = load_yaml("model: &m [*m]\n");
    assert_int_equal(r.status, DCP_ECONFIG);
    assert_string_equal(diag_text(r.diag, 0), "t.yaml:1:12: YAML alias *m is not supported; write the value out");
    load_result_free(&r);
    /* An anchor nobody refers to is harmless. */
    dcp_deployment *dep = expect_load(MLA_MODEL H200 "parallel: &p\n  tp: 8\n" WORKLOAD);
    dcp_deployment_destroy(&dep);
}

/*
 * An alias is blamed where it is written (not at the key that holds it, nor at
 * the anchored node), and every other problem of the file is still reported.
 * Before: one error at the key of the first alias found in node order, nothing else.
 */
static void test_alias_position_and_other_errors(void **state)
{
    (void)state;
    struct load_result r = load_yaml("model:\n  name: x\n  attention: mla\n  layers: &n 61\n"
                                     "  query_heads: *n\n  parameters: 1B\n" H200
                                     "parallel:\n  tp: 8\n  dcp: 3\n"
                                     "workload:\n  context_lengths: [&c 32k, *c]\n  requests: *n\n"
                                     "memory:\n  gpu_fraction: 1.5\n");
    diag_dump(r.diag);
    assert_int_equal(r.status, DCP_ECONFIG);
    const char *expected[] = {
        "t.yaml:5:16: YAML alias *n is not supported; write the value out",
        "t.yaml:16:29: YAML alias *c is not supported; write the value out",
        "t.yaml:17:13: YAML alias *n is not supported; write the value out",
        "t.yaml:19:17: memory.gpu_fraction: gpu_fraction=1.5 is out of range; valid: > 0 and <= 1",
        "t.yaml:14:8: parallel.dcp: dcp=3 does not divide tp=8; valid dcp: 1, 2, 4, 8",
    };
    assert_int_equal(dcp_diag_count(r.diag), DCP_ARRAY_SIZE(expected));
    for (size_t i = 0; i < DCP_ARRAY_SIZE(expected); i++)
        assert_string_equal(diag_text(r.diag, i), expected[i]);
    load_result_free(&r);
    /* An anchor used later under another section: blamed at the alias, not at the anchor's key. */
    r = load_yaml("model: {name: x, attention: mla, layers: 61, query_heads: 128, parameters: &p 1B}\n"
                  "hardware: {gpu: H200, memory_gb: 141, hbm_gbps: 4800, link_gbps: 450}\n"
                  "parallel: {tp: 8}\nworkload: {context_lengths: [32k]}\n"
                  "runtime: {host: {threads: *p}}\n");
    diag_dump(r.diag);
    assert_int_equal(dcp_diag_count(r.diag), 1);
    assert_string_equal(diag_text(r.diag, 0), "t.yaml:5:27: YAML alias *p is not supported; write the value out");
    load_result_free(&r);
}

static void test_context_lengths(void **state)
{
    (void)state;
    dcp_deployment *dep = expect_load(MLA_MODEL H200 TP8_DCP8
                                      "workload:\n  context_lengths: [1, 8k, 8K, 2M, +7]\n");
    const struct dcp_config *c = dcp_deployment_config(dep);
    assert_int_equal(c->workload.num_context_lengths, 5);
    assert_int_equal(c->workload.context_lengths[0], 1);
    assert_int_equal(c->workload.context_lengths[1], 8192);
    assert_int_equal(c->workload.context_lengths[2], 8192);
    assert_int_equal(c->workload.context_lengths[3], 2 * 1048576);
    assert_int_equal(c->workload.context_lengths[4], 7);
    dcp_deployment_destroy(&dep);

    expect_one_error(MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: []\n",
                     "t.yaml:17:20: workload.context_lengths: empty list; give at least one token count");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: 128k\n",
                     "t.yaml:17:20: workload.context_lengths: expected a list of token counts such as "
                     "[32k, 128k], got \"128k\"");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: [1.5k]\n",
                     "t.yaml:17:21: workload.context_lengths[0]: expected a token count such as 4096, "
                     "128k or 1M, got \"1.5k\"");
    expect_one_error(MLA_MODEL H200 TP8_DCP8 "workload:\n  context_lengths: [17592186044416M]\n",
                     "t.yaml:17:21: workload.context_lengths[0]: context_lengths[0]=17592186044416M is out "
                     "of range; valid: 1..4294967296");
    /* The token suffixes belong to token counts only. */
    expect_one_error(MLA_MODEL H200 "parallel:\n  tp: 8\n  interleave: 1k\n" WORKLOAD,
                     "t.yaml:15:15: parallel.interleave: expected an integer, got \"1k\"");

    char text[2048];
    snprintf(text, sizeof(text), "%s%s%sworkload:\n  context_lengths: [", MLA_MODEL, H200, TP8_DCP8);
    for (int i = 0; i < 34; i++)
        strcat(text, i ? ", 1k" : "1k");
    strcat(text, "]\n");
    /* "[" is at column 20; entry i starts at column 21 + 4 i. */
    expect_one_error(text, "t.yaml:17:149: workload.context_lengths[32]: too many entries: 34 given, "
                           "at most 32");
}

static void test_number_forms(void **state)
{
    (void)state;
    static const struct {
        const char *written;
        double value;
    } counts[] = {{"671B", 671e9}, {"1.04T", 1.04e12}, {"500M", 500e6}, {"7e9", 7e9}, {"0", 0}};
    for (size_t i = 0; i < DCP_ARRAY_SIZE(counts); i++) {
        char text[1024];
        snprintf(text, sizeof(text),
                 "model:\n  name: m\n  attention: mla\n  layers: 61\n  query_heads: 128\n"
                 "  parameters: %s\n  weight_dtype: nvfp4\n%s%s%s",
                 counts[i].written, H200, TP8_DCP8, WORKLOAD);
        dcp_deployment *dep = expect_load(text);
        assert_float_equal(dcp_deployment_config(dep)->model.num_params, counts[i].value,
                           counts[i].value * 1e-12);
        dcp_deployment_destroy(&dep);
    }
    /* Numbers accept the YAML decimal forms; booleans yes/no/true/false in any case. */
    dcp_deployment *dep = expect_load(MLA_MODEL "hardware:\n  gpu: H200\n  memory_gb: 1.41e2\n"
                                      "  hbm_gbps: .48e4\n  link_gbps: +450.\n"
                                      "parallel:\n  tp: 8\n  replicate_q: YES\n" WORKLOAD);
    const struct dcp_config *c = dcp_deployment_config(dep);
    assert_float_equal(c->hardware.memory_bytes, 141e9, 1);
    assert_float_equal(c->hardware.hbm_bandwidth, 4800e9, 1);
    assert_float_equal(c->hardware.link_bandwidth, 450e9, 1);
    assert_true(c->parallel.replicate_q);
    dcp_deployment_destroy(&dep);
    expect_one_error(MLA_MODEL "hardware:\n  gpu: H200\n  memory_gb: 0x10\n  hbm_gbps: 4800\n"
                               "  link_gbps: 450\n" TP8_DCP8 WORKLOAD,
                     "t.yaml:10:14: hardware.memory_gb: expected a number, got \"0x10\"");
}

static void test_error_cap(void **state)
{
    (void)state;
    /* 150 unknown keys: the first 100 are listed, then one line says the rest were dropped. */
    char *text = malloc(8192);
    assert_non_null(text);
    strcpy(text, MLA_MODEL H200 TP8_DCP8 WORKLOAD "runtime:\n");
    for (int i = 0; i < 150; i++)
        snprintf(text + strlen(text), 8192 - strlen(text), "  x%d: 1\n", i);
    struct load_result r = load_yaml(text);
    assert_int_equal(r.status, DCP_ECONFIG);
    assert_int_equal(dcp_diag_count(r.diag), 101);
    /* The last entry is a note with the true total, not a 101st error. */
    assert_int_equal(dcp_diag_error_count(r.diag), 100);
    assert_string_equal(diag_text(r.diag, 100),
                        "t.yaml: note: too many errors: 150 in all, only the first 100 are listed");
    assert_string_equal(dcp_last_error(), "t.yaml: invalid deployment (150 errors)");
    load_result_free(&r);
    /* At the boundary: 100 errors are all listed with no note; the 101st is only counted. */
    for (int total = 100; total <= 101; total++) {
        strcpy(text, MLA_MODEL H200 TP8_DCP8 WORKLOAD "runtime:\n");
        for (int i = 0; i < total; i++)
            snprintf(text + strlen(text), 8192 - strlen(text), "  x%d: 1\n", i);
        r = load_yaml(text);
        assert_int_equal(dcp_diag_error_count(r.diag), 100);
        assert_int_equal(dcp_diag_count(r.diag), total == 100 ? 100 : 101);
        if (total == 101)
            assert_string_equal(diag_text(r.diag, 100),
                                "t.yaml: note: too many errors: 101 in all, only the first 100 are listed");
        char summary[64];
        snprintf(summary, sizeof(summary), "t.yaml: invalid deployment (%d errors)", total);
        assert_string_equal(dcp_last_error(), summary);
        load_result_free(&r);
    }
    free(text);
}

/*
 * A document nested 100,000 levels (200 KB) took 24 s (quadratic in libyaml's
 * scanner): nesting past CONFIG_MAX_DEPTH is refused with one error, found after
 * reading only as far as the cap. No timing is asserted; before the fix this
 * loaded (slowly) and reported an unrelated type error instead.
 */
static void test_nesting_depth_cap(void **state)
{
    (void)state;
    enum { LEVELS = 100000 };
    char *text = malloc(2 * LEVELS + 16);
    assert_non_null(text);
    size_t n = (size_t)sprintf(text, "model: ");
    memset(text + n, '[', LEVELS);
    memset(text + n + LEVELS, ']', LEVELS);
    text[n + 2 * LEVELS] = '\0';
    struct load_result r = load_yaml(text);
    diag_dump(r.diag);
    assert_int_equal(r.status, DCP_ECONFIG);
    assert_int_equal(dcp_diag_count(r.diag), 1);
    /* The root mapping is level 1, "model: [" level 2: level 33 is the 32nd '['. */
    assert_string_equal(diag_text(r.diag, 0), "t.yaml:1:39: lists and mappings nest deeper than 32 "
                                               "levels here; a deployment needs 3");
    load_result_free(&r);
    /* Block mappings count too; 32 levels are still fine as far as depth goes. */
    n = 0;
    for (int i = 0; i < 40; i++)
        n += (size_t)sprintf(text + n, "%*sk%d:\n", i, "", i);
    r = load_yaml(text);
    assert_int_equal(r.status, DCP_ECONFIG);
    assert_non_null(strstr(diag_text(r.diag, 0), "nest deeper than 32 levels"));
    load_result_free(&r);
    free(text);
}

static void test_arguments(void **state)
{
    (void)state;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_load_string(NULL, "x", 1, NULL, NULL), DCP_EINVAL);
    assert_int_equal(dcp_deployment_load_string(NULL, NULL, 3, NULL, &dep), DCP_EINVAL);
    assert_int_equal(dcp_deployment_load_file(NULL, NULL, &dep), DCP_EINVAL);
    assert_int_equal(dcp_deployment_load_file("x", NULL, NULL), DCP_EINVAL);
    assert_null(dcp_deployment_config(NULL));
    assert_null(dcp_deployment_source(NULL));

    /* The text need not end in NUL: only len bytes are read (the rest would be a duplicate). */
    const char *text = MLA_MODEL H200 TP8_DCP8 WORKLOAD "model: {}\n";
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    assert_int_equal(dcp_deployment_load_string(NULL, text, strlen(text) - strlen("model: {}\n"), d,
                                                &dep),
                     DCP_OK);
    assert_string_equal(dcp_deployment_source(dep), "<string>");
    dcp_deployment_destroy(&dep);

    /* Without a diag, errors are still counted and the load fails. */
    assert_int_equal(dcp_deployment_load_string(NULL, "model: 1\n", 9, NULL, &dep), DCP_ECONFIG);
    assert_null(dep);
    assert_string_equal(dcp_last_error(), "<string>: invalid deployment (4 errors)");
    dcp_diag_destroy(&d);
}

/* Every ```yaml block of docs/configuration.md is a deployment that loads. */
/* A model of `layers` (line 4 holds it; lines 1-7 in all), then H200, TP8_DCP8 and WORKLOAD. */
#define LAYERS_MODEL(layers)                                                                  \
    "model:\n  name: m\n  attention: mla\n  layers: " layers "\n  query_heads: 128\n"          \
    "  parameters: 671B\n  weight_dtype: fp8\n" H200 TP8_DCP8 WORKLOAD

/* model.layers as a count, a list with repeats, and {count, pattern}; every kind and its errors. */
static void test_layer_kinds(void **state)
{
    (void)state;
    dcp_deployment *dep = expect_load(LAYERS_MODEL("[{sparse_topk: 2048, repeat: 61}]"));
    const struct dcp_model_config *m = &dcp_deployment_config(dep)->model;
    assert_int_equal(m->num_layers, 61);
    assert_int_equal(m->num_layer_kinds, 1);
    assert_int_equal(m->layer_pattern[0].type, DCP_LAYER_SPARSE_TOPK);
    assert_int_equal(m->layer_pattern[0].topk, 2048);
    assert_int_equal(dcp_model_layer_kind(m, 60).type, DCP_LAYER_SPARSE_TOPK);
    assert_int_equal(m->index_heads, 64); /* the defaults */
    assert_int_equal(m->index_head_dim, 128);
    assert_int_equal(m->index_dtype, DCP_DTYPE_FP8_E4M3);
    assert_int_equal(m->window_kv, DCP_WINDOW_KV_REPLICATED);
    assert_int_equal(dcp_deployment_config(dep)->parallel.sparse_index, DCP_SPARSE_INDEX_CALLER);
    dcp_deployment_destroy(&dep);
    dep = expect_load(LAYERS_MODEL("{count: 7, pattern: [{sliding_window: 128, sink: true}, {full: true, sink: true}]}"));
    m = &dcp_deployment_config(dep)->model;
    assert_int_equal(m->num_layers, 7);
    for (uint32_t l = 0; l < 7; l++) {
        const struct dcp_layer_kind k = dcp_model_layer_kind(m, l);
        assert_int_equal(k.type, l % 2 ? DCP_LAYER_FULL : DCP_LAYER_SLIDING_WINDOW);
        assert_int_equal(k.window, l % 2 ? 0 : 128);
        assert_true(k.sink);
    }
    dcp_deployment_destroy(&dep);
    dep = expect_load(LAYERS_MODEL("{count: 48, pattern: [{none: true, repeat: 3}, full]}"));
    m = &dcp_deployment_config(dep)->model;
    assert_int_equal(dcp_model_layer_kind(m, 2).type, DCP_LAYER_NONE);
    assert_int_equal(dcp_model_layer_kind(m, 3).type, DCP_LAYER_FULL);
    assert_int_equal(dcp_model_layer_kind(m, 47).type, DCP_LAYER_FULL);
    assert_int_equal(dcp_model_layer_kind(m, 44).type, DCP_LAYER_NONE);
    assert_string_equal(dcp_layer_type_name(DCP_LAYER_SLIDING_WINDOW), "sliding_window");
    assert_string_equal(dcp_layer_type_name((enum dcp_layer_type)9), "unknown");
    dcp_deployment_destroy(&dep);

    expect_one_error(LAYERS_MODEL("[full, sliding_window]"),
                     "t.yaml:4:18: model.layers[1]: sliding_window needs its size: write {sliding_window: 128}");
    expect_one_error(LAYERS_MODEL("[full, dense]"),
                     "t.yaml:4:18: model.layers[1]: unknown layer kind \"dense\"; valid: full, none, "
                     "{sliding_window: W}, {sparse_topk: K} (each mapping may add sink: true and repeat: n)");
    expect_one_error(LAYERS_MODEL("[{sliding_window: 128, sparse_topk: 64}]"),
                     "t.yaml:4:12: model.layers[0]: one layer kind per entry: give one of full, none, "
                     "sliding_window, sparse_topk");
    expect_one_error(LAYERS_MODEL("[{none: true, sink: true}, full]"),
                     "t.yaml:4:12: model.layers[0]: sink on a none layer: a KV-free layer has no softmax to add a "
                     "sink to");
    expect_one_error(LAYERS_MODEL("[{sliding_window: 0}]"),
                     "t.yaml:4:29: model.layers[0].sliding_window: sliding_window=0 is out of range; valid: "
                     "1..16777216");
    expect_one_error(LAYERS_MODEL("[{sink: yes, windows: 3}]"),
                     "t.yaml:4:24: model.layers[0]: unknown key 'windows'; allowed: full, none, sliding_window, "
                     "sparse_topk, sink, repeat");
    expect_one_error(LAYERS_MODEL("{count: 8}"),
                     "t.yaml:4:11: model.layers: missing 'pattern': the list of layer kinds the count repeats");
    expect_one_error(LAYERS_MODEL("[]"), "t.yaml:4:11: model.layers: empty list; give at least one layer kind");
    expect_one_error(LAYERS_MODEL("[{full: true, repeat: 4000}, {none: true, repeat: 100}]"),
                     "t.yaml:4:11: model.layers: layers (the entries' repeats)=4100 is out of range; valid: 1..4096");
    expect_one_error(LAYERS_MODEL("[none, none]"),
                     "t.yaml:4:11: model.layers: every one of the 2 layers is none (KV-free): the deployment has no "
                     "attention layer for DCP to shard");
    expect_one_error(LAYERS_MODEL("{count: 4, pattern: full}"),
                     "t.yaml:4:31: model.layers: expected a layer count, a list of layer kinds such as "
                     "[{sliding_window: 128}, full], or {count: N, pattern: [...]}, got \"full\"");
}

/* model.layers round-trips through dcp_deployment_to_json(), and a filled struct is checked the same way. */
static void test_layer_kinds_export_and_struct(void **state)
{
    (void)state;
    dcp_deployment *dep =
        expect_load(LAYERS_MODEL("{count: 9, pattern: [{sliding_window: 64, sink: true, repeat: 2}, none, "
                                 "{sparse_topk: 16}, full]}"));
    char *json = NULL;
    assert_int_equal(dcp_deployment_to_json(dep, &json), DCP_OK);
    assert_non_null(strstr(json, "\"layers\": {\"count\": 9, \"pattern\": [{\"sliding_window\": 64, \"sink\": true, "
                                 "\"repeat\": 2}, \"none\", {\"sparse_topk\": 16}, \"full\"]}"));
    dcp_deployment *back = expect_load(json);
    const struct dcp_model_config *a = &dcp_deployment_config(dep)->model, *b = &dcp_deployment_config(back)->model;
    assert_int_equal(a->num_layers, b->num_layers);
    assert_int_equal(a->num_layer_kinds, b->num_layer_kinds);
    assert_memory_equal(a->layer_pattern, b->layer_pattern, sizeof(a->layer_pattern));
    free(json);
    dcp_deployment_destroy(&back);

    struct dcp_config c = *dcp_deployment_config(dep);
    c.model.name = "m";
    c.hardware.gpu = "H200";
    c.model.layer_pattern[1].sink = true; /* on a none layer */
    c.model.layer_pattern[2].window = 5;  /* on a sparse layer */
    dcp_diag *diag = NULL;
    assert_int_equal(dcp_diag_create(&diag), DCP_OK);
    dcp_deployment *bad = NULL;
    assert_int_equal(dcp_deployment_from_config(&c, diag, &bad), DCP_ECONFIG);
    diag_dump(diag);
    assert_int_equal(dcp_diag_count(diag), 2);
    assert_non_null(strstr(diag_text(diag, 0), "model.layers[1]: sink on a none layer"));
    assert_non_null(strstr(diag_text(diag, 1), "model.layers[2]: a window of 5 tokens on a sparse_topk layer"));
    dcp_diag_destroy(&diag);
    dcp_deployment_destroy(&dep);
}

static void test_documentation_examples_load(void **state)
{
    (void)state;
    const char *root = getenv("DCP_SOURCE_ROOT");
    if (!root)
        skip();
    char path[512];
    snprintf(path, sizeof(path), "%s/docs/configuration.md", root);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char doc[64 * 1024];
    const size_t len = fread(doc, 1, sizeof(doc) - 1, f);
    fclose(f);
    doc[len] = '\0';
    int examples = 0;
    for (char *p = strstr(doc, "```yaml\n"); p; p = strstr(p, "```yaml\n")) {
        p += strlen("```yaml\n");
        char *end = strstr(p, "```");
        assert_non_null(end);
        *end = '\0';
        dcp_deployment *dep = expect_load(p);
        dcp_deployment_destroy(&dep);
        examples++;
        p = end + 1;
    }
    assert_true(examples >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_mla_with_defaults),
        cmocka_unit_test(test_valid_gqa_every_key),
        cmocka_unit_test(test_valid_mha_derives_kv_heads_and_scale),
        cmocka_unit_test(test_load_file_resolves_trace_next_to_it),
        cmocka_unit_test(test_malformed_yaml),
        cmocka_unit_test(test_document_shape),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_bad_enum),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_missing_section),
        cmocka_unit_test(test_unreadable_file),
        cmocka_unit_test(test_keys_for_other_attention),
        cmocka_unit_test(test_several_errors_at_once),
        cmocka_unit_test(test_aliases_rejected),
        cmocka_unit_test(test_alias_position_and_other_errors),
        cmocka_unit_test(test_enum_did_you_mean),
        cmocka_unit_test(test_context_lengths),
        cmocka_unit_test(test_number_forms),
        cmocka_unit_test(test_error_cap),
        cmocka_unit_test(test_nesting_depth_cap),
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_layer_kinds),
        cmocka_unit_test(test_layer_kinds_export_and_struct),
        cmocka_unit_test(test_documentation_examples_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
