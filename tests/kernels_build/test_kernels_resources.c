/*
 * ptxas's resource report of the embedded kernels (written by the fatbin build
 * step): every entry point of variants.h is there for every SM target, none
 * spills or uses local memory, and each fits the SM it is built for with the
 * block size and dynamic shared memory the host launches it with.
 */
#include <stdio.h>
#include <string.h>

#include "dcp_build_config.h"
#include "kernel_list.h"
#include "test_util.h"

/** One line of the report. */
struct report_row {
    char arch[16];
    char entry[96];
    unsigned regs, stack, spill_stores, spill_loads, static_smem;
};

enum { REPORT_MAX = 1024 };
static struct report_row rows[REPORT_MAX];
static size_t nrows;
static struct kernel_entry entries[KERNEL_LIST_MAX];
static size_t nentries;
static unsigned archs[KERNEL_ARCHS_MAX];
static size_t narchs;

/** Reads the report named by DCP_KERNEL_REPORT; -1 when it cannot be read. */
static int read_report(void)
{
    const char *path = getenv("DCP_KERNEL_REPORT");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return -1;
    char line[512];
    while (fgets(line, sizeof(line), f) && nrows < REPORT_MAX) {
        struct report_row *r = &rows[nrows];
        if (line[0] == '#')
            continue;
        if (sscanf(line, "%15s %95s %u %u %u %u %u", r->arch, r->entry, &r->regs, &r->stack, &r->spill_stores,
                   &r->spill_loads, &r->static_smem) == 7)
            nrows++;
    }
    fclose(f);
    return 0;
}

static const struct kernel_entry *find_entry(const char *name)
{
    for (size_t i = 0; i < nentries; i++)
        if (strcmp(entries[i].name, name) == 0)
            return &entries[i];
    return NULL;
}

/**
 * Most shared memory one block may use (opt-in) on the GPUs that run a SASS
 * target: A100 163 KiB, H100/H200 and B200 227 KiB; 0 for targets not listed.
 */
static unsigned smem_limit(const char *arch)
{
    if (strcmp(arch, "sm_80") == 0)
        return 166912;
    if (strcmp(arch, "sm_90") == 0 || strcmp(arch, "sm_90a") == 0 || strcmp(arch, "sm_100") == 0)
        return 232448;
    return 0;
}

static void test_every_entry_for_every_target(void **state)
{
    (void)state;
    assert_true(narchs > 0);
    for (size_t a = 0; a < narchs; a++) {
        char arch[16];
        kernel_arch_name(archs[a], "sm_", arch, sizeof(arch));
        for (size_t e = 0; e < nentries; e++) {
            unsigned found = 0;
            for (size_t i = 0; i < nrows; i++)
                found += strcmp(rows[i].arch, arch) == 0 && strcmp(rows[i].entry, entries[e].name) == 0;
            if (found != 1)
                fail_msg("%s for %s: %u report lines, want 1", entries[e].name, arch, found);
        }
    }
    /* And nothing else: variants.h lists every entry the fatbin has. */
    assert_int_equal(nrows, narchs * nentries);
}

static void test_no_spills_or_local_memory(void **state)
{
    (void)state;
    for (size_t i = 0; i < nrows; i++) {
        const struct report_row *r = &rows[i];
        if (r->stack || r->spill_stores || r->spill_loads)
            fail_msg("%s on %s: stack %u B, spills %u/%u B", r->entry, r->arch, r->stack, r->spill_stores,
                     r->spill_loads);
    }
}

static void test_fits_the_sm(void **state)
{
    (void)state;
    for (size_t i = 0; i < nrows; i++) {
        const struct report_row *r = &rows[i];
        const struct kernel_entry *e = find_entry(r->entry);
        assert_non_null(e);
        /* 64K registers per SM: one block must fit, or the launch fails. */
        if ((uint64_t)r->regs * e->threads > 65536)
            fail_msg("%s on %s: %u registers x %u threads exceed 65536", r->entry, r->arch, r->regs, e->threads);
        const unsigned limit = smem_limit(r->arch);
        if (limit && r->static_smem + e->smem_bytes > limit)
            fail_msg("%s on %s: %u + %u bytes of shared memory exceed %u", r->entry, r->arch, r->static_smem,
                     e->smem_bytes, limit);
    }
}

/*
 * The tensor-core entries in particular (variants.h tensor_core = 1): their report
 * lines for every target, 0 spills and no stack (printed, so the log has them).
 */
static void test_tensor_core_entries(void **state)
{
    (void)state;
    unsigned found = 0;
    for (size_t i = 0; i < nrows; i++) {
        const struct report_row *r = &rows[i];
        for (uint32_t v = 0; v < DCPK_ATTN_VARIANT_COUNT; v++) {
            const struct dcpk_attn_variant *var = dcpk_attn_variant_at(v);
            if (!var->tensor_core || strcmp(var->entry, r->entry) != 0)
                continue;
            found++;
            print_message("%s %s: %u registers, stack %u B, spills %u/%u B\n", r->entry, r->arch, r->regs, r->stack,
                          r->spill_stores, r->spill_loads);
            assert_int_equal(r->stack + r->spill_stores + r->spill_loads, 0);
        }
    }
    unsigned want = 0;
    for (uint32_t v = 0; v < DCPK_ATTN_VARIANT_COUNT; v++)
        want += dcpk_attn_variant_at(v)->tensor_core;
    assert_true(want > 0);
    assert_int_equal(found, want * narchs);
}

int main(void)
{
#if !DCP_HAVE_KERNELS
    puts("kernels not built (no nvcc): skipped");
    return 77;
#endif
    if (read_report() != 0) {
        fprintf(stderr, "cannot read the ptxas report (DCP_KERNEL_REPORT=%s)\n",
                getenv("DCP_KERNEL_REPORT") ? getenv("DCP_KERNEL_REPORT") : "unset");
        return 1;
    }
    nentries = kernel_list(entries);
    narchs = kernel_archs(archs);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_entry_for_every_target),
        cmocka_unit_test(test_no_spills_or_local_memory),
        cmocka_unit_test(test_fits_the_sm),
        cmocka_unit_test(test_tensor_core_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
