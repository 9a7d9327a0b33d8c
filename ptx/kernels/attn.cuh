/*
 * attn.cuh: paged decode attention (params.h, struct dcpk_attn_params), one block
 * per work item (split s, KV head k, head tile j, sequence b) of the grid
 * (num_splits, num_kv_heads * head_tiles, batch); blockIdx.y = k * head_tiles + j.
 *
 * A block serves all query rows of its work item (head_tile heads x the sequence's
 * query tokens, row = token * heads_in_tile + head) in passes of ROWS rows. In a
 * pass every KV tile (TK tokens, possibly from several pages) is read from global
 * memory once, with 16-byte cp.async copies double-buffered in shared memory, and
 * used by all rows of the pass:
 *   1. scores  S[ROWS][TK] = Q . K^T: each thread owns a 4x4 micro-tile and a 1/KS
 *              share of the qk reduction (16-byte K chunks, float4 Q pieces), then
 *              the KS partial sums meet through warp shuffles;
 *   2. softmax online, in the log2 domain (log2(e) and the softmax scale are folded
 *              into Q when it is staged), masked per row in local indices: local key
 *              c is visible to a query at global position p iff
 *              c < dcpk_local_length(p + 1) (global positions grow with c);
 *   3. P . V   each thread accumulates OR rows x one 16-byte V chunk in registers;
 *              a row adds only the keys it sees (never 0 * V of a masked key).
 * A row that sees no key of the split (decided from the lengths), or whose visible
 * scores are all -inf, gets LSE -inf and output 0; a row whose accumulators or sum
 * are not finite (a NaN or an infinity reached it) gets NaN in its LSE and in every
 * output element (params.h, docs/design.md §4). LSE leaves in natural log:
 * (m2 + log2 l) * ln 2. Queries are read in q_dtype and converted as they are
 * staged; outputs are rounded to out_dtype as they are stored (attn_load_q /
 * attn_store_o, shared with the tensor-core entries); the split workspace is fp32.
 */
#ifndef DCPK_ATTN_CUH
#define DCPK_ATTN_CUH

#include "dcp_kernels/convert.h"
#include "dcp_kernels/paged.h"
#include "dcp_kernels/params.h"
#include "dcp_kernels/placement.h"
#include "dcp_kernels/variants.h"
#include "device.cuh"
#include "merge.cuh"
#include "mma.cuh"

extern __shared__ __align__(16) unsigned char dcpk_smem[];

namespace dcpk {

/** Compile-time plan of one attention entry (DCPK_ATTN_VARIANTS row). */
template <int QK, int DV, int SHARED, uint32_t DT, int NT, int ROWS, int TK>
struct AttnCfg {
    static constexpr int kQK = QK, kDV = DV, kShared = SHARED, kNT = NT, kRows = ROWS, kTK = TK;
    static constexpr uint32_t kDtype = DT;
    static constexpr int kEsize = elem_bytes<DT>();
    static constexpr bool kScaled = elem_scaled<DT>(); // fp8: read back x kv_scale
    static constexpr int kCE = 16 / kEsize;   // elements per 16-byte chunk
    static constexpr int kPieces = kCE / 4;   // float4 pieces per chunk
    static constexpr int kNchK = DCPK_ATTN_CHUNKS(QK, kEsize);
    static constexpr int kNchV = DCPK_ATTN_CHUNKS(DV, kEsize);

    // Score phase: thread = (row group of 4, token group, qk share ks).
    static constexpr int kTG = TK / 4;
    static constexpr int kKS = DCPK_ATTN_KSPLIT(NT, ROWS, TK);
    static constexpr int kKSteps = (kNchK + kKS - 1) / kKS;
    static constexpr int kRowK = DCPK_ATTN_KROW_CHUNKS(QK, kEsize, kKS); // chunks per K row in smem
    static constexpr int kRowV = SHARED ? kRowK : kNchV;                // chunks per V row in smem

    // Softmax phase: kTPR consecutive lanes per row; S rows are kSS floats apart.
    static constexpr int kTPR = NT / ROWS;
    static constexpr int kSS = DCPK_ATTN_S_STRIDE(TK);

    // P.V phase: thread = (row group of kOR rows, V chunk); threads past kRG * kDG idle.
    static constexpr int kDG = kNchV;
    static constexpr int kRG = NT / kDG < ROWS ? NT / kDG : ROWS;
    static constexpr int kOR = ROWS / kRG;

    // Shared memory carve-up (bytes), the same arithmetic the host reads in variants.h.
    static constexpr uint32_t kOffK = 0;
    static constexpr uint32_t kOffV = kOffK + DCPK_ATTN_SMEM_K(QK, kEsize, NT, ROWS, TK);
    static constexpr uint32_t kOffQ = kOffV + DCPK_ATTN_SMEM_V(DV, SHARED, kEsize, TK);
    static constexpr uint32_t kOffS = kOffQ + DCPK_ATTN_SMEM_Q(QK, ROWS);
    static constexpr uint32_t kOffRows = kOffS + DCPK_ATTN_SMEM_S(ROWS, TK);
    static constexpr uint32_t kSmem = kOffRows + DCPK_ATTN_SMEM_ROWS(ROWS);
    static constexpr uint32_t kSparseCap = DCPK_SPARSE_CAP(NT, TK); // keys of a sparse entry's list (after kSmem)

