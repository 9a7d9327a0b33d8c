/*
 * isa.h: the instruction-set variants of the CPU kernels that have hand-shaped
 * hot loops (attention). dcpk_attn_cpu picks the best the CPU runs, capped by
 * the environment variable DCP_CPU_ISA; tests and the benchmark can force one to
 * check or time each.
 */
#ifndef DCPK_CPU_ISA_H
#define DCPK_CPU_ISA_H

#include <stdint.h>

/** Variants, from the most portable up; each runs where the next one up runs. */
enum dcpk_cpu_isa {
    DCPK_CPU_ISA_BASELINE, ///< The build's baseline (SSE2 on x86-64, NEON on aarch64).
    DCPK_CPU_ISA_AVX2,     ///< x86-64 with AVX2 and FMA.
    DCPK_CPU_ISA_F16C,     ///< AVX2 + FMA + F16C: fp16 cache rows decoded by vcvtph2ps.
    DCPK_CPU_ISA_AVX512,   ///< AVX-512 F/BW/VL + the above: 16 query rows per vector.
    DCPK_CPU_ISA_COUNT
};

/** The name of a variant ("baseline", "avx2", "f16c", "avx512"); NULL if out of range. */
const char *dcpk_cpu_isa_name(enum dcpk_cpu_isa isa);

/** 1 if this build has the variant and this CPU runs it. */
int dcpk_cpu_has_isa(enum dcpk_cpu_isa isa);

/**
 * The variant dcpk_attn_cpu uses given a cap (a variant name, as DCP_CPU_ISA
 * holds it; NULL or "" for none): the best this CPU runs that is not above the
 * cap. An unknown name caps nothing. Pure: for tests.
 */
enum dcpk_cpu_isa dcpk_cpu_isa_select(const char *cap);

/** The variant dcpk_attn_cpu uses: dcpk_cpu_isa_select(getenv("DCP_CPU_ISA")), read once. */
enum dcpk_cpu_isa dcpk_cpu_isa_active(void);

/**
 * dcpk_attn_cpu in a given variant; a variant the build or the CPU lacks falls
 * back to the best one below it that runs.
 */
void dcpk_attn_cpu_isa(const void *params, uint64_t begin, uint64_t end, void *scratch,
                       enum dcpk_cpu_isa isa);

/**
 * n fp16 values at src -> fp32 at dst in the permuted decode order of simd.h
 * (blocks of 16: position g * 8 + lane holds element lane * 2 + g; the tail after
 * the last whole block in order), with F16C conversions. Only on x86-64 CPUs
 * with AVX2 and F16C (dcpk_cpu_has_isa(DCPK_CPU_ISA_F16C)).
 */
void dcpk_decode_fp16_f16c(float *restrict dst, const uint16_t *restrict src, uint32_t n);

#endif /* DCPK_CPU_ISA_H */
