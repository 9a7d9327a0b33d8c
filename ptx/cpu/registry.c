/*
 * registry.c: the table of kernel families and the lookup of a GPU entry point
 * name ("dcpk_<family>" or "dcpk_<family>__<variant>") to its CPU implementation.
 */
#include <string.h>

#include "dcp_kernels/cpu.h"

const struct dcpk_kernel_desc dcpk_kernels[DCPK_KERNEL_COUNT] = {
#define DCPK_DESC(name, type) \
    {#name, sizeof(struct type), dcpk_##name##_cpu, dcpk_##name##_grid, dcpk_##name##_scratch_bytes},
    DCPK_KERNEL_FAMILIES(DCPK_DESC)
#undef DCPK_DESC
};

const struct dcpk_kernel_desc *dcpk_kernel_by_entry_name(const char *entry)
{
    static const char prefix[] = "dcpk_";
    if (!entry || strncmp(entry, prefix, sizeof(prefix) - 1) != 0)
        return NULL;
    const char *family = entry + sizeof(prefix) - 1;
    for (size_t i = 0; i < DCPK_KERNEL_COUNT; i++) {
        const size_t n = strlen(dcpk_kernels[i].name);
        if (strncmp(family, dcpk_kernels[i].name, n) != 0)
            continue;
        /* The whole name, or the name followed by "__variant" (not e.g. "attn_x"). */
        if (family[n] == '\0' || (family[n] == '_' && family[n + 1] == '_' && family[n + 2] != '\0'))
            return &dcpk_kernels[i];
    }
    for (size_t i = 0; i < DCPK_REF_KERNEL_COUNT; i++)
        if (!strcmp(family, dcpk_ref_kernels[i].name))
            return &dcpk_ref_kernels[i];
    return NULL;
}
