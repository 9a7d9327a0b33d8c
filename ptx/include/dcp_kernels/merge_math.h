/*
 * dcp_kernels/merge_math.h: the LSE merge rules of dcpk_merge and dcpk_lse_scale
 * (params.h), as DCPK_HD functions for the CUDA kernels.
 *
 * STAND-IN for dcp_kernels/merge.h, which the CPU-kernel work adds with the same
 * functions (dcpk_lse_sanitize, dcpk_merge_lambda, dcpk_merge_weight), the same
 * semantics and the same include guard, so whichever header a translation unit
 * includes first wins and the other is skipped. Once merge.h is in the tree this
 * file goes and ptx/kernels/ includes merge.h instead.
 *
 *   - NaN and +inf LSEs count as -inf (a source that contributes nothing);
 *   - m = max of the LSEs; when every LSE is -inf, Lambda = -inf (no -inf - -inf);
 *   - Lambda = m + log sum exp(lse - m);
 *   - a source's weight exp(lse - Lambda) is exactly 0 where its LSE is -inf, and
 *     callers skip (never multiply) such a source, so 0 * NaN cannot leak.
 */
#ifndef DCPK_MERGE_H
#define DCPK_MERGE_H

#include "dcp_kernels/common.h"

#if !defined(__CUDACC__)
#include <math.h>
#endif

/** -infinity from its bits, so nvcc and C agree without <math.h> macros. */
DCPK_HD float dcpk_merge_neg_inf_(void)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(0xff800000u);
#else
    union {
        uint32_t u;
        float f;
    } v = {0xff800000u};
    return v.f;
#endif
}

/** An LSE as the merge counts it: NaN and +inf become -inf (by the bits). */
DCPK_HD float dcpk_lse_sanitize(float lse)
{
#if defined(__CUDA_ARCH__)
    const uint32_t bits = __float_as_uint(lse);
#else
    union {
        float f;
        uint32_t u;
    } v = {lse};
    const uint32_t bits = v.u;
#endif
    return (bits & 0x7f800000u) == 0x7f800000u ? dcpk_merge_neg_inf_() : lse;
}

/**
 * Lambda = log sum_s exp(lse[s * stride]) over n sources, computed with the max
 * shift; -inf when no source has a finite LSE.
 */
DCPK_HD float dcpk_merge_lambda(const float *lse, uint32_t n, uint64_t stride)
{
    const float neg_inf = dcpk_merge_neg_inf_();
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
    const float neg_inf = dcpk_merge_neg_inf_();
    lse = dcpk_lse_sanitize(lse);
    if (lse == neg_inf || lambda == neg_inf)
        return 0.0f;
    return expf(lse - lambda);
}

#endif /* DCPK_MERGE_H */
