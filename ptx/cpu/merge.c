/*
 * merge.c: exact merge of partial attention results by their LSEs (dcpk_merge,
 * params.h): the split-KV combine and the a2a DCP merge. Work item =
 * DCPK_MERGE_ROWS_PER_ITEM rows. The
 * edge-case rules live in dcp_kernels/merge.h, shared with the CUDA kernel.
 * Sources are read (src_dtype) and the output stored (out_dtype) element by
 * element; a row accumulates in fp32 scratch and is rounded once.
 */
#include <string.h>

#include "dcp_kernels/cpu.h"
#include "dcp_kernels/merge.h"

/** Alignment of the accumulators in the caller's scratch (which may be at any address). */
#define MERGE_ALIGN 64

struct dcpk_grid dcpk_merge_grid(const void *params)
{
    const struct dcpk_merge_params *p = params;
    struct dcpk_grid g = {(uint32_t)(((uint64_t)p->rows + DCPK_MERGE_ROWS_PER_ITEM - 1) / DCPK_MERGE_ROWS_PER_ITEM), 1, 1};
    return g;
}

size_t dcpk_merge_scratch_bytes(const void *params)
{
    const struct dcpk_merge_params *p = params;
    return (size_t)p->v_dim * sizeof(float) + MERGE_ALIGN; /* one row's fp32 accumulators, aligned */
}

void dcpk_merge_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_merge_params *p = params;
    const void *src_o = (const void *)(uintptr_t)p->src_o;
    const float *src_lse = (const float *)(uintptr_t)p->src_lse;
    void *out = (void *)(uintptr_t)p->out;
    const uint32_t per_chunk = p->rows_per_chunk ? p->rows_per_chunk : p->rows;
    float *acc = (float *)(((uintptr_t)scratch + MERGE_ALIGN - 1) & ~(uintptr_t)(MERGE_ALIGN - 1));
    if (!dcpk_act_dtype_ok(p->src_dtype) || !dcpk_act_dtype_ok(p->out_dtype))
        return; /* refused, as the GPU kernel does (params.h) */
    const uint64_t last = end * DCPK_MERGE_ROWS_PER_ITEM < p->rows ? end * DCPK_MERGE_ROWS_PER_ITEM : p->rows;
    for (uint64_t r = begin * DCPK_MERGE_ROWS_PER_ITEM; r < last; r++) {
        const float lambda = dcpk_merge_lambda(src_lse + r, p->n_src, p->src_stride_lse);
        const uint64_t out_row = (r / per_chunk) * p->out_chunk_stride + (r % per_chunk) * p->v_dim;
        memset(acc, 0, (size_t)p->v_dim * sizeof(float));
        for (uint32_t s = 0; s < p->n_src; s++) {
            const float lse = src_lse[s * p->src_stride_lse + r];
            if (dcpk_lse_empty(lse))
                continue; /* never 0 * o: an empty source's o may hold anything */
            const float w = dcpk_merge_weight(lse, lambda); /* used even when 0: NaN in o shows */
            const uint64_t o = s * p->src_stride_o + r * p->v_dim;
            for (uint32_t d = 0; d < p->v_dim; d++)
                acc[d] += w * dcpk_load_as_f32(src_o, o + d, p->src_dtype);
        }
        for (uint32_t d = 0; d < p->v_dim; d++)
            dcpk_store_as(out, out_row + d, p->out_dtype, acc[d]);
        if (p->out_lse)
            ((float *)(uintptr_t)p->out_lse)[(r / per_chunk) * p->out_lse_chunk_stride + r % per_chunk] = lambda;
    }
}
