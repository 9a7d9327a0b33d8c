/*
 * dcpk_attn on one rank against the float64 oracle, over random shapes: batch
 * 1-4, lengths 0..300 (0 and shorter than a page included), 1, 2 or 4 query
 * tokens, GQA/MHA/MLA head layouts, dims that are and are not multiples of the
 * decode blocks, pages of 1, 4, 16 and 64 tokens, 1-4 splits, every head tile,
 * every dtype, chunked head layouts with padded strides; queries, K/V sources and
 * outputs in every activation dtype (fp32, bf16, fp16), every combination with every
 * cache dtype in test_act_dtypes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_harness.h"
#include "ptx/cpu/isa.h"

/** Every case must match the oracle this closely (relative L2 of the outputs)... */
#define ATTN_TOLERANCE 1e-5

/** ...plus one rounding of the output to its dtype (the oracle runs on the rounded
 * inputs, so that is the only other error: at most the unit roundoff, relative). */
static double case_tolerance(const struct attn_problem *pb)
{
    return ATTN_TOLERANCE + act_unit_roundoff(pb->out_dtype);
}
/** Random cases per run (about 4 ms each). */
#define ATTN_CASES 1000

static uint32_t pick(struct test_rng *rng, const uint32_t *values, size_t n)
{
    return values[test_rng_range(rng, 0, n - 1)];
}

/** A random divisor of n. */
static uint32_t random_divisor(struct test_rng *rng, uint32_t n)
{
    uint32_t d;
    do
        d = (uint32_t)test_rng_range(rng, 1, n);
    while (n % d);
    return d;
}

static void random_heads(struct attn_problem *pb, struct test_rng *rng)
{
    static const uint32_t gqa_dims[] = {64, 128, 256, 40, 24, 8};
    static const uint32_t groups[] = {1, 2, 3, 4, 8};
    const uint32_t kind = (uint32_t)test_rng_range(rng, 0, 9);
    pb->mla = kind < 2;
    if (pb->mla) { /* one latent row per token: 512 latent + 64 rope, V = the latent part */
        pb->kv_heads = 1;
        pb->heads = (uint32_t)test_rng_range(rng, 1, 8);
        pb->qk_dim = 576;
        /* 512 in real models; other V widths take the path that decodes V on its own. */
        pb->v_dim = test_rng_range(rng, 0, 4) ? 512 : (uint32_t)test_rng_range(rng, 1, 576);
    } else {
        pb->kv_heads = (uint32_t)test_rng_range(rng, 1, 4);
        pb->heads = pb->kv_heads * (kind == 2 ? 1 : pick(rng, groups, 5)); /* kind 2: MHA */
        pb->qk_dim = pick(rng, gqa_dims, 6);
        pb->v_dim = test_rng_range(rng, 0, 3) ? pb->qk_dim : pick(rng, gqa_dims, 6);
    }
}

static void random_lengths(struct attn_problem *pb, struct test_rng *rng)
{
    static const uint32_t q_lens[] = {1, 2, 4};
    pb->batch = (uint32_t)test_rng_range(rng, 1, HARNESS_MAX_BATCH);
    for (uint32_t b = 0; b < pb->batch; b++) {
        const uint32_t kind = (uint32_t)test_rng_range(rng, 0, 5);
        pb->seq_len[b] = kind == 0 ? 0 : kind == 1 ? (uint32_t)test_rng_range(rng, 1, pb->block_size)
                                                  : (uint32_t)test_rng_range(rng, 1, 300);
        const uint32_t q = pick(rng, q_lens, 3);
        pb->q_len[b] = q < pb->seq_len[b] ? q : pb->seq_len[b];
    }
}

static void random_problem(struct attn_problem *pb, struct test_rng *rng)
{
    static const uint32_t blocks[] = {1, 4, 16, 64};
    static const float kv_scales[] = {1.0f, 0.05f, 1.0f / 64.0f};
    memset(pb, 0, sizeof(*pb));
    random_heads(pb, rng);
    pb->dtype = (uint32_t)test_rng_range(rng, DCPK_FP32, DCPK_FP8_E4M3);
    pb->block_size = pick(rng, blocks, 4);
    pb->kv_scale = pb->dtype == DCPK_FP8_E4M3 ? kv_scales[test_rng_range(rng, 0, 2)] : 1.0f;
    pb->scale = (float)((0.5 + test_rng_unit(rng) * 0.4 + 0.4) / sqrt((double)pb->qk_dim));
    /* Activations fp32 half the time, else any of the three for each array. */
    if (test_rng_range(rng, 0, 1)) {
        pb->q_dtype = (uint32_t)test_rng_range(rng, DCPK_FP32, DCPK_FP16);
        pb->src_dtype = (uint32_t)test_rng_range(rng, DCPK_FP32, DCPK_FP16);
        pb->out_dtype = (uint32_t)test_rng_range(rng, DCPK_FP32, DCPK_FP16);
    }
    random_lengths(pb, rng);
    /* Amplitudes up to 3 make some softmaxes peaky. */
    problem_fill(pb, rng, (float)test_rng_range(rng, 1, 3));
}

