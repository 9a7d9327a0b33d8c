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
 * One layout with DCP size dcp (1 = baseline), from the model layer's figures of
 * its layer kinds (kv): a page holds block_size local tokens of every paged layer
 * either way, so page size and page count do not depend on dcp; sliding-window
 * rings and KV-free state are per request, whatever its length.
 */
static bool plan_layout(const struct dcp_config *cfg, const struct dcp_model_kv *kv, double kv_budget,
                        struct dcp_plan_layout *out)
{
    const struct dcp_model_config *model = &cfg->model;
    const uint32_t block = cfg->memory.block_size;
    /* The whole model's KV per token of the layers that grow, index keys once. */
    const double model_token_bytes =
        (double)dcp_model_kv_bytes_per_token_layer(model) * (kv->layers[DCP_LAYER_FULL] + kv->layers[DCP_LAYER_SPARSE_TOPK]) +
        (double)kv->layers[DCP_LAYER_SPARSE_TOPK] * model->index_head_dim * dcp_dtype_size(model->index_dtype);

    out->dcp = kv->dcp;
    out->kv_heads_per_gpu = baseline_geometry(cfg).kv_heads_per_rank;
    out->kv_bytes_per_token = (double)kv->page_token_bytes / kv->dcp + (double)kv->replicated_token_bytes;
    out->replication = model_token_bytes > 0 ? out->kv_bytes_per_token * cfg->parallel.tp / model_token_bytes : 0.0;
    out->fixed_bytes = (double)kv->window_bytes + kv->state_bytes;
    /* Checked: a figure that does not fit 64 bits is an error, never a wrapped count. */
    bool ok = !__builtin_mul_overflow((uint64_t)block, kv->page_token_bytes, &out->page_bytes);
    ok = ok && (out->page_bytes == 0 || pages_in_budget(kv_budget, out->page_bytes, &out->pages));
    const uint32_t dcp = kv->dcp;
    ok = ok && !__builtin_mul_overflow(out->pages, (uint64_t)block, &out->local_tokens);
    ok = ok && !__builtin_mul_overflow(out->local_tokens, (uint64_t)dcp, &out->context_tokens);
    return ok;
}

/* Requests of request_bytes each that fit in budget: the largest c with c * request_bytes <= budget
 * (none for a budget of 0 or less, or a request of no bytes). */
static uint64_t requests_that_fit(double budget, double request_bytes)
{
    if (!(budget > 0.0) || !(request_bytes > 0.0))
        return 0;
    double c = floor(budget / request_bytes);
    if (!(c < 9007199254740992.0)) /* 2^53: past exact integers (and NaN) */
        return 0;
    while (c > 0 && c * request_bytes > budget) /* the quotient's rounding, corrected exactly */
        c--;
    while ((c + 1) * request_bytes <= budget)
        c++;
    return (uint64_t)c;
}

/* Capacity and reads at one context length; base and dcp are the model's figures of both layouts. */
static void plan_context(const struct dcp_config *cfg, uint64_t len, const struct dcp_model_kv *base,
                         const struct dcp_model_kv *dcp, double budget, struct dcp_plan_context *out)
{
    const uint32_t block = cfg->memory.block_size;
    const double layers = cfg->model.num_layers;
    out->context_len = len;
    out->baseline_pages = dcp_kv_blocks_for_length(len, block, 1);
    out->dcp_pages = dcp_kv_blocks_for_length(len, block, dcp->dcp);
    out->baseline_concurrency = requests_that_fit(budget, dcp_model_kv_request_bytes(cfg, base, len));
    out->dcp_concurrency = requests_that_fit(budget, dcp_model_kv_request_bytes(cfg, dcp, len));
    out->baseline_kv_read_bytes = dcp_model_kv_read_bytes(cfg, base, len) / layers;
    out->dcp_kv_read_bytes = dcp_model_kv_read_bytes(cfg, dcp, len) / layers;
}

/*
 * The exchanges of a step: every merged layer runs the merge scheme's (Q gather
 * unless replicate_q, then the merge), and with parallel.sparse_index sharded each
 * sparse_topk layer gathers its ranks' (score, position) top-k candidates first:
 * K of them per query token, 8 bytes each, to each of the n - 1 others.
 */
static void plan_comm(const struct dcp_config *cfg, const struct dcp_model_kv *kv, struct dcp_plan_comm *comm)
{
    dcp_merge_plan_comm(cfg, comm); /* the merge scheme's rows (engine/merge.c, which also moves them) */
    const uint32_t merged = kv->layers[DCP_LAYER_FULL] + kv->layers[DCP_LAYER_SPARSE_TOPK] +
                            (cfg->model.window_kv == DCP_WINDOW_KV_SHARDED ? kv->layers[DCP_LAYER_SLIDING_WINDOW] : 0);
    for (uint32_t i = 0; i < comm->num_rows; i++)
        comm->rows[i].layers = merged;
    const uint32_t n = cfg->parallel.dcp;
    if (n <= 1 || !kv->layers[DCP_LAYER_SPARSE_TOPK] || cfg->parallel.sparse_index != DCP_SPARSE_INDEX_SHARDED ||
        comm->num_rows >= DCP_PLAN_COMM_MAX_ROWS)
        return;
    uint32_t k = 0;
    for (uint32_t l = 0; l < cfg->model.num_layers; l++) {
        const struct dcp_layer_kind lk = dcp_model_layer_kind(&cfg->model, l);
        k = lk.type == DCP_LAYER_SPARSE_TOPK && lk.topk > k ? lk.topk : k;
    }
    const double bytes = (double)(n - 1) * k * (sizeof(float) + sizeof(int32_t));
    /* Before the merge's rows: the selection precedes the attention. */
    memmove(&comm->rows[1], &comm->rows[0], comm->num_rows * sizeof(comm->rows[0]));
    comm->rows[0] = (struct dcp_plan_comm_row){
        .kind = DCP_PLAN_COMM_ALL_GATHER, .what = "top-k candidates", .ranks = n, .send_bytes = bytes,
        .recv_bytes = bytes, .layers = kv->layers[DCP_LAYER_SPARSE_TOPK],
    };
    comm->num_rows++;
    comm->collectives = comm->num_rows;
    comm->total_send += bytes;
    comm->total_recv += bytes;
}

bool dcp_plan_from_config(const struct dcp_config *cfg, struct dcp_plan *plan)
{
    const uint32_t tp = cfg->parallel.tp;
    /* The layer kinds' KV on one GPU, both layouts (the model layer, runtime/model/kinds.c);
     * the deployment was validated, so both geometries exist. */
    struct dcp_model_kv base, dcp;
    dcp_model_kv_init(cfg, 1, &base);
    dcp_model_kv_init(cfg, cfg->parallel.dcp, &dcp);

    memset(plan, 0, sizeof(*plan));
    plan_memory(cfg, &plan->memory);
    const double budget = plan->memory.kv_budget_bytes;
    bool ok = plan_layout(cfg, &base, budget, &plan->baseline);
    ok = plan_layout(cfg, &dcp, budget, &plan->dcp) && ok;

    plan->num_contexts = cfg->workload.num_context_lengths;
    for (uint32_t i = 0; i < plan->num_contexts; i++)
        plan_context(cfg, cfg->workload.context_lengths[i], &base, &dcp, budget, &plan->contexts[i]);

    plan_comm(cfg, &dcp, &plan->comm);
    plan->baseline_kv_read_per_token = base.read_token_bytes / cfg->model.num_layers;
    plan->dcp_kv_read_per_token = dcp.read_token_bytes / cfg->model.num_layers;

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
