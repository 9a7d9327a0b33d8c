/*
 * isa.h: the instruction-set variants of the CPU kernels that have hand-shaped
 * hot loops (attention). dcpk_attn_cpu picks the best the CPU runs; tests and
 * the benchmark can force one to check or time each.
 */
#ifndef DCPK_CPU_ISA_H
#define DCPK_CPU_ISA_H

#include <stdint.h>

/** Variants, from the most portable up. */
enum dcpk_cpu_isa {
    DCPK_CPU_ISA_BASELINE, ///< The build's baseline (SSE2 on x86-64, NEON on aarch64).
    DCPK_CPU_ISA_AVX2,     ///< x86-64 with AVX2 and FMA.
};

/** 1 if this build has the variant and this CPU runs it. */
int dcpk_cpu_has_isa(enum dcpk_cpu_isa isa);

/**
 * dcpk_attn_cpu in a given variant; a variant the build or the CPU lacks falls
 * back to the baseline.
 */
void dcpk_attn_cpu_isa(const void *params, uint64_t begin, uint64_t end, void *scratch,
                       enum dcpk_cpu_isa isa);

#endif /* DCPK_CPU_ISA_H */
