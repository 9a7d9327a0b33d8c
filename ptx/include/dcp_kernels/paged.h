/*
 * dcp_kernels/paged.h: addressing of the paged KV cache (params.h, "Paged KV
 * cache"), in 64 bits: page ids times page bytes pass 2^32 in real deployments.
 */
#ifndef DCPK_PAGED_H
#define DCPK_PAGED_H

#include "dcp_kernels/common.h"

/**
 * Element index of (slot, head, 0) in a layer's K or V pages of
 * [pages][num_kv_heads][block_size][row_len] elements, slot = page * block_size + off.
 */
DCPK_HD uint64_t dcpk_kv_row_index(uint64_t slot, uint32_t head, uint32_t num_kv_heads,
                                   uint32_t block_size, uint32_t row_len)
{
    const uint64_t page = slot / block_size;
    const uint64_t off = slot % block_size;
    return ((page * num_kv_heads + head) * block_size + off) * row_len;
}

/**
 * The sequence of query token t of a step (params.h): the b < batch with
 * q_start[b] <= t < q_start[b + 1], by bisection (q_start is ascending).
 */
DCPK_HD uint32_t dcpk_token_sequence(const int32_t *q_start, uint32_t batch, uint32_t t)
{
    uint32_t lo = 0, hi = batch; /* q_start[lo] <= t < q_start[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if ((int64_t)q_start[mid] <= (int64_t)t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/**
 * Global position of query token t of sequence b (params.h): the sequence's query
 * tokens are its last q_start[b + 1] - q_start[b] positions.
 */
DCPK_HD int64_t dcpk_token_position(const int32_t *seq_lens, const int32_t *q_start, uint32_t b, uint32_t t)
{
    return (int64_t)seq_lens[b] - (q_start[b + 1] - q_start[b]) + ((int64_t)t - q_start[b]);
}

#endif /* DCPK_PAGED_H */