static void random_run(const struct attn_problem *pb, struct rank_run *run, struct test_rng *rng)
{
    memset(run, 0, sizeof(*run));
    run->group_size = 1;
    run->interleave = 1;
    run->num_splits = (uint32_t)test_rng_range(rng, 1, 4);
    const uint32_t hpk = pb->heads / pb->kv_heads;
    run->head_tile = test_rng_range(rng, 0, 3) ? (uint32_t)test_rng_range(rng, 1, hpk) : 0; /* 0: all */
    run->chunks = random_divisor(rng, pb->heads);
    run->variant = (int)test_rng_range(rng, 0, DCPK_CPU_ISA_COUNT); /* 0: the default pick */
    run->fused = run->num_splits > 1 && test_rng_range(rng, 0, 1); /* the splits combined by the launch */
}

/*
 * More query rows per work item than the kernel takes at once (128): long
 * multi-token queries (chunked prefill, MTP) over up to 16 heads per KV head,
 * so a work item runs several row groups over the same keys.
 */
static void widen_rows(struct attn_problem *pb, struct test_rng *rng)
{
    problem_free(pb);
    pb->heads = pb->kv_heads * (uint32_t)test_rng_range(rng, 8, 16);
    for (uint32_t b = 0; b < pb->batch; b++) {
        pb->seq_len[b] = (uint32_t)test_rng_range(rng, 1, 300);
        pb->q_len[b] = (uint32_t)test_rng_range(rng, 1, pb->seq_len[b] < 64 ? pb->seq_len[b] : 64);
    }
    problem_fill(pb, rng, 2.0f);
}

/* Output padding between chunks must survive the kernels untouched. */
#define PAD_SENTINEL 12345.0f

static void check_padding(const float *p, uint64_t chunks, uint64_t stride, uint64_t used)
{
    for (uint64_t c = 0; c < chunks; c++)
        for (uint64_t i = used; i < stride; i++)
            assert_true(p[c * stride + i] == PAD_SENTINEL);
}

static double run_case(struct test_rng *rng, int case_no, int many_rows)
{
    struct attn_problem pb;
    struct rank_run run;
    random_problem(&pb, rng);
    if (many_rows)
        widen_rows(&pb, rng);
    random_run(&pb, &run, rng);
    if (many_rows)
        run.head_tile = 0;
    const uint32_t tokens = problem_tokens(&pb), hpc = pb.heads / run.chunks;
    const uint64_t rows_per_chunk = (uint64_t)tokens * hpc;
    struct attn_output res = {
        .out_chunk_stride = rows_per_chunk * pb.v_dim + test_rng_range(rng, 0, 4),
        .lse_chunk_stride = rows_per_chunk + test_rng_range(rng, 0, 4),
    };
    res.out = malloc((res.out_chunk_stride * run.chunks + 1) * sizeof(float));
    res.lse = malloc((res.lse_chunk_stride * run.chunks + 1) * sizeof(float));
    assert_non_null(res.out);
    assert_non_null(res.lse);
    for (uint64_t i = 0; i < res.out_chunk_stride * run.chunks; i++)
        res.out[i] = (i % res.out_chunk_stride) < rows_per_chunk * pb.v_dim ? NAN : PAD_SENTINEL;
    for (uint64_t i = 0; i < res.lse_chunk_stride * run.chunks; i++)
        res.lse[i] = (i % res.lse_chunk_stride) < rows_per_chunk ? NAN : PAD_SENTINEL;

    rank_attention(&pb, &run, rng, &res);

    char desc[512];
    int n = snprintf(desc, sizeof(desc), "case %d: ", case_no);
    problem_describe(&pb, &run, desc + n, sizeof(desc) - (size_t)n);
    const double err = check_against_oracle(&pb, 0, pb.heads, hpc, &res, case_tolerance(&pb), desc);
    check_padding(res.out, run.chunks, res.out_chunk_stride, rows_per_chunk * pb.v_dim);
    check_padding(res.lse, run.chunks, res.lse_chunk_stride, rows_per_chunk);
    free(res.out);
    free(res.lse);
    problem_free(&pb);
    return err;
}

static void test_random_shapes(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xa77e);
    double worst = 0.0;
    for (int i = 0; i < ATTN_CASES; i++) {
        const double err = run_case(&rng, i, 0);
        worst = err > worst ? err : worst;
    }
    print_message("%d cases, worst relative L2 error %.3g\n", ATTN_CASES, worst);
}

