/*
 * bench_ref.c: the host yardsticks of `dcp-run bench` (bench_ref.h).
 *
 * Both run on as many threads as the host backend uses and are timed around the
 * whole pass, thread start and join included (as the attention step is timed
 * around its launch and synchronize). The widest ISA is picked at run time
 * (AVX-512F, else AVX2+FMA, else plain C), never by -march.
 */
#include "bench_ref.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "dcp_build_config.h"
#include "progress.h"

#define REF_MAX_THREADS 64u

#if DCP_ARCH_X86_64 && defined(__GNUC__)
#include <immintrin.h>
#define REF_X86 1
#else
#define REF_X86 0
#endif

enum ref_isa { REF_SCALAR, REF_AVX2, REF_AVX512 };

static enum ref_isa ref_isa(void)
{
#if REF_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return REF_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return REF_AVX2;
#endif
    return REF_SCALAR;
}

const char *bench_ref_fma_isa(void)
{
    static const char *const names[] = {"scalar", "avx2+fma", "avx512f"};
    return names[ref_isa()];
}

/* ---- read-only stream --------------------------------------------------- */

/* Sums 64-bit words: four independent sums so the adds never limit the loads. */
static uint64_t stream_generic(const unsigned char *p, size_t n)
{
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, w[4];
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        memcpy(w, p + i, sizeof(w));
        s0 += w[0], s1 += w[1], s2 += w[2], s3 += w[3];
    }
    for (; i < n; i++)
        s0 += p[i];
    return s0 + s1 + s2 + s3;
}

#if REF_X86
__attribute__((target("avx2"))) static uint64_t stream_avx2(const unsigned char *p, size_t n)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(const void *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 96)));
    }
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)(void *)lanes,
                        _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + stream_generic(p + i, n - i);
}

__attribute__((target("avx512f"))) static uint64_t stream_avx512(const unsigned char *p, size_t n)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
        s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + i + 64));
        s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + i + 128));
        s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + i + 192));
    }
    /* Reduce in unsigned lanes: _mm512_reduce_add_epi64 adds signed long longs,
     * and the sums of arbitrary bytes overflow them (UBSan: signed overflow). */
    uint64_t lanes[8];
    _mm512_storeu_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    uint64_t sum = 0;
    for (int k = 0; k < 8; k++)
        sum += lanes[k];
    return sum + stream_generic(p + i, n - i);
}
#endif

/* Where the sums of the streaming pass go: a volatile object outside this
 * function, so the compiler must compute them. */
volatile uint64_t bench_ref_stream_sink;

struct stream_job {
    const unsigned char *p;
    size_t n;
    enum ref_isa isa;
    uint64_t sum;
};

static void *stream_thread(void *arg)
{
    struct stream_job *j = arg;
#if REF_X86
    if (j->isa == REF_AVX512) {
        j->sum = stream_avx512(j->p, j->n);
        return NULL;
    }
    if (j->isa == REF_AVX2) {
        j->sum = stream_avx2(j->p, j->n);
        return NULL;
    }
#endif
    j->sum = stream_generic(j->p, j->n);
    return NULL;
}

/* ---- FMA loop ------------------------------------------------------------ */

/* Twelve independent accumulators per thread: two FMA ports with a latency of
 * four cycles need at least eight chains in flight. Each function returns a value
 * that depends on every result, so the compiler cannot drop the work. */
#define FMA_CHAINS 12

#if REF_X86
__attribute__((target("avx2,fma"))) static double fma_avx2(uint64_t iterations)
{
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    __m256 c[FMA_CHAINS];
    for (int k = 0; k < FMA_CHAINS; k++)
        c[k] = _mm256_set1_ps(0.1f * (float)k);
    for (uint64_t it = 0; it < iterations; it++) {
#pragma GCC unroll 12
        for (int k = 0; k < FMA_CHAINS; k++)
            c[k] = _mm256_fmadd_ps(c[k], a, b);
    }
    __m256 sum = c[0];
    for (int k = 1; k < FMA_CHAINS; k++)
        sum = _mm256_add_ps(sum, c[k]);
    float out[8];
    _mm256_storeu_ps(out, sum);
    return (double)out[0] + out[7];
}

