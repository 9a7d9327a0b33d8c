/*
 * merge.h: the ways a DCP group gathers its queries and merges its partial results
 * (docs/design.md §3), as one operations table in merge.c. A scheme's row carries
 * all of its behaviour: the buffers it needs, where the local attention writes its
 * partial outputs, the exchange and merge after it, and the communication rows the
 * planner prices (struct dcp_plan_comm). The engine (engine.c, rank.c) and the
 * planner (plan.c) call the functions below and never ask which scheme they have.
 */
#ifndef DCP_ENGINE_MERGE_H
#define DCP_ENGINE_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp/deployment.h"
#include "dcp/plan.h"

struct dcp_engine;
struct dcp_rank;

/** Values of enum dcp_comm_scheme the config names (ag_rs, a2a, p2p, auto: in enum order). */
#define DCP_MERGE_SCHEME_COUNT 4
/** Config names of the schemes, indexed by enum dcp_comm_scheme (merge.c). */
extern const char *const dcp_merge_scheme_names[DCP_MERGE_SCHEME_COUNT];

/** Per-rank buffers the schemes use (0 where a scheme needs none). Sized for T = max_query_tokens. */
struct dcp_merge_buffers {
    uint64_t q_gathered; ///< comm dtype [dcp][T][H_l][qk]: every rank's queries (dcp > 1 without replicate_q);
                         ///< p2p: two such slots (by the exchange's parity) that the peers store into
    uint64_t q_own;      ///< comm dtype [T][H_l][qk]: this rank's queries converted for the gather (act != comm dtype)
    uint64_t q_lse_zero; ///< fp32 [T][H_l] zeros: the LSEs of that conversion by the merge kernel
    uint64_t part;       ///< Partial outputs, comm dtype, [dcp] destination chunks (a2a: each an a2a chunk, LSEs packed)
    uint64_t part_lse;   ///< fp32 [dcp][T][H_l] partial LSEs (ag_rs)
    uint64_t recv;       ///< a2a: received chunks [dcp][a2a chunk]; ag_rs: the LSE gather [dcp][dcp][T][H_l] fp32;
                         ///< p2p: two a2a receive areas (by the exchange's parity) that the peers store into
    uint64_t rs_out;     ///< comm dtype [T][H_l][o]: the ag_rs ReduceScatter's result when out is of another dtype
    uint64_t p2p_flags;  ///< p2p: uint64 [dcp]: the epoch each member published into this rank (peers store it)
    uint64_t p2p_epoch;  ///< p2p: exchanges this rank ran since creation or the last recovery (a host counter)
};

/** Buffers to allocate per rank: sizes and where each address goes. */
struct dcp_buffer_plan {
    size_t bytes[32];
    uint64_t *dst[32];
    int n;
    bool overflow; ///< Some size did not fit 64 bits.
};

/** Adds a buffer of a * b * c * d bytes (each factor a count or an element size), overflow-checked. */
void dcp_buffer_plan_add(struct dcp_buffer_plan *bp, uint64_t *dst, uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/** Where the local attention writes its partial outputs: chunk c (destination group rank c) at
 *  out + c * out_chunk_stride (elements of out_dtype) and lse + c * lse_chunk_stride (floats). */
struct dcp_attn_target {
    uint64_t out, lse;
    uint64_t out_chunk_stride, lse_chunk_stride;
    uint32_t out_dtype;
};

/**
 * Values per head in each partial output row a DCP group merges (and the caller
 * receives): the model's value length v_dim (geometry.h), or model.v_head_dim when an
 * MLA deployment merges after the value up-projection (parallel.merge_after_uv).
 */
uint32_t dcp_merged_v_dim(const struct dcp_config *cfg, uint32_t v_dim);

/** The engine's scheme's buffers (dcp > 1), added to bp with their addresses in b. */
void dcp_merge_plan_buffers(const struct dcp_engine *e, struct dcp_merge_buffers *b, struct dcp_buffer_plan *bp);

/**
 * After the backend is open: resolves parallel.comm auto into e->comm (p2p when the backend
 * reports peer_writes and every DCP group with a rank here is all here, else a2a), and refuses
 * p2p where it cannot run (DCP_ENOTSUP with the reason).
 */
int dcp_merge_resolve(struct dcp_engine *e);

/** After an aborted step, while no rank runs: the p2p epochs start again from 0 on every rank. */
int dcp_merge_recover(struct dcp_engine *e);

/** Test hook: a deliberate bug in the p2p exchange, which the tests must catch (0: none). */
enum dcp_p2p_mutant {
    DCP_P2P_MUTANT_NONE = 0,
    DCP_P2P_MUTANT_NO_EPOCH_BUMP, ///< Every exchange publishes and waits for epoch 1.
    DCP_P2P_MUTANT_WRONG_SLOT,    ///< A rank stores into the peer's slot of the peer, not its own.
    DCP_P2P_MUTANT_NO_PUBLISH,    ///< The epochs are never stored (the release store deleted).
};
/** The mutant the p2p exchange runs (tests only; set while no engine runs). */
extern enum dcp_p2p_mutant dcp_p2p_test_mutant;

/** After the rank's buffers are allocated: fills what the scheme needs before the first step. */
int dcp_merge_rank_init(struct dcp_rank *r);

/**
 * Every rank's queries for this step's attention, laid out [dcp][T][H_l][qk]: the
 * caller's q (replicate_q) or gathered from the group. *q_all and *q_dtype say where
 * and in which dtype.
 */
int dcp_merge_gather_q(struct dcp_rank *r, uint64_t q, uint64_t *q_all, uint32_t *q_dtype);

/** Where the local attention (or the W_UV projection) puts this step's partial outputs. */
struct dcp_attn_target dcp_merge_target(const struct dcp_rank *r);

/** Exchanges the partial results and merges this rank's heads into out (act dtype) and lse (fp32). */
int dcp_merge_run(struct dcp_rank *r, uint64_t out, uint64_t lse);

/** The communication rows of cfg's scheme (docs/plan.md, "Communication"). */
void dcp_merge_plan_comm(const struct dcp_config *cfg, struct dcp_plan_comm *out);

#endif /* DCP_ENGINE_MERGE_H */
