/*
 * placement.h: where each token of a sequence lives inside a DCP group.
 *
 * N = DCP group size, I = interleave size, B = KV block (page) size in tokens,
 * p = global token position, r = rank within the group. Tokens are dealt out in
 * runs of I: owner(p) = floor(p / I) mod N. Every rank of the group uses the same
 * logical block ids; one logical block covers B*N tokens and each rank backs it with
 * one physical page of B tokens. All arithmetic is 64-bit.
 */
#ifndef DCP_PLACEMENT_H
#define DCP_PLACEMENT_H

#include "dcp/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Rank (0..n-1) that stores global position pos. n, interleave >= 1. */
DCP_API uint32_t dcp_kv_owner_rank(uint64_t pos, uint32_t n, uint32_t interleave);

/** Index of global position pos within its owner's local token sequence. */
DCP_API uint64_t dcp_kv_local_index(uint64_t pos, uint32_t n, uint32_t interleave);

/** Global position of local index local on rank rank (inverse of the two above). */
DCP_API uint64_t dcp_kv_global_position(uint64_t local, uint32_t rank, uint32_t n,
                                        uint32_t interleave);

/**
 * Number of the first len positions of a sequence that rank rank stores. The
 * local lengths of all ranks sum to len and differ by at most interleave.
 */
DCP_API uint64_t dcp_kv_local_length(uint64_t len, uint32_t rank, uint32_t n,
                                     uint32_t interleave);

/**
 * Logical block ids a sequence of len tokens needs on each rank of a group of n
 * with block size block_size: ceil(len / (block_size * n)). Valid only when
 * block_size % interleave == 0 (then every rank's local tokens fit these pages).
 */
DCP_API uint64_t dcp_kv_blocks_for_length(uint64_t len, uint32_t block_size, uint32_t n);

#ifdef __cplusplus
}
#endif

#endif /* DCP_PLACEMENT_H */
