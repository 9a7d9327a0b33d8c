/*
 * attn_gqa_tc.cuh: GQA/MHA decode attention (head_dim D = 64, 128 or 256, separate
 * K and V pages) on tensor cores: mma.sync m16n8k16 with bf16 or fp16 inputs (the
 * cache dtype) and fp32 accumulators, operands from shared memory through
 * ldmatrix. Same params (struct dcpk_attn_params), work items, passes and results
 * as attn.cuh; the entries are DCPK_ATTN_GQA_TC_VARIANTS.
 *
 * The query rows of a work item (head_tile heads of one KV head x the sequence's
 * query tokens, token-major) are few, so they go into the MMA's N dimension, 8 per
 * n-tile, and the keys into M, 16 per warp: a pass serves ROWS rows, and per KV
 * tile of TK = 16 x warps keys (K and V, 16-byte cp.async copies into an XOR-
 * swizzled STAGES-deep ring, variants.h) warp w takes keys [16 w, 16 w + 16):
 *   1. S^T = K . Q^T: K through ldmatrix.x4 (A), Q as B fragments built once per
 *      pass from global memory (scaled by scale * log2(e), split hi + lo) and kept
 *      in shared memory, one quad per lane shared by every warp;
 *   2. online softmax of the warp's own keys, per row (a row's 16 keys live in
 *      the 8 lanes of one t = lane % 4: three shuffles for a max), masked per row
 *      from the lengths as in attn.cuh; each warp keeps its own running max, sum
 *      and output, over its share of the keys;
 *   3. O^T += V^T . P^T: V through ldmatrix.x4.trans (A); P^T, the S^T
 *      accumulators' transpose, goes through a per-warp shared tile (stored as
 *      [key][row], read back with ldmatrix.x4.trans as the hi and lo B fragments).
 * At the end of a pass the warps' states meet in shared memory (the KV ring's
 * space): the common max, the rescaled sums and outputs summed over the warps
 * in one order, so results do not depend on timing.
 * Precision: K and V are exact in the MMA; Q and P are split x = hi + lo (two MMAs
 * per product, |x - hi - lo| <= 2^-18 |x| for bf16), so products are exact to
 * about fp32 accumulation. params.precision is not used: the split doubles only
 * the MMAs of a memory-bound kernel. The softmax sum adds the P values the MMA used.
 * fp16 caches multiply fp16 queries: |q * scale * log2(e)| must stay below 65504.
 * NaN (docs/design.md §4): a row that meets a NaN or +inf score (a NaN query
 * included: fmaxf would drop it and the row look empty), or whose output
 * accumulators are not finite (a NaN value of a key it sees), is flagged; the flag
 * travels as a NaN max through the warps' combine and the row gets NaN in its LSE
 * and every output. The values of keys that some rows of the pass see and others
 * do not (the causal mask of multi-token queries) are zeroed in shared memory when
 * not finite, so a row that does not see them never adds 0 * NaN through P.V; the
 * first such key is recorded and the rows that see it are flagged.
 */
#ifndef DCPK_ATTN_GQA_TC_CUH
#define DCPK_ATTN_GQA_TC_CUH

#include "attn.cuh"
#include "mma.cuh"

