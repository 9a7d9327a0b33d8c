/*
 * dcp_kernels/params.h: the kernel ABI. One parameter struct per kernel, passed by
 * value as the kernel's only argument (kernelParams = { &params }) and given by
 * pointer to the kernel's CPU implementation. Device pointers are uint64_t
 * addresses (host addresses for the host backend and the test doubles).
 *
 * Shared conventions
 * ------------------
 * Paged KV cache of one layer on one rank: pages of block_size tokens.
 *   K page: [num_kv_heads][block_size][k_dim] elements of dtype, pages back to back,
 *   so element (slot, head, d) with page = slot / block_size, off = slot % block_size
 *   is at ((page * num_kv_heads + head) * block_size + off) * k_dim + d (64-bit).
 *   V likewise with v_dim. MLA stores one head of k_dim = kv_lora_rank + rope_dim
 *   values and reads V as the first v_dim = kv_lora_rank values of the K row
 *   (v_cache == k_cache, v_row_stride = k_dim).
 * Chunked head layout (how data is laid out for the DCP collectives): the heads of
 *   one attention call are split into chunks of heads_per_chunk heads (one chunk
 *   per destination rank of the DCP group; a single chunk when dcp = 1). Row
 *   (chunk c, query token t, head h) of an array with row length D lives at
 *   base + c * chunk_stride + (t * heads_per_chunk + h) * D, in elements of that array.
 *   Gathered head g = c * heads_per_chunk + h.
 * Activation dtypes: queries, outputs, partial outputs and the K/V rows appended are
 *   fp32, bf16 or fp16 (dcpk_act_dtype_ok), each array's dtype given by a field of its
 *   kernel's params; the kernels convert in their loads (to fp32, exact) and stores
 *   (from fp32, round to nearest even, dcp_kernels/convert.h) and compute in fp32.
 *   A kernel that gets any other value in such a field does nothing (its CPU
 *   implementation too; the CUDA backend refuses the launch, cuda_launch_check.c).
 *   LSE is always fp32: the natural log of the softmax denominator, -INFINITY when
 *   no key is visible; the split-KV workspace (ws_o, ws_lse) is fp32 too.
 * Strides and offsets are counted in elements of the array they index (fp32 for an
 *   LSE array, the activation dtype for a q/out array), never in bytes: where one
 *   buffer packs outputs and LSEs (a2a chunks), the caller keeps every chunk and
 *   every LSE offset a whole number of elements of both arrays.
 * Query token t of sequence b (q_start[b] <= t < q_start[b+1]) has global position
 *   seq_lens[b] - (q_start[b+1] - q_start[b]) + (t - q_start[b]) and sees every key
 *   at a global position <= its own (causal mask in global positions).
 */
#ifndef DCPK_PARAMS_H
#define DCPK_PARAMS_H

#include "dcp_kernels/common.h"

/* ------------------------------------------------------------------------- */
/** Write new tokens' K/V into the paged cache of the rank that owns them. */
struct dcpk_kv_append_params {
    uint64_t k_cache;      ///< Layer's K pages (dtype).
    uint64_t v_cache;      ///< Layer's V pages (dtype); 0 for MLA (V is part of K).
    uint64_t k_src;        ///< src_dtype [num_tokens][num_kv_heads][k_dim].
    uint64_t v_src;        ///< src_dtype [num_tokens][num_kv_heads][v_dim]; 0 for MLA.
    uint64_t slots;        ///< int64 [num_tokens]: page * block_size + offset, or -1 (not stored on this rank: skipped).
    uint32_t num_tokens;   ///< Tokens in this call.
    uint32_t num_kv_heads; ///< KV heads stored on this rank.
    uint32_t k_dim;        ///< Elements per K row.
    uint32_t v_dim;        ///< Elements per V row (ignored when v_cache == 0).
    uint32_t block_size;   ///< Tokens per page.
    uint32_t dtype;        ///< enum dcpk_dtype of the cache.
    float inv_scale;       ///< fp8: stored = fp8_satfinite(value * inv_scale) (= 1 / kv_scale), rounded to nearest even (dcp_kernels/convert.h); ignored otherwise.
    uint32_t src_dtype;    ///< enum dcpk_dtype of k_src and v_src (an activation dtype; read as fp32 exactly, then stored as dtype).
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_kv_append_params) == 72, "kv_append ABI");

