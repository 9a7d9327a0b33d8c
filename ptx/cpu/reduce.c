/*
 * reduce.c: ordered sum of n_src arrays of dtype (dcpk_reduce, params.h), the
 * arithmetic of a virtual-rank ReduceScatter. Work item = 1024 elements. Sources
 * are read as fp32 and added in order 0..n_src-1, the sum rounded to dtype once,
 * so every backend gets the same bits; dst may be one of the sources (each element
 * is read before it is written).
 */
#include "dcp_kernels/convert.h"
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
    void *dst = (void *)(uintptr_t)p->dst;
    (void)scratch;
    if (!dcpk_act_dtype_ok(p->dtype))
        return; /* refused, as the GPU kernel does (params.h) */
    for (uint64_t i0 = begin * REDUCE_BLOCK; i0 < end * REDUCE_BLOCK && i0 < p->count; i0 += REDUCE_STRIP) {
        const uint64_t n = p->count - i0 < REDUCE_STRIP ? p->count - i0 : REDUCE_STRIP;
        float acc[REDUCE_STRIP] = {0};
        for (uint32_t s = 0; s < p->n_src; s++) {
            const void *src = (const void *)(uintptr_t)srcs[s];
            const uint64_t at = p->src_offset + i0;
            if (s == 0)
                for (uint64_t i = 0; i < n; i++)
                    acc[i] = dcpk_load_as_f32(src, at + i, p->dtype);
            else
                for (uint64_t i = 0; i < n; i++)
                    acc[i] += dcpk_load_as_f32(src, at + i, p->dtype);
        }
        for (uint64_t i = 0; i < n; i++)
            dcpk_store_as(dst, i0 + i, p->dtype, acc[i]);
    }
}
