/*
 * bench_ref.h: the yardsticks `dcp-run bench` measures attention against on the
 * host, in the same run: a read-only streaming pass over a buffer (the memory
 * bandwidth a kernel that reads its input once can reach; a copy moves 2N bytes
 * for N copied, so it is not that figure) and an fp32 FMA loop in the widest
 * vector ISA this CPU runs (the arithmetic peak).
 */
#ifndef DCP_CLI_BENCH_REF_H
#define DCP_CLI_BENCH_REF_H

#include <stddef.h>
#include <stdint.h>

/** One timed run of a yardstick. */
struct bench_ref_sample {
    double seconds; ///< Wall time of the whole pass (all threads).
    double amount;  ///< Bytes read (stream) or flops done (FMA loop).
};

/** Name of the widest FMA ISA bench_ref_fma() uses here ("avx512f", "avx2+fma" or "scalar"). */
const char *bench_ref_fma_isa(void);

/**
 * Reads `bytes` bytes at buf once, split evenly over `threads` threads (at most
 * 64), with the widest vector loads this CPU has, summing them so that no read
 * can be dropped. Returns 0, or -1 when no thread could be started.
 */
int bench_ref_stream(const void *buf, size_t bytes, uint32_t threads, struct bench_ref_sample *out);

/**
 * Runs `iterations` steps of independent fp32 multiply-add chains on each of
 * `threads` threads (at most 64) in the widest ISA (bench_ref_fma_isa()).
 * Returns 0, or -1 when no thread could be started.
 */
int bench_ref_fma(uint64_t iterations, uint32_t threads, struct bench_ref_sample *out);

#endif /* DCP_CLI_BENCH_REF_H */