/* ------------------------------------------------------------------------- */
/**
 * Paged decode attention of gathered query heads against this rank's KV shard,
 * GQA/MHA and MLA (absorbed). Work item = (split s, kv head k, head tile j, sequence b);
 * grid = (num_splits, num_kv_heads * head_tiles, batch) with
 * head_tiles = ceil(heads_per_kv / head_tile), heads_per_kv = num_heads / num_kv_heads.
 * Gathered head g uses local KV head g / heads_per_kv.
 *
 * Local KV of sequence b: local_len = dcpk_local_length(seq_lens[b], rank, group_size,
 * interleave) tokens in pages block_table[b * max_blocks + i]; local index c sits in
 * page block_table[b * max_blocks + c / block_size] at offset c % block_size (with
 * ring_pages, page (c / block_size) % ring_pages of the row).
 * Sliding window (window = W > 0): query token t at global position p sees the keys at
 * positions (p - W, p], i.e. the local indices [dcpk_local_length(p + 1 - W),
 * dcpk_local_length(p + 1)) (the inverse placement map: local indices follow global
 * positions), so a rank may see none of them. The sequence's keys any of its query
 * tokens sees start at first_b = dcpk_local_length(max(0, p0 + 1 - W)), p0 the
 * position of its first query token (first_b = 0 without a window).
 * Split s covers local pages [f + s * P, f + (s + 1) * P) with f = first_b / block_size
 * and P = ceil((pages_b - f) / num_splits), pages_b = ceil(local_len / block_size).
 *
 * num_splits == 1: writes out/lse (chunked layout) directly.
 * num_splits > 1:  writes partials for split s at ws_o + s * ws_split_stride_o and
 *   ws_lse + s * ws_split_stride_lse, in the chunked layout with chunk strides
 *   T * heads_per_chunk * v_dim and T * heads_per_chunk; dcpk_merge then combines them,
 *   unless split_counters != 0: then the launch combines them itself. Work item (y, z)
 *   owns counter y + z * grid_y of split_counters (uint32, 0 before the launch); each
 *   split of it stores its partials, counts itself in, and the last to count combines
 *   the item's rows from the workspace into out/lse as dcpk_merge would (the same
 *   arithmetic and order: the same bits) and sets the counter back to 0, so the
 *   counters are 0 after every launch (a captured graph replays with them as they are).
 * Empty range (no visible key): LSE = -INFINITY and output row = 0, decided from the
 * lengths, never from arithmetic on an empty set (and so is a row whose visible
 * scores are all -inf: its softmax denominator is 0).
 * NaN (docs/design.md §4): a row whose result is not finite (a NaN in its query or
 * in a visible key or value; an infinity there that makes a score +inf or an output
 * element infinite or NaN) gets NaN as its LSE and as every element of its output,
 * so every split count and both DCP merges give the same NaN row. Keys a row does
 * not see (causal mask, other sequences, pages past the length) never reach it.
 *
 * precision (dcpk_precision) says how the tensor-core MLA entries (variants.h,
 * tensor_core = 1) round their operands: fast multiplies bf16/fp16 copies of the
 * scaled queries and of the probabilities, exact splits each into hi + lo parts
 * (two mma per product) and stays within 1e-4 of exact arithmetic. The tensor-core
 * GQA entries always split (memory-bound, the second mma is free there), the SIMT
 * entries and the CPU implementation compute in fp32: all of them ignore it
 * (an unknown value is still refused).
 */
enum dcpk_precision {
    DCPK_PRECISION_FAST = 0,  ///< bf16/fp16 Q and P operands (runtime.cuda.precision: fast).
    DCPK_PRECISION_EXACT = 1, ///< hi/lo splits of Q and P (runtime.cuda.precision: exact).
};