__attribute__((target("avx512f"))) static double fma_avx512(uint64_t iterations)
{
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    __m512 c[FMA_CHAINS];
    for (int k = 0; k < FMA_CHAINS; k++)
        c[k] = _mm512_set1_ps(0.1f * (float)k);
    for (uint64_t it = 0; it < iterations; it++) {
#pragma GCC unroll 12
        for (int k = 0; k < FMA_CHAINS; k++)
            c[k] = _mm512_fmadd_ps(c[k], a, b);
    }
    __m512 sum = c[0];
    for (int k = 1; k < FMA_CHAINS; k++)
        sum = _mm512_add_ps(sum, c[k]);
    return (double)_mm512_reduce_add_ps(sum);
}
#endif

static double fma_scalar(uint64_t iterations)
{
    float c[FMA_CHAINS];
    for (int k = 0; k < FMA_CHAINS; k++)
        c[k] = 0.1f * (float)k;
    for (uint64_t it = 0; it < iterations; it++)
        for (int k = 0; k < FMA_CHAINS; k++)
            c[k] = fmaf(c[k], 0.999999f, 1e-7f);
    double s = 0;
    for (int k = 0; k < FMA_CHAINS; k++)
        s += c[k];
    return s;
}

struct fma_job {
    uint64_t iterations;
    enum ref_isa isa;
    double flops, sink;
};

static void *fma_thread(void *arg)
{
    struct fma_job *j = arg;
    double lanes = 1;
#if REF_X86
    if (j->isa == REF_AVX512) {
        j->sink = fma_avx512(j->iterations);
        lanes = 16;
    } else if (j->isa == REF_AVX2) {
        j->sink = fma_avx2(j->iterations);
        lanes = 8;
    } else
#endif
        j->sink = fma_scalar(j->iterations);
    j->flops = 2.0 * lanes * FMA_CHAINS * (double)j->iterations;
    return NULL;
}

/* ---- running them on threads -------------------------------------------- */

/* Starts fn on jobs[0..threads) (job i at base + i * size) and joins them;
 * returns the threads that ran (0: none could start). */
static uint32_t run_threads(void *(*fn)(void *), void *base, size_t size, uint32_t threads)
{
    pthread_t tid[REF_MAX_THREADS];
    uint32_t started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, fn, (char *)base + started * size))
            break;
    for (uint32_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    return started;
}

int bench_ref_stream(const void *buf, size_t bytes, uint32_t threads, struct bench_ref_sample *out)
{
    struct stream_job jobs[REF_MAX_THREADS];
    threads = threads < 1 ? 1 : threads > REF_MAX_THREADS ? REF_MAX_THREADS : threads;
    const enum ref_isa isa = ref_isa();
    /* Whole 256-byte pieces per thread, the rest to the last one. */
    const size_t per = bytes / threads / 256 * 256;
    for (uint32_t i = 0; i < threads; i++)
        jobs[i] = (struct stream_job){.p = (const unsigned char *)buf + i * per,
                                      .n = i + 1 < threads ? per : bytes - per * (threads - 1), .isa = isa};
    const double t0 = cli_now();
    const uint32_t ran = run_threads(stream_thread, jobs, sizeof(jobs[0]), threads);
    out->seconds = cli_now() - t0;
    uint64_t sum = 0, read = 0;
    for (uint32_t i = 0; i < ran; i++) {
        sum += jobs[i].sum;
        read += jobs[i].n;
    }
    bench_ref_stream_sink = sum; /* so the reads cannot be dropped */
    out->amount = (double)read;
    return ran == threads && out->amount > 0 ? 0 : -1;
}

int bench_ref_fma(uint64_t iterations, uint32_t threads, struct bench_ref_sample *out)
{
    struct fma_job jobs[REF_MAX_THREADS];
    threads = threads < 1 ? 1 : threads > REF_MAX_THREADS ? REF_MAX_THREADS : threads;
    const enum ref_isa isa = ref_isa();
    for (uint32_t i = 0; i < threads; i++)
        jobs[i] = (struct fma_job){.iterations = iterations, .isa = isa};
    const double t0 = cli_now();
    const uint32_t ran = run_threads(fma_thread, jobs, sizeof(jobs[0]), threads);
    out->seconds = cli_now() - t0;
    double flops = 0, sink = 0;
    for (uint32_t i = 0; i < ran; i++) {
        flops += jobs[i].flops;
        sink += jobs[i].sink;
    }
    out->amount = isfinite(sink) ? flops : 0;
    return ran == threads && out->amount > 0 ? 0 : -1;
}
