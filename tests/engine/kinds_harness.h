/*
 * kinds_harness.h: a DCP engine whose model mixes layer kinds (docs/design.md §13:
 * sliding windows replicated or sharded, sinks, sparse top-k in both modes, KV-free
 * layers), driven through the public API on seeded data with a float64 mirror of
 * every cached value, and every attention result of every rank checked against the
 * float64 oracle of its layer's kind (tests/common/oracle.h). The backend is the
 * fixture's (DCP_TEST_BACKEND), so the same cases run on the CUDA doubles once the
 * CUDA backend runs the kinds: a backend that refuses them makes kinds_create return
 * NULL (the suite then skips).
 *
 * Values are exact in the cache and activation dtypes (multiples of 1/8 in [-2, 2]),
 * so the only differences from the oracle are the kernels' fp32 arithmetic.
 */
#ifndef DCP_TEST_KINDS_HARNESS_H
#define DCP_TEST_KINDS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine_fixture.h"

/** A case: the model shape, its layer pattern and the engine's limits. */
struct kinds_case {
    struct fixture_shape shape;                      ///< layers = the engine's layer count.
    struct dcp_layer_kind pattern[DCP_MAX_LAYER_PATTERN];
    uint32_t pattern_len;
    enum dcp_window_kv window_kv;
    enum dcp_sparse_index sparse_index;
    uint32_t index_heads, index_dim;                 ///< 0: 2 and 16.
    bool sinks_at_creation;                          ///< dcp_engine_params.sinks; else per call.
    uint32_t max_batch, max_query_tokens, max_seqs;  ///< 0: 4, 12, 8.
};

struct kinds;

/** Creates the engine (fails the test on error; NULL when the backend does not run these kinds). */
struct kinds *kinds_create(const struct kinds_case *c, uint64_t seed);

/** Frees everything and sets *k to NULL. */
void kinds_destroy(struct kinds **k);

/** A new sequence (empty); returns its index. */
uint32_t kinds_seq_create(struct kinds *k);

/** The engine (for calls the harness does not make). */
dcp_engine *kinds_engine(struct kinds *k);

/** The engine's id of sequence i (kinds_seq_create's index). */
uint32_t kinds_seq_id(const struct kinds *k, uint32_t i);

/**
 * One step: seqs[i] grows by grow[i] tokens (fresh random K/V, index keys and
 * queries); every layer appends, and when the step's tokens fit max_query_tokens every
 * attention layer attends and every rank's result is checked against the oracle.
 * one_rank >= 0: the caller-given top-k lists (sparse_index caller) select only
 * positions group rank one_rank owns. Returns whether it attended.
 */
bool kinds_step(struct kinds *k, uint32_t count, const uint32_t *seqs, const uint32_t *grow, int one_rank);

/**
 * Makes b (sparse_index caller) attend the top-k lists that a (sparse_index sharded,
 * the same case otherwise) selected in its last step, instead of lists of its own:
 * kinds_step(b) then requires every output and LSE of every layer and rank to equal
 * a's bit for bit (modes (a) and (b) give the same bits).
 */
void kinds_follow(struct kinds *b, const struct kinds *a);

/** What the checks saw, over every harness of the process. */
struct kinds_stats {
    uint64_t rows[DCP_LAYER_NONE + 1]; ///< (token, head) rows checked per layer kind.
    uint64_t sink_rows;                ///< Rows of layers with a sink.
    uint64_t empty_rank_rows;          ///< Rows some rank attended with no key of its own (LSE -inf there).
    uint64_t same_bits_rows;           ///< Rows found bit-identical to another engine's (kinds_follow).
    uint64_t topk_checked;             ///< Selected top-k entries compared with the oracle's (mode b).
    double worst_out;                  ///< Worst relative L2 error of a row block against the oracle.
};

const struct kinds_stats *kinds_get_stats(void);

#endif /* DCP_TEST_KINDS_HARNESS_H */