namespace dcpk {

/** Compile-time plan of one tensor-core GQA entry (DCPK_ATTN_GQA_TC_VARIANTS row). */
template <int D, uint32_t DT, int NT, int ROWS, int TK, TcMutant MUT = TcMutant::none>
struct GqaTcCfg {
    static constexpr int kQK = D, kDV = D, kShared = 0, kNT = NT, kRows = ROWS, kTK = TK;
    static constexpr uint32_t kDtype = DT;
    static constexpr int kEsize = elem_bytes<DT>();
    static constexpr TcMutant kMutant = MUT;
    static constexpr MmaIn kIn = DT == DCPK_BF16 ? MmaIn::bf16 : MmaIn::fp16;
    static constexpr int kWarps = NT / 32;
    static constexpr int kStages = (int)DCPK_ATTN_GQA_TC_STAGES(D, kEsize, TK);
    static constexpr int kKSteps = D / 16;  // S^T depth steps, and O^T m-tiles of 16 dims
    static constexpr int kNTiles = ROWS / 8; // n-tiles of 8 rows
    static constexpr int kChunks = D * kEsize / 16;
    static constexpr int kRowBytes = D * kEsize;
    static constexpr uint32_t kTileBytes = (uint32_t)TK * kRowBytes; // one K (or V) tile
    static constexpr int kOStride = (int)DCPK_ATTN_GQA_TC_O_STRIDE(D);
    static constexpr uint32_t kOffQ = DCPK_ATTN_GQA_TC_SMEM_KV(D, kEsize, TK);
    static constexpr uint32_t kOffP = kOffQ + DCPK_ATTN_GQA_TC_SMEM_Q(D, ROWS);
    static constexpr uint32_t kOffML = kOffP + DCPK_ATTN_GQA_TC_SMEM_P(NT, ROWS);
    static constexpr uint32_t kOffNan = kOffML + DCPK_ATTN_GQA_TC_SMEM_ML(NT, ROWS);
    static constexpr uint32_t kOffRange = kOffNan + DCPK_ATTN_GQA_TC_SMEM_NAN;
    static constexpr uint32_t kSmem = kOffRange + DCPK_ATTN_GQA_TC_SMEM_RANGE(ROWS);

    static_assert(DT == DCPK_BF16 || DT == DCPK_FP16, "the MMA takes bf16 or fp16 inputs");
    static_assert(D == 64 || D == 128 || D == 256, "GQA head dims");
    static_assert(NT % 32 == 0 && TK == 16 * kWarps, "each warp owns 16 keys of a tile");
    static_assert(ROWS % 8 == 0 && ROWS >= 8, "rows in whole n-tiles");
    static_assert(kChunks % 8 == 0, "the XOR swizzle permutes groups of 8 chunks");
    static_assert(2 * TK * kChunks % NT == 0, "every thread copies the same number of chunks");
    static_assert((uint32_t)kWarps * ROWS * kOStride * 4 <= kOffQ, "the warps' outputs fit in the KV ring");
    static_assert(kStages >= 3, "a 3-4 stage pipeline");
    static_assert(kSmem == DCPK_ATTN_GQA_TC_SMEM_BYTES(D, kEsize, NT, ROWS, TK), "smem plan");
};

template <class C>
class GqaTcBlock {
  public:
    __device__ GqaTcBlock(const dcpk_attn_params &p, const AttnItem &it)
        : p_(p), it_(it), keys_(p, it), lane_((int)threadIdx.x % 32), warp_((int)threadIdx.x / 32)
    {
    }

    /** Runs every pass of the work item. */
    __device__ void run()
    {
        const uint32_t nrows = it_.nheads * it_.nq;
        for (uint32_t first = 0; first < nrows; first += C::kRows)
            pass(first, min(nrows - first, (uint32_t)C::kRows));
    }

  private:
    const dcpk_attn_params &p_;
    const AttnItem &it_;
    DenseKeys keys_; // the pass's keys: from its first row's first one (the window's start)
    const int lane_, warp_;

    float o_[C::kKSteps][C::kNTiles][4]; // O^T C fragments: dims 16 m + g + 8 (i / 2), row 8 n + 2t + i % 2
    float m_[C::kNTiles][2], l_[C::kNTiles][2]; // rows 8 n + 2t + j: running max (log2), this lane's share of the sum
    uint32_t vis_[C::kNTiles][2];               // keys of the pass those rows see: [from_, vis_); 0: none
    uint32_t from_[C::kNTiles][2];              // those rows' window starts (a division each: kept out of the tile loop)
    uint32_t lead_;                             // keys before the last row's window start (some rows do not see them)
    uint32_t bad_;                              // bit 2n + j: row 8n + 2t + j met a NaN or +inf score

