/*
 * kinds.c: the KV of each layer kind (docs/design.md §13) on one rank: what a
 * layer keeps (paged and sharded, a bounded ring, replicated index keys, a fixed
 * state) and what a decode step reads. The planner's capacity and the
 * performance model's reads come from here, and the engine sizes its rings with
 * dcp_window_ring_tokens().
 */
#include <string.h>

#include "dcp/placement.h"
#include "model/model.h"
#include "util/util.h"

uint64_t dcp_window_ring_tokens(uint32_t window, uint32_t queries, bool sharded, uint32_t dcp, uint32_t interleave)
{
    const uint64_t n = (uint64_t)window + (queries ? queries : 1) - 1;
    if (!sharded || dcp <= 1)
        return n;
    const uint64_t period = (uint64_t)dcp * interleave;
    const uint64_t rest = n % period;
    return n / period * interleave + (rest < interleave ? rest : interleave);
}

DCP_API int dcp_layer_kv_init(const struct dcp_config *cfg, uint32_t dcp, uint32_t layer, struct dcp_layer_kv *out)
{
    dcp_clear_error();
    if (!cfg || !out)
        return dcp_error(DCP_EINVAL, "dcp_layer_kv_init: config and out are required");
    memset(out, 0, sizeof(*out));
    const struct dcp_model_config *m = &cfg->model;
    if (layer >= m->num_layers)
        return dcp_error(DCP_EINVAL, "dcp_layer_kv_init: layer %u of %u", layer, m->num_layers);
    struct dcp_rank_geometry g;
    int err = dcp_rank_geometry_init(m, cfg->parallel.tp, dcp, &g);
    if (err)
        return err;
    out->kind = dcp_model_layer_kind(m, layer);
    const uint32_t block = cfg->memory.block_size ? cfg->memory.block_size : 1;
    switch (out->kind.type) {
    case DCP_LAYER_FULL:
    case DCP_LAYER_SPARSE_TOPK:
        out->sharded = out->paged = true;
        out->token_bytes = g.token_layer_bytes;
        if (out->kind.type == DCP_LAYER_SPARSE_TOPK)
            out->index_token_bytes = (uint64_t)m->index_head_dim * dcp_dtype_size(m->index_dtype);
        break;
    case DCP_LAYER_SLIDING_WINDOW: {
        out->sharded = m->window_kv == DCP_WINDOW_KV_SHARDED;
        out->token_bytes = g.token_layer_bytes;
        const uint64_t tokens = dcp_window_ring_tokens(out->kind.window, cfg->workload.q_len, out->sharded, dcp,
                                                       cfg->parallel.interleave);
        out->ring_tokens = dcp_div_ceil_u64(tokens, block) * block; /* whole pages */
        break;
    }
    case DCP_LAYER_NONE:
        out->state_bytes = m->linear_state_bytes / cfg->parallel.tp;
        break;
    }
    return DCP_OK;
}

DCP_API int dcp_model_kv_init(const struct dcp_config *cfg, uint32_t dcp, struct dcp_model_kv *kv)
{
    dcp_clear_error();
    if (!cfg || !kv)
        return dcp_error(DCP_EINVAL, "dcp_model_kv_init: config and kv are required");
    memset(kv, 0, sizeof(*kv));
    kv->dcp = dcp;
    const bool sharded_index = cfg->parallel.sparse_index == DCP_SPARSE_INDEX_SHARDED;
    for (uint32_t l = 0; l < cfg->model.num_layers; l++) {
        struct dcp_layer_kv lk;
        int err = dcp_layer_kv_init(cfg, dcp, l, &lk);
        if (err)
            return err;
        kv->layers[lk.kind.type]++;
        if (lk.paged)
            kv->page_token_bytes += lk.token_bytes + (sharded_index ? lk.index_token_bytes : 0);
        if (!sharded_index)
            kv->replicated_token_bytes += lk.index_token_bytes;
        kv->window_bytes += lk.ring_tokens * lk.token_bytes;
        kv->state_bytes += lk.state_bytes;
        if (lk.kind.type == DCP_LAYER_FULL)
            kv->read_token_bytes += (double)lk.token_bytes / dcp;
        kv->read_token_bytes += (double)lk.index_token_bytes / (sharded_index ? dcp : 1);
    }
    return DCP_OK;
}

DCP_API double dcp_model_kv_request_bytes(const struct dcp_config *cfg, const struct dcp_model_kv *kv,
                                          uint64_t context)
{
    if (!cfg || !kv || !kv->dcp)
        return 0.0;
    const uint64_t pages = dcp_kv_blocks_for_length(context, cfg->memory.block_size, kv->dcp);
    return (double)pages * cfg->memory.block_size * (double)kv->page_token_bytes +
           (double)context * (double)kv->replicated_token_bytes + (double)kv->window_bytes + kv->state_bytes;
}

DCP_API double dcp_model_kv_read_bytes(const struct dcp_config *cfg, const struct dcp_model_kv *kv,
                                       uint64_t context)
{
    if (!cfg || !kv || !kv->dcp)
        return 0.0;
    const uint32_t n = kv->dcp, il = cfg->parallel.interleave;
    /* Rank 0 holds the largest share: local lengths differ by at most I, the leftover runs go from rank 0 up. */
    const uint64_t shard = dcp_kv_local_length(context, 0, n, il);
    const bool sharded_index = cfg->parallel.sparse_index == DCP_SPARSE_INDEX_SHARDED;
    double bytes = 0.0;
    for (uint32_t l = 0; l < cfg->model.num_layers; l++) {
        struct dcp_layer_kv lk;
        if (dcp_layer_kv_init(cfg, n, l, &lk))
            return 0.0;
        switch (lk.kind.type) {
        case DCP_LAYER_FULL: bytes += (double)shard * lk.token_bytes; break;
        case DCP_LAYER_SPARSE_TOPK: {
            /* The selected rows spread over the group; the indexer scores every key it holds. */
            const uint64_t selected = lk.kind.topk < context ? lk.kind.topk : context;
            bytes += (double)dcp_div_ceil_u64(selected, n) * lk.token_bytes;
            bytes += (double)(sharded_index ? shard : context) * lk.index_token_bytes;
            break;
        }
        case DCP_LAYER_SLIDING_WINDOW: {
            const uint64_t seen = lk.kind.window < context ? lk.kind.window : context;
            bytes += (double)dcp_window_ring_tokens((uint32_t)seen, 1, lk.sharded, n, il) * lk.token_bytes;
            break;
        }
        case DCP_LAYER_NONE: break;
        }
    }
    return bytes;
}
