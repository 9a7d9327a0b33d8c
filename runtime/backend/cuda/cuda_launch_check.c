/*
 * cuda_launch_check.c: refuses, on the host, a launch a kernel would not serve.
 *
 * A GPU kernel that gets a launch it cannot serve either does nothing (the
 * attention entries check their block size, shapes, dtype and cache alignment,
 * attn_launch_ok in ptx/kernels/attn.cuh, and return: the output keeps whatever
 * it held) or faults on a misaligned access and loses the context. Both are
 * silent or fatal far from the cause; checking the parameter struct before
 * cuLaunchKernel turns them into an error of the call that made the launch.
 */
#include "backend/cuda/cuda_internal.h"
#include "dcp_kernels/variants.h"

static int aligned(uint64_t addr, uint64_t to) { return addr % to == 0; }

static int known_dtype(uint32_t dtype) { return dtype < DCPK_DTYPE_COUNT; }

/* The kernels do nothing with another activation dtype (params.h). */
static int act_dtypes_ok(uint32_t a, uint32_t b) { return dcpk_act_dtype_ok(a) && dcpk_act_dtype_ok(b); }

/* What dcpk_attn_params and dcpk_sparse_attn_params share, as an attention entry reads it. */
struct attn_launch {
    uint64_t q, k_cache, v_cache, out, lse, block_table, seq_lens, q_start;
    uint32_t num_heads, heads_per_chunk, num_kv_heads, head_tile, qk_dim, v_dim, v_row_stride, block_size;
    uint32_t group_size, interleave, dtype, q_dtype, out_dtype;
};
#define ATTN_LAUNCH_OF(p)                                                                                      \
    ((struct attn_launch){(p)->q, (p)->k_cache, (p)->v_cache, (p)->out, (p)->lse, (p)->block_table,          \
                          (p)->seq_lens, (p)->q_start, (p)->num_heads, (p)->heads_per_chunk, (p)->num_kv_heads, \
                          (p)->head_tile, (p)->qk_dim, (p)->v_dim, (p)->v_row_stride, (p)->block_size,       \
                          (p)->group_size, (p)->interleave, (p)->dtype, (p)->q_dtype, (p)->out_dtype})

/* Mirrors attn_launch_ok (ptx/kernels/attn.cuh), plus the head split: what both families need. */
static const char *entry_problem(const struct dcpk_attn_variant *v, uint32_t threads, uint32_t smem,
                                 const struct attn_launch *p)
{
    if (threads != v->threads)
        return "block size differs from the entry's";
    if (smem != v->smem_bytes)
        return "dynamic shared memory differs from the entry's";
    if (p->qk_dim != v->qk_dim || p->v_dim != v->v_dim)
        return "head dimensions differ from the entry's";
    if (p->dtype != v->dtype)
        return "KV cache dtype differs from the entry's";
    if (v->shared_kv ? p->v_cache != p->k_cache || p->v_row_stride != v->qk_dim
                     : (uint64_t)p->v_row_stride * dcpk_dtype_size(v->dtype) % 16 != 0 || p->v_row_stride < v->v_dim)
        return "V layout differs from the entry's";
    if (!aligned(p->k_cache | p->v_cache, 16))
        return "KV cache not 16-byte aligned";
    if (!p->num_kv_heads || !p->head_tile || !p->block_size || !p->group_size || !p->interleave ||
        !p->heads_per_chunk)
        return "a zero size";
    if (p->num_heads % p->num_kv_heads != 0)
        return "query heads not a multiple of the KV heads";
    if (!act_dtypes_ok(p->q_dtype, p->out_dtype))
        return "unknown activation dtype (q or out)";
    if (!aligned(p->q, dcpk_dtype_size(p->q_dtype)) || !aligned(p->out, dcpk_dtype_size(p->out_dtype)) ||
        !aligned(p->lse | p->block_table | p->seq_lens | p->q_start, 4))
        return "misaligned buffer";
    return NULL;
}

static const char *attn_problem(const struct dcpk_attn_variant *v, uint32_t threads, uint32_t smem,
                                const struct dcpk_attn_params *p)
{
    const struct attn_launch l = ATTN_LAUNCH_OF(p);
    const char *problem = entry_problem(v, threads, smem, &l);
    if (problem)
        return problem;
    if (!p->num_splits)
        return "a zero size";
    if (!aligned(p->ws_o | p->ws_lse | p->split_counters, 4))
        return "misaligned buffer";
    if (p->precision > DCPK_PRECISION_EXACT)
        return "unknown precision";
    if (p->num_splits > 1 && (!p->ws_o || !p->ws_lse))
        return "split-KV without a workspace";
    return NULL;
}

/* sparse_item (ptx/kernels/attn.cuh) also needs a sequence and the top-k rows. */
static const char *sparse_problem(const struct dcpk_attn_variant *v, uint32_t threads, uint32_t smem,
                                  const struct dcpk_sparse_attn_params *p)
{
    const struct attn_launch l = ATTN_LAUNCH_OF(p);
    const char *problem = entry_problem(v, threads, smem, &l);
    if (problem)
        return problem;
    if (!p->batch)
        return "a zero size";
    if (p->precision > DCPK_PRECISION_EXACT)
        return "unknown precision";
    return aligned(p->topk, 4) ? NULL : "misaligned buffer";
}

