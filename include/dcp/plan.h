/*
 * plan.h: what DCP buys over plain tensor parallelism for one deployment.
 *
 * Pure arithmetic on the deployment's figures, no device needed. "Baseline" is the
 * same TP layout with dcp = 1 (KV replicated once TP runs out of KV heads to split);
 * "DCP" is the configured dcp. Memory figures are per GPU; concurrency is per model
 * instance (one TP group); communication is per rank, per layer, per query token.
 * Counting is in whole KV pages, as a real block allocator would.
 */
#ifndef DCP_PLAN_H
#define DCP_PLAN_H

#include "dcp/deployment.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Per-GPU memory budget. All in bytes. */
struct dcp_plan_memory {
    double usable_bytes;    ///< memory_bytes * gpu_fraction.
    double weight_bytes;    ///< num_params * bytes per parameter / tp.
    double reserve_bytes;   ///< memory.reserve.
    double kv_budget_bytes; ///< usable - weights - reserve (may be <= 0: nothing fits).
};

/** One KV layout (baseline or DCP) on one GPU. */
struct dcp_plan_layout {
    uint32_t dcp;                ///< DCP size of this layout (1 for the baseline).
    uint32_t kv_heads_per_gpu;   ///< KV heads each GPU stores (1 for MLA).
    double kv_bytes_per_token;   ///< KV bytes per context token per GPU, all layers whose KV grows with the context
                                 ///< (fractional for DCP): the paged layers' / dcp, plus index keys every rank keeps.
    double replication;          ///< Copies of each token's KV held across one TP group (those layers).
    double fixed_bytes;          ///< Bytes one request keeps per GPU whatever its length: sliding-window rings and
                                 ///< KV-free layers' state (docs/design.md §13); 0 for a model of full layers.
    uint64_t page_bytes;         ///< Bytes of one block_size-token page on one GPU, all paged layers (full and
                                 ///< sparse_topk; 0 when there is none).
    uint64_t pages;              ///< Whole pages that fit the KV budget on one GPU.
    uint64_t local_tokens;       ///< Tokens one GPU stores: pages * block_size.
    uint64_t context_tokens;     ///< Context tokens one TP group holds: pages * block_size * dcp.
};

/** Capacity at one planned context length. */
struct dcp_plan_context {
    uint64_t context_len;           ///< Tokens per request.
    uint64_t baseline_pages;        ///< Pages one request needs per GPU, baseline: ceil(L / B).
    uint64_t dcp_pages;             ///< Pages one request needs per GPU, DCP: ceil(L / (B * dcp)).
    uint64_t baseline_concurrency;  ///< Requests of this length one TP group holds, baseline: the KV budget over one
                                    ///< request's bytes (its pages, replicated index keys, rings and state).
    uint64_t dcp_concurrency;       ///< Requests of this length one TP group holds, DCP.
    double baseline_kv_read_bytes;  ///< KV bytes one rank reads per layer per decode step for one request, baseline
                                    ///< (averaged over the model's layers when they differ in kind).
    double dcp_kv_read_bytes;       ///< The same with DCP (the largest local shard).
};

/** What moves the data of one communication row (struct dcp_plan_comm_row). */
enum dcp_plan_comm_kind {
    DCP_PLAN_COMM_ALL_GATHER = 0,     ///< Collective: every rank receives every rank's share.
    DCP_PLAN_COMM_REDUCE_SCATTER = 1, ///< Collective: every rank receives the sum of its chunk over the ranks.
    DCP_PLAN_COMM_ALL_TO_ALL = 2,     ///< Collective: every rank sends each other rank its own chunk.
    DCP_PLAN_COMM_ALL_REDUCE = 3,     ///< Collective: every rank receives the sum of every rank's buffer.
    DCP_PLAN_COMM_PEER_WRITE = 4,     ///< One-sided stores into the peers' memory (peer access), no collective call.
};

/** Most rows struct dcp_plan_comm holds. */
#define DCP_PLAN_COMM_MAX_ROWS 8

/**
 * One exchange of the DCP step, per layer: a collective call (or one round of peer
 * writes) among `ranks` ranks. Bytes are per rank, per layer, per query token, counting
 * only what crosses to other ranks (a rank's share for itself is not counted).
 */