/** Paged decode attention parameters (see above). */
struct dcpk_attn_params {
    uint64_t q;                 ///< q_dtype queries, chunked layout, row length qk_dim.
    uint64_t k_cache;           ///< Layer's K pages.
    uint64_t v_cache;           ///< Layer's V pages (== k_cache for MLA).
    uint64_t block_table;       ///< int32 [batch][max_blocks] page ids.
    uint64_t seq_lens;          ///< int32 [batch] global context length (this step's tokens included).
    uint64_t q_start;           ///< int32 [batch + 1] prefix sums of query tokens per sequence.
    uint64_t out;               ///< out_dtype output, chunked layout, row length v_dim (num_splits == 1).
    uint64_t lse;               ///< fp32 LSE, chunked layout, row length 1.
    uint64_t ws_o;              ///< fp32 split partial outputs (num_splits > 1).
    uint64_t ws_lse;            ///< fp32 split partial LSEs (num_splits > 1).
    uint64_t q_chunk_stride;    ///< Elements (of q_dtype) between query chunks.
    uint64_t out_chunk_stride;  ///< Elements (of out_dtype) between output chunks.
    uint64_t lse_chunk_stride;  ///< Floats between LSE chunks.
    uint64_t ws_split_stride_o; ///< Floats between splits in ws_o.
    uint64_t ws_split_stride_lse; ///< Floats between splits in ws_lse.
    uint32_t batch;             ///< Sequences.
    uint32_t num_q_tokens;      ///< T: query tokens of all sequences (q_start[batch]).
    uint32_t num_heads;         ///< Gathered query heads (all chunks).
    uint32_t heads_per_chunk;   ///< Heads per chunk (= num_heads when dcp = 1).
    uint32_t num_kv_heads;      ///< KV heads stored on this rank.
    uint32_t head_tile;         ///< Query heads per work item (<= heads_per_kv; 0 or more than heads_per_kv means heads_per_kv). The last tile of a KV head may be partial.
    uint32_t qk_dim;            ///< Query/key row length (MLA 576).
    uint32_t v_dim;             ///< Value/output row length (MLA 512).
    uint32_t v_row_stride;      ///< Elements between V rows within a page (v_dim; MLA: k_dim); V pages are [num_kv_heads][block_size][v_row_stride].
    uint32_t block_size;        ///< Tokens per page.
    uint32_t max_blocks;        ///< Row length of block_table.
    uint32_t rank;              ///< Rank within the DCP group.
    uint32_t group_size;        ///< DCP group size N.
    uint32_t interleave;        ///< Interleave size I.
    uint32_t num_splits;        ///< Split-KV factor (>= 1).
    uint32_t dtype;             ///< enum dcpk_dtype of the cache.
    float scale;                ///< Softmax scale applied to q.k.
    float kv_scale;             ///< fp8: value = stored * kv_scale (in fp32); ignored for other dtypes.
    uint32_t precision;         ///< enum dcpk_precision of the tensor-core entries; the others ignore it.
    uint32_t q_dtype;           ///< enum dcpk_dtype of q (an activation dtype), converted to fp32 as it is loaded.
    uint32_t out_dtype;         ///< enum dcpk_dtype of out (an activation dtype), rounded to it as it is stored; ws_o is fp32 whatever it is.
    uint32_t window;            ///< Sliding window W (model.layers sliding_window): a query at global position p sees
                                ///< the keys at positions p - W < pos <= p only; 0: every key at pos <= p.
    uint32_t ring_pages;        ///< 0: local index c is in page block_table[b * max_blocks + c / block_size]. Else the
                                ///< sequence's pages are a ring: c is in page block_table[b * max_blocks +
                                ///< (c / block_size) % ring_pages] (max_blocks >= ring_pages), which holds the last
                                ///< ring_pages * block_size local keys; the window must keep every row within them.
    uint32_t pad0;
    uint64_t split_counters;    ///< uint32 [num_kv_heads * head_tiles * batch] counters of the fused split-KV
                                ///< combine (0 before the launch, 0 after it), or 0: dcpk_merge combines the splits.
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_attn_params) == 224, "attn ABI");

