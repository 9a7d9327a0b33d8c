/*
 * perf_inputs.h: the performance model's inputs on the command line of plan and
 * replay: --calibration FILE (written by `dcp-run calibrate`), --kv-efficiency,
 * --gemm-efficiency and --no-cuda-graphs, and how the tools say which inputs were
 * calibrated and which are defaults.
 */
#ifndef DCP_CLI_PERF_INPUTS_H
#define DCP_CLI_PERF_INPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "dcp/dcp.h"
#include "json.h"
#include "options.h"

/** What the command line says about the model's inputs. */
struct cli_perf_opts {
    const char *calibration;   ///< --calibration FILE, or NULL.
    double kv_efficiency;      ///< --kv-efficiency (0: not given).
    double gemm_efficiency;    ///< --gemm-efficiency (0: not given).
    bool eager;                ///< --no-cuda-graphs.
};

/** The table entries of struct cli_perf_opts at field of type; help_prefix starts each help line. */
#define CLI_PERF_OPTIONS(type, field, help_prefix)                                                              \
    {"--calibration", CLI_ARG_STRING, "FILE",                                                                   \
     help_prefix "performance-model inputs measured by `dcp-run calibrate`", .offset = offsetof(type, field.calibration)}, \
    {"--kv-efficiency", CLI_ARG_REAL, "X",                                                                      \
     help_prefix "fraction of HBM bandwidth decode attention reaches (default 0.9)", 1e-3, 1,                   \
     .offset = offsetof(type, field.kv_efficiency)},                                                            \
    {"--gemm-efficiency", CLI_ARG_REAL, "X",                                                                    \
     help_prefix "fraction of the tensor peak GEMMs reach (default 0.6)", 1e-3, 1,                              \
     .offset = offsetof(type, field.gemm_efficiency)},                                                          \
    {"--no-cuda-graphs", CLI_ARG_FLAG, NULL, help_prefix "price decode steps as launched eagerly",               \
     .offset = offsetof(type, field.eager)}

/** Clears o (nothing given). */
void cli_perf_opts_init(struct cli_perf_opts *o);

/**
 * The model's inputs: the defaults, then the calibration file, then the options.
 * Prints why and returns nonzero when the file cannot be used.
 */
int cli_perf_params(const struct cli_perf_opts *o, const char *command, struct dcp_perf_params *p);

/** Prints which inputs were calibrated (and where), set by an option, or defaults. */
void cli_perf_print_inputs(const struct cli_perf_opts *o, const struct dcp_perf_params *p, FILE *out);

/** The same as JSON: "perf_inputs": {name: {"value": v, "source": "default"|"calibration"|"option"}},
 *  "calibration": FILE or null, "calibrated_on": the backend or null, "collective_fits": [...]. */
void cli_perf_json_inputs(struct json_writer *w, const struct cli_perf_opts *o, const struct dcp_perf_params *p);

#endif /* DCP_CLI_PERF_INPUTS_H */
