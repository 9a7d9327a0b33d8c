/*
 * attn_mla_tc.cuh: MLA decode attention (576 K / 512 V, one latent KV head, V =
 * the first 512 values of each K row) on tensor cores: mma.sync m16n8k16 with
 * bf16 or fp16 inputs (the cache dtype) and fp32 accumulators, operands from
 * shared memory through ldmatrix. Same params (struct dcpk_attn_params), work
 * items, passes and results as attn.cuh; the entries are DCPK_ATTN_MLA_TC_VARIANTS.
 *
 * A pass serves ROWS = 32 query rows (rows = head x query token, token-major) in
 * two m16 row groups; each row group has Q = 4 warps ("quarters"). Per KV tile of
 * TK = 32 tokens (16-byte cp.async copies, double-buffered):
 *   1. S = Q . K^T: warp (row group, quarter q) multiplies its 16 rows by the
 *      tile over depth [144 q, 144 q + 144): 9 k-steps x 4 n-tiles of 8 keys.
 *      Its Q fragments are made once per pass from global memory (scaled by
 *      scale * log2(e), rounded, and the residues for exact) and wait in shared
 *      memory, each thread's own registers' worth (no ldmatrix, no barrier). The 4 partial S of a row group
 *      meet in shared memory and every warp of the group sums them in the same
 *      order, so all 4 hold the same S (and so the same softmax state).
 *   2. online softmax on the S accumulators in registers (each row's values live
 *      in the 4 lanes of a quad: two shuffles for a max), masked per row from the
 *      lengths as in attn.cuh;
 *   3. O += P . V: the S accumulators of two n-tiles are exactly an A fragment
 *      (P stays in registers), V comes from the same shared tile through
 *      ldmatrix.trans; warp quarter q owns output columns [128 q, 128 q + 128).
 * precision (params.h): fast rounds Q and P once to the MMA input type; exact
 * adds a second mma with the rounding residues (x = hi + lo, |x - hi - lo| <=
 * 2^-18 |x| for bf16), so every product is exact to about fp32 accumulation. The
 * softmax denominator sums the P values the MMA used (hi, or hi + lo).
 * fp16 caches multiply fp16 queries: |q * scale * log2(e)| must stay below 65504.
 * fp8 e4m3 caches: the copies land raw in a double buffer of their own and each
 * thread widens the chunks it copied into the (single) bf16 tile after its wait,
 * before the barrier that publishes the tile; e4m3 values are exact in bf16, and
 * kv_scale is applied in fp32 to the scaled queries and to the output (the same
 * as scaling K and V, with no extra rounding). The MMAs then run as for bf16.
 */
#ifndef DCPK_ATTN_MLA_TC_CUH
#define DCPK_ATTN_MLA_TC_CUH

#include "attn.cuh"
#include "mma.cuh"

namespace dcpk {

/** Compile-time plan of one tensor-core MLA entry (DCPK_ATTN_TC_VARIANTS row). */
template <uint32_t DT, int NT, int ROWS, int TK, TcMutant MUT = TcMutant::none>
struct MlaTcCfg {
    static constexpr int kQK = 576, kDV = 512, kShared = 1, kNT = NT, kRows = ROWS, kTK = TK;
    static constexpr uint32_t kDtype = DT;
    static constexpr int kEsize = elem_bytes<DT>();   // cache element bytes
    static constexpr bool kFp8 = DT == DCPK_FP8_E4M3; // widened to bf16 in shared memory
    static constexpr int kTEsize = kFp8 ? 2 : kEsize; // element bytes of the tile the MMAs read
    static constexpr TcMutant kMutant = MUT;
    static constexpr MmaIn kIn = DT == DCPK_FP16 ? MmaIn::fp16 : MmaIn::bf16;
    static constexpr int kQuarters = DCPK_ATTN_TC_QUARTERS(NT, ROWS);
    static constexpr int kKSteps = kQK / kQuarters / 16; // S depth steps of a warp
    static constexpr int kSTiles = TK / 8;               // S n-tiles (8 keys)
    static constexpr int kCols = kDV / kQuarters;        // O columns of a warp
    static constexpr int kOTiles = kCols / 8;            // O n-tiles
    static constexpr int kChunks = DCPK_ATTN_CHUNKS(kQK, kTEsize);   // per tile row
    static constexpr int kRawChunks = DCPK_ATTN_CHUNKS(kQK, kEsize); // per cache row
    static constexpr int kRowBytes = DCPK_ATTN_TC_ROW_CHUNKS(kQK, kTEsize) * 16;
    static constexpr uint32_t kOffRaw = (uint32_t)TK * kRowBytes; // fp8: raw rows after the one bf16 tile
    static constexpr uint32_t kOffX = DCPK_ATTN_TC_SMEM_K(kQK, kEsize, TK);
    static constexpr uint32_t kOffQ = kOffX + DCPK_ATTN_TC_SMEM_X(NT, ROWS, TK);
    static constexpr uint32_t kSmem = DCPK_ATTN_TC_SMEM_BYTES(kQK, kEsize, NT, ROWS, TK);
    static constexpr uint32_t kSparseCap = DCPK_SPARSE_CAP(NT, TK); // keys of a sparse entry's list (after kSmem)

