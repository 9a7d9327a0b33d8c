/*
 * dcp_kernels/fill.h: the element of dcpk_fill (params.h), one definition for
 * every backend so synthetic data is bit-identical everywhere: the value is
 * amplitude * dcpk_synth_unit(...), then (fp8 only) times inv_scale, then
 * converted with dcpk_store_as (fp8 satfinite). Two separate roundings, in that
 * order; do not fold amplitude and inv_scale into one factor.
 */
#ifndef DCPK_FILL_H
#define DCPK_FILL_H

#include "dcp_kernels/convert.h"
#include "dcp_kernels/params.h"

/** Writes element (row, head, d) of a fill whose row key is key. */
DCPK_HD void dcpk_fill_element(const struct dcpk_fill_params *p, uint64_t row, uint64_t key,
                               uint32_t head, uint32_t d)
{
    float v = p->amplitude * dcpk_synth_unit(p->seed, key, p->head_offset + head, d);
    if (dcpk_dtype_scaled(p->dtype))
        v *= p->inv_scale;
    dcpk_store_as((void *)(uintptr_t)p->dst, (row * p->heads + head) * p->dim + d, p->dtype, v);
}

#endif /* DCPK_FILL_H */
