/*
 * isa.c: which instruction-set variant of the CPU kernels runs (isa.h), and the
 * F16C decoder of fp16 cache rows. Detection is at run time (cpuid through
 * __builtin_cpu_supports); nothing is compiled with -march.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_build_config.h"
#include "dcp_kernels/convert.h"
#include "ptx/cpu/isa.h"

static const char *const isa_names[DCPK_CPU_ISA_COUNT] = {"baseline", "avx2", "f16c", "avx512"};

const char *dcpk_cpu_isa_name(enum dcpk_cpu_isa isa)
{
    return (unsigned)isa < DCPK_CPU_ISA_COUNT ? isa_names[isa] : NULL;
}

int dcpk_cpu_has_isa(enum dcpk_cpu_isa isa)
{
#if DCP_ARCH_X86_64
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    /* GCC's __builtin_cpu_supports has no "f16c"; every CPU with AVX-512F has it,
     * and cpuid leaf 1 ECX bit 29 says so for the others. */
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1u), "c"(0u));
    const int f16c = (c >> 29) & 1u;
    switch (isa) {
    case DCPK_CPU_ISA_BASELINE:
        return 1;
    case DCPK_CPU_ISA_AVX2:
        return avx2;
    case DCPK_CPU_ISA_F16C:
        return avx2 && f16c;
    case DCPK_CPU_ISA_AVX512:
        return avx2 && f16c && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    default:
        return 0;
    }
#else
    return isa == DCPK_CPU_ISA_BASELINE;
#endif
}

enum dcpk_cpu_isa dcpk_cpu_isa_select(const char *cap)
{
    int top = DCPK_CPU_ISA_COUNT - 1;
    for (int i = 0; cap && i < DCPK_CPU_ISA_COUNT; i++)
        if (!strcmp(cap, isa_names[i]))
            top = i;
    while (top > 0 && !dcpk_cpu_has_isa((enum dcpk_cpu_isa)top))
        top--;
    return (enum dcpk_cpu_isa)top;
}

enum dcpk_cpu_isa dcpk_cpu_isa_active(void)
{
    /* Read once: every launch asks. -1 until decided (a race decides it twice, identically). */
    static atomic_int active = -1;
    int isa = atomic_load_explicit(&active, memory_order_relaxed);
    if (isa < 0) {
        isa = (int)dcpk_cpu_isa_select(getenv("DCP_CPU_ISA"));
        atomic_store_explicit(&active, isa, memory_order_relaxed);
    }
    return (enum dcpk_cpu_isa)isa;
}

#if DCP_ARCH_X86_64 && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2,f16c"))) void dcpk_decode_fp16_f16c(float *restrict dst, const uint16_t *restrict src,
                                                                 uint32_t n)
{
    /* Per 128-bit lane: even elements to the low 8 bytes, odd ones to the high 8. */
    const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                           0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    const uint32_t nb = n & ~15u;
    uint32_t i = 0;
    for (; i < nb; i += 16) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
        /* [e0 e2 e4 e6 | o1 o3 o5 o7 || e8 .. e14 | o9 .. o15] -> [evens | odds] */
        const __m256i s = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, split), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_castsi256_si128(s)));
        _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(s, 1)));
    }
    for (; i < n; i++)
        dst[i] = dcpk_fp16_to_f32(src[i]);
}
#else
/* Not called off x86-64 (dcpk_cpu_has_isa says no); the same result in plain C. */
void dcpk_decode_fp16_f16c(float *restrict dst, const uint16_t *restrict src, uint32_t n)
{
    const uint32_t nb = n & ~15u;
    for (uint32_t i = 0; i < nb; i += 16)
        for (uint32_t j = 0; j < 8; j++) {
            dst[i + j] = dcpk_fp16_to_f32(src[i + 2 * j]);
            dst[i + 8 + j] = dcpk_fp16_to_f32(src[i + 2 * j + 1]);
        }
    for (uint32_t i = nb; i < n; i++)
        dst[i] = dcpk_fp16_to_f32(src[i]);
}
#endif
