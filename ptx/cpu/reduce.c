/*
 * reduce.c: ordered sum of n_src fp32 arrays (dcpk_reduce, params.h), the
 * arithmetic of a virtual-rank ReduceScatter. Work item = 1024 elements. Sources
 * are added in order 0..n_src-1 so every backend gets the same bits; dst may be
 * one of the sources (each element is read before it is written).
 */
#include "dcp_kernels/cpu.h"

/** Elements per work item. */
#define REDUCE_BLOCK 1024u
/** Elements summed in registers at a time. */
#define REDUCE_STRIP 64u

struct dcpk_grid dcpk_reduce_grid(const void *params)
{
    const struct dcpk_reduce_params *p = params;
    struct dcpk_grid g = {(uint32_t)((p->count + REDUCE_BLOCK - 1) / REDUCE_BLOCK), 1, 1};
    return g;
}

size_t dcpk_reduce_scratch_bytes(const void *params)
{
    (void)params;
    return 0;
}

void dcpk_reduce_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_reduce_params *p = params;
    const uint64_t *srcs = (const uint64_t *)(uintptr_t)p->src_ptrs;
    float *dst = (float *)(uintptr_t)p->dst;
    (void)scratch;
    for (uint64_t i0 = begin * REDUCE_BLOCK; i0 < end * REDUCE_BLOCK && i0 < p->count; i0 += REDUCE_STRIP) {
        const uint64_t n = p->count - i0 < REDUCE_STRIP ? p->count - i0 : REDUCE_STRIP;
        float acc[REDUCE_STRIP] = {0};
        for (uint32_t s = 0; s < p->n_src; s++) {
            const float *src = (const float *)(uintptr_t)srcs[s] + p->src_offset + i0;
            if (s == 0)
                for (uint64_t i = 0; i < n; i++)
                    acc[i] = src[i];
            else
                for (uint64_t i = 0; i < n; i++)
                    acc[i] += src[i];
        }
        for (uint64_t i = 0; i < n; i++)
            dst[i0 + i] = acc[i];
    }
}