    static_assert(QK * kEsize % 16 == 0 && DV * kEsize % 16 == 0, "rows must be whole 16-byte chunks");
    static_assert(ROWS % 4 == 0 && TK % 4 == 0, "4x4 score micro-tiles");
    static_assert(kKS >= 1 && kKS <= 32 && (kKS & (kKS - 1)) == 0, "qk split is a power of two");
    static_assert((ROWS / 4) * kTG * kKS == NT, "score micro-tiles cover the block");
    static_assert(kTG * kKS % 32 == 0, "a score row group fills whole warps");
    static_assert(kKS <= kNchK, "every qk share has work");
    static_assert(kTPR >= 1 && kTPR <= 32 && (kTPR & (kTPR - 1)) == 0 && NT == ROWS * kTPR,
                  "softmax lanes per row");
    static_assert(TK % kTPR == 0, "softmax covers the tile");
    static_assert(kSS % 4 == 0, "P rows hold whole float4s");
    static_assert(kDG <= NT && ROWS % kRG == 0, "P.V tiling");
    static_assert(SHARED ? DV <= QK : kNchK == kNchV, "V shape");
    static_assert(kSmem == DCPK_ATTN_SMEM_BYTES(QK, DV, SHARED, kEsize, NT, ROWS, TK), "smem plan");
};

/** Where a work item's rows come from and go to (per block, in registers). */
struct AttnItem {
    uint32_t split, kv_head, head0, nheads, q0, nq;
    int64_t seq_len;
    uint64_t lo, hi;       // local-index range of this split's keys [lo, hi)
    const int32_t *pages;  // this sequence's block table row
};

/** Addresses of row r of the query, output and LSE arrays (chunked layout), and the row dtypes. */
struct RowAddr {
    uint64_t q, o, lse;       // byte addresses of the rows
    uint32_t q_dtype, o_dtype; // q_dtype; out_dtype, or fp32 for the split workspace
};

/** An activation dtype as a compile-time constant (with_act_dtype). */
template <uint32_t DT>
struct ActDtype {
    static constexpr uint32_t value = DT;
};

/**
 * Calls f(ActDtype<DT>{}) with DT = dtype (fp32, bf16 or fp16; the launch check and
 * attn_launch_ok refuse others), so a loop of loads or stores inside f converts with
 * no branch per element. dtype is the same in every thread: the branch is uniform.
 */
template <class F>
__device__ __forceinline__ void with_act_dtype(uint32_t dtype, F &&f)
{
    switch (dtype) {
    case DCPK_BF16:
        f(ActDtype<DCPK_BF16>{});
        break;
    case DCPK_FP16:
        f(ActDtype<DCPK_FP16>{});
        break;
    default:
        f(ActDtype<DCPK_FP32>{});
        break;
    }
}

/**
 * Elements d, d + 1 of the query row at byte address q of dtype dt, as fp32 (exact):
 * the tensor-core entries' Q fragments take pairs. One code path for every dtype
 * (the selects are uniform): per-dtype copies of their staging loops cost the MLA
 * entry registers it does not have (with_act_dtype there made ptxas spill).
 */
__device__ __forceinline__ float2 attn_load_q2(uint64_t q, uint32_t dt, uint64_t d)
{
    if (dt == DCPK_FP32) {
        const float *f = reinterpret_cast<const float *>(q) + d;
        return make_float2(f[0], f[1]);
    }
    const uint16_t *h = reinterpret_cast<const uint16_t *>(q) + d;
    const uint32_t w = (uint32_t)h[0] | (uint32_t)h[1] << 16;
    if (dt == DCPK_BF16)
        return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    return __half22float2(half2_bits(w));
}

/** Element d of a query row of dtype DT (= a.q_dtype), as fp32 (exact). */
template <uint32_t DT>
__device__ __forceinline__ float attn_load_q(const RowAddr &a, uint64_t d)
{
    return dcpk_load_as_f32(reinterpret_cast<const void *>(a.q), d, DT);
}

/** Stores element d of an output row of dtype DT (= a.o_dtype), rounded to it. */
template <uint32_t DT>
__device__ __forceinline__ void attn_store_o(const RowAddr &a, uint64_t d, float v)
{
    store_as(a.o, d, DT, v);
}

/**
 * The split-KV workspace part of attn_row_addr: a dcpk_attn launch with num_splits > 1
 * writes its partials there (the chunk's rows of split it.split); false otherwise,
 * and always for dcpk_sparse_attn, which never splits.
 */
template <int DV>
__device__ __forceinline__ bool attn_ws_addr(const dcpk_attn_params &p, const AttnItem &it, uint64_t c,
                                             uint64_t in_chunk, RowAddr &a)
{
    if (p.num_splits == 1)
        return false;
    const uint64_t rows_per_chunk = (uint64_t)p.num_q_tokens * p.heads_per_chunk;
    a.o_dtype = DCPK_FP32;
    a.o = p.ws_o + 4 * (it.split * p.ws_split_stride_o + (c * rows_per_chunk + in_chunk) * DV);
    a.lse = p.ws_lse + 4 * (it.split * p.ws_split_stride_lse + c * rows_per_chunk + in_chunk);
    return true;
}

template <int DV>
__device__ __forceinline__ bool attn_ws_addr(const dcpk_sparse_attn_params &, const AttnItem &, uint64_t, uint64_t,
                                             RowAddr &)
{
    return false;
}

/**
 * Addresses of row `row` (counted over the work item's rows) in q, out/lse or the split
 * workspace. P: dcpk_attn_params or dcpk_sparse_attn_params (the same chunked layout).
 */
template <int QK, int DV, class P>
__device__ __forceinline__ RowAddr attn_row_addr(const P &p, const AttnItem &it, uint32_t row)
{
    const uint32_t tok = it.q0 + row / it.nheads;
    const uint32_t g = it.head0 + row % it.nheads;
    const uint64_t c = g / p.heads_per_chunk;
    const uint64_t in_chunk = (uint64_t)tok * p.heads_per_chunk + g % p.heads_per_chunk;
    RowAddr a;
    a.q_dtype = p.q_dtype;
    a.q = p.q + dcpk_dtype_size(p.q_dtype) * (c * p.q_chunk_stride + in_chunk * QK);
    if (!attn_ws_addr<DV>(p, it, c, in_chunk, a)) {
        a.o_dtype = p.out_dtype;
        a.o = p.out + dcpk_dtype_size(p.out_dtype) * (c * p.out_chunk_stride + in_chunk * DV);
        a.lse = p.lse + 4 * (c * p.lse_chunk_stride + in_chunk);
    }
    return a;
}

/** Keys of the split that row `row` sees: [lo, lo + count). */
__device__ __forceinline__ uint32_t attn_visible_count(const dcpk_attn_params &p, const AttnItem &it, uint32_t row)
{
    const int64_t pos = it.seq_len - (int64_t)it.nq + (int64_t)(row / it.nheads);
    if (pos < 0)
        return 0;
    const uint64_t end = min(it.hi, dcpk_local_length((uint64_t)pos + 1, p.rank, p.group_size, p.interleave));
    return end > it.lo ? (uint32_t)(end - it.lo) : 0u;
}

/**
 * Local index of the first key a query at global position pos sees: the start of its
 * sliding window (params.h: the rank's keys at positions > pos - window); 0 without one.
 */
__device__ __forceinline__ uint64_t attn_window_first(const dcpk_attn_params &p, int64_t pos)
{
    const int64_t from = pos + 1 - (int64_t)p.window;
    return p.window && from > 0 ? dcpk_local_length((uint64_t)from, p.rank, p.group_size, p.interleave) : 0;
}

/** Keys of the split before the first one row `row` sees (its window's start, within [lo, hi]); 0 without a window. */
__device__ __forceinline__ uint32_t attn_visible_begin(const dcpk_attn_params &p, const AttnItem &it, uint32_t row)
{
    if (!p.window)
        return 0;
    const int64_t pos = it.seq_len - (int64_t)it.nq + (int64_t)(row / it.nheads);
    const uint64_t first = min(attn_window_first(p, pos), it.hi);
    return first > it.lo ? (uint32_t)(first - it.lo) : 0u;
}

/**
 * Block-table index of local key index c: a shift for a power-of-two page size (what
 * deployments use), else a division. Taken from params each time, not kept in the
 * work item: a register held through the tile loop makes the SIMT gqa_d256
 * entries (128-register cap) spill.
 */
template <class P>
__device__ __forceinline__ uint32_t attn_page_index(const P &p, uint32_t c)
{
    const uint32_t bs = p.block_size;
    return (bs & (bs - 1)) == 0 ? c >> __popc(bs - 1) : c / bs;
}

/** Block-table rows that are rings of this many pages (dcpk_attn_params.ring_pages); 0: none, and for sparse. */
__device__ __forceinline__ uint32_t attn_ring_pages(const dcpk_attn_params &p)
{
    return p.ring_pages;
}

__device__ __forceinline__ uint32_t attn_ring_pages(const dcpk_sparse_attn_params &)
{
    return 0;
}

/** Cache row (in rows of the layer's pages) of local key index c; with a ring, page (c / block_size) % ring. */
template <class P>
__device__ __forceinline__ uint64_t attn_key_row(const P &p, const AttnItem &it, uint32_t c)
{
    const uint32_t index = attn_page_index(p, c);
    const uint32_t ring = attn_ring_pages(p);
    const uint32_t page = (uint32_t)it.pages[ring ? index % ring : index];
    return ((uint64_t)page * p.num_kv_heads + it.kv_head) * p.block_size + (c - index * p.block_size);
}

/**
 * Deliberate bugs of the key sources, for tests/kernels_build to prove that its
 * emulated tests catch them (the fatbin instantiates none only): no_window drops
 * the window's start (the pass's and every row's), no_owner lists top-k entries of other
 * ranks too, no_wait drops the SIMT block's cp.async wait.
 */
enum class KeysMutant { none, no_window, no_owner, no_wait };

/**
 * The keys of a dcpk_attn work item as the blocks take them: one segment per pass,
 * the split's local indices from the first one a row of the pass sees (base: the
 * window's start of its first row, rows being token-major; lo without a window), so
 * key j of the segment is local index lo + base + j. Each row sees
 * [row_begin, row_end) of the segment (the window's start and the causal end); a
 * row with row_end <= row_begin sees none.
 */
template <KeysMutant M = KeysMutant::none>
struct DenseKeysOf {
    using Params = dcpk_attn_params;
    static constexpr KeysMutant kMutant = M;
    const dcpk_attn_params &p;
    const AttnItem &it;
    uint32_t base = 0;  // the segment's first key, from lo
    uint32_t first = 0; // its local index, lo + base

