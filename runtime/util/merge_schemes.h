/*
 * merge_schemes.h: the ways a DCP group merges its partial results
 * (docs/design.md §3), one row each:
 *   X(NAME, name, collectives, packed_lse)
 *   collectives: collectives per layer after the Q all-gather;
 *   packed_lse:  1 when every partial output row carries its LSE ([v + 1] floats),
 *                one all-to-all delivers them and the receiver merges in fp32;
 *                0 when the LSEs are all-gathered, each rank scales its partial
 *                outputs and a reduce-scatter sums them.
 * enum dcp_comm_scheme (include/dcp/deployment.h) has the same values: static
 * asserts in runtime/config/names.c tie each row to it. The engine's buffers and
 * merge (engine.c, rank.c), the planner's wire bytes (plan.c) and the config
 * names (names.c, which spell the rows' second column) read this table.
 */
#ifndef DCP_MERGE_SCHEMES_H
#define DCP_MERGE_SCHEMES_H

#include <stdbool.h>
#include <stdint.h>

#include "dcp/deployment.h"

#define DCP_MERGE_SCHEMES(X) \
    X(AG_RS, ag_rs, 2, 0)    \
    X(A2A, a2a, 1, 1)

/** One merge scheme. */
struct dcp_merge_scheme {
    uint32_t collectives;    ///< Per layer, after the Q all-gather.
    bool packed_lse;         ///< Partial rows carry their LSE; the receiver merges.
};

/** The row of scheme s (the first row for a value outside the enum). */
static inline const struct dcp_merge_scheme *dcp_merge_scheme(enum dcp_comm_scheme s)
{
    static const struct dcp_merge_scheme rows[] = {
#define DCP_MERGE_SCHEME_ROW_(NAME, name, collectives, packed) {collectives, packed},
        DCP_MERGE_SCHEMES(DCP_MERGE_SCHEME_ROW_)
#undef DCP_MERGE_SCHEME_ROW_
    };
    return (unsigned)s < sizeof(rows) / sizeof(rows[0]) ? &rows[s] : &rows[0];
}

/**
 * Values per head in each partial output row a DCP group merges (and the caller
 * receives): the model's value length v_dim (geometry.h), or model.v_head_dim when an
 * MLA deployment merges after the value up-projection (parallel.merge_after_uv).
 */
static inline uint32_t dcp_merged_v_dim(const struct dcp_config *cfg, uint32_t v_dim)
{
    return cfg->parallel.merge_after_uv && cfg->model.attention == DCP_ATTN_MLA ? cfg->model.v_head_dim : v_dim;
}

/** Row numbers of the table (equal to enum dcp_comm_scheme), and their count. */
enum dcp_merge_scheme_row {
#define DCP_MERGE_SCHEME_ENUM_(NAME, name, collectives, packed) DCP_MERGE_ROW_##NAME,
    DCP_MERGE_SCHEMES(DCP_MERGE_SCHEME_ENUM_)
#undef DCP_MERGE_SCHEME_ENUM_
    DCP_MERGE_SCHEME_COUNT
};

#endif /* DCP_MERGE_SCHEMES_H */
