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

#endif /* DCP_MODEL_MODEL_H */
