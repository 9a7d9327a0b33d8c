/*
 * geometry.h: what one TP rank holds of a model under tp and dcp (heads, bytes
 * per token, KV budget) and how the engine keys a step's tokens. Defined once
 * here and used by the engine, the planner, the config rules, the CLI and the
 * tests (docs/design.md, "Per-rank geometry").
 */
#ifndef DCP_GEOMETRY_H
#define DCP_GEOMETRY_H

#include "dcp/deployment.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The per-rank shape of a model under tensor parallelism tp and DCP size dcp. */
struct dcp_rank_geometry {
    uint32_t tp;                 ///< Tensor-parallel size.
    uint32_t dcp;                ///< DCP group size.
    uint32_t q_heads_per_rank;   ///< H_l = num_q_heads / tp.
    uint32_t kv_heads_per_rank;  ///< KV heads one TP rank stores: 1 for MLA; num_kv_heads / tp while
                                 ///< tp < num_kv_heads; else 1 (a replica of one head).
    uint32_t kv_replicas;        ///< TP ranks that store the same KV head: tp for MLA, tp / num_kv_heads
                                 ///< when tp >= num_kv_heads, else 1. A DCP group shards one replica set.
    uint32_t gathered_heads;     ///< dcp * H_l: query heads a rank attends after the Q all-gather.
    uint32_t q_per_kv_head;      ///< gathered_heads / kv_heads_per_rank: gathered query heads per local KV head.
    uint32_t qk_dim;             ///< Query/key length per head (head_dim, or kv_lora_rank + rope_dim for MLA).
    uint32_t v_dim;              ///< Value length per head (head_dim, or kv_lora_rank for MLA).
    uint64_t k_token_bytes;      ///< Key bytes a rank stores per token it owns per layer: its KV heads' K rows
                                 ///< (MLA: the latent + RoPE row, which holds the values too).
    uint64_t v_token_bytes;      ///< Value bytes likewise: its KV heads' V rows (0 for MLA).
    uint64_t token_layer_bytes;  ///< KV bytes a rank stores per token it owns per layer: k_token_bytes +
                                 ///< v_token_bytes.
};

/**
 * Fills *g for model m under tp and dcp. Returns DCP_EINVAL with a message
 * (dcp_last_error) and *g zeroed when tp does not split the query heads, tp
 * neither divides nor is a multiple of the KV heads (GQA/MHA), or dcp does not
 * divide the KV replicas (docs/design.md, "Validity rules"). The config rules
 * (runtime/config/rules.c) report these same checks and messages.
 */
DCP_API int dcp_rank_geometry_init(const struct dcp_model_config *m, uint32_t tp, uint32_t dcp,
                              struct dcp_rank_geometry *g);

/**
 * First KV head TP rank tp_rank stores (0 for MLA; ranks of one replica set
 * share a head when tp >= num_kv_heads).
 */
DCP_API uint32_t dcp_rank_geometry_kv_head0(const struct dcp_rank_geometry *g, uint32_t tp_rank);

/**
 * Global KV head that global query head q_head reads: floor(q_head / G) with
 * G = num_q_heads / num_kv_heads (GQA/MHA); 0 for MLA (docs/design.md, "One
 * decode step"). 0 when the model has no KV heads.
 */
DCP_API uint32_t dcp_model_kv_head_of(const struct dcp_model_config *m, uint32_t q_head);

/** Where one GPU's memory goes, per TP rank (bytes). */
struct dcp_kv_budget {
    double usable_bytes;   ///< hardware memory x memory.gpu_fraction.
    double weight_bytes;   ///< This rank's share of the weights: num_params x bytes per parameter / tp.
    double reserve_bytes;  ///< memory.reserve_bytes (activations, workspace).
    double kv_bytes;       ///< What is left for the KV cache: usable - weights - reserve (may be <= 0).
};

/** The KV budget of one GPU of deployment cfg (before any host or explicit override). */
DCP_API void dcp_kv_budget_init(const struct dcp_config *cfg, struct dcp_kv_budget *b);

/**
 * The KV one rank keeps for one layer of a deployment under DCP size dcp, by the
 * layer's kind (docs/design.md §13): what grows with the context and what does not.
 */
