/*
 * index.cuh: the DeepSeek Sparse Attention indexer (params.h): dcpk_index_score,
 * the ReLU-weighted scores of a token's index queries against this rank's shard of
 * the index-key cache, and dcpk_topk, the top-k of (score, position) candidates
 * (the local top-k of those scores, and the merge of the DCP group's gathered local
 * top-ks into the global one). One entry each ("dcpk_<family>"), walking params.h's
 * work items with a grid-stride loop like rows.cuh; block sizes: DCPK_SIMPLE_KERNELS.
 *
 * Both give the CPU implementations' results bit for bit (ptx/cpu/index_score.c,
 * topk.c), so a rank's GPU indexer and the host backend pick the same tokens:
 *   - index_score sums in the CPU's order with one rounding per operation (fp32,
 *     no contraction into FMAs: fmul_rn/fadd_rn): each dot product over d
 *     ascending, then the weighted ReLUs over the index heads ascending. SIMT: a
 *     thread per (key, quad of heads) shares each key element it decodes among the
 *     quad's four dot products; the weighted terms meet in shared memory and one
 *     thread per key adds them in head order.
 *   - topk's order is total on valid candidates (a higher score, then a lower
 *     position): candidates become 64-bit keys ordered the same way, a radix
 *     select (8-bit digits, most significant first, stopping as soon as the cut is
 *     exact) finds the k-th best, the selected keys are sorted in shared memory
 *     (bitonic) and written best first, padded with (-inf, -1). k above one
 *     round's capacity takes further rounds below the last key written.
 */
#ifndef DCPK_INDEX_CUH
#define DCPK_INDEX_CUH

#include "dcp_kernels/convert.h"
#include "dcp_kernels/paged.h"
#include "dcp_kernels/params.h"
#include "dcp_kernels/placement.h"
#include "dcp_kernels/variants.h"
#include "device.cuh"
#include "rows.cuh"

