/*
 * attn_harness.h: builds attention problems for the kernel tests: random
 * sequences, each rank's paged cache filled through dcpk_kv_append with slots
 * from the placement formulas, dcpk_attn run over its whole grid (in random
 * pieces, with guarded scratch), split partials merged with dcpk_merge, and the
 * float64 oracle over the same (quantized) values. Queries, K/V sources and outputs
 * may be bf16/fp16 (the activation dtypes): the sources are rounded to them when
 * filled, so the oracle sees exactly what the kernels read.
 */
#ifndef DCP_TEST_ATTN_HARNESS_H
#define DCP_TEST_ATTN_HARNESS_H

#include <stdint.h>

#include "dcp_kernels/cpu.h"
#include "test_util.h"

#define HARNESS_MAX_BATCH 4

/** The whole problem: every sequence's tokens and queries, before any sharding. */
struct attn_problem {
    uint32_t batch;
    uint32_t seq_len[HARNESS_MAX_BATCH]; ///< Context length including this step's tokens.
    uint32_t q_len[HARNESS_MAX_BATCH];   ///< Query tokens (the last q_len positions).
    uint32_t heads, kv_heads, qk_dim, v_dim;
    int mla;            ///< V is the first v_dim values of the K row (kv_heads == 1).
    uint32_t dtype;     ///< Cache dtype.
    uint32_t block_size;
    float scale;        ///< Softmax scale.
    float kv_scale;     ///< fp8 scale (inv_scale = 1 / kv_scale when appending).
    uint32_t q_dtype;   ///< Activation dtype of the queries (0 = fp32); set before problem_fill.
    uint32_t src_dtype; ///< Activation dtype of the K/V rows appended; set before problem_fill.
    uint32_t out_dtype; ///< Activation dtype the attention (or the split merge) writes out in.
    float *k_src[HARNESS_MAX_BATCH]; ///< [seq_len][kv_heads][qk_dim], values of src_dtype (held in fp32).
    float *v_src[HARNESS_MAX_BATCH]; ///< [seq_len][kv_heads][v_dim], values of src_dtype; NULL for MLA.
    float *q[HARNESS_MAX_BATCH];     ///< [q_len][heads][qk_dim], values of q_dtype (held in fp32).
    /* Layer kinds (docs/design.md §13); all 0 / NULL: a full layer. */
    uint32_t window;    ///< Sliding window of this many tokens (dcpk_attn_params.window); 0: none.
    int ring;           ///< With a window: each rank keeps only the last ring_pages pages of every sequence
                        ///< (dcpk_attn_params.ring_pages, the fewest that hold the window), written in a ring.
    uint32_t num_topk;  ///< Sparse top-k: rank_attention runs dcpk_sparse_attn over topk; 0: dense.
    int32_t *topk[HARNESS_MAX_BATCH]; ///< [q_len][num_topk] global positions per query token (-1: none).
    const float *sinks; ///< Per head sink logits the oracle applies (the test runs dcpk_sink after the merge).
};

/** How one rank runs its attention. */
struct rank_run {
    uint32_t rank, group_size, interleave;
    uint32_t num_splits, head_tile;
    uint32_t chunks;  ///< Head chunks of the layout (heads_per_chunk = heads / chunks).
    int variant;      ///< 0: dcpk_attn_cpu (the variant it picks); k > 0: variant k - 1 of enum dcpk_cpu_isa.
    int fused;        ///< num_splits > 1: the attention launch combines its splits (split_counters) instead of
                      ///< dcpk_merge; it runs twice, the output poisoned between (a graph replay), and the
                      ///< counters must be 0 after each run.
};

/** Where a rank's output goes: chunked layout with these strides (floats). The
 * kernels write out_dtype; rank_attention decodes the rows it wrote into out. */
struct attn_output {
    float *out;
    float *lse;
    uint64_t out_chunk_stride;
    uint64_t lse_chunk_stride;
};

