/*
 * The performance model (include/dcp/perf.h) against terms worked out by hand from
 * its formulas (docs/plan.md, "The performance model"), its refusals, and the sign of
 * DCP's gain on the shipped DeepSeek-V3 8xB200 deployment: DCP loses to TP at one
 * request and wins at 64 concurrent 32k-token requests (no figure is pinned).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/perf.h"
#include "test_util.h"

static void check_near(double a, double b, double rel, const char *what)
{
    if (fabs(a - b) > rel * fabs(b)) {
        print_error("%s: got %.17g, expected %.17g\n", what, a, b);
        fail();
    }
}

/* DeepSeek-V3 on 8 B200s as configs/deepseek-v3-8xb200.yaml gives it. */
static void deepseek_b200(struct dcp_config *cfg)
{
    dcp_config_defaults(cfg);
    cfg->model.name = "DeepSeek-V3";
    cfg->model.attention = DCP_ATTN_MLA;
    cfg->model.num_layers = 61;
    cfg->model.num_q_heads = 128;
    cfg->model.num_params = 671e9;
    cfg->model.weight_dtype = DCP_WEIGHT_FP8;
    cfg->model.experts = 256;
    cfg->model.experts_per_token = 8;
    cfg->model.active_params = 37e9;
    cfg->model.hidden_size = 7168;
    cfg->hardware.gpu = "NVIDIA B200";
    cfg->hardware.memory_bytes = 180e9;
    cfg->hardware.hbm_bandwidth = 8e12;
    cfg->hardware.link_bandwidth = 900e9;
    cfg->hardware.flops_bf16 = 2.25e15;
    cfg->hardware.flops_fp8 = 4.5e15;
    cfg->hardware.flops_fp4 = 9e15;
    cfg->parallel.tp = 8;
    cfg->parallel.dcp = 8;
    cfg->workload.context_lengths[0] = 32768;
    cfg->workload.num_context_lengths = 1;
}

static dcp_deployment *make(const struct dcp_config *cfg)
{
    dcp_diag *diag = NULL;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_diag_create(&diag), DCP_OK);
    const int err = dcp_deployment_from_config(cfg, diag, &dep);
    dcp_diag_print(diag, stderr);
    dcp_diag_destroy(&diag);
    assert_int_equal(err, DCP_OK);
    return dep;
}

static void model_of(const struct dcp_config *cfg, uint32_t dcp, const struct dcp_perf_params *p,
                     struct dcp_perf_model *m)
{
    dcp_deployment *dep = make(cfg);
    const int err = dcp_perf_model_init(dep, dcp, p, m);
    if (err)
        print_error("%s\n", dcp_last_error());
    assert_int_equal(err, DCP_OK);
    dcp_deployment_destroy(&dep);
}

/* The DeepSeek-V3 8xB200 model of layout dcp with the default inputs (cfg and p kept
 * for the test to vary). */
static void deepseek_model(struct dcp_config *cfg, struct dcp_perf_params *p, uint32_t dcp, struct dcp_perf_model *m)
{
    deepseek_b200(cfg);
    dcp_perf_default_params(p);
    model_of(cfg, dcp, p, m);
}

/*
 * Weights of an MoE model: P = dense + E e, A = dense + k e, so one expert (all layers)
 * is e = (671e9 - 37e9) / (256 - 8) = 2.5564516e9 parameters and the part every token
 * reads is 37e9 - 8 e = 16.548387e9; per GPU at 1 byte (fp8) / tp 8. One decode token
 * touches 256 (1 - (1 - 8/256)^1) = 8 experts: weights = (dense + 8 e) / 8 / (8e12 x 0.9).
 */
