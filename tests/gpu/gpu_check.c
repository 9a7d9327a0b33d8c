/*
 * gpu_check: every kernel of the CUDA backend against the float64 oracle on a real
 * GPU (or, with --quick in CI, on the test doubles), the reference cases timed with
 * CUDA events, and the time split of a DCP decode step.
 *
 *   gpu_check [--quick] [--backend cuda|host] [--seed N]   correctness sweep
 *   gpu_check --bench [--quick]                             reference cases, timed
 *   gpu_check --breakdown [--backend ...]                   profile of a DCP step
 *   gpu_check --graph [--quick]                             eager vs CUDA graph step
 *   ... --case S (repeatable; or DCP_GPU_CASE=S)            only the cases whose label
 *                                                           (or name) contains S
 *
 * Device 0's primary context is retained once for the whole run (context_hold_begin),
 * so the engines of the ~100 cases do not each make it anew; on the test doubles the
 * fake driver's count of contexts made must be 1.
 * --quick scales every shape down (CI on the test doubles runs kernels on the CPU).
 * DCP_GPU_CHECK_PERTURB=x (a relative amount, e.g. 1e-3) changes one output value
 * of every checked case by that much before the comparison: a forced failure, so
 * CI can show that a wrong result makes the check, and tests/gpu/run.sh, fail.
 *
 * The sweep covers MLA (576/512) and GQA (head_dim 64/128/256), every KV dtype,
 * 1/2/4/8 virtual ranks (tp = dcp = N on one GPU), both merge schemes, interleave
 * 1 and 16, q_len 1/2/4, and sequences shorter than N*I (empty shards), with
 * precision exact on an fp32 wire; then the shipped defaults (precision fast, a bf16
 * wire) with their own bounds (case_tolerance), and more than 16 gathered heads in
 * several head tiles and passes, with steps of more query tokens than workload.q_len
 * (sweep_cases). Each case prints its keys per split beside its errors. Inputs
 * are generated on the device (dcp_rank_fill_synthetic) and regenerated on the
 * host for the oracle, rounded through the cache dtype. Every launch kind runs:
 * kv_append, attention (with split-KV), merge, lse_scale, reduce (virtual
 * ReduceScatter), fill. Tolerance: relative L2 error 1e-4 per head and |dLSE| 1e-4
 * (TOL_EXACT): every kernel computes in fp32 from the cached values, which the
 * oracle rounds the same way, so the true error is ~1e-6 and one dropped key of a
 * few thousand shows; precision fast and 16-bit wires have wider bounds
 * (case_tolerance). Exit: 0 pass, 1 fail, 77 no usable GPU.
 *
 * --bench runs the reference cases on one rank: GQA head_dim 128 with 8 query heads
 * per KV head, bf16, batch 32 x 64k; MLA 576/512 bf16 with 16 and 128 heads, batch
 * 32 x 8k; MLA 128 heads batch 1 x 8k. Each sample is one attention launch (split-KV
 * combine included) timed with CUDA events (the engine's profile: cuEventRecord /
 * cuEventElapsedTime around each operation), after an L2 flush (a synthetic fill of
 * a buffer larger than any L2); 21 samples, median and minimum, plus the mean of 20
 * back-to-back launches without flushes. GB/s counts the KV bytes the launch must
 * read. The yardsticks, measured first in the same run (--ref FATBIN, the build's
 * ptx/kernels/dcp_ref_kernels.fatbin; dcp_kernels/ref.h), are a read-only streaming
 * kernel (GB/s of bytes read: a copy would move 2N bytes for N) and an mma.sync
 * bf16 loop (TFLOP/s), each on a grid of SMs x the driver's occupancy, timed with
 * CUDA events (median of several launches), their results checked (the sum of
 * every word read; every accumulator exact); each case prints its GB/s and TFLOP/s
 * over them, and the registers per thread of its attention entry. Each case also shows
 * the launch the engine chose for the step (dcp_engine_step_launch(): split-KV
 * factor, grid, the driver's occupancy in blocks per SM, slots). The outputs of the
 * last timed launch are checked against the float64 oracle (first and last sequence,
 * every head).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_api.h"
#include "dcp/dcp.h"
#include "dcp/tools.h"
#include "dcp_kernels/placement.h"
#include "dcp_kernels/ref.h"
#include "dcp_kernels/variants.h"
#include "../doubles/fake_hooks.h"
#include "modules.h"
#include "oracle.h"

#define MAX_RANKS 8
#define DCP_ARRAY_SIZE_(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_SEQS 3

struct sweep_case {
    enum dcp_attention_kind kind;
    uint32_t head_dim; /* GQA */
    enum dcp_dtype dtype;
    uint32_t n;        /* ranks = tp = dcp */
    enum dcp_comm_scheme comm;
    uint32_t interleave;
    uint32_t q_len;    /* query tokens of every sequence in the checked step */
    uint32_t wl_q_len; /* workload.q_len of the deployment (0: q_len); the backend picks its head tile for it */
    uint32_t heads;    /* query heads per rank (0: 2); the attention sees n times as many (gathered) */
    enum dcp_cuda_precision precision;
    enum dcp_wire_dtype wire; /* parallel.comm_dtype (gpu_check's activations are fp32: auto would be fp32) */
};

/* Relative L2 error per head and absolute LSE error allowed on exact paths. */
#define TOL_EXACT 1e-4
/* precision: fast (the tensor-core MLA entries with bf16/fp16/fp8 KV take bf16/fp16
 * Q and P), the bounds kernels_emulated holds those entries to (docs/configuration.md,
 * cuda.precision): relative L2 5e-3 with bf16 or fp8 KV, 1e-3 with fp16; each LSE
 * within 1e-2 (1e-3) of 1 + |LSE|. */
#define TOL_FAST_L2_BF16 5e-3
#define TOL_FAST_L2_FP16 1e-3
#define TOL_FAST_LSE_BF16 1e-2
#define TOL_FAST_LSE_FP16 1e-3

#define MAX_FILTERS 8

struct opts {
    const char *ref_path; /* --ref: the reference kernels' fatbin (dcp_ref_kernels.fatbin) */
    bool quick, breakdown, bench, graph;
    const char *filters[MAX_FILTERS]; /* --case: run only the cases whose label contains one of these */
    int num_filters;
    enum dcp_backend_kind backend;
    uint64_t seed;
};

static uint64_t rng_state;
static uint32_t deployment_layers = 2; /* model layers of make_deployment (--graph: more) */

