/*
 * kv_append.c: writes new tokens' K/V rows (src_dtype: fp32, bf16 or fp16) into
 * the paged cache in the cache's dtype (dcpk_kv_append, params.h), converting
 * element by element. Work item = token; a token whose slot is negative is not
 * stored on this rank and is skipped.
 */
#include "dcp_kernels/convert.h"
#include "dcp_kernels/cpu.h"
#include "dcp_kernels/paged.h"

struct dcpk_grid dcpk_kv_append_grid(const void *params)
{
    const struct dcpk_kv_append_params *p = params;
    struct dcpk_grid g = {p->num_tokens, 1, 1};
    return g;
}

size_t dcpk_kv_append_scratch_bytes(const void *params)
{
    (void)params;
    return 0;
}

/** Stores token `tok`'s rows of one source (K or V) at slot. */
static void append_rows(const struct dcpk_kv_append_params *p, uint64_t cache, uint64_t src,
                        uint32_t dim, uint64_t tok, uint64_t slot)
{
    const float scale = dcpk_dtype_scaled(p->dtype) ? p->inv_scale : 1.0f;
    const void *rows = (const void *)(uintptr_t)src;
    const uint64_t row0 = tok * p->num_kv_heads * dim;
    void *base = (void *)(uintptr_t)cache;
    for (uint32_t h = 0; h < p->num_kv_heads; h++) {
        const uint64_t idx = dcpk_kv_row_index(slot, h, p->num_kv_heads, p->block_size, dim);
        for (uint32_t d = 0; d < dim; d++)
            dcpk_store_as(base, idx + d, p->dtype,
                          dcpk_load_as_f32(rows, row0 + (uint64_t)h * dim + d, p->src_dtype) * scale);
    }
}

void dcpk_kv_append_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_kv_append_params *p = params;
    const int64_t *slots = (const int64_t *)(uintptr_t)p->slots;
    (void)scratch;
    if (!dcpk_act_dtype_ok(p->src_dtype))
        return; /* refused, as the GPU kernel does (params.h) */
    for (uint64_t tok = begin; tok < end; tok++) {
        if (slots[tok] < 0)
            continue;
        append_rows(p, p->k_cache, p->k_src, p->k_dim, tok, (uint64_t)slots[tok]);
        if (p->v_cache)
            append_rows(p, p->v_cache, p->v_src, p->v_dim, tok, (uint64_t)slots[tok]);
    }
}
