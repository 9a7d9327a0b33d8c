/*
 * ref_kernels.cu: the reference kernels of the GPU check (dcp_kernels/ref.h),
 * compiled into their own fatbin (dcp_ref_kernels.fatbin), never embedded in the
 * library. Benchmarks, not part of the runtime: a read-only stream for the
 * memory bandwidth and an mma.sync loop for the tensor-core peak, each with a
 * result the check can verify.
 */
#include <stdint.h>

#include "dcp_kernels/ref.h"

/* 4 independent 16-byte loads per thread per round: enough bytes in flight to
 * saturate HBM with one block of 256 threads per few SMs. */
#define REF_READ_UNROLL 4

extern "C" __global__ void __launch_bounds__(DCPK_REF_THREADS)
dcpk_ref_read(const struct dcpk_ref_read_params p)
{
    if (blockDim.x != DCPK_REF_THREADS || gridDim.x != p.blocks)
        return; /* the check sees partial[] unwritten */
    const uint4 *src = reinterpret_cast<const uint4 *>(p.src);
    const uint64_t stride = (uint64_t)p.blocks * DCPK_REF_THREADS;
    uint64_t i = (uint64_t)blockIdx.x * DCPK_REF_THREADS + threadIdx.x;
    uint64_t sum = 0;
    for (; i + (REF_READ_UNROLL - 1) * stride < p.n16; i += REF_READ_UNROLL * stride) {
        uint4 v[REF_READ_UNROLL];
#pragma unroll
        for (int k = 0; k < REF_READ_UNROLL; k++)
            v[k] = __ldcs(src + i + k * stride); /* streaming: read once, evict first */
#pragma unroll
        for (int k = 0; k < REF_READ_UNROLL; k++)
            sum += (uint64_t)v[k].x + v[k].y + v[k].z + v[k].w;
    }
    for (; i < p.n16; i += stride) {
        const uint4 v = __ldcs(src + i);
        sum += (uint64_t)v.x + v.y + v.z + v.w;
    }
    /* Block sum: warps by shuffles, then the first warp over the warps' sums. */
    __shared__ uint64_t warp_sum[DCPK_REF_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0)
        warp_sum[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t total = 0;
        for (unsigned w = 0; w < DCPK_REF_THREADS / 32; w++)
            total += warp_sum[w];
        reinterpret_cast<uint64_t *>(p.partial)[blockIdx.x] = total;
    }
}

extern "C" __global__ void __launch_bounds__(DCPK_REF_THREADS)
dcpk_ref_mma(const struct dcpk_ref_mma_params p)
{
    if (blockDim.x != DCPK_REF_THREADS || gridDim.x != p.blocks)
        return; /* the check sees out[] unwritten */
    /* Fragments: A is 4 registers of 2 bf16, B 2 registers; every element the same. */
    const uint32_t a = (uint32_t)p.a_bits * 0x10001u, b = (uint32_t)p.b_bits * 0x10001u;
    float c[DCPK_REF_MMA_CHAINS][4];
#pragma unroll
    for (unsigned k = 0; k < DCPK_REF_MMA_CHAINS; k++)
        c[k][0] = c[k][1] = c[k][2] = c[k][3] = 0.0f;
    for (uint64_t it = 0; it < p.iterations; it++) {
#pragma unroll
        for (unsigned k = 0; k < DCPK_REF_MMA_CHAINS; k++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                         : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                         : "r"(a), "r"(a), "r"(a), "r"(a), "r"(b), "r"(b));
    }
    float *out = reinterpret_cast<float *>(p.out) +
                 ((uint64_t)blockIdx.x * DCPK_REF_THREADS + threadIdx.x) * DCPK_REF_MMA_OUT_PER_THREAD;
#pragma unroll
    for (unsigned k = 0; k < DCPK_REF_MMA_CHAINS; k++)
#pragma unroll
        for (unsigned j = 0; j < 4; j++)
            out[k * 4 + j] = c[k][j];
}
