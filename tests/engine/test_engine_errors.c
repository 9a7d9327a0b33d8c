/* Engine errors: sizes derived from input, bad budgets, writes into a fork's shared
 * prefix, stale sequence ids, argument errors that must not poison the engine, a
 * failed pthread_create, the host barrier's timeout and dcp_engine_abort(), and
 * dcp_last_error() messages and clearing. Host backend (or DCP_TEST_BACKEND). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dcp/plan.h"
#include "dcp/tools.h"
#include "dcp_kernels/convert.h"
#include "dcp/serve.h"
#include "engine_fixture.h"
#include "test_util.h"

/* ---- pthread_create, interposed: the test can make the n-th call fail ------------------ */

static atomic_int create_calls;       /* calls since armed */
static atomic_int create_fail_at;     /* fail the call with this 1-based index; 0 = never */

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    static create_fn real;
    if (!real)
        real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    const int n = atomic_fetch_add(&create_calls, 1) + 1;
    if (n == atomic_load(&create_fail_at))
        return EAGAIN;
    return real(thread, attr, fn, arg);
}

/* ---- a small engine and one step's rank buffers ------------------------------------- */

/* The default fixture shape, with dims the selected backend's kernels have. */
static struct fixture_shape default_shape(void)
{
    struct fixture_shape s = fixture_default_shape();
    fixture_adapt_to_backend(&s);
    return s;
}

#define MAX_T 4

struct rig {
    dcp_deployment *dep;
    dcp_engine *e;
    struct dcp_engine_info info;
    void *q[8], *k[8], *out[8]; /* per local rank, backend memory */
};

static void rig_buffers(struct rig *g)
{
    dcp_engine_get_info(g->e, &g->info);
    const size_t f = sizeof(float);
    for (uint32_t i = 0; i < g->info.num_local_ranks; i++) {
        dcp_rank *r = dcp_engine_rank(g->e, i);
        assert_int_equal(dcp_rank_alloc(r, MAX_T * g->info.q_heads_per_rank * g->info.qk_dim * f, &g->q[i]), 0);
        assert_int_equal(dcp_rank_alloc(r, MAX_T * g->info.kv_heads_per_rank * g->info.qk_dim * f, &g->k[i]), 0);
        assert_int_equal(dcp_rank_alloc(r, MAX_T * g->info.q_heads_per_rank * g->info.v_dim * f, &g->out[i]), 0);
    }
}

/* MLA (default fixture shape): tp 2, dcp 2, 8 tokens per block. */
static void rig_create(struct rig *g, const struct fixture_shape *s)
{
    memset(g, 0, sizeof(*g));
    g->dep = fixture_deployment(s);
    g->e = fixture_engine(g->dep, 0, 8, 2, MAX_T, 64);
    rig_buffers(g);
}

static void rig_destroy(struct rig *g)
{
    for (uint32_t i = 0; i < g->info.num_local_ranks; i++) {
        dcp_rank *r = dcp_engine_rank(g->e, i);
        dcp_rank_free(r, g->q[i]);
        dcp_rank_free(r, g->k[i]);
        dcp_rank_free(r, g->out[i]);
    }
    dcp_engine_destroy(&g->e);
    dcp_deployment_destroy(&g->dep);
}

struct step_job {
    struct rig *g;
    uint64_t seed;      /* K/V and Q values: seeded by token key */
    bool attend;
    uint32_t layer[8];  /* per rank: the layer it passes */
    atomic_int calls;   /* rank functions that ran */
};

static int step_fn(dcp_rank *r, void *arg)
{
    struct step_job *j = arg;
    atomic_fetch_add(&j->calls, 1);
    const uint32_t i = dcp_rank_tp_rank(r);
    const struct dcp_engine_info *in = &j->g->info;
    uint32_t q0, kv0;
    dcp_rank_head_offsets(r, &q0, &kv0);
    struct dcp_synth_desc d = {
        .seed = j->seed, .row_keys = dcp_rank_step_token_keys(r), .rows = 1, .heads = in->kv_heads_per_rank,
        .dim = in->qk_dim, .head_offset = kv0, .amplitude = 1.0f,
    };
    /* Rows past the step's T are filled too (their keys are stale): the buffers hold MAX_T. */
    d.rows = MAX_T;
    int err = dcp_rank_fill_synthetic(r, j->g->k[i], &d);
    if (!err)
        err = dcp_rank_append_kv(r, j->layer[i], j->g->k[i], NULL);
    if (err || !j->attend)
        return err;
    d.seed = j->seed + 1;
    d.heads = in->q_heads_per_rank;
    d.head_offset = q0;
    err = dcp_rank_fill_synthetic(r, j->g->q[i], &d);
    return err ? err : dcp_rank_attention(r, j->layer[i], j->g->q[i], j->g->out[i], NULL);
}

static int begin(dcp_engine *e, uint32_t seq, uint32_t q_len)
{
    const struct dcp_batch b = {.num_seqs = 1, .seq_ids = &seq, .q_lens = &q_len};
    return dcp_engine_begin_step(e, &b);
}

/* A sequence of 3 tokens and a step over its last q_len. */
static uint32_t three_tokens(struct rig *g, uint32_t q_len)
{
    uint32_t a;
    assert_int_equal(dcp_seq_create(g->e, &a), DCP_OK);
    assert_int_equal(dcp_seq_extend(g->e, a, 3), DCP_OK);
    assert_int_equal(begin(g->e, a, q_len), DCP_OK);
    return a;
}

/* Rank 0's output of the last step (q_len tokens). */
static void download_out(struct rig *g, uint32_t q_len, float *host)
{
    dcp_rank *r = dcp_engine_rank(g->e, 0);
    const size_t bytes = (size_t)q_len * g->info.q_heads_per_rank * g->info.v_dim * sizeof(float);
    assert_int_equal(dcp_rank_download(r, host, g->out[0], bytes), DCP_OK);
}

static void rig_with_timeout(struct rig *g, double timeout_s);

/* ---- sizes derived from input -------------------------------------------------------- */

static int create_with(const dcp_deployment *dep, void (*edit)(struct dcp_engine_params *p, uint64_t v),
                       uint64_t v, dcp_engine **e)
{
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.kv_budget_bytes = 1 << 20;
    edit(&p, v);
    *e = NULL;
    return dcp_engine_create(&p, e);
}

static void set_max_context(struct dcp_engine_params *p, uint64_t v) { p->max_context = v; }
static void set_max_seqs(struct dcp_engine_params *p, uint64_t v) { p->max_seqs = (uint32_t)v; }
static void set_max_step_tokens(struct dcp_engine_params *p, uint64_t v) { p->max_step_tokens = (uint32_t)v; }
static void set_max_query_tokens(struct dcp_engine_params *p, uint64_t v) { p->max_query_tokens = (uint32_t)v; }
static void set_act_dtype(struct dcp_engine_params *p, uint64_t v) { p->act_dtype = (enum dcp_dtype)v; }
static void set_num_layers(struct dcp_engine_params *p, uint64_t v) { p->num_layers = (uint32_t)v; }

