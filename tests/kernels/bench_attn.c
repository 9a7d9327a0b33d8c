/*
 * bench_attn: single-thread throughput of the CPU attention kernel (dcpk_attn_cpu)
 * on long contexts, next to memcpy of the same KV bytes. Not a test: it prints
 * what it measured, for tuning.
 *
 *   bench_attn [context_tokens [name_filter [variant|all]]]
 *
 * (default 32768 tokens, every case, the variant dcpk_attn_cpu runs; a variant
 * name of isa.h, "baseline" to "avx512", times that one; "all" times every
 * variant this CPU runs, one line each.)
 *
 * Cases: GQA D=128 with 8 query heads per KV head (bf16, fp16, fp8, fp32 caches),
 * and MLA 576/512 with 16 and 128 heads (bf16). One sequence, 64-token pages,
 * one work item per (KV head), no splits. GB/s counts KV bytes read once;
 * GFLOP/s counts 2 * heads * tokens * (qk_dim + v_dim).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_kernels/cpu.h"
#include "ptx/cpu/isa.h"
#include "runtime/util/util.h"

struct bench_case {
    const char *name;
    uint32_t kv_heads, heads, qk_dim, v_dim, dtype;
    int mla;
};

/** Fills n elements of dtype with seeded data through the fill kernel. */
static void fill(void *dst, uint64_t rows, uint32_t dim, uint32_t dtype, uint64_t seed)
{
    struct dcpk_fill_params f = {
        .dst = (uint64_t)(uintptr_t)dst, .seed = seed, .rows = (uint32_t)rows, .heads = 1,
        .dim = dim, .dtype = dtype, .amplitude = 1.0f, .inv_scale = 64.0f,
    };
    dcpk_fill_cpu(&f, 0, dcpk_grid_items(dcpk_fill_grid(&f)), NULL);
}


/** Best of `reps` timings of one full launch (all work items, one thread). */
static double time_attn(const struct dcpk_attn_params *p, void *scratch, int reps, enum dcpk_cpu_isa isa)
{
    const uint64_t items = dcpk_grid_items(dcpk_attn_grid(p));
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = dcp_now_seconds();
        dcpk_attn_cpu_isa(p, 0, items, scratch, isa);
        const double t = dcp_now_seconds() - t0;
        best = t < best ? t : best;
    }
    return best;
}

static double time_memcpy(void *dst, const void *src, size_t bytes, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = dcp_now_seconds();
        memcpy(dst, src, bytes);
        /* The copy must happen: the compiler may not drop it as dead. */
        __asm__ volatile("" : : "r"(dst) : "memory");
        const double t = dcp_now_seconds() - t0;
        best = t < best ? t : best;
    }
    return best;
}

