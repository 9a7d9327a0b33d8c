/*
 * dcp_kernels/common.h: what both nvcc (CUDA C++) and the C compiler see.
 *
 * Kernel-side helpers are DCPK_HD functions: __host__ __device__ inline under
 * nvcc, static inline in C. Only fixed-width types; no libc beyond <stdint.h>.
 */
#ifndef DCPK_COMMON_H
#define DCPK_COMMON_H

#include <stdint.h>

#if defined(__CUDACC__)
#define DCPK_HD static __host__ __device__ __forceinline__
#else
#define DCPK_HD static inline
#endif

#if defined(__cplusplus)
#define DCPK_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define DCPK_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/** Element types; the values equal those of enum dcp_dtype in include/dcp/deployment.h. */
enum dcpk_dtype {
    DCPK_FP32 = 0,
    DCPK_BF16 = 1,
    DCPK_FP16 = 2,
    DCPK_FP8_E4M3 = 3,
};

/** Bytes per element of a dcpk_dtype. */
DCPK_HD uint32_t dcpk_dtype_size(uint32_t dtype)
{
    return dtype == DCPK_FP32 ? 4u : dtype == DCPK_FP8_E4M3 ? 1u : 2u;
}

#endif /* DCPK_COMMON_H */