static void expect_refused(const dcp_deployment *dep, void (*edit)(struct dcp_engine_params *p, uint64_t v),
                           uint64_t v, const char *needle)
{
    dcp_engine *e = NULL;
    const int err = create_with(dep, edit, v, &e);
    if (err != DCP_EINVAL || !strstr(dcp_last_error(), needle))
        fail_msg("value %llu: expected DCP_EINVAL mentioning '%s', got %d (%s)", (unsigned long long)v, needle, err,
                 dcp_last_error());
    assert_null(e);
}

/* max_context near UINT64_MAX made ceil-division wrap: the block tables got 0
 * bytes and begin_step wrote past them. Absurd sizes are refused up front. */
static void test_absurd_sizes(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    expect_refused(dep, set_max_context, UINT64_MAX, "max_context");
    expect_refused(dep, set_max_context, UINT64_MAX - 5, "max_context");
    expect_refused(dep, set_max_context, (uint64_t)INT32_MAX + 1, "max_context");
    expect_refused(dep, set_max_seqs, UINT32_MAX, "max_seqs");
    expect_refused(dep, set_max_step_tokens, UINT32_MAX, "max_step_tokens");
    expect_refused(dep, set_max_query_tokens, UINT32_MAX, "max_query_tokens");
    /* More layers than the model has: the KV arena would hold layers no model runs. */
    const uint32_t layers = dcp_deployment_config(dep)->model.num_layers;
    expect_refused(dep, set_num_layers, layers + 1, "num_layers");
    dcp_engine *all = NULL;
    assert_int_equal(create_with(dep, set_num_layers, layers, &all), DCP_OK);
    dcp_engine_destroy(&all);

    /* The largest accepted max_context works: a sequence can grow to it block by block
     * (here limited by the 8 blocks of the budget) and a step over it is in bounds. */
    dcp_engine *e = NULL;
    assert_int_equal(create_with(dep, set_max_context, INT32_MAX, &e), DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    assert_int_equal(in.max_context, INT32_MAX);
    uint32_t a;
    assert_int_equal(dcp_seq_create(e, &a), DCP_OK);
    const uint64_t fill = in.num_blocks * in.tokens_per_block;
    assert_int_equal(dcp_seq_extend(e, a, (uint32_t)fill), DCP_OK);
    assert_int_equal(dcp_seq_extend(e, a, 1), DCP_ENOSPC);
    assert_int_equal(begin(e, a, 1), DCP_OK);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* A model whose page size overflows 64 bits when multiplied out (2^30 KV heads per
 * rank x 1024 tokens x 1024 dims x 4 bytes x 2 x 2^20 layers = 2^73, which wrapped to
 * 0 bytes) is refused, not wrapped. */
static void test_page_overflow(void **state)
{
    (void)state;
    struct fixture_shape s = fixture_default_shape();
    s.kind = DCP_ATTN_MHA;
    s.q_heads = 1u << 31;
    s.kv_heads = 1u << 31;
    s.head_dim = 1024;
    s.block_size = 1024;
    s.layers = 1u << 20;
    s.tp = 2;
    s.dcp = 1;
    /* The schema's upper bounds refuse such a model before any size is derived. */
    struct dcp_config cfg;
    fixture_config(&s, &cfg);
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_from_config(&cfg, NULL, &dep), DCP_ECONFIG);
    assert_null(dep);
    /* The largest model the schema allows: the engine still derives every size safely. */
    s.q_heads = 65536;
    s.kv_heads = 65536;
    s.layers = 4096;
    dep = fixture_deployment(&s);
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.kv_budget_bytes = 1e15;
    dcp_engine *e = NULL;
    assert_int_not_equal(dcp_engine_create(&p, &e), DCP_OK);
    assert_null(e);
    dcp_deployment_destroy(&dep);
}

static void test_kv_budget_validated(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    const double bad[] = {NAN, -1.0, -INFINITY, INFINITY, 1e30};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct dcp_engine_params p;
        dcp_engine_default_params(&p);
        p.deployment = dep;
        p.kv_budget_bytes = bad[i];
        dcp_engine *e = NULL;
        const int err = dcp_engine_create(&p, &e);
        if (err != DCP_EINVAL || !strstr(dcp_last_error(), "kv_budget_bytes"))
            fail_msg("kv_budget_bytes=%g: expected DCP_EINVAL naming kv_budget_bytes, got %d (%s)", bad[i], err,
                     dcp_last_error());
        assert_null(e);
    }
    dcp_deployment_destroy(&dep);
}

/* W_UV is given exactly when the deployment merges after the value up-projection;
 * a mismatch, or a layer without weights, is refused naming what is wrong. */
static void test_w_uv_matches_deployment(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    dcp_deployment *plain = fixture_deployment(&s);
    s.merge_after_uv = true;
    s.v_head_dim = 8;
    dcp_deployment *uv = fixture_deployment(&s);
    const struct dcp_config *cfg = dcp_deployment_config(uv);
    const size_t per_layer = (size_t)cfg->model.num_q_heads * cfg->model.kv_lora_rank * cfg->model.v_head_dim;
    float *w = calloc(per_layer * cfg->model.num_layers, sizeof(float));
    assert_non_null(w);
    const float *layers[8] = {0};
    assert_true(cfg->model.num_layers <= 8);
    for (uint32_t l = 0; l < cfg->model.num_layers; l++)
        layers[l] = w + l * per_layer;
    struct {
        const dcp_deployment *dep;
        const float *const *w_uv;
        const char *want;
    } cases[] = {
        {uv, NULL, "dcp_engine_params.w_uv is NULL"},
        {plain, layers, "does not set parallel.merge_after_uv"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dcp_engine_params p;
        dcp_engine_default_params(&p);
        p.deployment = cases[i].dep;
        p.kv_budget_bytes = 1 << 20;
        p.max_context = 64;
        p.w_uv = cases[i].w_uv;
        dcp_engine *e = NULL;
        const int err = dcp_engine_create(&p, &e);
        if (err != DCP_EINVAL || !strstr(dcp_last_error(), cases[i].want))
            fail_msg("case %zu: expected DCP_EINVAL with \"%s\", got %d (%s)", i, cases[i].want, err, dcp_last_error());
        assert_null(e);
    }
    /* One layer missing. */
    const float *missing = layers[cfg->model.num_layers - 1];
    layers[cfg->model.num_layers - 1] = NULL;
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = uv;
    p.kv_budget_bytes = 1 << 20;
    p.max_context = 64;
    p.w_uv = layers;
    dcp_engine *e = NULL;
    assert_int_equal(dcp_engine_create(&p, &e), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "is NULL: merge_after_uv needs the W_UV of each"));
    /* All layers: created, and the info says what is in use. */
    layers[cfg->model.num_layers - 1] = missing;
    /* The projection stores in the destination's dtype: bf16 activations and a bf16
     * wire with it are created (tests/engine/test_engine_dcp.c runs them). */
    p.act_dtype = DCP_DTYPE_BF16;
    assert_int_equal(dcp_engine_create(&p, &e), DCP_OK);
    dcp_engine_destroy(&e);
    p.act_dtype = DCP_DTYPE_FP32;
    s.comm_dtype = DCP_DTYPE_BF16;
    assert_true(s.dcp > 1);
    dcp_deployment *uv_bf16 = fixture_deployment(&s);
    p.deployment = uv_bf16;
    assert_int_equal(dcp_engine_create(&p, &e), DCP_OK);
    struct dcp_engine_info bf;
    dcp_engine_get_info(e, &bf);
    assert_true(bf.merge_after_uv);
    assert_int_equal(bf.comm_dtype, DCP_DTYPE_BF16);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&uv_bf16);
    p.deployment = uv;
    assert_int_equal(dcp_engine_create(&p, &e), DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    assert_true(in.merge_after_uv);
    assert_int_equal(in.out_dim, 8);
    assert_int_equal(in.v_dim, cfg->model.kv_lora_rank);
    dcp_engine_destroy(&e);
    free(w);
    dcp_deployment_destroy(&uv);
    dcp_deployment_destroy(&plain);
}

