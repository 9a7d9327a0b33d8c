/*
 * group_harness.h: a DCP group emulated on one machine, for the kernel tests:
 *   - attention: a problem (attn_harness.h) sharded over N ranks with interleave I,
 *     every rank's attention over all gathered heads in the chunked layout, then
 *     both merge schemes (docs/design.md §3: a2a, rank d merges chunk d of every
 *     rank's partials with dcpk_merge; ag_rs, every rank scales its partials with
 *     dcpk_lse_scale and chunk d is summed over ranks with dcpk_reduce), the sink
 *     applied once to each destination's merged rows, and every destination
 *     checked against the single-rank oracle over the whole sequence;
 *   - the DSA indexer: index keys sharded like the KV, every rank's scores
 *     (dcpk_index_score) and local top-k (dcpk_topk over its keys), the gathered
 *     candidates merged into the global top-k (dcpk_topk over N sources) on every
 *     rank, checked against the oracle's scores and top-k.
 * Every kernel runs through run_kernel (attn_harness.h): on the CPU, or where
 * harness_launch says (tests/kernels_build runs the GPU entries on its emulator).
 */
#ifndef DCP_TEST_GROUP_HARNESS_H
#define DCP_TEST_GROUP_HARNESS_H

#include "attn_harness.h"

/** Relative L2 error of the merged outputs that run_problem accepts (fp32 kernels). */
#define GROUP_TOLERANCE 1e-5

/** Optional limits of random_problem_shaped (NULL or 0 fields: the defaults). */
struct problem_limits {
    const uint32_t *dims; ///< GQA head dims to draw from (default 64, 40, 128).
    uint32_t n_dims;
    uint32_t max_len;     ///< Longest sequence (default 300).
    int mla;              ///< 1: MLA, 0: GQA, -1: either (a quarter MLA).
};

/** A random problem for a group of n ranks (gathered heads split evenly), filled. */
void random_problem(struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t block, struct test_rng *rng);
void random_problem_shaped(struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t block,
                           const struct problem_limits *lim, struct test_rng *rng);

/** A page size interleave il fits (I <= B, B % I == 0; il 0: I = B), at random. */
uint32_t random_block(struct test_rng *rng, uint32_t il);

/**
 * Fills the top-k rows of a problem (pb->num_topk set); shape 0: random positions
 * (some past the query, some repeated -1), 1: only positions rank `only` owns,
 * 2: empty (all -1), 3: every position.
 */
void random_topk(struct attn_problem *pb, uint32_t n, uint32_t il, int shape, uint32_t only, struct test_rng *rng);

/**
 * Runs a problem over a group of n ranks with interleave il, each rank with
 * `splits` split-KV (0: 1 to 3 at random), merges it both ways and checks every
 * destination against the oracle (relative L2 error of the outputs within tol).
 */
void run_problem_tol(const struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t splits, double tol,
                     struct test_rng *rng);
/** run_problem_tol with GROUP_TOLERANCE. */
void run_problem(const struct attn_problem *pb, uint32_t n, uint32_t il, uint32_t splits, struct test_rng *rng);

/**
 * One random indexer problem over a group of n ranks (interleave il, pages of
 * block tokens): every rank's scores against the oracle's, the global top-k the
 * same on every rank and the oracle's (ties by the lower position).
 */
void run_index_case(uint32_t n, uint32_t il, uint32_t block, struct test_rng *rng);

#endif /* DCP_TEST_GROUP_HARNESS_H */
