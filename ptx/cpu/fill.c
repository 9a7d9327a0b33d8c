/*
 * fill.c: seeded synthetic data (dcpk_fill, params.h), bit-identical on every
 * backend through dcpk_fill_element (dcp_kernels/fill.h). Work item = row.
 */
#include "dcp_kernels/cpu.h"
#include "dcp_kernels/fill.h"

struct dcpk_grid dcpk_fill_grid(const void *params)
{
    const struct dcpk_fill_params *p = params;
    struct dcpk_grid g = {p->rows, 1, 1};
    return g;
}

size_t dcpk_fill_scratch_bytes(const void *params)
{
    (void)params;
    return 0;
}

void dcpk_fill_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_fill_params *p = params;
    const uint64_t *row_keys = (const uint64_t *)(uintptr_t)p->row_keys;
    (void)scratch;
    for (uint64_t row = begin; row < end; row++) {
        const uint64_t key = row_keys ? row_keys[row] : p->key_base + row;
        for (uint32_t h = 0; h < p->heads; h++)
            for (uint32_t d = 0; d < p->dim; d++)
                dcpk_fill_element(p, row, key, h, d);
    }
}
