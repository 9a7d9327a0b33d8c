/*
 * replay.h: the pieces of `dcp-run replay`: one layout's run (simulated with the
 * performance model or executed on the engine), its results, and the SVG plot.
 */
#ifndef DCP_CLI_REPLAY_H
#define DCP_CLI_REPLAY_H

#include <stdbool.h>
#include <stdio.h>

#include "dcp/dcp.h"
#include "options.h"
#include "perf_inputs.h"

/** Sampled output rows must match float64 attention to this relative L2 error. */

/** Options of one replay (both layouts). */
struct replay_opts {
    const char *file;              ///< Deployment.
    const char *trace;             ///< Trace file, or NULL with synthetic > 0.
    uint32_t synthetic;            ///< Requests of a synthetic agentic trace (0: read trace).
    double synthetic_rate;         ///< Its arrivals per second (0: the generator's default).
    const char *write_trace;       ///< Write the (synthetic) trace here as JSONL.
    bool simulate, json, quiet;
    double length_scale, time_scale, output_scale;
    uint32_t limit;
    uint32_t output_tokens;        ///< --output-tokens (0: not given).
    uint32_t clients;              ///< Closed loop of this many clients (0: the trace's timestamps).
    struct cli_u32_list dcp;       ///< --dcp: DCP sizes to replay besides TP (none: the deployment's).
    struct cli_u32_list sweep;     ///< --sweep-clients: closed loops of these many clients.
    bool pd;                       ///< --pd: prefill on separate instances.
    uint32_t prefill_instances;    ///< --prefill-instances (default 1).
    uint32_t prefill_tp;           ///< --prefill-tp: GPUs of one prefill instance (0: the deployment's tp).
    const char *calibration;       ///< --calibration FILE.
    const char *plot;
    struct dcp_sched_params sched;
    struct cli_perf_opts perf;     ///< --calibration, --kv-efficiency, --gemm-efficiency, --no-cuda-graphs.
    struct dcp_perf_params model;   ///< Simulate: the performance model's inputs (from perf).
    struct cli_exec_opts exec;     ///< Execute: --layers, --kv-mb, --backend, --no-check.
};

/** A point of the timeline (after each step). */
struct replay_sample {
    double t;            ///< Trace time, seconds.
    uint32_t running;    ///< Requests admitted.
    float kv_used;       ///< Fraction of blocks held by sequences.
};

/** The correctness check of execute mode. */
struct replay_check {
    uint64_t rows;          ///< Output rows compared with float64 attention.
    uint64_t rows_cached;   ///< Of them, rows of requests served partly from the prefix cache.
    uint64_t rows_preempted; ///< Of them, rows of requests that were preempted and recomputed.
    double max_rel_err;     ///< Largest relative L2 error.
    bool pass;              ///< All within tolerance and finite.
    uint64_t digest;        ///< Sum over requests of their output digests (see replay_exec.c).
    uint64_t *request_digest; ///< [requests] per-request digest of the decode outputs kept.
};

