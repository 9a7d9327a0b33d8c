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
    double kv_bytes_per_token;   ///< KV bytes per context token per GPU, all layers (fractional for DCP).
    double replication;          ///< Copies of each token's KV held across one TP group.
    uint64_t page_bytes;         ///< Bytes of one block_size-token page on one GPU, all layers.
    uint64_t pages;              ///< Whole pages that fit the KV budget on one GPU.
    uint64_t local_tokens;       ///< Tokens one GPU stores: pages * block_size.
    uint64_t context_tokens;     ///< Context tokens one TP group holds: pages * block_size * dcp.
};

/** Capacity at one planned context length. */
struct dcp_plan_context {
    uint64_t context_len;           ///< Tokens per request.
    uint64_t baseline_pages;        ///< Pages one request needs per GPU, baseline: ceil(L / B).
    uint64_t dcp_pages;             ///< Pages one request needs per GPU, DCP: ceil(L / (B * dcp)).
    uint64_t baseline_concurrency;  ///< Requests of this length one TP group holds, baseline.
    uint64_t dcp_concurrency;       ///< Requests of this length one TP group holds, DCP.
    double baseline_kv_read_bytes;  ///< KV bytes one rank reads per layer per decode step for one request, baseline.
    double dcp_kv_read_bytes;       ///< The same with DCP (the largest local shard).
};

/** Bytes one rank sends and receives per layer per query token, DCP configured scheme. */
struct dcp_plan_comm {
    double q_gather_send;   ///< Q AllGather (0 with replicate_q).
    double q_gather_recv;   ///< Q AllGather received.
    double lse_send;        ///< ag_rs: LSE AllGather sent (0 for a2a; a2a carries LSEs with outputs).
    double lse_recv;        ///< ag_rs: LSE AllGather received.
    double out_send;        ///< ag_rs: output ReduceScatter sent; a2a: all-to-all sent (outputs + LSEs).
    double out_recv;        ///< ag_rs: ReduceScatter received; a2a: all-to-all received.
    double total_send;      ///< Sum of the sends.
    double total_recv;      ///< Sum of the receives.
    uint32_t collectives;   ///< Collectives per layer per step (Q gather + merge).
    bool packed_lse;        ///< The scheme sends each partial output row with its LSE in one
                            ///< all-to-all (a2a); false: LSE AllGather + ReduceScatter (ag_rs).
};

/** Where DCP's communication costs less than the KV read it saves. An estimate. */
struct dcp_plan_crossover {
    uint32_t batch;         ///< Requests decoded together in one step.
    double comm_seconds;    ///< Extra time per layer per step: collectives * latency + bytes / link bandwidth.
    double saved_per_token_seconds; ///< KV read time saved per layer per step per context token of each request.
    double context_len;     ///< Context length above which DCP's step is faster (INFINITY if never, i.e. dcp = 1).
};

/** Number of batch sizes the crossover is estimated for. */
#define DCP_PLAN_CROSSOVER_BATCHES 4

/** A whole plan. Plain data: no allocation, no destroy. */
struct dcp_plan {
    struct dcp_plan_memory memory;     ///< Per-GPU budget.
    struct dcp_plan_layout baseline;   ///< TP only (dcp = 1).
    struct dcp_plan_layout dcp;        ///< The configured DCP.
    struct dcp_plan_context contexts[DCP_MAX_CONTEXT_LENGTHS]; ///< One per workload context length.
    uint32_t num_contexts;             ///< Entries used in contexts.
    struct dcp_plan_comm comm;         ///< Communication of the configured scheme.
    double baseline_kv_read_per_token; ///< KV bytes read per layer per context token per rank, baseline.
    double dcp_kv_read_per_token;      ///< The same with DCP (baseline / dcp).
    struct dcp_plan_crossover crossover[DCP_PLAN_CROSSOVER_BATCHES]; ///< For batch 1, 8, 64, 256.
    uint32_t instances;                ///< Model instances (data-parallel replicas): gpus_per_node * nodes / tp.
};

/**
 * Computes the plan of a validated deployment. Returns DCP_OK, or DCP_EINVAL for
 * NULL arguments or a page or token count that would not fit 64 bits (checked;
 * the deployment schema's upper bounds keep every loaded deployment clear of it). A KV budget of zero or less is not an error: pages and
 * concurrency are then 0.
 */
DCP_API int dcp_plan_compute(const dcp_deployment *dep, struct dcp_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* DCP_PLAN_H */
