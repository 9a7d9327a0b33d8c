/* attn_harness.c: see attn_harness.h. */
#include "attn_harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_kernels/convert.h"
#include "dcp_kernels/placement.h"
#include "oracle.h"
#include "ptx/cpu/isa.h"

/** malloc that fails the test instead of returning NULL (never 0 bytes). */
static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/** n floats set to NaN: whatever the kernels leave unwritten shows. */
static float *nan_floats(size_t n)
{
    float *p = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static void fill_unit(float *dst, size_t n, struct test_rng *rng, float amplitude)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)test_rng_unit(rng) * amplitude;
}

float act_round(uint32_t dtype, float x)
{
    unsigned char bits[4];
    dcpk_store_as(bits, 0, dtype, x);
    return dcpk_load_as_f32(bits, 0, dtype);
}

double act_unit_roundoff(uint32_t dtype)
{
    return dtype == DCPK_BF16 ? 0x1p-8 : dtype == DCPK_FP16 ? 0x1p-11 : 0x1p-24; /* 2^-p, p significand bits */
}

void *act_encode(const float *src, size_t n, uint32_t dtype)
{
    void *dst = xmalloc(n * dcpk_dtype_size(dtype));
    for (size_t i = 0; i < n; i++)
        dcpk_store_as(dst, i, dtype, src[i]);
    return dst;
}

/** Rounds n values in place to an activation dtype. */
static void round_all(float *x, size_t n, uint32_t dtype)
{
    for (size_t i = 0; i < n; i++)
        x[i] = act_round(dtype, x[i]);
}

void problem_fill(struct attn_problem *pb, struct test_rng *rng, float amplitude)
{
    for (uint32_t b = 0; b < pb->batch; b++) {
        const size_t len = pb->seq_len[b];
        pb->k_src[b] = xmalloc(len * pb->kv_heads * pb->qk_dim * sizeof(float));
        fill_unit(pb->k_src[b], len * pb->kv_heads * pb->qk_dim, rng, amplitude);
        round_all(pb->k_src[b], len * pb->kv_heads * pb->qk_dim, pb->src_dtype);
        pb->v_src[b] = NULL;
        if (!pb->mla) {
            pb->v_src[b] = xmalloc(len * pb->kv_heads * pb->v_dim * sizeof(float));
            fill_unit(pb->v_src[b], len * pb->kv_heads * pb->v_dim, rng, 1.0f);
            round_all(pb->v_src[b], len * pb->kv_heads * pb->v_dim, pb->src_dtype);
        }
        pb->q[b] = xmalloc((size_t)pb->q_len[b] * pb->heads * pb->qk_dim * sizeof(float));
        fill_unit(pb->q[b], (size_t)pb->q_len[b] * pb->heads * pb->qk_dim, rng, amplitude);
        round_all(pb->q[b], (size_t)pb->q_len[b] * pb->heads * pb->qk_dim, pb->q_dtype);
    }
}

void problem_free(struct attn_problem *pb)
{
    for (uint32_t b = 0; b < pb->batch; b++) {
        free(pb->k_src[b]);
        free(pb->v_src[b]);
        free(pb->q[b]);
        free(pb->topk[b]);
        pb->topk[b] = NULL;
    }
}

uint32_t problem_ring_pages(const struct attn_problem *pb, uint32_t group_size, uint32_t interleave)
{
    uint64_t most = 1;
    for (uint32_t b = 0; b < pb->batch; b++)
        for (uint32_t r = 0; r < group_size; r++) {
            /* The keys the sequence's query tokens see: from its first one's window to the end. */
            const int64_t from = (int64_t)pb->seq_len[b] - pb->q_len[b] + 1 - (int64_t)pb->window;
            const uint64_t first = from > 0 ? dcpk_local_length((uint64_t)from, r, group_size, interleave) : 0;
            const uint64_t n = dcpk_local_length(pb->seq_len[b], r, group_size, interleave) - first;
            most = n > most ? n : most;
        }
    return (uint32_t)((most + pb->block_size - 1) / pb->block_size);
}

uint32_t problem_tokens(const struct attn_problem *pb)
{
    uint32_t t = 0;
    for (uint32_t b = 0; b < pb->batch; b++)
        t += pb->q_len[b];
    return t;
}