/* ------------------------------------------------------------------------- */
/**
 * Exact merge of n_src partial results by their LSEs (split-KV combine and the a2a
 * DCP merge). For each row r (< rows) with sources s:
 *   m = max_s lse_s, Lambda = m + log sum_s exp(lse_s - m),
 *   out_r = sum_s w_s * o_s with w_s = exp(lse_s - Lambda) over the sources whose
 *   lse_s is not -inf (empty: skipped, their o_s never read). All -inf (or n_src = 0):
 *   out_r = 0, out_lse_r = -inf. Any lse_s NaN or +inf: out_lse_r and all of out_r NaN.
 * Source row r: src_o + s * src_stride_o + r * v_dim (elements of src_dtype),
 * src_lse + s * src_stride_lse + r (floats); the sum is accumulated in fp32 and
 * rounded to out_dtype once per element as it is stored.
 * out must not overlap the sources (the merge accumulates in out). Helpers with
 * these rules for both backends: dcp_kernels/merge.h.
 * Output row r = c * rows_per_chunk + i: out + c * out_chunk_stride + i * v_dim and
 * out_lse + c * out_lse_chunk_stride + i (out_lse == 0: not written).
 * Work item = DCPK_MERGE_ROWS_PER_ITEM rows (the GPU block's warps, one row each);
 * grid = (ceil(rows / DCPK_MERGE_ROWS_PER_ITEM)).
 */
#define DCPK_MERGE_ROWS_PER_ITEM 4u
struct dcpk_merge_params {
    uint64_t src_o;               ///< src_dtype partial outputs.
    uint64_t src_lse;             ///< fp32 partial LSEs.
    uint64_t out;                 ///< out_dtype merged output.
    uint64_t out_lse;             ///< fp32 merged LSE, or 0.
    uint64_t src_stride_o;        ///< Elements (of src_dtype) between sources' outputs.
    uint64_t src_stride_lse;      ///< Floats between sources' LSEs.
    uint64_t out_chunk_stride;    ///< Elements (of out_dtype) between output chunks.
    uint64_t out_lse_chunk_stride;///< Floats between output LSE chunks.
    uint32_t n_src;
    uint32_t rows;
    uint32_t rows_per_chunk;      ///< Rows per output chunk (= rows for one chunk).
    uint32_t v_dim;
    uint32_t src_dtype;           ///< enum dcpk_dtype of src_o (an activation dtype).
    uint32_t out_dtype;           ///< enum dcpk_dtype of out (an activation dtype).
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_merge_params) == 88, "merge ABI");

/* ------------------------------------------------------------------------- */
/**
 * The ag_rs correction: with every rank's LSEs gathered as lse_all[n_src][rows]
 * (rows in this rank's chunked order), computes Lambda_r as in dcpk_merge and scales
 * this rank's partial output row r (o + r * v_dim elements of o_dtype) in place by
 * exp(lse_all[self][r] - Lambda_r) (computed in fp32, rounded to o_dtype once)
 * (the row is set to 0, not multiplied, where that LSE is -inf; NaN where Lambda_r is,
 * i.e. where any rank's LSE is NaN or +inf). Rows of chunk own_chunk (rows
 * [own_chunk * rows_per_chunk, +rows_per_chunk)) also get out_lse[i] = Lambda (if out_lse != 0).
 * A ReduceScatter (sum) of o then yields the merged output. Work item = row.
 */
struct dcpk_lse_scale_params {
    uint64_t lse_all;  ///< fp32 [n_src][rows].
    uint64_t o;        ///< o_dtype [rows][v_dim], scaled in place.
    uint64_t out_lse;  ///< fp32 [rows_per_chunk], or 0.
    uint32_t n_src;
    uint32_t self;
    uint32_t rows;
    uint32_t rows_per_chunk;
    uint32_t own_chunk;
    uint32_t v_dim;
    uint32_t o_dtype;  ///< enum dcpk_dtype of o (an activation dtype).
    uint32_t pad0;
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_lse_scale_params) == 56, "lse_scale ABI");