static int run_case(const struct bench_case *c, uint32_t len, enum dcpk_cpu_isa isa)
{
    const uint32_t block = 64, pages = (len + block - 1) / block;
    const size_t esz = dcpk_dtype_size(c->dtype);
    const size_t k_elems = (size_t)pages * c->kv_heads * block * c->qk_dim;
    const size_t v_elems = c->mla ? 0 : (size_t)pages * c->kv_heads * block * c->v_dim;
    const size_t kv_bytes = (k_elems + v_elems) * esz;
    char *kv = malloc(kv_bytes), *copy = malloc(kv_bytes);
    int32_t *table = malloc(pages * sizeof(*table));
    float *q = malloc((size_t)c->heads * c->qk_dim * sizeof(float));
    float *out = malloc((size_t)c->heads * c->v_dim * sizeof(float));
    float *lse = malloc(c->heads * sizeof(float));
    int32_t seq_lens[1] = {(int32_t)len}, q_start[2] = {0, 1};
    if (!kv || !copy || !table || !q || !out || !lse) {
        fprintf(stderr, "bench_attn: out of memory\n");
        return 1;
    }
    fill(kv, k_elems + v_elems, 1, c->dtype, 1);
    fill(q, c->heads, c->qk_dim, DCPK_FP32, 2);
    for (uint32_t i = 0; i < pages; i++)
        table[i] = (int32_t)i;
    struct dcpk_attn_params p = {
        .q = (uint64_t)(uintptr_t)q, .k_cache = (uint64_t)(uintptr_t)kv,
        .v_cache = (uint64_t)(uintptr_t)(c->mla ? kv : kv + k_elems * esz),
        .block_table = (uint64_t)(uintptr_t)table, .seq_lens = (uint64_t)(uintptr_t)seq_lens,
        .q_start = (uint64_t)(uintptr_t)q_start, .out = (uint64_t)(uintptr_t)out,
        .lse = (uint64_t)(uintptr_t)lse, .batch = 1, .num_q_tokens = 1, .num_heads = c->heads,
        .heads_per_chunk = c->heads, .num_kv_heads = c->kv_heads,
        .head_tile = c->heads / c->kv_heads, .qk_dim = c->qk_dim, .v_dim = c->v_dim,
        .v_row_stride = c->mla ? c->qk_dim : c->v_dim, .block_size = block, .max_blocks = pages,
        .rank = 0, .group_size = 1, .interleave = 1, .num_splits = 1, .dtype = c->dtype,
        .scale = 1.0f / sqrtf((float)c->qk_dim), .kv_scale = 1.0f / 64.0f,
    };
    void *scratch = malloc(dcpk_attn_scratch_bytes(&p));
    if (!scratch) {
        fprintf(stderr, "bench_attn: out of memory\n");
        return 1;
    }
    memcpy(copy, kv, kv_bytes); /* fault the pages in */
    const double t_attn = time_attn(&p, scratch, 5, isa);
    const double t_copy = time_memcpy(copy, kv, kv_bytes, 5);
    const double flops = 2.0 * c->heads * (double)len * (c->qk_dim + c->v_dim);
    const double gbs = kv_bytes / t_attn / 1e9, copy_gbs = kv_bytes / t_copy / 1e9;
    printf("%-26s %-8s %8.1f MB %9.3f ms %7.2f GB/s %7.2f GFLOP/s | memcpy %6.2f GB/s | ratio %.2f\n",
           c->name, dcpk_cpu_isa_name(isa), kv_bytes / 1e6, t_attn * 1e3, gbs, flops / t_attn / 1e9, copy_gbs, gbs / copy_gbs);
    int bad = !(lse[0] > -INFINITY) || out[0] != out[0];
    free(scratch);
    free(kv);
    free(copy);
    free(table);
    free(q);
    free(out);
    free(lse);
    return bad;
}

int main(int argc, char **argv)
{
    const uint32_t len = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 32768u;
    const char *filter = argc > 2 ? argv[2] : "";
    const char *variant = argc > 3 ? argv[3] : NULL;
    const int all = variant && !strcmp(variant, "all");
    /* No variant named: the one dcpk_attn_cpu runs (DCP_CPU_ISA caps it). */
    const enum dcpk_cpu_isa isa = variant ? dcpk_cpu_isa_select(all ? NULL : variant) : dcpk_cpu_isa_active();
    static const struct bench_case cases[] = {
        {"GQA bf16 8kv x8 D128", 8, 64, 128, 128, DCPK_BF16, 0},
        {"GQA fp16 8kv x8 D128", 8, 64, 128, 128, DCPK_FP16, 0},
        {"GQA fp8  8kv x8 D128", 8, 64, 128, 128, DCPK_FP8_E4M3, 0},
        {"GQA fp32 8kv x8 D128", 8, 64, 128, 128, DCPK_FP32, 0},
        {"MLA bf16 16 heads", 1, 16, 576, 512, DCPK_BF16, 1},
        {"MLA bf16 128 heads", 1, 128, 576, 512, DCPK_BF16, 1},
    };
    printf("bench_attn: %u tokens, 1 sequence, 64-token pages, 1 thread, %s\n", len,
           all ? "every variant this CPU runs" : dcpk_cpu_isa_name(isa));
    int bad = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (int v = all ? 0 : (int)isa; v <= (int)isa; v++)
            if (strstr(cases[i].name, filter) && dcpk_cpu_has_isa((enum dcpk_cpu_isa)v))
                bad |= run_case(&cases[i], len, (enum dcpk_cpu_isa)v);
    return bad;
}
