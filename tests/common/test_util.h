/*
 * test_util.h: small helpers every suite may use (header only).
 * cmocka needs <stdarg.h>, <stddef.h>, <stdint.h>, <setjmp.h> before <cmocka.h>.
 */
#ifndef DCP_TEST_UTIL_H
#define DCP_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/** Deterministic generator for property tests (xorshift64*). */
struct test_rng {
    uint64_t s;
};

static inline void test_rng_seed(struct test_rng *r, uint64_t seed)
{
    r->s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    if (!r->s)
        r->s = 1;
}

static inline uint64_t test_rng_next(struct test_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

/** Uniform integer in [lo, hi]. */
static inline uint64_t test_rng_range(struct test_rng *r, uint64_t lo, uint64_t hi)
{
    return lo + test_rng_next(r) % (hi - lo + 1);
}

/** Uniform double in [-1, 1). */
static inline double test_rng_unit(struct test_rng *r)
{
    return (double)(int64_t)test_rng_next(r) / 9223372036854775808.0;
}

/** Seed for property tests: DCP_TEST_SEED from the environment, else fixed. */
static inline uint64_t test_seed(void)
{
    const char *s = getenv("DCP_TEST_SEED");
    return s ? strtoull(s, NULL, 0) : 20261129u;
}

/**
 * DCP_TEST_QUICK set (and not "0"): property tests run fewer random cases. The
 * valgrind test setup sets it (tests/meson.build), where every case costs ~50x.
 */
static inline int test_quick(void)
{
    const char *s = getenv("DCP_TEST_QUICK");
    return s && *s && strcmp(s, "0") != 0;
}

#endif /* DCP_TEST_UTIL_H */