/* ------------------------------------------------------------------------- */
/**
 * Sum reduction used by virtual-rank ReduceScatter: dst[i] = sum_s src_s[i] for
 * i < count, summing sources in order s = 0..n_src-1 (deterministic) in fp32 and
 * rounding the sum to dtype once, where src_s is the array of dtype at address
 * ((const uint64_t *)src_ptrs)[s] + src_offset elements; dst is of dtype too.
 * dst may be one of the src_s (same elements: in place); no other overlap.
 * Work item = 1024-element block of i.
 */
struct dcpk_reduce_params {
    uint64_t dst;
    uint64_t src_ptrs;   ///< uint64 [n_src] source base addresses (device memory).
    uint64_t src_offset; ///< Elements (of dtype) added to every source address.
    uint64_t count;
    uint32_t n_src;
    uint32_t dtype;      ///< enum dcpk_dtype of the sources and dst (an activation dtype).
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_reduce_params) == 40, "reduce ABI");

/* ------------------------------------------------------------------------- */
/**
 * The MLA value up-projection of partial outputs (parallel.merge_after_uv): every
 * row (chunk c, query token t, head h) of src (chunked layout, row length in_dim,
 * the latent) becomes dst row (c, t, h) = src row x W[g] with g = c * heads_per_chunk + h:
 *   dst[j] = sum_i src[i] * w[(g * in_dim + i) * out_dim + j]   for j < out_dim,
 * in fp32, i ascending, stored in dst_dtype with one rounding (any other dst_dtype:
 * nothing is done; the size of the struct is unchanged, dst_dtype took its padding).
 * w is fp32 [num_heads][in_dim][out_dim] (each gathered head's W_UV). The merge is linear in the outputs, so projecting before it is exact. A NaN
 * in a row reaches all of its outputs; an empty row (all 0) stays 0. src and dst must
 * not overlap. Work item = gathered head g (all tokens); grid = (num_heads).
 */
struct dcpk_uv_proj_params {
    uint64_t src;              ///< fp32 latent rows, chunked layout, row length in_dim.
    uint64_t w;                ///< fp32 [num_heads][in_dim][out_dim].
    uint64_t dst;              ///< dst_dtype projected rows, chunked layout, row length out_dim.
    uint64_t src_chunk_stride; ///< Floats between src chunks.
    uint64_t dst_chunk_stride; ///< Elements (of dst_dtype) between dst chunks.
    uint32_t num_tokens;       ///< T.
    uint32_t num_heads;        ///< Gathered heads (all chunks).
    uint32_t heads_per_chunk;  ///< Heads per chunk (= num_heads for one chunk).
    uint32_t in_dim;           ///< Latent length (kv_lora_rank, 512).
    uint32_t out_dim;          ///< Projected length (v_head_dim, 128).
    uint32_t dst_dtype;        ///< enum dcpk_dtype of dst: fp32, bf16 or fp16 (sums in fp32, one rounding).
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_uv_proj_params) == 64, "uv_proj ABI");

/* ------------------------------------------------------------------------- */
/**
 * Seeded synthetic data, the same on every backend: element (row, head, d) of
 * dst[rows][heads][dim] gets amplitude * dcpk_synth_unit(seed, key, head_offset + head, d)
 * with key = row_keys ? row_keys[row] : key_base + row, converted to dtype
 * (fp8: times inv_scale, saturated). Work item = row. The value is rounded twice,
 * (amplitude * unit) then (fp8) * inv_scale: dcpk_fill_element in dcp_kernels/fill.h.
 */