    __device__ DenseKeysOf(const dcpk_attn_params &params, const AttnItem &item) : p(params), it(item) {}

    /** Prepares segment s of the pass over rows [row0, row0 + n) (every thread calls it): there is one. */
    __device__ bool segment(uint32_t s, uint32_t row0, uint32_t n)
    {
        (void)n;
        base = M == KeysMutant::no_window ? 0u : attn_visible_begin(p, it, row0);
        first = (uint32_t)it.lo + base;
        return s == 0;
    }

    /** The first key of the segment row `row` sees (its window's start; 0 for the pass's first row). */
    __device__ uint32_t row_begin(uint32_t row) const
    {
        return M == KeysMutant::no_window ? 0u : attn_visible_begin(p, it, row) - base;
    }

    /** The keys of the segment row `row` sees: [begin, end). */
    __device__ void row_range(uint32_t row, uint32_t &begin, uint32_t &end) const
    {
        const uint32_t e = attn_visible_count(p, it, row);
        begin = row_begin(row);
        end = e > base ? e - base : 0u;
    }

    /** Cache row of key j of the segment. */
    __device__ uint64_t key_row(uint32_t j) const { return attn_key_row(p, it, first + j); }
};
using DenseKeys = DenseKeysOf<>;

/**
 * The keys of a dcpk_sparse_attn work item (one query token: every row of it sees the
 * same keys): the token's top-k entries this rank owns and the token sees, compacted
 * in row order into a list of local indices in shared memory (at C::kSmem, kCap at a
 * time: a segment per list; DCPK_SPARSE_SMEM_LIST). A segment counts each thread's
 * entries (a contiguous share of the row), ranks them by a scan over the block and
 * writes those of its ranks. Its state lives in shared memory (the list, the warps'
 * counts, the token's and the segment's key counts), so that no register is held
 * through the tile loops.
 */
template <class C, KeysMutant M = KeysMutant::none>
struct SparseKeys {
    using Params = dcpk_sparse_attn_params;
    static constexpr KeysMutant kMutant = M;
    static constexpr uint32_t kCap = C::kSparseCap;
    static constexpr int kWarps = C::kNT / 32;
    const dcpk_sparse_attn_params &p;
    const AttnItem &it;

    __device__ SparseKeys(const dcpk_sparse_attn_params &params, const AttnItem &item) : p(params), it(item) {}

    __device__ static uint32_t *list() { return reinterpret_cast<uint32_t *>(dcpk_smem + C::kSmem); }
    /** The warps' counts of owned entries, then the token's count and the segment's. */
    __device__ static uint32_t *counts() { return list() + kCap; }
    __device__ static uint32_t *total_slot() { return counts() + kWarps; }
    __device__ static uint32_t *segment_slot() { return counts() + kWarps + 1; }

    /** Entry e of the token's row: its local index, or ~0 when it is no key of this rank for the token. */
    __device__ uint32_t entry_key(uint32_t e) const
    {
        const int32_t pos = reinterpret_cast<const int32_t *>(p.topk)[(uint64_t)it.q0 * p.topk_stride + e];
        const int64_t token_pos = it.seq_len - 1; // the item's one query token
        if (pos < 0 || pos > token_pos ||
            (M != KeysMutant::no_owner && dcpk_owner_rank((uint64_t)pos, p.group_size, p.interleave) != p.rank))
            return ~0u;
        return (uint32_t)dcpk_local_index((uint64_t)pos, p.group_size, p.interleave);
    }

    /**
     * Prepares segment s (every thread calls it; barriers inside): false past the last
     * one. Segment 0 always exists (a token with no key: an empty one).
     */
    __device__ bool segment(uint32_t s, uint32_t row0, uint32_t nrows)
    {
        (void)row0;
        (void)nrows;
        if (s > 0 && s * kCap >= smem_load(total_slot()))
            return false; // (the total of segment 0, read after its barrier)
        const uint32_t per = (p.num_topk + C::kNT - 1) / C::kNT;
        const uint32_t e0 = min(threadIdx.x * per, p.num_topk), e1 = min(e0 + per, p.num_topk);
        uint32_t count = 0;
        for (uint32_t e = e0; e < e1; e++)
            count += entry_key(e) != ~0u;
        // Ranks: an inclusive scan over the warp, then the warps' counts in order.
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        uint32_t incl = count;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
            const uint32_t up = __shfl_sync(0xffffffffu, incl, lane >= off ? lane - off : lane);
            incl += lane >= off ? up : 0u;
        }
        __syncthreads(); // the counts of the last segment are read
        if (lane == 31)
            smem_store(counts() + warp, incl);
        __syncthreads();
        uint32_t rank = incl - count, total = 0;
        for (int w = 0; w < kWarps; w++) {
            const uint32_t c = smem_load(counts() + w);
            rank += w < warp ? c : 0u;
            total += c;
        }
        const uint32_t lo = s * kCap, hi = lo + kCap;
        for (uint32_t e = e0; e < e1 && rank < hi && count > 0; e++) {
            const uint32_t c = entry_key(e);
            if (c == ~0u)
                continue;
            if (rank >= lo)
                smem_store(list() + (rank - lo), c);
            rank++;
        }
        if (threadIdx.x == 0) {
            smem_store(total_slot(), total);
            smem_store(segment_slot(), total > lo ? min(total - lo, kCap) : 0u);
        }
        __syncthreads();
        return true;
    }

    /** Every row sees every key of the segment: from the first. */
    __device__ uint32_t row_begin(uint32_t row) const
    {
        (void)row;
        return 0;
    }