const char *cuda_launch_problem(const struct dcpk_attn_variant *attn, enum dcpk_kernel_id kernel,
                                const void *params, uint32_t threads, uint32_t smem)
{
    switch (kernel) {
    case DCPK_KERNEL_attn:
        return attn_problem(attn, threads, smem, params);
    case DCPK_KERNEL_sparse_attn:
        return sparse_problem(attn, threads, smem, params);
    case DCPK_KERNEL_kv_append: {
        const struct dcpk_kv_append_params *p = params;
        if (!known_dtype(p->dtype))
            return "unknown dtype";
        if (!act_dtypes_ok(p->src_dtype, p->src_dtype))
            return "unknown activation dtype (k/v source)";
        if (!aligned(p->k_cache | p->v_cache, dcpk_dtype_size(p->dtype)) ||
            !aligned(p->k_src | p->v_src, dcpk_dtype_size(p->src_dtype)) ||
            !aligned(p->slots, 8))
            return "misaligned buffer";
        return p->block_size ? NULL : "a zero size";
    }
    case DCPK_KERNEL_merge: {
        const struct dcpk_merge_params *p = params;
        if (!act_dtypes_ok(p->src_dtype, p->out_dtype))
            return "unknown activation dtype (source or output)";
        if (!aligned(p->src_o, dcpk_dtype_size(p->src_dtype)) || !aligned(p->out, dcpk_dtype_size(p->out_dtype)) ||
            !aligned(p->src_lse | p->out_lse, 4))
            return "misaligned buffer";
        return p->rows_per_chunk || !p->rows ? NULL : "a zero size";
    }
    case DCPK_KERNEL_lse_scale: {
        const struct dcpk_lse_scale_params *p = params;
        if (!act_dtypes_ok(p->o_dtype, p->o_dtype))
            return "unknown activation dtype (o)";
        if (!aligned(p->lse_all | p->out_lse, 4) || !aligned(p->o, dcpk_dtype_size(p->o_dtype)))
            return "misaligned buffer";
        return p->rows_per_chunk || !p->rows ? NULL : "a zero size";
    }
    case DCPK_KERNEL_reduce: {
        const struct dcpk_reduce_params *p = params;
        if (!act_dtypes_ok(p->dtype, p->dtype))
            return "unknown activation dtype";
        return aligned(p->dst, dcpk_dtype_size(p->dtype)) && aligned(p->src_ptrs, 8) ? NULL : "misaligned buffer";
    }
    case DCPK_KERNEL_fill: {
        const struct dcpk_fill_params *p = params;
        if (!known_dtype(p->dtype))
            return "unknown dtype";
        return aligned(p->dst, dcpk_dtype_size(p->dtype)) && aligned(p->row_keys, 8) ? NULL : "misaligned buffer";
    }
    case DCPK_KERNEL_uv_proj: {
        const struct dcpk_uv_proj_params *p = params;
        if (!act_dtypes_ok(p->dst_dtype, p->dst_dtype))
            return "unknown activation dtype (dst)";
        if (!aligned(p->src | p->w, 4) || !aligned(p->dst, dcpk_dtype_size(p->dst_dtype)))
            return "misaligned buffer";
        return p->heads_per_chunk || !p->num_heads ? NULL : "a zero size";
    }
    case DCPK_KERNEL_sink: {
        const struct dcpk_sink_params *p = params;
        if (!act_dtypes_ok(p->out_dtype, p->out_dtype))
            return "unknown activation dtype (out)";
        if (!aligned(p->out, dcpk_dtype_size(p->out_dtype)) || !aligned(p->lse | p->sinks, 4))
            return "misaligned buffer";
        return NULL; /* num_heads == 0: an empty grid, never launched */
    }
    case DCPK_KERNEL_index_score: {
        const struct dcpk_index_score_params *p = params;
        if (!known_dtype(p->dtype))
            return "unknown dtype";
        if (!act_dtypes_ok(p->q_dtype, p->q_dtype))
            return "unknown activation dtype (q)";
        if (!aligned(p->q, dcpk_dtype_size(p->q_dtype)) || !aligned(p->k_cache, dcpk_dtype_size(p->dtype)) ||
            !aligned(p->weights | p->scores | p->score_lens | p->block_table | p->seq_lens | p->q_start, 4))
            return "misaligned buffer";
        if (!p->batch || !p->index_dim || !p->block_size || !p->group_size || !p->interleave)
            return "a zero size";
        if (p->index_dim > DCPK_INDEX_SCORE_MAX_DIM)
            return "index_dim above what the GPU entry stages (DCPK_INDEX_SCORE_MAX_DIM)";
        return NULL;
    }
    case DCPK_KERNEL_topk: {
        const struct dcpk_topk_params *p = params;
        if (!aligned(p->scores | p->positions | p->row_lens | p->out_scores | p->out_positions, 4))
            return "misaligned buffer";
        return p->positions || (p->group_size && p->interleave) ? NULL : "a zero size";
    }
    default:
        return "unknown kernel";
    }
}
