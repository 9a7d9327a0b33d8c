/*
 * dcp_kernels/variants.h: the GPU entry points compiled into the embedded fatbin,
 * with what the host needs to launch each one (block size, dynamic shared memory).
 * Read by nvcc (the kernels are instantiated from these lists, so names and
 * configurations cannot drift) and by C (the CUDA backend, the tests).
 *
 * Naming (ptx/kernels/README.md has the full rule):
 *   dcpk_<family>                    one entry for the whole family (runtime dtype switch)
 *   dcpk_attn__<layout>_<dtype>      attention, one entry per layout and cache dtype,
 *                                    <dtype> spelled as dcp_dtype_name() spells it.
 */
#ifndef DCPK_VARIANTS_H
#define DCPK_VARIANTS_H

#include "dcp_kernels/common.h"

/*
 * Families with a single entry "dcpk_<name>": X(name, block threads).
 * Their kernels loop over work items with a grid-stride loop, so any grid works;
 * launch them with dcpk_<name>_grid() (cpu.h) and no dynamic shared memory.
 */
#define DCPK_SIMPLE_KERNELS(X) \
    X(kv_append, 256)          \
    X(merge, 128)              \
    X(lse_scale, 128)          \
    X(reduce, 256)             \
    X(fill, 256)               \
    X(uv_proj, 128)            \
    X(sink, 128)               \
    X(index_score, 256)        \
    X(topk, 256)

/** Longest index key dcpk_index_score's GPU entry scores (index_dim): one head's queries are staged whole. */
#define DCPK_INDEX_SCORE_MAX_DIM 4096u

/*
 * Attention entries, one per layout and cache dtype:
 *   X(layout, qk_dim, v_dim, shared_kv, threads, rows, tile_tokens, dtype_name, dtype, esize)
 *   shared_kv:   1 when V is the first v_dim values of the K row (MLA: v_cache ==
 *                k_cache, v_row_stride == qk_dim); 0 for separate K and V pages.
 *   threads:     block size the entry must be launched with (it does nothing otherwise).
 *   rows:        query rows (head_tile heads x the sequence's query tokens) that share
 *                one read of each KV tile; more rows are served in further passes.
 *   tile_tokens: KV tokens per shared-memory tile (a tile may span pages).
 *   dtype_name, dtype, esize: the cache dtype as dcp_dtype_name() spells it, its
 *                enum dcpk_dtype and its bytes.
 */
#define DCPK_ATTN_EACH_DTYPE(X, ...)          \
    X(__VA_ARGS__, fp32, DCPK_FP32, 4)        \
    X(__VA_ARGS__, bf16, DCPK_BF16, 2)        \
    X(__VA_ARGS__, fp16, DCPK_FP16, 2)        \
    X(__VA_ARGS__, fp8_e4m3, DCPK_FP8_E4M3, 1)
#define DCPK_ATTN_VARIANTS(X)                                      \
    DCPK_ATTN_EACH_DTYPE(X, gqa_d64, 64, 64, 0, 128, 16, 64)       \
    DCPK_ATTN_EACH_DTYPE(X, gqa_d128, 128, 128, 0, 128, 16, 32)    \
    DCPK_ATTN_EACH_DTYPE(X, gqa_d256, 256, 256, 0, 128, 16, 16)    \
    DCPK_ATTN_EACH_DTYPE(X, mla, 576, 512, 1, 256, 32, 16)

/*
 * Tensor-core attention entries (mma.sync m16n8k16, ldmatrix), same row format;
 * only the dtypes the MMA takes as inputs. dcpk_attn_variant_find prefers them
 * over the SIMT entry of the same shape and dtype, which stays the reference
 * path for everything they do not cover (fp32 KV; fp8 KV for GQA).
 *   mla_tc:   rows = 32 (two m16 row groups of 4 warps each), tile_tokens = 32;
 *             operand rounding as dcpk_attn_params.precision says (params.h);
 *             fp8 e4m3 KV is widened (exactly) to bf16 in shared memory.
 *   gqa_dD_tc: rows (heads x query tokens) in the MMA's N, 8 per n-tile; each warp
 *             owns 16 keys of a tile (tile_tokens = 16 x warps); Q and P always
 *             split hi + lo (exact; precision is ignored: the entry is memory-bound).
 */