/* dcp_rank_fill_synthetic() writes desc->dtype elements: each the generator's value
 * rounded once (dcp_dtype_round), bit for bit on every backend; fp8 and unknown
 * dtypes are refused without writing. */
static void test_fill_synthetic_dtypes(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    const struct fixture_limits lim = {.dcp = 1, .num_blocks = 8, .max_batch = 2, .max_query_tokens = 4,
                                       .max_context = 64};
    dcp_engine *e = fixture_engine_with(dep, &lim);
    dcp_rank *r = dcp_engine_rank(e, 0);
    enum { ROWS = 3, HEADS = 2, DIM = 5, N = ROWS * HEADS * DIM };
    void *dst = NULL;
    assert_int_equal(dcp_rank_alloc(r, N * sizeof(float), &dst), DCP_OK);
    const enum dcp_dtype dts[] = {DCP_DTYPE_FP32, DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (size_t k = 0; k < 3; k++) {
        const struct dcp_synth_desc d = {.seed = 9, .key_base = 40, .rows = ROWS, .heads = HEADS, .dim = DIM,
                                         .head_offset = 3, .amplitude = 0.75f, .dtype = dts[k]};
        unsigned char raw[N * sizeof(float)];
        memset(raw, 0, sizeof(raw));
        assert_int_equal(dcp_rank_upload(r, dst, raw, sizeof(raw)), DCP_OK);
        assert_int_equal(dcp_rank_fill_synthetic(r, dst, &d), DCP_OK);
        assert_int_equal(dcp_rank_download(r, raw, dst, sizeof(raw)), DCP_OK);
        for (uint32_t i = 0; i < N; i++) {
            const uint32_t row = i / (HEADS * DIM), h = i / DIM % HEADS, j = i % DIM;
            const float want = dcp_dtype_round(dts[k], 0.75f * dcp_synth_value(9, 40 + row, 3 + h, j), 1.0f);
            const float got = dcpk_load_as_f32(raw, i, (uint32_t)dts[k]);
            if (memcmp(&want, &got, sizeof(float)))
                fail_msg("%s element %u: %a, expected %a", dcp_dtype_name(dts[k]), i, got, want);
        }
        /* Nothing past the N elements of that dtype was written. */
        const size_t used = (size_t)N * dcpk_dtype_size((uint32_t)dts[k]);
        for (size_t b = used; b < sizeof(raw); b++)
            assert_int_equal(raw[b], 0);
    }
    const enum dcp_dtype bad[] = {DCP_DTYPE_FP8_E4M3, (enum dcp_dtype)7};
    for (size_t k = 0; k < 2; k++) {
        const struct dcp_synth_desc d = {.rows = ROWS, .heads = HEADS, .dim = DIM, .amplitude = 1, .dtype = bad[k]};
        assert_int_equal(dcp_rank_fill_synthetic(r, dst, &d), DCP_EINVAL);
        assert_non_null(strstr(dcp_last_error(), "fill_synthetic: dtype="));
    }
    dcp_rank_free(r, dst);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* act_dtype: fp8 (a KV cache format, not an activation one) and unknown values are
 * refused at creation; fp32 (the default), bf16 and fp16 are taken and reported. */
static void test_act_dtype_validated(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    expect_refused(dep, set_act_dtype, DCP_DTYPE_FP8_E4M3, "act_dtype=fp8_e4m3");
    expect_refused(dep, set_act_dtype, 4, "act_dtype");
    expect_refused(dep, set_act_dtype, 1000, "act_dtype");
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    assert_int_equal(p.act_dtype, DCP_DTYPE_FP32);
    const enum dcp_dtype ok[] = {DCP_DTYPE_FP32, DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (size_t i = 0; i < 3; i++) {
        dcp_engine *e = NULL;
        assert_int_equal(create_with(dep, set_act_dtype, ok[i], &e), DCP_OK);
        struct dcp_engine_info in;
        dcp_engine_get_info(e, &in);
        assert_int_equal(in.act_dtype, ok[i]);
        dcp_engine_destroy(&e);
    }
    dcp_deployment_destroy(&dep);
}

/* parallel.comm_dtype auto (the default) puts the activations' own dtype on the wire: an
 * fp32 engine moves fp32 (the default used to round fp32 activations to bf16, so DCP was
 * 1000x less exact than TP and an embedder's fp32 check failed); a bf16 one moves bf16. */
static void test_comm_dtype_auto(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    struct dcp_config cfg;
    fixture_config(&s, &cfg);
    struct dcp_config defaults;
    dcp_config_defaults(&defaults);
    assert_int_equal(defaults.parallel.comm_dtype, DCP_WIRE_AUTO);
    cfg.parallel.comm_dtype = DCP_WIRE_AUTO;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_from_config(&cfg, NULL, &dep), DCP_OK);
    const enum dcp_dtype act[] = {DCP_DTYPE_FP32, DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (size_t i = 0; i < 3; i++) {
        dcp_engine *e = NULL;
        assert_int_equal(create_with(dep, set_act_dtype, act[i], &e), DCP_OK);
        struct dcp_engine_info in;
        dcp_engine_get_info(e, &in);
        assert_int_equal(in.comm_dtype, act[i]);
        dcp_engine_destroy(&e);
    }
    assert_string_equal(dcp_wire_dtype_name(DCP_WIRE_AUTO), "auto");
    assert_int_equal(dcp_wire_dtype_of(DCP_WIRE_AUTO, DCP_PLAN_ACT_DTYPE), DCP_DTYPE_BF16);
    assert_int_equal(dcp_wire_dtype_of(DCP_WIRE_FP16, DCP_DTYPE_FP32), DCP_DTYPE_FP16);
    dcp_deployment_destroy(&dep);
}

static void set_replicate_q(struct dcp_engine_params *p, uint64_t v) { p->replicate_q = v != 0; }

/* parallel.replicate_q changes the layout of q ([dcp][T][H_l][qk] instead of [T][H_l][qk]):
 * a deployment file flipping it made an engine read past the caller's q buffers. The
 * caller opts in through dcp_engine_params.replicate_q; a mismatch either way is refused. */
static void test_replicate_q_opt_in(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    assert_true(s.dcp > 1);
    s.replicate_q = true;
    dcp_deployment *dep = fixture_deployment(&s);
    expect_refused(dep, set_replicate_q, 0, "dcp_engine_params.replicate_q = true if your code passes that layout");
    dcp_engine *e = NULL;
    assert_int_equal(create_with(dep, set_replicate_q, 1, &e), DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    assert_true(in.replicate_q);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
    s.replicate_q = false;
    dep = fixture_deployment(&s);
    expect_refused(dep, set_replicate_q, 1, "the deployment does not set parallel.replicate_q");
    dcp_deployment_destroy(&dep);
}

/* ---- a fork's shared prefix is read-only ------------------------------------------------ */

static void test_fork_prefix_read_only(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    struct rig g;
    rig_create(&g, &s);
    const uint64_t per_block = g.info.tokens_per_block;
    uint32_t parent, child;
    struct step_job job = {.g = &g, .seed = 1};

    /* The parent's first block, written once, then shared by a fork. */
    assert_int_equal(dcp_seq_create(g.e, &parent), DCP_OK);
    for (uint64_t p = 0; p < per_block; p++) {
        assert_int_equal(dcp_seq_extend(g.e, parent, 1), DCP_OK);
        assert_int_equal(begin(g.e, parent, 1), DCP_OK);
        assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);
    }
    assert_int_equal(dcp_seq_fork(g.e, parent, &child), DCP_OK);

    /* The parent's output for its next token. */
    job.attend = true;
    assert_int_equal(dcp_seq_extend(g.e, parent, 1), DCP_OK);
    assert_int_equal(begin(g.e, parent, 1), DCP_OK);
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);
    float before[4096], after[4096];
    download_out(&g, 1, before);

    /* The child re-queries the last shared position together with its new one: that
     * would write the shared page. The step must be refused. */
    assert_int_equal(dcp_seq_extend(g.e, child, 1), DCP_OK);
    const int refused = begin(g.e, child, 2);
    char message[512];
    snprintf(message, sizeof(message), "%s", dcp_last_error());
    struct step_job child_job = {.g = &g, .seed = 99, .attend = false};
    dcp_engine_run(g.e, step_fn, &child_job); /* refused too (no step), unless begin_step let it through */

    /* The parent's output is unchanged. */
    assert_int_equal(begin(g.e, parent, 1), DCP_OK);
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);
    download_out(&g, 1, after);
    const size_t n = (size_t)g.info.q_heads_per_rank * g.info.v_dim;
    for (size_t i = 0; i < n; i++)
        if (before[i] != after[i])
            fail_msg("the parent's output changed at %zu: %g -> %g (the child wrote its shared prefix)", i,
                     before[i], after[i]);
    assert_int_equal(refused, DCP_EINVAL);
    assert_non_null(strstr(message, "shares with a fork"));
    /* Positions after the shared prefix stay writable. */
    assert_int_equal(begin(g.e, child, 1), DCP_OK);
    assert_int_equal(dcp_engine_run(g.e, step_fn, &child_job), DCP_OK);
    rig_destroy(&g);
}

/* ---- stale sequence ids -------------------------------------------------------------- */

static void test_stale_ids(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    dcp_engine *e = fixture_engine(dep, 0, 8, 2, 4, 64);
    uint32_t a, b;
    assert_int_equal(dcp_seq_create(e, &a), DCP_OK);
    assert_int_equal(a, 0); /* a fresh engine hands out 0, 1, ... */
    assert_int_equal(dcp_seq_extend(e, a, 3), DCP_OK);
    assert_int_equal(dcp_seq_release(e, a), DCP_OK);
    assert_int_equal(dcp_seq_create(e, &b), DCP_OK);
    assert_int_not_equal(b, a); /* same slot, new generation */
    assert_int_equal(dcp_seq_extend(e, b, 2), DCP_OK);

    /* Every call refuses the stale handle instead of reaching b. */
    assert_int_equal(dcp_seq_extend(e, a, 5), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "stale"));
    assert_int_equal(dcp_seq_truncate(e, a, 0), DCP_EINVAL);
    assert_int_equal(dcp_seq_release(e, a), DCP_EINVAL);
    uint32_t c;
    assert_int_equal(dcp_seq_fork(e, a, &c), DCP_EINVAL);
    assert_int_equal(dcp_seq_length(e, a), 0);
    assert_int_equal(begin(e, a, 1), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "stale"));
    assert_int_equal(dcp_seq_length(e, b), 2);
    assert_int_equal(begin(e, b, 2), DCP_OK);

    /* Many reuses of one slot never bring a back while its generation is distinct. */
    for (int i = 0; i < 100; i++) {
        assert_int_equal(dcp_seq_release(e, b), DCP_OK);
        assert_int_equal(dcp_seq_create(e, &b), DCP_OK);
        assert_int_not_equal(b, a);
    }
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* ---- argument errors fail that call only ------------------------------------------------- */