struct dcpk_fill_params {
    uint64_t dst;
    uint64_t row_keys;    ///< uint64 [rows] or 0.
    uint64_t key_base;    ///< Key of row 0 when row_keys == 0.
    uint64_t seed;
    uint32_t rows;
    uint32_t heads;
    uint32_t dim;
    uint32_t head_offset;
    uint32_t dtype;       ///< enum dcpk_dtype of dst.
    float amplitude;
    float inv_scale;      ///< fp8 only.
    uint32_t pad0;
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_fill_params) == 64, "fill ABI");

/* ------------------------------------------------------------------------- */
/**
 * The per-head attention sink (gpt-oss), applied once to merged rows, after the DCP
 * merge and never per rank (docs/design.md §13): row r (head h = r % num_heads)
 * with merged LSE L and output o becomes
 *   L' = logaddexp(L, s_h),   o' = o * exp(L - L'),
 * the softmax with one more term e^{s_h} whose value is zero. L = -inf (an empty
 * row) gives L' = s_h and o' = 0 (stored, not multiplied); s_h = -inf leaves the
 * row unchanged; a NaN (or +inf, read as NaN as the merges do) in L or s_h makes
 * L' and every element of o' NaN. out and lse are updated in place; out is
 * converted to fp32 as it is loaded and rounded to out_dtype once as it is stored.
 * Work item = row; grid = (rows).
 */
struct dcpk_sink_params {
    uint64_t out;        ///< out_dtype [rows][v_dim] merged outputs, scaled in place.
    uint64_t lse;        ///< fp32 [rows] merged LSEs, replaced by L'.
    uint64_t sinks;      ///< fp32 [num_heads] sink logits s_h (natural log) of the rows' heads.
    uint32_t rows;       ///< Rows: query tokens x num_heads.
    uint32_t num_heads;  ///< Heads per token: row r has head r % num_heads.
    uint32_t v_dim;      ///< Elements per output row.
    uint32_t out_dtype;  ///< enum dcpk_dtype of out (an activation dtype).
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_sink_params) == 40, "sink ABI");

/* ------------------------------------------------------------------------- */
/**
 * Sparse gather-attend (DeepSeek Sparse Attention's attention half, MLA or GQA):
 * query token t attends only over the global positions listed in its row of topk,
 * and each rank over the listed positions it owns. Entry e of row t,
 * P = topk[t * topk_stride + e] for e < num_topk, is a key of row t when
 * 0 <= P <= pos_t (the token's global position, params.h's convention) and
 * dcpk_owner_rank(P, group_size, interleave) == rank; its local index
 * c = dcpk_local_index(P, ...) is read from page block_table[b * max_blocks +
 * c / block_size] at offset c % block_size, as dcpk_attn reads it. Entries < 0
 * pad a row; entries are taken in row order and a repeated entry counts each
 * time (callers list distinct positions). A row with no key of this rank gets
 * LSE -inf and output 0 (the usual merge then drops it); the NaN rule is
 * dcpk_attn's. q, out and lse use the chunked layout of dcpk_attn; gathered
 * head g reads local KV head g / (num_heads / num_kv_heads).
 * Work item = (query token t, KV head k, head tile j); grid = (num_q_tokens,
 * num_kv_heads * head_tiles), head_tiles as for dcpk_attn. Sequence b of token
 * t: the b with q_start[b] <= t < q_start[b + 1].
 */
