/*
 * cuda_emu.h: enough of the CUDA execution model to run the kernel sources of
 * ptx/kernels/ on the host, and to make them fail there when they would fail on
 * a GPU.
 *
 * The blocks of a launch run one after another. The threads of a block are
 * fibers (ucontext) on the calling thread, switched only at barriers and warp
 * collectives, in an order reshuffled by a seeded generator at every round (so a
 * kernel cannot lean on one thread running before another). A thread that
 * returns leaves its block's and its warp's barriers, as exited threads do on the
 * GPU; a block whose live threads all wait on barriers that cannot open is a
 * deadlock and an error. "Device" pointers are host pointers; dynamic shared
 * memory is the buffer registered with emu::set_shared(), filled with 0xff bytes
 * (NaN in every float format) at every block start.
 *
 * What the emulation checks (each failure is an error of the launch, see
 * emu::errors() and emu::first_error()):
 *   - warp collectives (__shfl_*_sync, __ballot_sync, ldmatrix, mma.sync): every live lane of
 *     the warp takes part in the same operation, the member mask names exactly
 *     those lanes and every lane a value is read from;
 *   - mma.sync.aligned.m16n8k16 (bf16 or fp16 inputs, fp32 accumulators) and
 *     ldmatrix .m8n8 .x1/.x2/.x4 [.trans] with the fragment layouts of the PTX
 *     ISA: the lanes post their registers, the warp's matrices are assembled,
 *     multiplied in double, rounded to fp32 once and handed back by layout;
 *   - cp.async: the destination is poisoned (0xff bytes) at issue and gets the
 *     data at the cp.async.wait_group that retires its group, so a missing wait
 *     reads NaN;
 *   - shared-memory races, for the accesses made through the checked paths
 *     (smem_load / smem_store of mma.cuh, ldmatrix, cp.async): per 2-byte unit the
 *     last writer and reader with their barrier epoch; a read of a unit another
 *     thread wrote in the same epoch (no __syncthreads between, or __syncwarp for
 *     lanes of one warp), a write of a unit another thread read or wrote in the
 *     same epoch, a read of a unit not written since the block started, and a
 *     read of a cp.async destination before its wait are errors;
 *   - a global atomic (atomicAdd) of a block that changed memory a test watches
 *     (emu::watch: a workspace other blocks read after the atomic) with a thread of
 *     the block that executed no __threadfence before it (emu::on_global_atomic).
 * Include this before the kernel sources (with the CUDA headers on the include
 * path: cuda_fp16.h and friends work in host code).
 */
#ifndef DCP_TEST_CUDA_EMU_H
#define DCP_TEST_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <ucontext.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
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