    /** Byte offset of 16-byte chunk c of row r of a tile (XOR swizzle, variants.h). */
    __device__ static uint32_t swz(int r, int c) { return (uint32_t)(r * C::kRowBytes + ((c ^ (r & 7)) << 4)); }
    __device__ static unsigned char *k_tile(int stage) { return dcpk_smem + stage * 2 * C::kTileBytes; }
    __device__ static unsigned char *v_tile(int stage) { return k_tile(stage) + C::kTileBytes; }
    /** Lane `lane`'s B fragment quad {hi b0, hi b1, lo b0, lo b1} of k-step ks, n-tile n. */
    __device__ static uint4 *q_frag(int n, int ks, int lane)
    {
        return reinterpret_cast<uint4 *>(dcpk_smem + C::kOffQ) + (n * C::kKSteps + ks) * 32 + lane;
    }
    /** Warp w's P^T tile of n-tile n: [part hi/lo][16 keys][8 rows] of 16-bit values. */
    __device__ static unsigned char *p_tile(int w, int n) { return dcpk_smem + C::kOffP + (w * C::kNTiles + n) * 512; }
    /** Warp w's (max, sum) of pass row r. */
    __device__ static float2 *ml_slot(int w, int r)
    {
        return reinterpret_cast<float2 *>(dcpk_smem + C::kOffML) + w * C::kRows + r;
    }
    /** Warp w's rescaled output of pass row r (fp32, in the KV ring after the last tile). */
    __device__ static float *o_row(int w, int r)
    {
        return reinterpret_cast<float *>(dcpk_smem) + (w * C::kRows + r) * C::kOStride;
    }
    /** Bit r: pass row r sees a key whose (non-finite) value sanitize_values() zeroed. */
    __device__ static uint32_t *nan_rows() { return reinterpret_cast<uint32_t *>(dcpk_smem + C::kOffNan); }
    /** Pass row r's visible keys [begin, end) (uint2), for sanitize_values(): no division in the tile loop. */
    __device__ static uint2 *row_keys(int r) { return reinterpret_cast<uint2 *>(dcpk_smem + C::kOffRange) + r; }

    /** mma_split of (x, y): returns (hi.x + lo.x, hi.y + lo.y), the values the MMAs use. */
    __device__ static float2 split(float x, float y, uint32_t &hi, uint32_t &lo)
    {
        return mma_split<C::kIn>(x, y, hi, lo);
    }

    __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
    {
        mma_16816<C::kIn>(d, a, b);
    }

    /** Builds the pass's Q fragments in shared memory (rows past nvalid are 0) and this lane's rows' key counts. */
    __device__ void stage(uint32_t first, uint32_t nvalid)
    {
        const float qscale = p_.scale * kLog2e;
        if (threadIdx.x == 0)
            smem_store(nan_rows(), 0u); // read after the pass's next barrier
        for (uint32_t r = threadIdx.x; r < nvalid; r += C::kNT) { // read by sanitize_values(), after barriers too
            uint32_t begin, end;
            keys_.row_range(first + r, begin, end);
            smem_store(row_keys((int)r), make_uint2(begin, end));
        }
        for (int idx = (int)threadIdx.x; idx < 32 * C::kKSteps * C::kNTiles; idx += C::kNT) {
            const int l = idx % 32, ks = idx / 32 % C::kKSteps, n = idx / (32 * C::kKSteps);
            const uint32_t r = (uint32_t)(8 * n + l / 4);
            const bool valid = r < nvalid;
            const uint64_t q = valid ? attn_row_addr<C::kQK, C::kDV>(p_, it_, first + r).q : 0;
            const int d = 16 * ks + 2 * (l % 4);
            uint32_t hi[2], lo[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float2 xy = valid ? attn_load_q2(q, p_.q_dtype, (uint64_t)(d + 8 * i)) : make_float2(0.f, 0.f);
                split(xy.x * qscale, xy.y * qscale, hi[i], lo[i]);
            }
            smem_store(q_frag(n, ks, l), make_uint4(hi[0], hi[1], lo[0], lo[1]));
        }
        const int t = lane_ % 4;
#pragma unroll
        for (int n = 0; n < C::kNTiles; n++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const uint32_t r = (uint32_t)(8 * n + 2 * t + j);
                uint32_t begin = 0, end = 0;
                if (r < nvalid)
                    keys_.row_range(first + r, begin, end);
                vis_[n][j] = end > begin ? end : 0u;
                from_[n][j] = begin;
            }
    }

