/*
 * lse_scale.c: the ag_rs correction (dcpk_lse_scale, params.h): scales this
 * rank's partial output rows by exp(lse_self - Lambda) so that a ReduceScatter
 * (sum) yields the merged output. Work item = row. Rules from dcp_kernels/merge.h.
 * o is of o_dtype: each element is read as fp32, scaled and rounded back once.
 */
#include <string.h>

#include "dcp_kernels/convert.h"
#include "dcp_kernels/cpu.h"
#include "dcp_kernels/merge.h"

struct dcpk_grid dcpk_lse_scale_grid(const void *params)
{
    const struct dcpk_lse_scale_params *p = params;
    struct dcpk_grid g = {p->rows, 1, 1};
    return g;
}

size_t dcpk_lse_scale_scratch_bytes(const void *params)
{
    (void)params;
    return 0;
}

void dcpk_lse_scale_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_lse_scale_params *p = params;
    const float *lse_all = (const float *)(uintptr_t)p->lse_all;
    const uint64_t own_lo = (uint64_t)p->own_chunk * p->rows_per_chunk;
    (void)scratch;
    if (!dcpk_act_dtype_ok(p->o_dtype))
        return; /* refused, as the GPU kernel does (params.h) */
    void *o = (void *)(uintptr_t)p->o;
    for (uint64_t r = begin; r < end; r++) {
        const float lambda = dcpk_merge_lambda(lse_all + r, p->n_src, p->rows);
        const float own = lse_all[(uint64_t)p->self * p->rows + r];
        const float w = dcpk_merge_weight(own, lambda);
        const uint64_t row = r * p->v_dim;
        if (dcpk_lse_empty(own)) /* o may hold anything: never 0 * o (all-zero bits are 0 in every dtype) */
            memset((char *)o + row * dcpk_dtype_size(p->o_dtype), 0, (size_t)p->v_dim * dcpk_dtype_size(p->o_dtype));
        else /* even at weight 0 (underflow), so a NaN in o shows */
            for (uint32_t d = 0; d < p->v_dim; d++)
                dcpk_store_as(o, row + d, p->o_dtype, dcpk_load_as_f32(o, row + d, p->o_dtype) * w);
        if (p->out_lse && r >= own_lo && r - own_lo < p->rows_per_chunk)
            ((float *)(uintptr_t)p->out_lse)[r - own_lo] = lambda;
    }
}
