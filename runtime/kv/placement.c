/* placement.c: public wrappers of the token placement formulas (docs/design.md §2).
 * The formulas themselves live in ptx/include/dcp_kernels/placement.h so that the
 * kernels, their CPU implementations and the scheduler share one definition. */
#include "dcp/placement.h"
#include "dcp_kernels/placement.h"

DCP_API uint32_t dcp_kv_owner_rank(uint64_t pos, uint32_t n, uint32_t interleave)
{
    return dcpk_owner_rank(pos, n, interleave);
}

DCP_API uint64_t dcp_kv_local_index(uint64_t pos, uint32_t n, uint32_t interleave)
{
    return dcpk_local_index(pos, n, interleave);
}

DCP_API uint64_t dcp_kv_global_position(uint64_t local, uint32_t rank, uint32_t n,
                                        uint32_t interleave)
{
    return dcpk_global_position(local, rank, n, interleave);
}

DCP_API uint64_t dcp_kv_local_length(uint64_t len, uint32_t rank, uint32_t n, uint32_t interleave)
{
    return dcpk_local_length(len, rank, n, interleave);
}

DCP_API uint64_t dcp_kv_blocks_for_length(uint64_t len, uint32_t block_size, uint32_t n)
{
    const uint64_t span = (uint64_t)block_size * n;
    return span ? (len + span - 1) / span : 0;
}
