/*
 * dcp_harness.h: a DCP engine and its TP baseline driven in lockstep through the
 * public API on the same seeded data, with a dense float64 host copy of every
 * sequence's cached K/V (the values the cache holds, quantized like the cache),
 * and every attention result of every rank checked against the oracle over the
 * whole sequence and against the baseline. A NaN can be planted in a token's K or
 * V (harness_poison): the rows that see it must be NaN in their LSE and every
 * output element, exactly where the oracle has them NaN (docs/design.md §4).
 *
 * Deployments with parallel.replicate_q get every gathered head's queries per rank
 * ([dcp][T][H_l][qk]); with parallel.merge_after_uv (MLA) the harness makes a random
 * W_UV per layer, passes it to both engines and projects the oracle's latent output
 * with it in float64.
 *
 * The engines may take q, k, v and out in bf16/fp16 (harness_config.act_dtype):
 * the harness rounds its random inputs to that dtype (the oracle sees exactly what
 * the engine reads), converts them as it uploads and the outputs as it downloads,
 * and allows one more rounding of the output (unit roundoff) in every comparison.
 * A DCP deployment with a 16-bit parallel.comm_dtype rounds the partial outputs on
 * the wire: the bound grows by what those roundings add (dcp_harness.c wire_tol), and
 * gathered queries are generated representable in the wire dtype.
 *
 * A step grows some sequences by a few tokens each: the engine appends their K/V
 * (uploaded by every rank for its own KV heads) and, when the step's tokens fit
 * max_query_tokens, they are also the step's queries (prefill chunk, decode or
 * speculative tokens) and the results are checked. Larger steps only append.
 */
#ifndef DCP_TEST_DCP_HARNESS_H
#define DCP_TEST_DCP_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine_fixture.h"

/** What to build. */
struct harness_config {
    struct fixture_shape shape;
    uint32_t max_live;          ///< Most live sequences at once (sizes the KV budgets).
    uint32_t max_batch;
    uint32_t max_query_tokens;  ///< Steps with more tokens only append.
    uint32_t max_step_tokens;
    uint64_t max_context;
    uint64_t num_blocks;        ///< The DCP engine's logical blocks; 0 = max_live sequences of max_context.
    bool baseline;              ///< Also run the TP baseline (dcp = 1) and compare (ignored when dcp = 1).
    uint32_t splits;            ///< Split-KV factor every step of the DCP engine uses (0: the engine chooses), within its workspace.
    bool profile;               ///< Create the engines with profile = true (dcp_rank_get_profile()).
    enum dcp_dtype act_dtype;   ///< Activation dtype of both engines (0 = fp32).
};

/** Results over every harness of the process, for the final report. */
struct harness_stats {
    uint64_t checks[4];         ///< Sequence-layer results compared with the oracle, per KV dtype.
    uint64_t rows[4];           ///< (token, head) rows among them.
    uint64_t empty_shard_checks; ///< Checks of a sequence shorter than N * I with N > 1 (some rank empty).
    uint64_t multi_query_checks; ///< Checks with q_len > 1.
    uint64_t baseline_checks;   ///< Results compared with the TP baseline.
    uint64_t split_steps;       ///< Attended steps whose DCP engine used split-KV (splits > 1).
    uint64_t nan_rows;          ///< (token, head) rows a planted NaN reached (NaN in the oracle), found NaN.
    uint32_t most_splits;       ///< Largest split-KV factor an attended step used.
    double worst_out[4];        ///< Worst relative L2 error of an output vs the oracle, per dtype.
    double worst_lse[4];        ///< Worst |lse - oracle| / (1 + |oracle|), per dtype.
    double worst_baseline[4];   ///< Worst relative L2 difference DCP vs TP baseline, per dtype.
};

struct harness;

/** Creates the engines (fails the test on error); label names the case in messages. */
struct harness *harness_create(const struct harness_config *cfg, uint64_t seed, const char *label);

/** Frees everything and sets *h to NULL. */
void harness_destroy(struct harness **h);

/** The deployment both engines run. */
const dcp_deployment *harness_deployment(const struct harness *h);

/** The DCP engine (baseline = false) or the baseline (NULL when there is none). */
dcp_engine *harness_engine(struct harness *h, bool baseline);

/** Creates an empty sequence in every engine; returns its handle. */
uint32_t harness_seq_create(struct harness *h);

/** Releases a sequence everywhere. */
void harness_seq_release(struct harness *h, uint32_t seq);

/** Truncates a sequence everywhere (must succeed). */
void harness_seq_truncate(struct harness *h, uint32_t seq, uint64_t len);

/** Forks a sequence everywhere (its length must be block aligned); returns the child's handle. */
uint32_t harness_seq_fork(struct harness *h, uint32_t seq);

/** The sequence's engine id in the DCP engine or the baseline. */
uint32_t harness_seq_id(const struct harness *h, uint32_t seq, bool baseline);

/** Length of a sequence. */
uint64_t harness_seq_length(const struct harness *h, uint32_t seq);

/**
 * One step: seqs[i] grows by grow[i] >= 1 tokens with fresh random K/V, in this
 * batch order. Returns whether the step attended (and was checked).
 */
bool harness_step(struct harness *h, uint32_t count, const uint32_t *seqs, const uint32_t *grow);

/**
 * Plants a NaN in position pos of sequence seq, for the step that appends it: in
 * one element of its K row (value: of its V row; MLA: of the latent part of its K
 * row) for every KV head and layer. The mirror holds the NaN too, so the oracle
 * makes NaN every row that sees the position. One planted position at a time.
 */
void harness_poison(struct harness *h, uint32_t seq, uint64_t pos, bool value);

/** Tokens one logical block of the DCP engine holds (block_size * dcp). */
uint64_t harness_tokens_per_block(const struct harness *h);

/** The accumulated statistics. */
const struct harness_stats *harness_get_stats(void);

/** Prints the statistics. */
void harness_print_stats(FILE *f);

#endif /* DCP_TEST_DCP_HARNESS_H */