#define DCPK_ATTN_MLA_TC_VARIANTS(X)                        \
    X(mla_tc, 576, 512, 1, 256, 32, 32, bf16, DCPK_BF16, 2) \
    X(mla_tc, 576, 512, 1, 256, 32, 32, fp16, DCPK_FP16, 2) \
    X(mla_tc, 576, 512, 1, 256, 32, 32, fp8_e4m3, DCPK_FP8_E4M3, 1)
#define DCPK_ATTN_GQA_TC_VARIANTS(X)                              \
    X(gqa_d64_tc, 64, 64, 0, 128, 32, 64, bf16, DCPK_BF16, 2)     \
    X(gqa_d64_tc, 64, 64, 0, 128, 32, 64, fp16, DCPK_FP16, 2)     \
    X(gqa_d128_tc, 128, 128, 0, 128, 16, 64, bf16, DCPK_BF16, 2)  \
    X(gqa_d128_tc, 128, 128, 0, 128, 16, 64, fp16, DCPK_FP16, 2)  \
    X(gqa_d256_tc, 256, 256, 0, 64, 8, 32, bf16, DCPK_BF16, 2)    \
    X(gqa_d256_tc, 256, 256, 0, 64, 8, 32, fp16, DCPK_FP16, 2)
#define DCPK_ATTN_TC_VARIANTS(X) DCPK_ATTN_MLA_TC_VARIANTS(X) DCPK_ATTN_GQA_TC_VARIANTS(X)

/*
 * Sparse attention entries (dcpk_sparse_attn), "dcpk_sparse_attn__<layout>_<dtype>",
 * same row format: the attention entries' blocks over the keys of a token's top-k
 * list that this rank owns, compacted into a list in shared memory (after the
 * attention entry's plan) DCPK_SPARSE_CAP keys at a time. One for every SIMT
 * attention entry (every shape and dtype).
 */
#define DCPK_SPARSE_VARIANTS(X) DCPK_ATTN_VARIANTS(X)
/* ... and the tensor-core MLA ones (DSA: bf16, fp16 and fp8 latents), which the lookup prefers. */
#define DCPK_SPARSE_TC_VARIANTS(X) DCPK_ATTN_MLA_TC_VARIANTS(X)

/* ---- shared-memory plan of an attention entry ---------------------------- */
/* The kernel carves its dynamic shared memory with these same macros.          */

/** Threads that split the qk reduction of one score micro-tile (4 rows x 4 tokens). */
#define DCPK_ATTN_KSPLIT(threads, rows, tile) ((threads) / (((rows) / 4) * ((tile) / 4)))
/** 16-byte chunks in a row of dim elements of esize bytes. */
#define DCPK_ATTN_CHUNKS(dim, esize) ((dim) * (esize) / 16)
/**
 * 16-byte chunks per K row in shared memory: padded so that the row stride is
 * congruent to KSPLIT modulo 8, which makes the score loop's 16-byte reads of
 * different tokens fall into different bank groups.
 */
#define DCPK_ATTN_KROW_CHUNKS(qk, esize, ks) \
    (DCPK_ATTN_CHUNKS(qk, esize) + ((ks) + 8 - DCPK_ATTN_CHUNKS(qk, esize) % 8) % 8)
/** Bytes of the double-buffered K tiles. */
#define DCPK_ATTN_SMEM_K(qk, esize, threads, rows, tile) \
    (2u * (tile) * DCPK_ATTN_KROW_CHUNKS(qk, esize, DCPK_ATTN_KSPLIT(threads, rows, tile)) * 16u)
/** Bytes of the double-buffered V tiles (none when V lives in the K rows). */
#define DCPK_ATTN_SMEM_V(v, shared_kv, esize, tile) \
    ((shared_kv) ? 0u : 2u * (tile) * DCPK_ATTN_CHUNKS(v, esize) * 16u)
