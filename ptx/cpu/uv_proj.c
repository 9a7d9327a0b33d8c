/*
 * uv_proj.c: the MLA value up-projection of partial outputs (dcpk_uv_proj,
 * params.h): each gathered head's latent rows times its W_UV. Work item = head.
 */
#include <string.h>

#include "dcp_kernels/cpu.h"

struct dcpk_grid dcpk_uv_proj_grid(const void *params)
{
    const struct dcpk_uv_proj_params *p = params;
    struct dcpk_grid g = {p->num_heads, 1, 1};
    return g;
}

size_t dcpk_uv_proj_scratch_bytes(const void *params)
{
    (void)params;
    return 0;
}

void dcpk_uv_proj_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_uv_proj_params *p = params;
    (void)scratch;
    if (p->heads_per_chunk == 0)
        return;
    const uint64_t in = p->in_dim, out = p->out_dim;
    for (uint64_t g = begin; g < end; g++) {
        const uint64_t c = g / p->heads_per_chunk, h = g % p->heads_per_chunk;
        const float *w = (const float *)(uintptr_t)p->w + g * in * out;
        for (uint64_t t = 0; t < p->num_tokens; t++) {
            const uint64_t row = t * p->heads_per_chunk + h;
            const float *x = (const float *)(uintptr_t)p->src + c * p->src_chunk_stride + row * in;
            float *restrict y = (float *)(uintptr_t)p->dst + c * p->dst_chunk_stride + row * out;
            memset(y, 0, out * sizeof(float));
            /* i outer, j inner: the inner loop streams one row of W and vectorizes. */
            for (uint64_t i = 0; i < in; i++) {
                const float xi = x[i];
                const float *restrict wi = w + i * out;
                for (uint64_t j = 0; j < out; j++)
                    y[j] += xi * wi[j];
            }
        }
    }
}
