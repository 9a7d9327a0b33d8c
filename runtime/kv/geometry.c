/*
 * geometry.c: per-rank geometry and KV budget (include/dcp/geometry.h).
 */
#include "dcp/geometry.h"

#include <string.h>

#include "util/util.h"

DCP_API int dcp_rank_geometry(const struct dcp_model_config *m, uint32_t tp, uint32_t dcp,
                              struct dcp_rank_geometry *g)
{
    if (!m || !g)
        return dcp_error(DCP_EINVAL, "dcp_rank_geometry: model and geometry are required");
    memset(g, 0, sizeof(*g));
    const bool mla = m->attention == DCP_ATTN_MLA;
    const uint32_t kv = mla ? 1 : m->num_kv_heads;
    if (tp == 0 || kv == 0 || m->num_q_heads % tp)
        return dcp_error(DCP_EINVAL, "tp=%u does not split %u query heads", tp, m->num_q_heads);
    if (dcp == 0 || tp % dcp)
        return dcp_error(DCP_EINVAL, "dcp=%u does not divide tp=%u", dcp, tp);
    g->tp = tp;
    g->dcp = dcp;
    g->q_heads_per_rank = m->num_q_heads / tp;
    /* TP first splits the KV heads; once each rank holds one, further ranks hold copies. */
    g->kv_heads_per_rank = mla || tp >= kv ? 1 : kv / tp;
    g->kv_replicas = mla ? tp : tp >= kv ? tp / kv : 1;
    if (!mla && g->kv_replicas % dcp)
        return dcp_error(DCP_EINVAL, "dcp=%u does not divide the %u KV replicas (tp=%u, kv_heads=%u)", dcp,
                         g->kv_replicas, tp, kv);
    g->gathered_heads = dcp * g->q_heads_per_rank;
    g->q_per_kv_head = g->gathered_heads / g->kv_heads_per_rank;
    dcp_model_attention_dims(m, &g->qk_dim, &g->v_dim);
    const uint64_t elem = dcp_dtype_size(m->kv_dtype);
    g->token_layer_bytes = mla ? (uint64_t)g->qk_dim * elem
                               : 2u * (uint64_t)g->kv_heads_per_rank * m->head_dim * elem;
    return DCP_OK;
}

DCP_API uint32_t dcp_rank_geometry_kv_head0(const struct dcp_rank_geometry *g, uint32_t tp_rank)
{
    return g && g->kv_replicas ? tp_rank / g->kv_replicas * g->kv_heads_per_rank : 0;
}

DCP_API void dcp_kv_budget(const struct dcp_config *cfg, struct dcp_kv_budget *b)
{
    if (!b)
        return;
    memset(b, 0, sizeof(*b));
    if (!cfg || cfg->parallel.tp == 0)
        return;
    b->usable_bytes = cfg->hardware.memory_bytes * cfg->memory.gpu_fraction;
    b->weight_bytes = cfg->model.num_params * dcp_weight_dtype_bytes(cfg->model.weight_dtype) / cfg->parallel.tp;
    b->reserve_bytes = cfg->memory.reserve_bytes;
    b->kv_bytes = b->usable_bytes - b->weight_bytes - b->reserve_bytes;
}
