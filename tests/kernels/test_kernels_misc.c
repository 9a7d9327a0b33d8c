/*
 * The small kernels: merge (edge cases of docs/design.md §4 and random cases against
 * the oracle), lse_scale, reduce (ordered sums), fill (determinism and range),
 * kv_append (skipped slots, dtypes, 64-bit addressing), uv_proj (chunked rows in each
 * dst dtype against the oracle), and the family table; the activation dtypes of merge,
 * lse_scale, reduce, kv_append and uv_proj, and their refusal of any other value.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "attn_harness.h"
#include "dcp_kernels/convert.h"
#include "dcp_kernels/merge.h"
#include "dcp_kernels/paged.h"
#include "oracle.h"

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* ---- merge --------------------------------------------------------------- */

/**
 * Merges one row of n sources (o [n][v_dim], lse [n]) with dcpk_merge and
 * checks it against the oracle, NaN where the oracle has NaN; returns the merged
 * LSE. out is v_dim floats.
 */
static float merge_row(uint32_t n, uint32_t v_dim, const float *o, const float *lse, float *out)
{
    struct test_rng rng;
    test_rng_seed(&rng, test_seed());
    float out_lse = 12345.0f;
    const struct dcpk_merge_params mp = {
        .src_o = (uint64_t)(uintptr_t)o, .src_lse = (uint64_t)(uintptr_t)lse,
        .out = (uint64_t)(uintptr_t)out, .out_lse = (uint64_t)(uintptr_t)&out_lse,
        .src_stride_o = v_dim, .src_stride_lse = 1, .n_src = n, .rows = 1, .rows_per_chunk = 1,
        .v_dim = v_dim,
    };
    run_kernel(DCPK_KERNEL_merge, &mp, &rng);

    double *od = xmalloc((size_t)n * v_dim * sizeof(double)), *ld = xmalloc(n * sizeof(double));
    double *ref = xmalloc(v_dim * sizeof(double)), ref_lse;
    for (size_t i = 0; i < (size_t)n * v_dim; i++)
        od[i] = o[i];
    for (uint32_t s = 0; s < n; s++)
        ld[s] = lse[s];
    oracle_merge(n, v_dim, od, ld, ref, &ref_lse);
    for (uint32_t d = 0; d < v_dim; d++) {
        assert_int_equal(isnan(out[d]), isnan(ref[d]));
        assert_true(isnan(ref[d]) || fabs(out[d] - ref[d]) <= 1e-6 * (1.0 + fabs(ref[d])));
    }
    if (isnan(ref_lse))
        assert_true(isnan(out_lse));
    else if (isinf(ref_lse))
        assert_true(isinf(out_lse) && out_lse < 0);
    else
        assert_true(fabs(out_lse - ref_lse) <= 1e-6 * (1.0 + fabs(ref_lse)));
    free(od);
    free(ld);
    free(ref);
    return out_lse;
}

static void test_merge_edge_cases(void **state)
{
    (void)state;
    float out[2];
    /* One source: itself. */
    {
        const float o[] = {3.0f, -1.0f}, lse[] = {0.7f};
        assert_true(merge_row(1, 2, o, lse, out) == 0.7f);
        assert_true(out[0] == 3.0f && out[1] == -1.0f);
    }
    /* Equal LSEs: the mean, Lambda = lse + log 2. */
    {
        const float o[] = {1.0f, 2.0f, 3.0f, 6.0f}, lse[] = {1.5f, 1.5f};
        const float l = merge_row(2, 2, o, lse, out);
        assert_true(fabsf(l - (1.5f + logf(2.0f))) < 1e-6f);
        assert_true(fabsf(out[0] - 2.0f) < 1e-6f && fabsf(out[1] - 4.0f) < 1e-6f);
    }
    /* One dominant source: the others vanish, no overflow from large LSEs. */
    {
        const float o[] = {1.0f, 1.0f, 5.0f, 5.0f, 9.0f, 9.0f}, lse[] = {-200.0f, 80.0f, 10.0f};
        const float l = merge_row(3, 2, o, lse, out);
        assert_true(fabsf(l - 80.0f) < 1e-5f);
        assert_true(fabsf(out[0] - 5.0f) < 1e-5f);
    }
    /* -inf LSEs are empty sources: skipped, and their (NaN) outputs never leak. */
    {
        const float o[] = {NAN, NAN, 2.0f, 4.0f, INFINITY, NAN};
        const float lse[] = {-INFINITY, 0.25f, -INFINITY};
        assert_true(merge_row(3, 2, o, lse, out) == 0.25f);
        assert_true(out[0] == 2.0f && out[1] == 4.0f);
    }
    /* A NaN LSE (a NaN reached attention) makes the whole row NaN, beside empty and
     * finite sources alike, and so does a +inf LSE. */
    {
        const float o[] = {1.0f, 2.0f, 2.0f, 4.0f, NAN, NAN};
        const float nan_lse[] = {0.5f, NAN, -INFINITY}, inf_lse[] = {INFINITY, 0.25f, -INFINITY};
        assert_true(isnan(merge_row(3, 2, o, nan_lse, out)));
        assert_true(isnan(out[0]) && isnan(out[1]));
        assert_true(isnan(merge_row(3, 2, o, inf_lse, out)));
        assert_true(isnan(out[0]) && isnan(out[1]));
        const float alone[] = {NAN};
        assert_true(isnan(merge_row(1, 2, o, alone, out)));
        assert_true(isnan(out[0]) && isnan(out[1]));
    }
    /* A NaN in a non-empty source's output shows, even where its weight underflows to 0. */
    {
        const float o[] = {1.0f, NAN, 5.0f, 5.0f}, lse[] = {-200.0f, 80.0f};
        const float l = merge_row(2, 2, o, lse, out);
        assert_true(fabsf(l - 80.0f) < 1e-5f);
        assert_true(out[0] == 5.0f && isnan(out[1]));
    }
    /* All -inf: output 0 and LSE -inf, never NaN, whatever the outputs hold. */
    {
        const float o[] = {NAN, 1.0f, 7.0f, NAN, INFINITY, 3.0f}, lse[] = {-INFINITY, -INFINITY, -INFINITY};
        const float l = merge_row(3, 2, o, lse, out);
        assert_true(isinf(l) && l < 0);
        assert_true(out[0] == 0.0f && out[1] == 0.0f);
    }
    /* No sources at all. */
    {
        const float l = merge_row(0, 2, NULL, NULL, out);
        assert_true(isinf(l) && l < 0);
        assert_true(out[0] == 0.0f && out[1] == 0.0f);
    }
}

