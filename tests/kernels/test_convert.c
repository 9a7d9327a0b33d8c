/*
 * Element conversions (dcp_kernels/convert.h) and the CPU row decoders and exp
 * (ptx/cpu/simd.h) against slow references built from frexp/ldexp: every bf16,
 * fp16 and fp8 bit pattern decoded and round-tripped, and encoders checked at
 * every representable value, every midpoint (ties to even) and its neighbours,
 * the overflow edges and random floats.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_kernels/convert.h"
#include "ptx/cpu/simd.h"
#include "test_util.h"

/** A small binary float format. */
struct fmt {
    const char *name;
    uint32_t dtype;
    int bits;       ///< Total bits.
    int man_bits;
    int bias;
    int ieee;       ///< Has infinities (all-ones exponent); else E4M3FN (only S.1111.111 is NaN).
    double max;     ///< Largest finite value.
};

static const struct fmt fmt_bf16 = {"bf16", DCPK_BF16, 16, 7, 127, 1, 0x1.fep127};
static const struct fmt fmt_fp16 = {"fp16", DCPK_FP16, 16, 10, 15, 1, 65504.0};
static const struct fmt fmt_fp8 = {"fp8", DCPK_FP8_E4M3, 8, 3, 7, 0, 448.0};

/* ---- slow references ---------------------------------------------------- */

/** Value of a bit pattern, from its fields with ldexp. */
static double ref_decode(const struct fmt *f, uint32_t bits)
{
    const int exp_bits = f->bits - 1 - f->man_bits;
    const uint32_t emax = (1u << exp_bits) - 1;
    const int neg = (bits >> (f->bits - 1)) & 1;
    const uint32_t e = (bits >> f->man_bits) & emax;
    const uint32_t m = bits & ((1u << f->man_bits) - 1);
    double v;
    if (f->ieee && e == emax)
        v = m ? NAN : INFINITY;
    else if (!f->ieee && e == emax && m == (1u << f->man_bits) - 1)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - f->bias - f->man_bits);
    else
        v = ldexp((double)(m + (1u << f->man_bits)), (int)e - f->bias - f->man_bits);
    return neg ? -v : v;
}

/**
 * Nearest value of the format to a finite x, ties to even, before overflow
 * handling: the quantum is 2^(max(exponent of x, emin) - man_bits), and
 * nearbyint rounds x / quantum to nearest even (default rounding mode).
 */
static double ref_round(const struct fmt *f, double x)
{
    if (x == 0.0)
        return x;
    int e;
    frexp(x, &e); /* |x| = m * 2^e, m in [0.5, 1): leading bit at e - 1 */
    const int emin = 1 - f->bias;
    const int q = (e - 1 > emin ? e - 1 : emin) - f->man_bits;
    const double r = nearbyint(ldexp(x, -q));
    return copysign(ldexp(r, q), x);
}

/** Decoded value the encoder must produce for x (satfinite for fp8 if sat). */
static double ref_encode_value(const struct fmt *f, float x, int sat)
{
    if (isnan(x))
        return NAN;
    const double r = isinf(x) ? (double)x : ref_round(f, x);
    if (fabs(r) <= f->max)
        return r;
    if (f->ieee)
        return copysign(INFINITY, x);
    return sat ? copysign(f->max, x) : NAN;
}

/* ---- the code under test, by format ------------------------------------ */

static float decode(const struct fmt *f, uint32_t bits)
{
    switch (f->dtype) {
    case DCPK_BF16:
        return dcpk_bf16_to_f32((uint16_t)bits);
    case DCPK_FP16:
        return dcpk_fp16_to_f32((uint16_t)bits);
    default:
        return dcpk_fp8e4m3_to_f32((uint8_t)bits);
    }
}

static uint32_t encode(const struct fmt *f, float x, int sat)
{
    switch (f->dtype) {
    case DCPK_BF16:
        return dcpk_f32_to_bf16(x);
    case DCPK_FP16:
        return dcpk_f32_to_fp16(x);
    default:
        return dcpk_f32_to_fp8e4m3(x, sat);
    }
}

