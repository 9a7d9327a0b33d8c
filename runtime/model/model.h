/*
 * model/model.h: the model layer below the config (docs/design.md §7, "Per-rank
 * geometry"). What a model implies -- attention dimensions, KV bytes per token, the
 * per-rank geometry under tp and dcp, weight bytes and the KV budget -- is derived
 * here once; the config rules, the planner, the engine and the CLI read it and
 * copy none of it. The public entry points are in include/dcp/geometry.h and
 * include/dcp/deployment.h; this header adds what the library shares internally.
 */
#ifndef DCP_MODEL_MODEL_H
#define DCP_MODEL_MODEL_H

#include <stdint.h>

#include "dcp/deployment.h"
#include "dcp/geometry.h"

/**
 * KV bytes one token of one layer takes for kv_heads KV heads of model m: *k the
 * key rows (MLA: the latent + RoPE row, which holds the values too), *v the value
 * rows (0 for MLA). The one formula behind dcp_model_kv_bytes_per_token_layer()
 * (all heads) and dcp_rank_geometry's k/v_token_bytes (a rank's heads).
 */
void dcp_model_token_bytes(const struct dcp_model_config *m, uint32_t kv_heads, uint64_t *k, uint64_t *v);

/**
 * Layers of each kind among the first num_layers of model m (its pattern repeated;
 * no pattern: all full): count[t] for every enum dcp_layer_type t.
 */
void dcp_model_count_layers(const struct dcp_model_config *m, uint32_t num_layers, uint32_t count[DCP_LAYER_NONE + 1]);

/**
 * Tokens of one sequence a rank keeps for a sliding window of `window` tokens when
 * a step attends up to `queries` query tokens of it: the positions those queries
 * see, n = window + queries - 1, all of them when replicated, else the most any
 * rank owns of n consecutive positions under dcp and interleave,
 * floor(n / (dcp x I)) x I + min(n mod (dcp x I), I). A ring of at least this many
 * local slots never overwrites a key a query still sees.
 */
uint64_t dcp_window_ring_tokens(uint32_t window, uint32_t queries, bool sharded, uint32_t dcp, uint32_t interleave);

#endif /* DCP_MODEL_MODEL_H */