static void test_argument_errors_keep_engine(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    struct rig g;
    rig_create(&g, &s);
    const uint32_t a = three_tokens(&g, 1);
    struct step_job job = {.g = &g, .seed = 5, .attend = true};

    /* A bad layer on one rank: its peer is released from the collective. */
    job.layer[1] = 7;
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "layer 7 out of range"));
    job.layer[1] = 0;
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);

    /* A bad layer on every rank. */
    job.layer[0] = job.layer[1] = 2;
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_EINVAL);
    job.layer[0] = job.layer[1] = 0;
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);

    /* No step (a sequence changed since begin_step). */
    assert_int_equal(dcp_seq_extend(g.e, a, 1), DCP_OK);
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "begin_step"));
    assert_int_equal(begin(g.e, a, 1), DCP_OK);
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);
    rig_destroy(&g);
}

/* An engine whose step T exceeds max_query_tokens (append-only step). */
static void test_append_only_step(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    const struct fixture_limits lim = {
        .num_blocks = 8, .max_batch = 2, .max_query_tokens = 1, .max_step_tokens = MAX_T, .max_context = 64,
    };
    struct rig g = {.dep = dep, .e = fixture_engine_with(dep, &lim)};
    rig_buffers(&g);
    const uint32_t a = three_tokens(&g, 3);
    struct step_job job = {.g = &g, .seed = 5, .attend = true};
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "max_query_tokens"));
    job.attend = false;
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);
    job.attend = true;
    assert_int_equal(dcp_seq_extend(g.e, a, 1), DCP_OK);
    assert_int_equal(begin(g.e, a, 1), DCP_OK);
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);
    rig_destroy(&g);
}

