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
#include "dcp/placement.h"
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

/* A model points into its deployment's settings (struct dcp_perf_model.cfg): the
 * deployments model_of() makes live until the test's teardown. */
#define MAX_KEPT 32
static dcp_deployment *kept[MAX_KEPT];
static int num_kept;

static int release_kept(void **state)
{
    (void)state;
    while (num_kept > 0)
        dcp_deployment_destroy(&kept[--num_kept]);
    return 0;
}

static void model_of(const struct dcp_config *cfg, uint32_t dcp, const struct dcp_perf_params *p,
                     struct dcp_perf_model *m)
{
    assert_true(num_kept < MAX_KEPT);
    dcp_deployment *dep = make(cfg);
    kept[num_kept++] = dep;
    const int err = dcp_perf_model_init(dep, dcp, p, m);
    if (err)
        print_error("%s\n", dcp_last_error());
    assert_int_equal(err, DCP_OK);
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
 * all-reduce of one token moves 2 (8-1)/8 x 7,168 x 2 B = 25,088 B per rank in a ring:
 * 12 us + 14 x 0.47 us + 25,088 / 720e9; one-shot, each rank reads the 7 peers'
 * 14,336 B (= 25,088 x 8 / 2): 6 us + 7 x 14,336 / 720e9, the cheaper (graph or eager).
 * A 100 MB all-reduce (a prefill chunk) runs as the ring. DCP's a2a rows (Q gather,
 * outputs + LSEs) take 7 steps each. A calibrated fit replaces the model for its kind,
 * ranks and link.
 */
static void test_collectives(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    deepseek_model(&cfg, &p, 8, &m);
    check_near(m.allreduce_bytes, 25088, 1e-12, "all-reduce bytes");
    const double ring = 12e-6 + 14 * 0.47e-6 + 25088 / 720e9, ar = 6e-6 + 7 * 14336 / 720e9;
    assert_true(ar < ring);
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_REDUCE, 8, DCP_PERF_LINK_NVLINK, 25088, true), ar, 1e-12,
               "one-shot all-reduce");
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_REDUCE, 8, DCP_PERF_LINK_NVLINK, 25088, false), ar,
               1e-12, "one-shot all-reduce, eager");
    const double big = 100e6;
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_REDUCE, 8, DCP_PERF_LINK_NVLINK, big, false),
               12e-6 + 14 * 0.47e-6 + big / 720e9 + 8e-6, 1e-12, "a large all-reduce runs as the ring");
    struct dcp_perf_params ring_only = p;
    ring_only.oneshot_latency = 0;
    struct dcp_perf_model r;
    model_of(&cfg, 8, &ring_only, &r);
    check_near(dcp_perf_collective_time(&r, DCP_PLAN_COMM_ALL_REDUCE, 8, DCP_PERF_LINK_NVLINK, 25088, false),
               ring + 8e-6, 1e-12, "no one-shot: the ring, eager");
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

/*
 * Each collective kind by its formula: latency 12 us + steps x hop + bytes / (link x 0.8):
 * all-gather, reduce-scatter and all-to-all n - 1 ring steps, all-reduce 2 (n - 1); peer
 * writes 3.7 us (peer_latency_us) + bytes / (link x 0.8); over NVLink a hop is 0.47 us at 900 GB/s, over the network
 * internode_latency_us (2.7 us) at internode_gbps.
 */
