/*
 * dcp_kernels/convert.h: element conversions between fp32 and the cache dtypes,
 * one definition for the CPU kernels, the CUDA kernels and the tests.
 *
 * All encoders round to nearest, ties to even, and keep NaN a NaN (quiet, same
 * sign). bf16 and fp16 overflow to infinity as IEEE formats do. fp8 is OCP
 * E4M3FN: bias 7, no infinities, S.1111.111 is NaN, largest finite value 448;
 * with satfinite a finite value beyond 448 (and an infinity) saturates to +-448,
 * without it becomes NaN, as CUDA's __NV_SATFINITE / __NV_NOSAT conversions do.
 * The cache always stores fp8 with satfinite.
 *
 * Decoders are exact. Bit casts go through a union on the host (defined in C,
 * supported by every C++ compiler we use) and __float_as_uint on the device.
 *
 * Each row of DCPK_DTYPES (dcp_kernels/common.h) names its codec here: a load and
 * a store per element, the one definition every kernel and the tests use.
 */
#ifndef DCPK_CONVERT_H
#define DCPK_CONVERT_H

#include "dcp_kernels/common.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

/** The bits of an fp32 value. */
DCPK_HD uint32_t dcpk_f32_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return v.u;
#endif
}

/** The fp32 value of some bits. */
DCPK_HD float dcpk_f32_from_bits(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    union {
        uint32_t u;
        float f;
    } v;
    v.u = u;
    return v.f;
#endif
}

/** -infinity, spelled without <math.h> so nvcc and C see the same thing. */
DCPK_HD float dcpk_neg_inf(void)
{
    return dcpk_f32_from_bits(0xff800000u);
}

/** A quiet NaN (the canonical one), spelled without <math.h>. */
DCPK_HD float dcpk_qnan(void)
{
    return dcpk_f32_from_bits(0x7fc00000u);
}

/** True for +-infinity and NaN, by the bits (immune to fast-math flags). */
DCPK_HD int dcpk_f32_is_nonfinite(float f)
{
    return (dcpk_f32_bits(f) & 0x7f800000u) == 0x7f800000u;
}

/**
 * Rounds a finite non-negative fp32 magnitude (its bits, sign cleared) to a
 * binary format with man_bits stored mantissa bits, exponent bias `bias` and
 * smallest normal exponent emin = 1 - bias, to nearest even. Returns the
 * format's magnitude code ((biased exponent << man_bits) | mantissa); a carry
 * out of the mantissa moves into the exponent, so a code above the format's
 * largest finite code means overflow and the caller decides what that becomes.
 */
DCPK_HD uint32_t dcpk_round_magnitude(uint32_t abs_bits, uint32_t man_bits, int32_t bias)
{
    const int32_t emin = 1 - bias;
    const int32_t e = (int32_t)(abs_bits >> 23) - 127; /* unbiased; fp32 subnormals: -127 */
    /* Significand with the implicit bit (fp32 subnormals have none: they round to 0). */
    const uint32_t sig = (abs_bits & 0x7fffffu) | ((abs_bits >> 23) ? 0x800000u : 0u);
    uint32_t shift; /* sig >> shift is the code's mantissa field, counted from 0 */
    uint32_t base;  /* the code of the binade's first value, less its mantissa */
    if (e >= emin) {
        shift = 23u - man_bits;
        base = (uint32_t)(e + bias) << man_bits;
        /* sig includes the implicit bit: (1 << man_bits) after the shift; drop it from base. */
        base -= 1u << man_bits;
    } else {
        /* Subnormal in the target: units of 2^(emin - man_bits). */
        const uint32_t s = 23u - man_bits + (uint32_t)(emin - e);
        shift = s < 31u ? s : 31u;
        base = 0;
    }
    uint32_t q = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return base + q;
}

/* ---- bf16 -------------------------------------------------------------- */

/** bf16 bits -> fp32 (exact). */
DCPK_HD float dcpk_bf16_to_f32(uint16_t h)
{
    return dcpk_f32_from_bits((uint32_t)h << 16);
}