static void test_moe_weights(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    deepseek_model(&cfg, &p, 1, &m);
    const double e = (671e9 - 37e9) / 248;
    check_near(m.expert_weight_bytes, e / 8, 1e-12, "expert bytes");
    check_near(m.dense_weight_bytes, (37e9 - 8 * e) / 8, 1e-12, "dense bytes");
    assert_string_equal(m.gemm_dtype, "fp8");
    struct dcp_perf_step t;
    dcp_perf_decode_time(&m, 1, 1000, 1, &t);
    check_near(t.experts_touched, 8, 1e-12, "experts touched by one token");
    check_near(t.weights, (37e9 - 8 * e + 8 * e) / 8 / (8e12 * 0.9), 1e-12, "weights of one token");
    /* 64 tokens: 256 (1 - (248/256)^64) experts. */
    dcp_perf_decode_time(&m, 64, 1000, 1, &t);
    check_near(t.experts_touched, 256 * (1 - pow(248.0 / 256, 64)), 1e-12, "experts touched by 64");
    /* GEMMs: 2 x 37e9 x 64 / 8 FLOPs at 4.5e15 x 0.6. */
    check_near(t.gemm, 2 * 37e9 * 64 / 8 / (4.5e15 * 0.6), 1e-12, "gemm");
    check_near(t.linear, fmax(t.weights, t.gemm), 0, "linear");

    /* A dense model reads everything every step. */
    cfg.model.experts = cfg.model.experts_per_token = 0;
    cfg.model.active_params = 0;
    model_of(&cfg, 1, &p, &m);
    check_near(m.dense_weight_bytes, 671e9 / 8, 1e-12, "dense model");
    check_near(m.active_params, 671e9, 0, "all parameters active");
    dcp_perf_decode_time(&m, 64, 1000, 1, &t);
    check_near(t.experts_touched, 0, 0, "no experts");
}

/*
 * KV and attention of a decode step, batch 4 of 10,000 tokens, 61 layers, 1,152 B
 * per token per layer: TP reads all 10,000 tokens on every GPU; DCP 8 the largest
 * shard, 1,250. Time = bytes / (8e12 x 0.9) + 2 us x 61 layers. Attention FLOPs per
 * GPU: 4 x 10,000 x 2 x 16 heads x (576 + 512) x 61 layers at 2.25e15 x 0.6, the same
 * for DCP (128 gathered heads over 1/8 of the tokens).
 */
static void test_kv_and_attention(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model tp, dcp;
    deepseek_b200(&cfg);
    dcp_perf_default_params(&p);
    model_of(&cfg, 1, &p, &tp);
    model_of(&cfg, 8, &p, &dcp);
    struct dcp_perf_step a, b;
    dcp_perf_decode_time(&tp, 4, 10000, 1, &a);
    dcp_perf_decode_time(&dcp, 4, 10000, 1, &b);
    check_near(a.kv, 4 * 10000 * 1152.0 * 61 / (8e12 * 0.9) + 2e-6 * 61, 1e-12, "TP kv");
    check_near(b.kv, 4 * 1250 * 1152.0 * 61 / (8e12 * 0.9) + 2e-6 * 61, 1e-12, "DCP kv");
    const double flops = 4 * 10000 * 2.0 * 16 * 1088 * 61 / (2.25e15 * 0.6);
    check_near(a.attention_flops, flops, 1e-12, "TP attention flops");
    check_near(b.attention_flops, flops, 1e-12, "DCP attention flops");
    /* MTP: q_len query tokens share one read and multiply the FLOPs. */
    struct dcp_perf_step c;
    dcp_perf_decode_time(&tp, 4, 10000, 3, &c);
    check_near(c.kv, a.kv, 1e-12, "drafts share the read");
    check_near(c.attention_flops, 3 * a.attention_flops, 1e-12, "drafts multiply the FLOPs");
    check_near(a.total, a.linear + a.attention + a.tp_comm + a.dcp_comm + a.overhead, 1e-12, "total");
    assert_true(a.graph);
    check_near(a.overhead, 20 * 61 * 1e-6, 1e-12, "graph gaps");
    check_near(a.dcp_comm, 0, 0, "no DCP exchange at dcp 1");
}

/*
 * Collectives: call latency + ring steps x hop + bytes / (bandwidth x 0.8). The TP
 * all-reduce of one token moves 2 (8-1)/8 x 7,168 x 2 B = 25,088 B per rank:
 * 12 us + 14 x 0.47 us + 25,088 / 720e9. DCP's a2a rows (Q gather, outputs + LSEs)
 * take 7 steps each. A calibrated fit replaces the model for its kind, ranks and link.
 */
