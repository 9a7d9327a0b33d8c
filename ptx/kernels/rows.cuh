/*
 * rows.cuh: the row-wise kernels (params.h): kv_append, fill, merge, lse_scale,
 * reduce, uv_proj and sink. One entry each ("dcpk_<family>"), the dtype chosen at run time. Each
 * block walks the work items of params.h (rows; a row per warp for merge;
 * 1024-element blocks for reduce)
 * with a grid-stride loop, so any grid is correct; dcpk_<family>_grid() gives one
 * block per item. Block sizes: DCPK_SIMPLE_KERNELS in variants.h.
 * Activation arrays (K/V sources, partial and merged outputs, reduce operands) are
 * of the dtype their params field names: each element is converted as it is loaded
 * (dcpk_load_as_f32, exact) and as it is stored (store_as); a kernel given another
 * value there does nothing (params.h).
 */
#ifndef DCPK_ROWS_CUH
#define DCPK_ROWS_CUH

#include "dcp_kernels/convert.h"
#include "dcp_kernels/merge.h"
#include "dcp_kernels/paged.h"
#include "dcp_kernels/params.h"
#include "dcp_kernels/variants.h"
#include "device.cuh"
#include "merge.cuh"

namespace dcpk {

#define DCPK_BLOCK_OF(name, threads) constexpr int kBlock_##name = threads;
DCPK_SIMPLE_KERNELS(DCPK_BLOCK_OF)
#undef DCPK_BLOCK_OF

/** Copies row src_idx.. of n values of src_dtype into a cache row of dtype (fp8: times inv_scale). */
__device__ __forceinline__ void store_row(uint64_t dst, uint64_t dst_idx, uint64_t src, uint64_t src_idx,
                                          uint32_t src_dtype, uint32_t n, uint32_t dtype, float inv_scale)
{
    const bool scaled = dcpk_dtype_scaled(dtype);
    const void *s = reinterpret_cast<const void *>(src);
    for (uint32_t d = threadIdx.x; d < n; d += blockDim.x) {
        const float x = dcpk_load_as_f32(s, src_idx + d, src_dtype);
        store_as(dst, dst_idx + d, dtype, scaled ? x * inv_scale : x);
    }
}

/**
 * Deliberate bugs of the sink kernel, for tests/kernels_build to prove that its
 * emulated test catches them (the fatbin instantiates none only): scale_empty
 * multiplies an empty row (LSE -inf) by its weight 0 instead of storing 0, so a
 * NaN left in the row leaks; twice applies the sink twice in a row (the DCP
 * mistake of applying it on a rank and again after the merge).
 */
enum class SinkMutant { none, scale_empty, twice };

/**
 * dcpk_sink: work item = merged row r (head r % num_heads). L' = logaddexp(L, s_h)
 * by the merge rules (the sink is one more source, of LSE s_h and output 0),
 * o' = o * e^(L - L'); an empty row stays 0 (stored, never 0 * o), a NaN (or +inf)
 * in L or s_h makes the row NaN (docs/design.md §13). Thread 0 decides the row,
 * every thread scales its elements.
 */
template <SinkMutant M>
__device__ __forceinline__ void sink_rows(const dcpk_sink_params &p)
{
    static __shared__ float shared_w;
    static __shared__ uint32_t shared_mode; // 0: scale by shared_w, 1: store 0 (empty row), 2: NaN
    if (!dcpk_act_dtype_ok(p.out_dtype) || p.num_heads == 0)
        return;
    float *lse = reinterpret_cast<float *>(p.lse);
    const float *sinks = reinterpret_cast<const float *>(p.sinks);
    for (uint64_t row = block_linear(); row < p.rows; row += grid_blocks()) {
        if (threadIdx.x == 0) {
            const float pair[2] = {lse[row], sinks[row % p.num_heads]}; // the row, then the sink
            float lambda = dcpk_merge_lambda(pair, 2, 1);
            float w = dcpk_merge_weight(pair[0], lambda);
            if constexpr (M == SinkMutant::twice) {
                const float again[2] = {lambda, pair[1]};
                const float lambda2 = dcpk_merge_lambda(again, 2, 1);
                w *= dcpk_merge_weight(lambda, lambda2);
                lambda = lambda2;
            }
            const bool empty = M != SinkMutant::scale_empty && dcpk_lse_empty(pair[0]);
            shared_mode = dcpk_lse_poisoned(lambda) ? 2u : empty ? 1u : 0u;
            shared_w = w;
            lse[row] = lambda;
        }
        __syncthreads();
        const uint32_t mode = shared_mode;
        const float w = shared_w;
        const void *o = reinterpret_cast<const void *>(p.out);
        for (uint32_t d = threadIdx.x; d < p.v_dim; d += blockDim.x) {
            const uint64_t i = row * p.v_dim + d;
            // even at weight 0: a NaN in o shows
            store_as(p.out, i, p.out_dtype,
                     mode == 2u ? quiet_nan() : mode == 1u ? 0.f : dcpk_load_as_f32(o, i, p.out_dtype) * w);
        }
        __syncthreads();
    }
}

/** Rows dcpk_merge's block merges at once: one per warp (params.h's work item). */
constexpr uint32_t kMergeWarps = kBlock_merge / 32;
static_assert(kMergeWarps == DCPK_MERGE_ROWS_PER_ITEM, "a dcpk_merge work item is one row per warp");

/**
 * dcpk_merge from sources of dtype SD: one warp per row (kMergeWarps rows per block,
 * rows grid-strided by warp), each through warp_merge_row (merge.cuh). No shared
 * memory, no block barrier.
 */
template <MergeMutant M, uint32_t SD>
__device__ __forceinline__ void merge_rows_from(const dcpk_merge_params &p)
{
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (uint64_t row = block_linear() * kMergeWarps + warp; row < p.rows; row += grid_blocks() * kMergeWarps) {
        const uint64_t chunk = row / p.rows_per_chunk, in_chunk = row % p.rows_per_chunk;
        float *out_lse = p.out_lse != 0
                             ? reinterpret_cast<float *>(p.out_lse) + chunk * p.out_lse_chunk_stride + in_chunk
                             : nullptr;
        warp_merge_row<M, SD>(reinterpret_cast<const void *>(p.src_o), row * p.v_dim, p.src_stride_o,
                              reinterpret_cast<const float *>(p.src_lse) + row, p.src_stride_lse, p.n_src, p.v_dim,
                              p.out, chunk * p.out_chunk_stride + in_chunk * p.v_dim, p.out_dtype, out_lse, lane);
    }
}

/**
 * dcpk_merge's body: merge_rows_from of the sources' dtype (a compile-time dtype: one
 * load per element, no dtype switch in the inner loop).
 */
template <MergeMutant M>
__device__ __forceinline__ void merge_rows(const dcpk_merge_params &p)
{
    if (p.rows_per_chunk == 0 || !dcpk_act_dtype_ok(p.src_dtype) || !dcpk_act_dtype_ok(p.out_dtype))
        return;
#define DCPK_MERGE_FROM_(NAME, name, bytes, scaled, wire, codec) \
    case DCPK_##NAME:                                             \
        if constexpr ((wire) != 0)                                \
            merge_rows_from<M, DCPK_##NAME>(p);                   \
        return;
    switch (p.src_dtype) {
        DCPK_DTYPES(DCPK_MERGE_FROM_)
    default:
        return;
    }
#undef DCPK_MERGE_FROM_
}

} // namespace dcpk

