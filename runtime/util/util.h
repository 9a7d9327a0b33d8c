/*
 * util.h: small internal helpers shared by the whole library.
 */
#ifndef DCP_UTIL_H
#define DCP_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp/common.h"

#if defined(__GNUC__)
#define DCP_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#define DCP_UNUSED __attribute__((unused))
#define DCP_LIKELY(x) __builtin_expect(!!(x), 1)
#define DCP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define DCP_PRINTF(fmt_idx, arg_idx)
#define DCP_UNUSED
#define DCP_LIKELY(x) (x)
#define DCP_UNLIKELY(x) (x)
#endif

#define DCP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define DCP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DCP_MAX(a, b) ((a) > (b) ? (a) : (b))

/**
 * Records the detail of a failure for dcp_last_error() on this thread and returns
 * status, so callers can write `return dcp_error(DCP_EINVAL, "tp=%u", tp);`.
 */
int dcp_error(int status, const char *fmt, ...) DCP_PRINTF(2, 3);
/** va_list form of dcp_error(). */
int dcp_verror(int status, const char *fmt, va_list ap);
/** Clears the thread's last error detail. */
void dcp_clear_error(void);

/** Integer ceil(a / b) for b > 0, for every a (no overflow near UINT64_MAX). */
static inline uint64_t dcp_div_ceil_u64(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

/**
 * a * b, or UINT64_MAX with *overflow set when the product does not fit. Chains
 * (the flag only ever goes up), so a size is computed in one expression and
 * checked once: `bytes = dcp_mul_u64(dcp_mul_u64(n, h, &ovf), d, &ovf); if (ovf) ...`.
 */
static inline uint64_t dcp_mul_u64(uint64_t a, uint64_t b, bool *overflow)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        *overflow = true;
        return UINT64_MAX;
    }
    return r;
}

/** a + b, or UINT64_MAX with *overflow set when the sum does not fit (chains like dcp_mul_u64). */
static inline uint64_t dcp_add_u64(uint64_t a, uint64_t b, bool *overflow)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) {
        *overflow = true;
        return UINT64_MAX;
    }
    return r;
}

/** strdup that returns NULL for NULL input. */
char *dcp_strdup(const char *s);

/** malloc'd printf; NULL on failure. */
char *dcp_asprintf(const char *fmt, ...) DCP_PRINTF(1, 2);

/**
 * Grows *buf (elements of elem_size) so it can hold at least need elements,
 * doubling. Returns 0 or DCP_ENOMEM (then *buf and *cap are unchanged).
 */
int dcp_grow_array(void **buf, size_t *cap, size_t need, size_t elem_size);

/** Monotonic clock in seconds. */
double dcp_now_seconds(void);

/**
 * Pacing of a polling loop (device work, NCCL enqueues): the first polls spin
 * (a CPU pause hint between them) for at most DCP_POLL_SPIN_S seconds and
 * DCP_POLL_SPIN_MAX polls, because what is polled usually finishes within
 * microseconds and the shortest sleep costs tens of them (timer slack); then
 * sleeps of 20 us doubling up to 1 ms, so a long wait does not burn a core.
 */
struct dcp_poll {
    double spin_until; /**< monotonic seconds at which spinning stops */
    uint32_t spins;    /**< polls spent spinning so far */
    long pause_ns;     /**< the next sleep, once spinning is over */
};

/** Spinning lasts at most this long (seconds)... */
#define DCP_POLL_SPIN_S 50e-6
/** ...and at most this many polls. */
#define DCP_POLL_SPIN_MAX 4096u
/** The first sleep after spinning, and the longest. */
#define DCP_POLL_FIRST_SLEEP_NS 20000L
#define DCP_POLL_MAX_SLEEP_NS 1000000L

/** Starts a polling loop's pacing now. */
void dcp_poll_init(struct dcp_poll *p);

/** Waits before the next poll: returns 0 after a spin (a pause hint), else the
 *  nanoseconds it slept. */
long dcp_poll_pause(struct dcp_poll *p);

#endif /* DCP_UTIL_H */