namespace dcpk {

/* ---- dcpk_index_score ------------------------------------------------------- */

/** Floats of index queries staged per round: a chunk of whole heads (index_dim <= this). */
constexpr uint32_t kIndexQFloats = DCPK_INDEX_SCORE_MAX_DIM;
/** Most heads per chunk: the weighted terms of a chunk, [key][head], wait in shared memory. */
constexpr uint32_t kIndexChunkHeads = 32;
/** Threads per key of a tile: each takes every kIndexGroups-th quad of heads. */
constexpr uint32_t kIndexGroups = kBlock_index_score / DCPK_INDEX_TILE;
static_assert(kIndexGroups * DCPK_INDEX_TILE == (uint32_t)kBlock_index_score, "threads = keys x head groups");

/**
 * Deliberate bugs of index_score and topk, for tests/kernels_build to prove that
 * its emulated tests catch them (the fatbin instantiates none only): no_relu drops
 * the ReLU, sum_unordered adds a key's weighted terms in another order than the
 * CPU's (the scores then differ in their last bits: a tie broken differently),
 * no_barrier drops the barrier after topk's digit histogram, ties_high_first
 * breaks equal scores by the higher position instead of the lower.
 */
enum class IndexMutant { none, no_relu, sum_unordered, no_barrier, ties_high_first };

/** Work item = (tile x of DCPK_INDEX_TILE local keys, query token t), params.h. */
template <IndexMutant M>
__device__ __forceinline__ void index_score_items(const dcpk_index_score_params &p)
{
    static __shared__ float q_s[kIndexQFloats];                       // a chunk of heads' queries [head][d]
    static __shared__ float term_s[DCPK_INDEX_TILE * kIndexChunkHeads]; // [key][head of the chunk]
    const uint32_t D = p.index_dim, H = p.num_index_heads;
    if (!dcpk_act_dtype_ok(p.q_dtype) || p.batch == 0 || D == 0 || D > kIndexQFloats || p.block_size == 0 ||
        p.group_size == 0 || p.interleave == 0)
        return;
    const uint64_t tiles = (p.score_stride + DCPK_INDEX_TILE - 1) / DCPK_INDEX_TILE;
    const uint64_t gx = tiles ? tiles : 1;
    const uint32_t hc = min(kIndexQFloats / D, kIndexChunkHeads); // heads per chunk
    const int32_t *q_start = reinterpret_cast<const int32_t *>(p.q_start);
    const int32_t *seq_lens = reinterpret_cast<const int32_t *>(p.seq_lens);
    const float *w = reinterpret_cast<const float *>(p.weights);
    const float kscale = dcpk_dtype_scaled(p.dtype) ? p.kv_scale : 1.f;
    const uint32_t esize = dcpk_dtype_size(p.dtype);
    const uint32_t k = threadIdx.x % DCPK_INDEX_TILE, hg = threadIdx.x / DCPK_INDEX_TILE;
    for (uint64_t item = block_linear(); item < gx * p.num_q_tokens; item += grid_blocks()) {
        const uint32_t x = (uint32_t)(item % gx), t = (uint32_t)(item / gx);
        const uint32_t b = dcpk_token_sequence(q_start, p.batch, t);
        const int64_t pos = dcpk_token_position(seq_lens, q_start, b, t);
        uint64_t n = pos < 0 ? 0 : dcpk_local_length((uint64_t)pos + 1, p.rank, p.group_size, p.interleave);
        n = n < p.score_stride ? n : p.score_stride;
        if (x == 0 && threadIdx.x == 0)
            reinterpret_cast<int32_t *>(p.score_lens)[t] = (int32_t)n;
        const uint64_t c0 = (uint64_t)x * DCPK_INDEX_TILE;
        if (c0 >= n)
            continue; // block-uniform
        const uint64_t c = c0 + k;
        const bool live = c < n;
        const char *key = nullptr;
        if (live) {
            const int32_t *table = reinterpret_cast<const int32_t *>(p.block_table) + (uint64_t)b * p.max_blocks;
            const uint64_t slot = (uint64_t)(uint32_t)table[c / p.block_size] * p.block_size + c % p.block_size;
            key = reinterpret_cast<const char *>(p.k_cache) + dcpk_kv_row_index(slot, 0, 1, p.block_size, D) * esize;
        }
        float score = 0.f;
        for (uint32_t j0 = 0; j0 < H; j0 += hc) {
            const uint32_t nh = min(hc, H - j0);
            __syncthreads(); // the previous chunk's queries and terms are used
            const void *q = reinterpret_cast<const void *>(p.q);
            for (uint32_t i = threadIdx.x; i < nh * D; i += blockDim.x)
                q_s[i] = dcpk_load_as_f32(q, ((uint64_t)t * H + j0) * D + i, p.q_dtype);
            __syncthreads();
            // This thread's quads of heads: 4 dot products per decoded key element.
            for (uint32_t h = 4 * hg; live && h < nh; h += 4 * kIndexGroups) {
                float dot[4] = {0.f, 0.f, 0.f, 0.f};
                for (uint32_t d = 0; d < D; d++) {
                    const float kf = fmul_rn(dcpk_load_as_f32(key, d, p.dtype), kscale);
#pragma unroll
                    for (uint32_t i = 0; i < 4; i++)
                        if (h + i < nh)
                            dot[i] = fadd_rn(dot[i], fmul_rn(q_s[(h + i) * D + d], kf));
                }
#pragma unroll
                for (uint32_t i = 0; i < 4; i++) {
                    // max(0, NaN) stays NaN: a NaN key or query is not a zero score.
                    const float r = M == IndexMutant::no_relu || dot[i] > 0.f || dot[i] != dot[i] ? dot[i] : 0.f;
                    if (h + i < nh)
                        term_s[k * hc + h + i] = fmul_rn(w[(uint64_t)t * H + j0 + h + i], r);
                }
            }
            __syncthreads();
            if (hg == 0 && live) {
                if constexpr (M == IndexMutant::sum_unordered) {
                    for (uint32_t h = nh; h-- > 0;)
                        score = fadd_rn(score, term_s[k * hc + h]);
                } else {
                    for (uint32_t h = 0; h < nh; h++) // head order, as the CPU adds them
                        score = fadd_rn(score, term_s[k * hc + h]);
                }
            }
        }
        if (hg == 0 && live)
            reinterpret_cast<float *>(p.scores)[(uint64_t)t * p.score_stride + c] = score;
        __syncthreads(); // shared memory free for the next item
    }
}

/* ---- dcpk_topk --------------------------------------------------------------------- */

/** Keys one round of topk selects and sorts in shared memory (a power of two). */
constexpr uint32_t kTopkRound = 2048;

/**
 * The 64-bit key of a candidate: a larger key goes first. High word: the score's
 * bits mapped to an unsigned order (-0 read as +0: equal scores); low word: the
 * position reversed (a lower position is larger) shifted left, and bit 0 set for a
 * -0 score (so its sign survives the round trip). 0 for a candidate that is not
 * one (NaN or -inf score, position outside [0, INT32_MAX]); every valid key is > 0.
 */
template <IndexMutant M>
__device__ __forceinline__ uint64_t topk_key(float score, uint64_t pos)
{
    uint32_t u = __float_as_uint(score);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u || u == 0xff800000u || pos > 0x7fffffffu)
        return 0; // NaN, -inf, or padding
    const uint32_t negzero = u == 0x80000000u;
    if (negzero)
        u = 0;
    const uint32_t hi = u & 0x80000000u ? ~u : u | 0x80000000u;
    const uint32_t order = M == IndexMutant::ties_high_first ? (uint32_t)pos : 0x7fffffffu - (uint32_t)pos;
    const uint32_t lo = order << 1 | negzero;
    return (uint64_t)hi << 32 | lo;
}

