/*
 * sparse_attn.c: attention of each query token over the global positions its
 * top-k row lists, on the rank that owns them (dcpk_sparse_attn, params.h).
 * Work item = (query token, KV head, head tile). The item walks the token's
 * list once; each entry this rank owns and the token sees (position <= its own)
 * is converted to fp32 once and folded into the online softmax of every head of
 * the tile. Row rules as dcpk_attn's: no key -> (0, -inf); all scores -inf ->
 * (0, -inf); a non-finite value among the row's query and visible keys and
 * values -> NaN everywhere.
 */
#include <math.h>
#include <string.h>

#include "dcp_kernels/convert.h"
#include "dcp_kernels/cpu.h"
#include "dcp_kernels/paged.h"
#include "dcp_kernels/placement.h"

/** Heads per KV head, the tile and the number of tiles of a launch (as dcpk_attn's). */
static void sparse_tiles(const struct dcpk_sparse_attn_params *p, uint32_t *per_kv, uint32_t *tile,
                         uint32_t *tiles)
{
    *per_kv = p->num_kv_heads && p->num_heads >= p->num_kv_heads ? p->num_heads / p->num_kv_heads : 0;
    *tile = p->head_tile && p->head_tile < *per_kv ? p->head_tile : *per_kv;
    *tiles = *tile ? (*per_kv + *tile - 1) / *tile : 0;
}

struct dcpk_grid dcpk_sparse_attn_grid(const void *params)
{
    const struct dcpk_sparse_attn_params *p = params;
    uint32_t per_kv, tile, tiles;
    sparse_tiles(p, &per_kv, &tile, &tiles);
    struct dcpk_grid g = {p->num_q_tokens, p->num_kv_heads * tiles, 1};
    return g;
}

/* Per head of the tile: the scaled query, the output accumulator, m and l; one K and one V row. */
size_t dcpk_sparse_attn_scratch_bytes(const void *params)
{
    const struct dcpk_sparse_attn_params *p = params;
    uint32_t per_kv, tile, tiles;
    sparse_tiles(p, &per_kv, &tile, &tiles);
    return ((size_t)tile * ((size_t)p->qk_dim + p->v_dim + 3) + p->qk_dim + p->v_dim) * sizeof(float) +
           sizeof(float) - 1; /* + alignment */
}

/** True when none of the n values is NaN or infinite. */
static int all_finite(const float *x, uint32_t n)
{
    int ok = 1;
    for (uint32_t i = 0; i < n; i++)
        ok &= !dcpk_f32_is_nonfinite(x[i]);
    return ok;
}

