/*
 * dcp_kernels/ref.h: the reference (yardstick) kernels of the GPU check, built
 * into their own small fatbin (ptx/kernels/ref_kernels.cu -> dcp_ref_kernels.fatbin,
 * never embedded in the library): a read-only streaming pass, the bandwidth a
 * kernel that reads its input once can reach (a copy moves 2N bytes), and an
 * mma.sync loop, the tensor-core peak. Same ABI as params.h: one struct by value.
 * Their CPU implementations (ptx/cpu/ref.c) let the test doubles run them and
 * give the results the check compares with.
 */
#ifndef DCPK_REF_H
#define DCPK_REF_H

#include "dcp_kernels/common.h"

/** Threads per block of both reference kernels. */
#define DCPK_REF_THREADS 256u
/** Independent accumulator chains per thread of the mma loop. */
#define DCPK_REF_MMA_CHAINS 4u
/** fp32 results per thread of the mma loop: chains x the 4 accumulators of an m16n8 tile. */
#define DCPK_REF_MMA_OUT_PER_THREAD (DCPK_REF_MMA_CHAINS * 4u)
/** Flops of one mma.sync.m16n8k16 (per warp). */
#define DCPK_REF_MMA_FLOPS (2.0 * 16 * 8 * 16)

/**
 * dcpk_ref_read: reads n16 16-byte words at src once (grid-stride over blocks
 * x DCPK_REF_THREADS threads) and writes, per block, the sum of the 32-bit
 * words it read to partial[block] (uint64, wrapping). Grid (blocks, 1, 1).
 */
struct dcpk_ref_read_params {
    uint64_t src;     ///< 16-byte aligned words to read.
    uint64_t n16;     ///< Number of 16-byte words.
    uint64_t partial; ///< uint64 [blocks]: each block's sum.
    uint32_t blocks;  ///< Grid size.
    uint32_t pad_;    ///< Zero.
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_ref_read_params) == 32, "dcpk_ref_read_params ABI");

/**
 * dcpk_ref_mma: each warp runs `iterations` rounds of DCPK_REF_MMA_CHAINS
 * independent mma.sync.m16n8k16 bf16 -> fp32 (D = A B + D, every A element
 * a_bits, every B element b_bits, D starting at 0), then every thread writes its
 * DCPK_REF_MMA_OUT_PER_THREAD accumulators to out[(block * threads + thread) *
 * DCPK_REF_MMA_OUT_PER_THREAD + i]. Each is then iterations * 16 * a * b, exact
 * when that fits fp32's 24 bits. Grid (blocks, 1, 1).
 */
struct dcpk_ref_mma_params {
    uint64_t out;        ///< fp32 [blocks * DCPK_REF_THREADS * DCPK_REF_MMA_OUT_PER_THREAD].
    uint64_t iterations; ///< Rounds per warp.
    uint32_t blocks;     ///< Grid size.
    uint16_t a_bits;     ///< bf16 bits of every A element.
    uint16_t b_bits;     ///< bf16 bits of every B element.
};
DCPK_STATIC_ASSERT(sizeof(struct dcpk_ref_mma_params) == 24, "dcpk_ref_mma_params ABI");

#endif /* DCPK_REF_H */
