/* names.c: canonical names of the deployment enums (the sizes and the arithmetic a
 * model implies are the model layer's, runtime/model). The name tables double as
 * the YAML choices. */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"
#include "util/util.h"

const char *const config_attention_names[3] = {"mla", "gqa", "mha"};
/* The dtype rows of DCPK_DTYPES (dcp_kernels/common.h): the public enum has the same values. */
#define DTYPE_NAME_(NAME, name, bytes, scaled, wire, codec) #name,
const char *const config_dtype_names[DCPK_DTYPE_COUNT] = {DCPK_DTYPES(DTYPE_NAME_)};
#undef DTYPE_NAME_
#define DTYPE_SAME_VALUE_(NAME, name, bytes, scaled, wire, codec)  \
    _Static_assert((int)DCP_DTYPE_##NAME == (int)DCPK_##NAME, \
                   "enum dcp_dtype differs from DCPK_DTYPES at " #name);
DCPK_DTYPES(DTYPE_SAME_VALUE_)
#undef DTYPE_SAME_VALUE_
/* The wire dtypes (the first rows of DCPK_DTYPES, same values) and auto after them. */
const char *const config_wire_dtype_names[4] = {"fp32", "bf16", "fp16", "auto"};
_Static_assert(DCPK_WIRE_DTYPE_COUNT == 3 && (int)DCP_WIRE_AUTO == DCPK_WIRE_DTYPE_COUNT,
               "config_wire_dtype_names: the wire rows of DCPK_DTYPES, then auto");
const char *const config_weight_dtype_names[7] = {"fp32",  "bf16",  "fp16", "fp8",
                                                  "nvfp4", "mxfp4", "int4"};
const char *const config_backend_names[3] = {"auto", "cuda", "host"};
const char *const config_layer_type_names[4] = {"full", "sliding_window", "sparse_topk", "none"};
const char *const config_window_kv_names[2] = {"replicated", "sharded"};
const char *const config_sparse_index_names[2] = {"caller", "sharded"};
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

DCP_API const char *dcp_wire_dtype_name(enum dcp_wire_dtype wire)
{
    return name_of(config_wire_dtype_names, DCP_ARRAY_SIZE(config_wire_dtype_names), (int)wire);
}

DCP_API enum dcp_dtype dcp_wire_dtype_of(enum dcp_wire_dtype wire, enum dcp_dtype act_dtype)
{
    return wire == DCP_WIRE_AUTO ? act_dtype : (enum dcp_dtype)wire;
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

DCP_API const char *dcp_layer_type_name(enum dcp_layer_type type)
{
    return name_of(config_layer_type_names, DCP_ARRAY_SIZE(config_layer_type_names), (int)type);
}