    static_assert(DT == DCPK_BF16 || DT == DCPK_FP16 || DT == DCPK_FP8_E4M3,
                  "the MMA takes bf16 or fp16 inputs (fp8 widened to bf16)");
    static_assert(ROWS % 16 == 0 && NT == 32 * kQuarters * (ROWS / 16), "row groups of whole warps");
    static_assert(kQK % (16 * kQuarters) == 0 && kDV % (16 * kQuarters) == 0, "quarters of whole k-steps / n-tile pairs");
    static_assert(TK % 16 == 0, "P.V takes keys 16 at a time");
    static_assert(TK * kChunks % NT == 0, "every thread copies the same number of chunks");
    static_assert(kOffX % 16 == 0, "exchange buffer of float4s");
};

/**
 * The tensor-core MLA block of a work item (MlaTcCfg C), its keys from K (DenseKeys
 * for dcpk_attn, SparseKeys for dcpk_sparse_attn): passes of 32 rows, each over the
 * segments of K, each segment's keys in tiles.
 */
template <class C, class K>
class MlaTcBlockOf {
  public:
    using P = typename K::Params;
    __device__ MlaTcBlockOf(const P &p, const AttnItem &it)
        : p_(p), it_(it), keys_(p, it), lane_((int)threadIdx.x % 32), rg_((int)threadIdx.x / 32 / C::kQuarters),
          qd_((int)threadIdx.x / 32 % C::kQuarters), exact_(p.precision == DCPK_PRECISION_EXACT)
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
    const P &p_;
    const AttnItem &it_;
    K keys_;
    const int lane_, rg_, qd_;
    const bool exact_;

    float o_[C::kOTiles][4];                           // C fragments of this warp's O columns
    float m_[2], l_[2];    // rows g and g + 8: running max (log2 domain), this lane's share of the sum
    uint32_t vis_[2];      // keys of the segment rows g and g + 8 see: [from_, vis_); 0: none
    uint32_t from_[2];     // those rows' window starts (a division each: kept out of the tile loop)
    uint32_t lead_;        // keys before the last row's window start (some rows do not see them)
    bool bad_[2];          // rows g and g + 8 met a NaN or +inf score: their result is NaN (design.md §4)

    __device__ static unsigned char *k_tile(int buf)
    {
        return C::kFp8 ? dcpk_smem : dcpk_smem + buf * C::kTK * C::kRowBytes;
    }
    /** fp8: raw cache rows of buffer buf, unpadded (only the copying thread reads them). */
    __device__ static unsigned char *raw_tile(int buf)
    {
        return dcpk_smem + C::kOffRaw + buf * C::kTK * C::kQK;
    }
    /** Partial scores of (row group, quarter, n-tile j), one float4 per lane. */
    __device__ static float4 *x_slot(int rg, int qd, int j)
    {
        return reinterpret_cast<float4 *>(dcpk_smem + C::kOffX) + ((rg * C::kQuarters + qd) * C::kSTiles + j) * 32;
    }