/** Work item = (token, kv head): writes its K row and, unless MLA, its V row. */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_kv_append) dcpk_kv_append(const dcpk_kv_append_params p)
{
    if (p.block_size == 0 || !dcpk_act_dtype_ok(p.src_dtype))
        return;
    const int64_t *slots = reinterpret_cast<const int64_t *>(p.slots);
    const uint64_t items = (uint64_t)p.num_tokens * p.num_kv_heads;
    for (uint64_t item = dcpk::block_linear(); item < items; item += dcpk::grid_blocks()) {
        const uint64_t tok = item / p.num_kv_heads;
        const uint32_t head = (uint32_t)(item % p.num_kv_heads);
        const int64_t slot = slots[tok];
        if (slot < 0)
            continue;
        dcpk::store_row(p.k_cache, dcpk_kv_row_index(slot, head, p.num_kv_heads, p.block_size, p.k_dim), p.k_src,
                        item * p.k_dim, p.src_dtype, p.k_dim, p.dtype, p.inv_scale);
        if (p.v_cache != 0)
            dcpk::store_row(p.v_cache, dcpk_kv_row_index(slot, head, p.num_kv_heads, p.block_size, p.v_dim),
                            p.v_src, item * p.v_dim, p.src_dtype, p.v_dim, p.dtype, p.inv_scale);
    }
}

