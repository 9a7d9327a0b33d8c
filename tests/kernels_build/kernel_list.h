/*
 * kernel_list.h: what the embedded kernels must contain, for the kernels_build
 * tests: every entry point of dcp_kernels/variants.h with its block size, and the
 * SM targets of the build (DCP_KERNEL_ARCHS, the kernel_archs option).
 */
#ifndef DCP_TEST_KERNEL_LIST_H
#define DCP_TEST_KERNEL_LIST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_kernels/variants.h"

/** One entry point the host will look up. */
struct kernel_entry {
    const char *name;
    uint32_t threads;     ///< Block size it is launched with.
    uint32_t smem_bytes;  ///< Dynamic shared memory it is launched with.
};

enum { KERNEL_LIST_MAX = 96, KERNEL_ARCHS_MAX = 16 };

/** Fills list with every entry point; returns the count. */
static inline size_t kernel_list(struct kernel_entry *list)
{
#define SIMPLE_ENTRY(name, threads) {"dcpk_" #name, threads, 0},
    static const struct kernel_entry simple[] = {DCPK_SIMPLE_KERNELS(SIMPLE_ENTRY)};
#undef SIMPLE_ENTRY
    size_t n = 0;
    for (size_t i = 0; i < sizeof(simple) / sizeof(simple[0]); i++)
        list[n++] = simple[i];
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++) {
        const struct dcpk_attn_variant *v = dcpk_attn_variant_at(i);
        list[n++] = (struct kernel_entry){v->entry, v->threads, v->smem_bytes};
    }
    for (uint32_t i = 0; i < DCPK_SPARSE_VARIANT_COUNT; i++) {
        const struct dcpk_attn_variant *v = dcpk_sparse_variant_at(i);
        list[n++] = (struct kernel_entry){v->entry, v->threads, v->smem_bytes};
    }
    return n;
}

/*
 * A kernel_archs target as a number: 10 x the SM number, + 1 for an architecture-specific
 * "a" target (sm_90 = 900, sm_90a = 901, sm_100 = 1000), so the numbers sort as the targets do.
 */
static inline unsigned kernel_arch_sm(unsigned code) { return code / 10; }
static inline int kernel_arch_specific(unsigned code) { return (int)(code % 10); }

/** "sm_90a" for 901 (prefix "sm_" or "compute_"); returns buf. */
static inline char *kernel_arch_name(unsigned code, const char *prefix, char *buf, size_t size)
{
    snprintf(buf, size, "%s%u%s", prefix, kernel_arch_sm(code), kernel_arch_specific(code) ? "a" : "");
    return buf;
}

/** The SM number the PTX is built for: the newest, without a suffix (nvcc_fatbin.py). */
static inline unsigned kernel_arch_ptx(const unsigned *archs, size_t n)
{
    unsigned sm = 0;
    for (size_t i = 0; i < n; i++)
        sm = kernel_arch_sm(archs[i]) > sm ? kernel_arch_sm(archs[i]) : sm;
    return sm;
}

/** The targets of DCP_KERNEL_ARCHS ("80,90,90a,100") as numbers above, ascending; returns the count. */
static inline size_t kernel_archs(unsigned *archs)
{
    const char *s = getenv("DCP_KERNEL_ARCHS");
    size_t n = 0;
    while (s && *s && n < KERNEL_ARCHS_MAX) {
        while (*s == ' ')
            s++;
        char *end;
        unsigned long a = strtoul(s, &end, 10);
        if (end == s)
            break;
        a = a * 10 + (*end == 'a');
        end += *end == 'a';
        while (*end == ' ')
            end++;
        size_t at = n++;
        while (at > 0 && archs[at - 1] > a) {
            archs[at] = archs[at - 1];
            at--;
        }
        archs[at] = (unsigned)a;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

#endif /* DCP_TEST_KERNEL_LIST_H */
