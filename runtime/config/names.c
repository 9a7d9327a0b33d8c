/* names.c: canonical names and sizes of the deployment enums, and the KV
 * geometry a model implies. The name tables double as the YAML choices. */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"
#include "util/util.h"

const char *const config_attention_names[3] = {"mla", "gqa", "mha"};
/* The dtype rows of DCPK_DTYPES (dcp_kernels/common.h): the public enum has the same values. */
#define DTYPE_NAME_(NAME, name, bytes, scaled, wire) #name,
const char *const config_dtype_names[DCPK_DTYPE_COUNT] = {DCPK_DTYPES(DTYPE_NAME_)};
#undef DTYPE_NAME_
#define DTYPE_SAME_VALUE_(NAME, name, bytes, scaled, wire)  \
    _Static_assert((int)DCP_DTYPE_##NAME == (int)DCPK_##NAME, \
                   "enum dcp_dtype differs from DCPK_DTYPES at " #name);
DCPK_DTYPES(DTYPE_SAME_VALUE_)
#undef DTYPE_SAME_VALUE_
const char *const config_weight_dtype_names[7] = {"fp32",  "bf16",  "fp16", "fp8",
                                                  "nvfp4", "mxfp4", "int4"};
const char *const config_backend_names[3] = {"auto", "cuda", "host"};
const char *const config_cuda_comm_names[3] = {"auto", "nccl", "virtual"};
const char *const config_cuda_precision_names[2] = {"fast", "exact"};

/* The table entry for value v, or "unknown" for a value outside the enum. */
static const char *name_of(const char *const *names, size_t count, int v)
{
    return v >= 0 && (size_t)v < count ? names[v] : "unknown";
}

DCP_API const char *dcp_attention_kind_name(enum dcp_attention_kind kind)
{
    return name_of(config_attention_names, DCP_ARRAY_SIZE(config_attention_names), (int)kind);
}

DCP_API const char *dcp_dtype_name(enum dcp_dtype dtype)
{
    return name_of(config_dtype_names, DCP_ARRAY_SIZE(config_dtype_names), (int)dtype);
}

DCP_API int dcp_dtype_from_name(const char *name, enum dcp_dtype *out)
{
    if (!name || !out)
        return dcp_error(DCP_EINVAL, "dtype_from_name: NULL argument");
    for (size_t i = 0; i < DCP_ARRAY_SIZE(config_dtype_names); i++)
        if (!strcmp(name, config_dtype_names[i])) {
            *out = (enum dcp_dtype)i;
            return DCP_OK;
        }
    char names[64] = "";
    for (size_t i = 0; i < DCP_ARRAY_SIZE(config_dtype_names); i++)
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
                 config_dtype_names[i]);
    return dcp_error(DCP_EINVAL, "dtype_from_name: unknown dtype \"%.64s\": one of %s", name, names);
}

DCP_API const char *dcp_weight_dtype_name(enum dcp_weight_dtype dtype)
{
    return name_of(config_weight_dtype_names, DCP_ARRAY_SIZE(config_weight_dtype_names),
                   (int)dtype);
}

DCP_API const char *dcp_comm_scheme_name(enum dcp_comm_scheme scheme)
{
    /* The merge schemes' names live with their behaviour (engine/merge.c). */
    return name_of(dcp_merge_scheme_names, DCP_MERGE_SCHEME_COUNT, (int)scheme);
}

DCP_API const char *dcp_backend_kind_name(enum dcp_backend_kind kind)
{
    return name_of(config_backend_names, DCP_ARRAY_SIZE(config_backend_names), (int)kind);
}

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

DCP_API uint64_t dcp_model_kv_bytes_per_token_layer(const struct dcp_model_config *model)
{
    if (!model)
        return 0;
    const uint64_t elem = dcp_dtype_size(model->kv_dtype);
    /* MLA caches one shared latent+RoPE vector; GQA/MHA cache a K and a V per KV head. */
    if (model->attention == DCP_ATTN_MLA)
        return ((uint64_t)model->kv_lora_rank + model->rope_dim) * elem;
    return 2 * (uint64_t)model->num_kv_heads * model->head_dim * elem;
}