/* The shared rules (dcp_kernels/merge.h) on their own. */
static void test_merge_helpers(void **state)
{
    (void)state;
    assert_true(dcpk_lse_empty(-INFINITY));
    assert_false(dcpk_lse_empty(NAN) || dcpk_lse_empty(INFINITY) || dcpk_lse_empty(-3.0f));
    assert_true(dcpk_lse_poisoned(NAN) && dcpk_lse_poisoned(-NAN) && dcpk_lse_poisoned(INFINITY));
    assert_false(dcpk_lse_poisoned(-INFINITY) || dcpk_lse_poisoned(-3.0f) || dcpk_lse_poisoned(FLT_MAX));
    const float lse[] = {1.0f, -INFINITY, 1.0f};
    const float lambda = dcpk_merge_lambda(lse, 3, 1);
    assert_true(fabsf(lambda - (1.0f + logf(2.0f))) < 1e-6f);
    assert_true(fabsf(dcpk_merge_weight(1.0f, lambda) - 0.5f) < 1e-6f);
    assert_true(dcpk_merge_weight(-INFINITY, lambda) == 0.0f);
    assert_true(dcpk_merge_weight(-INFINITY, NAN) == 0.0f);
    assert_true(isnan(dcpk_merge_weight(1.0f, NAN)));
    assert_true(dcpk_merge_weight(-200.0f, 0.0f) == 0.0f); /* underflow: 0, still multiplied in */
    /* Strided sources: every other element. */
    const float strided[] = {2.0f, 99.0f, 2.0f, 99.0f};
    assert_true(fabsf(dcpk_merge_lambda(strided, 2, 2) - (2.0f + logf(2.0f))) < 1e-6f);
    const float none[] = {-INFINITY, -INFINITY};
    assert_true(isinf(dcpk_merge_lambda(none, 2, 1)) && dcpk_merge_lambda(none, 2, 1) < 0);
    assert_true(isinf(dcpk_merge_lambda(NULL, 0, 1)));
    /* NaN or +inf anywhere, before or after the maximum: Lambda is NaN. */
    const float nan_first[] = {NAN, 1.0f, -INFINITY}, nan_last[] = {-INFINITY, 1.0f, NAN};
    const float pos_inf[] = {1.0f, INFINITY}, nan_only[] = {-INFINITY, NAN};
    assert_true(isnan(dcpk_merge_lambda(nan_first, 3, 1)));
    assert_true(isnan(dcpk_merge_lambda(nan_last, 3, 1)));
    assert_true(isnan(dcpk_merge_lambda(pos_inf, 2, 1)));
    assert_true(isnan(dcpk_merge_lambda(nan_only, 2, 1)));
}

/* Random rows (some LSEs -inf, whose outputs are garbage NaN; a few NaN) in a
 * chunked output layout against the oracle. */
static void test_merge_random(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x3e76e);
    for (int rep = 0; rep < 50; rep++) {
        const uint32_t n = (uint32_t)test_rng_range(&rng, 1, 8), v = (uint32_t)test_rng_range(&rng, 1, 70);
        const uint32_t per_chunk = (uint32_t)test_rng_range(&rng, 1, 6), chunks = (uint32_t)test_rng_range(&rng, 1, 4);
        const uint32_t rows = per_chunk * chunks;
        const uint64_t src_stride_o = (uint64_t)rows * v + test_rng_range(&rng, 0, 3);
        const uint64_t src_stride_lse = rows + test_rng_range(&rng, 0, 3);
        const uint64_t out_stride = (uint64_t)per_chunk * v + test_rng_range(&rng, 0, 3);
        const uint64_t lse_stride = per_chunk + test_rng_range(&rng, 0, 3);
        float *o = xmalloc(n * src_stride_o * sizeof(float)), *lse = xmalloc(n * src_stride_lse * sizeof(float));
        float *out = xmalloc(chunks * out_stride * sizeof(float)), *out_lse = xmalloc(chunks * lse_stride * sizeof(float));
        for (uint64_t i = 0; i < n * src_stride_lse; i++) {
            const uint64_t k = test_rng_range(&rng, 0, 19);
            lse[i] = k < 4 ? -INFINITY : k == 4 ? NAN : (float)(test_rng_unit(&rng) * 30.0);
        }
        for (uint32_t s = 0; s < n; s++)
            for (uint64_t i = 0; i < src_stride_o; i++) {
                const uint64_t row = i / v < rows ? i / v : 0;
                o[s * src_stride_o + i] = lse[s * src_stride_lse + row] == -INFINITY ? NAN : (float)test_rng_unit(&rng);
            }
        const struct dcpk_merge_params mp = {
            .src_o = (uint64_t)(uintptr_t)o, .src_lse = (uint64_t)(uintptr_t)lse,
            .out = (uint64_t)(uintptr_t)out, .out_lse = (uint64_t)(uintptr_t)out_lse,
            .src_stride_o = src_stride_o, .src_stride_lse = src_stride_lse,
            .out_chunk_stride = out_stride, .out_lse_chunk_stride = lse_stride,
            .n_src = n, .rows = rows, .rows_per_chunk = per_chunk, .v_dim = v,
        };
        run_kernel(DCPK_KERNEL_merge, &mp, &rng);
        double *od = xmalloc((size_t)n * v * sizeof(double)), ld[8], *ref = xmalloc(v * sizeof(double)), ref_lse;
        for (uint32_t r = 0; r < rows; r++) {
            for (uint32_t s = 0; s < n; s++) {
                ld[s] = lse[s * src_stride_lse + r];
                for (uint32_t d = 0; d < v; d++)
                    od[(size_t)s * v + d] = o[s * src_stride_o + (uint64_t)r * v + d];
            }
            oracle_merge(n, v, od, ld, ref, &ref_lse);
            const float *got = out + (r / per_chunk) * out_stride + (uint64_t)(r % per_chunk) * v;
            const float got_lse = out_lse[(r / per_chunk) * lse_stride + r % per_chunk];
            for (uint32_t d = 0; d < v; d++)
                assert_true(isnan(ref[d]) ? isnan(got[d]) : fabs(got[d] - ref[d]) <= 1e-5);
            if (isnan(ref_lse))
                assert_true(isnan(got_lse));
            else
                assert_true(isinf(ref_lse) ? isinf(got_lse) && got_lse < 0
                                           : fabs(got_lse - ref_lse) <= 1e-5 * (1 + fabs(ref_lse)));
        }
        free(od);
        free(ref);
        free(o);
        free(lse);
        free(out);
        free(out_lse);
    }
}