/** Bytes of the scaled fp32 queries of one pass. */
#define DCPK_ATTN_SMEM_Q(qk, rows) ((rows) * (qk) * 4u)
/**
 * Floats per row of the score / probability tile: 8 more than the tile, so the
 * softmax pass (8 lanes per row, 4 rows per warp) hits 32 different banks.
 */
#define DCPK_ATTN_S_STRIDE(tile) ((tile) + 8u)
/** Bytes of the score / probability tile. */
#define DCPK_ATTN_SMEM_S(rows, tile) ((rows) * DCPK_ATTN_S_STRIDE(tile) * 4u)
/** Bytes of the per-row state (visible-key end, rescale factor, softmax sum, visible-key start). */
#define DCPK_ATTN_SMEM_ROWS(rows) ((rows) * 16u)
/** Dynamic shared memory of an attention entry, in bytes. */
#define DCPK_ATTN_SMEM_BYTES(qk, v, shared_kv, esize, threads, rows, tile)          \
    (DCPK_ATTN_SMEM_K(qk, esize, threads, rows, tile) +                               \
     DCPK_ATTN_SMEM_V(v, shared_kv, esize, tile) + DCPK_ATTN_SMEM_Q(qk, rows) +      \
     DCPK_ATTN_SMEM_S(rows, tile) + DCPK_ATTN_SMEM_ROWS(rows))

/* ---- shared-memory plan of a sparse entry -------------------------------- */

/**
 * Keys of a sparse entry's list in shared memory: 480 rounded down to whole tiles
 * (the list and its counts fit the 2 KiB the tensor-core MLA entry leaves of an
 * A100's 163 KiB).
 */
#define DCPK_SPARSE_CAP(threads, tile) (480u / (tile) * (tile))
/** Bytes of the list, of the per-warp counts that rank its keys, and of the token's and the list's key counts. */
#define DCPK_SPARSE_SMEM_LIST(threads, tile) ((DCPK_SPARSE_CAP(threads, tile) + (threads) / 32u + 2u) * 4u)
/** Dynamic shared memory of a SIMT sparse entry: its attention entry's plan, then the list. */
#define DCPK_SPARSE_SMEM_BYTES(qk, v, shared_kv, esize, threads, rows, tile) \
    (DCPK_ATTN_SMEM_BYTES(qk, v, shared_kv, esize, threads, rows, tile) + DCPK_SPARSE_SMEM_LIST(threads, tile))

/* ---- shared-memory plan of a tensor-core entry --------------------------- */

/** Dynamic shared memory of a tensor-core MLA sparse entry: its attention entry's plan, then the list. */
#define DCPK_SPARSE_TC_SMEM_BYTES(qk, esize, threads, rows, tile) \
    (DCPK_ATTN_TC_SMEM_BYTES(qk, esize, threads, rows, tile) + DCPK_SPARSE_SMEM_LIST(threads, tile))

/** Warps per m16 row group: each owns 1/quarters of the qk depth (S) and of v_dim (O). */
#define DCPK_ATTN_TC_QUARTERS(threads, rows) ((threads) / 32u / ((rows) / 16u))
/**
 * 16-byte chunks per K row in shared memory: one more than the row has, an odd
 * count, so the 8 rows an ldmatrix matrix reads fall into 8 different bank groups.
 */
#define DCPK_ATTN_TC_ROW_CHUNKS(qk, esize) (DCPK_ATTN_CHUNKS(qk, esize) + 1u)
/**
 * Bytes of the double-buffered K tiles (V is read from them). fp8 (esize 1): one
 * bf16 tile the MMAs read, and the double-buffered raw fp8 rows (unpadded) the
 * copies land in, each thread widening its own copies into the bf16 tile.
 */
#define DCPK_ATTN_TC_SMEM_K(qk, esize, tile)                                                  \
    ((esize) == 1u ? (tile) * DCPK_ATTN_TC_ROW_CHUNKS(qk, 2u) * 16u + 2u * (tile) * (qk)   \
                   : 2u * (tile) * DCPK_ATTN_TC_ROW_CHUNKS(qk, esize) * 16u)
