/*
 * merge.cuh: the LSE merge of one row by one warp (dcpk_merge in rows.cuh, and the
 * split-KV combine the last split of a dcpk_attn work item runs, attn.cuh), with the
 * edge-case rules of dcp_kernels/merge.h and dcpk_merge_cpu's arithmetic and order.
 */
#ifndef DCPK_MERGE_CUH
#define DCPK_MERGE_CUH

#include "dcp_kernels/convert.h"
#include "dcp_kernels/merge.h"
#include "device.cuh"

namespace dcpk {

/**
 * Deliberate bugs of the merge kernel, for tests/kernels_build to prove that its
 * emulated tests catch them (the fatbin instantiates none): short_max drops the
 * xor-16 step of the warp's max, so lanes 0-15 never see the LSEs lanes 16-31
 * hold (a row whose largest LSE is there overflows exp); tree_sum adds the
 * exponentials as a butterfly instead of in source order (other bits than the
 * CPU implementation's).
 */
enum class MergeMutant { none, short_max, tree_sum };

constexpr uint32_t kFullWarp = 0xffffffffu;
/** Output columns a lane accumulates per pass over the sources (32 x this per warp). */
constexpr uint32_t kMergeCols = 4;

/**
 * dcpk_merge_lambda of one row, by one warp: the lanes take sources lane, lane +
 * 32, ...; the max (and whether any LSE is NaN or +inf) by xor shuffles, exact in
 * any order; the exponentials computed by their lanes and added in source order
 * (each lane adds the 32 of a round, shuffled from their lanes, one after another),
 * the order of dcpk_merge_lambda: the same bits. Every lane returns it.
 */
template <MergeMutant M>
__device__ __forceinline__ float warp_merge_lambda(const float *lse, uint32_t n, uint64_t stride, uint32_t lane)
{
    const float neg_inf = dcpk_neg_inf();
    float m = neg_inf;
    uint32_t bad = 0;
    for (uint32_t s = lane; s < n; s += 32) {
        const float v = lse[s * stride];
        bad |= dcpk_lse_poisoned(v) ? 1u : 0u;
        m = v > m ? v : m;
    }
    for (int off = M == MergeMutant::short_max ? 8 : 16; off > 0; off >>= 1) {
        const float o = __shfl_xor_sync(kFullWarp, m, off);
        m = o > m ? o : m;
        bad |= __shfl_xor_sync(kFullWarp, bad, off);
    }
    m = __shfl_sync(kFullWarp, m, 0); // one max for all lanes (+0 and -0 tie)
    if (bad)
        return dcpk_qnan();
    if (m == neg_inf)
        return neg_inf;
    float sum = 0.0f;
    for (uint32_t s0 = 0; s0 < n; s0 += 32) {
        const float v = s0 + lane < n ? lse[(s0 + lane) * stride] : neg_inf;
        const float t = dcpk_lse_empty(v) ? 0.0f : expf(v - m); // + 0 leaves the sum's bits as they are
        if constexpr (M == MergeMutant::tree_sum) {
            float x = t;
            for (int off = 16; off > 0; off >>= 1)
                x += __shfl_xor_sync(kFullWarp, x, off);
            sum += x;
        } else {
            const uint32_t k = min(n - s0, 32u);
            for (uint32_t j = 0; j < k; j++)
                sum += __shfl_sync(kFullWarp, t, (int)j);
        }
    }
    return m + logf(sum);
}

/**
 * Merges one row by one warp (every lane calls it): n sources, source s's row at
 * element o_first + s * stride_o of src_o (dtype SD) and its LSE at lse[s * stride_lse];
 * the merged row at element out_first of out (out_dtype), Lambda at *out_lse (if not
 * null). Lambda by warp_merge_lambda; then, kMergeCols x 32 columns at a time, each
 * lane's weight exp(lse_s - Lambda) of source s0 + lane, the sources' non-empty mask
 * by ballot, and every lane adds weight_s * o_s of its columns over s in order, from
 * 0 (weights shuffled from their lanes), rounding to out_dtype once: dcpk_merge_cpu's
 * arithmetic in its order, for any number of sources.
 */
template <MergeMutant M, uint32_t SD>
__device__ __forceinline__ void warp_merge_row(const void *src_o, uint64_t o_first, uint64_t stride_o, const float *lse,
                                               uint64_t stride_lse, uint32_t n, uint32_t v_dim, uint64_t out,
                                               uint64_t out_first, uint32_t out_dtype, float *out_lse, uint32_t lane)
{
    const float neg_inf = dcpk_neg_inf();
    const float total = warp_merge_lambda<M>(lse, n, stride_lse, lane);
    for (uint32_t d0 = 0; d0 < v_dim; d0 += 32 * kMergeCols) {
        float acc[kMergeCols];
#pragma unroll
        for (uint32_t k = 0; k < kMergeCols; k++)
            acc[k] = 0.0f;
        for (uint32_t s0 = 0; s0 < n; s0 += 32) {
            const bool mine = s0 + lane < n;
            const float l = mine ? lse[(s0 + lane) * stride_lse] : neg_inf;
            const float w = dcpk_merge_weight(l, total);
            const uint32_t live = __ballot_sync(kFullWarp, mine && !dcpk_lse_empty(l));
            const uint32_t m = min(n - s0, 32u);
            for (uint32_t j = 0; j < m; j++) {
                const float wj = __shfl_sync(kFullWarp, w, (int)j);
                if (!(live >> j & 1u))
                    continue; // never 0 * o: an empty source's o may hold anything
                const uint64_t o = o_first + (s0 + j) * stride_o;
#pragma unroll
                for (uint32_t k = 0; k < kMergeCols; k++) {
                    const uint32_t d = d0 + 32 * k + lane;
                    if (d < v_dim) // even at weight 0: a NaN in o_s shows
                        acc[k] += wj * dcpk_load_as_f32(src_o, o + d, SD);
                }
            }
        }
#pragma unroll
        for (uint32_t k = 0; k < kMergeCols; k++) {
            const uint32_t d = d0 + 32 * k + lane;
            if (d < v_dim)
                store_as(out, out_first + d, out_dtype, acc[k]);
        }
    }
    if (out_lse != nullptr && lane == 0)
        *out_lse = total;
}

} // namespace dcpk

#endif /* DCPK_MERGE_CUH */