/* out_lse == 0: the LSE is not written (and nothing crashes). */
static void test_merge_without_lse(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, 1);
    const float o[] = {1.0f, 3.0f}, lse[] = {0.0f, 0.0f};
    float out = 0.0f;
    const struct dcpk_merge_params mp = {
        .src_o = (uint64_t)(uintptr_t)o, .src_lse = (uint64_t)(uintptr_t)lse,
        .out = (uint64_t)(uintptr_t)&out, .src_stride_o = 1, .src_stride_lse = 1,
        .n_src = 2, .rows = 1, .rows_per_chunk = 1, .v_dim = 1,
    };
    run_kernel(DCPK_KERNEL_merge, &mp, &rng);
    assert_true(fabsf(out - 2.0f) < 1e-6f);
}

/* ---- lse_scale ------------------------------------------------------------- */

static void test_lse_scale(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x15ca1e);
    for (int rep = 0; rep < 30; rep++) {
        const uint32_t n = (uint32_t)test_rng_range(&rng, 1, 6), v = (uint32_t)test_rng_range(&rng, 1, 20);
        const uint32_t per_chunk = (uint32_t)test_rng_range(&rng, 1, 5), rows = per_chunk * n;
        const uint32_t self = (uint32_t)test_rng_range(&rng, 0, n - 1);
        float *lse_all = xmalloc((size_t)n * rows * sizeof(float));
        float *o = xmalloc((size_t)rows * v * sizeof(float)), *o0 = xmalloc((size_t)rows * v * sizeof(float));
        float *out_lse = xmalloc(per_chunk * sizeof(float));
        for (size_t i = 0; i < (size_t)n * rows; i++) {
            const uint64_t k = test_rng_range(&rng, 0, 11);
            lse_all[i] = k < 2 ? -INFINITY : k == 2 ? NAN : k == 3 ? INFINITY : (float)(test_rng_unit(&rng) * 20.0);
        }
        /* Some NaN outputs: garbage where this rank's LSE is -inf (empty), real
         * data elsewhere (a NaN value that reached attention). */
        for (size_t i = 0; i < (size_t)rows * v; i++)
            o[i] = o0[i] = test_rng_range(&rng, 0, 9) ? (float)test_rng_unit(&rng) : NAN;
        for (uint32_t i = 0; i < per_chunk; i++)
            out_lse[i] = 12345.0f;
        const struct dcpk_lse_scale_params sp = {
            .lse_all = (uint64_t)(uintptr_t)lse_all, .o = (uint64_t)(uintptr_t)o,
            .out_lse = (uint64_t)(uintptr_t)out_lse, .n_src = n, .self = self, .rows = rows,
            .rows_per_chunk = per_chunk, .own_chunk = self, .v_dim = v,
        };
        run_kernel(DCPK_KERNEL_lse_scale, &sp, &rng);
        for (uint32_t r = 0; r < rows; r++) {
            double ld[6], lambda;
            for (uint32_t s = 0; s < n; s++)
                ld[s] = lse_all[(size_t)s * rows + r];
            oracle_merge(n, 0, NULL, ld, NULL, &lambda);
            const float own = lse_all[(size_t)self * rows + r];
            for (uint32_t d = 0; d < v; d++) {
                const float got = o[(size_t)r * v + d];
                const double want = own == -INFINITY ? 0.0 : exp(own - lambda) * o0[(size_t)r * v + d];
                if (own == -INFINITY)
                    assert_true(got == 0.0f); /* never 0 * NaN */
                else if (isnan(want))
                    assert_true(isnan(got)); /* NaN Lambda, or a NaN in o */
                else
                    assert_true(fabs(got - want) <= 1e-6);
            }
            if (r / per_chunk == self) {
                const float got = out_lse[r % per_chunk];
                if (isnan(lambda))
                    assert_true(isnan(got));
                else
                    assert_true(isinf(lambda) ? isinf(got) && got < 0 : fabs(got - lambda) <= 1e-5 * (1 + fabs(lambda)));
            }
        }
        free(lse_all);
        free(o);
        free(o0);
        free(out_lse);
    }
}

/* ---- reduce ---------------------------------------------------------------- */

/* Sources are summed in order 0..n-1: (1e8 + -1e8) + 1 = 1, where 1e8 + 1 - 1e8 would be 0. */
static void test_reduce_order(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x4ed);
    const uint64_t count = 2500, offset = 7; /* not a multiple of the 1024-element block */
    float *src[3];
    for (int s = 0; s < 3; s++)
        src[s] = xmalloc((count + offset) * sizeof(float));
    for (uint64_t i = 0; i < count + offset; i++) {
        src[0][i] = 1e8f;
        src[1][i] = -1e8f;
        src[2][i] = (float)(i % 5);
    }
    float *dst = xmalloc(count * sizeof(float));
    const uint64_t ptrs[3] = {(uint64_t)(uintptr_t)src[0], (uint64_t)(uintptr_t)src[1], (uint64_t)(uintptr_t)src[2]};
    struct dcpk_reduce_params rp = {
        .dst = (uint64_t)(uintptr_t)dst, .src_ptrs = (uint64_t)(uintptr_t)ptrs, .src_offset = offset,
        .count = count, .n_src = 3,
    };
    assert_int_equal(dcpk_reduce_grid(&rp).x, 3);
    run_kernel(DCPK_KERNEL_reduce, &rp, &rng);
    for (uint64_t i = 0; i < count; i++)
        assert_true(dst[i] == (float)((i + offset) % 5));

    /* In place (dst is source 0) and random values: the same bits as a sequential loop. */
    for (uint64_t i = 0; i < count + offset; i++)
        for (int s = 0; s < 3; s++)
            src[s][i] = (float)test_rng_unit(&rng) * 1000.0f;
    float *want = xmalloc(count * sizeof(float));
    for (uint64_t i = 0; i < count; i++) {
        float acc = src[0][offset + i];
        acc += src[1][offset + i];
        acc += src[2][offset + i];
        want[i] = acc;
    }
    rp.dst = (uint64_t)(uintptr_t)(src[0] + offset);
    run_kernel(DCPK_KERNEL_reduce, &rp, &rng);
    assert_memory_equal(src[0] + offset, want, count * sizeof(float));
    free(want);
    free(dst);
    for (int s = 0; s < 3; s++)
        free(src[s]);
}

