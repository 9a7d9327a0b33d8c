/* plan_internal.h: the planner on a plain config. */
#ifndef DCP_PLAN_INTERNAL_H
#define DCP_PLAN_INTERNAL_H

#include <stdbool.h>

#include "dcp/plan.h"

/**
 * The plan of cfg, as dcp_plan_compute() gives it for a deployment made from cfg,
 * but without validation. Lets tests reach figures of configs the loader rejects
 * (weights that do not fit: a KV budget <= 0). cfg must be consistent: tp, dcp,
 * block_size, interleave, num_layers >= 1 and num_kv_heads set (1 for MLA).
 * Returns false when a page or token count would not fit 64 bits (the figures
 * are then not to be used); the schema's bounds keep loaded deployments clear of that.
 */
bool dcp_plan_from_config(const struct dcp_config *cfg, struct dcp_plan *plan);

#endif /* DCP_PLAN_INTERNAL_H */
