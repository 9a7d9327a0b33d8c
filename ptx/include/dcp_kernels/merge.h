/*
 * dcp_kernels/merge.h: the LSE merge rules of dcpk_merge and dcpk_lse_scale
 * (params.h), shared by the CPU and CUDA kernels so both treat the edge cases the
 * same way:
 *   - NaN and +inf LSEs count as -inf (a source that contributes nothing);
 *   - m = max of the LSEs, 0 when every LSE is -inf, so no -inf - -inf = NaN;
 *   - Lambda = m + log sum exp(lse - m), -inf when every LSE is -inf;
 *   - a source's weight exp(lse - Lambda) is exactly 0 where its LSE is -inf, and
 *     callers skip (never multiply) such a source, so 0 * NaN cannot leak.
 */
#ifndef DCPK_MERGE_H
#define DCPK_MERGE_H

#include "dcp_kernels/convert.h"

#if !defined(__CUDACC__)
#include <math.h>
#endif

/** An LSE as the merge counts it: NaN and +inf become -inf. */
DCPK_HD float dcpk_lse_sanitize(float lse)
{
    return dcpk_f32_is_nonfinite(lse) ? dcpk_neg_inf() : lse;
}

/**
 * Lambda = log sum_s exp(lse[s * stride]) over n sources, computed with the max
 * shift; -inf when no source has a finite LSE.
 */
DCPK_HD float dcpk_merge_lambda(const float *lse, uint32_t n, uint64_t stride)
{
    const float neg_inf = dcpk_neg_inf();
    float m = neg_inf;
    for (uint32_t s = 0; s < n; s++) {
        const float v = dcpk_lse_sanitize(lse[s * stride]);
        m = v > m ? v : m;
    }
    if (m == neg_inf)
        return neg_inf;
    float sum = 0.0f;
    for (uint32_t s = 0; s < n; s++) {
        const float v = dcpk_lse_sanitize(lse[s * stride]);
        if (v != neg_inf)
            sum += expf(v - m);
    }
    return m + logf(sum);
}

/**
 * Weight exp(lse - lambda) of a source in a merge whose total is lambda; exactly 0
 * when lse (sanitized) or lambda is -inf. Callers skip sources of weight 0.
 */
DCPK_HD float dcpk_merge_weight(float lse, float lambda)
{
    const float neg_inf = dcpk_neg_inf();
    lse = dcpk_lse_sanitize(lse);
    if (lse == neg_inf || lambda == neg_inf)
        return 0.0f;
    return expf(lse - lambda);
}

#endif /* DCPK_MERGE_H */
