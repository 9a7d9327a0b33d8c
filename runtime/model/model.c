/*
 * model.c: what a model implies on its own, before any parallel layout: its
 * attention dimensions, KV bytes per token and the bytes of its weight formats
 * (include/dcp/deployment.h, model/model.h).
 */
#include "model/model.h"

#include "dcp_kernels/common.h"

DCP_API uint32_t dcp_dtype_size(enum dcp_dtype dtype)
{
    return dcpk_dtype_size((uint32_t)dtype);
}

DCP_API double dcp_weight_dtype_bytes(enum dcp_weight_dtype dtype)
{
    /* Block-scaled 4-bit formats: 4 bits per value plus the scale spread over its block. */
    switch (dtype) {
    case DCP_WEIGHT_FP32: return 4.0;
    case DCP_WEIGHT_BF16: return 2.0;
    case DCP_WEIGHT_FP16: return 2.0;
    case DCP_WEIGHT_FP8: return 1.0;
    case DCP_WEIGHT_NVFP4: return (4.0 + 8.0 / 16.0) / 8.0;
    case DCP_WEIGHT_MXFP4: return (4.0 + 8.0 / 32.0) / 8.0;
    case DCP_WEIGHT_INT4: return (4.0 + 16.0 / 128.0) / 8.0;
    }
    return 0.0;
}

DCP_API void dcp_model_attention_dims(const struct dcp_model_config *model, uint32_t *qk_dim,
                                      uint32_t *v_dim)
{
    uint32_t qk = 0, v = 0;
    if (model && model->attention == DCP_ATTN_MLA) {
        qk = model->kv_lora_rank + model->rope_dim;
        v = model->kv_lora_rank;
    } else if (model) {
        qk = model->head_dim;
        v = model->head_dim;
    }
    if (qk_dim)
        *qk_dim = qk;
    if (v_dim)
        *v_dim = v;
}

void dcp_model_token_bytes(const struct dcp_model_config *m, uint32_t kv_heads, uint64_t *k, uint64_t *v)
{
    uint32_t qk = 0, vd = 0;
    dcp_model_attention_dims(m, &qk, &vd);
    const uint64_t elem = m ? dcp_dtype_size(m->kv_dtype) : 0;
    /* MLA caches one shared latent+RoPE row whose first v_dim values are the values;
     * GQA/MHA cache a K and a V row per KV head. */
    const bool mla = m && m->attention == DCP_ATTN_MLA;
    *k = (uint64_t)kv_heads * qk * elem;
    *v = mla ? 0 : (uint64_t)kv_heads * vd * elem;
}

DCP_API uint64_t dcp_model_kv_bytes_per_token_layer(const struct dcp_model_config *model)
{
    if (!model)
        return 0;
    uint64_t k, v;
    dcp_model_token_bytes(model, model->attention == DCP_ATTN_MLA ? 1 : model->num_kv_heads, &k, &v);
    return k + v;
}

DCP_API struct dcp_layer_kind dcp_model_layer_kind(const struct dcp_model_config *m, uint32_t layer)
{
    struct dcp_layer_kind k = {.type = DCP_LAYER_FULL, .repeat = 1};
    if (!m || m->num_layer_kinds == 0 || m->num_layer_kinds > DCP_MAX_LAYER_PATTERN)
        return k;
    uint64_t period = 0;
    for (uint32_t i = 0; i < m->num_layer_kinds; i++)
        period += m->layer_pattern[i].repeat ? m->layer_pattern[i].repeat : 1;
    uint64_t at = layer % period;
    for (uint32_t i = 0; i < m->num_layer_kinds; i++) {
        const uint64_t n = m->layer_pattern[i].repeat ? m->layer_pattern[i].repeat : 1;
        if (at < n) {
            k = m->layer_pattern[i];
            k.repeat = 1;
            return k;
        }
        at -= n;
    }
    return k; /* not reached */
}

void dcp_model_count_layers(const struct dcp_model_config *m, uint32_t num_layers, uint32_t count[DCP_LAYER_NONE + 1])
{
    for (int t = 0; t <= DCP_LAYER_NONE; t++)
        count[t] = 0;
    for (uint32_t l = 0; l < num_layers; l++) {
        const struct dcp_layer_kind k = dcp_model_layer_kind(m, l);
        if ((unsigned)k.type <= DCP_LAYER_NONE)
            count[k.type]++;
    }
}