static void test_collective_kinds(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    deepseek_b200(&cfg);
    cfg.hardware.internode_bandwidth = 50e9;
    dcp_perf_default_params(&p);
    model_of(&cfg, 8, &p, &m);
    const double B = 3e6;
    static const struct {
        enum dcp_plan_comm_kind kind;
        uint32_t ranks;
        double steps;
    } cases[] = {
        {DCP_PLAN_COMM_ALL_GATHER, 8, 7},    {DCP_PLAN_COMM_REDUCE_SCATTER, 8, 7}, {DCP_PLAN_COMM_ALL_TO_ALL, 8, 7},
        {DCP_PLAN_COMM_ALL_REDUCE, 8, 14},   {DCP_PLAN_COMM_PEER_WRITE, 8, 1},     {DCP_PLAN_COMM_ALL_GATHER, 4, 3},
        {DCP_PLAN_COMM_ALL_REDUCE, 2, 2},    {DCP_PLAN_COMM_ALL_TO_ALL, 2, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* A round of peer writes (comm p2p): hardware.peer_latency_us (3.7 us) and no ring. */
        const bool peer = cases[i].kind == DCP_PLAN_COMM_PEER_WRITE;
        double nv = (peer ? 3.7e-6 : 12e-6 + cases[i].steps * 0.47e-6) + B / (900e9 * 0.8);
        if (cases[i].kind == DCP_PLAN_COMM_ALL_REDUCE) /* or one-shot over NVLink: n/2 x B from the peers */
            nv = fmin(nv, 6e-6 + cases[i].ranks / 2.0 * B / (900e9 * 0.8));
        const double net = (peer ? 3.7e-6 : 12e-6 + cases[i].steps * 2.7e-6) + B / (50e9 * 0.8);
        check_near(dcp_perf_collective_time(&m, cases[i].kind, cases[i].ranks, DCP_PERF_LINK_NVLINK, B, true), nv,
                   1e-12, "nvlink collective");
        check_near(dcp_perf_collective_time(&m, cases[i].kind, cases[i].ranks, DCP_PERF_LINK_NETWORK, B, true), net,
                   1e-12, "network collective");
        check_near(dcp_perf_collective_time(&m, cases[i].kind, cases[i].ranks, DCP_PERF_LINK_NETWORK, B, false),
                   net + 8e-6, 1e-12, "network collective, eager");
    }
    /* A 2-rank all-reduce of 3 MB: one-shot (6 + 4.17 us) beats the ring (12 + 0.94 + 4.17 us). */
    check_near(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_REDUCE, 2, DCP_PERF_LINK_NVLINK, B, true),
               6e-6 + B / (900e9 * 0.8), 1e-12, "2-rank one-shot");
    /* The network is slower per byte and per hop than NVLink: a group spanning nodes costs more. */
    assert_true(dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_GATHER, 8, DCP_PERF_LINK_NETWORK, 1e3, true) >
                dcp_perf_collective_time(&m, DCP_PLAN_COMM_ALL_GATHER, 8, DCP_PERF_LINK_NVLINK, 1e3, true));
    assert_string_equal(dcp_perf_link_name(DCP_PERF_LINK_NETWORK), "network");
    assert_string_equal(dcp_perf_link_name(DCP_PERF_LINK_NVLINK), "nvlink");
}

/*
 * Decode-only steps replay as CUDA graphs: kernels_per_layer x layers x 1 us, collectives
 * without the eager cost; with cuda_graphs off, 4 us per kernel and + 8 us per collective.
 */
static void test_graph_and_eager(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model g, e;
    deepseek_model(&cfg, &p, 8, &g);
    p.cuda_graphs = false;
    model_of(&cfg, 8, &p, &e);
    struct dcp_perf_step a, b;
    dcp_perf_decode_time(&g, 16, 20000, 1, &a);
    dcp_perf_decode_time(&e, 16, 20000, 1, &b);
    assert_true(a.graph);
    assert_false(b.graph);
    check_near(a.overhead, 20 * 61 * 1e-6, 1e-12, "graph gaps");
    check_near(b.overhead, 20 * 61 * 4e-6, 1e-12, "eager gaps");
    /* 16 tokens' all-reduce (229 KB) runs one-shot, which a graph does not change. */
    check_near(a.tp_comm, 2 * 61 * (6e-6 + 7 * 16 * 14336.0 / 720e9), 1e-12, "one-shot all-reduces");
    check_near(b.tp_comm, a.tp_comm, 1e-12, "one-shot all-reduces, eager");
    check_near(b.dcp_comm - a.dcp_comm, (double)g.num_rows * 61 * 8e-6, 1e-9, "eager DCP rows");
    check_near(b.linear, a.linear, 0, "same linear");
    check_near(b.attention, a.attention, 0, "same attention");
}

/*
 * A step with one decode row (context 10,000) and one prefill chunk (4,096 tokens from
 * position 0), TP: the decode kernel and the prefill kernel run one after the other, each
 * bound by its bytes or its FLOPs.
 *   decode:  bytes 10,000 x 1,152 x 61 at 8e12 x 0.9, + 2 us x 61 layers;
 *            FLOPs 10,000 x 2 x 16 x (576 + 512) x 61 at 2.25e15 x 0.6
 *   prefill: bytes 4,096 x 1,152 x 61 (its own KV), + 2 us x 61;
 *            FLOPs 4,096 x (0 + 4,097 / 2) x 2 x 16 x (128 + 64 + 128) x 61 at 2.25e15 x 0.6
 *   GEMMs:   2 x 37e9 x 4,097 / 8 at 4.5e15 x 0.6 (all experts' weights read: below it)
 *   comm:    2 x 61 all-reduces of 4,097 x 25,088 B, eager rings (one-shot would read 4x
 *            more); overhead 20 x 61 x 4 us
 */