static uint32_t rng_below(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static dcp_deployment *make_deployment(const struct sweep_case *c, const struct opts *o, uint32_t q_heads,
                                       uint32_t kv_heads)
{
    struct dcp_config cfg;
    dcp_config_defaults(&cfg);
    cfg.model.name = "gpu-check";
    cfg.model.attention = c->kind;
    cfg.model.num_layers = deployment_layers;
    cfg.model.num_q_heads = q_heads;
    cfg.model.num_kv_heads = kv_heads;
    cfg.model.head_dim = c->head_dim;
    cfg.model.kv_dtype = c->dtype;
    cfg.model.kv_scale = c->dtype == DCP_DTYPE_FP8_E4M3 ? 0.01 : 1.0;
    cfg.hardware.gpu = "check";
    cfg.hardware.memory_bytes = 1e9;
    cfg.hardware.hbm_bandwidth = 1e12;
    cfg.hardware.link_bandwidth = 1e11;
    cfg.hardware.gpus_per_node = 8;
    cfg.parallel.tp = c->n;
    cfg.parallel.dcp = c->n;
    cfg.parallel.interleave = c->interleave;
    cfg.parallel.comm = c->comm;
    cfg.parallel.comm_dtype = c->wire ? c->wire : DCP_WIRE_FP32; /* a 16-bit wire widens the bound (case_tolerance) */
    cfg.memory.block_size = 16;
    cfg.memory.reserve_bytes = 0;
    cfg.workload.context_lengths[0] = 4096;
    cfg.workload.num_context_lengths = 1;
    cfg.workload.q_len = c->wl_q_len ? c->wl_q_len : c->q_len;
    cfg.runtime.backend = o->backend;
    cfg.runtime.cuda.comm = DCP_CUDA_COMM_VIRTUAL;
    /* The 1e-4 tolerance is the exact precision's; fast (the shipped default: bf16 Q
     * and P on tensor cores, ~2e-3) has its own bound (case_tolerance). */
    cfg.runtime.cuda.precision = c->precision;
    dcp_diag *d = NULL;
    dcp_deployment *dep = NULL;
    if (dcp_diag_create(&d) == DCP_OK && dcp_deployment_from_config(&cfg, d, &dep) != DCP_OK)
        dcp_diag_print(d, stderr);
    dcp_diag_destroy(&d);
    return dep;
}

/* ---- one case ---------------------------------------------------------------- */

struct case_run {
    dcp_engine *e;
    const struct dcp_model_config *model;
    struct dcp_engine_info in;
    bool mla;
    uint32_t tokens;
    bool attend;
    void *q[MAX_RANKS], *k[MAX_RANKS], *v[MAX_RANKS], *o[MAX_RANKS], *l[MAX_RANKS];
    float *out[MAX_RANKS], *lse[MAX_RANKS];
};

static uint64_t seed_of(uint32_t layer, int tensor) { return 1000003ull * (layer + 1) + (uint64_t)tensor; }

static int rank_fn(dcp_rank *r, void *arg)
{
    struct case_run *c = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    uint32_t q0, kv0;
    dcp_rank_head_offsets(r, &q0, &kv0);
    const struct dcp_engine_info *in = &c->in;
    for (uint32_t layer = 0; layer < in->num_layers; layer++) {
        struct dcp_synth_desc d = {.seed = seed_of(layer, 1), .row_keys = dcp_rank_step_token_keys(r),
                                   .rows = c->tokens, .heads = in->kv_heads_per_rank, .dim = in->qk_dim,
                                   .head_offset = kv0, .amplitude = 1.0f};
        int err = dcp_rank_fill_synthetic(r, c->k[i], &d);
        if (!err && !c->mla) {
            d.seed = seed_of(layer, 2);
            d.dim = in->v_dim;
            err = dcp_rank_fill_synthetic(r, c->v[i], &d);
        }
        if (!err)
            err = dcp_rank_append_kv(r, layer, c->k[i], c->mla ? NULL : c->v[i]);
        if (err)
            return err;
        if (!c->attend)
            continue;
        d = (struct dcp_synth_desc){.seed = seed_of(layer, 0), .row_keys = dcp_rank_step_token_keys(r),
                                    .rows = c->tokens, .heads = in->q_heads_per_rank, .dim = in->qk_dim,
                                    .head_offset = q0, .amplitude = 1.0f};
        if ((err = dcp_rank_fill_synthetic(r, c->q[i], &d)) ||
            (err = dcp_rank_attention(r, layer, c->q[i], c->o[i], c->l[i])))
            return err;
    }
    if (!c->attend)
        return dcp_rank_synchronize(r);
    /* Outputs of the last layer. */
    const size_t rows = (size_t)c->tokens * in->q_heads_per_rank;
    int err = dcp_rank_download(r, c->out[i], c->o[i], rows * in->v_dim * sizeof(float));
    return err ? err : dcp_rank_download(r, c->lse[i], c->l[i], rows * sizeof(float));
}

/* The dtype the attention reads the queries in: a 16-bit wire carries the gathered
 * queries (every rank's, its own included) when dcp > 1. */
static enum dcp_dtype query_dtype(const struct sweep_case *sc)
{
    return sc->n > 1 && sc->wire && sc->wire != DCP_WIRE_FP32 && sc->wire != DCP_WIRE_AUTO ? (enum dcp_dtype)sc->wire
                                                                                           : DCP_DTYPE_FP32;
}

/* Dense float64 reference of sequence seq (len tokens, last q_len are the queries)
 * for the last layer; returns the worst relative L2 error over all heads, the worst
 * |dLSE| in lse_err and the worst |dLSE| / (1 + |LSE|) in lse_rel. */
static double compare_sequence(const struct case_run *c, const struct sweep_case *sc, uint32_t seq,
                               uint32_t len, uint32_t tok0, uint32_t q_heads, uint32_t kv_heads, double *lse_err,
                               double *lse_rel)
{
    const struct dcp_engine_info *in = &c->in;
    const uint32_t layer = in->num_layers - 1, qk = in->qk_dim, vd = in->v_dim;
    double *k = malloc(sizeof(double) * len * kv_heads * qk);
    double *v = malloc(sizeof(double) * len * kv_heads * vd);
    double *q = malloc(sizeof(double) * sc->q_len * q_heads * qk);
    double *ref = malloc(sizeof(double) * sc->q_len * q_heads * vd);
    double *ref_lse = malloc(sizeof(double) * sc->q_len * q_heads);
    double *got = malloc(sizeof(double) * vd);
    if (!k || !v || !q || !ref || !ref_lse || !got) {
        free(k), free(v), free(q), free(ref), free(ref_lse), free(got);
        return INFINITY;
    }
    const float scale = (float)c->model->softmax_scale, kv_scale = (float)c->model->kv_scale;
    for (uint32_t p = 0; p < len; p++) {
        const uint64_t key = dcp_token_key(seq, p);
        for (uint32_t h = 0; h < kv_heads; h++) {
            for (uint32_t d = 0; d < qk; d++)
                k[((size_t)p * kv_heads + h) * qk + d] =
                    dcp_dtype_round(sc->dtype, dcp_synth_value(seed_of(layer, 1), key, h, d), kv_scale);
            for (uint32_t d = 0; d < vd; d++)
                v[((size_t)p * kv_heads + h) * vd + d] =
                    sc->kind == DCP_ATTN_MLA ? k[((size_t)p * kv_heads + h) * qk + d]
                                             : dcp_dtype_round(sc->dtype,
                                                               dcp_synth_value(seed_of(layer, 2), key, h, d), kv_scale);
        }
    }
    for (uint32_t t = 0; t < sc->q_len; t++)
        for (uint32_t h = 0; h < q_heads; h++)
            for (uint32_t d = 0; d < qk; d++)
                q[((size_t)t * q_heads + h) * qk + d] = dcp_dtype_round(
                    query_dtype(sc), dcp_synth_value(seed_of(layer, 0), dcp_token_key(seq, len - sc->q_len + t), h, d),
                    1.0f);
    const struct oracle_attn_shape shape = {
        .len = len, .q_len = sc->q_len, .heads = q_heads, .kv_heads = kv_heads,
        .qk_dim = qk, .v_dim = vd, .scale = scale,
    };
    oracle_attention(&shape, q, k, v, ref, ref_lse);
    double worst = 0;
    *lse_err = *lse_rel = 0;
    for (uint32_t t = 0; t < sc->q_len; t++)
        for (uint32_t h = 0; h < q_heads; h++) {
            const uint32_t rank = h / in->q_heads_per_rank, hl = h % in->q_heads_per_rank;
            const size_t row = (size_t)(tok0 + t) * in->q_heads_per_rank + hl;
            for (uint32_t d = 0; d < vd; d++)
                got[d] = c->out[rank][row * vd + d];
            const double e = oracle_rel_l2(ref + ((size_t)t * q_heads + h) * vd, got, vd);
            worst = isfinite(e) && e > worst ? e : isfinite(e) ? worst : INFINITY;
            const double le = fabs(c->lse[rank][row] - ref_lse[(size_t)t * q_heads + h]);
            *lse_err = isfinite(le) && le > *lse_err ? le : isfinite(le) ? *lse_err : INFINITY;
            const double lr = le / (1 + fabs(ref_lse[(size_t)t * q_heads + h]));
            *lse_rel = isfinite(lr) && lr > *lse_rel ? lr : isfinite(lr) ? *lse_rel : INFINITY;
        }
    free(k), free(v), free(q), free(ref), free(ref_lse), free(got);
    return worst;
}

struct case_result {
    double rel_err, lse_err, lse_rel;
    int status;
    struct dcp_step_launch launch; /* of the checked step */
    uint64_t keys_per_split;       /* most keys one split of the checked step reads (one rank, one sequence) */
    uint32_t head_tile, head_tiles, passes; /* heads per block, blocks per KV head, passes over each split's keys */
};

/* What a correct result keeps: relative L2 per head, and |dLSE| (exact) or
 * |dLSE| / (1 + |LSE|) (fast). */
struct tolerance {
    double rel_l2, lse;
    bool lse_relative;
};

/* The precision the attention entry of a case really computes in: fast only on the
 * tensor-core MLA entries (16-bit or fp8 KV); the GQA tensor-core entries always split
 * (hi + lo) and the SIMT entries compute in fp32. */
static bool fast_arithmetic(const struct sweep_case *sc)
{
    return sc->precision == DCP_CUDA_PRECISION_FAST && sc->kind == DCP_ATTN_MLA && sc->dtype != DCP_DTYPE_FP32;
}

/* The documented bounds of a case: the kernel's (TOL_EXACT, or TOL_FAST_* where fast
 * arithmetic runs) plus, for a 16-bit wire between dcp > 1 ranks, the partial outputs'
 * roundings to it: rounds * sqrt(n) * u (a2a rounds each partial once, ag_rs three
 * times: the store, the LSE scaling, the ReduceScatter's sum; u = 2^-8 bf16, 2^-11
 * fp16; the bound tests/engine/dcp_harness.c holds the DCP engine to). The gathered
 * queries are rounded to the wire in the oracle too (query_dtype), so the LSE bound
 * does not grow. */
static struct tolerance case_tolerance(const struct sweep_case *sc)
{
    struct tolerance t = {TOL_EXACT, TOL_EXACT, false};
    if (fast_arithmetic(sc)) {
        const bool fp16 = sc->dtype == DCP_DTYPE_FP16;
        t = (struct tolerance){fp16 ? TOL_FAST_L2_FP16 : TOL_FAST_L2_BF16, fp16 ? TOL_FAST_LSE_FP16 : TOL_FAST_LSE_BF16,
                               true};
    }
    const enum dcp_dtype w = query_dtype(sc);
    if (w != DCP_DTYPE_FP32) {
        const double u = w == DCP_DTYPE_BF16 ? 0x1p-8 : 0x1p-11, rounds = sc->comm == DCP_COMM_AG_RS ? 3.0 : 1.0;
        t.rel_l2 += rounds * sqrt((double)sc->n) * u;
    }
    return t;
}

/* DCP_GPU_CHECK_PERTURB: moves the first value of an output row by that fraction of
 * the row's norm, so the row's relative error becomes about that fraction. */
static void perturb_row(float *row, uint32_t n)
{
    const char *text = getenv("DCP_GPU_CHECK_PERTURB");
    const double amount = text ? strtod(text, NULL) : 0;
    if (!(amount != 0) || !isfinite(amount))
        return;
    double norm = 0;
    for (uint32_t i = 0; i < n; i++)
        norm += (double)row[i] * row[i];
    row[0] += (float)(amount * sqrt(norm));
}

static bool within_tolerance(const struct case_result *r, const struct tolerance *t)
{
    const double lse = t->lse_relative ? r->lse_rel : r->lse_err;
    return r->status == DCP_OK && r->rel_err <= t->rel_l2 && isfinite(lse) && lse <= t->lse;
}

/* The checked step's shape as the attention entry sees it: keys per split (the most
 * any split of any rank reads for one sequence: its pages / num_splits, whole pages,
 * within the local length; params.h), the head tile the backend picked for
 * workload.q_len (variants.h), the head tiles per KV head and the passes each block
 * makes over its split's keys (ceil(head_tile x query tokens / the entry's rows)). */
static void describe_launch(const struct sweep_case *sc, const struct case_run *c, const uint32_t *lens, uint32_t nseq,
                            struct case_result *res)
{
    const struct dcp_engine_info *in = &c->in;
    const uint32_t splits = res->launch.num_splits ? res->launch.num_splits : 1, bs = 16;
    for (uint32_t s = 0; s < nseq; s++)
        for (uint32_t r = 0; r < sc->n; r++) {
            const uint64_t local = dcpk_local_length(lens[s], r, sc->n, sc->interleave);
            const uint64_t pages = (local + bs - 1) / bs, per = (pages + splits - 1) / splits * bs;
            const uint64_t keys = per < local ? per : local;
            res->keys_per_split = keys > res->keys_per_split ? keys : res->keys_per_split;
        }
    const uint32_t kv_per_rank = in->kv_heads_per_rank ? in->kv_heads_per_rank : 1;
    res->head_tiles = res->launch.grid[1] / kv_per_rank;
    const uint32_t heads_per_kv = in->gathered_heads / kv_per_rank;
    const struct dcpk_attn_variant *v =
        dcpk_attn_variant_find(in->qk_dim, in->v_dim, sc->kind == DCP_ATTN_MLA, (uint32_t)sc->dtype);
    const uint32_t wl = sc->wl_q_len ? sc->wl_q_len : sc->q_len;
    res->head_tile = v ? dcpk_attn_pick_head_tile(v, heads_per_kv, wl) : 0;
    res->passes = v && v->rows ? (res->head_tile * sc->q_len + v->rows - 1) / v->rows : 0;
}

static struct case_result run_case(const struct sweep_case *sc, const struct opts *o, bool quick)
{
    struct case_result res = {0};
    /* Two query heads per rank unless the case says; one KV head, so every rank of
     * the group holds it (GQA with dcp = tp needs tp / kv_heads divisible by dcp). */
    const uint32_t q_heads = (sc->heads ? sc->heads : 2) * sc->n, kv_heads = 1;
    dcp_deployment *dep = make_deployment(sc, o, q_heads, kv_heads);
    if (!dep) {
        res.status = DCP_ECONFIG;
        return res;
    }
    uint32_t lens[MAX_SEQS];
    const uint32_t cap = quick ? 200 : 2500;
    lens[0] = 1 + rng_below(sc->n * sc->interleave); /* shorter than one round: empty shards */
    lens[0] = lens[0] < sc->q_len ? sc->q_len : lens[0];
    lens[1] = sc->q_len + rng_below(cap);
    lens[2] = sc->q_len + rng_below(cap);
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.kv_budget_bytes = 64e6;
    p.max_batch = MAX_SEQS;
    p.max_seqs = MAX_SEQS;
    p.max_query_tokens = MAX_SEQS * sc->q_len;
    p.max_step_tokens = 512;
    p.max_context = cap + sc->q_len + 64;
    struct case_run c = {0};
    c.mla = sc->kind == DCP_ATTN_MLA;
    c.model = &dcp_deployment_config(dep)->model;
    int err = dcp_engine_create(&p, &c.e);
    if (!err) {
        dcp_engine_get_info(c.e, &c.in);
        const size_t f = sizeof(float);
        for (uint32_t i = 0; i < c.in.tp && !err; i++) {
            dcp_rank *r = dcp_engine_rank(c.e, i);
            if ((err = dcp_rank_alloc(r, 512 * c.in.kv_heads_per_rank * c.in.qk_dim * f, &c.k[i])) ||
                (err = dcp_rank_alloc(r, 512 * c.in.kv_heads_per_rank * c.in.v_dim * f, &c.v[i])) ||
                (err = dcp_rank_alloc(r, p.max_query_tokens * c.in.q_heads_per_rank * c.in.qk_dim * f, &c.q[i])) ||
                (err = dcp_rank_alloc(r, p.max_query_tokens * c.in.q_heads_per_rank * c.in.v_dim * f, &c.o[i])) ||
                (err = dcp_rank_alloc(r, p.max_query_tokens * c.in.q_heads_per_rank * f, &c.l[i])))
                break;
            c.out[i] = malloc(p.max_query_tokens * c.in.q_heads_per_rank * c.in.v_dim * f);
            c.lse[i] = malloc(p.max_query_tokens * c.in.q_heads_per_rank * f);
        }
    }
    uint32_t ids[MAX_SEQS], ql[MAX_SEQS];
    for (uint32_t s = 0; s < MAX_SEQS && !err; s++) {
        err = dcp_seq_create(c.e, &ids[s]);
        /* Prefill all but the queries in uneven chunks through the append path. */
        for (uint32_t done = 0; done < lens[s] - sc->q_len && !err; done += ql[s]) {
            ql[s] = 1 + rng_below(400);
            if (ql[s] > lens[s] - sc->q_len - done)
                ql[s] = lens[s] - sc->q_len - done;
            err = dcp_seq_extend(c.e, ids[s], ql[s]);
            const struct dcp_batch b = {.num_seqs = 1, .seq_ids = &ids[s], .q_lens = &ql[s]};
            c.tokens = ql[s];
            c.attend = false;
            if (!err)
                err = dcp_engine_begin_step(c.e, &b);
            if (!err)
                err = dcp_engine_run(c.e, rank_fn, &c);
        }
    }
    for (uint32_t s = 0; s < MAX_SEQS && !err; s++) {
        ql[s] = sc->q_len;
        err = dcp_seq_extend(c.e, ids[s], sc->q_len);
    }
    const struct dcp_batch b = {.num_seqs = MAX_SEQS, .seq_ids = ids, .q_lens = ql};
    c.tokens = MAX_SEQS * sc->q_len;
    c.attend = true;
    if (!err)
        err = dcp_engine_begin_step(c.e, &b);
    if (!err)
        err = dcp_engine_step_launch(c.e, &res.launch);
    if (!err)
        err = dcp_engine_run(c.e, rank_fn, &c);
    res.status = err;
    if (!err)
        describe_launch(sc, &c, lens, MAX_SEQS, &res);
    if (err)
        fprintf(stderr, "gpu_check: %s\n", dcp_last_error());
    if (!err)
        perturb_row(c.out[0], c.in.v_dim);
    for (uint32_t s = 0; s < MAX_SEQS && !err; s++) {
        double le = 0, lr = 0;
        const double e = compare_sequence(&c, sc, ids[s], lens[s], s * sc->q_len, q_heads, kv_heads, &le, &lr);
        res.rel_err = e > res.rel_err || !isfinite(e) ? e : res.rel_err;
        res.lse_err = le > res.lse_err || !isfinite(le) ? le : res.lse_err;
        res.lse_rel = lr > res.lse_rel || !isfinite(lr) ? lr : res.lse_rel;
    }
    for (uint32_t i = 0; i < MAX_RANKS && c.e; i++) {
        dcp_rank *r = dcp_engine_rank(c.e, i);
        if (!r)
            break;
        dcp_rank_free(r, c.q[i]);
        dcp_rank_free(r, c.k[i]);
        dcp_rank_free(r, c.v[i]);
        dcp_rank_free(r, c.o[i]);
        dcp_rank_free(r, c.l[i]);
        free(c.out[i]);
        free(c.lse[i]);
    }
    dcp_engine_destroy(&c.e);
    dcp_deployment_destroy(&dep);
    return res;
}

static bool unavailable(int status)
{
    return status == DCP_ENODRIVER || status == DCP_ESTUBDRIVER || status == DCP_ENODEVICE ||
           status == DCP_EDRIVERVERSION || status == DCP_ENOTSUP;
}

/* Whether --case lets a case with this label run (no --case: every case). */
static bool case_selected(const struct opts *o, const char *label)
{
    if (o->num_filters == 0)
        return true;
    for (int i = 0; i < o->num_filters; i++)
        if (strstr(label, o->filters[i]))
            return true;
    return false;
}

static const char *layout_name(const struct sweep_case *sc)
{
    if (sc->kind == DCP_ATTN_MLA)
        return "mla";
    return sc->head_dim == 64 ? "gqa64" : sc->head_dim == 128 ? "gqa128" : "gqa256";
}

/* A case's label, what --case matches: layout-kvdtype-nRANKS-comm-iINTERLEAVE-qQLEN
 * [-wqWORKLOAD_QLEN]-hGATHERED-precision-wWIRE, e.g. mla-bf16-n2-a2a-i16-q3-wq1-h32-fast-wbf16. */
static void case_label(const struct sweep_case *sc, char *buf, size_t size)
{
    char wq[16] = "";
    if (sc->wl_q_len && sc->wl_q_len != sc->q_len)
        snprintf(wq, sizeof(wq), "-wq%u", sc->wl_q_len);
    snprintf(buf, size, "%s-%s-n%u-%s-i%u-q%u%s-h%u-%s-w%s", layout_name(sc), dcp_dtype_name(sc->dtype), sc->n,
             dcp_comm_scheme_name(sc->comm), sc->interleave, sc->q_len, wq, (sc->heads ? sc->heads : 2) * sc->n,
             sc->precision == DCP_CUDA_PRECISION_EXACT ? "exact" : "fast",
             dcp_dtype_name(sc->wire && sc->wire != DCP_WIRE_AUTO ? (enum dcp_dtype)sc->wire : DCP_DTYPE_FP32));
}

#define MAX_SWEEP 160

/* The sweep's cases, in three parts:
 *  exact:    every layout x KV dtype x 1/2/4/8 ranks, precision exact, fp32 wire,
 *            tolerance 1e-4 (the kernels' own error);
 *  defaults: what ships: precision fast and a bf16 wire, every layout with 16-bit and
 *            fp8 KV on 2 and 8 ranks (case_tolerance: the fast bound plus the wire's);
 *  heads:    more than 16 gathered heads, more than one head tile per KV head, more
 *            than one pass over each split's keys (steps with more query tokens than
 *            workload.q_len, for which the backend picked its head tile), shipped
 *            defaults and one exact case. */
static size_t sweep_cases(const struct opts *o, struct sweep_case *out)
{
    static const struct {
        enum dcp_attention_kind kind;
        uint32_t head_dim;
    } layouts[] = {{DCP_ATTN_MLA, 0}, {DCP_ATTN_GQA, 64}, {DCP_ATTN_GQA, 128}, {DCP_ATTN_GQA, 256}};
    static const enum dcp_dtype dtypes[] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16, DCP_DTYPE_FP8_E4M3, DCP_DTYPE_FP32};
    static const uint32_t ranks[] = {1, 2, 4, 8};
    /* --quick under DCP_TEST_QUICK (CI's valgrind run): the exact part on 1 and 2 ranks. */
    const bool lean = o->quick && getenv("DCP_TEST_QUICK");
    size_t n = 0;
    for (size_t li = 0; li < 4; li++)
        for (size_t di = 0; di < 4; di++)
            for (size_t ri = 0; ri < 4; ri++) {
                if (o->quick && (ri == 3 || (di > 0 && li > 0) || (lean && ri == 2)))
                    continue;
                out[n++] = (struct sweep_case){
                    .kind = layouts[li].kind,
                    .head_dim = layouts[li].head_dim,
                    .dtype = dtypes[di],
                    .n = ranks[ri],
                    .comm = (li + di + ri) % 2 ? DCP_COMM_AG_RS : DCP_COMM_A2A,
                    .interleave = (di + ri) % 2 ? 16 : 1,
                    .q_len = 1u << ((li + ri) % 3),
                    .precision = DCP_CUDA_PRECISION_EXACT,
                    .wire = DCP_WIRE_FP32,
                };
            }
    for (size_t li = 0; li < 4; li++)
        for (size_t di = 0; di < 3; di++)
            for (size_t ri = 1; ri < 4; ri += 2) { /* 2 and 8 ranks */
                if (o->quick && (ri == 3 || !((li == 0 && di != 1) || (li == 2 && di == 0))))
                    continue; /* quick: mla bf16 and fp8, gqa128 bf16, on 2 ranks */
                out[n++] = (struct sweep_case){
                    .kind = layouts[li].kind,
                    .head_dim = layouts[li].head_dim,
                    .dtype = dtypes[di],
                    .n = ranks[ri],
                    .comm = (li + di) % 2 ? DCP_COMM_AG_RS : DCP_COMM_A2A,
                    .interleave = (li + di) % 2 ? 1 : 16,
                    .q_len = 1u << ((li + di) % 3),
                    .precision = DCP_CUDA_PRECISION_FAST,
                    .wire = DCP_WIRE_BF16,
                };
            }
    /* kind, head_dim, dtype, n, comm, interleave, q_len, wl_q_len, heads per rank, precision, wire; quick? */
    static const struct {
        struct sweep_case c;
        bool quick;
    } heads[] = {
        /* 64 gathered: head tile 32 (mla_tc rows 32), 2 tiles */
        {{DCP_ATTN_MLA, 0, DCP_DTYPE_BF16, 4, DCP_COMM_A2A, 16, 1, 1, 16, DCP_CUDA_PRECISION_FAST, DCP_WIRE_BF16}, true},
        /* 32 gathered, 3 query tokens for a workload of 1: one tile of 32 heads, 3 passes */
        {{DCP_ATTN_MLA, 0, DCP_DTYPE_BF16, 2, DCP_COMM_AG_RS, 1, 3, 1, 16, DCP_CUDA_PRECISION_FAST, DCP_WIRE_BF16}, true},
        {{DCP_ATTN_MLA, 0, DCP_DTYPE_BF16, 2, DCP_COMM_A2A, 16, 3, 1, 16, DCP_CUDA_PRECISION_EXACT, DCP_WIRE_FP32}, false},
        /* DeepSeek-V3 at tp 8: 128 gathered, 4 tiles, 2 tokens: 2 passes */
        {{DCP_ATTN_MLA, 0, DCP_DTYPE_FP8_E4M3, 8, DCP_COMM_A2A, 1, 2, 1, 16, DCP_CUDA_PRECISION_FAST, DCP_WIRE_BF16},
         false},
        {{DCP_ATTN_MLA, 0, DCP_DTYPE_FP16, 8, DCP_COMM_AG_RS, 16, 2, 1, 16, DCP_CUDA_PRECISION_FAST, DCP_WIRE_BF16},
         false},
        /* gqa_d128_tc rows 16: 24 gathered heads per KV head, 2 tiles of 16; 2 tokens: 2 passes */
        {{DCP_ATTN_GQA, 128, DCP_DTYPE_BF16, 2, DCP_COMM_A2A, 1, 2, 1, 12, DCP_CUDA_PRECISION_FAST, DCP_WIRE_BF16}, true},
        /* gqa_d64_tc rows 32, workload q_len 2: tile 16 of 32 gathered, 4 tokens: 2 passes */
        {{DCP_ATTN_GQA, 64, DCP_DTYPE_FP16, 2, DCP_COMM_AG_RS, 16, 4, 2, 16, DCP_CUDA_PRECISION_FAST, DCP_WIRE_BF16},
         false},
        /* gqa_d256_tc rows 8: 32 gathered, tile 8, 4 tiles; 2 tokens: 2 passes */
        {{DCP_ATTN_GQA, 256, DCP_DTYPE_BF16, 4, DCP_COMM_A2A, 1, 2, 1, 8, DCP_CUDA_PRECISION_FAST, DCP_WIRE_BF16},
         false},
    };
    for (size_t i = 0; i < DCP_ARRAY_SIZE_(heads); i++)
        if (!o->quick || heads[i].quick)
            out[n++] = heads[i].c;
    return n;
}