    /**
     * This thread's register quad of the Q A fragment of k-step ks (part 0: the
     * rounded values, 1: the residues), written and read by this thread only.
     */
    __device__ static uint4 *q_frag(int part, int ks)
    {
        return reinterpret_cast<uint4 *>(dcpk_smem + C::kOffQ) + (part * C::kKSteps + ks) * C::kNT + threadIdx.x;
    }

    /** mma_split of (x, y); returns the sum of the two values the MMAs use. */
    __device__ static float split(float x, float y, uint32_t &hi, uint32_t &lo, bool with_lo)
    {
        const float2 used = mma_split<C::kIn>(x, y, hi, lo, with_lo);
        return used.x + used.y;
    }

    __device__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) const
    {
        mma_16816<C::kIn>(d, a, b);
    }

    /** The keys of the segment rows g and g + 8 see (vis_). */
    __device__ void ranges(uint32_t first, uint32_t nvalid)
    {
        const int g = lane_ / 4;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t r = (uint32_t)(rg_ * 16 + g + 8 * h);
            uint32_t begin = 0, end = 0;
            if (r < nvalid)
                keys_.row_range(first + r, begin, end);
            vis_[h] = end > begin ? end : 0u;
            from_[h] = begin;
        }
    }

    /** Loads this warp's Q fragments of the pass (rows past nvalid are 0). */
    __device__ void stage(uint32_t first, uint32_t nvalid)
    {
        const float qscale = p_.scale * kLog2e * (C::kFp8 ? p_.kv_scale : 1.f);
        const int g = lane_ / 4, t = lane_ % 4;
        uint64_t q[2]; // the rows' query addresses; 0 past nvalid (a real row's never is)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t r = (uint32_t)(rg_ * 16 + g + 8 * h);
            const bool valid = r < nvalid;
            q[h] = valid ? attn_row_addr<C::kQK, C::kDV>(p_, it_, first + r).q : 0;
        }
        // One k-step at a time, straight to shared memory: few registers live
        // (all k-steps in registers, as before q_dtype, leaves the entry none to spare).
