/*
 * synthetic.h: seeded synthetic data and dtype rounding, for tools, tests and
 * benchmarks that need inputs without a model (dcp-run run/bench/replay, the GPU
 * check). Values depend only on (seed, token key, global head, index), so every
 * rank and every backend produces the same numbers, and a float64 reference can
 * be computed on the host from the exact values the cache holds.
 */
#ifndef DCP_SYNTHETIC_H
#define DCP_SYNTHETIC_H

#include "dcp/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* DCP_SYNTHETIC_H */