/** fp32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN. */
DCPK_HD uint16_t dcpk_f32_to_bf16(float f)
{
    const uint32_t u = dcpk_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---- fp16 (IEEE binary16) ---------------------------------------------- */

/** fp16 bits -> fp32 (exact, subnormals and infinities included). */
DCPK_HD float dcpk_fp16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;
    if (em >= 0x7c00u) /* infinity or NaN: all-ones exponent, mantissa kept */
        return dcpk_f32_from_bits(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
    if (em < 0x400u) { /* subnormal or zero: m * 2^-24 */
        const float v = (float)em * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return dcpk_f32_from_bits(sign | ((em << 13) + (112u << 23)));
}

/** fp32 -> fp16 bits, round to nearest even, subnormals, overflow to infinity. */
DCPK_HD uint16_t dcpk_f32_to_fp16(float f)
{
    const uint32_t u = dcpk_f32_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a == 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u);
    const uint32_t code = dcpk_round_magnitude(a, 10, 15);
    return (uint16_t)(sign | (code < 0x7c00u ? code : 0x7c00u));
}

/* ---- fp8 E4M3FN -------------------------------------------------------- */

/** Largest finite fp8 E4M3 value. */
#define DCPK_FP8_E4M3_MAX 448.0f

/** fp8 E4M3FN bits -> fp32 (exact; 0x7f/0xff are NaN). */
DCPK_HD float dcpk_fp8e4m3_to_f32(uint8_t b)
{
    const uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    const uint32_t em = b & 0x7fu;
    if (em == 0x7fu)
        return dcpk_f32_from_bits(sign | 0x7fc00000u);
    if (em < 0x8u) { /* subnormal or zero: m * 2^-9 */
        const float v = (float)em * 0.001953125f;
        return sign ? -v : v;
    }
    return dcpk_f32_from_bits(sign | ((em << 20) + (120u << 23)));
}

/**
 * fp32 -> fp8 E4M3FN bits, round to nearest even. Beyond 448 (after rounding)
 * and for infinities: +-448 when satfinite, NaN otherwise. NaN -> NaN.
 */
DCPK_HD uint8_t dcpk_f32_to_fp8e4m3(float f, int satfinite)
{
    const uint32_t u = dcpk_f32_bits(f);
    const uint32_t sign = (u >> 24) & 0x80u;
    const uint32_t a = u & 0x7fffffffu;
    uint32_t code;
    if (a > 0x7f800000u)
        code = 0x7fu;
    else if (a == 0x7f800000u)
        code = satfinite ? 0x7eu : 0x7fu;
    else {
        code = dcpk_round_magnitude(a, 3, 7);
        if (code > 0x7eu)
            code = satfinite ? 0x7eu : 0x7fu;
    }
    return (uint8_t)(sign | code);
}

/* ---- codecs: one per DCPK_DTYPES row (its codec column) ------------------ */
/*
 * dcpk_<codec>_load(base, i):     element i of an array of the dtype, as fp32 (exact);
 * dcpk_<codec>_store(base, i, v): v rounded to the dtype (nearest even; fp8 satfinite,
 *                                 the caller applies any fp8 scale first).
 * On the device the stores use the conversion instructions, which round the same way
 * (the host emulator of tests/kernels_build runs the portable code).
 */

DCPK_HD float dcpk_f32_load(const void *base, uint64_t i)
{
    return ((const float *)base)[i];
}

DCPK_HD void dcpk_f32_store(void *base, uint64_t i, float v)
{
    ((float *)base)[i] = v;
}

DCPK_HD float dcpk_bf16_load(const void *base, uint64_t i)
{
    return dcpk_bf16_to_f32(((const uint16_t *)base)[i]);
}

DCPK_HD void dcpk_bf16_store(void *base, uint64_t i, float v)
{
#if defined(__CUDA_ARCH__)
    reinterpret_cast<__nv_bfloat16 *>(base)[i] = __float2bfloat16_rn(v);
#else
    ((uint16_t *)base)[i] = dcpk_f32_to_bf16(v);
#endif
}

DCPK_HD float dcpk_fp16_load(const void *base, uint64_t i)
{
    return dcpk_fp16_to_f32(((const uint16_t *)base)[i]);
}

DCPK_HD void dcpk_fp16_store(void *base, uint64_t i, float v)
{
#if defined(__CUDA_ARCH__)
    reinterpret_cast<__half *>(base)[i] = __float2half_rn(v);
#else
    ((uint16_t *)base)[i] = dcpk_f32_to_fp16(v);
#endif
}

DCPK_HD float dcpk_fp8e4m3_load(const void *base, uint64_t i)
{
    return dcpk_fp8e4m3_to_f32(((const uint8_t *)base)[i]);
}

DCPK_HD void dcpk_fp8e4m3_store(void *base, uint64_t i, float v)
{
#if defined(__CUDA_ARCH__)
    reinterpret_cast<__nv_fp8_storage_t *>(base)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
#else
    ((uint8_t *)base)[i] = dcpk_f32_to_fp8e4m3(v, 1);
#endif
}

/* ---- by dtype, generated from the rows ------------------------------------ */

/**
 * Stores v as element idx of an array of dtype (fp8: satfinite; the caller
 * applies any fp8 scale first). An unknown dtype stores fp32 (no kernel is given
 * one: the launch checks refuse it).
 */
DCPK_HD void dcpk_store_as(void *base, uint64_t idx, uint32_t dtype, float v)
{
#define DCPK_STORE_AS_(NAME, name, bytes, scaled, wire, codec) \
    if (dtype == DCPK_##NAME) {                                \
        dcpk_##codec##_store(base, idx, v);                    \
        return;                                                \
    }
    DCPK_DTYPES(DCPK_STORE_AS_)
#undef DCPK_STORE_AS_
    dcpk_f32_store(base, idx, v);
}

/** Loads element idx of an array of dtype as fp32 (fp8: unscaled; unknown: fp32). */
DCPK_HD float dcpk_load_as_f32(const void *base, uint64_t idx, uint32_t dtype)
{
#define DCPK_LOAD_AS_(NAME, name, bytes, scaled, wire, codec) \
    if (dtype == DCPK_##NAME)                                 \
        return dcpk_##codec##_load(base, idx);
    DCPK_DTYPES(DCPK_LOAD_AS_)
#undef DCPK_LOAD_AS_
    return dcpk_f32_load(base, idx);
}

#endif /* DCPK_CONVERT_H */
