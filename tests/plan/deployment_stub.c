/*
 * deployment_stub.c: TEMPORARY stand-in for runtime/config/ so the planner can be
 * tested before the YAML loader lands. It builds a dcp_deployment from a filled
 * struct dcp_config without validation and implements only what test_plan needs.
 * tests/plan/meson.build links it only while runtime/config/ has no sources;
 * delete this file (and that switch) once the loader is merged.
 */
#include <stdlib.h>

#include "dcp/deployment.h"

struct dcp_deployment {
    struct dcp_config cfg;
};

void dcp_config_defaults(struct dcp_config *cfg)
{
    *cfg = (struct dcp_config){
        .model = {.kv_lora_rank = 512, .rope_dim = 64, .qk_nope_head_dim = 128,
                  .kv_dtype = DCP_DTYPE_BF16, .kv_scale = 1.0, .weight_dtype = DCP_WEIGHT_BF16},
        .hardware = {.collective_latency = 20e-6, .gpus_per_node = 8, .nodes = 1},
        .parallel = {.dcp = 1, .interleave = 1, .comm = DCP_COMM_A2A, .comm_dtype = DCP_DTYPE_BF16},
        .memory = {.gpu_fraction = 0.9, .block_size = 64, .reserve_bytes = 4e9},
        .workload = {.requests = 64, .decode_steps = 16, .q_len = 1, .seed = 1},
    };
}

int dcp_deployment_from_config(const struct dcp_config *cfg, dcp_diag *diag, dcp_deployment **out)
{
    (void)diag;
    *out = malloc(sizeof(**out));
    if (!*out)
        return DCP_ENOMEM;
    (*out)->cfg = *cfg;
    if (cfg->model.attention == DCP_ATTN_MLA)
        (*out)->cfg.model.num_kv_heads = 1;
    else if (cfg->model.attention == DCP_ATTN_MHA)
        (*out)->cfg.model.num_kv_heads = cfg->model.num_q_heads;
    return DCP_OK;
}

void dcp_deployment_destroy(dcp_deployment **dep)
{
    if (!dep)
        return;
    free(*dep);
    *dep = NULL;
}

const struct dcp_config *dcp_deployment_config(const dcp_deployment *dep) { return &dep->cfg; }

uint32_t dcp_dtype_size(enum dcp_dtype dtype)
{
    static const uint32_t size[] = {4, 2, 2, 1};
    return size[dtype];
}

double dcp_weight_dtype_bytes(enum dcp_weight_dtype dtype)
{
    static const double bits[] = {32, 16, 16, 8, 4.5, 4.25, 4.125};
    return bits[dtype] / 8;
}

void dcp_model_attention_dims(const struct dcp_model_config *model, uint32_t *qk_dim,
                              uint32_t *v_dim)
{
    const int mla = model->attention == DCP_ATTN_MLA;
    *qk_dim = mla ? model->kv_lora_rank + model->rope_dim : model->head_dim;
    *v_dim = mla ? model->kv_lora_rank : model->head_dim;
}

uint64_t dcp_model_kv_bytes_per_token_layer(const struct dcp_model_config *model)
{
    const uint64_t size = dcp_dtype_size(model->kv_dtype);
    if (model->attention == DCP_ATTN_MLA)
        return (uint64_t)(model->kv_lora_rank + model->rope_dim) * size;
    return 2u * (uint64_t)model->num_kv_heads * model->head_dim * size;
}