static int sweep(const struct opts *o)
{
    static struct sweep_case cases[MAX_SWEEP];
    const size_t total = sweep_cases(o, cases);
    printf("correctness sweep: %s; every case's last layer against the float64 oracle, three sequences\n",
           o->quick ? "--quick (scaled down)" : "full");
    printf("%-44s %5s %4s %5s %6s %10s %11s %8s %10s %8s  %s\n", "case", "heads", "tile", "tiles", "passes",
           "keys/split", "max rel err", "bound", "max dLSE", "bound", "result");
    int failures = 0, cases_run = 0;
    for (size_t i = 0; i < total; i++) {
        const struct sweep_case *sc = &cases[i];
        char label[96];
        case_label(sc, label, sizeof(label));
        if (!case_selected(o, label))
            continue;
        const struct case_result r = run_case(sc, o, o->quick);
        if (r.status && unavailable(r.status) && cases_run == 0) {
            printf("no usable CUDA device: %s (%s)\n", dcp_strerror(r.status), dcp_last_error());
            return 77;
        }
        const struct tolerance t = case_tolerance(sc);
        const bool ok = within_tolerance(&r, &t);
        failures += !ok;
        cases_run++;
        printf("%-44s %5u %4u %5u %6u %10llu %11.2e %8.1e %10.2e %8.1e  %s\n", label,
               (sc->heads ? sc->heads : 2) * sc->n, r.head_tile, r.head_tiles, r.passes,
               (unsigned long long)r.keys_per_split, r.rel_err, t.rel_l2, t.lse_relative ? r.lse_rel : r.lse_err,
               t.lse, ok ? "ok" : r.status ? dcp_strerror(r.status) : "FAIL");
        fflush(stdout);
    }
    printf("(heads: gathered per rank; tile: heads per block (picked for workload.q_len); tiles: blocks per KV head;\n"
           " passes: over each split's keys (tile x query tokens / the entry's rows); keys/split: the most one split\n"
           " reads; bounds: exact 1e-4 / |dLSE| 1e-4; fast (MLA tensor cores, 16-bit or fp8 KV) rel L2 %.0e bf16/fp8,\n"
           " %.0e fp16, |dLSE|/(1+|LSE|) %.0e / %.0e; a bf16/fp16 wire adds rounds*sqrt(ranks)*u)\n",
           TOL_FAST_L2_BF16, TOL_FAST_L2_FP16, TOL_FAST_LSE_BF16, TOL_FAST_LSE_FP16);
    if (cases_run == 0) {
        printf("correctness: no case matches --case\n");
        return 1;
    }
    printf("correctness: %d of %d cases passed (bounds per case, above)\n", cases_run - failures, cases_run);
    return failures ? 1 : 0;
}