/** The score of a key (its own bits, -0 included). */
__device__ __forceinline__ float topk_key_score(uint64_t key)
{
    const uint32_t hi = (uint32_t)(key >> 32);
    if (key & 1u)
        return __uint_as_float(0x80000000u);
    return __uint_as_float(hi & 0x80000000u ? hi & 0x7fffffffu : ~hi);
}

/** The position of a key. */
template <IndexMutant M>
__device__ __forceinline__ int32_t topk_key_position(uint64_t key)
{
    const uint32_t order = (uint32_t)key >> 1;
    return (int32_t)(M == IndexMutant::ties_high_first ? order : 0x7fffffffu - order);
}

/** Where one row's candidates are (params.h): sources of len entries. */
struct TopkRow {
    const float *scores;
    const int32_t *positions; // null: local keys (positions from the placement map)
    uint64_t row;
    uint32_t len;
};

/** The key of entry e of source s of the row. */
template <IndexMutant M>
__device__ __forceinline__ uint64_t topk_candidate(const dcpk_topk_params &p, const TopkRow &r, uint32_t s, uint32_t e)
{
    const uint64_t at = s * p.src_stride + r.row * p.row_stride + e;
    const uint64_t pos = r.positions ? (uint64_t)(int64_t)r.positions[at]
                                     : dcpk_global_position(e, p.rank, p.group_size, p.interleave);
    return topk_key<M>(r.scores[at], pos);
}

/**
 * Calls f(key) for every valid candidate of the row below `bound` (this thread's
 * share: entries threadIdx.x, + blockDim.x, ...).
 */
template <IndexMutant M, class F>
__device__ __forceinline__ void topk_each(const dcpk_topk_params &p, const TopkRow &r, uint64_t bound, F &&f)
{
    for (uint32_t s = 0; s < p.n_src; s++)
        for (uint32_t e = threadIdx.x; e < r.len; e += blockDim.x) {
            const uint64_t key = topk_candidate<M>(p, r, s, e);
            if (key != 0 && key < bound)
                f(key);
        }
}

