/*
 * device.cuh: device-only helpers of the CUDA kernels: element conversions with
 * the hardware instructions (cuda_bf16/fp16/fp8 headers, header-only), cp.async,
 * warp reductions and grid-stride work-item loops. Nothing here needs libcudart.
 * The kernel sources also compile for the host, where tests/kernels_build runs
 * them through a small emulation of the CUDA execution model.
 */
#ifndef DCPK_DEVICE_CUH
#define DCPK_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "dcp_kernels/convert.h"

namespace dcpk {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }
__device__ __forceinline__ float quiet_nan() { return __uint_as_float(0x7fc00000u); }

/**
 * a * b and a + b rounded once each, never contracted into an FMA: kernels that
 * must give the CPU implementation's bits (ISO C compiles a * b + c as two
 * roundings) use them where nvcc would fuse.
 */
__device__ __forceinline__ float fmul_rn(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

__device__ __forceinline__ float fadd_rn(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* ---- element types ------------------------------------------------------ */

/** Bytes of one cache element of dtype DT: dcpk_dtype_size at compile time, from the
 * same DCPK_DTYPES rows (0 for an unknown dtype, which no entry instantiates). */
template <uint32_t DT>
constexpr int elem_bytes()
{
#define DCPK_ELEM_BYTES_(NAME, name, bytes, scaled, wire, codec) DT == DCPK_##NAME ? (bytes) :
    return DCPK_DTYPES(DCPK_ELEM_BYTES_) 0;
#undef DCPK_ELEM_BYTES_
}

/** Whether dtype DT is stored scaled by kv_scale: dcpk_dtype_scaled at compile time. */
template <uint32_t DT>
constexpr bool elem_scaled()
{
#define DCPK_ELEM_SCALED_(NAME, name, bytes, scaled, wire, codec) ((scaled) && DT == DCPK_##NAME) ||
    return DCPK_DTYPES(DCPK_ELEM_SCALED_) false;
#undef DCPK_ELEM_SCALED_
}

/** Word w (0..3) of a 16-byte chunk; w is a compile-time constant after unrolling. */
__device__ __forceinline__ uint32_t chunk_word(const uint4 &c, int w)
{
    return w == 0 ? c.x : w == 1 ? c.y : w == 2 ? c.z : c.w;
}

/** The two fp16 values packed in a word (low half first). */
__device__ __forceinline__ __half2 half2_bits(uint32_t w)
{
    __half2_raw r;
    r.x = (unsigned short)(w & 0xffffu);
    r.y = (unsigned short)(w >> 16);
    return __half2(r);
}

/**
 * Elements [4 * piece, 4 * piece + 4) of a 16-byte chunk of dtype DT as fp32 (the
 * chunk holds 16 / elem_bytes<DT>() elements; piece < that / 4). Exact.
 */
template <uint32_t DT>
__device__ __forceinline__ float4 unpack4(const uint4 &c, int piece)
{
    if constexpr (DT == DCPK_FP32) {
        (void)piece;
        return make_float4(__uint_as_float(c.x), __uint_as_float(c.y), __uint_as_float(c.z),
                           __uint_as_float(c.w));
    } else if constexpr (DT == DCPK_BF16) {
        const uint32_t a = chunk_word(c, 2 * piece), b = chunk_word(c, 2 * piece + 1);
        return make_float4(__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u),
                           __uint_as_float(b << 16), __uint_as_float(b & 0xffff0000u));
    } else if constexpr (DT == DCPK_FP16) {
        const uint32_t a = chunk_word(c, 2 * piece), b = chunk_word(c, 2 * piece + 1);
        const float2 lo = __half22float2(half2_bits(a)), hi = __half22float2(half2_bits(b));
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    } else if constexpr (DT == DCPK_FP8_E4M3) {
        const uint32_t w = chunk_word(c, piece);
        const __half2 lo(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3));
        const __half2 hi(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3));
        const float2 l = __half22float2(lo), h = __half22float2(hi);
        return make_float4(l.x, l.y, h.x, h.y);
    } else {
        /* Any other row of DCPK_DTYPES: its codec, element by element. */
        const void *e = &c;
        const uint64_t i = 4u * (uint64_t)piece;
        return make_float4(dcpk_load_as_f32(e, i, DT), dcpk_load_as_f32(e, i + 1, DT), dcpk_load_as_f32(e, i + 2, DT),
                           dcpk_load_as_f32(e, i + 3, DT));
    }
}

/**
 * Stores v as element idx of an array of dtype: the dtype's codec
 * (dcp_kernels/convert.h), which uses the conversion instructions on the device.
 * The caller applies any fp8 scale first.
 */
__device__ __forceinline__ void store_as(uint64_t base, uint64_t idx, uint32_t dtype, float v)
{
    dcpk_store_as(reinterpret_cast<void *>(base), idx, dtype, v);
}

/* ---- asynchronous copies (sm_80+) ---------------------------------------- */
/* Compiled for the host, they go to tests/kernels_build's emulator, which     */
/* poisons the destination at issue and copies at the wait that retires it.   */

/** 16-byte global -> shared copy that bypasses L1; zero-fills when !valid. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
#if defined(__CUDA_ARCH__)
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes)
                 : "memory");
#elif defined(DCP_TEST_CUDA_EMU_H)
    emu::cp_async16(smem, gmem, valid);
#endif
}

/** Closes the group of cp.async issued since the last commit (possibly empty). */
__device__ __forceinline__ void cp_async_commit()
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(DCP_TEST_CUDA_EMU_H)
    emu::cp_async_commit();
#endif
}

/** Waits until at most N committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#elif defined(DCP_TEST_CUDA_EMU_H)
    emu::cp_async_wait(N);
#endif
}

/* ---- warp reductions over aligned groups of W lanes ---------------------- */

template <int W>
__device__ __forceinline__ float group_max(float v)
{
#pragma unroll
    for (int off = W / 2; off > 0; off /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

template <int W>
__device__ __forceinline__ float group_sum(float v)
{
#pragma unroll
    for (int off = W / 2; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* ---- work items ----------------------------------------------------------- */

/** Linear index of this block in its grid, and the number of blocks. */
__device__ __forceinline__ uint64_t block_linear()
{
    return (static_cast<uint64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}

__device__ __forceinline__ uint64_t grid_blocks()
{
    return static_cast<uint64_t>(gridDim.x) * gridDim.y * gridDim.z;
}

} // namespace dcpk

#endif /* DCPK_DEVICE_CUH */
