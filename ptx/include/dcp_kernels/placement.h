/*
 * dcp_kernels/placement.h: token placement in a DCP group (docs/design.md §2),
 * one definition for the scheduler, the CPU kernels and the CUDA kernels.
 * n = group size, il = interleave size, all 64-bit.
 */
#ifndef DCPK_PLACEMENT_H
#define DCPK_PLACEMENT_H

#include "dcp_kernels/common.h"

/** owner(p) = floor(p / I) mod N */
DCPK_HD uint32_t dcpk_owner_rank(uint64_t pos, uint32_t n, uint32_t il)
{
    return (uint32_t)((pos / il) % n);
}

/** local(p) = floor(p / (N*I)) * I + (p mod I) */
DCPK_HD uint64_t dcpk_local_index(uint64_t pos, uint32_t n, uint32_t il)
{
    const uint64_t span = (uint64_t)n * il;
    return (pos / span) * il + pos % il;
}

/** p = floor(c / I) * (N*I) + r*I + (c mod I) */
DCPK_HD uint64_t dcpk_global_position(uint64_t local, uint32_t rank, uint32_t n, uint32_t il)
{
    return (local / il) * ((uint64_t)n * il) + (uint64_t)rank * il + local % il;
}

/**
 * Tokens among positions [0, len) that rank stores:
 * base = floor(L / (N*I)) * I; rem = L - base*N; local = base + clamp(rem - r*I, 0, I).
 */
DCPK_HD uint64_t dcpk_local_length(uint64_t len, uint32_t rank, uint32_t n, uint32_t il)
{
    const uint64_t base = (len / ((uint64_t)n * il)) * il;
    const uint64_t rem = len - base * n;
    const uint64_t start = (uint64_t)rank * il;
    if (rem <= start)
        return base;
    const uint64_t extra = rem - start;
    return base + (extra < il ? extra : il);
}

#endif /* DCPK_PLACEMENT_H */