/* ---- the reference cases, timed with CUDA events ----------------------------- */

/* Creates batch sequences and appends len tokens to each through the append path,
 * chunk tokens per step. */
static int prefill(struct case_run *c, uint32_t *ids, uint32_t batch, uint32_t len, uint32_t chunk)
{
    int err = DCP_OK;
    for (uint32_t s = 0; s < batch && !err; s++) {
        err = dcp_seq_create(c->e, &ids[s]);
        for (uint32_t done = 0, n; done < len && !err; done += n) {
            n = len - done < chunk ? len - done : chunk;
            err = dcp_seq_extend(c->e, ids[s], n);
            const struct dcp_batch one = {.num_seqs = 1, .seq_ids = &ids[s], .q_lens = &n};
            c->tokens = n;
            c->attend = false;
            if (!err)
                err = dcp_engine_begin_step(c->e, &one);
            if (!err)
                err = dcp_engine_run(c->e, rank_fn, c);
        }
    }
    return err;
}

#define BENCH_SAMPLES 21     /* flushed samples per case (median reported) */
#define BENCH_BACK_TO_BACK 20 /* launches of the back-to-back run */

struct bench_case {
    const char *name;
    enum dcp_attention_kind kind;
    uint32_t head_dim, q_heads, kv_heads, batch, context;
};

struct bench_run {
    struct case_run c;
    void *flush;        /* > L2: written between samples */
    size_t flush_bytes;
    double sample_s[BENCH_SAMPLES], back_to_back_s;
};

static double profile_attention(dcp_rank *r, int *err)
{
    struct dcp_profile p = {0};
    if (!*err)
        *err = dcp_rank_get_profile(r, &p); /* waits for the rank's queued work */
    return p.attention_seconds + p.merge_seconds; /* the launch and its split-KV combine */
}

static int bench_rank(dcp_rank *r, void *arg)
{
    struct bench_run *b = arg;
    const struct dcp_engine_info *in = &b->c.in;
    const struct dcp_synth_desc q = {.seed = seed_of(0, 0), .row_keys = dcp_rank_step_token_keys(r),
                                     .rows = b->c.tokens, .heads = in->q_heads_per_rank, .dim = in->qk_dim,
                                     .amplitude = 1.0f};
    const uint32_t flush_rows = (uint32_t)(b->flush_bytes / sizeof(float) / 1024);
    const struct dcp_synth_desc flush = {.seed = 99, .rows = flush_rows, .heads = 1, .dim = 1024, .amplitude = 1.0f};
    int err = dcp_rank_fill_synthetic(r, b->c.q[0], &q);
    for (int w = 0; w < 2 && !err; w++) /* warm-up: module, caches, clocks */
        err = dcp_rank_attention(r, 0, b->c.q[0], b->c.o[0], b->c.l[0]);
    for (int s = 0; s < BENCH_SAMPLES && !err; s++) {
        err = dcp_rank_fill_synthetic(r, b->flush, &flush); /* evicts the KV from L2 */
        const double before = profile_attention(r, &err);
        if (!err)
            err = dcp_rank_attention(r, 0, b->c.q[0], b->c.o[0], b->c.l[0]);
        b->sample_s[s] = profile_attention(r, &err) - before;
    }
    const double before = profile_attention(r, &err);
    for (int s = 0; s < BENCH_BACK_TO_BACK && !err; s++)
        err = dcp_rank_attention(r, 0, b->c.q[0], b->c.o[0], b->c.l[0]);
    b->back_to_back_s = (profile_attention(r, &err) - before) / BENCH_BACK_TO_BACK;
    /* The outputs of the last timed launch, for the oracle. */
    const size_t rows = (size_t)b->c.tokens * in->q_heads_per_rank;
    if (!err)
        err = dcp_rank_download(r, b->c.out[0], b->c.o[0], rows * in->v_dim * sizeof(float));
    if (!err)
        err = dcp_rank_download(r, b->c.lse[0], b->c.l[0], rows * sizeof(float));
    return err;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- the reference kernels: read-only stream and mma peak --------------------- */

/* What the yardsticks measured, and the attention entries' registers. */
struct ref_result {
    bool ran;            /* the kernels ran (false: no --ref, or the driver could not) */
    bool ok;             /* and their results were right */
    double read_gbs;     /* bytes read / median time */
    double mma_tflops;   /* flops / median time */
    int sms;
    int attn_regs[2];    /* registers per thread: gqa_d128 bf16, mla bf16 entries (0: unknown) */
};

#define REF_SAMPLES 11
#define REF_READ_WORD 0x01020304u /* every 32-bit word of the streamed buffer */

static int ref_cu(CUresult r, const char *call)
{
    return dcp_cuda_check(r, call);
}

/* The whole file at path (free it), or NULL. */
static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    void *buf = NULL;
    long n = -1;
    if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)n)) &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    *size = buf ? (size_t)n : 0;
    return buf;
}