static void test_collectives(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    deepseek_model(&cfg, &p, 8, &m);
    check_near(m.allreduce_bytes, 25088, 1e-12, "all-reduce bytes");
    const double ar = 12e-6 + 14 * 0.47e-6 + 25088 / 720e9;
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_REDUCE, 8, DCP_PERF_LINK_NVLINK, 25088, true), ar, 1e-12,
               "all-reduce");
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_REDUCE, 8, DCP_PERF_LINK_NVLINK, 25088, false),
               ar + 8e-6, 1e-12, "eager");
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_GATHER, 1, DCP_PERF_LINK_NVLINK, 1e6, true), 0, 0,
               "one rank");
    assert_int_equal(m.num_rows, 2);
    assert_int_equal(m.rows[0].kind, DCP_PLAN_COMM_ALL_GATHER);
    assert_int_equal(m.rows[1].kind, DCP_PLAN_COMM_ALL_TO_ALL);
    struct dcp_perf_step t;
    dcp_perf_decode_time(&m, 1, 1000, 1, &t);
    check_near(t.tp_comm, 2 * 61 * ar, 1e-12, "two all-reduces per layer");
    double rows = 0;
    for (uint32_t i = 0; i < m.num_rows; i++)
        rows += 12e-6 + 7 * 0.47e-6 + m.rows[i].bytes / 720e9;
    check_near(t.dcp_comm, 61 * rows, 1e-12, "DCP rows per layer");

    p.collective_fits[0] = (struct dcp_perf_collective_fit){DCP_PLAN_COMM_ALL_TO_ALL, 8, DCP_PERF_LINK_NVLINK, 5e-6, 1e11};
    p.num_collective_fits = 1;
    model_of(&cfg, 8, &p, &m);
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_TO_ALL, 8, DCP_PERF_LINK_NVLINK, 1e6, true), 5e-6 + 1e-5,
               1e-12, "fit");
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_TO_ALL, 4, DCP_PERF_LINK_NVLINK, 0, true), 12e-6 + 3 * 0.47e-6,
               1e-12, "a fit of another rank count does not apply");
}

/* An instance over two nodes (tp 16 on 8-GPU nodes) runs its all-reduces over the
 * network; dcp 16 groups span nodes too, dcp 8 groups do not. */
static void test_network(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    deepseek_b200(&cfg);
    cfg.hardware.nodes = 2;
    cfg.hardware.internode_bandwidth = 50e9;
    cfg.parallel.tp = 16;
    cfg.parallel.dcp = 16;
    dcp_perf_default_params(&p);
    model_of(&cfg, 16, &p, &m);
    assert_int_equal(m.tp_link, DCP_PERF_LINK_NETWORK);
    assert_int_equal(m.dcp_link, DCP_PERF_LINK_NETWORK);
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_GATHER, 16, DCP_PERF_LINK_NETWORK, 4e6, true),
               12e-6 + 15 * 2.7e-6 + 4e6 / 40e9, 1e-12, "network all-gather");
    model_of(&cfg, 8, &p, &m);
    assert_int_equal(m.dcp_link, DCP_PERF_LINK_NVLINK);
    /* tp 8 on 2 nodes: two instances, each within a node. */
    cfg.parallel.tp = 8;
    cfg.parallel.dcp = 8;
    model_of(&cfg, 8, &p, &m);
    assert_int_equal(m.tp_link, DCP_PERF_LINK_NVLINK);
    assert_int_equal(m.dcp_link, DCP_PERF_LINK_NVLINK);
}

/* GEMMs run at the tensor peak of the weights' format where the GPU has it. */
static void test_gemm_peak(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    dcp_perf_default_params(&p);
    deepseek_b200(&cfg);
    cfg.model.weight_dtype = DCP_WEIGHT_NVFP4;
    model_of(&cfg, 1, &p, &m);
    assert_string_equal(m.gemm_dtype, "fp4");
    check_near(m.gemm_peak, 9e15, 0, "fp4 peak");
    cfg.hardware.flops_fp4 = 0; /* Hopper: no fp4 tensor cores */
    model_of(&cfg, 1, &p, &m);
    assert_string_equal(m.gemm_dtype, "fp8");
    cfg.model.weight_dtype = DCP_WEIGHT_INT4; /* W4A16 */
    model_of(&cfg, 1, &p, &m);
    assert_string_equal(m.gemm_dtype, "bf16");
    check_near(m.gemm_peak, 2.25e15, 0, "bf16 peak");
}