void problem_describe(const struct attn_problem *pb, const struct rank_run *run, char *buf, size_t len)
{
    int n = snprintf(buf, len,
                     "%s dtype %u q/k,v/out %u/%u/%u heads %u/%u dims %u/%u block %u | rank %u/%u il %u splits %u tile %u chunks %u isa %s",
                     pb->mla ? "MLA" : "GQA", pb->dtype, pb->q_dtype, pb->src_dtype, pb->out_dtype, pb->heads, pb->kv_heads, pb->qk_dim, pb->v_dim,
                     pb->block_size, run->rank, run->group_size, run->interleave, run->num_splits,
                     run->head_tile, run->chunks,
                     run->variant > 0 ? dcpk_cpu_isa_name((enum dcpk_cpu_isa)(run->variant - 1)) : "default");
    if (n > 0 && (size_t)n < len && (pb->window || pb->num_topk || pb->sinks))
        n += snprintf(buf + n, len - (size_t)n, " | window %u%s topk %u%s", pb->window, pb->ring ? " (ring)" : "",
                      pb->num_topk, pb->sinks ? " sinks" : "");
    for (uint32_t b = 0; b < pb->batch && n > 0 && (size_t)n < len; b++)
        n += snprintf(buf + n, len - (size_t)n, "%s %u(q%u)", b ? "" : " | seqs", pb->seq_len[b], pb->q_len[b]);
}

void problem_oracle(const struct attn_problem *pb, uint32_t b, double *out, double *lse)
{
    const size_t len = pb->seq_len[b];
    const float inv_scale = 1.0f / pb->kv_scale;
    double *q = xmalloc((size_t)pb->q_len[b] * pb->heads * pb->qk_dim * sizeof(double));
    double *k = xmalloc(len * pb->kv_heads * pb->qk_dim * sizeof(double));
    double *v = xmalloc(len * pb->kv_heads * pb->v_dim * sizeof(double));
    for (size_t i = 0; i < (size_t)pb->q_len[b] * pb->heads * pb->qk_dim; i++)
        q[i] = pb->q[b][i];
    oracle_quantize_array(k, pb->k_src[b], len * pb->kv_heads * pb->qk_dim, pb->dtype, inv_scale,
                          pb->kv_scale);
    if (pb->mla) /* V is the head of the (single) K row */
        for (size_t j = 0; j < len; j++)
            memcpy(v + j * pb->v_dim, k + j * pb->qk_dim, pb->v_dim * sizeof(double));
    else
        oracle_quantize_array(v, pb->v_src[b], len * pb->kv_heads * pb->v_dim, pb->dtype, inv_scale,
                              pb->kv_scale);
    double sinks[256];
    assert_true(pb->heads <= 256);
    for (uint32_t h = 0; pb->sinks && h < pb->heads; h++)
        sinks[h] = pb->sinks[h];
    const struct oracle_attn_shape shape = {
        .len = pb->seq_len[b], .q_len = pb->q_len[b], .heads = pb->heads, .kv_heads = pb->kv_heads,
        .qk_dim = pb->qk_dim, .v_dim = pb->v_dim, .scale = pb->scale, .window = pb->window,
        .topk = pb->num_topk ? pb->topk[b] : NULL, .num_topk = pb->num_topk, .topk_stride = pb->num_topk,
        .sinks = pb->sinks ? sinks : NULL,
    };
    oracle_attention(&shape, q, k, v, out, lse);
    free(q);
    free(k);
    free(v);
}

int (*harness_launch)(enum dcpk_kernel_id id, const void *params);
int harness_soft_failures = -1;

void harness_fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (harness_soft_failures < 0)
        fail_msg("%s", msg);
    harness_soft_failures++;
}

void run_kernel(enum dcpk_kernel_id id, const void *params, struct test_rng *rng)
{
    run_kernel_with(id, dcpk_kernels[id].cpu, params, rng);
}

