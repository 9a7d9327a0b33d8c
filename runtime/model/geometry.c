/*
 * geometry.c: per-rank geometry and KV budget (include/dcp/geometry.h), the model
 * layer's view of one TP rank under tp and dcp (model/model.h).
 */
#include <string.h>

#include "model/model.h"
#include "util/util.h"

DCP_API int dcp_rank_geometry_init(const struct dcp_model_config *m, uint32_t tp, uint32_t dcp,
                              struct dcp_rank_geometry *g)
{
    dcp_clear_error();
    if (!m || !g)
        return dcp_error(DCP_EINVAL, "dcp_rank_geometry_init: model and geometry are required");
    memset(g, 0, sizeof(*g));
    const bool mla = m->attention == DCP_ATTN_MLA;
    const uint32_t kv = mla ? 1 : m->num_kv_heads;
    /* The wording of these messages is also what the config rules report (rules.c). */
    if (tp == 0 || m->num_q_heads % tp)
        return dcp_error(DCP_EINVAL, "query_heads=%u is not divisible by tp=%u", m->num_q_heads, tp);
    if (kv == 0)
        return dcp_error(DCP_EINVAL, "kv_heads=0: a model needs at least one KV head");
    if (!mla && tp >= kv && tp % kv)
        return dcp_error(DCP_EINVAL,
                         "tp=%u is not a multiple of kv_heads=%u (above kv_heads, tp must replicate "
                         "every KV head equally)",
                         tp, kv);
    if (!mla && tp < kv && kv % tp)
        return dcp_error(DCP_EINVAL, "tp=%u does not divide kv_heads=%u", tp, kv);
    g->tp = tp;
    g->dcp = dcp;
    g->q_heads_per_rank = m->num_q_heads / tp;
    /* TP first splits the KV heads; once each rank holds one, further ranks hold copies. */
    g->kv_heads_per_rank = mla || tp >= kv ? 1 : kv / tp;
    g->kv_replicas = mla ? tp : tp >= kv ? tp / kv : 1;
    /* A DCP group shards one replica set: dcp divides the replicas (and so tp). */
    if (dcp == 0 || g->kv_replicas % dcp) {
        const uint32_t replicas = g->kv_replicas;
        memset(g, 0, sizeof(*g));
        if (mla)
            return dcp_error(DCP_EINVAL, "dcp=%u does not divide tp=%u", dcp, tp);
        if (tp < kv)
            return dcp_error(DCP_EINVAL,
                             "dcp=%u needs KV replicas, but tp=%u splits %u KV heads without replication",
                             dcp, tp, kv);
        return dcp_error(DCP_EINVAL, "dcp=%u does not divide tp/num_kv_heads=%u", dcp, replicas);
    }
    g->gathered_heads = dcp * g->q_heads_per_rank;
    g->q_per_kv_head = g->gathered_heads / g->kv_heads_per_rank;
    dcp_model_attention_dims(m, &g->qk_dim, &g->v_dim);
    dcp_model_token_bytes(m, g->kv_heads_per_rank, &g->k_token_bytes, &g->v_token_bytes);
    g->token_layer_bytes = g->k_token_bytes + g->v_token_bytes;
    return DCP_OK;
}

DCP_API uint32_t dcp_model_kv_head_of(const struct dcp_model_config *m, uint32_t q_head)
{
    if (!m || m->attention == DCP_ATTN_MLA || m->num_kv_heads == 0 || m->num_q_heads < m->num_kv_heads)
        return 0;
    return q_head / (m->num_q_heads / m->num_kv_heads);
}

DCP_API uint32_t dcp_rank_geometry_kv_head0(const struct dcp_rank_geometry *g, uint32_t tp_rank)
{
    return g && g->kv_replicas ? tp_rank / g->kv_replicas * g->kv_heads_per_rank : 0;
}

DCP_API void dcp_kv_budget_init(const struct dcp_config *cfg, struct dcp_kv_budget *b)
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
