/*
 * run_common.h: the pieces of `dcp-run run`: requests, engine set-up and
 * admission, synthetic Q/K/V, and the float64 correctness check.
 */
#ifndef DCP_CLI_RUN_COMMON_H
#define DCP_CLI_RUN_COMMON_H

#include <stdbool.h>

#include "dcp/dcp.h"
#include "options.h"

#define DCP_CLI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DCP_CLI_MAX(a, b) ((a) > (b) ? (a) : (b))

/** The requests offered to a run. */
struct run_requests {
    uint32_t count;
    uint64_t *len;        ///< Context length of each request.
    char describe[160];   ///< "contexts 4,096 / 16,384 tokens, cycled" or "trace FILE".
};

/** Builds the request list from the workload (trace file or cycled context lengths). */
int run_requests_load(struct run_requests *r, const dcp_deployment *dep, uint32_t count_override);
void run_requests_free(struct run_requests *r);

/** Result of the correctness check. */
struct check_result {
    uint64_t rows;        ///< Output rows compared.
    double max_rel_err;   ///< max ||o - ref|| / ||ref|| over rows.
    double max_lse_err;   ///< max |lse - ref_lse| over rows with finite LSE.
    bool pass;            ///< Every row within tolerance and finite.
};

/** Most layers the check compares: the first and the last, and the first of each layer kind. */
#define RUN_CHECKED_MAX 5

/** One local rank's buffers (backend memory) and its sampled outputs (host). */
struct rank_io {
    void *q, *k, *v, *out, *lse;
    void *topk;           ///< sparse_topk: int32 [T][K], the caller's lists (mode a) or the selected ones (mode b).
    void *ik, *iq, *iw;   ///< sparse_topk, mode b: the index keys, queries and head weights of the step's tokens.
    int32_t *host_list;   ///< [T][K]: the lists of mode (a), built on the host.
    float *host_out[RUN_CHECKED_MAX];    ///< Outputs of the checked layers [T][H_l][v_dim].
    float *host_lse[RUN_CHECKED_MAX];    ///< LSEs of the checked layers [T][H_l].
    int32_t *host_topk[RUN_CHECKED_MAX]; ///< The top-k lists the checked sparse layers attended [T][K].
    uint32_t q_head0, kv_head0;
};

/** The activation dtype of the engines dcp-run creates (dcp_engine_params' default). */
#define RUN_ACT_DTYPE DCP_DTYPE_FP32

/** The dtype on the wire of the DCP layout of a deployment as dcp-run runs it (comm_dtype auto:
 *  RUN_ACT_DTYPE). */
enum dcp_dtype run_wire_dtype(const struct dcp_config *cfg);

/**
 * Tolerance of the float64 check (relative L2 per row) for a deployment: 1e-3, plus
 * 2u for a 16-bit wire (run_wire_dtype) (u = 2^-8 bf16, 2^-11 fp16, the unit roundoff
 * bound the kernel tests use): the DCP layout rounds each gathered query once and each
 * partial output once to the wire dtype, each within u relative; the synthetic scores
 * are O(1), so the query rounding moves the softmax weights by about u too.
 */
double run_check_tolerance(const struct dcp_config *cfg);

/** A run of one layout. */
struct run_setup {
    dcp_engine *engine;
    struct dcp_engine_info info;
    const struct dcp_config *cfg;
    bool mla;
    bool check;
    uint32_t q_len;
    uint64_t seed;
    double tolerance;
    uint32_t rank_begin;
    struct rank_io *io;     ///< [info.num_local_ranks]
    uint32_t admitted;
    uint32_t *seq;          ///< [admitted] sequence ids
    uint64_t *req_len;      ///< [admitted] prefill lengths
    uint32_t step_tokens;   ///< Tokens of the current step.
    uint32_t checked_layers[RUN_CHECKED_MAX];
    uint32_t num_checked;
    uint32_t max_topk;      ///< Largest top-k of the sparse layers (0: none).
    float **sinks;          ///< [layers] the sink logits given at creation (layers with a sink), else NULL.
    uint32_t sink_layers;   ///< Entries of sinks: the engine's layers (--layers may run fewer than the model's).
};

