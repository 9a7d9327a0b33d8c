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