    /** Every row sees every key of the segment. */
    __device__ void row_range(uint32_t row, uint32_t &begin, uint32_t &end) const
    {
        (void)row;
        begin = 0;
        end = smem_load(segment_slot());
    }

    /** Cache row of key j of the segment. */
    __device__ uint64_t key_row(uint32_t j) const { return attn_key_row(p, it, smem_load(list() + j)); }
};

/**
 * Cache rows of the keys of one KV tile (the tensor-core entries), looked up once
 * per key and warp instead of once per 16-byte copy: lane l holds the rows of the
 * tile's keys l, l + 32, ... (0 from nload on), one block-table read each (the lanes
 * of one page read the same word: one transaction), and a lane that copies a chunk
 * of key j takes j's row from the lane that looked it up, by shuffle (row()).
 */
template <int TK>
struct TileRows {
    static constexpr int kGroups = (TK + 31) / 32;
    uint32_t lo_[kGroups], hi_[kGroups];

    /** The rows of keys [first, first + nload) of a key source (DenseKeys, SparseKeys). */
    template <class K>
    __device__ TileRows(const K &keys, uint32_t first, uint32_t nload)
    {
        const uint32_t lane = threadIdx.x % 32;
#pragma unroll
        for (int g = 0; g < kGroups; g++) {
            const uint32_t j = lane + 32u * (uint32_t)g;
            const uint64_t r = j < nload ? keys.key_row(first + j) : 0;
            lo_[g] = (uint32_t)r;
            hi_[g] = (uint32_t)(r >> 32);
        }
    }

    __device__ TileRows(const dcpk_attn_params &p, const AttnItem &it, uint32_t base, uint32_t nload)
    {
        const uint32_t lane = threadIdx.x % 32;
#pragma unroll
        for (int g = 0; g < kGroups; g++) {
            const uint32_t j = lane + 32u * (uint32_t)g;
            const uint64_t r = j < nload ? attn_key_row(p, it, base + j) : 0;
            lo_[g] = (uint32_t)r;
            hi_[g] = (uint32_t)(r >> 32);
        }
    }

    /**
     * Row of key j of the tile; g = j / 32, a compile-time constant (group()). Every
     * lane of the warp calls it (a shuffle), also lanes whose copy step is past the tile.
     */
    __device__ uint64_t row(int g, int j) const
    {
        const uint32_t lo = __shfl_sync(0xffffffffu, lo_[g], j % 32);
        const uint32_t hi = __shfl_sync(0xffffffffu, hi_[g], j % 32);
        return (uint64_t)hi << 32 | lo;
    }

    /**
     * The 32-key group of the keys that copy step i reaches when NT threads copy the
     * tile's TK keys x CH chunks in index order (thread t, step i: chunk t + i * NT):
     * 0 for tiles of at most 32 keys, else the step's keys must lie in one group.
     */
    template <int NT, int CH>
    __device__ static constexpr int group(int i)
    {
        static_assert(TK <= 32 || (NT % CH == 0 && 32 % (NT / CH) == 0), "a copy step's keys in one 32-key group");
        return TK <= 32 ? 0 : i * (NT / CH) / 32;
    }
};

/**
 * The SIMT block of a work item (AttnCfg C), its keys from K (DenseKeys for dcpk_attn,
 * SparseKeys for dcpk_sparse_attn): passes of C::kRows rows, each over the segments
 * of K, each segment's keys in tiles.
 */
template <class C, class K = DenseKeys>
class AttnBlock {
  public:
    using P = typename K::Params;
    __device__ AttnBlock(const P &p, const AttnItem &it) : p_(p), it_(it), keys_(p, it) {}

    /** Runs every pass of the work item. */
    __device__ void run()
    {
        const uint32_t nrows = it_.nheads * it_.nq;
        for (uint32_t first = 0; first < nrows; first += C::kRows) {
            const uint32_t nvalid = min(nrows - first, (uint32_t)C::kRows);
            pass(first, nvalid);
        }
    }

  private:
    const P &p_;
    const AttnItem &it_;
    K keys_;

    // Per-pass softmax state of this thread's softmax row, and its P.V accumulators.
    float m_run_ = 0.f, l_run_ = 0.f;
    float acc_[C::kOR][C::kCE];

    __device__ static uint4 *k_tile(int buf)
    {
        return reinterpret_cast<uint4 *>(dcpk_smem + C::kOffK) + buf * C::kTK * C::kRowK;
    }
    __device__ static uint4 *v_tile(int buf)
    {
        if constexpr (C::kShared)
            return k_tile(buf);
        else
            return reinterpret_cast<uint4 *>(dcpk_smem + C::kOffV) + buf * C::kTK * C::kRowV;
    }
    __device__ static float *q_smem() { return reinterpret_cast<float *>(dcpk_smem + C::kOffQ); }
    __device__ static float *s_smem() { return reinterpret_cast<float *>(dcpk_smem + C::kOffS); }
    /** Per row: the end and the start of the segment's keys it sees (empty when end <= start). */
    __device__ static uint32_t *vis_smem() { return reinterpret_cast<uint32_t *>(dcpk_smem + C::kOffRows); }
    __device__ static uint32_t *beg_smem() { return reinterpret_cast<uint32_t *>(dcpk_smem + C::kOffRows) + 3 * C::kRows; }
    __device__ static float *alpha_smem() { return reinterpret_cast<float *>(dcpk_smem + C::kOffRows) + C::kRows; }
    /** Per-row "not finite" flags of finish(), in alpha's place (alpha is dead by then). */
    __device__ static uint32_t *bad_smem() { return reinterpret_cast<uint32_t *>(dcpk_smem + C::kOffRows) + C::kRows; }
    __device__ static float *l_smem() { return reinterpret_cast<float *>(dcpk_smem + C::kOffRows) + 2 * C::kRows; }

    __device__ RowAddr row_addr(uint32_t row) const { return attn_row_addr<C::kQK, C::kDV>(p_, it_, row); }
    __device__ static bool row_empty(uint32_t row) { return vis_smem()[row] <= beg_smem()[row]; }

    /**
     * Stages the pass's queries in shared memory, scaled by scale * log2(e) (and the
     * fp8 K scale), in the layout the score loop reads: element d of a row sits at
     * float4 (d % CE) / 4 * NchK + d / CE, lane d % 4, so the KS lanes that read
     * consecutive K chunks also read consecutive Q float4s.
     */
    __device__ void stage_rows(uint32_t first, uint32_t nvalid)
    {
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        const float qscale = p_.scale * kLog2e * (C::kScaled ? p_.kv_scale : 1.f);
        for (int r = warp; r < C::kRows; r += C::kNT / 32) {
            float *qs = q_smem() + r * C::kQK;
            const bool valid = (uint32_t)r < nvalid;
            const RowAddr a = valid ? row_addr(first + r) : RowAddr{};
            with_act_dtype(a.q_dtype, [&](auto dt) {
                for (int d = lane; d < C::kQK; d += 32) {
                    const int slot = ((d % C::kCE) / 4 * C::kNchK + d / C::kCE) * 4 + d % 4;
                    qs[slot] = valid ? attn_load_q<decltype(dt)::value>(a, (uint64_t)d) * qscale : 0.f;
                }
            });
        }
    }