    /** Issues the cp.async copies of tile `tile` (keys lo + tile * TK ...) into stage s. */
    __device__ void load_tile(uint32_t tile, uint32_t ntok, int s) const
    {
        const uint32_t nload = min(ntok - tile * C::kTK, (uint32_t)C::kTK);
        unsigned char *kt = k_tile(s), *vt = v_tile(s);
        const TileRows<C::kTK> rows(keys_, tile * C::kTK, nload);
#pragma unroll
        for (int i = 0; i < C::kTK * C::kChunks / C::kNT; i++) {
            const int idx = (int)threadIdx.x + i * C::kNT;
            const int j = idx / C::kChunks, ch = idx % C::kChunks;
            const bool valid = (uint32_t)j < nload;
            const uint64_t row = rows.row(TileRows<C::kTK>::template group<C::kNT, C::kChunks>(i), j);
            const char *ks = reinterpret_cast<const char *>(p_.k_cache) + (row * C::kQK * C::kEsize + ch * 16);
            const char *vs = reinterpret_cast<const char *>(p_.v_cache) + (row * p_.v_row_stride * C::kEsize + ch * 16);
            cp_async16(kt + swz(j, ch), ks, valid);
            cp_async16(vt + swz(j, ch), vs, valid);
        }
    }

    /** Phase 1: this warp's S^T (its 16 keys x the pass's rows) from the tile in stage s. */
    __device__ void scores(int s, uint32_t nvalid, float (&st)[C::kNTiles][4]) const
    {
        const unsigned char *kt = k_tile(s);
        const int key = 16 * warp_ + lane_ % 16, csub = lane_ / 16;
#pragma unroll
        for (int ks = 0; ks < C::kKSteps; ks++) {
            uint32_t a[4];
            ldmatrix<4>(a, kt + swz(key, 2 * ks + csub));
            if constexpr (C::kMutant == TcMutant::swap_rows) {
                const uint32_t x = a[0];
                a[0] = a[1];
                a[1] = x;
            }
#pragma unroll
            for (int n = 0; n < C::kNTiles; n++) {
                if ((uint32_t)n * 8 >= nvalid) // block-uniform: the n-tile has no live row
                    break;
                const uint4 q = smem_load(q_frag(n, ks, lane_));
                const uint32_t bhi[2] = {q.x, q.y}, blo[2] = {q.z, q.w};
                mma(st[n], a, bhi);
                mma(st[n], a, blo);
            }
        }
    }

    /**
     * Phase 2: masks the warp's scores, updates each row's running max and sum,
     * rescales O^T, and stores P^T (hi, lo) in the warp's transposition tiles.
     */
    __device__ void softmax(uint32_t tile, uint32_t nvalid, float (&st)[C::kNTiles][4])
    {
        const int g = lane_ / 4, t = lane_ % 4;
        const uint32_t key0 = tile * C::kTK + 16 * (uint32_t)warp_ + (uint32_t)g; // keys key0, key0 + 8
        const bool lead = tile * C::kTK < lead_; // block-uniform: some row's window starts in or after the tile
#pragma unroll
        for (int n = 0; n < C::kNTiles; n++) {
            if ((uint32_t)n * 8 >= nvalid)
                break;
            float alpha[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float *lo_key = &st[n][j], *hi_key = &st[n][2 + j];
                const uint32_t from = lead ? from_[n][j] : 0u; // the row's window start (rows past nvalid: vis_ 0)
                *lo_key = key0 >= from && key0 < vis_[n][j] ? *lo_key : neg_inf();
                *hi_key = key0 + 8 >= from && key0 + 8 < vis_[n][j] ? *hi_key : neg_inf();
                // A visible NaN or +inf score (masked ones are -inf): fmaxf would drop a NaN.
                const float kInf = __uint_as_float(0x7f800000u);
                bad_ |= *lo_key < kInf && *hi_key < kInf ? 0u : 1u << (2 * n + j);
                float mx = fmaxf(*lo_key, *hi_key);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                const float m_new = fmaxf(m_[n][j], mx);
                const bool none = m_new == neg_inf();
                alpha[j] = none ? 1.f : exp2f(m_[n][j] - m_new);
                *lo_key = none ? 0.f : exp2f(*lo_key - m_new);
                *hi_key = none ? 0.f : exp2f(*hi_key - m_new);
                m_[n][j] = m_new;
                l_[n][j] *= alpha[j];
            }
#pragma unroll
            for (int m = 0; m < C::kKSteps; m++) {
                o_[m][n][0] *= alpha[0];
                o_[m][n][1] *= alpha[1];
                o_[m][n][2] *= alpha[0];
                o_[m][n][3] *= alpha[1];
            }
            // P^T[key][row]: this lane holds keys g (h = 0) and g + 8 (h = 1) of rows 2t, 2t + 1.
            unsigned char *pt = p_tile(warp_, n);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t hi, lo;
                const float2 used = split(st[n][2 * h], st[n][2 * h + 1], hi, lo);
                l_[n][0] += used.x;
                l_[n][1] += used.y;
                smem_store(reinterpret_cast<uint32_t *>(pt + (g + 8 * h) * 16 + 4 * t), hi);
                smem_store(reinterpret_cast<uint32_t *>(pt + 256 + (g + 8 * h) * 16 + 4 * t), lo);
            }
        }
    }