/**
 * Creates the engine for one layout (dcp, optional layer count and KV budget),
 * admits requests in order while their blocks (for the whole run) fit, creates
 * their sequences and the per-rank buffers.
 */
int run_setup_create(struct run_setup *s, const dcp_deployment *dep, uint32_t dcp, uint32_t layers,
                     double kv_budget_bytes, const struct run_requests *reqs, uint32_t steps,
                     uint32_t prefill_step_tokens, bool check);
void run_setup_destroy(struct run_setup *s);

/** Fills the rank's K (and V) for the step's T tokens of layer with seeded values. */
int run_fill_kv(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer, uint32_t T);
/** Fills the rank's queries for the step's T tokens of layer. */
int run_fill_q(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer, uint32_t T);
/** sparse_topk with sparse_index sharded: fills the rank's index keys of the step's T tokens of layer. */
int run_fill_index_k(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer, uint32_t T);
/**
 * The layer kind's inputs of one attention call (docs/design.md §13) into *x: a
 * sparse_topk layer's lists (mode a: each query token at position p attends K
 * positions spread evenly over [0, p], all of them when p < K) or its index queries and
 * weights (mode b, with the selection returned in io->topk); a sink's logits were given
 * at creation.
 */
int run_layer_inputs(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer, uint32_t T,
                     struct dcp_attention_extra *x);
/**
 * Fills q with the seeded queries dcp_rank_attention() expects of rank for T tokens
 * whose keys are row_keys (backend memory): its own heads, or with replicate_q every
 * gathered head of its DCP group ([dcp][T][H_l][qk], chunk c = group rank c's heads).
 */
int run_fill_queries(dcp_rank *rank, const struct dcp_engine_info *in, void *q, uint64_t seed, const void *row_keys,
                     uint32_t T);
/** Query buffer bytes one rank needs for T tokens (replicate_q: every gathered head). */
size_t run_query_bytes(const struct dcp_engine_info *in, uint32_t T);

/** true for the layers whose outputs the check compares (the first and the last). */
bool run_is_checked_layer(const struct run_setup *s, uint32_t layer);
/** Copies the rank's output and LSE of a checked layer to the host (and the top-k lists of a sparse one). */
int run_download_outputs(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer,
                         uint32_t T);
/** Compares the downloaded outputs of the last decode step with float64 dense attention. */
int run_check_outputs(struct run_setup *s, struct check_result *res);

/** Nearest-rank percentile p in [0, 1] of n values (sorts a copy). */
double run_percentile(const double *v, uint32_t n, double p);

/** Replaces *dep by a copy whose runtime.backend is backend. */
int cli_override_backend(dcp_deployment **dep, enum dcp_backend_kind backend);

/** Buffer size for cli_layout_name(). */
#define CLI_LAYOUT_NAME_LEN 48
/** What a layout is, in words, for messages and column heads: "TP baseline (dcp=1)" or
 *  "DCP layout (dcp=4)". Returns buf. */
const char *cli_layout_name(char buf[CLI_LAYOUT_NAME_LEN], uint32_t dcp);

/** After err from creating or filling an engine: if it is DCP_EDEVMEM, says on stderr
 *  that --kv-mb sets a smaller KV budget, with a value that fits this machine's free
 *  memory when the backend is the CPU one. kv_mb: the --kv-mb given (0: none). */
void cli_hint_kv_mb(const char *command, int err, const struct dcp_config *cfg, uint64_t kv_mb);

/** CLI_EXIT_OK if --layers (0: all) is within the model's layers, else CLI_EXIT_USAGE after
 *  saying so on stderr ("dcp-run COMMAND: --layers N: the model (FILE) has M layers"). */
int cli_check_layers(const char *command, uint32_t layers, const char *file, const struct dcp_config *cfg);

/** Loads the deployment file of an executing command (run, replay), applies --backend
 *  and checks --layers against it. Returns CLI_EXIT_OK with *dep set, or the exit
 *  status (CLI_EXIT_FAIL, CLI_EXIT_USAGE) after saying why, with *dep NULL. */
int cli_open_exec_deployment(const char *command, const char *file, const struct cli_exec_opts *exec,
                             dcp_deployment **dep);

#endif /* DCP_CLI_RUN_COMMON_H */