    /** The keys of the segment each row of the pass sees (rows past nvalid: none). */
    __device__ void stage_ranges(uint32_t first, uint32_t nvalid)
    {
        if (threadIdx.x < C::kRows) {
            uint32_t begin = 0, end = 0;
            if (threadIdx.x < nvalid)
                keys_.row_range(first + threadIdx.x, begin, end);
            vis_smem()[threadIdx.x] = end;
            beg_smem()[threadIdx.x] = begin;
        }
    }

    /** Issues the cp.async copies of tile `tile` (keys tile * TK ... of the segment) into buffer buf. */
    __device__ void load_tile(uint32_t tile, uint32_t ntok, int buf) const
    {
        constexpr int kChunks = C::kTK * C::kNchK;
        const uint32_t base = tile * C::kTK;
        const uint32_t nload = min(ntok - tile * C::kTK, (uint32_t)C::kTK);
        uint4 *kt = k_tile(buf);
        uint4 *vt = v_tile(buf);
        // One page lookup per copied chunk: TileRows would share them, but its registers
        // live through the copies, and the gqa_d256 entries' 128-register cap spills then.
#pragma unroll
        for (int i = 0; i < (kChunks + C::kNT - 1) / C::kNT; i++) {
            const int idx = threadIdx.x + i * C::kNT;
            if (kChunks % C::kNT != 0 && idx >= kChunks)
                break;
            const int j = idx / C::kNchK, ch = idx % C::kNchK;
            const bool valid = (uint32_t)j < nload;
            const uint64_t row = valid ? keys_.key_row(base + j) : 0;
            const char *ksrc = reinterpret_cast<const char *>(p_.k_cache) + (row * C::kQK * C::kEsize + ch * 16);
            cp_async16(kt + j * C::kRowK + ch, ksrc, valid);
            if constexpr (!C::kShared) {
                const char *vsrc = reinterpret_cast<const char *>(p_.v_cache) +
                                   (row * p_.v_row_stride * C::kEsize + ch * 16);
                cp_async16(vt + j * C::kRowV + ch, vsrc, valid);
            }
        }
    }

