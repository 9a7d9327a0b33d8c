/*
 * mma.cuh: warp-level tensor-core building blocks (sm_80+) and checked
 * shared-memory accesses, as small wrappers with one device implementation
 * (inline PTX) and one for tests/kernels_build's emulator (cuda_emu.h), which
 * models the PTX ISA fragment layouts, so a kernel written against these
 * wrappers runs, and fails when it is wrong, on the host.
 *
 * Fragment layouts (g = lane / 4, t = lane % 4), PTX ISA "mma.m16n8k16":
 *   A 16x16 row-major, 4 registers of 2 elements: a[i] = A[g + 8 (i % 2)][2t + 8 (i / 2) + {0, 1}]
 *   B 16x8 (K x N) "col", 2 registers:           b[i] = B[2t + 8 i + {0, 1}][g]
 *   C, D 16x8 fp32, 4 floats:                    c[i] = C[g + 8 (i / 2)][2t + i % 2]
 * ldmatrix .m8n8 .b16: lanes 8m..8m+7 give the row addresses (16 bytes each) of
 * matrix m; register m of lane l holds row l / 4, columns 2 (l % 4) + {0, 1}
 * (.trans: column l / 4 of rows 2 (l % 4) + {0, 1}). So an .x4 load of a
 * row-major 16x16 tile whose lanes 0-15 point at rows 0-15 (column 0) and lanes
 * 16-31 at rows 0-15 (column 8) yields exactly an A fragment, and an .x2 load of
 * an [N][K] tile (8 rows of 16 K values) yields a B fragment.
 */
#ifndef DCPK_MMA_CUH
#define DCPK_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "device.cuh"

namespace dcpk {

/**
 * Deliberate bugs of the tensor-core attention kernels, for tests/kernels_build
 * to prove that its emulated tests catch them (test_*_tc_mutants); the fatbin
 * instantiates none only. no_syncwarp: the GQA entry's P^T transposition.
 */
enum class TcMutant { none, no_wait, no_barrier, swap_rows, no_syncwarp };

/** Input element type of an mma: bf16 or fp16 (fp32 accumulators either way). */
enum class MmaIn { bf16, fp16 };

/** d = A b + d for one m16n8k16 tile (see the layouts above). */
template <MmaIn IN>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
#if defined(__CUDA_ARCH__)
    if constexpr (IN == MmaIn::bf16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(DCP_TEST_CUDA_EMU_H)
    emu::mma_16816(IN == MmaIn::bf16, d, a, b, d);
#endif
}

/** ldmatrix .x N (1, 2 or 4) of 8x8 b16 matrices; row: this lane's row address in shared memory. */
template <int N, bool TRANS = false>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[N], const void *row)
{
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix .x1, .x2 or .x4");
#if defined(__CUDA_ARCH__)
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    if constexpr (N == 1 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
    else if constexpr (N == 1)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
    else if constexpr (N == 2 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    else if constexpr (N == 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(a));
    else if constexpr (!TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#elif defined(DCP_TEST_CUDA_EMU_H)
    emu::ldmatrix(N, TRANS, r, row);
#endif
}

/** A read of shared memory that the emulator checks for races and uninitialised words. */
template <class T>
__device__ __forceinline__ T smem_load(const T *p)
{
#if !defined(__CUDA_ARCH__) && defined(DCP_TEST_CUDA_EMU_H)
    emu::on_read(p, sizeof(T), "load");
#endif
    return *p;
}

/** A write of shared memory that the emulator checks for races. */
template <class T>
__device__ __forceinline__ void smem_store(T *p, const T &v)
{
#if !defined(__CUDA_ARCH__) && defined(DCP_TEST_CUDA_EMU_H)
    emu::on_write(p, sizeof(T), "store", false);
#endif
    *p = v;
}

/** Two floats as packed bf16 (round to nearest even), x in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float x, float y)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/** Two floats as packed fp16 (round to nearest even), x in the low half. */
__device__ __forceinline__ uint32_t pack_fp16(float x, float y)
{
    const __half2 h = __floats2half2_rn(x, y);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/** x, y rounded to the MMA input type IN, packed (x low). */
template <MmaIn IN>
__device__ __forceinline__ uint32_t mma_pack(float x, float y)
{
    if constexpr (IN == MmaIn::bf16)
        return pack_bf16(x, y);
    else
        return pack_fp16(x, y);
}

/** The two values of a packed pair of IN (exact). */
template <MmaIn IN>
__device__ __forceinline__ float2 mma_unpack(uint32_t u)
{
    if constexpr (IN == MmaIn::bf16)
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    else
        return __half22float2(half2_bits(u));
}

/**
 * hi = (x, y) rounded to IN, lo = the residues rounded (x = hi + lo up to 2^-18 |x|
 * for bf16); returns the values the MMAs use: hi + lo, or hi alone when !with_lo.
 */
template <MmaIn IN>
__device__ __forceinline__ float2 mma_split(float x, float y, uint32_t &hi, uint32_t &lo, bool with_lo = true)
{
    hi = mma_pack<IN>(x, y);
    const float2 h = mma_unpack<IN>(hi);
    lo = mma_pack<IN>(x - h.x, y - h.y);
    if (!with_lo)
        return h;
    const float2 l = mma_unpack<IN>(lo);
    return make_float2(h.x + l.x, h.y + l.y);
}

} // namespace dcpk

#endif /* DCPK_MMA_CUH */
