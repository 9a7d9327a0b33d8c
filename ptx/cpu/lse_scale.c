/*
 * lse_scale.c: the ag_rs correction (dcpk_lse_scale, params.h): scales this
 * rank's partial output rows by exp(lse_self - Lambda) so that a ReduceScatter
 * (sum) yields the merged output. Work item = row. Rules from dcp_kernels/merge.h.
 */
#include <string.h>

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
    for (uint64_t r = begin; r < end; r++) {
        const float lambda = dcpk_merge_lambda(lse_all + r, p->n_src, p->rows);
        const float own = lse_all[(uint64_t)p->self * p->rows + r];
        const float w = dcpk_merge_weight(own, lambda);
        float *o = (float *)(uintptr_t)p->o + r * p->v_dim;
        if (dcpk_lse_empty(own))
            memset(o, 0, (size_t)p->v_dim * sizeof(float)); /* o may hold anything: never 0 * o */
        else /* even at weight 0 (underflow), so a NaN in o shows */
            for (uint32_t d = 0; d < p->v_dim; d++)
                o[d] *= w;
        if (p->out_lse && r >= own_lo && r - own_lo < p->rows_per_chunk)
            ((float *)(uintptr_t)p->out_lse)[r - own_lo] = lambda;
    }
}