void dcpk_sparse_attn_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_sparse_attn_params *p = params;
    if (!dcpk_act_dtype_ok(p->q_dtype) || !dcpk_act_dtype_ok(p->out_dtype) || p->batch == 0)
        return; /* refused, as the GPU kernel does (params.h) */
    uint32_t per_kv, tile, tiles;
    sparse_tiles(p, &per_kv, &tile, &tiles);
    if (!tiles)
        return;
    const uint32_t qk = p->qk_dim, vd = p->v_dim;
    const uint32_t hpc = p->heads_per_chunk ? p->heads_per_chunk : p->num_heads;
    /* The caller's scratch may sit at any address: floats from the first aligned one. */
    float *qs = (float *)(((uintptr_t)scratch + sizeof(float) - 1) & ~(uintptr_t)(sizeof(float) - 1)); /* [tile][qk] */
    float *acc = qs + (size_t)tile * qk;       /* [tile][vd] */
    float *m = acc + (size_t)tile * vd;        /* [tile] */
    float *l = m + tile;                       /* [tile] */
    float *bad = l + tile;                     /* [tile]: 1 when a non-finite value reached the row */
    float *kf = bad + tile, *vf = kf + qk;     /* one K and one V row */
    const int32_t *q_start = (const int32_t *)(uintptr_t)p->q_start;
    const int32_t *seq_lens = (const int32_t *)(uintptr_t)p->seq_lens;
    const int32_t *topk = (const int32_t *)(uintptr_t)p->topk;
    const uint32_t esize = dcpk_dtype_size(p->dtype);
    const float kscale = dcpk_dtype_scaled(p->dtype) ? p->kv_scale : 1.0f;
    const int v_in_k = p->v_cache == p->k_cache && p->v_row_stride == qk;
    for (uint64_t item = begin; item < end; item++) {
        const uint32_t t = (uint32_t)(item % p->num_q_tokens);
        const uint32_t y = (uint32_t)(item / p->num_q_tokens);
        const uint32_t kvh = y / tiles, j = y % tiles;
        const uint32_t head0 = kvh * per_kv + j * tile;
        const uint32_t nh = per_kv - j * tile < tile ? per_kv - j * tile : tile;
        const uint32_t b = dcpk_token_sequence(q_start, p->batch, t);
        const int64_t pos = dcpk_token_position(seq_lens, q_start, b, t);
        for (uint32_t h = 0; h < nh; h++) {
            const uint32_t g = head0 + h;
            const uint64_t q0 = (uint64_t)(g / hpc) * p->q_chunk_stride + ((uint64_t)t * hpc + g % hpc) * qk;
            for (uint32_t d = 0; d < qk; d++)
                qs[(size_t)h * qk + d] = dcpk_load_as_f32((const void *)(uintptr_t)p->q, q0 + d, p->q_dtype);
            bad[h] = !all_finite(qs + (size_t)h * qk, qk);
            for (uint32_t d = 0; d < qk; d++)
                qs[(size_t)h * qk + d] *= p->scale;
            m[h] = dcpk_neg_inf();
            l[h] = 0.0f;
        }
        memset(acc, 0, (size_t)nh * vd * sizeof(float));
        const int32_t *table = (const int32_t *)(uintptr_t)p->block_table + (uint64_t)b * p->max_blocks;
        uint32_t keys = 0;
        for (uint32_t e = 0; e < p->num_topk; e++) {
            const int32_t P = topk[(uint64_t)t * p->topk_stride + e];
            if (P < 0 || P > pos || dcpk_owner_rank((uint64_t)P, p->group_size, p->interleave) != p->rank)
                continue;
            const uint64_t c = dcpk_local_index((uint64_t)P, p->group_size, p->interleave);
            const uint64_t slot = (uint64_t)(uint32_t)table[c / p->block_size] * p->block_size + c % p->block_size;
            const char *kr = (const char *)(uintptr_t)p->k_cache +
                             dcpk_kv_row_index(slot, kvh, p->num_kv_heads, p->block_size, qk) * esize;
            const char *vr = v_in_k ? kr
                                    : (const char *)(uintptr_t)p->v_cache +
                                          dcpk_kv_row_index(slot, kvh, p->num_kv_heads, p->block_size,
                                                            p->v_row_stride) * esize;
            for (uint32_t d = 0; d < qk; d++)
                kf[d] = dcpk_load_as_f32(kr, d, p->dtype) * kscale;
            for (uint32_t d = 0; d < vd; d++)
                vf[d] = dcpk_load_as_f32(vr, d, p->dtype) * kscale;
            const int finite = all_finite(kf, qk) && all_finite(vf, vd);
            keys++;
            for (uint32_t h = 0; h < nh; h++) {
                if (!finite)
                    bad[h] = 1;
                if (bad[h])
                    continue;
                const float *qh = qs + (size_t)h * qk;
                float s = 0.0f;
                for (uint32_t d = 0; d < qk; d++)
                    s += qh[d] * kf[d];
                if (dcpk_f32_is_nonfinite(s)) { /* +-inf or NaN from finite data: overflow */
                    bad[h] = s != dcpk_neg_inf();
                    continue; /* -inf: weight 0 */
                }
                const float mn = s > m[h] ? s : m[h];
                const float alpha = expf(m[h] - mn), pe = expf(s - mn); /* m = -inf first: alpha = 0 */
                l[h] = l[h] * alpha + pe;
                float *ah = acc + (size_t)h * vd;
                for (uint32_t d = 0; d < vd; d++)
                    ah[d] = ah[d] * alpha + pe * vf[d];
                m[h] = mn;
            }
        }
        for (uint32_t h = 0; h < nh; h++) {
            const uint32_t g = head0 + h;
            const uint64_t row = (uint64_t)t * hpc + g % hpc;
            void *out = (void *)(uintptr_t)p->out;
            const uint64_t o0 = (uint64_t)(g / hpc) * p->out_chunk_stride + row * vd;
            float *lse = (float *)(uintptr_t)p->lse + (uint64_t)(g / hpc) * p->lse_chunk_stride + row;
            const float *ah = acc + (size_t)h * vd;
            const int nan = keys && (bad[h] || !all_finite(ah, vd) || dcpk_f32_is_nonfinite(l[h]));
            const int empty = !keys || (!nan && l[h] == 0.0f);
            for (uint32_t d = 0; d < vd; d++)
                dcpk_store_as(out, o0 + d, p->out_dtype, nan ? dcpk_qnan() : empty ? 0.0f : ah[d] / l[h]);
            *lse = nan ? dcpk_qnan() : empty ? dcpk_neg_inf() : m[h] + logf(l[h]);
        }
    }
}