void run_kernel_with(enum dcpk_kernel_id id, dcpk_cpu_fn fn, const void *params, struct test_rng *rng)
{
    const struct dcpk_kernel_desc *k = &dcpk_kernels[id];
    if (harness_launch && fn == k->cpu && harness_launch(id, params))
        return;
    const uint64_t items = dcpk_grid_items(k->grid(params));
    const size_t bytes = k->scratch(params);
    /* Scratch at an odd address half the time: the kernels align it themselves. */
    const size_t skew = (size_t)test_rng_range(rng, 0, 1);
    unsigned char *raw = xmalloc(bytes + skew + 64);
    memset(raw + skew + bytes, 0xa5, 64);
    uint64_t begin = 0;
    while (begin < items) {
        const uint64_t end = test_rng_range(rng, 0, 2) ? items : test_rng_range(rng, begin + 1, items);
        fn(params, begin, end, raw + skew);
        begin = end;
    }
    for (size_t i = 0; i < 64; i++)
        assert_int_equal(raw[skew + bytes + i], 0xa5);
    free(raw);
}

/**
 * Appends every token of sequence b that the rank owns (slot -1 for the others);
 * with a ring of ring pages, only the owned tokens the ring keeps (the last
 * ring * block_size local ones), at local page (c / block_size) % ring.
 */
static void append_sequence(const struct attn_problem *pb, const struct rank_run *run,
                            struct test_rng *rng, const int32_t *table, void *k_cache, void *v_cache,
                            uint32_t b, uint32_t ring)
{
    const uint32_t len = pb->seq_len[b], bs = pb->block_size;
    void *k_src = act_encode(pb->k_src[b], (size_t)len * pb->kv_heads * pb->qk_dim, pb->src_dtype);
    void *v_src = pb->mla ? NULL : act_encode(pb->v_src[b], (size_t)len * pb->kv_heads * pb->v_dim, pb->src_dtype);
    int64_t *slots = xmalloc((size_t)len * sizeof(int64_t));
    for (uint32_t p = 0; p < len; p++) {
        if (dcpk_owner_rank(p, run->group_size, run->interleave) != run->rank) {
            slots[p] = -1;
            continue;
        }
        const uint64_t local = dcpk_local_index(p, run->group_size, run->interleave);
        const uint64_t kept = (uint64_t)ring * bs, local_len = dcpk_local_length(len, run->rank, run->group_size,
                                                                                  run->interleave);
        if (ring && local + kept < local_len) {
            slots[p] = -1; /* overwritten in the ring by a later token: never written */
            continue;
        }
        slots[p] = (int64_t)table[ring ? local / bs % ring : local / bs] * bs + (int64_t)(local % bs);
    }
    const struct dcpk_kv_append_params ap = {
        .k_cache = (uint64_t)(uintptr_t)k_cache, .v_cache = (uint64_t)(uintptr_t)v_cache,
        .k_src = (uint64_t)(uintptr_t)k_src, .v_src = (uint64_t)(uintptr_t)v_src,
        .slots = (uint64_t)(uintptr_t)slots, .num_tokens = len, .num_kv_heads = pb->kv_heads,
        .k_dim = pb->qk_dim, .v_dim = pb->v_dim, .block_size = bs, .dtype = pb->dtype,
        .inv_scale = 1.0f / pb->kv_scale, .src_dtype = pb->src_dtype,
    };
    run_kernel(DCPK_KERNEL_kv_append, &ap, rng);
    free(slots);
    free(k_src);
    free(v_src);
}

/** Queries in the chunked layout (padding between chunks poisoned with NaN). */
static float *chunked_queries(const struct attn_problem *pb, const struct rank_run *run,
                              uint64_t chunk_stride)
{
    const uint32_t hpc = pb->heads / run->chunks;
    float *q = nan_floats(chunk_stride * run->chunks);
    uint32_t t = 0;
    for (uint32_t b = 0; b < pb->batch; b++)
        for (uint32_t i = 0; i < pb->q_len[b]; i++, t++)
            for (uint32_t g = 0; g < pb->heads; g++)
                memcpy(q + (g / hpc) * chunk_stride + ((uint64_t)t * hpc + g % hpc) * pb->qk_dim,
                       pb->q[b] + ((size_t)i * pb->heads + g) * pb->qk_dim, pb->qk_dim * sizeof(float));
    return q;
}