/** Same value (NaN matches NaN), and the same sign for zeros. */
static int same_value(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void check_encode(const struct fmt *f, float x, int sat)
{
    const uint32_t code = encode(f, x, sat);
    const double got = ref_decode(f, code), want = ref_encode_value(f, x, sat);
    if (!same_value(got, want)) {
        print_error("%s encode(%a, sat=%d) = 0x%x = %a, want %a\n", f->name, (double)x, sat, code, got, want);
        fail();
    }
    if (isnan(x) && f->dtype != DCPK_FP8_E4M3) /* IEEE NaNs keep their sign */
        assert_int_equal(code >> (f->bits - 1), signbit(x) ? 1 : 0);
}

/* ---- tests --------------------------------------------------------------- */

static void check_decode_all(const struct fmt *f)
{
    for (uint32_t b = 0; b < (1u << f->bits); b++) {
        const double want = ref_decode(f, b);
        const float got = decode(f, b);
        if (!same_value(got, want)) {
            print_error("%s decode(0x%x) = %a, want %a\n", f->name, b, (double)got, want);
            fail();
        }
        if (isnan(want)) /* NaN keeps its sign */
            assert_int_equal(signbit(got) != 0, (b >> (f->bits - 1)) & 1);
    }
}

static void test_decode_exhaustive(void **state)
{
    (void)state;
    check_decode_all(&fmt_bf16);
    check_decode_all(&fmt_fp16);
    check_decode_all(&fmt_fp8);
}

/* Every pattern round-trips: encode(decode(b)) == b, NaN stays NaN. */
static void check_round_trip(const struct fmt *f, int sat)
{
    for (uint32_t b = 0; b < (1u << f->bits); b++) {
        const float v = decode(f, b);
        const uint32_t back = encode(f, v, sat);
        if (isnan(v))
            assert_true(isnan(ref_decode(f, back)));
        else if (back != b) {
            print_error("%s round trip 0x%x -> %a -> 0x%x\n", f->name, b, (double)v, back);
            fail();
        }
    }
}

static void test_round_trip_exhaustive(void **state)
{
    (void)state;
    check_round_trip(&fmt_bf16, 1);
    check_round_trip(&fmt_fp16, 1);
    check_round_trip(&fmt_fp8, 1);
    check_round_trip(&fmt_fp8, 0);
}

/*
 * For every pair of neighbouring finite values (v, w): v, the midpoint (a tie:
 * rounds to the even one), the floats on either side of the midpoint, and the
 * same negated; then the values just past the largest finite one.
 */
static void check_encode_grid(const struct fmt *f, int sat)
{
    const uint32_t positives = 1u << (f->bits - 1);
    for (uint32_t b = 0; b + 1 < positives; b++) {
        const double v = ref_decode(f, b), w = ref_decode(f, b + 1);
        if (isnan(v) || isinf(v))
            continue;
        /* Past the largest finite value, w is inf/NaN: the step beyond max is one quantum. */
        const double next = isfinite(w) ? w : v + (v - ref_decode(f, b - 1));
        const float mid = (float)((v + next) / 2.0);
        assert_true((double)mid == (v + next) / 2.0); /* midpoints are floats */
        const float xs[] = {(float)v, mid, nextafterf(mid, INFINITY), nextafterf(mid, 0.0f)};
        for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
            check_encode(f, xs[i], sat);
            check_encode(f, -xs[i], sat);
        }
    }
}

static void check_encode_specials(const struct fmt *f, int sat)
{
    const float xs[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX,
                        FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN, 1e-30f, 3.0e38f, 1.0f, -1.0f};
    for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++)
        check_encode(f, xs[i], sat);
}

static void check_encode_random(const struct fmt *f, int sat, struct test_rng *rng)
{
    for (int i = 0; i < 300000; i++) {
        const uint32_t bits = (uint32_t)test_rng_next(rng);
        float x;
        memcpy(&x, &bits, sizeof(x));
        check_encode(f, x, sat);
        /* Also a value in the format's range, where rounding matters most. */
        check_encode(f, (float)(test_rng_unit(rng) * f->max * 1.1), sat);
    }
}

static void test_encode(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xc0417e);
    const struct fmt *fmts[] = {&fmt_bf16, &fmt_fp16, &fmt_fp8};
    for (size_t i = 0; i < 3; i++) {
        /* fp8 both with and without satfinite; bf16/fp16 have no such mode. */
        for (int sat = 1; sat >= (fmts[i]->dtype == DCPK_FP8_E4M3 ? 0 : 1); sat--) {
            check_encode_grid(fmts[i], sat);
            check_encode_specials(fmts[i], sat);
            check_encode_random(fmts[i], sat, &rng);
        }
    }
}

