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

#endif /* DCPK_PAGED_H */