/** Bytes of the fp32 partial scores the warps of a row group exchange. */
#define DCPK_ATTN_TC_SMEM_X(threads, rows, tile) ((rows) * (tile) * DCPK_ATTN_TC_QUARTERS(threads, rows) * 4u)
/**
 * Bytes of the query fragments: each thread's A fragments (one 16-byte register
 * quad per k-step of its depth slice), rounded and residues, kept out of registers.
 */
#define DCPK_ATTN_TC_SMEM_Q(qk, threads, rows) (2u * (threads) * ((qk) / DCPK_ATTN_TC_QUARTERS(threads, rows) / 16u) * 16u)
/** Dynamic shared memory of a tensor-core MLA entry, in bytes. */
#define DCPK_ATTN_TC_SMEM_BYTES(qk, esize, threads, rows, tile) \
    (DCPK_ATTN_TC_SMEM_K(qk, esize, tile) + DCPK_ATTN_TC_SMEM_X(threads, rows, tile) + \
     DCPK_ATTN_TC_SMEM_Q(qk, threads, rows))

/* ---- shared-memory plan of a tensor-core GQA entry ----------------------- */

/**
 * cp.async pipeline depth: 4 stages when one stage (the K and V tiles) is at most
 * 16 KiB, else 3, so a block stays under about 110 KiB (two per H100 SM).
 */
#define DCPK_ATTN_GQA_TC_STAGES(d, esize, tile) ((tile) * (d) * (esize) * 2u <= 16384u ? 4u : 3u)
/**
 * Bytes of the K and V tiles of every stage, rows unpadded: 16-byte chunk c of
 * row r sits at chunk c ^ (r % 8) of the row (an XOR swizzle), so the 8 rows an
 * ldmatrix matrix reads fall into 8 different bank groups.
 */
#define DCPK_ATTN_GQA_TC_SMEM_KV(d, esize, tile) (DCPK_ATTN_GQA_TC_STAGES(d, esize, tile) * 2u * (tile) * (d) * (esize))
/** Bytes of the query B fragments (hi, lo) of one pass: one 16-byte quad per lane, k-step and n-tile. */
#define DCPK_ATTN_GQA_TC_SMEM_Q(d, rows) (32u * ((d) / 16u) * ((rows) / 8u) * 16u)
/** Bytes of the per-warp P^T transposition tiles: 16 keys x 8 rows x (hi, lo) per n-tile. */
#define DCPK_ATTN_GQA_TC_SMEM_P(threads, rows) ((threads) / 32u * ((rows) / 8u) * 512u)
/** Bytes of the per-warp softmax states (running max, sum) the warps combine at the end. */
#define DCPK_ATTN_GQA_TC_SMEM_ML(threads, rows) ((threads) / 32u * (rows) * 8u)
/** Bytes of the pass's NaN slot: the first key whose value was sanitized (docs/design.md §4), padded. */
#define DCPK_ATTN_GQA_TC_SMEM_NAN 16u
/** Bytes of the pass rows' visible key ranges (begin, end), set once a pass: the tile loop divides by nothing. */
#define DCPK_ATTN_GQA_TC_SMEM_RANGE(rows) ((rows) * 8u)
/** Floats per row of the per-warp fp32 output tiles the warps combine (in the KV tiles' space). */
#define DCPK_ATTN_GQA_TC_O_STRIDE(d) ((d) + 4u)
/** Dynamic shared memory of a tensor-core GQA entry, in bytes. */
#define DCPK_ATTN_GQA_TC_SMEM_BYTES(d, esize, threads, rows, tile)                                   \
    (DCPK_ATTN_GQA_TC_SMEM_KV(d, esize, tile) + DCPK_ATTN_GQA_TC_SMEM_Q(d, rows) +                   \
     DCPK_ATTN_GQA_TC_SMEM_P(threads, rows) + DCPK_ATTN_GQA_TC_SMEM_ML(threads, rows) +               \
     DCPK_ATTN_GQA_TC_SMEM_NAN + DCPK_ATTN_GQA_TC_SMEM_RANGE(rows))