/* One failed pthread_create: the call fails, no rank function ran, the engine works. */
static void test_thread_create_failure(void **state)
{
    (void)state;
    struct rig g;
    rig_with_timeout(&g, 2); /* a rank started alone would time out in its collective */
    three_tokens(&g, 1);
    struct step_job job = {.g = &g, .seed = 5, .attend = true};
    atomic_store(&create_calls, 0);
    atomic_store(&create_fail_at, 2);
    const int err = dcp_engine_run(g.e, step_fn, &job);
    atomic_store(&create_fail_at, 0);
    assert_int_equal(err, DCP_ENOMEM);
    assert_non_null(strstr(dcp_last_error(), "pthread_create"));
    assert_int_equal(atomic_load(&job.calls), 0);
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);
    assert_int_equal(atomic_load(&job.calls), 2);
    rig_destroy(&g);
}

/* ---- entries a rank function may not call ------------------------------------------------- */

/* Each entry that changes the engine's steps, sequences or life, called from inside a
 * rank function: a nested dcp_engine_run used to start rank threads over the running
 * ones and crash in the host backend's dispatch (issue 20). */
enum {
    REENTER_RUN, REENTER_BEGIN_STEP, REENTER_CREATE, REENTER_DESTROY, REENTER_SEQ_CREATE, REENTER_SEQ_EXTEND,
    REENTER_SEQ_TRUNCATE, REENTER_SEQ_FORK, REENTER_SEQ_RELEASE, REENTER_COUNT
};
static const char *const reenter_names[REENTER_COUNT] = {
    "engine_run", "begin_step", "engine_create", "engine_destroy", "seq_create",
    "seq_extend", "seq_truncate", "seq_fork", "seq_release",
};

struct reenter_job {
    struct step_job step; /* the step's own work, done after the calls */
    uint32_t seq;         /* the step's sequence */
    int result[8][REENTER_COUNT];
    char message[8][REENTER_COUNT][200];
    dcp_engine *created[8];
};

static int reenter_fn(dcp_rank *r, void *arg)
{
    struct reenter_job *j = arg;
    dcp_engine *e = j->step.g->e, *self = e;
    const uint32_t i = dcp_rank_tp_rank(r), q_len = 1;
    const struct dcp_batch b = {.num_seqs = 1, .seq_ids = &j->seq, .q_lens = &q_len};
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = j->step.g->dep;
    p.kv_budget_bytes = 1 << 20;
    uint32_t id = 0;
    for (int c = 0; c < REENTER_COUNT; c++) {
        int err = DCP_OK;
        switch (c) {
        case REENTER_RUN: err = dcp_engine_run(e, step_fn, &j->step); break;
        case REENTER_BEGIN_STEP: err = dcp_engine_begin_step(e, &b); break;
        case REENTER_CREATE: err = dcp_engine_create(&p, &j->created[i]); break;
        case REENTER_DESTROY:
            dcp_engine_destroy(&self);
            err = self == e ? DCP_EINVAL : DCP_OK; /* a void call: refused when the handle is kept */
            break;
        case REENTER_SEQ_CREATE: err = dcp_seq_create(e, &id); break;
        case REENTER_SEQ_EXTEND: err = dcp_seq_extend(e, j->seq, 1); break;
        case REENTER_SEQ_TRUNCATE: err = dcp_seq_truncate(e, j->seq, 1); break;
        case REENTER_SEQ_FORK: err = dcp_seq_fork(e, j->seq, &id); break;
        case REENTER_SEQ_RELEASE: err = dcp_seq_release(e, j->seq); break;
        }
        j->result[i][c] = err;
        snprintf(j->message[i][c], sizeof(j->message[i][c]), "%s", dcp_last_error());
    }
    return step_fn(r, &j->step);
}

/* Every rank's output of the last step (q_len tokens, fp32). */
static void download_all_out(struct rig *g, uint32_t q_len, float *host)
{
    const size_t n = (size_t)q_len * g->info.q_heads_per_rank * g->info.v_dim;
    for (uint32_t i = 0; i < g->info.num_local_ranks; i++)
        assert_int_equal(dcp_rank_download(dcp_engine_rank(g->e, i), host + i * n, g->out[i], n * sizeof(float)),
                         DCP_OK);
}

static void expect_same_out(struct rig *a, struct rig *b, uint32_t q_len)
{
    const size_t n = (size_t)a->info.num_local_ranks * q_len * a->info.q_heads_per_rank * a->info.v_dim;
    float *x = test_calloc(n, sizeof(float)), *y = test_calloc(n, sizeof(float));
    download_all_out(a, q_len, x);
    download_all_out(b, q_len, y);
    assert_memory_equal(x, y, n * sizeof(float));
    test_free(x);
    test_free(y);
}

static void test_rank_function_reentry(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    struct rig g, fresh;
    rig_create(&g, &s);
    rig_create(&fresh, &s);
    struct reenter_job *j = test_calloc(1, sizeof(*j));
    j->step = (struct step_job){.g = &g, .seed = 5, .attend = true};
    j->seq = three_tokens(&g, 3);
    assert_int_equal(dcp_engine_run(g.e, reenter_fn, j), DCP_OK);
    for (uint32_t i = 0; i < g.info.num_local_ranks; i++)
        for (int c = 0; c < REENTER_COUNT; c++)
            if (j->result[i][c] != DCP_EINVAL || !strstr(j->message[i][c], reenter_names[c]) ||
                !strstr(j->message[i][c], "inside a rank function"))
                fail_msg("rank %u, %s from a rank function: expected DCP_EINVAL naming the entry, got %d (\"%s\")",
                         i, reenter_names[c], j->result[i][c], j->message[i][c]);
    for (uint32_t i = 0; i < g.info.num_local_ranks; i++)
        assert_null(j->created[i]);
    assert_int_equal(atomic_load(&j->step.calls), g.info.num_local_ranks); /* the nested run ran nothing */
    assert_int_equal(dcp_seq_length(g.e, j->seq), 3);

    /* The step's results and the next step's equal a fresh engine's. */
    struct step_job fj = {.g = &fresh, .seed = 5, .attend = true};
    const uint32_t fa = three_tokens(&fresh, 3);
    assert_int_equal(dcp_engine_run(fresh.e, step_fn, &fj), DCP_OK);
    expect_same_out(&g, &fresh, 3);
    struct rig *both[2] = {&g, &fresh};
    const uint32_t seqs[2] = {j->seq, fa};
    for (int k = 0; k < 2; k++) {
        struct step_job next = {.g = both[k], .seed = 9, .attend = true};
        assert_int_equal(dcp_seq_extend(both[k]->e, seqs[k], 1), DCP_OK);
        assert_int_equal(begin(both[k]->e, seqs[k], 1), DCP_OK);
        assert_int_equal(dcp_engine_run(both[k]->e, step_fn, &next), DCP_OK);
    }
    expect_same_out(&g, &fresh, 1);
    test_free(j);
    rig_destroy(&fresh);
    rig_destroy(&g);
}