template <class T>
static inline T max(T a, T b)
{
    return a < b ? b : a;
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

/* ---- errors ----------------------------------------------------------------- */

inline unsigned error_count;
inline std::string first_message;
inline bool quiet; // no printing (a test that expects errors)

/** Records an error of the running launch (the first few are printed). */
inline void report(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (error_count == 0)
        first_message = buf;
    if (error_count < 5 && !quiet)
        std::fprintf(stderr, "emu: block (%u,%u,%u): %s\n", blockIdx.x, blockIdx.y, blockIdx.z, buf);
    error_count++;
}

/** Errors since the last reset_errors(). */
inline unsigned errors() { return error_count; }
inline const char *first_error() { return first_message.c_str(); }
inline void reset_errors()
{
    error_count = 0;
    first_message.clear();
}

/* ---- blocks of fibers ------------------------------------------------------- */

/** A barrier of `expected` fibers; the last arrival opens it (generation + 1). */
struct Barrier {
    int expected = 0, arrived = 0;
    uint64_t generation = 0;
};

/** One 16-byte cp.async in flight. */
struct AsyncCopy {
    void *dst;
    const void *src;
    bool valid;
};

struct Fiber {
    ucontext_t ctx;
    char *stack = nullptr; // from stack_pool
    unsigned tid = 0;
    bool done = false;
    unsigned fences = 0;                        // __threadfence calls since the block started
    std::vector<AsyncCopy> open;                // issued since the last commit
    std::vector<std::vector<AsyncCopy>> groups; // committed, oldest first
};

/** What a lane posts to a warp collective, and what it gets back. */
struct Post {
    int op;
    uint32_t mask;
    uint32_t in[10];
    const void *addr;
    uint32_t out[4];
};

struct Block {
    ucontext_t scheduler;
    std::vector<Fiber> fibers;
    Fiber *current = nullptr;
    Barrier block;
    std::vector<Barrier> warps;
    std::vector<Post> posts;         // one per thread
    std::vector<uint32_t> posted;    // per warp: lanes that posted to the open collective
    std::vector<uint64_t> computed;  // per warp: barrier generation whose collective was computed
    std::vector<uint32_t> warp_sync; // per warp: __syncwarp count (race detector)
    void (*body)(const void *) = nullptr;
    const void *params = nullptr;
    uint64_t progress = 0; // arrivals and exits, for deadlock detection
    int vote = 0, vote_result = 0; // __syncthreads_or: the open barrier's votes, the last one's result
};

inline Block *running;
inline uint64_t order_seed = 0x9e3779b97f4a7c15ull;

/** Seeds the thread order of the following launches. */
inline void set_seed(uint64_t seed) { order_seed = seed * 0x9e3779b97f4a7c15ull + 1; }

/* ---- shared memory and its race detector ------------------------------------ */

/** Per 2-byte unit of shared memory (the smallest element the kernels store): its last writer and reader. */
struct Shadow {
    uint32_t w_epoch, r_epoch;
    uint16_t writer, reader; // thread ids; reader kManyReaders when several
    uint32_t w_sync;         // writer's warp __syncwarp count at the write
    bool pending;            // a cp.async destination not yet retired by a wait
};
constexpr uint16_t kManyReaders = 0xffff;
constexpr size_t kUnit = 2;

inline unsigned char *smem_base;
inline size_t smem_size;
inline std::vector<Shadow> shadow;
inline uint32_t epoch = 1, block_epoch = 1; // epoch: one per barrier phase, never reused

/** The dynamic shared memory of every block (poisoned at each block start). */
inline void set_shared(void *base, size_t bytes)
{
    smem_base = static_cast<unsigned char *>(base);
    smem_size = bytes;
    shadow.assign(bytes / kUnit, Shadow{0, 0, 0, 0, 0, false});
}

inline unsigned tid() { return running->current->tid; }

/** The shadow words of [p, p + bytes), or null (after reporting) when outside shared memory. */
inline Shadow *shadow_of(const void *p, size_t bytes, const char *what)
{
    const unsigned char *c = static_cast<const unsigned char *>(p);
    if (!smem_base || c < smem_base || c + bytes > smem_base + smem_size) {
        report("thread %u: %s of %zu bytes at %p outside shared memory", tid(), what, bytes, p);
        return nullptr;
    }
    if ((size_t)(c - smem_base) % (bytes < 4 ? bytes : 4) != 0 || bytes % kUnit != 0) {
        report("thread %u: misaligned %s of %zu bytes at offset %zu", tid(), what, bytes, (size_t)(c - smem_base));
        return nullptr;
    }
    return &shadow[(size_t)(c - smem_base) / kUnit];
}

inline size_t word_offset(const Shadow *s) { return (size_t)(s - shadow.data()) * kUnit; }

/** True when thread t may see the write recorded in s without a race. */
inline bool ordered_after_write(const Shadow &s, unsigned t)
{
    if (s.w_epoch != epoch || s.writer == t)
        return true;
    return s.writer / 32 == t / 32 && running->warp_sync[t / 32] != s.w_sync;
}

/** A checked read of bytes at p by the running thread. */
inline void on_read(const void *p, size_t bytes, const char *what)
{
    Shadow *s = shadow_of(p, bytes, what);
    const unsigned t = tid();
    for (size_t i = 0; s && i < bytes / kUnit; i++) {
        Shadow &w = s[i];
        if (w.pending)
            report("thread %u: %s of smem+%zu before the cp.async.wait_group of thread %u", t, what,
                   word_offset(&w), w.writer);
        else if (w.w_epoch < block_epoch)
            report("thread %u: %s of smem+%zu, never written in this block", t, what, word_offset(&w));
        else if (!ordered_after_write(w, t))
            report("thread %u: %s of smem+%zu written by thread %u with no barrier between (race)", t, what,
                   word_offset(&w), w.writer);
        if (w.r_epoch == epoch && w.reader != t)
            w.reader = kManyReaders;
        else {
            w.reader = (uint16_t)t;
            w.r_epoch = epoch;
        }
    }
}

/** A checked write of bytes at p by the running thread; pending marks a cp.async destination. */
inline void on_write(const void *p, size_t bytes, const char *what, bool pending)
{
    Shadow *s = shadow_of(p, bytes, what);
    const unsigned t = tid();
    for (size_t i = 0; s && i < bytes / kUnit; i++) {
        Shadow &w = s[i];
        if (w.r_epoch == epoch && w.reader != t)
            report("thread %u: %s of smem+%zu read by %s %u with no barrier between (race)", t, what,
                   word_offset(&w), w.reader == kManyReaders ? "other threads, e.g." : "thread",
                   w.reader == kManyReaders ? 0u : (unsigned)w.reader);
        else if (!ordered_after_write(w, t))
            report("thread %u: %s of smem+%zu written by thread %u with no barrier between (race)", t, what,
                   word_offset(&w), w.writer);
        w.writer = (uint16_t)t;
        w.w_epoch = epoch;
        w.w_sync = running->warp_sync[t / 32];
        w.pending = pending;
    }
}

/* ---- global memory published by atomics --------------------------------------- */

/**
 * Global memory a test watches (a split-KV workspace): its bytes at the start of the
 * running block. A global atomic of a block that changed watched bytes publishes
 * them to other blocks, which on a GPU requires each storing thread's __threadfence
 * before the atomic; the emulator, which cannot tell which thread stored what,
 * requires a __threadfence of every thread of the block before it (the discipline the
 * kernels follow), else reports the missing fence.
 */
struct Watch {
    unsigned char *base;
    size_t bytes;
    std::vector<unsigned char> at_start;
};
inline std::vector<Watch> watches;

inline void watch(void *base, size_t bytes) { watches.push_back(Watch{static_cast<unsigned char *>(base), bytes, {}}); }
inline void unwatch_all() { watches.clear(); }

inline bool in_shared(const void *p)
{
    const unsigned char *c = static_cast<const unsigned char *>(p);
    return smem_base && c >= smem_base && c < smem_base + smem_size;
}

/** A global atomic by the running thread: checks the fences that publish the block's watched stores. */
inline void on_global_atomic(const void *addr)
{
    if (in_shared(addr))
        return;
    bool stored = false;
    for (const Watch &w : watches)
        stored = stored || std::memcmp(w.base, w.at_start.data(), w.bytes) != 0;
    if (!stored)
        return;
    for (const Fiber &f : running->fibers)
        if (f.fences == 0) {
            report("thread %u: a global atomic publishes the block's stores to watched memory, but thread %u "
                   "executed no __threadfence before it (another block may read stale data)", tid(), f.tid);
            return;
        }
}

/* ---- scheduling --------------------------------------------------------------- */

inline void yield()
{
    swapcontext(&running->current->ctx, &running->scheduler);
}

inline void release_if_full(Barrier &b, bool block_barrier)
{
    if (b.arrived > 0 && b.arrived == b.expected) {
        b.arrived = 0;
        b.generation++;
        running->progress++;
        if (block_barrier) {
            epoch++;
            running->vote_result = running->vote;
            running->vote = 0;
        }
    }
}

inline void wait(Barrier &b)
{
    const uint64_t gen = b.generation;
    b.arrived++;
    running->progress++;
    release_if_full(b, &b == &running->block);
    while (b.generation == gen)
        yield();
}

/** Retires committed cp.async groups until at most `keep` are in flight. */
inline void retire_groups(Fiber &f, size_t keep)
{
    while (f.groups.size() > keep) {
        for (const AsyncCopy &c : f.groups.front()) {
            on_write(c.dst, 16, "cp.async", false);
            if (c.valid)
                std::memcpy(c.dst, c.src, 16);
            else
                std::memset(c.dst, 0, 16);
        }
        f.groups.erase(f.groups.begin());
    }
}

inline void fiber_main()
{
    Block *blk = running;
    Fiber *f = blk->current;
    blk->body(blk->params);
    // Copies still in flight land anyway (nobody can wait for them any more).
    if (!f->open.empty())
        f->groups.push_back(std::move(f->open));
    retire_groups(*f, 0);
    f->done = true;
    blk->progress++;
    blk->block.expected--;
    release_if_full(blk->block, true);
    Barrier &w = blk->warps[f->tid / 32];
    w.expected--;
    release_if_full(w, false);
    swapcontext(&f->ctx, &blk->scheduler);
}

inline uint64_t next_random(uint64_t &s)
{
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

/** Bytes of a fiber's stack. */
constexpr size_t kStackBytes = 256 * 1024;
/**
 * Thread t's stack, the same for every block: allocated once and reused (a fresh,
 * zeroed one per fiber and block cost more than most kernels' work).
 */
inline std::vector<std::unique_ptr<char[]>> stack_pool;

/** Makes f a fiber that starts in fiber_main (out of line: getcontext returns twice). */
__attribute__((noinline)) inline void init_fiber(Fiber &f, unsigned t)
{
    f.tid = t;
    while (stack_pool.size() <= t)
        stack_pool.emplace_back(new char[kStackBytes]);
    f.stack = stack_pool[t].get();
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
}

/** Runs `body(params)` as one block of blockDim threads (blockIdx set by the caller). */
inline void run_block(void (*body)(const void *), const void *params)
{
    Block blk;
    const unsigned n = blockDim.x * blockDim.y * blockDim.z;
    const unsigned nwarps = (n + 31) / 32;
    blk.body = body;
    blk.params = params;
    blk.fibers.resize(n);
    blk.block.expected = (int)n;
    blk.warps.resize(nwarps);
    for (unsigned w = 0; w < nwarps; w++)
        blk.warps[w].expected = (int)(n - 32 * w < 32 ? n - 32 * w : 32);
    blk.posts.resize(n);
    blk.posted.assign(nwarps, 0);
    blk.computed.assign(nwarps, ~0ull);
    blk.warp_sync.assign(nwarps, 0);
    running = &blk;
    if (smem_base)
        std::memset(smem_base, 0xff, smem_size);
    block_epoch = ++epoch;
    for (Watch &w : watches)
        w.at_start.assign(w.base, w.base + w.bytes);
    std::vector<unsigned> order(n);
    for (unsigned t = 0; t < n; t++) {
        order[t] = t;
        init_fiber(blk.fibers[t], t);
    }
    uint64_t rng = order_seed ^ ((uint64_t)blockIdx.x << 40 ^ (uint64_t)blockIdx.y << 20 ^ blockIdx.z) ^ 0x5bd1e995u;
    for (bool live = true; live;) {
        live = false;
        for (unsigned i = n; i > 1; i--)
            std::swap(order[i - 1], order[next_random(rng) % i]);
        const uint64_t before = blk.progress;
        for (unsigned t : order) {
            Fiber &f = blk.fibers[t];
            if (f.done)
                continue;
            live = true;
            blk.current = &f;
            threadIdx = make_uint3(f.tid % blockDim.x, f.tid / blockDim.x % blockDim.y,
                                   f.tid / (blockDim.x * blockDim.y));
            swapcontext(&blk.scheduler, &f.ctx);
        }
        if (live && blk.progress == before) {
            report("deadlock: the live threads wait on barriers that cannot open (a barrier or warp "
                   "collective not reached by every thread)");
            break; // the fibers are abandoned with their stacks
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

/* ---- warp collectives ---------------------------------------------------------- */

enum Op { kShfl = 1, kLdmatrix, kMmaBf16, kMmaFp16, kSyncwarp, kBallot };

/**
 * One warp collective: the lane posts (op, mask, in, addr); once every live lane
 * of the warp has posted, the first lane to continue checks the posts and runs
 * compute(posts of lanes 0..31, lanes that posted) once for the warp, which fills
 * each lane's out; the lane gets its own post back after a second barrier.
 */
template <class F>
inline const Post &collective(int op, uint32_t mask, const uint32_t *in, int nin, const void *addr, F compute)
{
    Block *blk = running;
    const unsigned t = tid(), w = t / 32, lane = t % 32;
    Post &me = blk->posts[t];
    me.op = op;
    me.mask = mask;
    for (int i = 0; i < nin; i++)
        me.in[i] = in[i];
    me.addr = addr;
    blk->posted[w] |= 1u << lane;
    wait(blk->warps[w]);
    if (blk->computed[w] != blk->warps[w].generation) {
        blk->computed[w] = blk->warps[w].generation;
        const uint32_t lanes = blk->posted[w];
        blk->posted[w] = 0;
        Post *p = &blk->posts[32 * w];
        bool same = true;
        for (unsigned l = 0; l < 32; l++)
            if (lanes >> l & 1) {
                if (p[l].op != op)
                    same = false;
                else if (p[l].mask != lanes)
                    report("warp %u lane %u: member mask %#x but the lanes taking part are %#x", w, l, p[l].mask,
                           lanes);
            }
        if (!same)
            report("warp %u: lanes %#x met in different warp collectives", w, lanes);
        else
            compute(p, lanes);
    }
    wait(blk->warps[w]);
    return me;
}

/** Lane l's source lane of a shuffle; reports a source outside the mask. */
inline unsigned shfl_source(const Post *p, uint32_t lanes, unsigned l, unsigned src)
{
    if (!(lanes >> src & 1)) {
        report("shuffle: lane %u reads lane %u, which is not in the member mask %#x", l, src, p[l].mask);
        return l;
    }
    return src;
}

inline uint32_t shfl_xor(uint32_t mask, uint32_t v, int lane_mask)
{
    const uint32_t in[1] = {v};
    return collective(kShfl, mask, in, 1, nullptr, [lane_mask](Post *p, uint32_t lanes) {
               for (unsigned l = 0; l < 32; l++)
                   if (lanes >> l & 1)
                       p[l].out[0] = p[shfl_source(p, lanes, l, (l ^ (unsigned)lane_mask) & 31u)].in[0];
           }).out[0];
}

inline uint32_t shfl_idx(uint32_t mask, uint32_t v, int src_lane)
{
    const uint32_t in[2] = {v, (uint32_t)src_lane};
    return collective(kShfl, mask, in, 2, nullptr, [](Post *p, uint32_t lanes) {
               for (unsigned l = 0; l < 32; l++)
                   if (lanes >> l & 1)
                       p[l].out[0] = p[shfl_source(p, lanes, l, p[l].in[1] & 31u)].in[0];
           }).out[0];
}

/** __ballot_sync: bit l of the result is lane l's predicate, for every lane of the mask. */
inline uint32_t ballot(uint32_t mask, bool pred)
{
    const uint32_t in[1] = {pred ? 1u : 0u};
    return collective(kBallot, mask, in, 1, nullptr, [](Post *p, uint32_t lanes) {
               uint32_t bits = 0;
               for (unsigned l = 0; l < 32; l++)
                   if (lanes >> l & 1 && p[l].in[0])
                       bits |= 1u << l;
               for (unsigned l = 0; l < 32; l++)
                   if (lanes >> l & 1)
                       p[l].out[0] = bits;
           }).out[0];
}

/** __syncwarp(mask): a collective that also orders the lanes' shared-memory accesses. */
inline void syncwarp(uint32_t mask)
{
    collective(kSyncwarp, mask, nullptr, 0, nullptr, [](Post *p, uint32_t lanes) {
        (void)p;
        (void)lanes;
        running->warp_sync[tid() / 32]++;
    });
}

/**
 * ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16: lanes 8m..8m+7 give the row
 * addresses of matrix m (< N), 16-byte aligned, in shared memory; lane l gets in
 * register m the elements (l / 4, 2 (l % 4) + {0, 1}) of matrix m, or with .trans
 * the elements (2 (l % 4) + {0, 1}, l / 4); the first in the low half.
 */
inline void ldmatrix(int nmat, bool trans, uint32_t *r, const void *row)
{
    const uint32_t in[2] = {(uint32_t)nmat, trans};
    const Post &me = collective(kLdmatrix, 0xffffffffu, in, 2, row, [nmat, trans](Post *p, uint32_t lanes) {
        if (lanes != 0xffffffffu) {
            report("ldmatrix: all 32 lanes must take part (lanes %#x)", lanes);
            return;
        }
        for (unsigned l = 0; l < 32; l++)
            if ((int)p[l].in[0] != nmat || (bool)p[l].in[1] != trans) {
                report("ldmatrix: lanes disagree on the shape (.x%d%s)", nmat, trans ? ".trans" : "");
                return;
            }
        uint16_t m[4][8][8];
        Fiber *self = running->current;
        for (int mat = 0; mat < nmat; mat++)
            for (int i = 0; i < 8; i++) {
                const unsigned src = 8 * mat + i;
                if ((uintptr_t)p[src].addr % 16 != 0) {
                    report("ldmatrix: lane %u's row address %p is not 16-byte aligned", src, p[src].addr);
                    return;
                }
                // The read is lane src's (it named the row).
                running->current = &running->fibers[tid() / 32 * 32 + src];
                on_read(p[src].addr, 16, "ldmatrix");
                running->current = self;
                if (shadow_of(p[src].addr, 16, "ldmatrix"))
                    std::memcpy(m[mat][i], p[src].addr, 16);
                else
                    std::memset(m[mat][i], 0, 16);
            }
        for (unsigned l = 0; l < 32; l++)
            for (int mat = 0; mat < nmat; mat++) {
                const unsigned a = l / 4, b = 2 * (l % 4);
                const uint16_t lo = trans ? m[mat][b][a] : m[mat][a][b];
                const uint16_t hi = trans ? m[mat][b + 1][a] : m[mat][a][b + 1];
                p[l].out[mat] = (uint32_t)lo | (uint32_t)hi << 16;
            }
    });
    for (int i = 0; i < nmat; i++)
        r[i] = me.out[i];
}

inline double half_value(uint16_t bits, bool bf16)
{
    if (bf16)
        return __uint_as_float((uint32_t)bits << 16);
    __half_raw h;
    h.x = bits;
    return __half2float(__half(h));
}

/**
 * mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: D = A B + C with
 * g = lane / 4, t = lane % 4 (PTX ISA fragment layouts):
 *   A (16x16): a[i] holds (g + 8 (i % 2), 2t + 8 (i / 2) + {0, 1});
 *   B (16x8):  b[i] holds (2t + 8 i + {0, 1}, g);
 *   C, D (16x8 fp32): c[i] is (g + 8 (i / 2), 2t + i % 2).
 * Multiplied in double, rounded to fp32 once.
 */
inline void mma_16816(bool bf16, float *d, const uint32_t *a, const uint32_t *b, const float *c)
{
    uint32_t in[10];
    for (int i = 0; i < 4; i++)
        in[i] = a[i];
    in[4] = b[0];
    in[5] = b[1];
    for (int i = 0; i < 4; i++)
        in[6 + i] = __float_as_uint(c[i]);
    const Post &me = collective(bf16 ? kMmaBf16 : kMmaFp16, 0xffffffffu, in, 10, nullptr,
                                [bf16](Post *p, uint32_t lanes) {
        if (lanes != 0xffffffffu) {
            report("mma.sync: all 32 lanes must take part (lanes %#x)", lanes);
            return;
        }
        double A[16][16], B[16][8], C[16][8];
        for (unsigned l = 0; l < 32; l++) {
            const unsigned g = l / 4, t = l % 4;
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 2; j++)
                    A[g + 8 * (i % 2)][2 * t + 8 * (i / 2) + j] = half_value((uint16_t)(p[l].in[i] >> (16 * j)), bf16);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++)
                    B[2 * t + 8 * i + j][g] = half_value((uint16_t)(p[l].in[4 + i] >> (16 * j)), bf16);
            for (int i = 0; i < 4; i++)
                C[g + 8 * (i / 2)][2 * t + i % 2] = __uint_as_float(p[l].in[6 + i]);
        }
        for (unsigned l = 0; l < 32; l++) {
            const unsigned g = l / 4, t = l % 4;
            for (int i = 0; i < 4; i++) {
                const unsigned row = g + 8 * (i / 2), col = 2 * t + i % 2;
                double acc = C[row][col];
                for (int k = 0; k < 16; k++)
                    acc += A[row][k] * B[k][col];
                p[l].out[i] = __float_as_uint((float)acc);
            }
        }
    });
    for (int i = 0; i < 4; i++)
        d[i] = __uint_as_float(me.out[i]);
}

/* ---- cp.async ------------------------------------------------------------------ */

/** cp.async.cg.shared.global 16 bytes (zero-filled when !valid): poisons dst until retired. */
inline void cp_async16(void *dst, const void *src, bool valid)
{
    on_write(dst, 16, "cp.async", true);
    std::memset(dst, 0xff, 16);
    running->current->open.push_back(AsyncCopy{dst, src, valid});
}

inline void cp_async_commit()
{
    Fiber &f = *running->current;
    f.groups.push_back(std::move(f.open));
    f.open.clear();
}

inline void cp_async_wait(int n)
{
    retire_groups(*running->current, (size_t)n);
}

} // namespace emu

inline void __syncthreads()
{
    emu::wait(emu::running->block);
}

/** A block barrier that returns nonzero when any thread's predicate was nonzero. */
inline int __syncthreads_or(int pred)
{
    if (pred)
        emu::running->vote = 1;
    emu::wait(emu::running->block);
    return emu::running->vote_result;
}

/** Counts the thread's fences (emu::on_global_atomic checks them); blocks run one after another. */
inline void __threadfence()
{
    emu::running->current->fences++;
}

inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    emu::syncwarp(mask);
}

/** Threads switch only at barriers and collectives, so a read-modify-write is atomic. */
inline unsigned atomicOr(unsigned *address, unsigned val)
{
    const unsigned old = *address;
    *address = old | val;
    return old;
}

inline unsigned atomicMin(unsigned *address, unsigned val)
{
    const unsigned old = *address;
    *address = old < val ? old : val;
    return old;
}

inline unsigned atomicAdd(unsigned *address, unsigned val)
{
    emu::on_global_atomic(address);
    const unsigned old = *address;
    *address = old + val;
    return old;
}

inline int __popc(unsigned x)
{
    return __builtin_popcount(x);
}

inline unsigned __ballot_sync(unsigned mask, int pred)
{
    return emu::ballot(mask, pred != 0);
}

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask)
{
    return __uint_as_float(emu::shfl_xor(mask, __float_as_uint(v), lane_mask));
}

inline uint32_t __shfl_xor_sync(unsigned mask, uint32_t v, int lane_mask)
{
    return emu::shfl_xor(mask, v, lane_mask);
}

inline float __shfl_sync(unsigned mask, float v, int src_lane)
{
    return __uint_as_float(emu::shfl_idx(mask, __float_as_uint(v), src_lane));
}

inline uint32_t __shfl_sync(unsigned mask, uint32_t v, int src_lane)
{
    return emu::shfl_idx(mask, v, src_lane);
}

#endif /* DCP_TEST_CUDA_EMU_H */