static void test_mixed_step(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    deepseek_model(&cfg, &p, 1, &m);
    const struct dcp_sched_entry e[2] = {{.q_len = 1, .start = 9999, .decode = true}, {.q_len = 4096, .start = 0}};
    const struct dcp_sched_step s = {.num_entries = 2, .entries = e, .num_decode = 1, .decode_tokens = 1,
                                     .prefill_tokens = 4096};
    struct dcp_perf_step t;
    dcp_perf_step_time(&m, &s, &t);
    const double hbm = 8e12 * 0.9, attn = 2.25e15 * 0.6;
    const double kv_d = 10000 * 1152.0 * 61 / hbm + 2e-6 * 61, fl_d = 10000 * 2.0 * 16 * 1088 * 61 / attn;
    const double kv_p = 4096 * 1152.0 * 61 / hbm + 2e-6 * 61;
    const double fl_p = 4096 * (4097 / 2.0) * 2.0 * 16 * 320 * 61 / attn;
    check_near(t.phase_attention[0], fmax(kv_d, fl_d), 1e-12, "decode kernel");
    check_near(t.phase_attention[1], fmax(kv_p, fl_p), 1e-12, "prefill kernel");
    check_near(t.attention, fmax(kv_d, fl_d) + fmax(kv_p, fl_p), 1e-12, "kernels one after the other");
    check_near(t.kv, kv_d + kv_p, 1e-12, "kv both phases");
    check_near(t.attention_flops, fl_d + fl_p, 1e-12, "flops both phases");
    check_near(t.gemm, 2 * 37e9 * 4097 / 8 / (4.5e15 * 0.6), 1e-12, "gemm of all tokens");
    check_near(t.linear, fmax(t.weights, t.gemm), 0, "linear");
    const double ar = 12e-6 + 14 * 0.47e-6 + 4097 * 25088.0 / 720e9 + 8e-6;
    check_near(t.tp_comm, 2 * 61 * ar, 1e-12, "eager all-reduces of every token");
    check_near(t.overhead, 20 * 61 * 4e-6, 1e-12, "eager gaps");
    assert_false(t.graph);
    check_near(t.total, t.linear + t.attention + t.tp_comm + t.dcp_comm + t.overhead, 1e-12, "total");
}

/*
 * DCP 8, one prefill chunk of q tokens after `start` cached ones: the model takes the
 * cheaper of (a) gathering the context: 61 eager all-gathers of 7/8 x start x 1,152 B, then
 * reading the whole context's KV (TP's bytes, start + q tokens) and (b) gathering the
 * chunk's queries and merging: its own shard's read plus the plan's rows for q tokens.
 */
static double row_seconds(const struct dcp_perf_model *m, double tokens)
{
    double s = 0;
    for (uint32_t i = 0; i < m->num_rows; i++)
        s += m->rows[i].layers * (12e-6 + 7 * 0.47e-6 + 8e-6 + tokens * m->rows[i].bytes / 720e9);
    return s;
}

static void test_prefill_cheaper(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model m;
    deepseek_model(&cfg, &p, 8, &m);
    const double hbm = 8e12 * 0.9;
    static const struct {
        uint64_t start;
        uint32_t q;
    } cases[] = {{65536, 8192}, {65536, 1}, {1024, 64}, {131072, 512}, {4096, 4096}, {100000, 16}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const uint64_t start = cases[i].start, end = start + cases[i].q;
        const double gather = 61 * (12e-6 + 7 * 0.47e-6 + 8e-6 + 7.0 / 8 * (double)start * 1152 / 720e9) +
                              (double)end * 1152 * 61 / hbm;
        const double own = (double)dcp_kv_local_length(end, 0, 8, 1) * 1152 * 61 / hbm;
        const double qgather = own + row_seconds(&m, cases[i].q);
        struct dcp_sched_entry e = {.q_len = cases[i].q, .start = start};
        const struct dcp_sched_step s = {.num_entries = 1, .entries = &e, .prefill_tokens = cases[i].q};
        struct dcp_perf_step t;
        dcp_perf_step_time(&m, &s, &t);
        /* The time of the chosen way: its exchanges plus its bytes (kv holds the attention call too). */
        const double chosen = t.dcp_comm + t.kv - 2e-6 * 61;
        check_near(chosen, fmin(gather, qgather), 1e-9, "the cheaper way");
        assert_int_equal(t.gathered_chunks, gather <= qgather ? 1 : 0);
    }
    /* A chunk with nothing cached before it has nothing to gather: it reads its own shard. */
    struct dcp_sched_entry e = {.q_len = 8192, .start = 0};
    const struct dcp_sched_step s = {.num_entries = 1, .entries = &e, .prefill_tokens = 8192};
    struct dcp_perf_step t;
    dcp_perf_step_time(&m, &s, &t);
    assert_int_equal(t.gathered_chunks, 0);
    check_near(t.dcp_comm, 0, 0, "no exchange for a first chunk");
}

