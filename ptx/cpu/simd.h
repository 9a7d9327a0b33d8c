/*
 * simd.h: what the hot loops of the CPU kernels are written in: 8-lane fp32
 * vectors (GCC/clang vector extensions), a vectorised exp, and bulk conversion
 * of cache rows to fp32. No intrinsics: the same code becomes AVX2+FMA in the
 * x86-64 variants compiled with target("avx2,fma"), SSE2 pairs in the baseline
 * x86-64 variant and NEON pairs on aarch64.
 *
 * Everything here is always inlined, so it takes the instruction set of the
 * function it lands in (a target("avx2,fma") kernel body gets ymm code).
 */
#ifndef DCPK_CPU_SIMD_H
#define DCPK_CPU_SIMD_H

#include <stdint.h>
#include <string.h>

#include "dcp_kernels/convert.h"

#define DCPK_INLINE static inline __attribute__((always_inline))

/* Vectors are never passed by value to a function here (store, select and max
 * are macros; the others take pointers): without AVX a 32-byte vector argument
 * has a different ABI, and GCC says so in a note no pragma silences. Returning
 * one only draws -Wpsabi, which does not apply to always-inlined functions. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

/* DCPK_UNROLL: unroll fully (loops over register accumulators, so they stay in
 * registers); DCPK_UNROLL2: unroll twice (hot loops, to halve their counting). */
#if defined(__clang__)
#define DCPK_UNROLL _Pragma("unroll")
#define DCPK_UNROLL2 _Pragma("unroll 2")
#else
#define DCPK_UNROLL _Pragma("GCC unroll 16")
#define DCPK_UNROLL2 _Pragma("GCC unroll 2")
#endif

/** Lanes of a dcpk_vf. */
#define DCPK_VL 8

typedef float dcpk_vf __attribute__((vector_size(32)));
typedef int32_t dcpk_vi __attribute__((vector_size(32)));
typedef uint32_t dcpk_vu __attribute__((vector_size(32)));