/* ---- activation dtypes of merge, lse_scale and reduce ------------------------ */

/* merge with sources in src_dtype and the output in out_dtype, every pair: the
 * oracle on the rounded sources; the output within one rounding (unit roundoff,
 * relative) of it. Reading or writing another dtype than the params say fails. */
static void test_merge_act_dtypes(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xd7e3);
    enum { N = 3, V = 37, ROWS = 5 };
    for (uint32_t sd = DCPK_FP32; sd <= DCPK_FP16; sd++)
        for (uint32_t od = DCPK_FP32; od <= DCPK_FP16; od++) {
            float o[N * ROWS * V], lse[N * ROWS];
            for (int i = 0; i < N * ROWS; i++)
                lse[i] = i % 7 == 3 ? -INFINITY : (float)(test_rng_unit(&rng) * 8.0);
            for (int i = 0; i < N * ROWS * V; i++)
                o[i] = act_round(sd, (float)test_rng_unit(&rng) * 3.0f);
            void *src = act_encode(o, N * ROWS * V, sd);
            unsigned char out[ROWS * V * 4];
            float out_lse[ROWS];
            const struct dcpk_merge_params mp = {
                .src_o = (uint64_t)(uintptr_t)src, .src_lse = (uint64_t)(uintptr_t)lse,
                .out = (uint64_t)(uintptr_t)out, .out_lse = (uint64_t)(uintptr_t)out_lse,
                .src_stride_o = ROWS * V, .src_stride_lse = ROWS, .out_chunk_stride = ROWS * V,
                .n_src = N, .rows = ROWS, .rows_per_chunk = ROWS, .v_dim = V, .src_dtype = sd, .out_dtype = od,
            };
            run_kernel(DCPK_KERNEL_merge, &mp, &rng);
            for (uint32_t r = 0; r < ROWS; r++) {
                double od_[N * V], ld[N], ref[V], ref_lse;
                for (uint32_t s = 0; s < N; s++) {
                    ld[s] = lse[s * ROWS + r];
                    for (uint32_t d = 0; d < V; d++)
                        od_[s * V + d] = o[(s * ROWS + r) * V + d];
                }
                oracle_merge(N, V, od_, ld, ref, &ref_lse);
                for (uint32_t d = 0; d < V; d++) {
                    const double got = dcpk_load_as_f32(out, (uint64_t)r * V + d, od);
                    if (!(fabs(got - ref[d]) <= act_unit_roundoff(od) * fabs(ref[d]) + 1e-5))
                        fail_msg("src %u out %u: row %u dim %u: %.9g, oracle %.9g", sd, od, r, d, got, ref[d]);
                }
                assert_true(fabs(out_lse[r] - ref_lse) <= 1e-5 * (1 + fabs(ref_lse)));
            }
            free(src);
        }
}

/* lse_scale on o in each activation dtype: o x exp(lse_self - Lambda) rounded once. */
static void test_lse_scale_act_dtypes(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xd7e4);
    enum { N = 3, V = 19, PER = 4, ROWS = PER * N };
    for (uint32_t dt = DCPK_FP32; dt <= DCPK_FP16; dt++) {
        float lse_all[N * ROWS], o[ROWS * V];
        for (int i = 0; i < N * ROWS; i++)
            lse_all[i] = i % 5 == 1 ? -INFINITY : (float)(test_rng_unit(&rng) * 6.0);
        for (int i = 0; i < ROWS * V; i++)
            o[i] = act_round(dt, (float)test_rng_unit(&rng) * 2.0f);
        void *buf = act_encode(o, ROWS * V, dt);
        const uint32_t self = 1;
        const struct dcpk_lse_scale_params sp = {
            .lse_all = (uint64_t)(uintptr_t)lse_all, .o = (uint64_t)(uintptr_t)buf, .n_src = N, .self = self,
            .rows = ROWS, .rows_per_chunk = PER, .own_chunk = self, .v_dim = V, .o_dtype = dt,
        };
        run_kernel(DCPK_KERNEL_lse_scale, &sp, &rng);
        for (uint32_t r = 0; r < ROWS; r++) {
            double ld[N], lambda;
            for (uint32_t s = 0; s < N; s++)
                ld[s] = lse_all[s * ROWS + r];
            oracle_merge(N, 0, NULL, ld, NULL, &lambda);
            const float own = lse_all[self * ROWS + r];
            for (uint32_t d = 0; d < V; d++) {
                const double got = dcpk_load_as_f32(buf, (uint64_t)r * V + d, dt);
                const double want = own == -INFINITY ? 0.0 : exp(own - lambda) * o[r * V + d];
                if (!(fabs(got - want) <= act_unit_roundoff(dt) * fabs(want) + 1e-6))
                    fail_msg("dtype %u: row %u dim %u: %.9g, want %.9g", dt, r, d, got, want);
            }
        }
        free(buf);
    }
}