#pragma unroll 1
        for (int ks = 0; ks < C::kKSteps; ks++) {
            uint32_t hi[4], lo[4];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int d = qd_ * (C::kQK / C::kQuarters) + 16 * ks + 8 * half + 2 * t;
                    const float2 xy = q[h] ? attn_load_q2(q[h], p_.q_dtype, (uint64_t)d) : make_float2(0.f, 0.f);
                    split(xy.x * qscale, xy.y * qscale, hi[h + 2 * half], lo[h + 2 * half], true);
                }
            smem_store(q_frag(0, ks), make_uint4(hi[0], hi[1], hi[2], hi[3]));
            smem_store(q_frag(1, ks), make_uint4(lo[0], lo[1], lo[2], lo[3]));
        }
    }

    /** Issues the cp.async copies of tile `tile` (keys tile * TK ... of the segment) into buffer buf. */
    __device__ void load_tile(uint32_t tile, uint32_t ntok, int buf) const
    {
        const uint32_t nload = min(ntok - tile * C::kTK, (uint32_t)C::kTK);
        unsigned char *kt = C::kFp8 ? raw_tile(buf) : k_tile(buf);
        constexpr int kTotal = C::kTK * C::kRawChunks;
        const TileRows<C::kTK> rows(keys_, tile * C::kTK, nload);
#pragma unroll
        for (int i = 0; i < (kTotal + C::kNT - 1) / C::kNT; i++) {
            const int idx = (int)threadIdx.x + i * C::kNT;
            const int j = idx / C::kRawChunks, ch = idx % C::kRawChunks;
            const uint64_t row = rows.row(TileRows<C::kTK>::template group<C::kNT, C::kRawChunks>(i), j);
            if (kTotal % C::kNT != 0 && idx >= kTotal)
                break;
            const bool valid = (uint32_t)j < nload;
            const char *src = reinterpret_cast<const char *>(p_.k_cache) + (row * C::kQK * C::kEsize + ch * 16);
            cp_async16(kt + (C::kFp8 ? j * C::kQK : j * C::kRowBytes) + ch * 16, src, valid);
        }
    }

    /**
     * fp8: widens the raw chunks this thread copied into buffer buf (load_tile's
     * mapping, so its own wait suffices) into the bf16 tile, exactly.
     */
    __device__ void widen(int buf) const
    {
        constexpr int kTotal = C::kTK * C::kRawChunks;
#pragma unroll
        for (int i = 0; i < (kTotal + C::kNT - 1) / C::kNT; i++) {
            const int idx = (int)threadIdx.x + i * C::kNT;
            if (kTotal % C::kNT != 0 && idx >= kTotal)
                break;
            const int j = idx / C::kRawChunks, ch = idx % C::kRawChunks;
            const uint4 raw = smem_load(reinterpret_cast<const uint4 *>(raw_tile(buf) + j * C::kQK + ch * 16));
            uint32_t w[8];
#pragma unroll
            for (int pc = 0; pc < 4; pc++) {
                const float4 f = unpack4<DCPK_FP8_E4M3>(raw, pc);
                w[2 * pc] = pack_bf16(f.x, f.y);
                w[2 * pc + 1] = pack_bf16(f.z, f.w);
            }
            uint4 *dst = reinterpret_cast<uint4 *>(k_tile(0) + j * C::kRowBytes + ch * 32);
            smem_store(dst, make_uint4(w[0], w[1], w[2], w[3]));
            smem_store(dst + 1, make_uint4(w[4], w[5], w[6], w[7]));
        }
    }

    /** Phase 1: this warp's partial S over its depth slice. */
    __device__ void scores(int buf, float (&s)[C::kSTiles][4]) const
    {
        const unsigned char *kt = k_tile(buf);
        const int tok = 8 * (lane_ / 16) + lane_ % 8, dsub = 8 * (lane_ / 8 % 2);
#pragma unroll
        for (int ks = 0; ks < C::kKSteps; ks++) {
            const int d = qd_ * (C::kQK / C::kQuarters) + 16 * ks + dsub;
            const uint4 h4 = smem_load(q_frag(0, ks));
            uint32_t a[4] = {h4.x, h4.y, h4.z, h4.w}, lo[4] = {0, 0, 0, 0};
            if (exact_) {
                const uint4 l4 = smem_load(q_frag(1, ks));
                lo[0] = l4.x;
                lo[1] = l4.y;
                lo[2] = l4.z;
                lo[3] = l4.w;
            }
            if constexpr (C::kMutant == TcMutant::swap_rows) {
                a[0] = h4.y;
                a[1] = h4.x;
            }
#pragma unroll
            for (int jp = 0; jp < C::kSTiles / 2; jp++) {
                uint32_t b[4];
                ldmatrix<4>(b, kt + (16 * jp + tok) * C::kRowBytes + d * 2);
                const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                mma(s[2 * jp], a, b0);
                mma(s[2 * jp + 1], a, b1);
                if (exact_) {
                    mma(s[2 * jp], lo, b0);
                    mma(s[2 * jp + 1], lo, b1);
                }
            }
        }
    }

    /**
     * Phase 2: masks the tile's scores, updates the running max, rescales O, and
     * turns S into the P fragments of the P.V product (hi, and lo when exact).
     */
    __device__ void softmax(uint32_t tile, float (&s)[C::kSTiles][4],
                            uint32_t (&phi)[C::kTK / 16][4], uint32_t (&plo)[C::kTK / 16][4])
    {
        const int t = lane_ % 4;
        const uint32_t done = tile * C::kTK;
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t vis = vis_[h] > done ? min(vis_[h] - done, (uint32_t)C::kTK) : 0u;
            // Before the row's window start (only in the tiles before the last row's, block-uniform).
            const uint32_t from = done < lead_ ? from_[h] : 0u; // rows past nvalid: vis_ 0
            const uint32_t lead = from > done ? min(from - done, (uint32_t)C::kTK) : 0u;
            float mx = neg_inf();
            uint32_t bad = 0; // a visible score that is NaN or +inf (fmaxf would drop a NaN)
#pragma unroll
            for (int j = 0; j < C::kSTiles; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const uint32_t key = (uint32_t)(8 * j + 2 * t + e);
                    s[j][2 * h + e] = key >= lead && key < vis ? s[j][2 * h + e] : neg_inf();
                    bad |= s[j][2 * h + e] < __uint_as_float(0x7f800000u) ? 0u : 1u;
                    mx = fmaxf(mx, s[j][2 * h + e]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            bad |= __shfl_xor_sync(0xffffffffu, bad, 1);
            bad |= __shfl_xor_sync(0xffffffffu, bad, 2);
            bad_[h] = bad_[h] || bad != 0;
            const float m_new = fmaxf(m_[h], mx);
            const bool none = m_new == neg_inf();
            alpha[h] = none ? 1.f : exp2f(m_[h] - m_new);
#pragma unroll
            for (int j = 0; j < C::kSTiles; j++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    s[j][2 * h + e] = none ? 0.f : exp2f(s[j][2 * h + e] - m_new);
            m_[h] = m_new;
            l_[h] *= alpha[h];
        }
#pragma unroll
        for (int n = 0; n < C::kOTiles; n++) {
            o_[n][0] *= alpha[0];
            o_[n][1] *= alpha[0];
            o_[n][2] *= alpha[1];
            o_[n][3] *= alpha[1];
        }
        // A fragment of keys [16 kk, 16 kk + 16): a[i] = rows g + 8 (i % 2), keys 2t + 8 (i / 2).
#pragma unroll
        for (int kk = 0; kk < C::kTK / 16; kk++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float *c = s[2 * kk + i / 2] + 2 * (i % 2);
                l_[i % 2] += split(c[0], c[1], phi[kk][i], plo[kk][i], exact_);
            }
    }

    /** Phase 3: O += P . V, V = the first 512 columns of the tile's K rows. */
    __device__ void accumulate(int buf, const uint32_t (&phi)[C::kTK / 16][4], const uint32_t (&plo)[C::kTK / 16][4])
    {
        const unsigned char *kt = k_tile(buf);
        const int mat = lane_ / 8;
        const int tok = 8 * (mat % 2) + lane_ % 8, csub = 8 * (mat / 2);
#pragma unroll
        for (int kk = 0; kk < C::kTK / 16; kk++)
#pragma unroll
            for (int np = 0; np < C::kOTiles / 2; np++) {
                const int col = qd_ * C::kCols + 16 * np + csub;
                uint32_t b[4];
                ldmatrix<4, true>(b, kt + (16 * kk + tok) * C::kRowBytes + col * 2);
                const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                mma(o_[2 * np], phi[kk], b0);
                mma(o_[2 * np + 1], phi[kk], b1);
                if (exact_) {
                    mma(o_[2 * np], plo[kk], b0);
                    mma(o_[2 * np + 1], plo[kk], b1);
                }
            }
    }

    /**
     * Zeroes the non-finite values (V: the first 512 columns) of the tile's keys
     * [lo, hi), the keys some rows of the pass see and others do not (the causal mask
     * of a multi-token query). A row that sees such a key already has its NaN in S
     * (V is inside K), so its result is NaN whatever P.V adds; a row that does not
     * see it must not get 0 * NaN from the P.V product (docs/design.md §4).
     */
    __device__ void sanitize_values(int buf, uint32_t lo, uint32_t hi) const
    {
        unsigned char *kt = k_tile(buf);
        // The tile P.V reads: fp8 was widened to bf16 (its NaN too), so sanitize the bf16 values.
        constexpr int kVChunks = C::kDV * C::kTEsize / 16;
        constexpr uint32_t kExp = C::kIn == MmaIn::bf16 ? 0x7f80u : 0x7c00u; // exponent bits of one half
        for (uint32_t i = threadIdx.x; i < (hi - lo) * kVChunks; i += C::kNT) {
            uint4 *c = reinterpret_cast<uint4 *>(kt + (lo + i / kVChunks) * C::kRowBytes) + i % kVChunks;
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
            if (changed)
                smem_store(c, make_uint4(w[0], w[1], w[2], w[3]));
        }
    }

    /** Writes the pass's LSEs (quarter 0) and this warp's output columns; empty rows get -inf and 0,
     *  rows that met a NaN or +inf score NaN in both. */
    __device__ void finish(uint32_t first, uint32_t nvalid)
    {
        const int g = lane_ / 4, t = lane_ % 4;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float l = l_[h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const uint32_t r = (uint32_t)(rg_ * 16 + g + 8 * h);
            if (r >= nvalid)
                continue;
            const bool empty = vis_[h] == 0;
            // Every warp of the row group holds the same S, so the same bad_ flag.
            const bool bad = bad_[h];
            const RowAddr a = attn_row_addr<C::kQK, C::kDV>(p_, it_, first + r);
            if (qd_ == 0 && t == 0)
                *reinterpret_cast<float *>(a.lse) = bad ? quiet_nan() : empty ? neg_inf() : (m_[h] + log2f(l)) * kLn2;
            const float f = empty ? 0.f : (C::kFp8 ? p_.kv_scale : 1.f) / l;
            const uint64_t o = (uint64_t)(qd_ * C::kCols + 2 * t);
            with_act_dtype(a.o_dtype, [&](auto dt) {
                constexpr uint32_t DT = decltype(dt)::value;
#pragma unroll
                for (int n = 0; n < C::kOTiles; n++) {
                    attn_store_o<DT>(a, o + 8 * n, bad ? quiet_nan() : empty ? 0.f : o_[n][2 * h] * f);
                    attn_store_o<DT>(a, o + 8 * n + 1, bad ? quiet_nan() : empty ? 0.f : o_[n][2 * h + 1] * f);
                }
            });
        }
    }

    /** One pass: rows [first, first + nvalid) of the work item against every segment of its keys. */
    __device__ void pass(uint32_t first, uint32_t nvalid)
    {
        m_[0] = m_[1] = neg_inf();
        l_[0] = l_[1] = 0.f;
        bad_[0] = bad_[1] = false;
#pragma unroll
        for (int n = 0; n < C::kOTiles; n++)
            o_[n][0] = o_[n][1] = o_[n][2] = o_[n][3] = 0.f;
        stage(first, nvalid);
        const bool live = (uint32_t)rg_ * 16 < nvalid; // warp-uniform: some row of the group is live
        for (uint32_t seg = 0; keys_.segment(seg, first, nvalid); seg++) {
            ranges(first, nvalid);
            // Rows are token-major, so the pass's last row sees the most keys and its window
            // starts last; the first row sees the fewest.
            uint32_t ntok, nmin, begin;
            keys_.row_range(first + nvalid - 1, lead_, ntok);
            keys_.row_range(first, begin, nmin);
            const uint32_t ntiles = (ntok + C::kTK - 1) / C::kTK;
            if (ntiles > 0)
                load_tile(0, ntok, 0);
            cp_async_commit();
            for (uint32_t tile = 0; tile < ntiles; tile++) {
                const int buf = tile & 1;
                if (tile + 1 < ntiles)
                    load_tile(tile + 1, ntok, buf ^ 1);
                cp_async_commit();
                if constexpr (C::kMutant != TcMutant::no_wait)
                    cp_async_wait<1>();
                if constexpr (C::kFp8)
                    widen(buf); // this thread's copies, into the bf16 tile the last barrier freed
                if constexpr (C::kMutant != TcMutant::no_barrier)
                    __syncthreads(); // tile `tile` landed (and widened) for every thread's copies
                float s[C::kSTiles][4] = {};
                if (live) {
                    scores(buf, s);
#pragma unroll
                    for (int j = 0; j < C::kSTiles; j++)
                        smem_store(x_slot(rg_, qd_, j) + lane_, make_float4(s[j][0], s[j][1], s[j][2], s[j][3]));
                }
                __syncthreads(); // partial scores of the row group visible
                const uint32_t done = tile * C::kTK;
                // Keys some rows see and some do not (block-uniform): past the first row's end,
                // and before the last row's window start.
                const uint32_t n = min(ntok - done, (uint32_t)C::kTK);
                const bool tail = nmin < ntok && nmin < done + C::kTK;
                if (tail || done < lead_) {
                    const uint32_t tail_lo = tail ? (nmin > done ? nmin - done : 0u) : n;
                    sanitize_values(buf, tail_lo, n);
                    if (done < lead_)
                        sanitize_values(buf, 0u, min(lead_ - done, tail_lo));
                    __syncthreads(); // the values P.V reads
                }
                if (live) {
#pragma unroll
                    for (int j = 0; j < C::kSTiles; j++) {
                        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                        for (int q = 0; q < C::kQuarters; q++) { // the same order in every warp of the group
                            const float4 x = smem_load(x_slot(rg_, q, j) + lane_);
                            sum.x += x.x;
                            sum.y += x.y;
                            sum.z += x.z;
                            sum.w += x.w;
                        }
                        s[j][0] = sum.x;
                        s[j][1] = sum.y;
                        s[j][2] = sum.z;
                        s[j][3] = sum.w;
                    }
                    uint32_t phi[C::kTK / 16][4], plo[C::kTK / 16][4];
                    softmax(tile, s, phi, plo);
                    accumulate(buf, phi, plo);
                }
                __syncthreads(); // buffer buf and the exchange slots free for the next tile
            }
        }
        if (live)
            finish(first, nvalid);
        __syncthreads(); // the rows' key counts and the list are read above before the next pass writes them
    }
};

/** The block of a dcpk_attn work item, and of a dcpk_sparse_attn one. */
template <class C>
using MlaTcBlock = MlaTcBlockOf<C, DenseKeys>;
template <class C>
using MlaTcSparseBlock = MlaTcBlockOf<C, SparseKeys<C>>;

} // namespace dcpk