/* The engine's scheduler changes its sequences: refused inside a rank function too. */
struct sched_reenter {
    dcp_sched *s;
    int result[8];
    char message[8][200];
};

static int sched_reenter_fn(dcp_rank *r, void *arg)
{
    struct sched_reenter *j = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    struct dcp_sched_step st;
    j->result[i] = dcp_sched_plan_step(j->s, 0, &st);
    snprintf(j->message[i], sizeof(j->message[i]), "%s", dcp_last_error());
    return DCP_OK;
}

static void test_sched_in_rank_function(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    struct rig g;
    rig_create(&g, &s);
    struct dcp_sched_params sp;
    dcp_sched_default_params(&sp);
    struct sched_reenter j = {0};
    assert_int_equal(dcp_sched_create_for_engine(g.e, &sp, &j.s), DCP_OK);
    const struct dcp_serve_request req = {.prompt_tokens = 3, .output_tokens = 2};
    assert_int_equal(dcp_sched_add(j.s, &req, NULL), DCP_OK);
    assert_int_equal(dcp_engine_run(g.e, sched_reenter_fn, &j), DCP_OK);
    for (uint32_t i = 0; i < g.info.num_local_ranks; i++) {
        assert_int_equal(j.result[i], DCP_EINVAL);
        assert_non_null(strstr(j.message[i], "sched_plan_step"));
    }
    struct dcp_sched_step st;
    assert_int_equal(dcp_sched_plan_step(j.s, 0, &st), DCP_OK); /* between steps: planned */
    assert_int_equal(st.num_entries, 1);
    assert_int_equal(dcp_sched_complete(j.s, 1), DCP_OK);
    dcp_sched_destroy(&j.s);
    rig_destroy(&g);
}

/* ---- ranks driven by the caller's own threads ---------------------------------------------- */

struct own_thread {
    pthread_t t;
    dcp_rank *r;
    struct rig *g;
    uint32_t layer;
    int result;
    double seconds;
    char message[512];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *own_attention(void *p)
{
    struct own_thread *o = p;
    const uint32_t i = dcp_rank_tp_rank(o->r);
    const double t0 = now_s();
    o->result = dcp_rank_attention(o->r, o->layer, o->g->q[i], o->g->out[i], NULL);
    o->seconds = now_s() - t0;
    snprintf(o->message, sizeof(o->message), "%s", dcp_last_error());
    return NULL;
}

/* Joins within limit seconds, else fails the test (the thread is left behind). */
static void join_within(struct own_thread *o, double limit)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)limit;
    if (pthread_timedjoin_np(o->t, NULL, &ts))
        fail_msg("rank %u still blocked after %.0f s", dcp_rank_tp_rank(o->r), limit);
}

static void rig_with_timeout(struct rig *g, double timeout_s)
{
    struct fixture_shape s = default_shape();
    struct dcp_config cfg;
    fixture_config(&s, &cfg);
    cfg.runtime.cuda.nccl_timeout_s = timeout_s;
    memset(g, 0, sizeof(*g));
    assert_int_equal(dcp_deployment_from_config(&cfg, NULL, &g->dep), DCP_OK);
    g->e = fixture_engine(g->dep, 0, 8, 2, MAX_T, 64);
    rig_buffers(g);
}

/* After a failed or aborted step: the next step over sequence a runs; then g is destroyed. */
static void next_step_runs(struct rig *g, uint32_t a)
{
    assert_int_equal(begin(g->e, a, 1), DCP_OK);
    struct step_job job = {.g = g, .seed = 5, .attend = true};
    assert_int_equal(dcp_engine_run(g->e, step_fn, &job), DCP_OK);
    rig_destroy(g);
}

/* Rank 0 of a new rig (comm timeout 600 s) on its own thread, waiting in its first
 * collective for rank 1; returns the step's sequence. */
static uint32_t rank0_waiting(struct rig *g, struct own_thread *o)
{
    rig_with_timeout(g, 600);
    const uint32_t a = three_tokens(g, 1);
    *o = (struct own_thread){.r = dcp_engine_rank(g->e, 0), .g = g, .layer = 0};
    assert_int_equal(pthread_create(&o->t, NULL, own_attention, o), 0);
    return a;
}

/* One rank fails its argument check; the peer gives up after the comm timeout
 * instead of waiting in the host barrier forever. Then the engine works again. */
static void test_barrier_timeout(void **state)
{
    (void)state;
    struct rig g;
    rig_with_timeout(&g, 0.3);
    const uint32_t a = three_tokens(&g, 1);
    struct own_thread o[2] = {{.r = dcp_engine_rank(g.e, 0), .g = &g, .layer = 0},
                              {.r = dcp_engine_rank(g.e, 1), .g = &g, .layer = 9}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&o[i].t, NULL, own_attention, &o[i]), 0);
    for (int i = 0; i < 2; i++)
        join_within(&o[i], 20);
    assert_int_equal(o[1].result, DCP_EINVAL);
    assert_int_equal(o[0].result, DCP_ETIMEOUT);
    assert_non_null(strstr(o[0].message, "waited"));
    assert_true(o[0].seconds >= 0.25);
    next_step_runs(&g, a); /* it restarts the collectives */
}

/* dcp_engine_abort() releases a rank blocked in a collective at once. */
static void test_abort_call(void **state)
{
    (void)state;
    struct rig g;
    struct own_thread o;
    const uint32_t a = rank0_waiting(&g, &o);
    nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
    dcp_engine_abort(g.e);
    join_within(&o, 20);
    assert_int_equal(o.result, DCP_EABORTED);
    assert_true(o.seconds < 10);
    dcp_engine_abort(NULL); /* ignored */
    next_step_runs(&g, a);
}

/* Two threads on one rank (forbidden by engine.h) are detected, not raced: a call on a
 * rank that is inside another call returns DCP_EBUSY at once and does nothing. */
static void test_rank_busy(void **state)
{
    (void)state;
    struct rig g;
    struct own_thread o;
    const uint32_t a = rank0_waiting(&g, &o);
    float host[4];
    int err = DCP_OK;
    for (int i = 0; i < 2000 && (err = dcp_rank_download(o.r, host, g.q[0], sizeof(host))) == DCP_OK; i++)
        nanosleep(&(struct timespec){.tv_nsec = 1000 * 1000}, NULL);
    assert_int_equal(err, DCP_EBUSY);
    assert_non_null(strstr(dcp_last_error(), "rank_download: rank 0 is inside another call"));
    assert_int_equal(dcp_rank_attention(o.r, 0, g.q[0], g.out[0], NULL), DCP_EBUSY);
    dcp_engine_abort(g.e);
    join_within(&o, 20);
    assert_int_equal(o.result, DCP_EABORTED);
    next_step_runs(&g, a);
}