/* reduce in each activation dtype: the sources read as fp32, summed in order, rounded once. */
static void test_reduce_act_dtypes(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xd7e5);
    enum { COUNT = 1500, OFF = 3, N = 3 };
    for (uint32_t dt = DCPK_FP32; dt <= DCPK_FP16; dt++) {
        float val[N][COUNT + OFF];
        void *src[N];
        uint64_t ptrs[N];
        for (int s = 0; s < N; s++) {
            for (int i = 0; i < COUNT + OFF; i++)
                val[s][i] = act_round(dt, (float)test_rng_unit(&rng) * 100.0f);
            src[s] = act_encode(val[s], COUNT + OFF, dt);
            ptrs[s] = (uint64_t)(uintptr_t)src[s];
        }
        unsigned char dst[COUNT * 4];
        const struct dcpk_reduce_params rp = {
            .dst = (uint64_t)(uintptr_t)dst, .src_ptrs = (uint64_t)(uintptr_t)ptrs, .src_offset = OFF,
            .count = COUNT, .n_src = N, .dtype = dt,
        };
        run_kernel(DCPK_KERNEL_reduce, &rp, &rng);
        for (int i = 0; i < COUNT; i++) {
            float acc = val[0][OFF + i];
            acc += val[1][OFF + i];
            acc += val[2][OFF + i];
            const float got = dcpk_load_as_f32(dst, (uint64_t)i, dt);
            assert_true(got == act_round(dt, acc)); /* one rounding of the fp32 sum */
            const double exact = (double)val[0][OFF + i] + val[1][OFF + i] + val[2][OFF + i];
            assert_true(fabs(got - exact) <= act_unit_roundoff(dt) * fabs(exact) + 1e-4);
        }
        for (int s = 0; s < N; s++)
            free(src[s]);
    }
}

/* A value that is no activation dtype (fp8, unknown) in any of these fields: the
 * kernel does nothing, like the GPU kernels (params.h). */
static void test_act_dtype_refused(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, 7);
    static const uint32_t bad[] = {DCPK_FP8_E4M3, DCPK_DTYPE_COUNT, 77};
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        float src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, lse[2] = {0.0f, 0.5f}, out[8], want[8];
        memset(out, 0x5a, sizeof(out));
        memcpy(want, out, sizeof(want));
        struct dcpk_merge_params mp = {
            .src_o = (uint64_t)(uintptr_t)src, .src_lse = (uint64_t)(uintptr_t)lse,
            .out = (uint64_t)(uintptr_t)out, .src_stride_o = 4, .src_stride_lse = 1,
            .n_src = 2, .rows = 1, .rows_per_chunk = 1, .v_dim = 4, .src_dtype = bad[b],
        };
        run_kernel(DCPK_KERNEL_merge, &mp, &rng);
        mp.src_dtype = DCPK_FP32;
        mp.out_dtype = bad[b];
        run_kernel(DCPK_KERNEL_merge, &mp, &rng);
        assert_memory_equal(out, want, sizeof(out));

        const struct dcpk_lse_scale_params sp = {
            .lse_all = (uint64_t)(uintptr_t)lse, .o = (uint64_t)(uintptr_t)out, .n_src = 2, .self = 0,
            .rows = 1, .rows_per_chunk = 1, .v_dim = 4, .o_dtype = bad[b],
        };
        run_kernel(DCPK_KERNEL_lse_scale, &sp, &rng);
        assert_memory_equal(out, want, sizeof(out));

        const uint64_t ptrs[1] = {(uint64_t)(uintptr_t)src};
        const struct dcpk_reduce_params rp = {
            .dst = (uint64_t)(uintptr_t)out, .src_ptrs = (uint64_t)(uintptr_t)ptrs, .count = 8, .n_src = 1,
            .dtype = bad[b],
        };
        run_kernel(DCPK_KERNEL_reduce, &rp, &rng);
        assert_memory_equal(out, want, sizeof(out));

        const int64_t slot = 0;
        const struct dcpk_kv_append_params ap = {
            .k_cache = (uint64_t)(uintptr_t)out, .k_src = (uint64_t)(uintptr_t)src, .slots = (uint64_t)(uintptr_t)&slot,
            .num_tokens = 1, .num_kv_heads = 1, .k_dim = 8, .block_size = 1, .dtype = DCPK_FP32,
            .src_dtype = bad[b],
        };
        run_kernel(DCPK_KERNEL_kv_append, &ap, &rng);
        assert_memory_equal(out, want, sizeof(out));

        const float w[4] = {1, 2, 3, 4};
        const struct dcpk_uv_proj_params up = {
            .src = (uint64_t)(uintptr_t)src, .w = (uint64_t)(uintptr_t)w, .dst = (uint64_t)(uintptr_t)out,
            .num_tokens = 1, .num_heads = 1, .heads_per_chunk = 1, .in_dim = 2, .out_dim = 2,
            .dst_dtype = bad[b],
        };
        run_kernel(DCPK_KERNEL_uv_proj, &up, &rng);
        assert_memory_equal(out, want, sizeof(out));
    }
}

/* ---- fill ------------------------------------------------------------------ */

static void run_fill(const struct dcpk_fill_params *fp)
{
    struct test_rng rng;
    test_rng_seed(&rng, 5);
    run_kernel(DCPK_KERNEL_fill, fp, &rng);
}

static void test_fill(void **state)
{
    (void)state;
    enum { ROWS = 40, HEADS = 3, DIM = 50 };
    static float a[ROWS * HEADS * DIM], b[ROWS * HEADS * DIM];
    uint64_t keys[ROWS];
    for (int i = 0; i < ROWS; i++)
        keys[i] = 1000 + (uint64_t)i;
    struct dcpk_fill_params fp = {
        .dst = (uint64_t)(uintptr_t)a, .key_base = 1000, .seed = 42, .rows = ROWS, .heads = HEADS,
        .dim = DIM, .dtype = DCPK_FP32, .amplitude = 2.5f,
    };
    run_fill(&fp);
    /* Deterministic, and row keys equal to key_base + row give the same data. */
    fp.dst = (uint64_t)(uintptr_t)b;
    fp.row_keys = (uint64_t)(uintptr_t)keys;
    fp.key_base = 0;
    run_fill(&fp);
    assert_memory_equal(a, b, sizeof(a));
    /* Range [-amplitude, amplitude), spread over it, and each value is the formula. */
    float lo = 0.0f, hi = 0.0f;
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < HEADS; h++)
            for (int d = 0; d < DIM; d++) {
                const float v = a[(r * HEADS + h) * DIM + d];
                assert_true(v >= -2.5f && v < 2.5f);
                assert_true(v == 2.5f * dcpk_synth_unit(42, 1000 + (uint64_t)r, (uint32_t)h, (uint32_t)d));
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
    assert_true(lo < -2.3f && hi > 2.3f);
    /* Another seed gives other data; head_offset shifts the heads. */
    fp.seed = 43;
    run_fill(&fp);
    assert_true(memcmp(a, b, sizeof(a)) != 0);
    fp.seed = 42;
    fp.heads = 1;
    fp.head_offset = 2;
    run_fill(&fp);
    for (int r = 0; r < ROWS; r++)
        assert_memory_equal(b + r * DIM, a + (r * HEADS + 2) * DIM, DIM * sizeof(float));
}