/* ---- host-side view ------------------------------------------------------- */

/** One attention entry point and how to launch it. */
struct dcpk_attn_variant {
    const char *entry;     ///< Entry point name, e.g. "dcpk_attn__gqa_d128_bf16".
    uint32_t qk_dim;       ///< Query/key row length it computes.
    uint32_t v_dim;        ///< Value/output row length.
    uint32_t shared_kv;    ///< 1: V is read from the K rows (MLA).
    uint32_t dtype;        ///< enum dcpk_dtype of the cache.
    uint32_t threads;      ///< Block size (blockDim.x; y = z = 1).
    uint32_t rows;         ///< Query rows served per KV read (see DCPK_ATTN_VARIANTS).
    uint32_t tile_tokens;  ///< KV tokens per shared-memory tile.
    uint32_t smem_bytes;   ///< Dynamic shared memory per block.
    uint32_t tensor_core;  ///< 1: mma.sync entry (DCPK_ATTN_TC_VARIANTS), rounding set by params.precision.
};

#define DCPK_PLUS_ONE_(...) +1
/** Number of attention entries. */
#define DCPK_ATTN_VARIANT_COUNT (0u DCPK_ATTN_VARIANTS(DCPK_PLUS_ONE_) DCPK_ATTN_TC_VARIANTS(DCPK_PLUS_ONE_))

/** Attention entry i (0 <= i < DCPK_ATTN_VARIANT_COUNT), or NULL. */
static inline const struct dcpk_attn_variant *dcpk_attn_variant_at(uint32_t i)
{
#define DCPK_ATTN_ROW_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    {"dcpk_attn__" #layout "_" #dt, qk, v, shared, dtype, threads, rows, tile,       \
     DCPK_ATTN_SMEM_BYTES(qk, v, shared, esize, threads, rows, tile), 0},
#define DCPK_ATTN_MLA_TC_ROW_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    {"dcpk_attn__" #layout "_" #dt, qk, v, shared, dtype, threads, rows, tile,              \
     DCPK_ATTN_TC_SMEM_BYTES(qk, esize, threads, rows, tile), 1},
#define DCPK_ATTN_GQA_TC_ROW_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    {"dcpk_attn__" #layout "_" #dt, qk, v, shared, dtype, threads, rows, tile,              \
     DCPK_ATTN_GQA_TC_SMEM_BYTES(qk, esize, threads, rows, tile), 1},
    /* In DCPK_ATTN_TC_VARIANTS's order: MLA, then GQA. */
    static const struct dcpk_attn_variant table[] = {DCPK_ATTN_VARIANTS(DCPK_ATTN_ROW_)
                                                         DCPK_ATTN_MLA_TC_VARIANTS(DCPK_ATTN_MLA_TC_ROW_)
                                                             DCPK_ATTN_GQA_TC_VARIANTS(DCPK_ATTN_GQA_TC_ROW_)};
#undef DCPK_ATTN_ROW_
#undef DCPK_ATTN_MLA_TC_ROW_
#undef DCPK_ATTN_GQA_TC_ROW_
    return i < DCPK_ATTN_VARIANT_COUNT ? &table[i] : (const struct dcpk_attn_variant *)0;
}

/** Number of sparse attention entries. */
#define DCPK_SPARSE_VARIANT_COUNT (0u DCPK_SPARSE_VARIANTS(DCPK_PLUS_ONE_) DCPK_SPARSE_TC_VARIANTS(DCPK_PLUS_ONE_))

/** Sparse attention entry i (0 <= i < DCPK_SPARSE_VARIANT_COUNT), or NULL; rows and tile_tokens as its attention entry's. */
static inline const struct dcpk_attn_variant *dcpk_sparse_variant_at(uint32_t i)
{
#define DCPK_SPARSE_ROW_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    {"dcpk_sparse_attn__" #layout "_" #dt, qk, v, shared, dtype, threads, rows, tile, \
     DCPK_SPARSE_SMEM_BYTES(qk, v, shared, esize, threads, rows, tile), 0},