struct dcp_layer_kv {
    struct dcp_layer_kind kind;   ///< The layer's kind (repeat 1).
    bool sharded;                 ///< Its KV is split over the DCP group: full and sparse_topk layers, and
                                  ///< sliding_window layers with model.window_kv sharded (false for none).
    bool paged;                   ///< Its KV grows with the context in pages of block_size owned tokens
                                  ///< (full, sparse_topk); false: bounded (sliding_window) or none.
    uint64_t token_bytes;         ///< KV bytes per token the rank keeps (its KV heads' K and V rows; 0 for none).
    uint64_t index_token_bytes;   ///< sparse_topk: index-key bytes per token (index_head_dim x size(index_dtype)):
                                  ///< sharded with the KV under parallel.sparse_index sharded, else the caller's
                                  ///< cache, replicated on every rank. 0 for other kinds.
    uint64_t ring_tokens;         ///< sliding_window: tokens of one sequence the rank keeps (its ring, whole
                                  ///< pages, for steps of up to workload.q_len query tokens); 0 otherwise.
    double state_bytes;           ///< none: the layer's per-sequence state on this rank (model.linear_state_mb
                                  ///< / tp), the same on every rank of the group; 0 otherwise.
};

/**
 * Fills *out for layer `layer` of deployment cfg under DCP size dcp (1 for the TP
 * baseline). DCP_EINVAL (with a message) for a NULL argument, a layer past
 * num_layers or a dcp the deployment's geometry refuses.
 */
DCP_API int dcp_layer_kv_init(const struct dcp_config *cfg, uint32_t dcp, uint32_t layer, struct dcp_layer_kv *out);

/**
 * What one request keeps and reads on one rank, over every layer of a deployment
 * under DCP size dcp: the planner's capacity and read figures, and the performance
 * model's (docs/design.md §13, docs/plan.md).
 */
struct dcp_model_kv {
    uint32_t layers[DCP_LAYER_NONE + 1]; ///< Layers of each enum dcp_layer_type.
    uint32_t dcp;                 ///< The DCP size these figures are for.
    uint64_t page_token_bytes;    ///< Bytes per owned token of the paged layers (full, sparse_topk; with
                                  ///< sparse_index sharded their index keys too): a KV page is block_size of them.
    uint64_t replicated_token_bytes; ///< Bytes per context token every rank keeps whatever dcp: the caller's index
                                  ///< keys (sparse_index caller).
    uint64_t window_bytes;        ///< Bytes of one sequence's sliding-window rings on one rank (all window layers).
    double state_bytes;           ///< Bytes of one sequence's KV-free layer state on one rank (all none layers).
    double read_token_bytes;      ///< Bytes one rank reads per decode step per context token of a request at long
                                  ///< contexts (the slope): full layers' KV / dcp, and the index keys the indexer
                                  ///< scores (/ dcp when sharded); windows and top-k reads do not grow.
};

/** Fills *kv for deployment cfg under DCP size dcp; DCP_EINVAL as dcp_layer_kv_init. */
DCP_API int dcp_model_kv_init(const struct dcp_config *cfg, uint32_t dcp, struct dcp_model_kv *kv);

/**
 * Bytes one request of `context` tokens keeps on one rank: its pages of the paged
 * layers (whole pages: ceil(context / (block_size x dcp)) of block_size x
 * page_token_bytes), the replicated index keys, its window rings and its state.
 */
DCP_API double dcp_model_kv_request_bytes(const struct dcp_config *cfg, const struct dcp_model_kv *kv,
                                          uint64_t context);

/**
 * KV bytes one rank reads in one decode step (one query token) of a request of
 * `context` tokens, over every layer: full layers its shard (the largest, rank 0's),
 * sparse_topk layers its share of min(topk, context) selected rows plus the index
 * keys scored, sliding_window layers its part of the last min(window, context)
 * tokens; none layers nothing.
 */
DCP_API double dcp_model_kv_read_bytes(const struct dcp_config *cfg, const struct dcp_model_kv *kv,
                                       uint64_t context);

/**
 * Key of the token at global position pos of sequence seq_id, as the engine
 * writes it in a step's token keys (dcp_rank_step_token_keys(), tools.h) and as the
 * synthetic data helpers take it: ((uint64_t)seq_id << 40) | pos (the id's top 8
 * bits drop out; pos must be below 2^40).
 */
static inline uint64_t dcp_token_key(uint32_t seq_id, uint64_t pos)
{
    return ((uint64_t)seq_id << 40) | pos;
}

#ifdef __cplusplus
}
#endif

#endif /* DCP_GEOMETRY_H */