/* Other dtypes: the converted fp32 fill; fp8 scaled by inv_scale and saturated at 448. */
static void test_fill_dtypes(void **state)
{
    (void)state;
    enum { N = 500 };
    float ref[N];
    uint16_t h[N];
    uint8_t f8[N];
    struct dcpk_fill_params fp = {
        .dst = (uint64_t)(uintptr_t)ref, .seed = 9, .rows = 1, .heads = 1, .dim = N,
        .dtype = DCPK_FP32, .amplitude = 3.0f, .inv_scale = 1000.0f,
    };
    run_fill(&fp);
    fp.dst = (uint64_t)(uintptr_t)h;
    fp.dtype = DCPK_BF16;
    run_fill(&fp);
    for (int i = 0; i < N; i++)
        assert_int_equal(h[i], dcpk_f32_to_bf16(ref[i]));
    fp.dtype = DCPK_FP16;
    run_fill(&fp);
    for (int i = 0; i < N; i++)
        assert_int_equal(h[i], dcpk_f32_to_fp16(ref[i]));
    fp.dst = (uint64_t)(uintptr_t)f8;
    fp.dtype = DCPK_FP8_E4M3;
    run_fill(&fp);
    int saturated = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(f8[i], dcpk_f32_to_fp8e4m3(ref[i] * 1000.0f, 1));
        assert_true(fabsf(dcpk_fp8e4m3_to_f32(f8[i])) <= 448.0f);
        saturated += (f8[i] & 0x7f) == 0x7e;
    }
    assert_true(saturated > 0);
}

/* ---- kv_append ------------------------------------------------------------- */

static void test_kv_append(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xa99e);
    enum { TOK = 5, KVH = 2, KD = 6, VD = 3, BS = 4, PAGES = 3 };
    float k_src[TOK * KVH * KD], v_src[TOK * KVH * VD];
    for (int i = 0; i < TOK * KVH * KD; i++)
        k_src[i] = (float)test_rng_unit(&rng) * 4.0f;
    for (int i = 0; i < TOK * KVH * VD; i++)
        v_src[i] = (float)test_rng_unit(&rng) * 4.0f;
    const int64_t slots[TOK] = {5, -1, 11, 0, -7};
    for (uint32_t src_dtype = DCPK_FP32; src_dtype <= DCPK_FP16; src_dtype++)
    for (uint32_t dtype = DCPK_FP32; dtype <= DCPK_FP8_E4M3; dtype++) {
        /* Sources in src_dtype (the values rounded to it: what the kernel reads). */
        float k_val[TOK * KVH * KD], v_val[TOK * KVH * VD];
        for (int i = 0; i < TOK * KVH * KD; i++)
            k_val[i] = act_round(src_dtype, k_src[i]);
        for (int i = 0; i < TOK * KVH * VD; i++)
            v_val[i] = act_round(src_dtype, v_src[i]);
        void *k_in = act_encode(k_src, TOK * KVH * KD, src_dtype), *v_in = act_encode(v_src, TOK * KVH * VD, src_dtype);
        const uint32_t esz = dcpk_dtype_size(dtype);
        unsigned char k_cache[PAGES * KVH * BS * KD * 4], v_cache[PAGES * KVH * BS * VD * 4];
        memset(k_cache, 0x5a, sizeof(k_cache));
        memset(v_cache, 0x5a, sizeof(v_cache));
        const struct dcpk_kv_append_params ap = {
            .k_cache = (uint64_t)(uintptr_t)k_cache, .v_cache = (uint64_t)(uintptr_t)v_cache,
            .k_src = (uint64_t)(uintptr_t)k_in, .v_src = (uint64_t)(uintptr_t)v_in,
            .slots = (uint64_t)(uintptr_t)slots, .num_tokens = TOK, .num_kv_heads = KVH,
            .k_dim = KD, .v_dim = VD, .block_size = BS, .dtype = dtype, .inv_scale = 8.0f,
            .src_dtype = src_dtype,
        };
        assert_int_equal(dcpk_kv_append_grid(&ap).x, TOK);
        run_kernel(DCPK_KERNEL_kv_append, &ap, &rng);
        /* Every element of every stored token is where params.h says, converted; nothing else changed. */
        unsigned char k_want[sizeof(k_cache)], v_want[sizeof(v_cache)];
        memset(k_want, 0x5a, sizeof(k_want));
        memset(v_want, 0x5a, sizeof(v_want));
        const float scale = dtype == DCPK_FP8_E4M3 ? 8.0f : 1.0f;
        for (int t = 0; t < TOK; t++) {
            if (slots[t] < 0)
                continue;
            const uint64_t page = (uint64_t)slots[t] / BS, off = (uint64_t)slots[t] % BS;
            for (uint32_t hh = 0; hh < KVH; hh++) {
                for (uint32_t d = 0; d < KD; d++)
                    dcpk_store_as(k_want, ((page * KVH + hh) * BS + off) * KD + d, dtype,
                                  k_val[(t * KVH + hh) * KD + d] * scale);
                for (uint32_t d = 0; d < VD; d++)
                    dcpk_store_as(v_want, ((page * KVH + hh) * BS + off) * VD + d, dtype,
                                  v_val[(t * KVH + hh) * VD + d] * scale);
            }
        }
        assert_memory_equal(k_cache, k_want, (size_t)PAGES * KVH * BS * KD * esz);
        assert_memory_equal(v_cache, v_want, (size_t)PAGES * KVH * BS * VD * esz);
        free(k_in);
        free(v_in);
    }
}

/* MLA: v_cache == 0, so only K is written (v_src is never read). */
static void test_kv_append_mla(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, 3);
    float k_src[2 * 8];
    for (int i = 0; i < 16; i++)
        k_src[i] = (float)i;
    const int64_t slots[2] = {1, 2};
    uint16_t cache[4 * 8];
    memset(cache, 0, sizeof(cache));
    const struct dcpk_kv_append_params ap = {
        .k_cache = (uint64_t)(uintptr_t)cache, .k_src = (uint64_t)(uintptr_t)k_src,
        .v_src = 1, /* would crash if read */
        .slots = (uint64_t)(uintptr_t)slots, .num_tokens = 2, .num_kv_heads = 1, .k_dim = 8,
        .v_dim = 4, .block_size = 4, .dtype = DCPK_BF16,
    };
    run_kernel(DCPK_KERNEL_kv_append, &ap, &rng);
    for (int i = 0; i < 16; i++)
        assert_int_equal(cache[8 + i], dcpk_f32_to_bf16((float)i));
    assert_int_equal(cache[0], 0);
    assert_int_equal(cache[24], 0);
}

