/*
 * dcp_kernels/merge.h: the LSE merge rules of dcpk_merge and dcpk_lse_scale
 * (params.h), shared by the CPU and CUDA kernels so both treat the edge cases the
 * same way (docs/design.md §4, "Merge rules" and "NaN"):
 *   - a source whose LSE is -inf is empty (the attention kernel decides that from
 *     the lengths: no visible key). It contributes nothing, and its output is never
 *     read, so whatever its buffer holds (NaN included) cannot leak;
 *   - a NaN LSE means a NaN reached attention (a visible key or value, or the
 *     query); a +inf LSE cannot come from finite data (attention turns a +inf
 *     score into NaN itself) and is treated the same way. Either makes Lambda NaN,
 *     so the merged LSE and every element of the merged row are NaN, whatever the
 *     number of sources (split-KV factor, DCP size) and in both merge schemes;
 *   - otherwise m = max of the LSEs and Lambda = m + log sum exp(lse - m); every
 *     LSE -inf (or no source): Lambda = -inf and the merged row is 0, never NaN;
 *   - a non-empty source is multiplied in with its weight exp(lse - Lambda) even
 *     where that weight underflows to 0, so a NaN in its output is never dropped.
 */
#ifndef DCPK_MERGE_H
#define DCPK_MERGE_H

#include "dcp_kernels/convert.h"

#if !defined(__CUDACC__)
#include <math.h>
#endif

/** True when a source with this LSE is empty (-inf: it saw no key) and is skipped. */
DCPK_HD int dcpk_lse_empty(float lse)
{
    return lse == dcpk_neg_inf();
}

/** True for an LSE that poisons the merge: NaN or +inf. */
DCPK_HD int dcpk_lse_poisoned(float lse)
{
    return dcpk_f32_is_nonfinite(lse) && !dcpk_lse_empty(lse);
}

/**
 * Lambda = log sum_s exp(lse[s * stride]) over n sources, computed with the max
 * shift; -inf when every source is empty (or n = 0), NaN when any LSE is NaN or +inf.
 */
DCPK_HD float dcpk_merge_lambda(const float *lse, uint32_t n, uint64_t stride)
{
    const float neg_inf = dcpk_neg_inf();
    float m = neg_inf;
    for (uint32_t s = 0; s < n; s++) {
        const float v = lse[s * stride];
        if (dcpk_lse_poisoned(v))
            return dcpk_qnan();
        m = v > m ? v : m;
    }
    if (m == neg_inf)
        return neg_inf;
    float sum = 0.0f;
    for (uint32_t s = 0; s < n; s++) {
        const float v = lse[s * stride];
        if (!dcpk_lse_empty(v))
            sum += expf(v - m);
    }
    return m + logf(sum);
}

/**
 * Weight exp(lse - lambda) of a source in a merge whose total is lambda: NaN when
 * lambda is NaN, 0 for an empty source. Callers skip empty sources (never 0 * o)
 * and multiply every other one in, even at weight 0.
 */
DCPK_HD float dcpk_merge_weight(float lse, float lambda)
{
    return dcpk_lse_empty(lse) ? 0.0f : expf(lse - lambda);
}

#endif /* DCPK_MERGE_H */