struct dcpk_sparse_attn_params {
    uint64_t q;                 ///< q_dtype queries, chunked layout, row length qk_dim.
    uint64_t k_cache;           ///< Layer's K pages (dtype).
    uint64_t v_cache;           ///< Layer's V pages (== k_cache for MLA).
    uint64_t block_table;       ///< int32 [batch][max_blocks] page ids.
    uint64_t seq_lens;          ///< int32 [batch] global context length (this step's tokens included).
    uint64_t q_start;           ///< int32 [batch + 1] prefix sums of query tokens per sequence.
    uint64_t topk;              ///< int32 [num_q_tokens][topk_stride] selected global positions, -1 = none.
    uint64_t out;               ///< out_dtype output, chunked layout, row length v_dim.
    uint64_t lse;               ///< fp32 LSE, chunked layout.
    uint64_t q_chunk_stride;    ///< Elements (of q_dtype) between query chunks.
    uint64_t out_chunk_stride;  ///< Elements (of out_dtype) between output chunks.
    uint64_t lse_chunk_stride;  ///< Floats between LSE chunks.
    uint32_t topk_stride;       ///< int32 elements between tokens' rows of topk (>= num_topk).
    uint32_t num_topk;          ///< Entries of a row read: the layer's K.
    uint32_t batch;             ///< Sequences.
    uint32_t num_q_tokens;      ///< T (q_start[batch]).
    uint32_t num_heads;         ///< Gathered query heads (all chunks).
    uint32_t heads_per_chunk;   ///< Heads per chunk (= num_heads when dcp = 1).
    uint32_t num_kv_heads;      ///< KV heads stored on this rank.
    uint32_t head_tile;         ///< Query heads per work item, as in dcpk_attn.
    uint32_t qk_dim;            ///< Query/key row length.
    uint32_t v_dim;             ///< Value/output row length.
    uint32_t v_row_stride;      ///< Elements between V rows within a page (v_dim; MLA: qk_dim).
    uint32_t block_size;        ///< Tokens per page.
    uint32_t max_blocks;        ///< Row length of block_table.
    uint32_t rank;              ///< Rank within the DCP group.
    uint32_t group_size;        ///< DCP group size N.
    uint32_t interleave;        ///< Interleave size I.
    uint32_t dtype;             ///< enum dcpk_dtype of the cache.
    float scale;                ///< Softmax scale applied to q.k.
    float kv_scale;             ///< fp8: value = stored * kv_scale.
    uint32_t q_dtype;           ///< enum dcpk_dtype of q (an activation dtype).
    uint32_t out_dtype;         ///< enum dcpk_dtype of out (an activation dtype).
    uint32_t precision;         ///< enum dcpk_precision of the tensor-core entries, as in dcpk_attn (0: fast); the others
                                ///< ignore it (an unknown value is still refused).
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_sparse_attn_params) == 184, "sparse_attn ABI");

/* ------------------------------------------------------------------------- */
/**
 * DSA indexer scoring against this rank's shard of the index-key cache: for query
 * token t (global position pos_t) and each local key c < n_t =
 * dcpk_local_length(pos_t + 1, rank, group_size, interleave) (the rank's keys at
 * positions <= pos_t), clipped to score_stride,
 *   scores[t * score_stride + c] = sum_j w[t][j] * max(0, q[t][j] . k_c)
 * over the index heads j (ascending, each dot product over d ascending, in fp32),
 * with k_c = the index key of local index c (page block_table[b * max_blocks +
 * c / block_size], offset c % block_size; dtype, times kv_scale when scaled) and
 * score_lens[t] = n_t (clipped). Entries c >= score_lens[t] are not written.
 * The caller folds any scale (softmax scale, heads^-1/2) into w.
 * Index-key pages: [page][block_size][index_dim] elements of dtype (the dcpk_attn
 * K page layout with one head), written by dcpk_kv_append with num_kv_heads = 1.
 * Work item = (key tile x of DCPK_INDEX_TILE local keys, token t); grid =
 * (ceil(score_stride / DCPK_INDEX_TILE), num_q_tokens); item (0, t) writes score_lens[t].
 */
