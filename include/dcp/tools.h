/*
 * tools.h: aids for tools, tests and benchmarks, not needed to embed the engine
 * (dcp.h does not include this header; dcp-run, the test suites and the GPU check do).
 *
 *   synthetic data   seeded values filled on the backend and their host generator,
 *                    dtype rounding for references computed from cached values
 *   rank buffers     a device-to-device copy (the bandwidth yardstick) and the keys
 *                    of a step's query tokens
 *   scheduler        an invariant check
 *   traces           writing a trace as Mooncake JSONL
 *
 * Synthetic values depend only on (seed, token key, global head, index), so every
 * rank and every backend produces the same numbers, and a float64 reference can
 * be computed on the host from the exact values the cache holds.
 */
#ifndef DCP_TOOLS_H
#define DCP_TOOLS_H

#include "dcp/engine.h"
#include "dcp/serve.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- synthetic data --------------------------------------------------------- */

/** Synthetic data description for dcp_rank_fill_synthetic(). */
struct dcp_synth_desc {
    uint64_t seed;            ///< Stream seed.
    const void *row_keys;     ///< Backend uint64 [rows] keys, or NULL to use key_base + row.
    uint64_t key_base;        ///< Key of row 0 when row_keys is NULL.
    uint32_t rows;            ///< Rows.
    uint32_t heads;           ///< Heads per row.
    uint32_t dim;             ///< Values per head.
    uint32_t head_offset;     ///< Global index of the first head (so TP shards agree).
    float amplitude;          ///< Values are uniform in [-amplitude, amplitude).
    enum dcp_dtype dtype;     ///< Element type of dst: DCP_DTYPE_FP32 (0, the default), _BF16 or _FP16
                              ///< (e.g. an engine's act_dtype); each value is rounded once to it (to
                              ///< nearest even). fp8 or another value: DCP_EINVAL.
};

/**
 * Fills dst[rows][heads][dim] (elements of desc->dtype) with seeded values on the
 * backend (no host traffic): element (r, h, d) = amplitude * u(seed, key_r,
 * head_offset + h, d), the same generator as dcp_synth_value(), rounded to the dtype
 * (dcp_dtype_round(dtype, value, 1)).
 */
DCP_API int dcp_rank_fill_synthetic(dcp_rank *rank, void *dst, const struct dcp_synth_desc *desc);

/** The generator of dcp_rank_fill_synthetic() on the host: uniform in [-1, 1). */
DCP_API float dcp_synth_value(uint64_t seed, uint64_t key, uint32_t head, uint32_t d);

/**
 * The value a KV cache of this dtype holds for value (fp8: stored as value x (1 / scale)
 * rounded to e4m3 and saturated to +-448, read back times scale, so the result lies
 * within +-448 x scale; docs/design.md §10). Lets a caller compute references from the
 * exact cached values.
 */
DCP_API float dcp_dtype_round(enum dcp_dtype dtype, float value, float scale);

/* --- rank buffers ------------------------------------------------------------ */

/**
 * Copies bytes between two backend buffers of this rank (device to device for
 * CUDA), queued like a kernel. Used by benchmarks as the bandwidth yardstick.
 */
DCP_API int dcp_rank_copy(dcp_rank *rank, void *dst, const void *src, size_t bytes);

/**
 * Backend uint64 [T] keys of the current step's query tokens:
 * dcp_token_key(seq_id, position) (geometry.h): ((uint64_t)seq_id << 40) | position, so the
 * id's top 8 bits, which hold part of its generation, drop out. Valid until the next begin_step.
 */
DCP_API const void *dcp_rank_step_token_keys(const dcp_rank *rank);

/* --- scheduler and traces ---------------------------------------------------- */

/**
 * Checks the invariants: the block manager's (refcounts recounted from the tables,
 * free + idle + used = total, no shared or published partly filled block), every
 * request in exactly one state with a sequence exactly while admitted, and the
 * counts adding up. For tests; O(blocks + requests). DCP_EINVAL with detail.
 */
DCP_API int dcp_sched_check(const dcp_sched *s);

/** Writes a trace as Mooncake JSONL (timestamps in ms, rounded). DCP_EIO on a write error. */
DCP_API int dcp_trace_write_jsonl(const struct dcp_trace *t, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* DCP_TOOLS_H */