/* A prefill chunk over a long cached context gathers that context's KV once per layer
 * (cheaper than gathering 8,192 queries and merging); a one-token chunk gathers its query. */
static void test_prefill_gather(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    deepseek_model(&cfg, &p, 8, &m);
    struct dcp_sched_entry e = {.q_len = 8192, .start = 65536};
    struct dcp_sched_step s = {.num_entries = 1, .entries = &e, .prefill_tokens = 8192};
    struct dcp_perf_step t;
    dcp_perf_step_time(&m, &s, &t);
    assert_int_equal(t.gathered_chunks, 1);
    assert_false(t.graph);
    check_near(t.overhead, 20 * 61 * 4e-6, 1e-12, "eager gaps");
    /* The gather: 7/8 of 65,536 tokens x 1,152 B per layer. */
    const double gather = 12e-6 + 7 * 0.47e-6 + 8e-6 + 7.0 / 8 * 65536 * 1152 / 720e9;
    check_near(t.dcp_comm, 61 * gather, 1e-12, "context gather");
    e.q_len = 1;
    dcp_perf_step_time(&m, &s, &t);
    assert_int_equal(t.gathered_chunks, 0);
    assert_true(t.dcp_comm > 0);
    /* A loaded entry (P/D) costs nothing. */
    e.loaded = true;
    dcp_perf_step_time(&m, &s, &t);
    check_near(t.total, 0, 0, "loaded");
}

static void expect_refused(const struct dcp_config *cfg, uint32_t dcp, const char *needle)
{
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    dcp_perf_default_params(&p);
    dcp_deployment *dep = make(cfg);
    assert_int_equal(dcp_perf_model_init(dep, dcp, &p, &m), DCP_EINVAL);
    if (!strstr(dcp_last_error(), needle)) {
        print_error("'%s' does not say '%s'\n", dcp_last_error(), needle);
        fail();
    }
    dcp_deployment_destroy(&dep);
}

static void test_refusals(void **state)
{
    (void)state;
    struct dcp_config cfg;
    deepseek_b200(&cfg);
    cfg.hardware.gpu = "cpu (emulated)";
    expect_refused(&cfg, 1, "CPU deployment");
    deepseek_b200(&cfg);
    cfg.hardware.flops_bf16 = 0;
    expect_refused(&cfg, 1, "tflops_bf16");
    deepseek_b200(&cfg);
    expect_refused(&cfg, 3, "dcp=3");
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    dcp_perf_default_params(&p);
    p.kv_efficiency = 1.5;
    dcp_deployment *dep = make(&cfg);
    assert_int_equal(dcp_perf_model_init(dep, 8, &p, &m), DCP_EINVAL);
    dcp_perf_default_params(&p);
    assert_int_equal(dcp_perf_model_init(dep, 8, NULL, &m), DCP_EINVAL);
    dcp_deployment_destroy(&dep);
}

/* Decode throughput per GPU of a closed loop of `clients` requests of `context`
 * tokens: the requests that fit run, the rest wait. */
static double decode_tok_s_gpu(const struct dcp_perf_model *m, uint64_t fits, uint64_t clients, uint64_t context)
{
    const uint64_t batch = clients < fits ? clients : fits;
    struct dcp_perf_step t;
    dcp_perf_decode_time(m, batch, context, 1, &t);
    return (double)batch / t.total / m->tp;
}

/* The shipped DeepSeek-V3 8xB200 deployment: at 32k tokens DCP 8 loses to TP with
 * one request (its collectives cost more than the KV read it saves) and wins with 64
 * (TP holds only what fits its replicated cache, and reads all of it on every GPU). */