/** Unaligned load of 8 floats. */
DCPK_INLINE dcpk_vf dcpk_vf_load(const float *p)
{
    dcpk_vf v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/** Unaligned store of the 8 floats of vector expression v at p. */
#define DCPK_VF_STORE(p, v)                            \
    do {                                               \
        const dcpk_vf dcpk_vf_store_ = (v);            \
        memcpy((p), &dcpk_vf_store_, sizeof(dcpk_vf)); \
    } while (0)

/** All lanes x. */
DCPK_INLINE dcpk_vf dcpk_vf_set1(float x)
{
    return (dcpk_vf){x, x, x, x, x, x, x, x};
}

/** Lane-wise mask ? a : b (mask lanes all ones or all zeros; operands evaluated twice). */
#define DCPK_VF_SELECT(mask, a, b) \
    ((dcpk_vf)(((dcpk_vi)(a) & (mask)) | ((dcpk_vi)(b) & ~(mask))))

/** Lane-wise max, a where b is NaN (operands evaluated twice). */
#define DCPK_VF_MAX(a, b) DCPK_VF_SELECT((b) > (a), (b), (a))

/**
 * exp(x) lane-wise for x <= 0 (all that softmax needs), within 2 ulp of expf:
 * Cody-Waite reduction x = n ln2 + f, |f| <= ln2/2, a degree-6 polynomial for
 * exp(f) (Cephes expf coefficients), 2^n put into the exponent bits. x below
 * -87.3 (where expf is subnormal or 0), -inf included, gives exactly 0; NaN
 * stays NaN. Written without a table or branches so it vectorises; positive x
 * is outside its domain.
 */
DCPK_INLINE dcpk_vf dcpk_vf_exp_nonpos(const dcpk_vf *xp)
{
    const dcpk_vf x0 = *xp;
    const dcpk_vi underflow = x0 < dcpk_vf_set1(-87.33654f);
    const dcpk_vf x = DCPK_VF_SELECT(underflow, dcpk_vf_set1(-87.0f), x0);
    /* n = round(x / ln2) by the 1.5 * 2^23 trick; n in [-126, 0]. */
    const dcpk_vf magic = dcpk_vf_set1(12582912.0f);
    const dcpk_vf n = (x * dcpk_vf_set1(1.44269504088896341f) + magic) - magic;
    dcpk_vf f = x - n * dcpk_vf_set1(0.693359375f);
    f = f - n * dcpk_vf_set1(-2.12194440e-4f);
    dcpk_vf poly = dcpk_vf_set1(1.9875691500e-4f);
    poly = poly * f + dcpk_vf_set1(1.3981999507e-3f);
    poly = poly * f + dcpk_vf_set1(8.3334519073e-3f);
    poly = poly * f + dcpk_vf_set1(4.1665795894e-2f);
    poly = poly * f + dcpk_vf_set1(1.6666665459e-1f);
    poly = poly * f + dcpk_vf_set1(5.0000001201e-1f);
    poly = poly * (f * f) + f + dcpk_vf_set1(1.0f);
    const dcpk_vf pow2n = (dcpk_vf)((__builtin_convertvector(n, dcpk_vi) + 127) << 23);
    return DCPK_VF_SELECT(underflow, dcpk_vf_set1(0.0f), poly * pow2n);
}

/* ---- rows of the cache to fp32 ----------------------------------------- */

/*
 * Rows are decoded in blocks read as whole vectors of 32-bit lanes, and each
 * lane's 16-bit (or 8-bit) parts are peeled off with shifts and masks: no
 * widening shuffles, which compilers lower poorly. The price is that a block
 * comes out permuted: position j = g * 8 + lane of a block holds source element
 * lane * G + g, G = 32 / element bits (bf16/fp16: blocks of 16, G = 2; fp8:
 * blocks of 32, G = 4). The tail of a row after its last whole block is in
 * order. The attention kernel permutes q the same way (dot products do not
 * care about order) and un-permutes its output (dcpk_decode_source).
 */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the block decoders assume a little-endian host"
#endif

/** Elements per permuted decode block of a dtype (1: decoded in order: fp32, and any
 *  dtype without a vector decoder below, which goes through its codec). */
DCPK_INLINE uint32_t dcpk_decode_block(uint32_t dtype)
{
    return dtype == DCPK_FP8_E4M3 ? 32u : dtype == DCPK_BF16 || dtype == DCPK_FP16 ? 16u : 1u;
}

/** The source element that position i of a decoded row of n elements holds. */
static inline uint32_t dcpk_decode_source(uint32_t dtype, uint32_t n, uint32_t i)
{
    const uint32_t blk = dcpk_decode_block(dtype); /* a power of two */
    if (blk == 1 || i >= (n & ~(blk - 1)))
        return i;
    const uint32_t j = i & (blk - 1), groups = blk / DCPK_VL;
    return i - j + (j & (DCPK_VL - 1)) * groups + j / DCPK_VL;
}

/** Loads 8 32-bit lanes (32 bytes) from any address. */
DCPK_INLINE dcpk_vu dcpk_vu_load(const void *p)
{
    dcpk_vu v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/*
 * fp16 and fp8 lanes are decoded by moving exponent and mantissa into fp32
 * position and rebiasing the exponent with one integer add. Subnormals (and
 * zero) are rebuilt as 2^emin * (1 + m) - 2^emin with one fp32 subtract, so no
 * fp32 operation ever sees a denormal (which costs a microcode assist on x86),
 * and infinities/NaNs get the all-ones exponent. Masks and adds only: no blends.
 */

/** fp16 bits (low 16 bits of each lane, upper bits 0) -> fp32 (same values as dcpk_fp16_to_f32). */
DCPK_INLINE dcpk_vf dcpk_fp16_lanes(const dcpk_vu *hp)
{
    const dcpk_vu h = *hp;
    const dcpk_vu em = (h & 0x7fffu) << 13;
    const dcpk_vu e = em & 0x0f800000u;
    const dcpk_vu special = (dcpk_vu)(e == 0x0f800000u); /* inf/NaN: exponent 31 -> 255 */
    const dcpk_vu sub = (dcpk_vu)(e == 0u);              /* zero/subnormal: 2^-14 * (1 + m) */
    const dcpk_vu bits = em + (112u << 23) + (special & (112u << 23)) + (sub & (1u << 23));
    const dcpk_vf v = (dcpk_vf)bits - (dcpk_vf)(sub & (113u << 23)); /* minus 2^-14 */
    return (dcpk_vf)((dcpk_vu)v | ((h & 0x8000u) << 16));
}

/** fp8 E4M3FN bits (low 8 bits of each lane, upper bits 0) -> fp32 (same values as dcpk_fp8e4m3_to_f32). */
DCPK_INLINE dcpk_vf dcpk_fp8_lanes(const dcpk_vu *bp)
{
    const dcpk_vu b = *bp;
    const dcpk_vu m7 = b & 0x7fu;
    const dcpk_vu em = m7 << 20;
    const dcpk_vu sub = (dcpk_vu)((em & 0x07800000u) == 0u); /* zero/subnormal: 2^-6 * (1 + m) */
    const dcpk_vu nan = (dcpk_vu)(m7 == 0x7fu);               /* S.1111.111 */
    const dcpk_vu bits = em + (120u << 23) + (sub & (1u << 23));
    const dcpk_vf v = (dcpk_vf)bits - (dcpk_vf)(sub & (121u << 23)); /* minus 2^-6 */
    return (dcpk_vf)((dcpk_vu)v | (nan & 0x7fc00000u) | ((b & 0x80u) << 24));
}

/**
 * dst[i] = value of element dcpk_decode_source(dtype, n, i) of a row of n
 * elements of dtype at src (values of a scaled dtype, fp8, times fp8_scale; others unscaled).
 */
DCPK_INLINE void dcpk_decode_row(float *restrict dst, const void *restrict src, uint32_t n,
                                 uint32_t dtype, float fp8_scale)
{
    const uint32_t blk = dcpk_decode_block(dtype);
    const uint32_t nb = n / blk * blk;
    uint32_t i;
    switch (dtype) {
    case DCPK_BF16:
        DCPK_UNROLL2
        for (i = 0; i < nb; i += 16) {
            const dcpk_vu v = dcpk_vu_load((const uint16_t *)src + i);
            DCPK_VF_STORE(dst + i, (dcpk_vf)(v << 16));
            DCPK_VF_STORE(dst + i + 8, (dcpk_vf)(v & 0xffff0000u));
        }
        for (; i < n; i++)
            dst[i] = dcpk_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case DCPK_FP16:
        DCPK_UNROLL2
        for (i = 0; i < nb; i += 16) {
            const dcpk_vu v = dcpk_vu_load((const uint16_t *)src + i);
            const dcpk_vu lo = v & 0xffffu, hi = v >> 16;
            DCPK_VF_STORE(dst + i, dcpk_fp16_lanes(&lo));
            DCPK_VF_STORE(dst + i + 8, dcpk_fp16_lanes(&hi));
        }
        for (; i < n; i++)
            dst[i] = dcpk_fp16_to_f32(((const uint16_t *)src)[i]);
        break;
    case DCPK_FP8_E4M3:
        for (i = 0; i < nb; i += 32) {
            const dcpk_vu v = dcpk_vu_load((const uint8_t *)src + i);
            for (uint32_t g = 0; g < 4; g++) {
                const dcpk_vu b = (v >> (8 * g)) & 0xffu;
                DCPK_VF_STORE(dst + i + 8 * g, dcpk_fp8_lanes(&b) * fp8_scale);
            }
        }
        for (; i < n; i++)
            dst[i] = dcpk_fp8e4m3_to_f32(((const uint8_t *)src)[i]) * fp8_scale;
        break;
    case DCPK_FP32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    default: /* no vector decoder: the dtype's codec (dcp_kernels/convert.h) */
        for (i = 0; i < n; i++)
            dst[i] = dcpk_load_as_f32(src, i, dtype) * (dcpk_dtype_scaled(dtype) ? fp8_scale : 1.0f);
        break;
    }
}

#endif /* DCPK_CPU_SIMD_H */