#define DCPK_INDEX_TILE 64
struct dcpk_index_score_params {
    uint64_t q;                 ///< q_dtype [num_q_tokens][num_index_heads][index_dim] index queries.
    uint64_t weights;           ///< fp32 [num_q_tokens][num_index_heads] head weights w[t][j].
    uint64_t k_cache;           ///< Layer's index-key pages (dtype).
    uint64_t block_table;       ///< int32 [batch][max_blocks] page ids.
    uint64_t seq_lens;          ///< int32 [batch] global context length.
    uint64_t q_start;           ///< int32 [batch + 1] prefix sums of query tokens per sequence.
    uint64_t scores;            ///< fp32 [num_q_tokens][score_stride] written.
    uint64_t score_lens;        ///< int32 [num_q_tokens] written: local keys scored per token.
    uint64_t score_stride;      ///< Floats between tokens' score rows (>= the longest local length).
    uint32_t batch;             ///< Sequences.
    uint32_t num_q_tokens;      ///< T.
    uint32_t num_index_heads;   ///< Index heads (DeepSeek-V3.2: 64).
    uint32_t index_dim;         ///< Index head dim (DeepSeek-V3.2: 128).
    uint32_t block_size;        ///< Tokens per page.
    uint32_t max_blocks;        ///< Row length of block_table.
    uint32_t rank;              ///< Rank within the DCP group.
    uint32_t group_size;        ///< DCP group size N.
    uint32_t interleave;        ///< Interleave size I.
    uint32_t dtype;             ///< enum dcpk_dtype of the index keys (fp8_e4m3 or bf16; any cache dtype works).
    float kv_scale;             ///< Scaled dtypes: value = stored * kv_scale.
    uint32_t q_dtype;           ///< enum dcpk_dtype of q (an activation dtype).
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_index_score_params) == 120, "index_score ABI");

/* ------------------------------------------------------------------------- */
/**
 * Top-k of (score, position) candidates per row, the order every rank agrees on:
 * a higher score first, and between equal scores the lower position. A candidate
 * is valid when its position is >= 0 and its score is neither NaN nor -inf.
 * Row r's candidates: for each source s < n_src, entries e < len_r of
 *   scores[s * src_stride + r * row_stride + e] and the same element of positions,
 * with len_r = row_lens ? min(row_lens[r], n_entries) : n_entries. positions == 0
 * means entry e is this rank's local key e, at global position
 * dcpk_global_position(e, rank, group_size, interleave) (the local top-k over
 * dcpk_index_score's rows); otherwise positions is int32 like scores (the global
 * merge of the group's gathered local top-ks: n_src = N). Writes the best
 * min(k, valid) in order to out_scores/out_positions [rows][k], then pads with
 * (-inf, -1). Since the order is total on valid candidates with distinct
 * positions, the top k of the union of every rank's local top k is the global
 * top k, the same on every rank. Work item = row; grid = (rows).
 */
struct dcpk_topk_params {
    uint64_t scores;            ///< fp32 candidate scores.
    uint64_t positions;         ///< int32 candidate positions (same layout), or 0: local keys (see above).
    uint64_t row_lens;          ///< int32 [rows] candidates per source row, or 0: n_entries each.
    uint64_t out_scores;        ///< fp32 [rows][k] written.
    uint64_t out_positions;     ///< int32 [rows][k] written.
    uint64_t src_stride;        ///< Elements between sources.
    uint64_t row_stride;        ///< Elements between rows of a source.
    uint32_t rows;              ///< Rows (query tokens).
    uint32_t n_src;             ///< Sources (1, or N for the group merge).
    uint32_t n_entries;         ///< Most candidates per source row.
    uint32_t k;                 ///< Entries kept per row.
    uint32_t rank;              ///< Rank within the DCP group (positions == 0).
    uint32_t group_size;        ///< DCP group size N (positions == 0).
    uint32_t interleave;        ///< Interleave size I (positions == 0).
    uint32_t pad0;
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_topk_params) == 88, "topk ABI");

/** splitmix64 finaliser: a well-mixed 64-bit hash. */
DCPK_HD uint64_t dcpk_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/** Uniform value in [-1, 1) determined by (seed, key, head, d). */
DCPK_HD float dcpk_synth_unit(uint64_t seed, uint64_t key, uint32_t head, uint32_t d)
{
    uint64_t h = dcpk_mix64(seed ^ dcpk_mix64(key ^ dcpk_mix64(((uint64_t)head << 32) | d)));
    return (float)(int32_t)(uint32_t)(h >> 32) * (1.0f / 2147483648.0f);
}

#endif /* DCPK_PARAMS_H */
