/*
 * sink.c: the per-head attention sink applied once to merged rows (dcpk_sink,
 * params.h). The sink is one more merge source whose LSE is s_h and whose output
 * is zero, so the rules are the merge's (dcp_kernels/merge.h):
 * L' = dcpk_merge_lambda({L, s_h}), o' = o * dcpk_merge_weight(L, L'); an empty
 * row (L = -inf) stays 0 and a NaN in L or s_h makes the row NaN. Work item = row.
 */
#include <string.h>

#include "dcp_kernels/cpu.h"
#include "dcp_kernels/merge.h"

struct dcpk_grid dcpk_sink_grid(const void *params)
{
    const struct dcpk_sink_params *p = params;
    struct dcpk_grid g = {p->num_heads ? p->rows : 0, 1, 1};
    return g;
}

size_t dcpk_sink_scratch_bytes(const void *params)
{
    (void)params;
    return 0;
}

void dcpk_sink_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_sink_params *p = params;
    (void)scratch;
    if (!dcpk_act_dtype_ok(p->out_dtype) || !p->num_heads)
        return; /* refused, as the GPU kernel does (params.h) */
    void *out = (void *)(uintptr_t)p->out;
    float *lse = (float *)(uintptr_t)p->lse;
    const float *sinks = (const float *)(uintptr_t)p->sinks;
    const uint32_t esize = dcpk_dtype_size(p->out_dtype);
    for (uint64_t r = begin; r < end; r++) {
        const float pair[2] = {lse[r], sinks[r % p->num_heads]}; /* the row, then the sink */
        const float lambda = dcpk_merge_lambda(pair, 2, 1);
        const uint64_t row = r * p->v_dim;
        if (dcpk_lse_poisoned(lambda)) { /* a NaN in L or s_h: the whole row */
            for (uint32_t d = 0; d < p->v_dim; d++)
                dcpk_store_as(out, row + d, p->out_dtype, dcpk_qnan());
        } else if (dcpk_lse_empty(pair[0])) { /* nothing to scale: never 0 * o */
            memset((char *)out + row * esize, 0, (size_t)p->v_dim * esize);
        } else { /* even at weight 0, so a NaN in o shows */
            const float w = dcpk_merge_weight(pair[0], lambda);
            for (uint32_t d = 0; d < p->v_dim; d++)
                dcpk_store_as(out, row + d, p->out_dtype, dcpk_load_as_f32(out, row + d, p->out_dtype) * w);
        }
        lse[r] = lambda;
    }
}