/* One thread driving every rank of a group: rank 0's collective would wait for rank 1,
 * which only this thread calls (it waited for the comm timeout, 120 s by default). The
 * collective refuses at once; the step is aborted and the next one runs. */
static void test_one_thread_for_every_rank(void **state)
{
    (void)state;
    struct rig g;
    rig_with_timeout(&g, 60);
    const uint32_t a = three_tokens(&g, 1);
    struct step_job job = {.g = &g, .seed = 5, .attend = false};
    for (uint32_t i = 0; i < g.info.num_local_ranks; i++)
        assert_int_equal(step_fn(dcp_engine_rank(g.e, i), &job), DCP_OK); /* the appends */
    const double t0 = now_s();
    assert_int_equal(dcp_rank_attention(dcp_engine_rank(g.e, 0), 0, g.q[0], g.out[0], NULL), DCP_EINVAL);
    assert_true(now_s() - t0 < 5);
    assert_non_null(strstr(dcp_last_error(), "which this same thread drives"));
    assert_int_equal(dcp_rank_attention(dcp_engine_rank(g.e, 1), 0, g.q[1], g.out[1], NULL), DCP_EINVAL); /* alike */
    next_step_runs(&g, a);
}

/* A buffer freed twice (or a pointer not from dcp_rank_alloc) is refused with a message;
 * the host backend aborted the process in free(). */
static void test_double_free(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    struct rig g;
    rig_create(&g, &s);
    dcp_rank *r = dcp_engine_rank(g.e, 0);
    void *p = NULL, *q = NULL;
    assert_int_equal(dcp_rank_alloc(r, 256, &p), DCP_OK);
    assert_int_equal(dcp_rank_alloc(r, 256, &q), DCP_OK);
    dcp_rank_free(r, p);
    assert_string_equal(dcp_last_error(), "");
    dcp_rank_free(r, p);
    assert_non_null(strstr(dcp_last_error(), "rank_free"));
    assert_non_null(strstr(dcp_last_error(), "no live buffer of rank 0"));
    dcp_rank_free(dcp_engine_rank(g.e, 1), q); /* another rank's */
    assert_non_null(strstr(dcp_last_error(), "no live buffer of rank 1"));
    dcp_rank_free(r, q);
    assert_string_equal(dcp_last_error(), "");
    three_tokens(&g, 1);
    struct step_job job = {.g = &g, .seed = 5, .attend = true};
    assert_int_equal(dcp_engine_run(g.e, step_fn, &job), DCP_OK);
    rig_destroy(&g);
}

/* ---- dcp_last_error(): a message for every failure, cleared by every success -------------- */

#define EXPECT_MESSAGE(call, code, needle)                                                        \
    do {                                                                                          \
        leave_stale_message();                                                                \
        const int got_ = (call);                                                                  \
        if (got_ != (code) || !strstr(dcp_last_error(), needle))                                  \
            fail_msg("%s: expected %d with a message naming '%s', got %d (\"%s\")", #call, code,  \
                     needle, got_, dcp_last_error());                                             \
    } while (0)

/* Leaves an unrelated message behind, so a call that sets none is caught. */
static void leave_stale_message(void)
{
    dcp_engine_begin_step(NULL, NULL);
    assert_string_not_equal(dcp_last_error(), "");
}