/** Work item = row of dst[rows][heads][dim]: amplitude * dcpk_synth_unit, converted. */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_fill) dcpk_fill(const dcpk_fill_params p)
{
    const uint64_t row_len = (uint64_t)p.heads * p.dim;
    const uint64_t *keys = reinterpret_cast<const uint64_t *>(p.row_keys);
    for (uint64_t row = dcpk::block_linear(); row < p.rows; row += dcpk::grid_blocks()) {
        const uint64_t key = keys ? keys[row] : p.key_base + row;
        for (uint64_t i = threadIdx.x; i < row_len; i += blockDim.x) {
            const uint32_t head = (uint32_t)(i / p.dim), d = (uint32_t)(i % p.dim);
            float v = p.amplitude * dcpk_synth_unit(p.seed, key, p.head_offset + head, d);
            if (dcpk_dtype_scaled(p.dtype))
                v *= p.inv_scale;
            dcpk::store_as(p.dst, row * row_len + i, p.dtype, v);
        }
    }
}

/* At least 8 blocks per SM: without a minimum ptxas held the entry to 32 registers
 * and spilled. */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_merge, 8) dcpk_merge(const dcpk_merge_params p)
{
    dcpk::merge_rows<dcpk::MergeMutant::none>(p);
}

/**
 * Work item = row: scales this rank's partial output row by exp(lse_self - Lambda)
 * (sets it to 0 where this rank's LSE is -inf: an empty shard) and records Lambda
 * for its own chunk.
 */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_lse_scale) dcpk_lse_scale(const dcpk_lse_scale_params p)
{
    static __shared__ float shared_w;
    static __shared__ bool shared_empty;
    if (!dcpk_act_dtype_ok(p.o_dtype))
        return;
    const float *lse_all = reinterpret_cast<const float *>(p.lse_all);
    for (uint64_t row = dcpk::block_linear(); row < p.rows; row += dcpk::grid_blocks()) {
        if (threadIdx.x == 0) {
            const float total = dcpk_merge_lambda(lse_all + row, p.n_src, p.rows);
            const float own = lse_all[(uint64_t)p.self * p.rows + row];
            shared_empty = dcpk_lse_empty(own);
            shared_w = dcpk_merge_weight(own, total);
            const uint64_t own_first = (uint64_t)p.own_chunk * p.rows_per_chunk;
            if (p.out_lse != 0 && row >= own_first && row < own_first + p.rows_per_chunk)
                reinterpret_cast<float *>(p.out_lse)[row - own_first] = total;
        }
        __syncthreads();
        const float w = shared_w;
        const bool none = shared_empty;
        const void *o = reinterpret_cast<const void *>(p.o);
        for (uint32_t d = threadIdx.x; d < p.v_dim; d += blockDim.x) {
            const uint64_t i = row * p.v_dim + d;
            // even at weight 0: a NaN in o shows; an empty row is 0, never 0 * o
            dcpk::store_as(p.o, i, p.o_dtype, none ? 0.f : dcpk_load_as_f32(o, i, p.o_dtype) * w);
        }
        __syncthreads();
    }
}

