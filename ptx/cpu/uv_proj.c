/*
 * uv_proj.c: the MLA value up-projection of partial outputs (dcpk_uv_proj,
 * params.h): each gathered head's latent rows times its W_UV. Work item = head.
 * A row accumulates in fp32 scratch and is stored in dst_dtype, rounded once.
 */
#include <string.h>

#include "dcp_kernels/convert.h"
#include "dcp_kernels/cpu.h"

struct dcpk_grid dcpk_uv_proj_grid(const void *params)
{
    const struct dcpk_uv_proj_params *p = params;
    struct dcpk_grid g = {p->num_heads, 1, 1};
    return g;
}

/** Alignment of the accumulators in the caller's scratch (which may be at any address). */
#define UV_ALIGN 64

size_t dcpk_uv_proj_scratch_bytes(const void *params)
{
    const struct dcpk_uv_proj_params *p = params;
    return (size_t)p->out_dim * sizeof(float) + UV_ALIGN; /* one row's fp32 accumulators, aligned */
}

void dcpk_uv_proj_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_uv_proj_params *p = params;
    if (p->heads_per_chunk == 0 || !dcpk_act_dtype_ok(p->dst_dtype))
        return; /* refused, as the GPU kernel does (params.h) */
    float *restrict acc = (float *)(((uintptr_t)scratch + UV_ALIGN - 1) & ~(uintptr_t)(UV_ALIGN - 1));
    void *dst = (void *)(uintptr_t)p->dst;
    const uint64_t in = p->in_dim, out = p->out_dim;
    for (uint64_t g = begin; g < end; g++) {
        const uint64_t c = g / p->heads_per_chunk, h = g % p->heads_per_chunk;
        const float *w = (const float *)(uintptr_t)p->w + g * in * out;
        for (uint64_t t = 0; t < p->num_tokens; t++) {
            const uint64_t row = t * p->heads_per_chunk + h;
            const float *x = (const float *)(uintptr_t)p->src + c * p->src_chunk_stride + row * in;
            const uint64_t y = c * p->dst_chunk_stride + row * out;
            memset(acc, 0, out * sizeof(float));
            /* i outer, j inner: the inner loop streams one row of W and vectorizes. */
            for (uint64_t i = 0; i < in; i++) {
                const float xi = x[i];
                const float *restrict wi = w + i * out;
                for (uint64_t j = 0; j < out; j++)
                    acc[j] += xi * wi[j];
            }
            for (uint64_t j = 0; j < out; j++)
                dcpk_store_as(dst, y + j, p->dst_dtype, acc[j]); /* the one rounding */
        }
    }
}