/* Median of n CUDA-event timings (seconds) of launches of fn over grid blocks x
 * DCPK_REF_THREADS with params; `reset` (bytes at dst set to 0xff) before each. */
static int ref_time(const struct dcp_cuda *cu, CUfunction fn, uint32_t blocks, void *params, CUdeviceptr reset,
                    size_t reset_bytes, int n, double *median)
{
    const struct dcp_cuda_api *a = &cu->api;
    CUevent e0 = NULL, e1 = NULL;
    double t[REF_SAMPLES];
    void *args[] = {params};
    int err = ref_cu(a->cuEventCreate(&e0, CU_EVENT_DEFAULT), "cuEventCreate");
    if (!err)
        err = ref_cu(a->cuEventCreate(&e1, CU_EVENT_DEFAULT), "cuEventCreate");
    for (int i = -1; i < n && !err; i++) { /* i = -1: warm-up */
        err = ref_cu(a->cuMemsetD8Async(reset, 0xff, reset_bytes, NULL), "cuMemsetD8Async");
        if (!err)
            err = ref_cu(a->cuEventRecord(e0, NULL), "cuEventRecord");
        if (!err)
            err = ref_cu(a->cuLaunchKernel(fn, blocks, 1, 1, DCPK_REF_THREADS, 1, 1, 0, NULL, args, NULL),
                         "cuLaunchKernel");
        if (!err)
            err = ref_cu(a->cuEventRecord(e1, NULL), "cuEventRecord");
        if (!err)
            err = ref_cu(a->cuEventSynchronize(e1), "cuEventSynchronize");
        float ms = 0;
        if (!err)
            err = ref_cu(a->cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
        if (i >= 0)
            t[i] = ms * 1e-3;
    }
    if (e0)
        a->cuEventDestroy(e0);
    if (e1)
        a->cuEventDestroy(e1);
    if (!err) {
        qsort(t, (size_t)n, sizeof(double), cmp_double);
        *median = t[n / 2];
    }
    return err;
}

/* Registers of the attention entries the reference cases use, from the embedded module. */
static void attention_registers(const struct dcp_cuda *cu, int regs[2])
{
    static const char *const entries[2] = {"dcpk_attn__gqa_d128_bf16", "dcpk_attn__mla_bf16"};
    const struct dcp_embedded_module *m = dcp_embedded_module_find("dcp_kernels");
    struct dcp_module *mod = NULL;
    regs[0] = regs[1] = 0;
    if (!m || dcp_module_load(cu, m, &mod))
        return;
    for (int i = 0; i < 2; i++) {
        CUfunction fn;
        if (!dcp_module_get_function(mod, entries[i], &fn))
            cu->api.cuFuncGetAttribute(&regs[i], CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    }
    dcp_module_unload(&mod);
}

/* DCP_GPU_CHECK_PERTURB also spoils the yardsticks' results (a forced failure). */
static bool perturbing(void)
{
    const char *text = getenv("DCP_GPU_CHECK_PERTURB");
    const double amount = text ? strtod(text, NULL) : 0;
    return amount != 0 && isfinite(amount);
}

/* The read-only stream: grid of SMs x occupancy, the sum of every word checked. */
static int ref_read(const struct dcp_cuda *cu, CUfunction fn, const struct opts *o, struct ref_result *rr)
{
    const struct dcp_cuda_api *a = &cu->api;
    const size_t bytes = o->quick ? (8u << 20) : ((size_t)2 << 30);
    int per_sm = 0, regs = 0;
    CUdeviceptr src = 0, partial = 0;
    int err = ref_cu(a->cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, DCPK_REF_THREADS, 0),
                     "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    if (!err)
        err = ref_cu(a->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn), "cuFuncGetAttribute");
    const uint32_t blocks = (uint32_t)(rr->sms * (per_sm > 0 ? per_sm : 1));
    if (!err)
        err = ref_cu(a->cuMemAlloc(&src, bytes), "cuMemAlloc");
    if (!err)
        err = ref_cu(a->cuMemAlloc(&partial, blocks * sizeof(uint64_t)), "cuMemAlloc");
    if (!err)
        err = ref_cu(a->cuMemsetD32Async(src, REF_READ_WORD, bytes / 4, NULL), "cuMemsetD32Async");
    struct dcpk_ref_read_params p = {.src = src, .n16 = bytes / 16, .partial = partial, .blocks = blocks};
    double med = 0;
    if (!err)
        err = ref_time(cu, fn, blocks, &p, partial, blocks * sizeof(uint64_t), REF_SAMPLES, &med);
    uint64_t *sums = err ? NULL : malloc(blocks * sizeof(uint64_t));
    if (!err && !sums)
        err = DCP_ENOMEM;
    if (!err)
        err = ref_cu(a->cuMemcpyDtoH(sums, partial, blocks * sizeof(uint64_t)), "cuMemcpyDtoH");
    if (!err) {
        uint64_t total = perturbing() ? 1 : 0;
        for (uint32_t i = 0; i < blocks; i++)
            total += sums[i];
        const bool ok = total == (uint64_t)(bytes / 4) * REF_READ_WORD;
        rr->read_gbs = (double)bytes / med / 1e9;
        rr->ok = rr->ok && ok;
        printf("read   %7.1f MB  grid %ux1x1 x %u thr  regs %3d  blk/SM %2d  median %9.1f us  %8.1f GB/s read"
               "  sum %s\n", bytes / 1e6, blocks, DCPK_REF_THREADS, regs, per_sm, med * 1e6, rr->read_gbs,
               ok ? "ok" : "FAIL");
    }
    free(sums);
    if (src)
        a->cuMemFree(src);
    if (partial)
        a->cuMemFree(partial);
    return err;
}

/* The mma.sync loop: every accumulator must come out as iterations * 16 * a * b. */
static int ref_mma(const struct dcp_cuda *cu, CUfunction fn, const struct opts *o, struct ref_result *rr)
{
    const struct dcp_cuda_api *a = &cu->api;
    int per_sm = 0, regs = 0;
    CUdeviceptr out = 0;
    int err = ref_cu(a->cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, DCPK_REF_THREADS, 0),
                     "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    if (!err)
        err = ref_cu(a->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn), "cuFuncGetAttribute");
    const uint32_t blocks = (uint32_t)(rr->sms * (per_sm > 0 ? per_sm : 1));
    const size_t n = (size_t)blocks * DCPK_REF_THREADS * DCPK_REF_MMA_OUT_PER_THREAD;
    if (!err)
        err = ref_cu(a->cuMemAlloc(&out, n * sizeof(float)), "cuMemAlloc");
    /* A = 1, B = 2^-6: each round adds 16 * 2^-6 = 0.25 to every accumulator, exactly. */
    struct dcpk_ref_mma_params p = {.out = out, .iterations = o->quick ? 8 : 512, .blocks = blocks,
                                    .a_bits = 0x3f80, .b_bits = 0x3c80};
    double med = 0;
    if (!err)
        err = ref_time(cu, fn, blocks, &p, out, n * sizeof(float), 5, &med);
    float *got = err ? NULL : malloc(n * sizeof(float));
    if (!err && !got)
        err = DCP_ENOMEM;
    if (!err)
        err = ref_cu(a->cuMemcpyDtoH(got, out, n * sizeof(float)), "cuMemcpyDtoH");
    if (!err) {
        const float want = (float)p.iterations * 0.25f;
        size_t bad = perturbing() ? 1 : 0;
        for (size_t i = 0; i < n; i++)
            bad += got[i] != want;
        const double flops = (double)blocks * (DCPK_REF_THREADS / 32) * (double)p.iterations *
                             DCPK_REF_MMA_CHAINS * DCPK_REF_MMA_FLOPS;
        rr->mma_tflops = flops / med / 1e12;
        rr->ok = rr->ok && bad == 0;
        printf("mma    %7.1f GF  grid %ux1x1 x %u thr  regs %3d  blk/SM %2d  median %9.1f us  %8.1f TFLOP/s"
               " (bf16 mma.sync m16n8k16, fp32 acc)  result %s\n", flops / 1e9, blocks, DCPK_REF_THREADS, regs,
               per_sm, med * 1e6, rr->mma_tflops, bad ? "FAIL" : "ok");
    }
    free(got);
    if (out)
        a->cuMemFree(out);
    return err;
}