static void test_many_rows(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x3a7e);
    for (int i = 0; i < 40; i++)
        run_case(&rng, i, 1);
}

/*
 * Every activation dtype combination (q x K/V source x out) with every cache dtype,
 * GQA and MLA, one split and three (the merge then writes out), against the oracle
 * on the rounded inputs within ATTN_TOLERANCE + the output's unit roundoff: a
 * kernel that read q or the sources, or wrote out, in another dtype than its
 * params say gives garbage and fails (checked by mutation).
 */
static void test_act_dtypes(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xd7e);
    int cases = 0;
    for (int mla = 0; mla <= 1; mla++)
        for (uint32_t cache = DCPK_FP32; cache <= DCPK_FP8_E4M3; cache++)
            for (uint32_t qd = DCPK_FP32; qd <= DCPK_FP16; qd++)
                for (uint32_t sd = DCPK_FP32; sd <= DCPK_FP16; sd++)
                    for (uint32_t od = DCPK_FP32; od <= DCPK_FP16; od++) {
                        /* DCP_TEST_QUICK (valgrind): every q x source x out combination still,
                         * with a quarter of the cache dtypes each, and one split count. */
                        if (test_quick() && (cache + qd + sd + od) % 4 != 0)
                            continue;
                        struct attn_problem pb;
                        memset(&pb, 0, sizeof(pb));
                        pb.mla = mla;
                        pb.kv_heads = mla ? 1 : 2;
                        pb.heads = mla ? 4 : 4;
                        pb.qk_dim = mla ? 576 : 64;
                        pb.v_dim = mla ? 512 : 64;
                        pb.dtype = cache;
                        pb.block_size = 16;
                        pb.kv_scale = cache == DCPK_FP8_E4M3 ? 0.05f : 1.0f;
                        pb.scale = (float)(1.0 / sqrt((double)pb.qk_dim));
                        pb.q_dtype = qd;
                        pb.src_dtype = sd;
                        pb.out_dtype = od;
                        pb.batch = 2;
                        pb.seq_len[0] = 45;
                        pb.seq_len[1] = 3;
                        pb.q_len[0] = 2;
                        pb.q_len[1] = 1;
                        problem_fill(&pb, &rng, 2.0f);
                        const uint32_t rows = problem_tokens(&pb) * pb.heads;
                        for (uint32_t splits = 1; splits <= 3; splits += 2) {
                            if (test_quick() && splits != 1 + 2 * ((qd + od + (uint32_t)mla) % 2))
                                continue;
                            struct rank_run run = {.group_size = 1, .interleave = 1, .num_splits = splits,
                                                   .chunks = 2};
                            const struct attn_output res = {
                                .out = malloc((size_t)rows * pb.v_dim * sizeof(float)),
                                .lse = malloc(rows * sizeof(float)),
                                .out_chunk_stride = (uint64_t)rows / 2 * pb.v_dim,
                                .lse_chunk_stride = rows / 2,
                            };
                            assert_non_null(res.out);
                            assert_non_null(res.lse);
                            rank_attention(&pb, &run, &rng, &res);
                            char desc[512];
                            problem_describe(&pb, &run, desc, sizeof(desc));
                            check_against_oracle(&pb, 0, pb.heads, pb.heads / 2, &res, case_tolerance(&pb), desc);
                            free(res.out);
                            free(res.lse);
                            cases++;
                        }
                        problem_free(&pb);
                    }
    print_message("%d activation dtype cases\n", cases);
}

