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

/*
 * The KV cache and wire element types, one row each (docs/design.md §10):
 *   X(NAME, name, bytes, scaled, wire, codec)
 *   name:   as configs and dcp_dtype_name() spell it;
 *   bytes:  per element;
 *   scaled: stored as value x (1 / kv_scale), read back x kv_scale;
 *   wire:   allowed as parallel.comm_dtype (the wire types come first);
 *   codec:  its element codec in dcp_kernels/convert.h, dcpk_<codec>_load() and
 *           dcpk_<codec>_store(), from which dcpk_load_as_f32()/dcpk_store_as()
 *           and every kernel's generic path are generated.
 * enum dcp_dtype (include/dcp/deployment.h) has the same values: static asserts
 * in runtime/config/names.c tie every row to it. A new dtype is a row here, its
 * codec in convert.h and its value in enum dcp_dtype; vectorised decoders
 * (ptx/cpu/simd.h, device.cuh unpack4) and tensor-core entries (variants.h) are
 * optional fast paths that fall back to the codec.
 */
#define DCPK_DTYPES(X)                          \
    X(FP32, fp32, 4, 0, 1, f32)                 \
    X(BF16, bf16, 2, 0, 1, bf16)                \
    X(FP16, fp16, 2, 0, 1, fp16)                \
    X(FP8_E4M3, fp8_e4m3, 1, 1, 0, fp8e4m3)

/** Element types, in DCPK_DTYPES order. */
enum dcpk_dtype {
#define DCPK_DTYPE_ENUM_(NAME, name, bytes, scaled, wire, codec) DCPK_##NAME,
    DCPK_DTYPES(DCPK_DTYPE_ENUM_)
#undef DCPK_DTYPE_ENUM_
    DCPK_DTYPE_COUNT
};

/** Bytes per element of a dcpk_dtype (0 for an unknown one). */
DCPK_HD uint32_t dcpk_dtype_size(uint32_t dtype)
{
#define DCPK_DTYPE_SIZE_(NAME, name, bytes, scaled, wire, codec) dtype == DCPK_##NAME ? (uint32_t)(bytes) :
    return DCPK_DTYPES(DCPK_DTYPE_SIZE_) 0u;
#undef DCPK_DTYPE_SIZE_
}

/** Whether a dtype is stored scaled by kv_scale (fp8). */
DCPK_HD int dcpk_dtype_scaled(uint32_t dtype)
{
#define DCPK_DTYPE_SCALED_(NAME, name, bytes, scaled, wire, codec) ((scaled) && dtype == DCPK_##NAME) ||
    return DCPK_DTYPES(DCPK_DTYPE_SCALED_) 0;
#undef DCPK_DTYPE_SCALED_
}

/** Number of wire dtypes (the first rows of DCPK_DTYPES). */
enum {
#define DCPK_DTYPE_WIRE_(NAME, name, bytes, scaled, wire, codec) +(wire)
    DCPK_WIRE_DTYPE_COUNT = 0 DCPK_DTYPES(DCPK_DTYPE_WIRE_)
#undef DCPK_DTYPE_WIRE_
};
#define DCPK_DTYPE_WIRE_FIRST_(NAME, name, bytes, scaled, wire, codec) \
    DCPK_STATIC_ASSERT((wire) == ((int)DCPK_##NAME < (int)DCPK_WIRE_DTYPE_COUNT), "wire dtypes must come first: " #name);
DCPK_DTYPES(DCPK_DTYPE_WIRE_FIRST_)
#undef DCPK_DTYPE_WIRE_FIRST_

/**
 * Whether a dtype may hold activations: queries, outputs, partial outputs and the
 * K/V rows appended (fp32, bf16, fp16: the wire dtypes, the rows marked wire above).
 * The kernels refuse any other value in their activation dtype fields (params.h).
 */
DCPK_HD int dcpk_act_dtype_ok(uint32_t dtype)
{
    return dtype < (uint32_t)DCPK_WIRE_DTYPE_COUNT;
}

#endif /* DCPK_COMMON_H */