/** x rounded to an activation dtype (to nearest even), as the kernels store it. */
float act_round(uint32_t dtype, float x);
/** Unit roundoff of an activation dtype (fp32 2^-24, bf16 2^-8, fp16 2^-11): the relative error of one rounding to nearest. */
double act_unit_roundoff(uint32_t dtype);
/** n fp32 values converted to an array of dtype (malloc'd). */
void *act_encode(const float *src, size_t n, uint32_t dtype);

/** Allocates and fills the sources of a problem whose shape fields are set. */
void problem_fill(struct attn_problem *pb, struct test_rng *rng, float amplitude);
void problem_free(struct attn_problem *pb);
/** Ring pages a rank needs for sequence lengths up to the problem's (the window plus its queries). */
uint32_t problem_ring_pages(const struct attn_problem *pb, uint32_t group_size, uint32_t interleave);

/** Query tokens of all sequences. */
uint32_t problem_tokens(const struct attn_problem *pb);
/** One line describing the problem and run, for failure messages. */
void problem_describe(const struct attn_problem *pb, const struct rank_run *run, char *buf, size_t len);

/**
 * The oracle for sequence b over all its tokens: out [q_len][heads][v_dim],
 * lse [q_len][heads], on the values the cache holds.
 */
void problem_oracle(const struct attn_problem *pb, uint32_t b, double *out, double *lse);

/**
 * Builds rank run->rank's cache (every byte poisoned with NaN patterns first, so
 * a read of anything not appended shows), appends its tokens with dcpk_kv_append,
 * runs dcpk_attn (and dcpk_merge over splits) and writes its partial result. With
 * pb->ring, only the tokens a ring of problem_ring_pages() pages keeps are appended
 * (older ones are overwritten in order, as an engine's ring would be); with
 * pb->num_topk it runs dcpk_sparse_attn instead (no split-KV).
 */
void rank_attention(const struct attn_problem *pb, const struct rank_run *run,
                    struct test_rng *rng, const struct attn_output *dst);

/**
 * Where run_kernel runs a launch instead of the CPU implementation: NULL (the
 * default) for the CPU; tests/kernels_build sets it to run the GPU entries on its
 * emulator. It runs the whole launch and returns 1, or returns 0 to leave the
 * launch to the CPU implementation. run_kernel_with another implementation than
 * the family's own never goes there.
 */
extern int (*harness_launch)(enum dcpk_kernel_id id, const void *params);

/**
 * Failed checks of the harness (check_against_oracle, the group harness): -1 (the
 * default) fails the test at the first; a test that expects failures (a mutant
 * kernel) sets it to 0 and reads back how many checks failed.
 */
extern int harness_soft_failures;
/** A failed check: fails the test, or counts it (harness_soft_failures >= 0). */
void harness_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/**
 * Runs every work item of a launch of kernel family id through the table
 * (dcpk_kernels), in a few random [begin, end) pieces, with exactly
 * scratch_bytes() of scratch followed by a guard that must stay intact.
 */
void run_kernel(enum dcpk_kernel_id id, const void *params, struct test_rng *rng);

/** run_kernel with another implementation of the family's work items. */
void run_kernel_with(enum dcpk_kernel_id id, dcpk_cpu_fn fn, const void *params, struct test_rng *rng);

/**
 * Checks a result against the oracle: heads [head0, head0 + nheads) of every
 * query token, laid out in chunks of hpc heads as res says. Fails the test on a
 * NaN where the oracle has none, on a row the oracle makes NaN (a NaN reached it)
 * that is not NaN in its LSE and every output element, on a row that sees no key
 * but is not exactly 0 / -inf, on an LSE off by more than 1e-4 * (1 + |lse|), or on
 * a relative L2 error of the other rows' outputs above tol. Returns that error.
 * desc names the case in failure messages.
 */
double check_against_oracle(const struct attn_problem *pb, uint32_t head0, uint32_t nheads, uint32_t hpc,
                            const struct attn_output *res, double tol, const char *desc);

#endif /* DCP_TEST_ATTN_HARNESS_H */