struct dcp_plan_comm_row {
    enum dcp_plan_comm_kind kind; ///< How the data moves.
    const char *what;             ///< What moves: "queries", "LSEs", "outputs", "outputs + LSEs" (static string).
    uint32_t ranks;               ///< Ranks taking part (the DCP group size).
    double send_bytes;            ///< Bytes one rank sends to the others.
    double recv_bytes;            ///< Bytes one rank receives from the others.
    uint32_t layers;              ///< Layers of the model that run this exchange in a step: those DCP merges
                                  ///< (not the KV-free ones, nor sliding windows with window_kv replicated), or for
                                  ///< "top-k candidates" the sparse_topk layers (docs/design.md §13).
};

/**
 * Communication of the configured merge scheme (parallel.comm), per rank, per layer,
 * per query token: the rows in the order the step runs them (the Q gather first unless
 * replicate_q, then the merge's), and their totals. Empty when dcp = 1.
 */
struct dcp_plan_comm {
    struct dcp_plan_comm_row rows[DCP_PLAN_COMM_MAX_ROWS]; ///< The exchanges, in step order.
    uint32_t num_rows;      ///< Rows used.
    double total_send;      ///< Sum of the rows' send_bytes.
    double total_recv;      ///< Sum of the rows' recv_bytes.
    uint32_t collectives;   ///< Exchanges per layer per step (= num_rows; peer writes count as one each).
    enum dcp_comm_scheme scheme; ///< The merge scheme priced (parallel.comm).
};

/** "all_gather", "reduce_scatter", "all_to_all", "all_reduce", "peer_write", or "unknown". */
DCP_API const char *dcp_plan_comm_kind_name(enum dcp_plan_comm_kind kind);

/** A whole plan. Plain data: no allocation, no destroy. */
struct dcp_plan {
    struct dcp_plan_memory memory;     ///< Per-GPU budget.
    struct dcp_plan_layout baseline;   ///< TP only (dcp = 1).
    struct dcp_plan_layout dcp;        ///< The configured DCP.
    struct dcp_plan_context contexts[DCP_MAX_CONTEXT_LENGTHS]; ///< One per workload context length.
    uint32_t num_contexts;             ///< Entries used in contexts.
    struct dcp_plan_comm comm;         ///< Communication of the configured scheme.
    double baseline_kv_read_per_token; ///< KV bytes read per layer per context token per rank at long contexts,
                                       ///< baseline (averaged over the layers; windows and top-k rows do not grow).
    double dcp_kv_read_per_token;      ///< The same with DCP (the sharded reads / dcp).
    uint32_t instances;                ///< Model instances (data-parallel replicas): gpus_per_node * nodes / tp.
};

/**
 * Computes the plan of a validated deployment. Returns DCP_OK, or DCP_EINVAL for
 * NULL arguments or a page or token count that would not fit 64 bits (checked;
 * the deployment schema's upper bounds keep every loaded deployment clear of it). A KV budget of zero or less is not an error: pages and
 * concurrency are then 0.
 */
DCP_API int dcp_plan_compute(const dcp_deployment *dep, struct dcp_plan *plan);

/**
 * The plan of deployment dep as if parallel.dcp were dcp (the baseline is the same;
 * plan->dcp and the communication are those of dcp). DCP_EINVAL, with
 * the reason, for a dcp the model and tp do not allow (dcp_rank_geometry_init()).
 */
DCP_API int dcp_plan_compute_dcp(const dcp_deployment *dep, uint32_t dcp, struct dcp_plan *plan);

/** One candidate DCP size of a deployment, valid or not. */
struct dcp_plan_dcp_size {
    uint32_t dcp;           ///< The size.
    bool valid;             ///< The model and tp allow it.
    char reason[200];       ///< Why not (the validity rule's message); "" when valid.
};

/** Most sizes dcp_plan_dcp_sizes() lists. */
#define DCP_PLAN_MAX_DCP_SIZES 32

/**
 * Lists the DCP sizes a user may think of for deployment dep, ascending: 1 to
 * min(tp, 16), the divisors of tp and the powers of two up to tp (at most
 * DCP_PLAN_MAX_DCP_SIZES), each valid or with the reason it is not. Returns the count
 * written to out (0 for NULL arguments).
 */
DCP_API uint32_t dcp_plan_dcp_sizes(const dcp_deployment *dep, struct dcp_plan_dcp_size *out, uint32_t max);

#ifdef __cplusplus
}
#endif

#endif /* DCP_PLAN_H */