/** Relative L2 distance of two float vectors (0 when both are 0). */
static double rel_l2_f(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/*
 * Every instruction-set variant this CPU runs gives the baseline's result (to
 * fp32 rounding: FMA contraction differs) and the oracle's, on the shapes whose
 * code paths differ: GQA 8 rows and MLA 128 rows (the AVX-512 variant's 16-row
 * products), MLA 24 rows (a 16-row vector then an 8-row one), fp16 rows with and
 * without a tail after the last 16-element block (the F16C decoder), every dtype.
 */
static void test_variants_agree(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x15a);
    static const struct {
        int mla;
        uint32_t heads, kv_heads, qk, v, q_len;
    } shapes[] = {
        {0, 8, 1, 128, 128, 1}, {0, 16, 2, 40, 40, 2}, {1, 128, 1, 576, 512, 1}, {1, 24, 1, 576, 512, 1},
        {1, 6, 1, 576, 512, 4},
    };
    int ran[DCPK_CPU_ISA_COUNT] = {0};
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (uint32_t dtype = DCPK_FP32; dtype <= DCPK_FP8_E4M3; dtype++) {
            struct attn_problem pb;
            memset(&pb, 0, sizeof(pb));
            pb.mla = shapes[si].mla;
            pb.heads = shapes[si].heads;
            pb.kv_heads = shapes[si].kv_heads;
            pb.qk_dim = shapes[si].qk;
            pb.v_dim = shapes[si].v;
            pb.dtype = dtype;
            pb.block_size = 16;
            pb.kv_scale = dtype == DCPK_FP8_E4M3 ? 0.05f : 1.0f;
            pb.scale = (float)(1.0 / sqrt((double)pb.qk_dim));
            pb.batch = 2;
            pb.seq_len[0] = 157;
            pb.seq_len[1] = 61;
            pb.q_len[0] = pb.q_len[1] = shapes[si].q_len;
            problem_fill(&pb, &rng, 2.0f);
            const uint32_t rows = problem_tokens(&pb) * pb.heads;
            float *base_out = malloc((size_t)rows * pb.v_dim * sizeof(float)), *base_lse = malloc(rows * sizeof(float));
            float *out = malloc((size_t)rows * pb.v_dim * sizeof(float)), *lse = malloc(rows * sizeof(float));
            assert_non_null(base_out);
            assert_non_null(base_lse);
            assert_non_null(out);
            assert_non_null(lse);
            for (int isa = DCPK_CPU_ISA_BASELINE; isa < DCPK_CPU_ISA_COUNT; isa++) {
                if (!dcpk_cpu_has_isa((enum dcpk_cpu_isa)isa))
                    continue;
                ran[isa]++;
                struct rank_run run = {.group_size = 1, .interleave = 1, .num_splits = 2, .chunks = 1,
                                       .variant = isa + 1};
                const int first = isa == DCPK_CPU_ISA_BASELINE;
                const struct attn_output res = {.out = first ? base_out : out, .lse = first ? base_lse : lse,
                                                .out_chunk_stride = (uint64_t)rows * pb.v_dim,
                                                .lse_chunk_stride = rows};
                rank_attention(&pb, &run, &rng, &res);
                char desc[512];
                problem_describe(&pb, &run, desc, sizeof(desc));
                check_against_oracle(&pb, 0, pb.heads, pb.heads, &res, ATTN_TOLERANCE, desc);
                if (first)
                    continue;
                for (uint32_t r = 0; r < rows; r++) {
                    const double e = rel_l2_f(out + (size_t)r * pb.v_dim, base_out + (size_t)r * pb.v_dim, pb.v_dim);
                    if (!(e <= 1e-5) || !(fabsf(lse[r] - base_lse[r]) <= 1e-5f * (1.0f + fabsf(base_lse[r]))))
                        fail_msg("%s: row %u differs from the baseline: rel L2 %.3g, lse %.9g vs %.9g", desc, r, e,
                                 (double)lse[r], (double)base_lse[r]);
                }
            }
            free(base_out);
            free(base_lse);
            free(out);
            free(lse);
            problem_free(&pb);
        }
    for (int isa = 0; isa < DCPK_CPU_ISA_COUNT; isa++)
        print_message("variant %-8s %s\n", dcpk_cpu_isa_name((enum dcpk_cpu_isa)isa),
                      ran[isa] ? "checked" : "not run by this CPU");
}

/* The DCP_CPU_ISA cap: a variant name caps the pick, anything else caps nothing,
 * and a CPU that runs a variant runs every one below it. */
static void test_isa_select(void **state)
{
    (void)state;
    int best = DCPK_CPU_ISA_BASELINE;
    for (int isa = 1; isa < DCPK_CPU_ISA_COUNT; isa++)
        if (dcpk_cpu_has_isa((enum dcpk_cpu_isa)isa)) {
            assert_true(dcpk_cpu_has_isa((enum dcpk_cpu_isa)(isa - 1)));
            best = isa;
        }
    assert_true(dcpk_cpu_has_isa(DCPK_CPU_ISA_BASELINE));
    assert_int_equal(dcpk_cpu_isa_select(NULL), best);
    assert_int_equal(dcpk_cpu_isa_select(""), best);
    assert_int_equal(dcpk_cpu_isa_select("no-such-isa"), best);
    assert_int_equal(dcpk_cpu_isa_select("baseline"), DCPK_CPU_ISA_BASELINE);
    for (int isa = 0; isa < DCPK_CPU_ISA_COUNT; isa++) {
        const int want = isa < best ? isa : best;
        assert_int_equal(dcpk_cpu_isa_select(dcpk_cpu_isa_name((enum dcpk_cpu_isa)isa)), want);
    }
    assert_null(dcpk_cpu_isa_name(DCPK_CPU_ISA_COUNT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_shapes),
        cmocka_unit_test(test_many_rows),
        cmocka_unit_test(test_variants_agree),
        cmocka_unit_test(test_act_dtypes),
        cmocka_unit_test(test_isa_select),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