    /** Phase 3: O^T += V^T . P^T over the warp's 16 keys of the tile in stage s. */
    __device__ void accumulate(int s, uint32_t nvalid)
    {
        const unsigned char *vt = v_tile(s);
        const int mat = lane_ / 8;
        const int key = 16 * warp_ + 8 * (mat / 2) + lane_ % 8, csub = mat % 2;
        uint32_t b[C::kNTiles][4]; // {hi b0, hi b1, lo b0, lo b1}
#pragma unroll
        for (int n = 0; n < C::kNTiles; n++) {
            if ((uint32_t)n * 8 >= nvalid)
                break;
            ldmatrix<4, true>(b[n], p_tile(warp_, n) + 256 * (mat / 2) + 16 * (8 * (mat % 2) + lane_ % 8));
        }
#pragma unroll
        for (int m = 0; m < C::kKSteps; m++) {
            uint32_t a[4];
            ldmatrix<4, true>(a, vt + swz(key, 2 * m + csub));
#pragma unroll
            for (int n = 0; n < C::kNTiles; n++) {
                if ((uint32_t)n * 8 >= nvalid)
                    break;
                const uint32_t bhi[2] = {b[n][0], b[n][1]}, blo[2] = {b[n][2], b[n][3]};
                mma(o_[m][n], a, bhi);
                mma(o_[m][n], a, blo);
            }
        }
    }