/* dcpk_attn_cpu_isa of each variant, as the cpu function run_kernel_with takes. */
#define HARNESS_ATTN_ISA(isa)                                                                   \
    static void attn_##isa(const void *params, uint64_t begin, uint64_t end, void *scratch) \
    {                                                                                           \
        dcpk_attn_cpu_isa(params, begin, end, scratch, DCPK_CPU_ISA_##isa);                     \
    }
HARNESS_ATTN_ISA(BASELINE)
HARNESS_ATTN_ISA(AVX2)
HARNESS_ATTN_ISA(F16C)
HARNESS_ATTN_ISA(AVX512)
#undef HARNESS_ATTN_ISA
static const dcpk_cpu_fn attn_variants[DCPK_CPU_ISA_COUNT] = {attn_BASELINE, attn_AVX2, attn_F16C, attn_AVX512};

/** Combines the split partials in ws (fp32) into out (pb->out_dtype, dst's layout) with dcpk_merge. */
static void merge_splits(const struct attn_problem *pb, const struct rank_run *run, struct test_rng *rng,
                         const float *ws_o, const float *ws_lse, uint64_t stride_o, uint64_t stride_lse,
                         const struct attn_output *dst, void *out)
{
    const uint32_t rows_per_chunk = problem_tokens(pb) * (pb->heads / run->chunks);
    const struct dcpk_merge_params mp = {
        .src_o = (uint64_t)(uintptr_t)ws_o, .src_lse = (uint64_t)(uintptr_t)ws_lse,
        .out = (uint64_t)(uintptr_t)out, .out_lse = (uint64_t)(uintptr_t)dst->lse,
        .src_stride_o = stride_o, .src_stride_lse = stride_lse,
        .out_chunk_stride = dst->out_chunk_stride, .out_lse_chunk_stride = dst->lse_chunk_stride,
        .n_src = run->num_splits, .rows = rows_per_chunk * run->chunks,
        .rows_per_chunk = rows_per_chunk, .v_dim = pb->v_dim, .src_dtype = DCPK_FP32, .out_dtype = pb->out_dtype,
    };
    run_kernel(DCPK_KERNEL_merge, &mp, rng);
}

/*
 * The output the kernels write when it is not fp32: dst's layout in out_dtype,
 * every byte 0xff first (NaN in every dtype). typed_output_finish decodes the rows
 * into dst->out and checks that the padding between chunks kept its bytes.
 */
static void *typed_output(const struct attn_problem *pb, const struct rank_run *run, const struct attn_output *dst)
{
    if (pb->out_dtype == DCPK_FP32)
        return dst->out;
    const size_t bytes = (size_t)dst->out_chunk_stride * run->chunks * dcpk_dtype_size(pb->out_dtype);
    void *out = xmalloc(bytes);
    memset(out, 0xff, bytes);
    return out;
}

/** NaN over the rows a rank's attention writes in out (of out_dtype) and dst->lse, padding left as it is. */
static void poison_rows(const struct attn_problem *pb, const struct rank_run *run, const struct attn_output *dst,
                        void *out)
{
    const uint64_t rows = (uint64_t)problem_tokens(pb) * (pb->heads / run->chunks);
    const uint32_t es = dcpk_dtype_size(pb->out_dtype);
    for (uint64_t c = 0; c < run->chunks; c++) {
        memset((unsigned char *)out + c * dst->out_chunk_stride * es, 0xff, rows * pb->v_dim * es);
        memset(dst->lse + c * dst->lse_chunk_stride, 0xff, rows * sizeof(float));
    }
}

static void typed_output_finish(const struct attn_problem *pb, const struct rank_run *run,
                                const struct attn_output *dst, void *out)
{
    if (out == dst->out)
        return;
    const uint64_t used = (uint64_t)problem_tokens(pb) * (pb->heads / run->chunks) * pb->v_dim;
    const uint32_t es = dcpk_dtype_size(pb->out_dtype);
    for (uint64_t c = 0; c < run->chunks; c++)
        for (uint64_t i = 0; i < dst->out_chunk_stride; i++) {
            const uint64_t at = c * dst->out_chunk_stride + i;
            if (i < used)
                dst->out[at] = dcpk_load_as_f32(out, at, pb->out_dtype);
            else
                for (uint32_t k = 0; k < es; k++)
                    assert_int_equal(((const unsigned char *)out)[at * es + k], 0xff);
        }
    free(out);
}

void rank_attention(const struct attn_problem *pb, const struct rank_run *run,
                    struct test_rng *rng, const struct attn_output *dst)
{
    const uint32_t bs = pb->block_size, n = run->group_size;
    const uint32_t esize = dcpk_dtype_size(pb->dtype);
    /* One scheduler for the group: ceil(L / (B*N)) block ids per sequence, the same on every rank. */
    const uint32_t ring = pb->ring ? problem_ring_pages(pb, n, run->interleave) : 0;
    uint32_t blocks[HARNESS_MAX_BATCH], max_blocks = 1, pages = 0;
    for (uint32_t b = 0; b < pb->batch; b++) {
        blocks[b] = (pb->seq_len[b] + bs * n - 1) / (bs * n);
        assert_true(dcpk_local_length(pb->seq_len[b], run->rank, n, run->interleave) <= (uint64_t)blocks[b] * bs);
        if (ring) /* a ring of its own pages per sequence: the table row lists them */
            blocks[b] = ring;
        max_blocks = blocks[b] > max_blocks ? blocks[b] : max_blocks;
        pages += blocks[b];
    }
    max_blocks += (uint32_t)test_rng_range(rng, 0, 2);
    pages += (uint32_t)test_rng_range(rng, 0, 3); /* pages nobody uses */

    /* Pages handed out in random order; unused table entries point nowhere. */
    uint32_t *perm = xmalloc(pages * sizeof(uint32_t));
    for (uint32_t i = 0; i < pages; i++)
        perm[i] = i;
    for (uint32_t i = pages; i > 1; i--) {
        const uint32_t j = (uint32_t)test_rng_range(rng, 0, i - 1), tmp = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = tmp;
    }
    int32_t *table = xmalloc((size_t)pb->batch * max_blocks * sizeof(int32_t));
    for (uint32_t b = 0, next = 0; b < pb->batch; b++)
        for (uint32_t i = 0; i < max_blocks; i++)
            table[b * max_blocks + i] = i < blocks[b] ? (int32_t)perm[next++] : -1;

    /* All-ones bytes are NaN in every dtype: reading a slot never written shows. */
    const size_t k_bytes = (size_t)pages * pb->kv_heads * bs * pb->qk_dim * esize;
    const size_t v_bytes = pb->mla ? 0 : (size_t)pages * pb->kv_heads * bs * pb->v_dim * esize;
    void *k_cache = xmalloc(k_bytes), *v_cache = pb->mla ? NULL : xmalloc(v_bytes);
    memset(k_cache, 0xff, k_bytes);
    if (v_cache)
        memset(v_cache, 0xff, v_bytes);
    for (uint32_t b = 0; b < pb->batch; b++)
        append_sequence(pb, run, rng, table + b * max_blocks, k_cache, v_cache, b, ring);

    const uint32_t tokens = problem_tokens(pb), hpc = pb->heads / run->chunks;
    const uint64_t q_chunk_stride = (uint64_t)tokens * hpc * pb->qk_dim + test_rng_range(rng, 0, 3);
    float *q32 = chunked_queries(pb, run, q_chunk_stride);
    void *q = act_encode(q32, q_chunk_stride * run->chunks, pb->q_dtype);
    free(q32);
    void *out = typed_output(pb, run, dst);
    int32_t seq_lens[HARNESS_MAX_BATCH], q_start[HARNESS_MAX_BATCH + 1];
    q_start[0] = 0;
    for (uint32_t b = 0; b < pb->batch; b++) {
        seq_lens[b] = (int32_t)pb->seq_len[b];
        q_start[b + 1] = q_start[b] + (int32_t)pb->q_len[b];
    }

    /* Split partials: every split writes every row, so NaN-poisoned workspaces check that too. */
    const uint64_t ws_stride_o = (uint64_t)run->chunks * tokens * hpc * pb->v_dim + test_rng_range(rng, 0, 5);
    const uint64_t ws_stride_lse = (uint64_t)run->chunks * tokens * hpc + test_rng_range(rng, 0, 5);
    float *ws_o = run->num_splits > 1 ? nan_floats(ws_stride_o * run->num_splits) : NULL;
    float *ws_lse = run->num_splits > 1 ? nan_floats(ws_stride_lse * run->num_splits) : NULL;

    int32_t *topk = NULL;
    if (pb->num_topk) { /* the sequences' rows, one token after the other */
        topk = xmalloc((size_t)tokens * pb->num_topk * sizeof(int32_t));
        for (uint32_t b = 0, t = 0; b < pb->batch; t += pb->q_len[b], b++)
            memcpy(topk + (size_t)t * pb->num_topk, pb->topk[b], (size_t)pb->q_len[b] * pb->num_topk * sizeof(int32_t));
        const struct dcpk_sparse_attn_params sp = {
            .q = (uint64_t)(uintptr_t)q, .k_cache = (uint64_t)(uintptr_t)k_cache,
            .v_cache = (uint64_t)(uintptr_t)(pb->mla ? k_cache : v_cache),
            .block_table = (uint64_t)(uintptr_t)table, .seq_lens = (uint64_t)(uintptr_t)seq_lens,
            .q_start = (uint64_t)(uintptr_t)q_start, .topk = (uint64_t)(uintptr_t)topk,
            .out = (uint64_t)(uintptr_t)out, .lse = (uint64_t)(uintptr_t)dst->lse,
            .q_chunk_stride = q_chunk_stride, .out_chunk_stride = dst->out_chunk_stride,
            .lse_chunk_stride = dst->lse_chunk_stride, .topk_stride = pb->num_topk, .num_topk = pb->num_topk,
            .batch = pb->batch, .num_q_tokens = tokens, .num_heads = pb->heads, .heads_per_chunk = hpc,
            .num_kv_heads = pb->kv_heads, .head_tile = run->head_tile, .qk_dim = pb->qk_dim, .v_dim = pb->v_dim,
            .v_row_stride = pb->mla ? pb->qk_dim : pb->v_dim, .block_size = bs, .max_blocks = max_blocks,
            .rank = run->rank, .group_size = n, .interleave = run->interleave, .dtype = pb->dtype,
            .scale = pb->scale, .kv_scale = pb->kv_scale, .q_dtype = pb->q_dtype, .out_dtype = pb->out_dtype,
        };
        run_kernel(DCPK_KERNEL_sparse_attn, &sp, rng);
        goto done;
    }
    struct dcpk_attn_params ap = {
        .q = (uint64_t)(uintptr_t)q, .k_cache = (uint64_t)(uintptr_t)k_cache,
        .v_cache = (uint64_t)(uintptr_t)(pb->mla ? k_cache : v_cache),
        .block_table = (uint64_t)(uintptr_t)table, .seq_lens = (uint64_t)(uintptr_t)seq_lens,
        .q_start = (uint64_t)(uintptr_t)q_start, .out = (uint64_t)(uintptr_t)out,
        .lse = (uint64_t)(uintptr_t)dst->lse, .ws_o = (uint64_t)(uintptr_t)ws_o,
        .ws_lse = (uint64_t)(uintptr_t)ws_lse, .q_chunk_stride = q_chunk_stride,
        .out_chunk_stride = dst->out_chunk_stride, .lse_chunk_stride = dst->lse_chunk_stride,
        .ws_split_stride_o = ws_stride_o, .ws_split_stride_lse = ws_stride_lse,
        .batch = pb->batch, .num_q_tokens = tokens, .num_heads = pb->heads, .heads_per_chunk = hpc,
        .num_kv_heads = pb->kv_heads, .head_tile = run->head_tile, .qk_dim = pb->qk_dim,
        .v_dim = pb->v_dim, .v_row_stride = pb->mla ? pb->qk_dim : pb->v_dim, .block_size = bs,
        .max_blocks = max_blocks, .rank = run->rank, .group_size = n, .interleave = run->interleave,
        .num_splits = run->num_splits, .dtype = pb->dtype, .scale = pb->scale,
        .kv_scale = pb->kv_scale, .q_dtype = pb->q_dtype, .out_dtype = pb->out_dtype,
        .window = pb->window, .ring_pages = ring,
    };
    const dcpk_cpu_fn attn_fn =
        run->variant > 0 && run->variant <= DCPK_CPU_ISA_COUNT ? attn_variants[run->variant - 1] : dcpk_attn_cpu;
    if (run->fused && run->num_splits > 1) {
        const struct dcpk_grid g = dcpk_attn_grid(&ap);
        const size_t items = (size_t)g.y * g.z;
        uint32_t *counters = xmalloc(items * sizeof(uint32_t));
        memset(counters, 0, items * sizeof(uint32_t));
        ap.split_counters = (uint64_t)(uintptr_t)counters;
        for (int replay = 0; replay < 2; replay++) {
            if (replay) /* what the first run wrote is gone: the second must write it all again */
                poison_rows(pb, run, dst, out);
            run_kernel_with(DCPK_KERNEL_attn, attn_fn, &ap, rng);
            for (size_t i = 0; i < items; i++)
                if (counters[i] != 0) {
                    harness_fail("fused split-KV combine: counter %zu is %u after the launch, not 0", i, counters[i]);
                    break;
                }
        }
        free(counters);
    } else {
        run_kernel_with(DCPK_KERNEL_attn, attn_fn, &ap, rng);
        if (run->num_splits > 1)
            merge_splits(pb, run, rng, ws_o, ws_lse, ws_stride_o, ws_stride_lse, dst, out);
    }
done:
    typed_output_finish(pb, run, dst, out);
    free(topk);

    free(ws_o);
    free(ws_lse);
    free(q);
    free(k_cache);
    free(v_cache);
    free(table);
    free(perm);
}

double check_against_oracle(const struct attn_problem *pb, uint32_t head0, uint32_t nheads, uint32_t hpc,
                            const struct attn_output *res, double tol, const char *desc)
{
    const uint32_t v_dim = pb->v_dim;
    const size_t rows = (size_t)problem_tokens(pb) * nheads;
    double *ref = xmalloc(rows * v_dim * sizeof(double)), *got = xmalloc(rows * v_dim * sizeof(double));
    size_t row = 0;
    uint32_t t = 0;
    for (uint32_t b = 0; b < pb->batch; b++) {
        double *o = xmalloc((size_t)pb->q_len[b] * pb->heads * v_dim * sizeof(double));
        double *l = xmalloc((size_t)pb->q_len[b] * pb->heads * sizeof(double));
        problem_oracle(pb, b, o, l);
        for (uint32_t i = 0; i < pb->q_len[b]; i++, t++)
            for (uint32_t g = head0; g < head0 + nheads; g++, row++) {
                const uint32_t c = (g - head0) / hpc, h = (g - head0) % hpc;
                const float *go = res->out + c * res->out_chunk_stride + ((uint64_t)t * hpc + h) * v_dim;
                const float gl = res->lse[c * res->lse_chunk_stride + (uint64_t)t * hpc + h];
                const double *ro = o + ((size_t)i * pb->heads + g) * v_dim;
                const double rl = l[(size_t)i * pb->heads + g];
                if (isnan(rl)) { /* a NaN reached the row: NaN everywhere (docs/design.md §4) */
                    if (!isnan(gl))
                        harness_fail("%s: token %u head %u should be NaN but lse = %g", desc, t, g, (double)gl);
                    for (uint32_t d = 0; d < v_dim; d++) {
                        if (!isnan(go[d]))
                            harness_fail("%s: token %u head %u should be NaN but out[%u] = %g", desc, t, g, d,
                                     (double)go[d]);
                        got[row * v_dim + d] = ref[row * v_dim + d] = 0.0; /* out of the L2 error */
                    }
                    continue;
                }
                for (uint32_t d = 0; d < v_dim; d++) {
                    if (isnan(go[d]))
                        harness_fail("%s: NaN at token %u head %u dim %u", desc, t, g, d);
                    got[row * v_dim + d] = go[d];
                    ref[row * v_dim + d] = ro[d];
                }
                if (isnan(gl))
                    harness_fail("%s: token %u head %u lse NaN, oracle %.9g", desc, t, g, rl);
                if (isinf(rl)) { /* nothing visible: exactly 0 and -inf, decided from lengths */
                    if (!(isinf(gl) && gl < 0))
                        harness_fail("%s: token %u head %u sees no key but lse = %g", desc, t, g, (double)gl);
                    for (uint32_t d = 0; d < v_dim; d++)
                        if (go[d] != 0.0f)
                            harness_fail("%s: token %u head %u sees no key but out[%u] = %g", desc, t, g, d, (double)go[d]);
                } else if (!(fabs(gl - rl) <= 1e-4 * (1.0 + fabs(rl)))) {
                    harness_fail("%s: token %u head %u lse %.9g, oracle %.9g", desc, t, g, (double)gl, rl);
                }
            }
        free(o);
        free(l);
    }
    const double err = oracle_rel_l2(ref, got, rows * v_dim);
    if (!(err <= tol))
        harness_fail("%s: relative L2 error %.3g > %.3g", desc, err, tol);
    free(ref);
    free(got);
    return err;
}