/*
 * The decode rate of a closed loop: min(clients, fits) sequences per step of
 * dcp_perf_decode_time(), per GPU; wins_from is the smallest concurrency from which b
 * beats a at every larger one up to the limit.
 */
static void test_decode_rate(void **state)
{
    (void)state;
    struct dcp_config cfg;
    struct dcp_perf_params p;
    struct dcp_perf_model tp, dcp;
    deepseek_model(&cfg, &p, 1, &tp);
    model_of(&cfg, 8, &p, &dcp);
    struct dcp_perf_step t;
    dcp_perf_decode_time(&tp, 10, 32768, 1, &t);
    check_near(dcp_perf_decode_rate(&tp, 10, 64, 32768, 1), 10 / t.total / 8, 1e-12, "capped by what fits");
    dcp_perf_decode_time(&tp, 3, 32768, 1, &t);
    check_near(dcp_perf_decode_rate(&tp, 10, 3, 32768, 1), 3 / t.total / 8, 1e-12, "capped by the clients");
    check_near(dcp_perf_decode_rate(&tp, 0, 3, 32768, 1), 0, 0, "nothing fits");
    const uint32_t from = dcp_perf_wins_from(&tp, 31, &dcp, 250, 32768, 1, 64);
    assert_true(from > 1 && from <= 64);
    for (uint32_t c = 1; c <= 64; c++) {
        const bool ahead = dcp_perf_decode_rate(&dcp, 250, c, 32768, 1) > dcp_perf_decode_rate(&tp, 31, c, 32768, 1);
        if (c >= from)
            assert_true(ahead);
        if (c == from - 1)
            assert_false(ahead);
    }
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
 * The decode steady state on the shipped DeepSeek-V3 8xB200 deployment, 64 clients:
 * TP holds what its replicated cache fits and reads all of it on every GPU, DCP 8 holds 8x
 * and reads 1/8 per GPU, so DCP's gain is larger at 128k than at 32k (the longer the
 * context, the fewer requests TP fits); and the concurrency from which DCP wins is no
 * larger at 128k than at 32k.
 */
static void test_deepseek_b200_context(void **state)
{
    (void)state;
    dcp_deployment *dep = shipped("deepseek-v3-8xb200.yaml");
    struct dcp_perf_params p;
    struct dcp_perf_model tp, dcp;
    dcp_perf_default_params(&p);
    assert_int_equal(dcp_perf_model_init(dep, 1, &p, &tp), DCP_OK);
    assert_int_equal(dcp_perf_model_init(dep, 8, &p, &dcp), DCP_OK);
    struct dcp_plan plan;
    assert_int_equal(dcp_plan_compute(dep, &plan), DCP_OK);
    const uint64_t block = dcp_deployment_config(dep)->memory.block_size;
    double gain[2];
    uint32_t from[2];
    const uint64_t ctx[2] = {32768 + 1024, 131072 + 1024};
    for (int i = 0; i < 2; i++) {
        const uint64_t tp_fits = plan.baseline.pages / ((ctx[i] + block - 1) / block);
        const uint64_t dcp_fits = plan.dcp.pages / ((ctx[i] + 8 * block - 1) / (8 * block));
        gain[i] = dcp_perf_decode_rate(&dcp, dcp_fits, 64, ctx[i], 1) / dcp_perf_decode_rate(&tp, tp_fits, 64, ctx[i], 1);
        from[i] = dcp_perf_wins_from(&tp, tp_fits, &dcp, dcp_fits, ctx[i], 1, 64);
        assert_true(gain[i] > 1);
        assert_true(from[i] > 1);
    }
    assert_true(gain[1] >= gain[0]);
    assert_true(from[1] <= from[0]);
    dcp_deployment_destroy(&dep);
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
        cmocka_unit_test_teardown(test_moe_weights, release_kept),
        cmocka_unit_test_teardown(test_kv_and_attention, release_kept),
        cmocka_unit_test_teardown(test_collectives, release_kept),
        cmocka_unit_test_teardown(test_collective_kinds, release_kept),
        cmocka_unit_test_teardown(test_network, release_kept),
        cmocka_unit_test_teardown(test_gemm_peak, release_kept),
        cmocka_unit_test_teardown(test_graph_and_eager, release_kept),
        cmocka_unit_test_teardown(test_mixed_step, release_kept),
        cmocka_unit_test_teardown(test_prefill_gather, release_kept),
        cmocka_unit_test_teardown(test_prefill_cheaper, release_kept),
        cmocka_unit_test_teardown(test_decode_rate, release_kept),
        cmocka_unit_test_teardown(test_refusals, release_kept),
        cmocka_unit_test_teardown(test_deepseek_b200_sign, release_kept),
        cmocka_unit_test_teardown(test_deepseek_b200_context, release_kept),
        cmocka_unit_test_teardown(test_layer_kinds, release_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