/* Runs both yardsticks from the fatbin at o->ref_path on device 0. */
static int reference_kernels(const struct opts *o, struct ref_result *rr)
{
    memset(rr, 0, sizeof(*rr));
    struct dcp_cuda *cu = NULL;
    int err = dcp_cuda_open(NULL, &cu);
    if (err)
        return err;
    const struct dcp_cuda_api *a = &cu->api;
    CUcontext ctx = NULL;
    CUmodule mod = NULL;
    size_t size = 0;
    void *image = read_file(o->ref_path, &size);
    err = ref_cu(a->cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    if (!err)
        err = ref_cu(a->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    if (!err)
        err = ref_cu(a->cuDeviceGetAttribute(&rr->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
                     "cuDeviceGetAttribute");
    if (!err)
        attention_registers(cu, rr->attn_regs);
    if (!err && !image) {
        printf("reference kernels: cannot read %s\n", o->ref_path);
        err = DCP_EIO;
    }
    if (!err)
        err = ref_cu(a->cuModuleLoadDataEx(&mod, image, 0, NULL, NULL), "cuModuleLoadDataEx");
    CUfunction read_fn = NULL, mma_fn = NULL;
    if (!err)
        err = ref_cu(a->cuModuleGetFunction(&read_fn, mod, "dcpk_ref_read"), "cuModuleGetFunction(dcpk_ref_read)");
    if (!err)
        err = ref_cu(a->cuModuleGetFunction(&mma_fn, mod, "dcpk_ref_mma"), "cuModuleGetFunction(dcpk_ref_mma)");
    rr->ok = true;
    if (!err)
        err = ref_read(cu, read_fn, o, rr);
    if (!err)
        err = ref_mma(cu, mma_fn, o, rr);
    rr->ran = !err;
    if (err)
        printf("reference kernels: %s: %s\n", dcp_strerror(err), dcp_last_error());
    if (mod)
        a->cuModuleUnload(mod);
    if (ctx)
        a->cuDevicePrimaryCtxRelease(0);
    free(image);
    dcp_cuda_close(&cu);
    return err;
}

/* KV bytes one launch must read: every cached token of every sequence, K and V
 * (MLA: the 576-wide latent once). */
static double kv_bytes(const struct bench_case *bc, const struct dcp_engine_info *in, uint32_t context)
{
    const double per_token = (double)bc->kv_heads * (bc->kind == DCP_ATTN_MLA ? in->qk_dim : in->qk_dim + in->v_dim);
    return (double)bc->batch * context * per_token * 2.0; /* bf16 */
}

/* Sets up one reference case (prefill through the append path), times it, checks it. */
static int bench_one(const struct bench_case *bc, const struct opts *o, const struct ref_result *rr,
                     uint32_t context, bool *ok)
{
    /* What ships: precision fast (one rank: no wire). */
    const struct sweep_case sc = {.kind = bc->kind, .head_dim = bc->head_dim, .dtype = DCP_DTYPE_BF16, .n = 1,
                                  .comm = DCP_COMM_A2A, .interleave = 1, .q_len = 1,
                                  .precision = DCP_CUDA_PRECISION_FAST, .wire = DCP_WIRE_BF16};
    dcp_deployment *dep = make_deployment(&sc, o, bc->q_heads, bc->kv_heads);
    if (!dep)
        return DCP_ECONFIG;
    const uint32_t chunk = context < 8192 ? context : 8192;
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.num_layers = 1;
    p.max_batch = bc->batch;
    p.max_seqs = bc->batch;
    p.max_query_tokens = bc->batch > chunk ? bc->batch : chunk;
    p.max_step_tokens = p.max_query_tokens;
    p.max_context = context + 64;
    p.profile = true;
    /* The whole cache (bf16) with room for block rounding, plus workspace. */
    const double token_bytes = 2.0 * bc->kv_heads * (bc->kind == DCP_ATTN_MLA ? 576 : 2 * bc->head_dim);
    p.kv_budget_bytes = (double)bc->batch * (context + 64) * token_bytes * 1.05 + 64e6;
    struct bench_run b = {0};
    b.c.mla = bc->kind == DCP_ATTN_MLA;
    b.c.model = &dcp_deployment_config(dep)->model;
    b.flush_bytes = o->quick ? (1u << 20) : (256u << 20);
    int err = dcp_engine_create(&p, &b.c.e);
    if (!err)
        dcp_engine_get_info(b.c.e, &b.c.in);
    dcp_rank *r = err ? NULL : dcp_engine_rank(b.c.e, 0);
    const struct dcp_engine_info *in = &b.c.in;
    const size_t f = sizeof(float), qrows = (size_t)bc->batch * in->q_heads_per_rank;
    if (!err && (!(b.c.out[0] = malloc(qrows * in->v_dim * f)) || !(b.c.lse[0] = malloc(qrows * f))))
        err = DCP_ENOMEM;
    if (!err)
        err = dcp_rank_alloc(r, (size_t)chunk * in->kv_heads_per_rank * in->qk_dim * f, &b.c.k[0]);
    if (!err)
        err = dcp_rank_alloc(r, (size_t)chunk * in->kv_heads_per_rank * in->v_dim * f, &b.c.v[0]);
    if (!err)
        err = dcp_rank_alloc(r, qrows * in->qk_dim * f, &b.c.q[0]);
    if (!err)
        err = dcp_rank_alloc(r, qrows * in->v_dim * f, &b.c.o[0]);
    if (!err)
        err = dcp_rank_alloc(r, qrows * f, &b.c.l[0]);
    if (!err)
        err = dcp_rank_alloc(r, b.flush_bytes, &b.flush);
    uint32_t *ids = calloc(bc->batch, sizeof(*ids)), *ql = calloc(bc->batch, sizeof(*ql));
    if (!err && (!ids || !ql))
        err = DCP_ENOMEM;
    if (!err)
        err = prefill(&b.c, ids, bc->batch, context - 1, chunk);
    /* The decode step: one new token per sequence (appended, then attended). */
    for (uint32_t s = 0; s < bc->batch && !err; s++) {
        ql[s] = 1;
        err = dcp_seq_extend(b.c.e, ids[s], 1);
    }
    const struct dcp_batch all = {.num_seqs = bc->batch, .seq_ids = ids, .q_lens = ql};
    b.c.tokens = bc->batch;
    b.c.attend = false;
    if (!err)
        err = dcp_engine_begin_step(b.c.e, &all);
    struct dcp_step_launch launch = {0};
    if (!err)
        err = dcp_engine_step_launch(b.c.e, &launch); /* what begin_step chose for this step */
    if (!err)
        err = dcp_engine_run(b.c.e, rank_fn, &b.c); /* appends the step's KV */
    if (!err)
        err = dcp_engine_run(b.c.e, bench_rank, &b);
    double worst = 0, worst_lse = 0, worst_lse_rel = 0;
    for (uint32_t k = 0; k < 2 && !err; k++) {
        const uint32_t s = k ? bc->batch - 1 : 0;
        double le = 0, lr = 0;
        if (k == 0)
            perturb_row(b.c.out[0] + (size_t)s * in->q_heads_per_rank * in->v_dim, in->v_dim);
        const double e = compare_sequence(&b.c, &sc, ids[s], context, s, bc->q_heads, bc->kv_heads, &le, &lr);
        worst = e > worst || !isfinite(e) ? e : worst;
        worst_lse = le > worst_lse || !isfinite(le) ? le : worst_lse;
        worst_lse_rel = lr > worst_lse_rel || !isfinite(lr) ? lr : worst_lse_rel;
    }
    if (err) {
        printf("%-22s %s: %s\n", bc->name, dcp_strerror(err), dcp_last_error());
    } else {
        const struct case_result cr = {.rel_err = worst, .lse_err = worst_lse, .lse_rel = worst_lse_rel};
        const struct tolerance tol = case_tolerance(&sc);
        *ok = within_tolerance(&cr, &tol);
        qsort(b.sample_s, BENCH_SAMPLES, sizeof(double), cmp_double);
        const double med = b.sample_s[BENCH_SAMPLES / 2], bytes = kv_bytes(bc, in, context);
        /* 2 (qk + v) flops per key per query head (score and P.V). */
        const double tflops = 2.0 * (in->qk_dim + in->v_dim) * (double)context * bc->batch * bc->q_heads / med / 1e12;
        char grid[40], bw[16] = "-", peak[16] = "-";
        snprintf(grid, sizeof(grid), "%ux%ux%u", launch.grid[0], launch.grid[1], launch.grid[2]);
        if (rr->ran) {
            snprintf(bw, sizeof(bw), "%.2f", bytes / med / 1e9 / rr->read_gbs);
            snprintf(peak, sizeof(peak), "%.3f", tflops / rr->mma_tflops);
        }
        printf("%-22s %3u x %-6u %8.1f %10.1f %9.1f %9.1f %8.1f %6s %8.2f %6s %6u %-14s %4d %6u %6u %9.2e %9.2e  %s\n",
               bc->name, bc->batch, context, bytes / 1e6, med * 1e6, b.sample_s[0] * 1e6, b.back_to_back_s * 1e6,
               bytes / med / 1e9, bw, tflops, peak, launch.num_splits, grid,
               rr->attn_regs[bc->kind == DCP_ATTN_MLA], launch.blocks_per_sm, launch.slots, worst,
               tol.lse_relative ? worst_lse_rel : worst_lse, *ok ? "ok" : "FAIL");
    }
    fflush(stdout);
    free(ids);
    free(ql);
    if (b.c.e) {
        dcp_rank_free(r, b.c.k[0]);
        dcp_rank_free(r, b.c.v[0]);
        dcp_rank_free(r, b.c.q[0]);
        dcp_rank_free(r, b.c.o[0]);
        dcp_rank_free(r, b.c.l[0]);
        dcp_rank_free(r, b.flush);
    }
    free(b.c.out[0]);
    free(b.c.lse[0]);
    dcp_engine_destroy(&b.c.e);
    dcp_deployment_destroy(&dep);
    return err;
}

static int bench(const struct opts *o)
{
    static const struct bench_case cases[] = {
        {"gqa d128 8q/kv bf16", DCP_ATTN_GQA, 128, 8, 1, 32, 65536},
        {"mla 16 heads bf16", DCP_ATTN_MLA, 0, 16, 1, 32, 8192},
        {"mla 128 heads bf16", DCP_ATTN_MLA, 0, 128, 1, 32, 8192},
        {"mla 128 heads b1 bf16", DCP_ATTN_MLA, 0, 128, 1, 1, 8192},
    };
    /* The yardsticks first, so every case can be set against them. */
    int failures = 0;
    bool ref_failed = false;
    struct ref_result rr = {0};
    if (o->ref_path) {
        printf("reference kernels (%s%s): CUDA-event median of %d launches, grid = SMs x occupancy\n", o->ref_path,
               o->quick ? "; --quick: scaled down" : "", REF_SAMPLES);
        const int err = reference_kernels(o, &rr);
        if (err && unavailable(err)) {
            printf("no usable CUDA device: %s (%s)\n", dcp_strerror(err), dcp_last_error());
            return 77;
        }
        ref_failed = err || !rr.ok;
    } else {
        printf("reference kernels: not run (no --ref dcp_ref_kernels.fatbin): no ratios\n");
    }
    /* --quick (the test doubles run kernels on the CPU): contexts / 512, batch <= 4. */
    printf("reference cases: one rank, precision fast (the default), CUDA-event time per launch after an L2 flush"
           " (%d samples), back-to-back mean of %d%s\n", BENCH_SAMPLES, BENCH_BACK_TO_BACK,
           o->quick ? "; --quick: scaled-down shapes" : "");
    printf("%-22s %-12s %8s %10s %9s %9s %8s %6s %8s %6s %6s %-14s %4s %6s %6s %9s %9s  %s\n", "case", "batch x ctx",
           "KV MB", "median us", "min us", "b2b us", "GB/s", "/read", "TFLOP/s", "/mma", "splits", "grid", "regs",
           "blk/SM", "slots", "rel err", "dLSE", "result");
    size_t ran = 0;
    for (size_t i = 0; i < DCP_ARRAY_SIZE_(cases); i++) {
        struct bench_case bc = cases[i];
        if (!case_selected(o, bc.name))
            continue;
        ran++;
        const uint32_t context = o->quick ? bc.context / 512 : bc.context;
        if (o->quick && bc.batch > 4)
            bc.batch = 4;
        bool ok = false;
        int err = bench_one(&bc, o, &rr, context, &ok);
        if (err && unavailable(err) && ran == 1) {
            printf("no usable CUDA device: %s (%s)\n", dcp_strerror(err), dcp_last_error());
            return 77;
        }
        failures += err || !ok;
    }
    printf("(GB/s: KV bytes the launch reads / median; /read: that over the read-only stream's GB/s (bytes read),\n"
           " same run; TFLOP/s: 2*(qk+v) flops per key per head / median; /mma: that over the mma.sync loop's\n"
           " TFLOP/s; splits, grid (splits x KV-head tiles x sequences), regs (the attention entry's registers per\n"
           " thread), blk/SM (the driver's occupancy for it) and slots (SMs x blk/SM): the launch the engine chose;\n"
           " rel err, dLSE: of the last timed launch against the float64 oracle, first and last sequence; precision\n"
           " fast (the default): MLA bounds rel L2 %.0e, |dLSE|/(1+|LSE|) %.0e; GQA (always hi/lo) 1e-4 and |dLSE| 1e-4)\n",
           TOL_FAST_L2_BF16, TOL_FAST_LSE_BF16);
    if (o->ref_path)
        printf("reference kernels: %s\n", ref_failed ? "FAIL" : "ok");
    printf("bench: %zu of %zu cases passed\n", ran - (size_t)failures, ran);
    return failures || ref_failed || ran == 0 ? 1 : 0;
}

/* ---- the time split of one DCP decode step ------------------------------------- */

struct breakdown_run {
    struct case_run c;
    int reps;
};

static int breakdown_rank(dcp_rank *r, void *arg)
{
    struct breakdown_run *b = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    dcp_rank_reset_profile(r);
    for (int rep = 0; rep < b->reps; rep++)
        for (uint32_t layer = 0; layer < b->c.in.num_layers; layer++) {
            int err = dcp_rank_attention(r, layer, b->c.q[i], b->c.o[i], NULL);
            if (err)
                return err;
        }
    return dcp_rank_synchronize(r);
}

static int breakdown(const struct opts *o)
{
    /* DeepSeek-V3-like layer at tp 8 / dcp 8 on virtual ranks: 16 heads per rank,
     * 128 gathered; a batch of 32 requests of 32k tokens. */
    const uint32_t n = 8, batch = o->quick ? 2 : 32, len = o->quick ? 256 : 32768;
    struct sweep_case sc = {.kind = DCP_ATTN_MLA, .dtype = DCP_DTYPE_BF16, .n = n, .comm = DCP_COMM_A2A,
                            .interleave = 1, .q_len = 1, .precision = DCP_CUDA_PRECISION_FAST, .wire = DCP_WIRE_BF16};
    printf("\nDCP step breakdown: MLA 576/512 bf16, precision fast, bf16 wire, %u virtual ranks, 16 heads per rank, "
           "batch %u x %u tokens\n",
           n, batch, len);
    printf("%-6s %10s %10s %10s %10s %10s %8s\n", "comm", "step ms", "attn ms", "merge ms", "comm ms", "merge %",
           "comm %");
    for (int scheme = 0; scheme < 2; scheme++) {
        sc.comm = scheme ? DCP_COMM_AG_RS : DCP_COMM_A2A;
        dcp_deployment *dep = make_deployment(&sc, o, 16 * n, 1);
        struct dcp_engine_params p;
        dcp_engine_default_params(&p);
        p.deployment = dep;
        p.num_layers = 1;
        p.kv_budget_bytes = (double)batch * (len / n + 64) * 1152 + 64e6;
        p.max_batch = batch;
        p.max_seqs = batch;
        p.max_query_tokens = batch;
        p.max_step_tokens = 8192;
        p.max_context = len + 1;
        p.profile = true;
        struct breakdown_run b = {.reps = 5};
        int err = dcp_engine_create(&p, &b.c.e);
        if (err) {
            printf("breakdown: %s: %s\n", dcp_strerror(err), dcp_last_error());
            dcp_deployment_destroy(&dep);
            return unavailable(err) ? 77 : 1;
        }
        dcp_engine_get_info(b.c.e, &b.c.in);
        b.c.mla = true;
        for (uint32_t i = 0; i < n && !err; i++) {
            dcp_rank *r = dcp_engine_rank(b.c.e, i);
            if ((err = dcp_rank_alloc(r, 8192 * b.c.in.qk_dim * sizeof(float), &b.c.k[i])) ||
                (err = dcp_rank_alloc(r, batch * 16 * b.c.in.qk_dim * sizeof(float), &b.c.q[i])) ||
                (err = dcp_rank_alloc(r, batch * 16 * b.c.in.v_dim * sizeof(float), &b.c.o[i])))
                break;
        }
        uint32_t ids[64], ql[64];
        if (!err)
            err = prefill(&b.c, ids, batch, len, 8192);
        for (uint32_t s = 0; s < batch; s++)
            ql[s] = 1;
        const struct dcp_batch all = {.num_seqs = batch, .seq_ids = ids, .q_lens = ql};
        if (!err)
            err = dcp_engine_begin_step(b.c.e, &all);
        for (uint32_t i = 0; i < n && !err; i++) {
            const struct dcp_synth_desc d = {.seed = 5, .rows = batch, .heads = 16, .dim = b.c.in.qk_dim,
                                             .head_offset = 16 * i, .amplitude = 1.0f};
            err = dcp_rank_fill_synthetic(dcp_engine_rank(b.c.e, i), b.c.q[i], &d);
        }
        if (!err)
            err = dcp_engine_run(b.c.e, breakdown_rank, &b);
        struct dcp_profile pr = {0};
        if (!err)
            err = dcp_rank_get_profile(dcp_engine_rank(b.c.e, 0), &pr);
        if (err) {
            printf("breakdown: %s: %s\n", dcp_strerror(err), dcp_last_error());
        } else {
            const double step = (pr.attention_seconds + pr.merge_seconds + pr.comm_seconds) / b.reps;
            printf("%-6s %10.3f %10.3f %10.3f %10.3f %9.1f%% %7.1f%%\n", dcp_comm_scheme_name(sc.comm), step * 1e3,
                   pr.attention_seconds / b.reps * 1e3, pr.merge_seconds / b.reps * 1e3,
                   pr.comm_seconds / b.reps * 1e3, 100 * pr.merge_seconds / b.reps / step,
                   100 * pr.comm_seconds / b.reps / step);
        }
        for (uint32_t i = 0; i < n; i++) {
            dcp_rank *r = dcp_engine_rank(b.c.e, i);
            dcp_rank_free(r, b.c.k[i]);
            dcp_rank_free(r, b.c.q[i]);
            dcp_rank_free(r, b.c.o[i]);
        }
        dcp_engine_destroy(&b.c.e);
        dcp_deployment_destroy(&dep);
        if (err)
            return 1;
    }
    printf("(rank 0's device time per step from events around each operation; merge = split-KV combine +\n"
           " DCP merge kernels; comm = Q gather and merge collectives as device copies between virtual ranks)\n");
    return 0;
}

/* ---- step latency: eager vs CUDA graph ----------------------------------------- */

static double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct graph_run {
    struct case_run c;
    enum { G_EAGER, G_CAPTURE, G_REPLAY } mode;
    dcp_graph *graph[MAX_RANKS];
};

/* One decode step of every layer: synthetic K (keyed by the step's token keys, so
 * a replay gets new values) appended, synthetic Q, attention; then the rank waits. */
static int graph_enqueue(dcp_rank *r, struct graph_run *g)
{
    const uint32_t i = dcp_rank_tp_rank(r);
    int err = DCP_OK;
    for (uint32_t layer = 0; layer < g->c.in.num_layers && !err; layer++) {
        struct dcp_synth_desc d = {.seed = seed_of(layer, 1), .row_keys = dcp_rank_step_token_keys(r),
                                   .rows = g->c.tokens, .heads = g->c.in.kv_heads_per_rank, .dim = g->c.in.qk_dim,
                                   .amplitude = 1.0f};
        err = dcp_rank_fill_synthetic(r, g->c.k[i], &d);
        if (!err)
            err = dcp_rank_append_kv(r, layer, g->c.k[i], NULL);
        d = (struct dcp_synth_desc){.seed = seed_of(layer, 0), .row_keys = dcp_rank_step_token_keys(r),
                                    .rows = g->c.tokens, .heads = g->c.in.q_heads_per_rank, .dim = g->c.in.qk_dim,
                                    .head_offset = i * g->c.in.q_heads_per_rank, .amplitude = 1.0f};
        if (!err)
            err = dcp_rank_fill_synthetic(r, g->c.q[i], &d);
        if (!err)
            err = dcp_rank_attention(r, layer, g->c.q[i], g->c.o[i], NULL);
    }
    return err;
}

static int graph_rank(dcp_rank *r, void *arg)
{
    struct graph_run *g = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    int err = DCP_OK;
    if (g->mode == G_EAGER) {
        err = graph_enqueue(r, g);
    } else if (g->mode == G_CAPTURE) {
        err = dcp_rank_capture_begin(r);
        if (!err) {
            const int inside = graph_enqueue(r, g);
            err = dcp_rank_capture_end(r, &g->graph[i]);
            err = inside ? inside : err;
        }
        if (!err)
            err = dcp_graph_launch(g->graph[i]);
    } else {
        err = dcp_graph_launch(g->graph[i]);
    }
    return err ? err : dcp_rank_synchronize(r);
}

/* Median wall time of steps decode steps (begin_step, every rank's work, every
 * rank synchronized) of a batch of one-token queries; graph: the first step is
 * captured (not timed) and the rest replay it. Rank 0's output of the last step
 * lands in out (rows floats). */
static int time_steps(struct graph_run *g, const uint32_t *ids, uint32_t batch, bool graph, int steps, float *out,
                      size_t rows, double *median_s)
{
    uint32_t ql[64];
    for (uint32_t s = 0; s < batch; s++)
        ql[s] = 1;
    const struct dcp_batch all = {.num_seqs = batch, .seq_ids = ids, .q_lens = ql};
    double t[64];
    int err = DCP_OK;
    for (int step = 0; step <= steps && !err; step++) {
        for (uint32_t s = 0; s < batch && !err; s++)
            err = dcp_seq_extend(g->c.e, ids[s], 1);
        g->c.tokens = batch;
        g->mode = !graph ? G_EAGER : step == 0 ? G_CAPTURE : G_REPLAY;
        const double t0 = wall_seconds();
        if (!err)
            err = dcp_engine_begin_step(g->c.e, &all);
        if (!err)
            err = dcp_engine_run(g->c.e, graph_rank, g);
        if (step > 0)
            t[step - 1] = wall_seconds() - t0;
    }
    if (err)
        return err;
    qsort(t, (size_t)steps, sizeof(double), cmp_double);
    *median_s = t[steps / 2];
    return dcp_rank_download(dcp_engine_rank(g->c.e, 0), out, g->c.o[0], rows * sizeof(float));
}

/*
 * Step latency of a decode step eager (every kernel launched from the host) and
 * replayed from a CUDA graph captured once (the library's dcp_rank_capture_*,
 * params.graphs = true in both runs, so both launch the same kernels): MLA 576/512
 * bf16 on virtual ranks of one GPU, several layers, small batches (where launch
 * overhead shows). Host wall time per step, begin_step and the rank threads'
 * start included (the same in both). Both runs compute the same steps, so their
 * last outputs must be equal bit for bit.
 */
static int graph_latency(const struct opts *o)
{
    struct gcase {
        uint32_t n, batch, len;
    };
    static const struct gcase full[] = {{1, 1, 4096}, {8, 1, 4096}, {8, 16, 4096}, {8, 16, 32768}};
    static const struct gcase quick[] = {{1, 1, 200}, {2, 2, 200}};
    const struct gcase *cases = o->quick ? quick : full;
    const size_t ncases = o->quick ? DCP_ARRAY_SIZE_(quick) : DCP_ARRAY_SIZE_(full);
    const int steps = o->quick ? 3 : 41;
    deployment_layers = o->quick ? 2 : 8;
    printf("\nDCP decode step latency, eager vs CUDA graph: MLA 576/512 bf16, precision fast, bf16 wire, %u layers, "
           "16 heads per rank, virtual ranks on one GPU, median of %d steps\n", deployment_layers, steps);
    printf("%-6s %6s %8s %12s %12s %8s  %s\n", "ranks", "batch", "context", "eager us", "graph us", "speedup",
           "result");
    int failures = 0;
    int ran = 0;
    for (size_t ci = 0; ci < ncases; ci++) {
        const struct gcase *gc = &cases[ci];
        char label[64];
        snprintf(label, sizeof(label), "graph-n%u-b%u-%u", gc->n, gc->batch, gc->len);
        if (!case_selected(o, label))
            continue;
        ran++;
        struct sweep_case sc = {.kind = DCP_ATTN_MLA, .dtype = DCP_DTYPE_BF16, .n = gc->n, .comm = DCP_COMM_A2A,
                                .interleave = 1, .q_len = 1, .precision = DCP_CUDA_PRECISION_FAST,
                                .wire = DCP_WIRE_BF16};
        dcp_deployment *dep = make_deployment(&sc, o, 16 * gc->n, 1);
        double med[2] = {0, 0};
        const size_t rows = (size_t)gc->batch * 16 * 512;
        float *out[2] = {calloc(rows, sizeof(float)), calloc(rows, sizeof(float))};
        int err = dep && out[0] && out[1] ? DCP_OK : DCP_ENOMEM;
        for (int mode = 0; mode < 2 && !err; mode++) {
            struct dcp_engine_params p;
            dcp_engine_default_params(&p);
            p.deployment = dep;
            p.kv_budget_bytes = (double)gc->batch * ((gc->len + 2 * steps) / gc->n + 64) * 1152 * deployment_layers + 64e6;
            p.max_batch = gc->batch;
            p.max_seqs = gc->batch;
            p.max_query_tokens = gc->batch;
            p.max_step_tokens = 8192;
            p.max_context = gc->len + 2 * (uint64_t)steps + 2;
            p.graphs = true;
            struct graph_run g = {0};
            err = dcp_engine_create(&p, &g.c.e);
            if (err)
                break;
            dcp_engine_get_info(g.c.e, &g.c.in);
            g.c.mla = true;
            for (uint32_t i = 0; i < gc->n && !err; i++) {
                dcp_rank *r = dcp_engine_rank(g.c.e, i);
                if ((err = dcp_rank_alloc(r, 8192 * g.c.in.qk_dim * sizeof(float), &g.c.k[i])) ||
                    (err = dcp_rank_alloc(r, gc->batch * 16 * g.c.in.qk_dim * sizeof(float), &g.c.q[i])) ||
                    (err = dcp_rank_alloc(r, gc->batch * 16 * g.c.in.v_dim * sizeof(float), &g.c.o[i])))
                    break;
            }
            uint32_t ids[64];
            if (!err)
                err = prefill(&g.c, ids, gc->batch, gc->len, 8192);
            if (!err)
                err = time_steps(&g, ids, gc->batch, mode == 1, steps, out[mode], rows, &med[mode]);
            for (uint32_t i = 0; i < gc->n; i++) {
                dcp_rank *r = dcp_engine_rank(g.c.e, i);
                dcp_graph_destroy(&g.graph[i]);
                dcp_rank_free(r, g.c.k[i]);
                dcp_rank_free(r, g.c.q[i]);
                dcp_rank_free(r, g.c.o[i]);
            }
            dcp_engine_destroy(&g.c.e);
        }
        if (err) {
            printf("graph: %s: %s\n", dcp_strerror(err), dcp_last_error());
            free(out[0]);
            free(out[1]);
            dcp_deployment_destroy(&dep);
            return unavailable(err) ? 77 : 1;
        }
        const bool same = memcmp(out[0], out[1], rows * sizeof(float)) == 0;
        failures += !same;
        printf("%-6u %6u %8u %12.1f %12.1f %7.2fx  %s\n", gc->n, gc->batch, gc->len, med[0] * 1e6, med[1] * 1e6,
               med[1] > 0 ? med[0] / med[1] : 0.0, same ? "graph == eager" : "FAIL (graph != eager)");
        free(out[0]);
        free(out[1]);
        dcp_deployment_destroy(&dep);
    }
    printf("graph: %s\n", failures || !ran ? "FAIL" : "ok");
    return failures || !ran ? 1 : 0;
}

/* ---- the primary context, held for the whole run -------------------------------- */

/*
 * Every engine retains device 0's primary context and releases it when destroyed; with
 * nobody else holding it, the driver destroys the context at that release and creates
 * it again for the next engine (each of the sweep's cases would pay it). gpu_check
 * retains it once before the first case and releases it after the last. On the test
 * doubles the fake driver counts the contexts it created (fake_cuda_get_stats): more
 * than one fails the run, so a regression shows in CI.
 */
struct context_hold {
    struct dcp_cuda *cu;
    bool retained;
};

static void context_hold_begin(struct context_hold *h, const struct opts *o)
{
    memset(h, 0, sizeof(*h));
    if (o->backend != DCP_BACKEND_CUDA || dcp_cuda_open(NULL, &h->cu))
        return; /* no driver: the steps say so themselves */
    /* DCP_GPU_CHECK_NO_CONTEXT_HOLD=1: the driver stays loaded but the context is not
     * held (a mutant: the doubles' count must then fail the run). */
    const char *no_hold = getenv("DCP_GPU_CHECK_NO_CONTEXT_HOLD");
    if (no_hold && !strcmp(no_hold, "1"))
        return;
    CUcontext ctx = NULL;
    h->retained = h->cu->api.cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS;
}

/* Releases the context; on the doubles, fails a run whose engines made more than one. */
static int context_hold_end(struct context_hold *h, int status)
{
    if (!h->cu)
        return status;
    const fake_cuda_get_stats_fn stats = (fake_cuda_get_stats_fn)(uintptr_t)dlsym(h->cu->dl, "fake_cuda_get_stats");
    if (stats) {
        struct fake_cuda_stats st = {0};
        stats(&st);
        const bool once = st.context_creations == 1;
        printf("primary context: %s; the (fake) driver created it %lu time(s)%s\n",
               h->retained ? "retained once for the run" : "not held", st.context_creations,
               once ? "" : ": FAIL (once per engine)");
        if (!once && status == 0)
            status = 1;
    } else if (h->retained) {
        printf("primary context: retained once for the run\n");
    }
    if (h->retained)
        h->cu->api.cuDevicePrimaryCtxRelease(0);
    dcp_cuda_close(&h->cu);
    return status;
}

int main(int argc, char **argv)
{
    struct opts o = {.backend = DCP_BACKEND_CUDA, .seed = 20261129};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            o.quick = true;
        else if (!strcmp(argv[i], "--breakdown"))
            o.breakdown = true;
        else if (!strcmp(argv[i], "--bench"))
            o.bench = true;
        else if (!strcmp(argv[i], "--graph"))
            o.graph = true;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            o.backend = !strcmp(argv[++i], "host") ? DCP_BACKEND_HOST : DCP_BACKEND_CUDA;
        else if (!strcmp(argv[i], "--ref") && i + 1 < argc)
            o.ref_path = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            o.seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc && o.num_filters < MAX_FILTERS)
            o.filters[o.num_filters++] = argv[++i];
        else {
            fprintf(stderr, "usage: gpu_check [--quick] [--bench [--ref FATBIN] | --breakdown | --graph] [--backend cuda|host]"
                            " [--seed N] [--case SUBSTRING]...\n");
            return 2;
        }
    }
    /* DCP_GPU_CASE (tests/gpu/run.sh): the same as one --case, when no --case is given. */
    const char *env_case = getenv("DCP_GPU_CASE");
    if (o.num_filters == 0 && env_case && *env_case)
        o.filters[o.num_filters++] = env_case;
    rng_state = o.seed | 1;
    struct context_hold hold;
    context_hold_begin(&hold, &o);
    const int status = o.graph ? graph_latency(&o) : o.breakdown ? breakdown(&o) : o.bench ? bench(&o) : sweep(&o);
    return status == 77 ? (context_hold_end(&hold, 0), 77) : context_hold_end(&hold, status);
}