/* The address arithmetic is 64-bit: page ids whose offsets pass 2^32 elements. */
static void test_kv_row_index_64bit(void **state)
{
    (void)state;
    const uint32_t heads = 8, block = 64, row = 576;
    const uint64_t page = 3000000; /* page * heads * block * row ~ 8.8e11 */
    const uint64_t slot = page * block + 17;
    const uint64_t want = ((page * heads + 5) * block + 17) * row;
    assert_true(want > (1ull << 32));
    assert_int_equal(dcpk_kv_row_index(slot, 5, heads, block, row), want);
    /* Independent evaluation in another order: page part + head part + offset part. */
    assert_int_equal(dcpk_kv_row_index(slot, 5, heads, block, row),
                     page * ((uint64_t)heads * block * row) + 5ull * block * row + 17ull * row);
}

/*
 * End to end through kv_append: one token into a page whose byte offset is past
 * 4 GiB, in a sparse mapping (only the touched page is backed). Skipped where
 * the address space cannot be reserved.
 */
static void test_kv_append_past_4gib(void **state)
{
    (void)state;
    const size_t span = (5ull << 30);
    unsigned char *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        skip();
    struct test_rng rng;
    test_rng_seed(&rng, 11);
    /* fp32, 1 head, 64 tokens x 128 dims per page = 32 KiB per page. */
    const uint64_t page = (4ull << 30) / 32768 + 3, slot = page * 64 + 9;
    float src[128];
    for (int i = 0; i < 128; i++)
        src[i] = (float)i + 0.5f;
    const struct dcpk_kv_append_params ap = {
        .k_cache = (uint64_t)(uintptr_t)base, .k_src = (uint64_t)(uintptr_t)src,
        .slots = (uint64_t)(uintptr_t)&slot, .num_tokens = 1, .num_kv_heads = 1, .k_dim = 128,
        .block_size = 64, .dtype = DCPK_FP32,
    };
    run_kernel(DCPK_KERNEL_kv_append, &ap, &rng);
    const uint64_t byte = (page * 64 + 9) * 128 * sizeof(float);
    assert_true(byte > (1ull << 32));
    assert_memory_equal(base + byte, src, sizeof(src));
    munmap(base, span);
}

/* ---- uv_proj ------------------------------------------------------------------ */

/* Random chunked shapes: every row against the float64 oracle with its gathered
 * head's own W (distinct per head, so a wrong head or chunk index shows), the gaps
 * between chunks untouched, a NaN in one latent row reaching its outputs only. */
static void test_uv_proj(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x5e11);
    for (int rep = 0; rep < 21; rep++) {
        const uint32_t dt = (uint32_t)rep % 3; /* dst_dtype: fp32, bf16, fp16 in turn */
        const uint32_t chunks = (uint32_t)test_rng_range(&rng, 1, 4), hpc = (uint32_t)test_rng_range(&rng, 1, 4);
        const uint32_t T = (uint32_t)test_rng_range(&rng, 1, 6), in = (uint32_t)test_rng_range(&rng, 1, 70);
        const uint32_t out = (uint32_t)test_rng_range(&rng, 1, 40), heads = chunks * hpc;
        const uint64_t src_stride = (uint64_t)T * hpc * in + 3, dst_stride = (uint64_t)T * hpc * out + 5;
        float *src = xmalloc(chunks * src_stride * sizeof(float)), *w = xmalloc((size_t)heads * in * out * sizeof(float));
        void *dst = xmalloc(chunks * dst_stride * sizeof(float)); /* dst_dtype elements */
        for (uint64_t i = 0; i < chunks * src_stride; i++)
            src[i] = (float)test_rng_unit(&rng);
        for (size_t i = 0; i < (size_t)heads * in * out; i++)
            w[i] = (float)test_rng_unit(&rng);
        for (uint64_t i = 0; i < chunks * dst_stride; i++)
            dcpk_store_as(dst, i, dt, 777.0f);
        const float filler = dcpk_load_as_f32(dst, 0, dt);
        const uint32_t nan_row = (uint32_t)test_rng_range(&rng, 0, heads * T - 1); /* row (c, t, h) numbered c-major */
        const uint32_t nc = nan_row / (T * hpc), nrow = nan_row % (T * hpc);
        src[nc * src_stride + (uint64_t)nrow * in + (uint32_t)test_rng_range(&rng, 0, in - 1)] = NAN;
        const struct dcpk_uv_proj_params p = {
            .src = (uint64_t)(uintptr_t)src, .w = (uint64_t)(uintptr_t)w, .dst = (uint64_t)(uintptr_t)dst,
            .src_chunk_stride = src_stride, .dst_chunk_stride = dst_stride, .num_tokens = T, .num_heads = heads,
            .heads_per_chunk = hpc, .in_dim = in, .out_dim = out, .dst_dtype = dt,
        };
        run_kernel(DCPK_KERNEL_uv_proj, &p, &rng);
        const size_t rows = (size_t)heads * T;
        double *x = xmalloc(rows * in * sizeof(double)), *wd = xmalloc((size_t)heads * in * out * sizeof(double));
        double *ref = xmalloc(rows * out * sizeof(double));
        uint32_t *head_of = xmalloc(rows * sizeof(uint32_t));
        for (size_t i = 0; i < (size_t)heads * in * out; i++)
            wd[i] = w[i];
        for (uint32_t c = 0; c < chunks; c++)
            for (uint32_t r = 0; r < T * hpc; r++) {
                const size_t row = (size_t)c * T * hpc + r;
                head_of[row] = c * hpc + r % hpc;
                for (uint32_t i = 0; i < in; i++)
                    x[row * in + i] = src[c * src_stride + (uint64_t)r * in + i];
            }
        oracle_uv_proj(rows, in, out, x, head_of, wd, ref);
        for (uint32_t c = 0; c < chunks; c++) {
            for (uint32_t r = 0; r < T * hpc; r++)
                for (uint32_t j = 0; j < out; j++) {
                    const double want = ref[((size_t)c * T * hpc + r) * out + j];
                    const float got = dcpk_load_as_f32(dst, c * dst_stride + (uint64_t)r * out + j, dt);
                    /* fp32 sums, then one rounding to dst_dtype */
                    const double tol = 1e-5 * (1.0 + fabs(want)) + act_unit_roundoff(dt) * fabs(want);
                    if (isnan(want) ? !isnan(got) : !(fabs(got - want) <= tol))
                        fail_msg("uv_proj dtype %u chunk %u row %u col %u: %g, want %g", dt, c, r, j, got, want);
                }
            for (uint64_t i = (uint64_t)T * hpc * out; i < dst_stride; i++)
                assert_true(dcpk_load_as_f32(dst, c * dst_stride + i, dt) == filler); /* between chunks: untouched */
        }
        free(src);
        free(w);
        free(dst);
        free(x);
        free(wd);
        free(ref);
        free(head_of);
    }
}