    /** Phase 1: S = Q . K^T for the tile in buffer buf (unscaled keys: fp8 scale is in Q). */
    __device__ void scores(int buf, uint32_t nvalid) const
    {
        const int ks = threadIdx.x % C::kKS;
        const int tg = (threadIdx.x / C::kKS) % C::kTG;
        const int rg = threadIdx.x / (C::kKS * C::kTG);
        if ((uint32_t)rg * 4 >= nvalid) // whole warps: no row of theirs is live
            return;
        const uint4 *kt = k_tile(buf);
        const float4 *q4 = reinterpret_cast<const float4 *>(q_smem()) + rg * 4 * (C::kQK / 4);
        float acc[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                acc[r][j] = 0.f;
#pragma unroll 1
        for (int step = 0; step < C::kKSteps; step++) {
            const int ch = ks + step * C::kKS;
            if (C::kNchK % C::kKS != 0 && ch >= C::kNchK)
                break;
            uint4 kr[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                kr[j] = kt[(tg + C::kTG * j) * C::kRowK + ch];
#pragma unroll
            for (int pc = 0; pc < C::kPieces; pc++) {
                float4 kf[4];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    kf[j] = unpack4<C::kDtype>(kr[j], pc);
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const float4 q = q4[r * (C::kQK / 4) + pc * C::kNchK + ch];
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        acc[r][j] = fmaf(q.x, kf[j].x, acc[r][j]);
                        acc[r][j] = fmaf(q.y, kf[j].y, acc[r][j]);
                        acc[r][j] = fmaf(q.z, kf[j].z, acc[r][j]);
                        acc[r][j] = fmaf(q.w, kf[j].w, acc[r][j]);
                    }
                }
            }
        }
        float *s = s_smem();
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float v = group_sum<C::kKS>(acc[r][j]);
                if ((r * 4 + j) % C::kKS == ks)
                    s[(rg * 4 + r) * C::kSS + tg + C::kTG * j] = v;
            }
    }

    /**
     * Phase 2: online softmax of this thread's row over the tile: turns S into
     * P = exp2(S - m) (0 for keys the row does not see), updates m and l, and
     * leaves the rescale factor of the row's accumulators in shared memory.
     */
    __device__ void softmax(uint32_t tile)
    {
        const int row = threadIdx.x / C::kTPR, sub = threadIdx.x % C::kTPR;
        const uint32_t seen = vis_smem()[row], from = beg_smem()[row];
        const uint32_t done = tile * C::kTK;
        const int vis = seen > done ? (int)min(seen - done, (uint32_t)C::kTK) : 0;
        const int lead = from > done ? (int)min(from - done, (uint32_t)C::kTK) : 0; // before the row's window
        float *s = s_smem() + row * C::kSS;
        float mx = neg_inf();
#pragma unroll
        for (int j = 0; j < C::kTK / C::kTPR; j++) {
            const int t = sub + C::kTPR * j;
            if (t >= lead && t < vis)
                mx = fmaxf(mx, s[t]);
        }
        mx = group_max<C::kTPR>(mx);
        const float m_new = fmaxf(m_run_, mx);
        const bool none = m_new == neg_inf();
        const float alpha = none ? 1.f : exp2f(m_run_ - m_new);
        // Nothing above -inf yet: shift by 0, so a -inf score gives P = 0 (not
        // exp2(-inf - -inf) = NaN) while a NaN score stays NaN.
        const float shift = none ? 0.f : m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < C::kTK / C::kTPR; j++) {
            const int t = sub + C::kTPR * j;
            const float pv = t >= lead && t < vis ? exp2f(s[t] - shift) : 0.f;
            s[t] = pv;
            sum += pv;
        }
        sum = group_sum<C::kTPR>(sum);
        l_run_ = l_run_ * alpha + sum;
        m_run_ = m_new;
        if (sub == 0)
            alpha_smem()[row] = alpha;
    }

    /** acc += P . V for the keys [t_begin, t_end) of the tile in buffer buf (multiples of 4), every row. */
    __device__ void pv_all_rows(int buf, uint32_t t_begin, uint32_t t_end)
    {
        const int dg = threadIdx.x % C::kDG, rg = threadIdx.x / C::kDG;
        const uint4 *vt = v_tile(buf) + dg;
        const float4 *p4 = reinterpret_cast<const float4 *>(s_smem()) + rg * C::kOR * (C::kSS / 4);
#pragma unroll 1
        for (uint32_t t4 = t_begin; t4 < t_end; t4 += 4) {
            uint4 vr[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                vr[u] = vt[(t4 + u) * C::kRowV];
            float4 pr[C::kOR];
#pragma unroll
            for (int r = 0; r < C::kOR; r++)
                pr[r] = p4[r * (C::kSS / 4) + t4 / 4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
#pragma unroll
                for (int pc = 0; pc < C::kPieces; pc++) {
                    const float4 v = unpack4<C::kDtype>(vr[u], pc);
#pragma unroll
                    for (int r = 0; r < C::kOR; r++) {
                        const float w = u == 0 ? pr[r].x : u == 1 ? pr[r].y : u == 2 ? pr[r].z : pr[r].w;
                        acc_[r][pc * 4 + 0] = fmaf(w, v.x, acc_[r][pc * 4 + 0]);
                        acc_[r][pc * 4 + 1] = fmaf(w, v.y, acc_[r][pc * 4 + 1]);
                        acc_[r][pc * 4 + 2] = fmaf(w, v.z, acc_[r][pc * 4 + 2]);
                        acc_[r][pc * 4 + 3] = fmaf(w, v.w, acc_[r][pc * 4 + 3]);
                    }
                }
            }
        }
    }

    /**
     * acc += P . V for the keys [0, ntile) of the tile in buffer buf but [skip_lo,
     * skip_hi) (pv_all_rows' share), each row only over the keys it sees (the tile
     * starts at key `done`): a key masked for a row is skipped, so its P = 0 never
     * meets a NaN value (0 * NaN). One key and one row at a time; only the keys
     * before some row's window or past some row's visible end come here.
     */
    __device__ void pv_own_keys(int buf, uint32_t skip_lo, uint32_t skip_hi, uint32_t ntile, uint32_t done)
    {
        const int dg = threadIdx.x % C::kDG, rg = threadIdx.x / C::kDG;
        const uint4 *vt = v_tile(buf) + dg;
#pragma unroll
        for (int r = 0; r < C::kOR; r++) {
            const uint32_t prow = rg * C::kOR + r, seen = vis_smem()[prow], from = beg_smem()[prow];
            const uint32_t end = min(ntile, seen > done ? seen - done : 0u);
            const float *pr = s_smem() + prow * C::kSS;
#pragma unroll 1
            for (uint32_t t = from > done ? from - done : 0u; t < end; t++) {
                if (t == skip_lo)
                    t = skip_hi;
                if (t >= end)
                    break;
                const uint4 vr = vt[t * C::kRowV];
                const float w = pr[t];
#pragma unroll
                for (int pc = 0; pc < C::kPieces; pc++) {
                    const float4 v = unpack4<C::kDtype>(vr, pc);
                    acc_[r][pc * 4 + 0] = fmaf(w, v.x, acc_[r][pc * 4 + 0]);
                    acc_[r][pc * 4 + 1] = fmaf(w, v.y, acc_[r][pc * 4 + 1]);
                    acc_[r][pc * 4 + 2] = fmaf(w, v.z, acc_[r][pc * 4 + 2]);
                    acc_[r][pc * 4 + 3] = fmaf(w, v.w, acc_[r][pc * 4 + 3]);
                }
            }
        }
    }

    /**
     * Phase 3: acc = acc * alpha + P . V over the first ntile keys of tile `tile`
     * (a multiple of 4; keys past the loaded ones are zero). The keys every row of
     * the thread sees take the plain loop; before the last row's window start and
     * past the first row's visible end (only multi-token queries have them inside
     * the tile) each row takes its own.
     */
    __device__ void accumulate(uint32_t tile, int buf, uint32_t ntile, uint32_t nvalid)
    {
        const int rg = threadIdx.x / C::kDG;
        if (rg >= C::kRG || (uint32_t)rg * C::kOR >= nvalid)
            return;
        const float *alpha = alpha_smem() + rg * C::kOR;
        const uint32_t done = tile * C::kTK;
#pragma unroll
        for (int r = 0; r < C::kOR; r++) {
            const float a = alpha[r];
#pragma unroll
            for (int e = 0; e < C::kCE; e++)
                acc_[r][e] *= a;
        }
        // The thread's rows are consecutive, so token-major: the first sees the fewest keys,
        // the last live one's window starts latest (rows past nvalid are never written out).
        const uint32_t seen = vis_smem()[rg * C::kOR], from = beg_smem()[min((uint32_t)(rg * C::kOR + C::kOR), nvalid) - 1];
        const uint32_t common = min(ntile, seen > done ? seen - done : 0u);
        const uint32_t lead = from > done ? min(from - done, ntile) : 0u;
        uint32_t plain_lo = (lead + 3) & ~3u, plain_hi = common & ~3u;
        if (plain_lo >= plain_hi)
            plain_lo = plain_hi = ntile; // no key every row sees: each row takes its own
        pv_all_rows(buf, plain_lo, plain_hi);
        pv_own_keys(buf, plain_lo, plain_hi, ntile, done);
    }

    /**
     * Writes the pass's LSEs and outputs. A row that sees no key, or whose visible
     * scores were all -inf (l = 0), gets -inf and 0; a row whose sum or any of its
     * accumulators (spread over kDG threads) is not finite gets NaN everywhere:
     * the flags meet in shared memory.
     */
    __device__ void finish(uint32_t first, uint32_t nvalid)
    {
        const int row = threadIdx.x / C::kTPR, sub = threadIdx.x % C::kTPR;
        uint32_t *bad = bad_smem();
        if (sub == 0 && (uint32_t)row < nvalid) {
            const bool empty = row_empty(row);
            l_smem()[row] = empty ? 0.f : l_run_;
            bad[row] = !empty && dcpk_f32_is_nonfinite(l_run_);
            const float lse = empty || l_run_ == 0.f ? neg_inf() : (m_run_ + log2f(l_run_)) * kLn2;
            *reinterpret_cast<float *>(row_addr(first + row).lse) = lse;
        }
        __syncthreads();
        const int dg = threadIdx.x % C::kDG, rg = threadIdx.x / C::kDG;
        const bool pv = rg < C::kRG;
#pragma unroll
        for (int r = 0; r < C::kOR; r++) {
            const uint32_t prow = rg * C::kOR + r;
            if (!pv || prow >= nvalid || row_empty(prow))
                continue;
            bool finite = true;
#pragma unroll
            for (int e = 0; e < C::kCE; e++)
                finite = finite && !dcpk_f32_is_nonfinite(acc_[r][e]);
            if (!finite)
                atomicOr(&bad[prow], 1u);
        }
        __syncthreads();
        if (sub == 0 && (uint32_t)row < nvalid && bad[row]) // the same thread wrote it above
            *reinterpret_cast<float *>(row_addr(first + row).lse) = dcpk_qnan();
        if (!pv)
            return;
        const float vscale = C::kScaled ? p_.kv_scale : 1.f;
#pragma unroll
        for (int r = 0; r < C::kOR; r++) {
            const uint32_t prow = rg * C::kOR + r;
            if (prow >= nvalid)
                break;
            const float l = l_smem()[prow];
            const bool nan = bad[prow] != 0;
            const float f = l != 0.f ? vscale / l : 0.f;
            const RowAddr a = row_addr(first + prow);
            with_act_dtype(a.o_dtype, [&](auto dt) {
#pragma unroll
                for (int e = 0; e < C::kCE; e++)
                    attn_store_o<decltype(dt)::value>(a, (uint64_t)(dg * C::kCE + e),
                                                      nan ? dcpk_qnan() : l != 0.f ? acc_[r][e] * f : 0.f);
            });
        }
    }

    /** One pass: rows [first, first + nvalid) of the work item against every segment of its keys. */
    __device__ void pass(uint32_t first, uint32_t nvalid)
    {
        m_run_ = neg_inf();
        l_run_ = 0.f;
#pragma unroll
        for (int r = 0; r < C::kOR; r++)
#pragma unroll
            for (int e = 0; e < C::kCE; e++)
                acc_[r][e] = 0.f;

        stage_rows(first, nvalid);
        for (uint32_t seg = 0; keys_.segment(seg, first, nvalid); seg++) {
            stage_ranges(first, nvalid);
            __syncthreads();
            // Rows are token-major, so the pass's last row sees the most keys.
            const uint32_t ntok = vis_smem()[nvalid - 1];
            const uint32_t ntiles = (ntok + C::kTK - 1) / C::kTK;
            if (ntiles > 0)
                load_tile(0, ntok, 0);
            cp_async_commit();
            for (uint32_t tile = 0; tile < ntiles; tile++) {
                const int buf = tile & 1;
                if (tile + 1 < ntiles)
                    load_tile(tile + 1, ntok, buf ^ 1);
                cp_async_commit();
                if constexpr (K::kMutant != KeysMutant::no_wait)
                    cp_async_wait<1>();
                __syncthreads();
                scores(buf, nvalid);
                __syncthreads();
                softmax(tile);
                __syncthreads();
                const uint32_t ntile = min(ntok - tile * C::kTK, (uint32_t)C::kTK);
                accumulate(tile, buf, (ntile + 3) & ~3u, nvalid);
                __syncthreads();
            }
            __syncthreads(); // the rows' ranges are read above before the next segment's are written
        }
        finish(first, nvalid);
        __syncthreads();
    }
};

