/*
 * index_score.c: DSA indexer scores of query tokens against this rank's shard of
 * the index-key cache (dcpk_index_score, params.h):
 *   score(t, c) = sum_j w[t][j] * max(0, q[t][j] . k_c)
 * for the rank's keys c at positions <= the token's. Work item = (tile of
 * DCPK_INDEX_TILE local keys, query token). The token's index queries are
 * converted to fp32 once per item, each key row once per key.
 */
#include "dcp_kernels/convert.h"
#include "dcp_kernels/cpu.h"
#include "dcp_kernels/paged.h"
#include "dcp_kernels/placement.h"

struct dcpk_grid dcpk_index_score_grid(const void *params)
{
    const struct dcpk_index_score_params *p = params;
    const uint64_t tiles = (p->score_stride + DCPK_INDEX_TILE - 1) / DCPK_INDEX_TILE;
    struct dcpk_grid g = {(uint32_t)(tiles ? tiles : 1), p->num_q_tokens, 1};
    return g;
}

size_t dcpk_index_score_scratch_bytes(const void *params)
{
    const struct dcpk_index_score_params *p = params;
    return ((size_t)p->num_index_heads + 1) * p->index_dim * sizeof(float) + sizeof(float) - 1; /* + alignment */
}

void dcpk_index_score_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_index_score_params *p = params;
    if (!dcpk_act_dtype_ok(p->q_dtype) || p->batch == 0)
        return; /* refused, as the GPU kernel does (params.h) */
    const struct dcpk_grid g = dcpk_index_score_grid(p);
    const int32_t *q_start = (const int32_t *)(uintptr_t)p->q_start;
    const int32_t *seq_lens = (const int32_t *)(uintptr_t)p->seq_lens;
    const float *w = (const float *)(uintptr_t)p->weights;
    /* The caller's scratch may sit at any address: floats from the first aligned one. */
    float *qf = (float *)(((uintptr_t)scratch + sizeof(float) - 1) & ~(uintptr_t)(sizeof(float) - 1)), *kf = qf + (size_t)p->num_index_heads * p->index_dim;
    const uint64_t hd = (uint64_t)p->num_index_heads * p->index_dim;
    const float kscale = dcpk_dtype_scaled(p->dtype) ? p->kv_scale : 1.0f;
    const uint32_t esize = dcpk_dtype_size(p->dtype);
    for (uint64_t item = begin; item < end; item++) {
        const uint32_t x = (uint32_t)(item % g.x), t = (uint32_t)(item / g.x);
        const uint32_t b = dcpk_token_sequence(q_start, p->batch, t);
        const int64_t pos = dcpk_token_position(seq_lens, q_start, b, t);
        uint64_t n = pos < 0 ? 0 : dcpk_local_length((uint64_t)pos + 1, p->rank, p->group_size, p->interleave);
        n = n < p->score_stride ? n : p->score_stride;
        if (x == 0)
            ((int32_t *)(uintptr_t)p->score_lens)[t] = (int32_t)n;
        const uint64_t c0 = (uint64_t)x * DCPK_INDEX_TILE;
        const uint64_t c1 = c0 + DCPK_INDEX_TILE < n ? c0 + DCPK_INDEX_TILE : n;
        if (c0 >= c1)
            continue;
        for (uint64_t i = 0; i < hd; i++)
            qf[i] = dcpk_load_as_f32((const void *)(uintptr_t)p->q, (uint64_t)t * hd + i, p->q_dtype);
        const int32_t *table = (const int32_t *)(uintptr_t)p->block_table + (uint64_t)b * p->max_blocks;
        float *row = (float *)(uintptr_t)p->scores + (uint64_t)t * p->score_stride;
        for (uint64_t c = c0; c < c1; c++) {
            const uint64_t slot = (uint64_t)(uint32_t)table[c / p->block_size] * p->block_size + c % p->block_size;
            const char *k = (const char *)(uintptr_t)p->k_cache +
                            dcpk_kv_row_index(slot, 0, 1, p->block_size, p->index_dim) * esize;
            for (uint32_t d = 0; d < p->index_dim; d++)
                kf[d] = dcpk_load_as_f32(k, d, p->dtype) * kscale;
            float score = 0.0f;
            for (uint32_t j = 0; j < p->num_index_heads; j++) {
                const float *qj = qf + (size_t)j * p->index_dim;
                float dot = 0.0f;
                for (uint32_t d = 0; d < p->index_dim; d++)
                    dot += qj[d] * kf[d];
                /* max(0, NaN) must stay NaN: a NaN key or query is not a zero score. */
                score += w[(uint64_t)t * p->num_index_heads + j] * (dot > 0.0f || dot != dot ? dot : 0.0f);
            }
            row[c] = score;
        }
    }
}