/* fp8 limits (docs/design.md §10): 448 is the largest, 464 ties to 448, beyond saturates. */
static void test_fp8_limits(void **state)
{
    (void)state;
    assert_int_equal(dcpk_f32_to_fp8e4m3(448.0f, 0), 0x7e);
    assert_int_equal(dcpk_f32_to_fp8e4m3(464.0f, 0), 0x7e);
    assert_int_equal(dcpk_f32_to_fp8e4m3(464.5f, 0), 0x7f);
    assert_int_equal(dcpk_f32_to_fp8e4m3(464.5f, 1), 0x7e);
    assert_int_equal(dcpk_f32_to_fp8e4m3(-1e9f, 1), 0xfe);
    assert_int_equal(dcpk_f32_to_fp8e4m3(INFINITY, 1), 0x7e);
    assert_int_equal(dcpk_f32_to_fp8e4m3(INFINITY, 0), 0x7f);
    assert_int_equal(dcpk_f32_to_fp8e4m3(NAN, 1) & 0x7f, 0x7f);
    assert_true(dcpk_fp8e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(dcpk_fp8e4m3_to_f32(0x7e) == 448.0f);
}

/* ---- CPU row decoders (ptx/cpu/simd.h) ---------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* dcpk_decode_source is a permutation of 0..n-1. */
static void test_decode_source_is_permutation(void **state)
{
    (void)state;
    static const uint32_t dtypes[] = {DCPK_FP32, DCPK_BF16, DCPK_FP16, DCPK_FP8_E4M3};
    uint8_t seen[700];
    for (size_t t = 0; t < 4; t++)
        for (uint32_t n = 0; n <= 700; n += 1 + n / 16) {
            memset(seen, 0, sizeof(seen));
            for (uint32_t i = 0; i < n; i++) {
                const uint32_t s = dcpk_decode_source(dtypes[t], n, i);
                assert_true(s < n);
                assert_false(seen[s]);
                seen[s] = 1;
            }
        }
}

/*
 * Decoding a row that holds every bit pattern (then rows of odd lengths, for
 * the in-order tails) gives, at position i, exactly the bits of the scalar
 * decode of element dcpk_decode_source(i), times the fp8 scale.
 */
static void check_row_decoder(const struct fmt *f, uint32_t n, float fp8_scale)
{
    const uint32_t esz = dcpk_dtype_size(f->dtype);
    uint8_t *src = malloc((size_t)n * esz);
    float *dst = malloc((size_t)n * sizeof(float));
    assert_non_null(src);
    assert_non_null(dst);
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t bits = (i * 40503u) & ((1u << f->bits) - 1); /* odd multiplier: every pattern */
        if (esz == 2)
            ((uint16_t *)src)[i] = (uint16_t)bits;
        else
            src[i] = (uint8_t)bits;
    }
    dcpk_decode_row(dst, src, n, f->dtype, fp8_scale);
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t s = dcpk_decode_source(f->dtype, n, i);
        float want = dcpk_load_as_f32(src, s, f->dtype);
        if (f->dtype == DCPK_FP8_E4M3)
            want *= fp8_scale;
        if (isnan(want))
            assert_true(isnan(dst[i]) && signbit(dst[i]) == signbit(want));
        else if (f32_bits(dst[i]) != f32_bits(want)) {
            print_error("%s row[%u] (source %u) = %a, want %a\n", f->name, i, s, (double)dst[i], (double)want);
            fail();
        }
    }
    free(src);
    free(dst);
}

static void test_row_decoders(void **state)
{
    (void)state;
    const struct fmt *fmts[] = {&fmt_bf16, &fmt_fp16, &fmt_fp8};
    for (size_t i = 0; i < 3; i++) {
        check_row_decoder(fmts[i], 1u << fmts[i]->bits, 1.0f);
        check_row_decoder(fmts[i], 1u << fmts[i]->bits, 0.375f);
        for (uint32_t n = 1; n < 100; n += 3)
            check_row_decoder(fmts[i], n, 2.0f);
    }
    /* fp32 rows are copied. */
    float src[37], dst[37];
    for (int i = 0; i < 37; i++)
        src[i] = (float)i * 0.5f - 3.0f;
    dcpk_decode_row(dst, src, 37, DCPK_FP32, 5.0f);
    assert_memory_equal(dst, src, sizeof(src));
}

/* ---- vectorised exp ------------------------------------------------------ */

static float vexp(float x)
{
    const dcpk_vf in = dcpk_vf_set1(x);
    const dcpk_vf v = dcpk_vf_exp_nonpos(&in);
    return v[3];
}

static void test_vector_exp(void **state)
{
    (void)state;
    double worst = 0.0;
    for (double x = -87.3; x <= 0.0; x += 0.000373) {
        const float xf = (float)x;
        const double want = exp((double)xf);
        const double rel = fabs(vexp(xf) - want) / want;
        worst = rel > worst ? rel : worst;
    }
    print_message("vector exp: worst relative error %.3g over [-87.3, 0]\n", worst);
    assert_true(worst < 4.0 * FLT_EPSILON);
    assert_true(vexp(0.0f) == 1.0f);
    assert_true(vexp(-0.0f) == 1.0f);
    assert_true(fabsf(vexp(-FLT_TRUE_MIN) - 1.0f) <= FLT_EPSILON);
    assert_true(vexp(-INFINITY) == 0.0f);
    assert_true(vexp(-87.5f) == 0.0f);
    assert_true(vexp(-1000.0f) == 0.0f);
    assert_true(isnan(vexp(NAN)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_exhaustive),
        cmocka_unit_test(test_round_trip_exhaustive),
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_fp8_limits),
        cmocka_unit_test(test_decode_source_is_permutation),
        cmocka_unit_test(test_row_decoders),
        cmocka_unit_test(test_vector_exp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