/**
 * True when the launch and params are ones this entry computes: its block size,
 * shapes and dtype, no zero divisors, and caches the 16-byte copies can read
 * (a misaligned cp.async would fault and lose the whole context). MLA entries
 * read V from the K rows, so they also need v_cache == k_cache. P: dcpk_attn_params
 * or dcpk_sparse_attn_params (the fields they share).
 */
template <class C, class P>
__device__ bool attn_launch_ok(const P &p)
{
    const bool v_ok = C::kShared ? p.v_cache == p.k_cache && p.v_row_stride == (uint32_t)C::kQK
                                 : (uint64_t)p.v_row_stride * C::kEsize % 16 == 0 && p.v_row_stride >= (uint32_t)C::kDV;
    return blockDim.x == C::kNT && blockDim.y == 1 && blockDim.z == 1 && p.qk_dim == (uint32_t)C::kQK &&
           p.v_dim == (uint32_t)C::kDV && p.dtype == C::kDtype && v_ok && ((p.k_cache | p.v_cache) & 15) == 0 &&
           p.num_kv_heads != 0 && p.head_tile != 0 && p.block_size != 0 && p.group_size != 0 && p.interleave != 0 &&
           p.heads_per_chunk != 0 && dcpk_act_dtype_ok(p.q_dtype) && dcpk_act_dtype_ok(p.out_dtype);
}

/** Decodes the block's dcpk_attn work item; false when the block has none (or a bad launch). */
template <class C>
__device__ bool attn_item(const dcpk_attn_params &p, AttnItem &it)
{
    if (!attn_launch_ok<C>(p) || p.num_splits == 0)
        return false;
    const uint32_t heads_per_kv = p.num_heads / p.num_kv_heads;
    const uint32_t head_tiles = (heads_per_kv + p.head_tile - 1) / p.head_tile;
    if (blockIdx.x >= p.num_splits || blockIdx.z >= p.batch || blockIdx.y >= p.num_kv_heads * head_tiles)
        return false;
    it.split = blockIdx.x;
    it.kv_head = blockIdx.y / head_tiles;
    const uint32_t tile = blockIdx.y % head_tiles;
    it.head0 = it.kv_head * heads_per_kv + tile * p.head_tile;
    it.nheads = min(p.head_tile, heads_per_kv - tile * p.head_tile);

    const int32_t *q_start = reinterpret_cast<const int32_t *>(p.q_start);
    const int32_t q0 = q_start[blockIdx.z], q1 = q_start[blockIdx.z + 1];
    if (q1 <= q0 || q0 < 0)
        return false;
    it.q0 = (uint32_t)q0;
    it.nq = (uint32_t)(q1 - q0);
    it.seq_len = reinterpret_cast<const int32_t *>(p.seq_lens)[blockIdx.z];

    // Splits cover whole pages from the one of the first key any query token sees
    // (the window's start of the first token; page 0 without a window).
    const uint64_t local_len =
        it.seq_len > 0 ? dcpk_local_length((uint64_t)it.seq_len, p.rank, p.group_size, p.interleave) : 0;
    const uint64_t base = attn_window_first(p, it.seq_len - (int64_t)it.nq) / p.block_size * p.block_size;
    const uint64_t pages = local_len > base ? (local_len - base + p.block_size - 1) / p.block_size : 0;
    const uint64_t per_split = (pages + p.num_splits - 1) / p.num_splits * p.block_size;
    it.lo = min(base + it.split * per_split, local_len);
    it.hi = min(it.lo + per_split, local_len);
    it.pages = reinterpret_cast<const int32_t *>(p.block_table) + (uint64_t)blockIdx.z * p.max_blocks;
    return true;
}

/**
 * Decodes the block's dcpk_sparse_attn work item (query token t = blockIdx.x, KV head
 * and head tile from blockIdx.y) as a one-token item of its sequence (nq = 1,
 * seq_len = the token's position + 1); false when the block has none.
 */
template <class C>
__device__ bool sparse_item(const dcpk_sparse_attn_params &p, AttnItem &it)
{
    if (!attn_launch_ok<C>(p) || p.batch == 0 || p.num_heads < p.num_kv_heads)
        return false;
    const uint32_t heads_per_kv = p.num_heads / p.num_kv_heads;
    const uint32_t tile_heads = min(p.head_tile, heads_per_kv);
    const uint32_t head_tiles = (heads_per_kv + tile_heads - 1) / tile_heads;
    if (blockIdx.x >= p.num_q_tokens || blockIdx.y >= p.num_kv_heads * head_tiles || blockIdx.z != 0)
        return false;
    const int32_t *q_start = reinterpret_cast<const int32_t *>(p.q_start);
    const uint32_t t = blockIdx.x, b = dcpk_token_sequence(q_start, p.batch, t);
    it.split = 0;
    it.kv_head = blockIdx.y / head_tiles;
    const uint32_t tile = blockIdx.y % head_tiles;
    it.head0 = it.kv_head * heads_per_kv + tile * tile_heads;
    it.nheads = min(tile_heads, heads_per_kv - tile * tile_heads);
    it.q0 = t;
    it.nq = 1;
    it.seq_len = dcpk_token_position(reinterpret_cast<const int32_t *>(p.seq_lens), q_start, b, t) + 1;
    it.lo = it.hi = 0;
    it.pages = reinterpret_cast<const int32_t *>(p.block_table) + (uint64_t)b * p.max_blocks;
    return true;
}

/**
 * Deliberate bugs of the fused split-KV combine, for tests/kernels_build (the fatbin
 * instantiates none): no_fence counts the split in with no __threadfence after its
 * partials (the last split could read stale ones); no_reset leaves the counter at
 * num_splits (the next launch, a graph replay, never combines).
 */
enum class CombineMutant { none, no_fence, no_reset };

