/*
 * cuda_emu.h: just enough of the CUDA execution model to run the kernel sources
 * of ptx/kernels/ on the host, for testing them without a GPU.
 *
 * The blocks of a launch run one after another. The threads of a block are
 * fibers (ucontext) on the calling thread, switched only at __syncthreads() and
 * warp shuffles, so barriers are exact and a run is deterministic. A thread that
 * returns leaves its block's and its warp's barriers, as exited threads do on the
 * GPU. "Device" pointers are host pointers; dynamic shared memory is one static
 * buffer. Include this before the kernel sources (with the CUDA headers on the
 * include path: cuda_fp16.h and friends work in host code).
 */
#ifndef DCP_TEST_CUDA_EMU_H
#define DCP_TEST_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

#include <math.h> // expf, exp2f, logf, log2f, fmaf, fmaxf as the kernels call them

template <class T>
static inline T min(T a, T b)
{
    return b < a ? b : a;
}

static inline float __uint_as_float(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace emu {

/** A barrier of `expected` fibers; the last arrival opens it (generation + 1). */
struct Barrier {
    int expected = 0, arrived = 0;
    uint64_t generation = 0;
};

struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    unsigned tid = 0;
    bool done = false;
};

struct Block {
    ucontext_t scheduler;
    std::vector<Fiber> fibers;
    Fiber *current = nullptr;
    Barrier block;
    std::vector<Barrier> warps;
    std::vector<float> lanes; // shuffle exchange, one slot per thread
    void (*body)(const void *) = nullptr;
    const void *params = nullptr;
};

inline Block *running;

inline void yield()
{
    swapcontext(&running->current->ctx, &running->scheduler);
}

inline void release_if_full(Barrier &b)
{
    if (b.arrived > 0 && b.arrived == b.expected) {
        b.arrived = 0;
        b.generation++;
    }
}

inline void wait(Barrier &b)
{
    const uint64_t gen = b.generation;
    b.arrived++;
    release_if_full(b);
    while (b.generation == gen)
        yield();
}

inline void fiber_main()
{
    Block *blk = running;
    Fiber *f = blk->current;
    blk->body(blk->params);
    f->done = true;
    blk->block.expected--;
    release_if_full(blk->block);
    Barrier &w = blk->warps[f->tid / 32];
    w.expected--;
    release_if_full(w);
    swapcontext(&f->ctx, &blk->scheduler);
}

/** Runs `body(params)` as one block of blockDim threads (blockIdx set by the caller). */
inline void run_block(void (*body)(const void *), const void *params)
{
    Block blk;
    const unsigned n = blockDim.x * blockDim.y * blockDim.z;
    blk.body = body;
    blk.params = params;
    blk.fibers.resize(n);
    blk.block.expected = (int)n;
    blk.warps.resize((n + 31) / 32);
    for (unsigned w = 0; w < blk.warps.size(); w++)
        blk.warps[w].expected = (int)(n - 32 * w < 32 ? n - 32 * w : 32);
    blk.lanes.resize(n);
    running = &blk;
    for (unsigned t = 0; t < n; t++) {
        Fiber &f = blk.fibers[t];
        f.tid = t;
        f.stack.resize(256 * 1024);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
    }
    for (bool live = true; live;) {
        live = false;
        for (Fiber &f : blk.fibers) {
            if (f.done)
                continue;
            live = true;
            blk.current = &f;
            threadIdx = make_uint3(f.tid % blockDim.x, f.tid / blockDim.x % blockDim.y,
                                   f.tid / (blockDim.x * blockDim.y));
            swapcontext(&blk.scheduler, &f.ctx);
        }
    }
    running = nullptr;
}

/** A launch: every block of grid, in order. */
template <class P>
inline void launch(void (*kernel)(P), const P &params, dim3 grid, dim3 block)
{
    static void (*k)(P);
    k = kernel;
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = make_uint3(x, y, z);
                run_block([](const void *p) { k(*static_cast<const P *>(p)); }, &params);
            }
}

} // namespace emu

inline void __syncthreads()
{
    emu::wait(emu::running->block);
}

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask)
{
    (void)mask;
    emu::Block *blk = emu::running;
    const unsigned tid = blk->current->tid;
    emu::Barrier &w = blk->warps[tid / 32];
    blk->lanes[tid] = v;
    emu::wait(w);
    const float r = blk->lanes[(tid & ~31u) | ((tid & 31u) ^ (unsigned)lane_mask)];
    emu::wait(w);
    return r;
}

#endif /* DCP_TEST_CUDA_EMU_H */