/** Work item = row: the best min(k, valid) candidates, best first, then (-inf, -1). */
template <IndexMutant M>
__device__ __forceinline__ void topk_rows(const dcpk_topk_params &p)
{
    static __shared__ uint64_t keys[kTopkRound];
    static __shared__ uint32_t hist[256];
    static __shared__ uint64_t cut_prefix; // the selection: keys whose top bits are >= cut_prefix at cut_shift...
    static __shared__ uint32_t cut_shift, cut_exact, cut_ties; // ...all of them if exact, else cut_ties of the equal ones
    static __shared__ uint32_t n_avail, n_sel, n_taken_ties; // valid candidates; collection counters
    const int32_t *row_lens = reinterpret_cast<const int32_t *>(p.row_lens);
    float *out_scores = reinterpret_cast<float *>(p.out_scores);
    int32_t *out_pos = reinterpret_cast<int32_t *>(p.out_positions);
    if (p.positions == 0 && (p.group_size == 0 || p.interleave == 0))
        return; // local keys need the placement map's divisors
    for (uint64_t row = block_linear(); row < p.rows; row += grid_blocks()) {
        TopkRow r;
        r.scores = reinterpret_cast<const float *>(p.scores);
        r.positions = reinterpret_cast<const int32_t *>(p.positions);
        r.row = row;
        r.len = p.n_entries;
        if (row_lens)
            r.len = row_lens[row] < 0 ? 0u : min((uint32_t)row_lens[row], p.n_entries);
        uint64_t bound = ~0ull; // rounds select below the last key written
        uint32_t written = 0;
        while (written < p.k) {
            const uint32_t need = min(p.k - written, kTopkRound);
            // Radix select: the `need` largest keys below bound, 8 bits at a time.
            uint64_t prefix = 0;
            uint32_t remaining = need, shift = 64, exact = 0;
            while (shift > 0) {
                const uint32_t digit_shift = shift - 8;
                for (uint32_t i = threadIdx.x; i < 256; i += blockDim.x)
                    hist[i] = 0;
                __syncthreads();
                topk_each<M>(p, r, bound, [&](uint64_t key) {
                    if (shift == 64 || key >> shift == prefix)
                        atomicAdd(&hist[(uint32_t)(key >> digit_shift) & 0xffu], 1u);
                });
                if constexpr (M != IndexMutant::no_barrier)
                    __syncthreads();
                if (threadIdx.x == 0) {
                    uint32_t total = 0, above = 0, d = 256;
                    for (uint32_t i = 0; i < 256; i++)
                        total += hist[i];
                    if (shift == 64)
                        n_avail = total;
                    while (d > 0 && above + hist[d - 1] < remaining) // digits wholly above the cut
                        above += hist[--d];
                    if (d == 0) { // fewer candidates than wanted: take them all
                        cut_exact = 1;
                        cut_prefix = prefix;
                        cut_shift = shift;
                    } else {
                        d--;
                        cut_prefix = prefix << 8 | d;
                        cut_shift = digit_shift;
                        cut_exact = above + hist[d] == remaining;
                        cut_ties = remaining - above; // wanted among the keys at the cut
                    }
                    n_sel = 0;
                    n_taken_ties = 0;
                }
                __syncthreads();
                prefix = cut_prefix;
                exact = cut_exact;
                if (exact || cut_shift != digit_shift)
                    break;
                remaining = cut_ties;
                shift = digit_shift;
                __syncthreads(); // hist and the cut are read above before they are written again
            }
            // Collect the selection: keys above the cut, and at the cut all of them
            // (exact) or the first cut_ties met (equal keys: any of them is the same).
            const uint32_t nsel = min(need, n_avail);
            const uint32_t cshift = cut_shift;
            topk_each<M>(p, r, bound, [&](uint64_t key) {
                const uint64_t top = cshift == 64 ? 0 : key >> cshift;
                bool take = cshift == 64 || top > prefix || (top == prefix && exact);
                if (!take && top == prefix)
                    take = atomicAdd(&n_taken_ties, 1u) < cut_ties;
                if (take)
                    keys[atomicAdd(&n_sel, 1u)] = key;
            });
            __syncthreads();
            // Bitonic sort, largest first, of the selection padded with 0 to a power of two.
            uint32_t n = 1;
            while (n < nsel)
                n *= 2;
            for (uint32_t i = nsel + threadIdx.x; i < n; i += blockDim.x)
                keys[i] = 0;
            __syncthreads();
            for (uint32_t size = 2; size <= n; size *= 2)
                for (uint32_t stride = size / 2; stride > 0; stride /= 2) {
                    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
                        const uint32_t j = i ^ stride;
                        if (j > i) {
                            const uint64_t a = keys[i], b = keys[j];
                            const bool descending = (i & size) == 0;
                            if (descending ? a < b : a > b) {
                                keys[i] = b;
                                keys[j] = a;
                            }
                        }
                    }
                    __syncthreads();
                }
            for (uint32_t i = threadIdx.x; i < nsel; i += blockDim.x) {
                out_scores[row * p.k + written + i] = topk_key_score(keys[i]);
                out_pos[row * p.k + written + i] = topk_key_position<M>(keys[i]);
            }
            written += nsel;
            if (nsel < need) // no candidate left
                break;
            bound = keys[nsel - 1];
            __syncthreads(); // keys are read above before the next round writes them
        }
        for (uint32_t i = written + threadIdx.x; i < p.k; i += blockDim.x) {
            out_scores[row * p.k + i] = neg_inf();
            out_pos[row * p.k + i] = -1;
        }
        __syncthreads(); // shared state free for the next row
    }
}

} // namespace dcpk

/** DSA indexer scores of this rank's shard (dcpk::index_score_items). */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_index_score)
    dcpk_index_score(const dcpk_index_score_params p)
{
    dcpk::index_score_items<dcpk::IndexMutant::none>(p);
}

/** Top-k of (score, position) candidates per row (dcpk::topk_rows). */
extern "C" __global__ void __launch_bounds__(dcpk::kBlock_topk) dcpk_topk(const dcpk_topk_params p)
{
    dcpk::topk_rows<dcpk::IndexMutant::none>(p);
}

#endif /* DCPK_INDEX_CUH */