#define DCPK_ATTN_TC_ENTRY(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize)                 \
    static_assert(dcpk::elem_bytes<dtype>() == (esize) && (qk) == 576 && (v) == 512 && (shared) == 1,  \
                  "variants.h: " #layout "_" #dt " is not what attn_mla_tc.cuh computes");             \
    static_assert(dcpk::MlaTcCfg<dtype, threads, rows, tile>::kSmem ==                                 \
                      DCPK_ATTN_TC_SMEM_BYTES(qk, esize, threads, rows, tile), "smem plan");            \
    extern "C" __global__ void __launch_bounds__(threads, 1) dcpk_attn__##layout##_##dt(const dcpk_attn_params p) \
    {                                                                                                  \
        dcpk::attn_tc_kernel<dcpk::MlaTcBlock, dcpk::MlaTcCfg<dtype, threads, rows, tile>>(p);          \
    }
DCPK_ATTN_MLA_TC_VARIANTS(DCPK_ATTN_TC_ENTRY)
#undef DCPK_ATTN_TC_ENTRY

/* The tensor-core sparse entries (DSA): the same block over a token's top-k keys (SparseKeys). */
#define DCPK_SPARSE_TC_ENTRY(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize)                  \
    static_assert(dcpk::MlaTcCfg<dtype, threads, rows, tile>::kSmem + DCPK_SPARSE_SMEM_LIST(threads, tile) == \
                      DCPK_SPARSE_TC_SMEM_BYTES(qk, esize, threads, rows, tile),                          \
                  "sparse smem plan");                                                                    \
    extern "C" __global__ void __launch_bounds__(threads, 1)                                              \
        dcpk_sparse_attn__##layout##_##dt(const dcpk_sparse_attn_params p)                                \
    {                                                                                                     \
        dcpk::sparse_tc_kernel<dcpk::MlaTcSparseBlock, dcpk::MlaTcCfg<dtype, threads, rows, tile>>(p);     \
    }
DCPK_SPARSE_TC_VARIANTS(DCPK_SPARSE_TC_ENTRY)
#undef DCPK_SPARSE_TC_ENTRY

#endif /* DCPK_ATTN_MLA_TC_CUH */