/** Work item = 1024-element block of dst: dst[i] = sum of the sources in order. */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_reduce) dcpk_reduce(const dcpk_reduce_params p)
{
    constexpr uint64_t kItem = 1024;
    if (!dcpk_act_dtype_ok(p.dtype))
        return;
    const uint64_t *srcs = reinterpret_cast<const uint64_t *>(p.src_ptrs);
    const uint64_t items = (p.count + kItem - 1) / kItem;
    for (uint64_t item = dcpk::block_linear(); item < items; item += dcpk::grid_blocks()) {
        const uint64_t end = min((item + 1) * kItem, p.count);
        for (uint64_t i = item * kItem + threadIdx.x; i < end; i += blockDim.x) {
            float acc = 0.f;
            for (uint32_t s = 0; s < p.n_src; s++)
                acc += dcpk_load_as_f32(reinterpret_cast<const void *>(srcs[s]), p.src_offset + i, p.dtype);
            dcpk::store_as(p.dst, i, p.dtype, acc);
        }
    }
}

/**
 * Work item = gathered head: its tokens' latent rows times its W_UV. Threads own
 * output columns j (W rows are read coalesced); tokens go kTokens at a time, so
 * each W element read serves kTokens rows. Sums over i ascending in fp32, as the CPU
 * does, and stores in dst_dtype (one rounding).
 */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_uv_proj) dcpk_uv_proj(const dcpk_uv_proj_params p)
{
    constexpr uint32_t kTokens = 4;
    if (p.heads_per_chunk == 0 || !dcpk_act_dtype_ok(p.dst_dtype))
        return;
    const float *w_all = reinterpret_cast<const float *>(p.w);
    for (uint64_t g = dcpk::block_linear(); g < p.num_heads; g += dcpk::grid_blocks()) {
        const uint64_t c = g / p.heads_per_chunk, h = g % p.heads_per_chunk;
        const float *w = w_all + g * p.in_dim * p.out_dim;
        for (uint32_t t0 = 0; t0 < p.num_tokens; t0 += kTokens) {
            const uint32_t n = min(p.num_tokens - t0, kTokens);
            const float *x[kTokens];
            uint64_t y[kTokens]; // element index of each row in dst (dst_dtype)
            for (uint32_t k = 0; k < kTokens; k++) {
                const uint64_t row = (uint64_t)(t0 + (k < n ? k : 0)) * p.heads_per_chunk + h;
                x[k] = reinterpret_cast<const float *>(p.src) + c * p.src_chunk_stride + row * p.in_dim;
                y[k] = c * p.dst_chunk_stride + row * p.out_dim;
            }
            for (uint32_t j = threadIdx.x; j < p.out_dim; j += blockDim.x) {
                float acc[kTokens] = {0.f, 0.f, 0.f, 0.f};
                for (uint32_t i = 0; i < p.in_dim; i++) {
                    const float wij = w[(uint64_t)i * p.out_dim + j];
#pragma unroll
                    for (uint32_t k = 0; k < kTokens; k++)
                        acc[k] += x[k][i] * wij;
                }
                for (uint32_t k = 0; k < n; k++)
                    dcpk::store_as(p.dst, y[k] + j, p.dst_dtype, acc[k]); // the one rounding
            }
        }
    }
}

/** The per-head attention sink, applied once to merged rows (dcpk::sink_rows). */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_sink) dcpk_sink(const dcpk_sink_params p)
{
    dcpk::sink_rows<dcpk::SinkMutant::none>(p);
}

#endif /* DCPK_ROWS_CUH */
