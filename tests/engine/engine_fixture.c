/* engine_fixture.c: small deployments and engines for engine tests. */
#include <stdio.h>

#include "engine_fixture.h"
#include "test_util.h"

struct fixture_shape fixture_default_shape(void)
{
    return (struct fixture_shape){
        .kind = DCP_ATTN_MLA,
        .tp = 2,
        .dcp = 2,
        .interleave = 1,
        .block_size = 4,
        .q_heads = 4,
        .kv_heads = 1,
        .kv_lora_rank = 64,
        .rope_dim = 16,
        .layers = 2,
        .dtype = DCP_DTYPE_FP32,
        .comm = DCP_COMM_A2A,
        .backend = DCP_BACKEND_HOST,
    };
}

dcp_deployment *fixture_deployment(const struct fixture_shape *s)
{
    struct dcp_config cfg;
    dcp_config_defaults(&cfg);
    cfg.model.name = "fixture";
    cfg.model.attention = s->kind;
    cfg.model.num_layers = s->layers;
    cfg.model.num_q_heads = s->q_heads;
    if (s->kind == DCP_ATTN_MLA) {
        cfg.model.num_kv_heads = 1;
        cfg.model.kv_lora_rank = s->kv_lora_rank;
        cfg.model.rope_dim = s->rope_dim;
    } else {
        cfg.model.num_kv_heads = s->kv_heads;
        cfg.model.head_dim = s->head_dim;
    }
    cfg.model.kv_dtype = s->dtype;
    cfg.model.kv_scale = s->dtype == DCP_DTYPE_FP8_E4M3 ? 0.05 : 1.0;
    cfg.hardware.gpu = "test";
    cfg.hardware.memory_bytes = 1e9;
    cfg.hardware.hbm_bandwidth = 1e11;
    cfg.hardware.link_bandwidth = 1e10;
    cfg.hardware.gpus_per_node = s->tp;
    cfg.parallel.tp = s->tp;
    cfg.parallel.dcp = s->dcp;
    cfg.parallel.interleave = s->interleave;
    cfg.parallel.comm = s->comm;
    cfg.memory.block_size = s->block_size;
    cfg.memory.reserve_bytes = 0;
    cfg.workload.context_lengths[0] = 1024;
    cfg.workload.num_context_lengths = 1;
    cfg.runtime.backend = s->backend;
    cfg.runtime.host.threads = 1;
    dcp_diag *diag = NULL;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_diag_create(&diag), DCP_OK);
    int err = dcp_deployment_from_config(&cfg, diag, &dep);
    if (err)
        dcp_diag_print(diag, stderr);
    dcp_diag_destroy(&diag);
    assert_int_equal(err, DCP_OK);
    return dep;
}

dcp_engine *fixture_engine(const dcp_deployment *dep, uint32_t dcp, uint64_t num_blocks,
                           uint32_t max_batch, uint32_t max_tokens, uint64_t max_context)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    uint32_t qk, v;
    dcp_model_attention_dims(&cfg->model, &qk, &v);
    const uint32_t kv_per_rank = cfg->model.attention == DCP_ATTN_MLA ? 1
                                 : cfg->parallel.tp >= cfg->model.num_kv_heads
                                     ? 1
                                     : cfg->model.num_kv_heads / cfg->parallel.tp;
    const double page = (double)cfg->memory.block_size * kv_per_rank * dcp_dtype_size(cfg->model.kv_dtype) *
                        (qk + (cfg->model.attention == DCP_ATTN_MLA ? 0 : v)) * cfg->model.num_layers;
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.dcp = dcp;
    p.kv_budget_bytes = page * (double)num_blocks;
    p.max_batch = max_batch;
    p.max_query_tokens = max_tokens;
    p.max_step_tokens = max_tokens;
    p.max_seqs = 64;
    p.max_context = max_context;
    dcp_engine *e = NULL;
    int err = dcp_engine_create(&p, &e);
    if (err)
        fprintf(stderr, "engine: %s: %s\n", dcp_strerror(err), dcp_last_error());
    assert_int_equal(err, DCP_OK);
    return e;
}