static void test_deepseek_b200_sign(void **state)
{
    (void)state;
    const char *root = getenv("DCP_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof(path), "%s/configs/deepseek-v3-8xb200.yaml", root ? root : ".");
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_load_file(path, NULL, &dep), DCP_OK);
    struct dcp_perf_params p;
    struct dcp_perf_model tp, dcp;
    dcp_perf_default_params(&p);
    assert_int_equal(dcp_perf_model_init(dep, 1, &p, &tp), DCP_OK);
    assert_int_equal(dcp_perf_model_init(dep, 8, &p, &dcp), DCP_OK);
    struct dcp_plan plan;
    assert_int_equal(dcp_plan_compute(dep, &plan), DCP_OK);
    const uint64_t ctx = 32768, block = dcp_deployment_config(dep)->memory.block_size;
    const uint64_t tp_fits = plan.baseline.pages / ((ctx + block - 1) / block);
    const uint64_t dcp_fits = plan.dcp.pages / ((ctx + 8 * block - 1) / (8 * block));
    assert_true(tp_fits < 64 && dcp_fits >= 64);
    assert_true(decode_tok_s_gpu(&dcp, dcp_fits, 1, ctx) < decode_tok_s_gpu(&tp, tp_fits, 1, ctx));
    assert_true(decode_tok_s_gpu(&dcp, dcp_fits, 64, ctx) > decode_tok_s_gpu(&tp, tp_fits, 64, ctx));
    dcp_deployment_destroy(&dep);
}

static dcp_deployment *shipped(const char *name)
{
    const char *root = getenv("DCP_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof(path), "%s/configs/%s", root ? root : ".", name);
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_load_file(path, NULL, &dep), DCP_OK);
    return dep;
}

/*
 * Layer kinds (configs/qwen3-next-80b-8xh200.yaml: 36 KV-free linear layers, 12 full):
 * the KV a step reads is the model layer's figure; attention FLOPs count the 12 full
 * layers only; DCP's exchanges run in the 12 merged layers, not all 48. gpt-oss-120b's
 * 18 window layers attend at most 128 tokens however long the context.
 */
static void test_layer_kinds(void **state)
{
    (void)state;
    dcp_deployment *dep = shipped("qwen3-next-80b-8xh200.yaml");
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    dcp_perf_default_params(&p);
    assert_int_equal(dcp_perf_model_init(dep, 4, &p, &m), DCP_OK);
    assert_true(m.reads.affine && m.reads_tp.affine);
    struct dcp_model_kv kv;
    assert_int_equal(dcp_model_kv_init(cfg, 4, &kv), DCP_OK);
    for (uint64_t c = 1; c < 300000; c = c * 3 + 1)
        check_near(dcp_perf_kv_read_bytes(&m, c), dcp_model_kv_read_bytes(cfg, &kv, c), 1e-12, "read bytes");
    check_near(dcp_perf_kv_request_bytes(&m, 100000), dcp_model_kv_request_bytes(cfg, &kv, 100000), 0, "kept bytes");
    struct dcp_perf_step t;
    dcp_perf_decode_time(&m, 2, 100000, 1, &t);
    check_near(t.attention_flops, 2 * 100000.0 * 12 * m.decode_flops / (m.attention_peak * 0.6), 1e-12, "12 layers");
    double rows = 0;
    for (uint32_t i = 0; i < m.num_rows; i++) {
        assert_int_equal(m.rows[i].layers, 12);
        rows += dcp_perf_collective_time(&m, m.rows[i].kind, 4, DCP_PERF_LINK_NVLINK, 2 * m.rows[i].bytes, true);
    }
    check_near(t.dcp_comm, 12 * rows, 1e-12, "exchanges in the merged layers");
    dcp_deployment_destroy(&dep);

    dep = shipped("gpt-oss-120b-8xh200.yaml");
    assert_int_equal(dcp_perf_model_init(dep, 1, &p, &m), DCP_OK);
    struct dcp_perf_step a, b;
    dcp_perf_decode_time(&m, 1, 1000, 1, &a);
    dcp_perf_decode_time(&m, 1, 100000, 1, &b);
    /* 18 full layers grow with the context, the 18 windows stop at 128 tokens. */
    check_near(b.attention_flops / a.attention_flops, (18 * 100000.0 + 18 * 128) / (18 * 1000.0 + 18 * 128), 1e-12,
               "windows");
    dcp_deployment_destroy(&dep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_weights),
        cmocka_unit_test(test_kv_and_attention),
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_network),
        cmocka_unit_test(test_gemm_peak),
        cmocka_unit_test(test_prefill_gather),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_deepseek_b200_sign),
        cmocka_unit_test(test_layer_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
