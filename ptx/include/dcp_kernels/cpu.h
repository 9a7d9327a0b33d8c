/*
 * dcp_kernels/cpu.h: the CPU implementation of every kernel (C only).
 *
 * Each kernel's work is a list of independent work items, numbered as the CUDA
 * grid is: item = (z * grid_y + y) * grid_x + x. dcpk_<k>_grid() gives the grid of
 * a launch; dcpk_<k>_cpu(p, begin, end, scratch) does items [begin, end). The host
 * backend spreads items over worker threads; the test double of libcuda runs a
 * cuLaunchKernel of "dcpk_<k>" or "dcpk_<k>__<variant>" through the same function.
 * Scratch is per calling thread, dcpk_<k>_scratch_bytes() large (may be 0); the
 * CPU implementations never allocate.
 */
#ifndef DCPK_CPU_H
#define DCPK_CPU_H

#include <stddef.h>

#include "dcp_kernels/params.h"

/** A launch grid. Items = x * y * z. */
struct dcpk_grid {
    uint32_t x, y, z;
};

/** Signature shared by all CPU implementations (params is the kernel's struct). */
typedef void (*dcpk_cpu_fn)(const void *params, uint64_t begin, uint64_t end, void *scratch);
/** Grid of a launch, from its params. */
typedef struct dcpk_grid (*dcpk_grid_fn)(const void *params);
/** Scratch bytes one thread needs for a launch, from its params. */
typedef size_t (*dcpk_scratch_fn)(const void *params);

/** One kernel family. */
struct dcpk_kernel_desc {
    const char *name;          ///< Family name: GPU entry points are "dcpk_<name>" or "dcpk_<name>__<variant>".
    size_t params_size;        ///< sizeof its params struct.
    dcpk_cpu_fn cpu;           ///< CPU implementation.
    dcpk_grid_fn grid;         ///< Grid of a launch.
    dcpk_scratch_fn scratch;   ///< Scratch per thread.
};

/** Kernel families: X(name, params struct). */
#define DCPK_KERNEL_FAMILIES(X)              \
    X(kv_append, dcpk_kv_append_params)      \
    X(attn, dcpk_attn_params)                \
    X(merge, dcpk_merge_params)              \
    X(lse_scale, dcpk_lse_scale_params)      \
    X(reduce, dcpk_reduce_params)            \
    X(fill, dcpk_fill_params)                \
    X(uv_proj, dcpk_uv_proj_params)          \
    X(sink, dcpk_sink_params)                \
    X(sparse_attn, dcpk_sparse_attn_params)  \
    X(index_score, dcpk_index_score_params)  \
    X(topk, dcpk_topk_params)

#define DCPK_DECLARE_CPU(name, type)                                                         \
    struct dcpk_grid dcpk_##name##_grid(const void *params);                                \
    size_t dcpk_##name##_scratch_bytes(const void *params);                                 \
    void dcpk_##name##_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch);
DCPK_KERNEL_FAMILIES(DCPK_DECLARE_CPU)
#undef DCPK_DECLARE_CPU

/** Identifiers of the families, in DCPK_KERNEL_FAMILIES order. */
enum dcpk_kernel_id {
#define DCPK_ENUM(name, type) DCPK_KERNEL_##name,
    DCPK_KERNEL_FAMILIES(DCPK_ENUM)
#undef DCPK_ENUM
    DCPK_KERNEL_COUNT
};

/** The table of families, indexed by enum dcpk_kernel_id. */
extern const struct dcpk_kernel_desc dcpk_kernels[DCPK_KERNEL_COUNT];

/** Reference kernels of the GPU check (dcp_kernels/ref.h): ref_read, ref_mma. */
#define DCPK_REF_KERNEL_COUNT 2
/** Their CPU implementations (ptx/cpu/ref.c), for the test doubles; the runtime never launches them. */
extern const struct dcpk_kernel_desc dcpk_ref_kernels[DCPK_REF_KERNEL_COUNT];

/**
 * Finds the family of a GPU entry point name ("dcpk_attn__mla_bf16" -> attn;
 * "dcpk_ref_read" -> the reference kernel). Returns NULL if the name is not a
 * kernel of ours.
 */
const struct dcpk_kernel_desc *dcpk_kernel_by_entry_name(const char *entry);

/** Items of a grid. */
static inline uint64_t dcpk_grid_items(struct dcpk_grid g)
{
    return (uint64_t)g.x * g.y * g.z;
}

#endif /* DCPK_CPU_H */