    /**
     * Zeroes the non-finite values of the tile's keys [lo, hi) in stage s (keys
     * that some rows of the pass see and others do not) and marks in nan_rows()
     * the rows that see such a key: a row that does not see it must not add 0 * NaN
     * through P.V; the rows that see it are flagged in finish() (docs/design.md §4).
     */
    __device__ void sanitize_values(int s, uint32_t nvalid, uint32_t done, uint32_t lo,
                                    uint32_t hi) const
    {
        unsigned char *vt = v_tile(s);
        constexpr uint32_t kExp = C::kIn == MmaIn::bf16 ? 0x7f80u : 0x7c00u; // exponent bits of one half
        for (uint32_t i = threadIdx.x; i < (hi - lo) * C::kChunks; i += C::kNT) {
            const int r = (int)(lo + i / C::kChunks);
            uint4 *c = reinterpret_cast<uint4 *>(vt + swz(r, (int)(i % C::kChunks)));
            const uint4 v = smem_load(c);
            uint32_t w[4] = {v.x, v.y, v.z, v.w};
            bool changed = false;
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const uint32_t m = kExp << (16 * half);
                    if ((w[k] & m) == m) {
                        w[k] &= ~(0xffffu << (16 * half));
                        changed = true;
                    }
                }
            if (changed) {
                smem_store(c, make_uint4(w[0], w[1], w[2], w[3]));
                const uint32_t key = done + (uint32_t)r;
                uint32_t rows = 0;
                for (uint32_t row = 0; row < nvalid; row++) { // rare: a non-finite value in the cache
                    const uint2 range = smem_load(row_keys((int)row));
                    rows |= key >= range.x && key < range.y ? 1u << row : 0u;
                }
                atomicOr(nan_rows(), rows);
            }
        }
    }

    /**
     * Combines the warps' states and writes the pass's LSEs and outputs: rows that
     * see no key (from the lengths) get -inf and 0, rows flagged (a NaN or +inf
     * score, non-finite accumulators, a sanitized key they see) NaN in both.
     */
    __device__ void finish(uint32_t first, uint32_t nvalid)
    {
        const int g = lane_ / 4, t = lane_ % 4;
        cp_async_wait<0>(); // (only empty groups are left)
#pragma unroll
        for (int n = 0; n < C::kNTiles; n++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float l = l_[n][j];
                l += __shfl_xor_sync(0xffffffffu, l, 4);
                l += __shfl_xor_sync(0xffffffffu, l, 8);
                l += __shfl_xor_sync(0xffffffffu, l, 16);
                uint32_t bad = bad_ >> (2 * n + j) & 1u; // or a non-finite accumulator (a NaN value it sees)
#pragma unroll
                for (int m = 0; m < C::kKSteps; m++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        bad |= fabsf(o_[m][n][2 * h + j]) < __uint_as_float(0x7f800000u) ? 0u : 1u;
                bad |= __shfl_xor_sync(0xffffffffu, bad, 4);
                bad |= __shfl_xor_sync(0xffffffffu, bad, 8);
                bad |= __shfl_xor_sync(0xffffffffu, bad, 16);
                // A flagged row's max is NaN: the combine below reads it as the row's flag.
                if (g == 0)
                    smem_store(ml_slot(warp_, 8 * n + 2 * t + j), make_float2(bad ? quiet_nan() : m_[n][j], l));
            }
        __syncthreads(); // every warp's state visible, and done with the KV ring
#pragma unroll
        for (int n = 0; n < C::kNTiles; n++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int r = 8 * n + 2 * t + j;
                float mx = neg_inf();
#pragma unroll
                for (int w = 0; w < C::kWarps; w++)
                    mx = fmaxf(mx, smem_load(ml_slot(w, r)).x);
                float sum = 0.f;
#pragma unroll
                for (int w = 0; w < C::kWarps; w++) {
                    const float2 x = smem_load(ml_slot(w, r));
                    sum += x.x == neg_inf() ? 0.f : x.y * exp2f(x.x - mx);
                }
                const bool empty = vis_[n][j] == 0 || m_[n][j] == neg_inf();
                const float f = empty ? 0.f : exp2f(m_[n][j] - mx) / sum;
#pragma unroll
                for (int m = 0; m < C::kKSteps; m++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        smem_store(o_row(warp_, r) + 16 * m + g + 8 * h, o_[m][n][2 * h + j] * f);
            }
        __syncthreads(); // the rescaled outputs visible
        const uint32_t nan_rows0 = smem_load(nan_rows());
        for (uint32_t r = (uint32_t)warp_; r < nvalid; r += C::kWarps) {
            const RowAddr a = attn_row_addr<C::kQK, C::kDV>(p_, it_, first + r);
            uint32_t begin, end;
            keys_.row_range(first + r, begin, end);
            const bool empty = end <= begin;
            bool bad = nan_rows0 >> r & 1u; // it sees a key whose value was sanitized
            for (int w = 0; w < C::kWarps; w++) {
                const float mw = smem_load(ml_slot(w, (int)r)).x;
                bad = bad || mw != mw; // a warp flagged the row
            }
            with_act_dtype(a.o_dtype, [&](auto dt) {
                for (int d = lane_; d < C::kDV; d += 32) {
                    float sum = 0.f;
#pragma unroll
                    for (int w = 0; w < C::kWarps; w++) // one order: results do not depend on timing
                        sum += smem_load(o_row(w, (int)r) + d);
                    attn_store_o<decltype(dt)::value>(a, (uint64_t)d, bad ? quiet_nan() : sum);
                }
            });
            if (lane_ == 0) {
                float mx = neg_inf(), l = 0.f;
                for (int w = 0; w < C::kWarps; w++)
                    mx = fmaxf(mx, smem_load(ml_slot(w, (int)r)).x);
                for (int w = 0; w < C::kWarps; w++) {
                    const float2 x = smem_load(ml_slot(w, (int)r));
                    l += x.x == neg_inf() ? 0.f : x.y * exp2f(x.x - mx);
                }
                *reinterpret_cast<float *>(a.lse) = bad ? quiet_nan() : empty ? neg_inf() : (mx + log2f(l)) * kLn2;
            }
        }
        __syncthreads(); // shared memory free for the next pass
    }

    /** One pass: rows [first, first + nvalid) of the work item against the split's keys. */
    __device__ void pass(uint32_t first, uint32_t nvalid)
    {
#pragma unroll
        for (int n = 0; n < C::kNTiles; n++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                m_[n][j] = neg_inf();
                l_[n][j] = 0.f;
            }
        bad_ = 0;
#pragma unroll
        for (int m = 0; m < C::kKSteps; m++)
#pragma unroll
            for (int n = 0; n < C::kNTiles; n++)
                o_[m][n][0] = o_[m][n][1] = o_[m][n][2] = o_[m][n][3] = 0.f;
        keys_.segment(0, first, nvalid);
        stage(first, nvalid);
        // Rows are token-major, so the pass's last row sees the most keys and its window starts last;
        // the first row sees the fewest.
        uint32_t ntok, nmin, begin;
        keys_.row_range(first + nvalid - 1, lead_, ntok);
        keys_.row_range(first, begin, nmin);
        const uint32_t ntiles = (ntok + C::kTK - 1) / C::kTK;
#pragma unroll
        for (int s = 0; s < C::kStages - 1; s++) {
            if ((uint32_t)s < ntiles)
                load_tile((uint32_t)s, ntok, s);
            cp_async_commit();
        }
        for (uint32_t tile = 0; tile < ntiles; tile++) {
            if constexpr (C::kMutant != TcMutant::no_wait)
                cp_async_wait<C::kStages - 2>(); // this thread's copies of tile `tile` landed
            if constexpr (C::kMutant != TcMutant::no_barrier)
                __syncthreads(); // everyone's landed, and the stage of tile - 1 is free
            const uint32_t next = tile + C::kStages - 1;
            if (next < ntiles)
                load_tile(next, ntok, (int)(next % C::kStages));
            cp_async_commit();
            const int s = (int)(tile % C::kStages);
            const uint32_t done = tile * C::kTK;
            const bool tail = nmin < ntok && nmin < done + C::kTK; // past the first row's end (block-uniform)
            if (tail || done < lead_) { // keys some rows see and some do not
                const uint32_t n = min(ntok - done, (uint32_t)C::kTK);
                sanitize_values(s, nvalid, done, tail ? (nmin > done ? nmin - done : 0u) : 0u,
                                tail ? n : min(lead_ - done, n));
                if (tail && done < lead_) // both ends in one tile: the part before the tail too
                    sanitize_values(s, nvalid, done, 0u, min(lead_ - done, nmin > done ? nmin - done : 0u));
                __syncthreads(); // the values P.V reads
            }
            float st[C::kNTiles][4] = {};
            scores(s, nvalid, st);
            softmax(tile, nvalid, st);
            if constexpr (C::kMutant != TcMutant::no_syncwarp)
                __syncwarp(); // the warp's P^T stores visible to its ldmatrix
            accumulate(s, nvalid);
        }
        finish(first, nvalid);
    }
};

} // namespace dcpk

#define DCPK_ATTN_GQA_TC_ENTRY(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize)             \
    static_assert(dcpk::elem_bytes<dtype>() == (esize) && (qk) == (v) && (shared) == 0,                \
                  "variants.h: " #layout "_" #dt " is not what attn_gqa_tc.cuh computes");             \
    static_assert(dcpk::GqaTcCfg<qk, dtype, threads, rows, tile>::kSmem ==                             \
                      DCPK_ATTN_GQA_TC_SMEM_BYTES(qk, esize, threads, rows, tile), "smem plan");        \
    extern "C" __global__ void __launch_bounds__(threads, 1) dcpk_attn__##layout##_##dt(const dcpk_attn_params p) \
    {                                                                                                  \
        dcpk::attn_tc_kernel<dcpk::GqaTcBlock, dcpk::GqaTcCfg<qk, dtype, threads, rows, tile>>(p);                        \
    }
DCPK_ATTN_GQA_TC_VARIANTS(DCPK_ATTN_GQA_TC_ENTRY)
#undef DCPK_ATTN_GQA_TC_ENTRY

#endif /* DCPK_ATTN_GQA_TC_CUH */
