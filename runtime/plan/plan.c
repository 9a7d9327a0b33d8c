/*
 * plan.c: what DCP buys over plain tensor parallelism (include/dcp/plan.h).
 *
 * Everything here is arithmetic on the validated deployment; docs/plan.md states
 * each formula. Two layouts are compared on the same GPUs and the same KV budget:
 * the baseline (TP only: KV heads are split until each GPU holds one, then every
 * further TP rank holds a copy) and DCP (the same heads, but each rank of a DCP
 * group keeps only every N-th run of tokens). Both use pages of block_size local
 * tokens of the GPU's KV heads, so a GPU has the same number of pages either way;
 * DCP makes each page stand for N times as many context tokens.
 */
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <string.h>

#include "dcp/geometry.h"
#include "dcp/placement.h"
#include "plan/plan_internal.h"
#include "engine/merge.h"
#include "util/util.h"


/* Geometry of one GPU without DCP (the layout both sides share; see plan_layout).
 * The deployment was validated, so dcp = 1 always has a geometry. */
static struct dcp_rank_geometry baseline_geometry(const struct dcp_config *cfg)
{
    struct dcp_rank_geometry g;
    dcp_rank_geometry_init(&cfg->model, cfg->parallel.tp, 1, &g);
    return g;
}

static void plan_memory(const struct dcp_config *cfg, struct dcp_plan_memory *mem)
{
    struct dcp_kv_budget b;
    dcp_kv_budget_init(cfg, &b);
    mem->usable_bytes = b.usable_bytes;
    mem->weight_bytes = b.weight_bytes;
    mem->reserve_bytes = b.reserve_bytes;
    mem->kv_budget_bytes = b.kv_bytes;
}

/* Whole pages of page_bytes that fit in budget bytes (none if the budget is not
 * positive); false if the count does not fit 64 bits. */
static bool pages_in_budget(double budget, uint64_t page_bytes, uint64_t *pages)
{
    *pages = 0;
    if (!(budget > 0.0))
        return true;
    if (page_bytes == 0)
        return false;
    const double n = floor(budget / (double)page_bytes);
    if (!(n < 18446744073709551616.0)) /* 2^64; also catches NaN */
        return false;
    *pages = (uint64_t)n;
    return true;
}

/*
 * One layout with DCP size dcp (1 = baseline). token_layer_bytes is the
 * baseline's per-GPU bytes per token per layer: a page holds block_size local
 * tokens either way, so page size and page count do not depend on dcp.
 */
static bool plan_layout(const struct dcp_config *cfg, uint32_t dcp, uint64_t token_layer_bytes,
                        double kv_budget, struct dcp_plan_layout *out)
{
    const struct dcp_model_config *model = &cfg->model;
    const uint32_t layers = model->num_layers;
    const uint32_t block = cfg->memory.block_size;
    const double model_token_bytes =
        (double)dcp_model_kv_bytes_per_token_layer(model) * (double)layers;

    out->dcp = dcp;
    out->kv_heads_per_gpu = baseline_geometry(cfg).kv_heads_per_rank;
    out->kv_bytes_per_token = (double)token_layer_bytes * layers / dcp;
    out->replication = out->kv_bytes_per_token * cfg->parallel.tp / model_token_bytes;
    /* Checked: a figure that does not fit 64 bits is an error, never a wrapped count. */
    bool ok = !__builtin_mul_overflow((uint64_t)block, token_layer_bytes, &out->page_bytes) &&
              !__builtin_mul_overflow(out->page_bytes, (uint64_t)layers, &out->page_bytes);
    ok = ok && pages_in_budget(kv_budget, out->page_bytes, &out->pages);
    ok = ok && !__builtin_mul_overflow(out->pages, (uint64_t)block, &out->local_tokens);
    ok = ok && !__builtin_mul_overflow(out->local_tokens, (uint64_t)dcp, &out->context_tokens);
    return ok;
}

/* Requests of pages_per_request pages that fit in pages (none for a 0-token request). */
static uint64_t requests_that_fit(uint64_t pages, uint64_t pages_per_request)
{
    return pages_per_request ? pages / pages_per_request : 0;
}

static void plan_context(const struct dcp_config *cfg, uint64_t len, uint64_t pages,
                         uint64_t token_layer_bytes, struct dcp_plan_context *out)
{
    const uint32_t block = cfg->memory.block_size;
    const uint32_t dcp = cfg->parallel.dcp;
    /* Rank 0 holds the largest share: local lengths differ by at most I and
     * the leftover runs are dealt from rank 0 up. */
    const uint64_t largest_shard = dcp_kv_local_length(len, 0, dcp, cfg->parallel.interleave);

    out->context_len = len;
    out->baseline_pages = dcp_kv_blocks_for_length(len, block, 1);
    out->dcp_pages = dcp_kv_blocks_for_length(len, block, dcp);
    out->baseline_concurrency = requests_that_fit(pages, out->baseline_pages);
    out->dcp_concurrency = requests_that_fit(pages, out->dcp_pages);
    out->baseline_kv_read_bytes = (double)len * (double)token_layer_bytes;
    out->dcp_kv_read_bytes = (double)largest_shard * (double)token_layer_bytes;
}