/** What one layout did. */
struct replay_result {
    uint32_t dcp;                 ///< 1 = TP baseline.
    uint32_t tp;                  ///< GPUs.
    char backend[256];            ///< "simulated (performance model)" or the engine's backend.
    uint64_t num_blocks;          ///< Pool blocks (= KV pages per GPU).
    uint64_t tokens_per_block;    ///< Tokens one block holds.
    uint32_t requests, finished, rejected;
    uint32_t rejected_pool, rejected_context;
    uint64_t preemptions, steps, evictions;
    uint64_t output_tokens;       ///< Tokens generated.
    uint64_t prompt_tokens, cached_tokens;
    uint64_t drafted, accepted;
    uint32_t gpus;                ///< GPUs it uses: tp, plus the prefill instances' with --pd.
    uint32_t prefill_gpus;        ///< Of them, prefill instances' (0 colocated).
    double makespan;              ///< First arrival to last finish, trace seconds.
    double tok_s_gpu;             ///< output_tokens / makespan / gpus.
    double tok_s_decode_gpu;      ///< output_tokens / makespan / tp (the decode instance's GPUs).
    double ttft[3], tpot[3];      ///< p50, p90, p99 seconds.
    double conc_mean, kv_mean;    ///< Time-weighted means over the makespan.
    uint32_t conc_max;
    double kv_max;
    double wall_seconds;          ///< Wall time of the replay of this layout.
    double model_seconds[4];      ///< Simulate: summed step terms (linear, attention, comm, overhead).
    uint64_t decode_steps[2];     ///< Steps of the decode(-serving) node with decode tokens: [0] decode only,
                                  ///< [1] mixed with prefill chunks.
    double step_p50[2];           ///< Their median duration, seconds.
    uint64_t decode_tokens[2];    ///< Decode tokens of those steps.
    bool overloaded;              ///< Open loop: the last quarter's mean TTFT is over REPLAY_OVERLOAD_RATIO x the
                                  ///< first quarter's and over REPLAY_OVERLOAD_SECONDS.
    double ttft_first_quarter, ttft_last_quarter; ///< Mean TTFT of the first and last quarter (arrival order).
    struct replay_sample *samples;
    uint64_t num_samples;
    struct replay_check check;    ///< Execute mode only.
    bool executed;
};

/** Open loop: a layout falls behind its arrivals when the last quarter of the requests waits
 *  this many times longer for its first token than the first quarter ... */
#define REPLAY_OVERLOAD_RATIO 4.0
/** ... and longer than this many seconds. */
#define REPLAY_OVERLOAD_SECONDS 10.0

/**
 * Replays trace on the layout with DCP size dcp (1 = TP). With o->pd, *prefill_dep is
 * the prefill instances' deployment, made on first use (the caller destroys it).
 */
int replay_layout(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *trace,
                  uint32_t dcp, dcp_deployment **prefill_dep, struct replay_result *res);

/** The layouts of one replay (or of one point of a sweep). */
struct replay_run {
    uint32_t clients;             ///< Closed loop size (0: open loop).
    int n;                        ///< Layouts.
    struct replay_result *r;      ///< [n], TP first.
};

/** Prints the text report of one run (header, table, warnings, recommendation). */
void replay_print_text(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *t,
                       const struct replay_run *run);
/** Prints the sweep's table and recommendation. */
void replay_print_sweep(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *t,
                        const struct replay_run *runs, uint32_t num_runs);
/** Prints the JSON of a replay (runs: one run, or the sweep's points). */
void replay_print_json(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *t,
                       const struct replay_run *runs, uint32_t num_runs);

/** Writes the Pareto plot of a sweep: tok/s per GPU against TPOT p50, a line per layout. */
int replay_plot_pareto(const char *path, const char *title, const struct replay_run *runs, uint32_t num_runs);

/** Frees what replay_layout() allocated. */
void replay_result_free(struct replay_result *res);

/** Writes the SVG plot of the layouts' results. */
int replay_plot_svg(const char *path, const char *title, const struct replay_result *r, int n);

/* Execute mode (replay_exec.c): the scheduler drives the engine. */

/** One layout's engine and buffers for execute mode. */
struct replay_exec;

/** Creates the engine (dcp, layers, KV budget from o) sized for the trace. */
int replay_exec_create(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *trace,
                       uint32_t dcp, struct replay_exec **out);
/** The engine of an execution context. */
dcp_engine *replay_exec_engine(struct replay_exec *x);
/** Runs one planned step on the engine (append everywhere, attention for decodes) and
 *  checks sampled rows; *seconds is its wall time. Call before dcp_sched_complete(). */
int replay_exec_step(struct replay_exec *x, dcp_sched *s, const struct dcp_sched_step *step, double *seconds);
/** After dcp_sched_complete(): folds the kept decode outputs into the request digests. */
void replay_exec_after_complete(struct replay_exec *x, dcp_sched *s, const struct dcp_sched_step *step,
                                const uint32_t *generated_before);
/** Moves the check results into res and frees the context. */
void replay_exec_finish(struct replay_exec **x, struct replay_check *res);

#endif /* DCP_CLI_REPLAY_H */
