/* engine_fixture.c: small deployments and engines for engine tests. */
#include <stdio.h>
#include <string.h>

#include "engine_fixture.h"
#include "test_util.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define FIXTURE_UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef FIXTURE_UNDER_VALGRIND
#define FIXTURE_UNDER_VALGRIND() false
#endif

/* Parses DCP_TEST_BACKEND; *ok is false for an unknown name. */
static enum dcp_backend_kind backend_from_env(bool *ok)
{
    const char *name = getenv("DCP_TEST_BACKEND");
    *ok = true;
    if (!name || !*name || !strcmp(name, "host"))
        return DCP_BACKEND_HOST;
    if (!strcmp(name, "cuda"))
        return DCP_BACKEND_CUDA;
    if (!strcmp(name, "auto"))
        return DCP_BACKEND_AUTO;
    *ok = false;
    return DCP_BACKEND_HOST;
}

enum dcp_backend_kind fixture_backend(void)
{
    bool ok;
    const enum dcp_backend_kind kind = backend_from_env(&ok);
    if (!ok)
        fail_msg("DCP_TEST_BACKEND=%s: expected host, cuda or auto", getenv("DCP_TEST_BACKEND"));
    return kind;
}

void fixture_adapt_to_backend(struct fixture_shape *s)
{
    if (fixture_backend() != DCP_BACKEND_CUDA)
        return;
    /* The GPU kernels cover MLA 512+64 and head_dim 64/128/256 only. */
    if (s->kind == DCP_ATTN_MLA) {
        s->kv_lora_rank = 512;
        s->rope_dim = 64;
    } else {
        s->head_dim = s->head_dim <= 64 ? 64 : s->head_dim <= 128 ? 128 : 256;
    }
}

int fixture_backend_check(void)
{
    bool ok;
    struct fixture_shape s = fixture_default_shape();
    s.backend = backend_from_env(&ok);
    fixture_adapt_to_backend(&s);
    if (!ok) {
        fprintf(stderr, "DCP_TEST_BACKEND=%s: expected host, cuda or auto\n", getenv("DCP_TEST_BACKEND"));
        return 1;
    }
    return fixture_probe(&s) ? 77 : 0;
}

int fixture_probe(const struct fixture_shape *s)
{
    struct dcp_config cfg;
    fixture_config(s, &cfg);
    dcp_deployment *dep = NULL;
    int err = dcp_deployment_from_config(&cfg, NULL, &dep);
    dcp_engine *e = NULL;
    if (!err) {
        struct dcp_engine_params p;
        dcp_engine_default_params(&p);
        p.deployment = dep;
        p.kv_budget_bytes = 1 << 20;
        p.max_batch = 1;
        p.max_context = 64;
        err = dcp_engine_create(&p, &e);
    }
    if (err)
        fprintf(stderr, "backend %s unavailable: %s: %s\n", dcp_backend_kind_name(s->backend),
                dcp_strerror(err), dcp_last_error());
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
    return err;
}

bool fixture_quick(void)
{
    const char *quick = getenv("DCP_TEST_QUICK");
    return (quick && *quick && strcmp(quick, "0") != 0) || FIXTURE_UNDER_VALGRIND();
}

struct fixture_shape fixture_default_shape(void)
{
    bool ok;
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
        .backend = backend_from_env(&ok),
        .host_threads = 1,
    };
}

void fixture_config(const struct fixture_shape *s, struct dcp_config *cfg)
{
    dcp_config_defaults(cfg);
    cfg->model.name = "fixture";
    cfg->model.attention = s->kind;
    cfg->model.num_layers = s->layers;
    cfg->model.num_q_heads = s->q_heads;
    if (s->kind == DCP_ATTN_MLA) {
        cfg->model.num_kv_heads = 1;
        cfg->model.kv_lora_rank = s->kv_lora_rank;
        cfg->model.rope_dim = s->rope_dim;
        if (s->v_head_dim)
            cfg->model.v_head_dim = s->v_head_dim;
    } else {
        cfg->model.num_kv_heads = s->kv_heads;
        cfg->model.head_dim = s->head_dim;
    }
    cfg->model.kv_dtype = s->dtype;
    cfg->model.kv_scale = s->dtype == DCP_DTYPE_FP8_E4M3 ? 0.05 : 1.0;
    cfg->hardware.gpu = "test";
    cfg->hardware.memory_bytes = 1e9;
    cfg->hardware.hbm_bandwidth = 1e11;
    cfg->hardware.link_bandwidth = 1e10;
    cfg->hardware.gpus_per_node = s->tp;
    cfg->parallel.tp = s->tp;
    cfg->parallel.dcp = s->dcp;
    cfg->parallel.interleave = s->interleave;
    cfg->parallel.comm = s->comm;
    cfg->parallel.replicate_q = s->replicate_q;
    cfg->parallel.merge_after_uv = s->merge_after_uv;
    cfg->parallel.comm_dtype = (enum dcp_wire_dtype)s->comm_dtype; /* fp32, bf16, fp16: the same values */
    cfg->runtime.cuda.comm = s->cuda_comm;
    cfg->memory.block_size = s->block_size;
    cfg->memory.reserve_bytes = 0;
    cfg->workload.context_lengths[0] = 1024;
    cfg->workload.num_context_lengths = 1;
    cfg->runtime.backend = s->backend;
    cfg->runtime.host.threads = s->host_threads;
}

dcp_deployment *fixture_deployment(const struct fixture_shape *s)
{
    struct dcp_config cfg;
    fixture_config(s, &cfg);
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

/* Bytes of one logical block's page on one rank, all layers (what the budget buys). */
static double page_bytes(const struct dcp_config *cfg)
{
    struct dcp_rank_geometry g;
    if (dcp_rank_geometry_init(&cfg->model, cfg->parallel.tp, cfg->parallel.dcp, &g))
        return 0;
    return (double)cfg->memory.block_size * (double)g.token_layer_bytes * cfg->model.num_layers;
}

dcp_engine *fixture_engine_with(const dcp_deployment *dep, const struct fixture_limits *lim)
{
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.dcp = lim->dcp;
    p.kv_budget_bytes = page_bytes(dcp_deployment_config(dep)) * (double)lim->num_blocks;
    p.max_batch = lim->max_batch;
    p.max_query_tokens = lim->max_query_tokens;
    p.max_step_tokens = lim->max_step_tokens ? lim->max_step_tokens : lim->max_query_tokens;
    p.max_seqs = lim->max_seqs ? lim->max_seqs : 64;
    p.max_context = lim->max_context;
    p.w_uv = lim->w_uv;
    p.profile = lim->profile;
    p.act_dtype = lim->act_dtype;
    p.replicate_q = dcp_deployment_config(dep)->parallel.replicate_q; /* the harness passes either layout */
    dcp_engine *e = NULL;
    int err = dcp_engine_create(&p, &e);
    if (err)
        fprintf(stderr, "engine: %s: %s\n", dcp_strerror(err), dcp_last_error());
    assert_int_equal(err, DCP_OK);
    return e;
}

dcp_engine *fixture_engine(const dcp_deployment *dep, uint32_t dcp, uint64_t num_blocks,
                           uint32_t max_batch, uint32_t max_tokens, uint64_t max_context)
{
    const struct fixture_limits lim = {
        .dcp = dcp,
        .num_blocks = num_blocks,
        .max_batch = max_batch,
        .max_query_tokens = max_tokens,
        .max_context = max_context,
    };
    return fixture_engine_with(dep, &lim);
}