bool dcp_plan_from_config(const struct dcp_config *cfg, struct dcp_plan *plan)
{
    const uint32_t tp = cfg->parallel.tp;
    const uint64_t token_layer_bytes = baseline_geometry(cfg).token_layer_bytes;

    memset(plan, 0, sizeof(*plan));
    plan_memory(cfg, &plan->memory);
    const double budget = plan->memory.kv_budget_bytes;
    bool ok = plan_layout(cfg, 1, token_layer_bytes, budget, &plan->baseline);
    ok = plan_layout(cfg, cfg->parallel.dcp, token_layer_bytes, budget, &plan->dcp) && ok;

    plan->num_contexts = cfg->workload.num_context_lengths;
    for (uint32_t i = 0; i < plan->num_contexts; i++)
        plan_context(cfg, cfg->workload.context_lengths[i], plan->dcp.pages, token_layer_bytes,
                     &plan->contexts[i]);

    /* The merge scheme's exchanges (engine/merge.c, which also moves them). */
    dcp_merge_plan_comm(cfg, &plan->comm);
    plan->baseline_kv_read_per_token = (double)token_layer_bytes;
    plan->dcp_kv_read_per_token = (double)token_layer_bytes / cfg->parallel.dcp;

    plan->instances = (uint32_t)((uint64_t)cfg->hardware.gpus_per_node * cfg->hardware.nodes / tp);
    return ok;
}

DCP_API int dcp_plan_compute(const dcp_deployment *dep, struct dcp_plan *plan)
{
    dcp_clear_error();
    if (!dep || !plan)
        return dcp_error(DCP_EINVAL, "dcp_plan_compute: %s is NULL", dep ? "plan" : "deployment");
    if (!dcp_plan_from_config(dcp_deployment_config(dep), plan))
        return dcp_error(DCP_EINVAL, "dcp_plan_compute: a page or token count of %s does not fit "
                                     "64 bits", dcp_deployment_source(dep));
    return DCP_OK;
}

DCP_API int dcp_plan_compute_dcp(const dcp_deployment *dep, uint32_t dcp, struct dcp_plan *plan)
{
    dcp_clear_error();
    if (!dep || !plan)
        return dcp_error(DCP_EINVAL, "dcp_plan_compute_dcp: %s is NULL", dep ? "plan" : "deployment");
    struct dcp_config cfg = *dcp_deployment_config(dep);
    struct dcp_rank_geometry g;
    if (dcp_rank_geometry_init(&cfg.model, cfg.parallel.tp, dcp, &g))
        return dcp_error(DCP_EINVAL, "dcp=%u: %s", dcp, dcp_last_error());
    cfg.parallel.dcp = dcp;
    if (!dcp_plan_from_config(&cfg, plan))
        return dcp_error(DCP_EINVAL, "dcp_plan_compute_dcp: a page or token count of %s does not fit "
                                     "64 bits", dcp_deployment_source(dep));
    return DCP_OK;
}

/* Appends d to the ascending set v (n entries, at most max) unless it is there. */
static void add_size(uint32_t *v, uint32_t *n, uint32_t max, uint32_t d)
{
    uint32_t i = 0;
    while (i < *n && v[i] < d)
        i++;
    if ((i < *n && v[i] == d) || *n == max)
        return;
    memmove(v + i + 1, v + i, (*n - i) * sizeof(*v));
    v[i] = d;
    ++*n;
}

DCP_API uint32_t dcp_plan_dcp_sizes(const dcp_deployment *dep, struct dcp_plan_dcp_size *out, uint32_t max)
{
    if (!dep || !out)
        return 0;
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    const uint32_t tp = cfg->parallel.tp;
    uint32_t v[DCP_PLAN_MAX_DCP_SIZES], n = 0;
    max = DCP_MIN(max, (uint32_t)DCP_PLAN_MAX_DCP_SIZES);
    for (uint32_t d = 1; d <= DCP_MIN(tp, 16u); d++)
        add_size(v, &n, max, d);
    for (uint32_t d = 1; d <= tp / d; d++)
        if (tp % d == 0) {
            add_size(v, &n, max, d);
            add_size(v, &n, max, tp / d);
        }
    for (uint64_t d = 1; d <= tp; d *= 2)
        add_size(v, &n, max, (uint32_t)d);
    for (uint32_t i = 0; i < n; i++) {
        struct dcp_rank_geometry g;
        out[i] = (struct dcp_plan_dcp_size){.dcp = v[i]};
        out[i].valid = dcp_rank_geometry_init(&cfg->model, tp, v[i], &g) == DCP_OK;
        if (!out[i].valid)
            snprintf(out[i].reason, sizeof(out[i].reason), "%s", dcp_last_error());
    }
    dcp_clear_error();
    return n;
}