/**
 * The fused split-KV combine (params.h, split_counters), after a dcpk_attn block has
 * stored its split's partials of work item (blockIdx.y, blockIdx.z): every thread
 * fences its stores, the block counts itself in (thread 0, after a barrier), and the
 * block that counts last sets the counter back to 0, fences (the other splits'
 * partials are seen after their counts) and merges the item's rows, one warp per row
 * (warp_merge_row: dcpk_merge's bits). Every thread of the block calls it.
 */
template <CombineMutant M = CombineMutant::none>
__device__ __forceinline__ void split_combine(const dcpk_attn_params &p)
{
    if (p.num_splits <= 1 || p.split_counters == 0)
        return;
    if constexpr (M != CombineMutant::no_fence)
        __threadfence();
    __syncthreads();
    uint32_t *counter = reinterpret_cast<uint32_t *>(p.split_counters) + (uint64_t)blockIdx.z * gridDim.y + blockIdx.y;
    if (!__syncthreads_or(threadIdx.x == 0 && atomicAdd(counter, 1u) == p.num_splits - 1u))
        return;
    if (M != CombineMutant::no_reset && threadIdx.x == 0)
        *counter = 0; // no other block of this launch counts here again
    __threadfence();
    // The item again from blockIdx and params (attn_item's decoding): nothing of the
    // attention stays live in registers across it for the combine.
    const uint32_t heads_per_kv = p.num_heads / p.num_kv_heads;
    const uint32_t head_tiles = (heads_per_kv + p.head_tile - 1) / p.head_tile, tile = blockIdx.y % head_tiles;
    const uint32_t head0 = blockIdx.y / head_tiles * heads_per_kv + tile * p.head_tile;
    const uint32_t nheads = min(p.head_tile, heads_per_kv - tile * p.head_tile);
    const int32_t *q_start = reinterpret_cast<const int32_t *>(p.q_start);
    const uint32_t q0 = (uint32_t)q_start[blockIdx.z], nq = (uint32_t)(q_start[blockIdx.z + 1] - q_start[blockIdx.z]);
    const uint32_t lane = threadIdx.x % 32, warps = blockDim.x / 32, rows = nq * nheads;
    const uint64_t rows_per_chunk = (uint64_t)p.num_q_tokens * p.heads_per_chunk;
    for (uint32_t r = threadIdx.x / 32; r < rows; r += warps) {
        const uint32_t tok = q0 + r / nheads, g = head0 + r % nheads;
        const uint64_t c = g / p.heads_per_chunk;
        const uint64_t in_chunk = (uint64_t)tok * p.heads_per_chunk + g % p.heads_per_chunk;
        const uint64_t ws_row = c * rows_per_chunk + in_chunk;
        float *out_lse = p.lse != 0 ? reinterpret_cast<float *>(p.lse) + c * p.lse_chunk_stride + in_chunk : nullptr;
        warp_merge_row<MergeMutant::none, DCPK_FP32>(reinterpret_cast<const void *>(p.ws_o), ws_row * p.v_dim,
                                                     p.ws_split_stride_o,
                                                     reinterpret_cast<const float *>(p.ws_lse) + ws_row,
                                                     p.ws_split_stride_lse, p.num_splits, p.v_dim, p.out,
                                                     c * p.out_chunk_stride + in_chunk * p.v_dim, p.out_dtype,
                                                     out_lse, lane);
    }
}

template <class C, KeysMutant M = KeysMutant::none, CombineMutant F = CombineMutant::none>
__device__ __forceinline__ void attn_kernel(const dcpk_attn_params &p)
{
    AttnItem it;
    if (!attn_item<C>(p, it))
        return;
    AttnBlock<C, DenseKeysOf<M>> block(p, it);
    block.run();
    split_combine<F>(p);
}

/** A SIMT sparse entry: the token's top-k keys of this rank through AttnBlock. */
template <class C, KeysMutant M = KeysMutant::none>
__device__ __forceinline__ void sparse_kernel(const dcpk_sparse_attn_params &p)
{
    AttnItem it;
    if (!sparse_item<C>(p, it))
        return;
    AttnBlock<C, SparseKeys<C, M>> block(p, it);
    block.run();
}

/**
 * The body of a tensor-core entry (Block = MlaTcBlock or GqaTcBlock): decodes the
 * work item (attn_item: the same launch checks; an unknown precision is refused too)
 * and runs it.
 */
template <template <class> class Block, class C>
__device__ __forceinline__ void attn_tc_kernel(const dcpk_attn_params &p)
{
    AttnItem it;
    if (p.precision > DCPK_PRECISION_EXACT || !attn_item<C>(p, it))
        return;
    Block<C> block(p, it);
    block.run();
    split_combine(p);
}

/** The body of a tensor-core sparse entry (Block = MlaTcSparseBlock), as attn_tc_kernel's. */
template <template <class> class Block, class C>
__device__ __forceinline__ void sparse_tc_kernel(const dcpk_sparse_attn_params &p)
{
    AttnItem it;
    if (p.precision > DCPK_PRECISION_EXACT || !sparse_item<C>(p, it))
        return;
    Block<C> block(p, it);
    block.run();
}

} // namespace dcpk

/* esize (the shared-memory plan's element size, variants.h) must be the dtype's
 * size from DCPK_DTYPES: a row that disagrees fails the kernel build. */
#define DCPK_ATTN_ENTRY(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize)                  \
    static_assert(dcpk::elem_bytes<dtype>() == (esize), "variants.h: esize of " #dt " is not its DCPK_DTYPES size"); \
    extern "C" __global__ void __launch_bounds__(threads, (threads) <= 128 ? 4 : 1) dcpk_attn__##layout##_##dt(const dcpk_attn_params p) \
    {                                                                                                  \
        dcpk::attn_kernel<dcpk::AttnCfg<qk, v, shared, dtype, threads, rows, tile>>(p);                \
    }
DCPK_ATTN_VARIANTS(DCPK_ATTN_ENTRY)
#undef DCPK_ATTN_ENTRY

/* The SIMT sparse entries: the same blocks, with the keys of a token's top-k list. Their
 * segment loop holds the pass's state across tile loops: 3 blocks of 128 threads per SM
 * by registers (170 each), not 4, so the gqa_d256 ones do not spill. */
#define DCPK_SPARSE_ENTRY(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize)                  \
    static_assert(dcpk::AttnCfg<qk, v, shared, dtype, threads, rows, tile>::kSmem +                      \
                          DCPK_SPARSE_SMEM_LIST(threads, tile) ==                                        \
                      DCPK_SPARSE_SMEM_BYTES(qk, v, shared, esize, threads, rows, tile),                 \
                  "sparse smem plan");                                                                   \
    extern "C" __global__ void __launch_bounds__(threads, (threads) <= 128 ? 3 : 1)                      \
        dcpk_sparse_attn__##layout##_##dt(const dcpk_sparse_attn_params p)                               \
    {                                                                                                    \
        dcpk::sparse_kernel<dcpk::AttnCfg<qk, v, shared, dtype, threads, rows, tile>>(p);                \
    }
DCPK_SPARSE_VARIANTS(DCPK_SPARSE_ENTRY)
#undef DCPK_SPARSE_ENTRY

#endif /* DCPK_ATTN_CUH */