/* ---- the family table -------------------------------------------------------- */

static void test_registry(void **state)
{
    (void)state;
    static const size_t sizes[DCPK_KERNEL_COUNT] = {
        sizeof(struct dcpk_kv_append_params), sizeof(struct dcpk_attn_params),
        sizeof(struct dcpk_merge_params), sizeof(struct dcpk_lse_scale_params),
        sizeof(struct dcpk_reduce_params), sizeof(struct dcpk_fill_params),
        sizeof(struct dcpk_uv_proj_params), sizeof(struct dcpk_sink_params),
        sizeof(struct dcpk_sparse_attn_params), sizeof(struct dcpk_index_score_params),
        sizeof(struct dcpk_topk_params),
    };
    for (int i = 0; i < DCPK_KERNEL_COUNT; i++) {
        const struct dcpk_kernel_desc *k = &dcpk_kernels[i];
        assert_non_null(k->cpu);
        assert_non_null(k->grid);
        assert_non_null(k->scratch);
        assert_int_equal(k->params_size, sizes[i]);
        char entry[64];
        snprintf(entry, sizeof(entry), "dcpk_%s", k->name);
        assert_ptr_equal(dcpk_kernel_by_entry_name(entry), k);
        snprintf(entry, sizeof(entry), "dcpk_%s__variant_bf16", k->name);
        assert_ptr_equal(dcpk_kernel_by_entry_name(entry), k);
    }
    assert_ptr_equal(dcpk_kernel_by_entry_name("dcpk_attn__anything"), &dcpk_kernels[DCPK_KERNEL_attn]);
    assert_ptr_equal(dcpk_kernel_by_entry_name("dcpk_lse_scale"), &dcpk_kernels[DCPK_KERNEL_lse_scale]);
    assert_null(dcpk_kernel_by_entry_name("dcpk_attnx"));
    assert_null(dcpk_kernel_by_entry_name("dcpk_attn_"));
    assert_null(dcpk_kernel_by_entry_name("dcpk_attn__"));
    assert_null(dcpk_kernel_by_entry_name("dcpk_lse"));
    assert_null(dcpk_kernel_by_entry_name("attn"));
    assert_null(dcpk_kernel_by_entry_name("dcpk_"));
    assert_null(dcpk_kernel_by_entry_name(""));
    assert_null(dcpk_kernel_by_entry_name(NULL));
}

/* Grids as params.h numbers them. */
static void test_grids(void **state)
{
    (void)state;
    const struct dcpk_attn_params ap = {
        .batch = 3, .num_heads = 32, .num_kv_heads = 4, .head_tile = 3, .num_splits = 5,
        .num_q_tokens = 3, .qk_dim = 128, .v_dim = 128,
    };
    const struct dcpk_grid g = dcpk_attn_grid(&ap);
    assert_int_equal(g.x, 5);
    assert_int_equal(g.y, 4 * 3); /* heads_per_kv 8 in tiles of 3 -> 3 tiles */
    assert_int_equal(g.z, 3);
    assert_true(dcpk_attn_scratch_bytes(&ap) > 0);
    const struct dcpk_merge_params mp = {.rows = 77};
    assert_int_equal(dcpk_grid_items(dcpk_merge_grid(&mp)), (77 + DCPK_MERGE_ROWS_PER_ITEM - 1) / DCPK_MERGE_ROWS_PER_ITEM);
    const struct dcpk_lse_scale_params sp = {.rows = 12};
    assert_int_equal(dcpk_grid_items(dcpk_lse_scale_grid(&sp)), 12);
    const struct dcpk_reduce_params rp = {.count = 1025};
    assert_int_equal(dcpk_grid_items(dcpk_reduce_grid(&rp)), 2);
    const struct dcpk_fill_params fp = {.rows = 9};
    assert_int_equal(dcpk_grid_items(dcpk_fill_grid(&fp)), 9);
    const struct dcpk_uv_proj_params up = {.num_heads = 6, .num_tokens = 3};
    assert_int_equal(dcpk_grid_items(dcpk_uv_proj_grid(&up)), 6);
    const struct dcpk_kv_append_params kp = {.num_tokens = 4};
    assert_int_equal(dcpk_grid_items(dcpk_kv_append_grid(&kp)), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_edge_cases),
        cmocka_unit_test(test_merge_helpers),
        cmocka_unit_test(test_merge_random),
        cmocka_unit_test(test_merge_without_lse),
        cmocka_unit_test(test_lse_scale),
        cmocka_unit_test(test_reduce_order),
        cmocka_unit_test(test_merge_act_dtypes),
        cmocka_unit_test(test_lse_scale_act_dtypes),
        cmocka_unit_test(test_reduce_act_dtypes),
        cmocka_unit_test(test_act_dtype_refused),
        cmocka_unit_test(test_fill),
        cmocka_unit_test(test_fill_dtypes),
        cmocka_unit_test(test_kv_append),
        cmocka_unit_test(test_kv_append_mla),
        cmocka_unit_test(test_kv_row_index_64bit),
        cmocka_unit_test(test_kv_append_past_4gib),
        cmocka_unit_test(test_uv_proj),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_grids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