#define DCPK_SPARSE_TC_ROW_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    {"dcpk_sparse_attn__" #layout "_" #dt, qk, v, shared, dtype, threads, rows, tile,    \
     DCPK_SPARSE_TC_SMEM_BYTES(qk, esize, threads, rows, tile), 1},
    /* SIMT first (one per SIMT attention entry, in their order), then tensor cores. */
    static const struct dcpk_attn_variant table[] = {DCPK_SPARSE_VARIANTS(DCPK_SPARSE_ROW_)
                                                         DCPK_SPARSE_TC_VARIANTS(DCPK_SPARSE_TC_ROW_)};
#undef DCPK_SPARSE_ROW_
#undef DCPK_SPARSE_TC_ROW_
    return i < DCPK_SPARSE_VARIANT_COUNT ? &table[i] : (const struct dcpk_attn_variant *)0;
}

/**
 * The entry of a table (at(i) for i < count) for a shape and dtype: the tensor-core
 * one where the table has one, else the SIMT one; NULL when none computes it.
 */
static inline const struct dcpk_attn_variant *dcpk_variant_find_in(const struct dcpk_attn_variant *(*at)(uint32_t),
                                                                   uint32_t count, uint32_t qk_dim, uint32_t v_dim,
                                                                   uint32_t shared_kv, uint32_t dtype)
{
    const struct dcpk_attn_variant *found = (const struct dcpk_attn_variant *)0;
    for (uint32_t i = 0; i < count; i++) {
        const struct dcpk_attn_variant *v = at(i);
        if (v->qk_dim == qk_dim && v->v_dim == v_dim && v->shared_kv == (shared_kv != 0) &&
            v->dtype == dtype && (!found || v->tensor_core))
            found = v;
    }
    return found;
}

/**
 * The attention entry for a call: shared_kv selects MLA (qk 576, v 512), otherwise
 * qk_dim == v_dim must be 64, 128 or 256. A tensor-core entry when one computes the
 * shape and dtype (bf16/fp16 KV, every shape), else the SIMT one. NULL when no entry computes
 * it (the caller reports the unsupported shape; the CPU backend has no such limit).
 */
static inline const struct dcpk_attn_variant *dcpk_attn_variant_find(uint32_t qk_dim, uint32_t v_dim,
                                                                     uint32_t shared_kv, uint32_t dtype)
{
    return dcpk_variant_find_in(dcpk_attn_variant_at, DCPK_ATTN_VARIANT_COUNT, qk_dim, v_dim, shared_kv, dtype);
}

/** The sparse entry for a call, as dcpk_attn_variant_find picks an attention entry. */
static inline const struct dcpk_attn_variant *dcpk_sparse_variant_find(uint32_t qk_dim, uint32_t v_dim,
                                                                       uint32_t shared_kv, uint32_t dtype)
{
    return dcpk_variant_find_in(dcpk_sparse_variant_at, DCPK_SPARSE_VARIANT_COUNT, qk_dim, v_dim, shared_kv, dtype);
}

/**
 * head_tile that lets one KV read serve every query row of a sequence with up to
 * max_q_tokens query tokens: the largest count of heads whose rows fit one pass,
 * at least 1 and at most heads_per_kv. Any head_tile >= 1 is correct; larger ones
 * take extra passes over the KV tiles, smaller ones extra blocks.
 */
static inline uint32_t dcpk_attn_pick_head_tile(const struct dcpk_attn_variant *v,
                                                uint32_t heads_per_kv, uint32_t max_q_tokens)
{
    const uint32_t q = max_q_tokens ? max_q_tokens : 1u;
    uint32_t tile = v->rows / q;
    if (tile < 1u)
        tile = 1u;
    return tile < heads_per_kv ? tile : heads_per_kv;
}

#endif /* DCPK_VARIANTS_H */