static void test_last_error(void **state)
{
    (void)state;
    struct fixture_shape s = default_shape();
    dcp_deployment *dep = fixture_deployment(&s);
    dcp_engine *e = fixture_engine(dep, 0, 8, 2, 4, 64);
    dcp_rank *r = dcp_engine_rank(e, 0);
    uint32_t id = 0;
    float buf[16] = {0};
    void *p = NULL;
    EXPECT_MESSAGE(dcp_seq_create(NULL, &id), DCP_EINVAL, "seq_create");
    EXPECT_MESSAGE(dcp_seq_create(e, NULL), DCP_EINVAL, "seq_create");
    EXPECT_MESSAGE(dcp_seq_extend(NULL, 0, 1), DCP_EINVAL, "seq_extend");
    EXPECT_MESSAGE(dcp_seq_extend(e, 12345, 1), DCP_EINVAL, "seq_extend");
    EXPECT_MESSAGE(dcp_seq_truncate(NULL, 0, 0), DCP_EINVAL, "seq_truncate");
    EXPECT_MESSAGE(dcp_seq_fork(NULL, 0, &id), DCP_EINVAL, "seq_fork");
    EXPECT_MESSAGE(dcp_seq_fork(e, 0, NULL), DCP_EINVAL, "seq_fork");
    EXPECT_MESSAGE(dcp_seq_release(NULL, 0), DCP_EINVAL, "seq_release");
    EXPECT_MESSAGE(dcp_engine_begin_step(NULL, NULL), DCP_EINVAL, "begin_step");
    EXPECT_MESSAGE(dcp_engine_begin_step(e, NULL), DCP_EINVAL, "begin_step");
    EXPECT_MESSAGE(dcp_engine_run(NULL, step_fn, NULL), DCP_EINVAL, "engine_run");
    EXPECT_MESSAGE(dcp_engine_run(e, NULL, NULL), DCP_EINVAL, "engine_run");
    EXPECT_MESSAGE(dcp_engine_create(NULL, NULL), DCP_EINVAL, "engine_create");
    EXPECT_MESSAGE(dcp_rank_synchronize(NULL), DCP_EINVAL, "synchronize");
    EXPECT_MESSAGE(dcp_rank_append_kv(NULL, 0, buf, NULL), DCP_EINVAL, "append_kv");
    EXPECT_MESSAGE(dcp_rank_append_kv(r, 0, buf, NULL), DCP_EINVAL, "begin_step");
    EXPECT_MESSAGE(dcp_rank_attention(NULL, 0, buf, buf, NULL), DCP_EINVAL, "attention");
    EXPECT_MESSAGE(dcp_rank_alloc(NULL, 16, &p), DCP_EINVAL, "rank_alloc");
    EXPECT_MESSAGE(dcp_rank_alloc(r, 0, &p), DCP_EINVAL, "rank_alloc");
    EXPECT_MESSAGE(dcp_rank_upload(NULL, buf, buf, 4), DCP_EINVAL, "rank_upload");
    EXPECT_MESSAGE(dcp_rank_upload(r, NULL, buf, 4), DCP_EINVAL, "rank_upload");
    EXPECT_MESSAGE(dcp_rank_download(r, buf, NULL, 4), DCP_EINVAL, "rank_download");
    EXPECT_MESSAGE(dcp_rank_copy(r, NULL, buf, 4), DCP_EINVAL, "rank_copy");
    EXPECT_MESSAGE(dcp_rank_fill_synthetic(r, buf, NULL), DCP_EINVAL, "fill_synthetic");
    EXPECT_MESSAGE(dcp_rank_get_profile(r, NULL), DCP_EINVAL, "get_profile");
    leave_stale_message();
    assert_null(dcp_engine_rank(e, 99));
    assert_non_null(strstr(dcp_last_error(), "engine_rank"));
    leave_stale_message();
    assert_int_equal(dcp_seq_length(e, 777), 0);
    assert_non_null(strstr(dcp_last_error(), "seq_length"));

    /* Successes clear an earlier failure's message. */
    leave_stale_message();
    assert_int_equal(dcp_seq_create(e, &id), DCP_OK);
    assert_string_equal(dcp_last_error(), "");
    leave_stale_message();
    assert_int_equal(dcp_seq_extend(e, id, 2), DCP_OK);
    assert_string_equal(dcp_last_error(), "");
    leave_stale_message();
    assert_int_equal(dcp_seq_length(e, id), 2);
    assert_string_equal(dcp_last_error(), "");
    leave_stale_message();
    assert_int_equal(begin(e, id, 1), DCP_OK);
    assert_string_equal(dcp_last_error(), "");
    leave_stale_message();
    assert_int_equal(dcp_rank_upload(r, NULL, NULL, 0), DCP_OK);
    assert_string_equal(dcp_last_error(), "");
    leave_stale_message();
    assert_non_null(dcp_engine_rank(e, 1));
    assert_string_equal(dcp_last_error(), "");
    leave_stale_message();
    dcp_engine *e2 = fixture_engine(dep, 0, 8, 2, 4, 64);
    assert_string_equal(dcp_last_error(), "");
    dcp_engine_destroy(&e2);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* The entries outside the engine (deployments, plans, traces, the scheduler, the
 * diagnostics list, geometry) also name their argument errors and clear an older
 * failure's message when they succeed. */
static void test_last_error_other_entries(void **state)
{
    (void)state;
    static const char yaml[] = "model:\n  name: t\n  attention: mla\n  layers: 1\n  query_heads: 4\n"
                               "  kv_lora_rank: 64\n  rope_dim: 16\n  kv_dtype: bf16\n  parameters: 0\n"
                               "hardware:\n  gpu: cpu\n  memory_gb: 0.01\n  hbm_gbps: 20\n  link_gbps: 10\n"
                               "parallel:\n  tp: 2\n  dcp: 2\n"
                               "memory:\n  reserve_gb: 0\n"
                               "workload:\n  context_lengths: [256]\n"
                               "runtime:\n  backend: host\n";
    dcp_diag *diag = NULL;
    EXPECT_MESSAGE(dcp_diag_create(NULL), DCP_EINVAL, "diag_create");
    leave_stale_message();
    assert_int_equal(dcp_diag_create(&diag), DCP_OK);
    assert_string_equal(dcp_last_error(), "");

    dcp_deployment *dep = NULL;
    EXPECT_MESSAGE(dcp_deployment_load_string("t", yaml, sizeof(yaml) - 1, diag, NULL), DCP_EINVAL,
                   "load_string");
    leave_stale_message();
    const int loaded = dcp_deployment_load_string("t", yaml, sizeof(yaml) - 1, diag, &dep);
    if (loaded)
        dcp_diag_print(diag, stderr);
    assert_int_equal(loaded, DCP_OK);
    assert_string_equal(dcp_last_error(), "");
    leave_stale_message();
    dcp_deployment *dep2 = NULL;
    assert_int_equal(dcp_deployment_from_config(dcp_deployment_config(dep), diag, &dep2), DCP_OK);
    assert_string_equal(dcp_last_error(), "");
    dcp_deployment_destroy(&dep2);

    char *json = NULL;
    EXPECT_MESSAGE(dcp_deployment_to_json(dep, NULL), DCP_EINVAL, "to_json");
    leave_stale_message();
    assert_int_equal(dcp_deployment_to_json(dep, &json), DCP_OK);
    assert_string_equal(dcp_last_error(), "");
    free(json);

    struct dcp_plan plan;
    EXPECT_MESSAGE(dcp_plan_compute(NULL, &plan), DCP_EINVAL, "plan_compute");
    leave_stale_message();
    assert_int_equal(dcp_plan_compute(dep, &plan), DCP_OK);
    assert_string_equal(dcp_last_error(), "");

    struct dcp_rank_geometry g;
    EXPECT_MESSAGE(dcp_rank_geometry_init(NULL, 2, 2, &g), DCP_EINVAL, "geometry");
    leave_stale_message();
    assert_int_equal(dcp_rank_geometry_init(&dcp_deployment_config(dep)->model, 2, 2, &g), DCP_OK);
    assert_string_equal(dcp_last_error(), "");

    static const char lengths[] = "100\n200\n";
    struct dcp_trace *t = NULL;
    const struct dcp_trace_options topts = {0};
    EXPECT_MESSAGE(dcp_trace_parse("t", lengths, sizeof(lengths) - 1, &topts, NULL), DCP_EINVAL, "trace");
    EXPECT_MESSAGE(dcp_trace_load(NULL, &topts, &t), DCP_EINVAL, "trace_load");
    EXPECT_MESSAGE(dcp_trace_write_jsonl(NULL, NULL), DCP_EINVAL, "trace_write_jsonl");
    leave_stale_message();
    assert_int_equal(dcp_trace_parse("t", lengths, sizeof(lengths) - 1, &topts, &t), DCP_OK);
    assert_string_equal(dcp_last_error(), "");
    dcp_trace_destroy(&t);

    EXPECT_MESSAGE(dcp_sched_check(NULL), DCP_EINVAL, "sched_check");
    EXPECT_MESSAGE(dcp_sched_add(NULL, NULL, NULL), DCP_EINVAL, "sched_add");
    EXPECT_MESSAGE(dcp_sched_plan_step(NULL, 0, NULL), DCP_EINVAL, "sched_plan_step");
    dcp_deployment_destroy(&dep);
    dcp_diag_destroy(&diag);
}

int main(void)
{
    const int status = fixture_backend_check();
    if (status)
        return status;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_absurd_sizes),
        cmocka_unit_test(test_page_overflow),
        cmocka_unit_test(test_kv_budget_validated),
        cmocka_unit_test(test_w_uv_matches_deployment),
        cmocka_unit_test(test_act_dtype_validated),
        cmocka_unit_test(test_comm_dtype_auto),
        cmocka_unit_test(test_replicate_q_opt_in),
        cmocka_unit_test(test_fill_synthetic_dtypes),
        cmocka_unit_test(test_fork_prefix_read_only),
        cmocka_unit_test(test_stale_ids),
        cmocka_unit_test(test_argument_errors_keep_engine),
        cmocka_unit_test(test_append_only_step),
        cmocka_unit_test(test_thread_create_failure),
        cmocka_unit_test(test_rank_function_reentry),
        cmocka_unit_test(test_sched_in_rank_function),
        cmocka_unit_test(test_barrier_timeout),
        cmocka_unit_test(test_abort_call),
        cmocka_unit_test(test_rank_busy),
        cmocka_unit_test(test_one_thread_for_every_rank),
        cmocka_unit_test(test_double_free),
        cmocka_unit_test(test_last_error),
        cmocka_unit_test(test_last_error_other_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
