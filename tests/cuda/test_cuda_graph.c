/*
 * Caller streams and CUDA graphs of the CUDA backend on the test doubles (the
 * fake libcuda captures and replays; fake NCCL defers collectives on capturing
 * streams): a decode step captured once and replayed gives the eager step's
 * results bit for bit over many steps whose lengths grow across page boundaries;
 * a step of another shape is refused; work the caller queues on its stream before
 * and after the step is ordered with it; nothing in the step waits for the
 * device, and two begin_steps in a row do not either. MLA and GQA, virtual ranks
 * (one GPU) and NCCL (a GPU per rank).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "cuda_test_util.h"
#include "dcp/dcp.h"
#include "dcp/tools.h"

struct case_shape {
    enum dcp_attention_kind kind;
    uint32_t q_heads, head_dim;
    enum dcp_comm_scheme comm;
    enum dcp_dtype dtype;
    const char *devices; /* "1": virtual ranks; "2": a GPU per rank, NCCL */
};

static const struct case_shape cases[] = {
    {DCP_ATTN_MLA, 4, 0, DCP_COMM_A2A, DCP_DTYPE_BF16, "1"},
    {DCP_ATTN_MLA, 4, 0, DCP_COMM_AG_RS, DCP_DTYPE_BF16, "2"},
    {DCP_ATTN_GQA, 4, 64, DCP_COMM_AG_RS, DCP_DTYPE_FP16, "1"},
    {DCP_ATTN_GQA, 4, 64, DCP_COMM_A2A, DCP_DTYPE_FP32, "2"},
};

#define TP 2
#define NSEQ 3
#define LAYERS 2

static dcp_deployment *make_deployment(const struct case_shape *c)
{
    struct dcp_config cfg;
    dcp_config_defaults(&cfg);
    cfg.model.name = "graph-test";
    cfg.model.attention = c->kind;
    cfg.model.num_layers = LAYERS;
    cfg.model.num_q_heads = c->q_heads;
    cfg.model.num_kv_heads = 1;
    cfg.model.head_dim = c->head_dim;
    cfg.model.kv_dtype = c->dtype;
    cfg.hardware.gpu = "test";
    cfg.hardware.memory_bytes = 1e9;
    cfg.hardware.hbm_bandwidth = 1e12;
    cfg.hardware.link_bandwidth = 1e11;
    cfg.hardware.gpus_per_node = 8;
    cfg.parallel.tp = TP;
    cfg.parallel.dcp = 2;
    cfg.parallel.comm = c->comm;
    cfg.memory.block_size = 16;
    cfg.memory.reserve_bytes = 0;
    cfg.workload.context_lengths[0] = 128;
    cfg.workload.num_context_lengths = 1;
    cfg.runtime.backend = DCP_BACKEND_CUDA;
    cfg.runtime.cuda.nccl_timeout_s = 20;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_from_config(&cfg, NULL, &dep), DCP_OK);
    return dep;
}

static dcp_engine *make_engine(const dcp_deployment *dep, bool graphs)
{
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.kv_budget_bytes = 4e6;
    p.max_batch = 4;
    p.max_seqs = 4;
    p.max_query_tokens = 64;
    p.max_context = 256;
    p.graphs = graphs;
    dcp_engine *e = NULL;
    const int err = dcp_engine_create(&p, &e);
    if (err)
        fail_msg("engine_create: %s", dcp_last_error());
    return e;
}

/* One engine's buffers and what its step does. */
struct io {
    dcp_engine *e;
    struct dcp_engine_info in;
    void *k[TP], *v[TP], *q[TP], *o[TP], *l[TP];
    float *out[TP], *lse[TP];
    uint32_t tokens;
    bool attend;            /* false: a prefill chunk (append only) */
    enum { EAGER, CAPTURE, REPLAY, ENQUEUE_ONLY, DOWNLOAD_ONLY } mode;
    bool download;
    bool caller_q;          /* the caller wrote the queries: no fill */
    dcp_graph *graph[TP];
};

static void io_alloc(struct io *io, dcp_engine *e)
{
    memset(io, 0, sizeof(*io));
    io->e = e;
    dcp_engine_get_info(e, &io->in);
    const size_t f = sizeof(float), T = 64, H = io->in.q_heads_per_rank, KV = io->in.kv_heads_per_rank;
    for (uint32_t i = 0; i < TP; i++) {
        dcp_rank *r = dcp_engine_rank(e, i);
        assert_int_equal(dcp_rank_alloc(r, T * KV * io->in.qk_dim * f, &io->k[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, T * KV * io->in.v_dim * f, &io->v[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, T * H * io->in.qk_dim * f, &io->q[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, T * H * io->in.v_dim * f, &io->o[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, T * H * f, &io->l[i]), DCP_OK);
        io->out[i] = calloc(T * H * io->in.v_dim, f);
        io->lse[i] = calloc(T * H, f);
    }
}

static void io_free(struct io *io)
{
    for (uint32_t i = 0; i < TP; i++) {
        dcp_rank *r = dcp_engine_rank(io->e, i);
        dcp_graph_destroy(&io->graph[i]);
        void *bufs[] = {io->k[i], io->v[i], io->q[i], io->o[i], io->l[i]};
        for (size_t b = 0; b < 5; b++)
            dcp_rank_free(r, bufs[b]);
        free(io->out[i]);
        free(io->lse[i]);
    }
}

/* The step's device work: per layer, synthetic K/V and Q keyed by the step's
 * token keys (a device buffer begin_step rewrites, so a replay gets new inputs),
 * the append and the attention. */
static int enqueue_step(dcp_rank *r, struct io *io)
{
    const uint32_t i = dcp_rank_tp_rank(r);
    const bool mla = io->in.v_dim != io->in.qk_dim;
    uint32_t q0, kv0;
    dcp_rank_head_offsets(r, &q0, &kv0);
    int err = DCP_OK;
    for (uint32_t layer = 0; layer < LAYERS && !err; layer++) {
        struct dcp_synth_desc d = {.seed = 11 + layer, .row_keys = dcp_rank_step_token_keys(r), .rows = io->tokens,
                                   .heads = io->in.kv_heads_per_rank, .dim = io->in.qk_dim, .head_offset = kv0,
                                   .amplitude = 1.0f};
        err = dcp_rank_fill_synthetic(r, io->k[i], &d);
        if (!err && !mla) {
            d.seed += 500;
            d.dim = io->in.v_dim;
            err = dcp_rank_fill_synthetic(r, io->v[i], &d);
        }
        if (!err)
            err = dcp_rank_append_kv(r, layer, io->k[i], mla ? NULL : io->v[i]);
        if (err || !io->attend)
            continue;
        d = (struct dcp_synth_desc){.seed = 77 + layer, .row_keys = dcp_rank_step_token_keys(r), .rows = io->tokens,
                                    .heads = io->in.q_heads_per_rank, .dim = io->in.qk_dim, .head_offset = q0,
                                    .amplitude = 1.0f};
        if (!io->caller_q)
            err = dcp_rank_fill_synthetic(r, io->q[i], &d);
        if (!err)
            err = dcp_rank_attention(r, layer, io->q[i], io->o[i], io->l[i]);
    }
    return err;
}

static int step_fn(dcp_rank *r, void *arg)
{
    struct io *io = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    int err = DCP_OK;
    switch (io->mode) {
    case EAGER:
    case ENQUEUE_ONLY:
        err = enqueue_step(r, io);
        break;
    case CAPTURE: /* the capture records the step; the launch runs it */
        err = dcp_rank_capture_begin(r);
        if (!err) {
            const int in_capture = enqueue_step(r, io);
            err = dcp_rank_capture_end(r, &io->graph[i]);
            err = in_capture ? in_capture : err;
        }
        if (!err)
            err = dcp_graph_launch(io->graph[i]);
        break;
    case REPLAY:
        err = dcp_graph_launch(io->graph[i]);
        break;
    case DOWNLOAD_ONLY:
        break;
    }
    if (err || !io->download || !io->attend)
        return err;
    const size_t rows = (size_t)io->tokens * io->in.q_heads_per_rank;
    err = dcp_rank_download(r, io->out[i], io->o[i], rows * io->in.v_dim * sizeof(float));
    return err ? err : dcp_rank_download(r, io->lse[i], io->l[i], rows * sizeof(float));
}

static void run_step(struct io *io, const uint32_t *ids, const uint32_t *q_lens, uint32_t n)
{
    io->tokens = 0;
    for (uint32_t s = 0; s < n; s++)
        io->tokens += q_lens[s];
    const struct dcp_batch b = {.num_seqs = n, .seq_ids = ids, .q_lens = q_lens};
    int err = dcp_engine_begin_step(io->e, &b);
    if (!err)
        err = dcp_engine_run(io->e, step_fn, io);
    if (err)
        fail_msg("step (mode %d, %u tokens): %s: %s", (int)io->mode, io->tokens, dcp_strerror(err), dcp_last_error());
}

/* Sequences of lens[s] tokens, prefilled in eager append-only steps. */
static void prefill(struct io *io, uint32_t *ids, const uint32_t *lens, uint32_t n)
{
    io->mode = EAGER;
    io->attend = false;
    io->download = false;
    for (uint32_t s = 0; s < n; s++) {
        assert_int_equal(dcp_seq_create(io->e, &ids[s]), DCP_OK);
        assert_int_equal(dcp_seq_extend(io->e, ids[s], lens[s]), DCP_OK);
        run_step(io, &ids[s], &lens[s], 1);
    }
}

static bool same_result(const struct io *a, const struct io *b)
{
    const size_t rows = (size_t)a->tokens * a->in.q_heads_per_rank;
    for (uint32_t i = 0; i < TP; i++)
        if (memcmp(a->out[i], b->out[i], rows * a->in.v_dim * sizeof(float)) ||
            memcmp(a->lse[i], b->lse[i], rows * sizeof(float)))
            return false;
    return true;
}

/* Largest difference of outputs and LSEs (infinity for a NaN). */
static double worst_gap(const struct io *a, const struct io *b)
{
    const size_t rows = (size_t)a->tokens * a->in.q_heads_per_rank;
    double worst = 0;
    for (uint32_t i = 0; i < TP; i++) {
        for (size_t j = 0; j < rows * a->in.v_dim; j++)
            worst = fmax(worst, isnan(a->out[i][j] - b->out[i][j]) ? INFINITY : fabs(a->out[i][j] - b->out[i][j]));
        for (size_t j = 0; j < rows; j++)
            worst = fmax(worst, isnan(a->lse[i][j] - b->lse[i][j]) ? INFINITY : fabs(a->lse[i][j] - b->lse[i][j]));
    }
    return worst;
}

static const struct dcp_cuda *driver_of(dcp_engine *e) { return CE(e)->cu; }

/* Creates a non-blocking stream on rank r's device (the caller's stream). */
static CUstream caller_stream(dcp_engine *e, uint32_t i)
{
    const struct dcp_cuda_api *api = &driver_of(e)->api;
    CUstream s = NULL;
    assert_int_equal(api->cuCtxSetCurrent(CR(dcp_engine_rank(e, i))->dev->ctx), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    return s;
}

static void destroy_streams(dcp_engine *e, CUstream *s)
{
    for (uint32_t i = 0; i < TP; i++) {
        assert_int_equal(dcp_rank_set_stream(dcp_engine_rank(e, i), NULL), DCP_OK);
        assert_int_equal(dcp_rank_synchronize(dcp_engine_rank(e, i)), DCP_OK);
        driver_of(e)->api.cuStreamDestroy(s[i]);
    }
}

/* Decode steps of NSEQ sequences, one token each, on the caller's streams: engine
 * g captures the first and replays it for the rest; engine x runs every step
 * eagerly. Bit-for-bit equal, every step, while the lengths cross pages (a
 * block holds 32 tokens here); then a step of another shape is refused. */
static void check_replay(const struct case_shape *c)
{
    fake_env_reset();
    fake_env_set("FAKE_CUDA_DEVICES", c->devices);
    dcp_deployment *dep = make_deployment(c);
    dcp_engine *eg = make_engine(dep, true), *ex = make_engine(dep, true), *en = make_engine(dep, false);
    struct io g, x, n;
    io_alloc(&g, eg);
    io_alloc(&x, ex);
    io_alloc(&n, en);
    assert_contains(g.in.backend_detail, c->devices[0] == '1' ? "virtual ranks" : "NCCL");
    CUstream streams[TP];
    for (uint32_t i = 0; i < TP; i++) {
        streams[i] = caller_stream(eg, i);
        assert_int_equal(dcp_rank_set_stream(dcp_engine_rank(eg, i), streams[i]), DCP_OK);
        assert_ptr_equal(dcp_rank_stream(dcp_engine_rank(eg, i)), streams[i]);
    }
    const uint32_t lens[NSEQ] = {29, 46, 63};
    uint32_t gid[NSEQ], xid[NSEQ], nid[NSEQ], ones[NSEQ] = {1, 1, 1};
    prefill(&g, gid, lens, NSEQ);
    prefill(&x, xid, lens, NSEQ);
    prefill(&n, nid, lens, NSEQ);
    const int steps = test_quick() ? 12 : 40;
    const unsigned long launches0 = fake_calls(driver_of(eg), "cuGraphLaunch");
    float first = 0;
    for (int step = 0; step < steps; step++) {
        for (uint32_t s = 0; s < NSEQ; s++) {
            assert_int_equal(dcp_seq_extend(eg, gid[s], 1), DCP_OK);
            assert_int_equal(dcp_seq_extend(ex, xid[s], 1), DCP_OK);
            assert_int_equal(dcp_seq_extend(en, nid[s], 1), DCP_OK);
        }
        g.attend = x.attend = n.attend = g.download = x.download = n.download = true;
        g.mode = step == 0 ? CAPTURE : REPLAY;
        x.mode = n.mode = EAGER;
        run_step(&g, gid, ones, NSEQ);
        run_step(&x, xid, ones, NSEQ);
        run_step(&n, nid, ones, NSEQ);
        /* Graph mode splits as if every sequence were max_context long (many splits
         * are empty): the same result as the per-step choice, up to rounding. */
        const double off = worst_gap(&g, &n);
        if (!(off <= 1e-5))
            fail_msg("%s on %s device(s), step %d: graph mode differs from the per-step split choice by %g",
                     c->kind == DCP_ATTN_MLA ? "MLA" : "GQA", c->devices, step, off);
        if (!same_result(&g, &x))
            fail_msg("%s dcp 2 on %s device(s): step %d (lengths %u, %u, %u): the replayed graph differs from the "
                     "eager step", c->kind == DCP_ATTN_MLA ? "MLA" : "GQA", c->devices, step, lens[0] + step + 1,
                     lens[1] + step + 1, lens[2] + step + 1);
        for (size_t j = 0; j < (size_t)NSEQ * g.in.q_heads_per_rank * g.in.v_dim; j++)
            assert_true(isfinite(g.out[0][j]));
        if (step == 0)
            first = g.out[0][0];
        else if (step == steps - 1)
            assert_true(g.out[0][0] != first); /* the replays saw the new tokens */
    }
    /* One launch per rank and step (virtual ranks: the group leader launches). */
    const unsigned long per_step = c->devices[0] == '1' ? 1 : TP;
    assert_int_equal(fake_calls(driver_of(eg), "cuGraphLaunch") - launches0, per_step * (unsigned long)steps);
    struct dcp_graph_shape shape;
    dcp_graph_get_shape(g.graph[0], &shape);
    assert_int_equal(shape.num_seqs, NSEQ);
    assert_int_equal(shape.num_tokens, NSEQ);
    assert_int_equal(shape.block_stride, eg->max_blocks_per_seq);

    /* Another shape: fewer sequences, or more tokens. Refused, nothing launched. */
    const unsigned long before = fake_calls(driver_of(eg), "cuGraphLaunch");
    const uint32_t twos[NSEQ] = {2, 2, 2};
    for (int k = 0; k < 2; k++) {
        for (uint32_t s = 0; s < NSEQ; s++)
            assert_int_equal(dcp_seq_extend(eg, gid[s], 2), DCP_OK);
        const struct dcp_batch b = {.num_seqs = k == 0 ? NSEQ - 1 : NSEQ, .seq_ids = gid,
                                    .q_lens = k == 0 ? ones : twos};
        assert_int_equal(dcp_engine_begin_step(eg, &b), DCP_OK);
        for (uint32_t i = 0; i < TP; i++) {
            assert_int_equal(dcp_graph_launch(g.graph[i]), DCP_EINVAL);
            assert_contains(dcp_last_error(), k == 0 ? "this step has 2 sequences and 2 query tokens, the graph was "
                                                       "captured for 3 sequences and 3 query tokens"
                                                     : "this step has 3 sequences and 6 query tokens");
        }
        assert_int_equal(dcp_engine_graph_check(eg, &shape), DCP_EINVAL);
    }
    assert_int_equal(fake_calls(driver_of(eg), "cuGraphLaunch"), before);
    print_message("%s %s on %s device(s): %d steps replayed == eager, bit for bit; other shapes refused\n",
                  c->kind == DCP_ATTN_MLA ? "MLA" : "GQA", c->comm == DCP_COMM_A2A ? "a2a" : "ag_rs", c->devices,
                  steps);
    io_free(&g);
    io_free(&x);
    io_free(&n);
    destroy_streams(eg, streams);
    dcp_engine_destroy(&eg);
    dcp_engine_destroy(&ex);
    dcp_engine_destroy(&en);
    dcp_deployment_destroy(&dep);
}

static void test_replay_equals_eager(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_replay(&cases[i]);
    fake_env_reset();
}

/* What capture refuses: an engine without params.graphs, profiling, a second
 * begin, begin_step while capturing; and the host backend has no streams. */
/* io's buffers on e, one sequence of 20 tokens prefilled and extended by one, and the
 * step over that token begun (*b): where a capture starts from. */
static void one_decode_step(struct io *io, dcp_engine *e, uint32_t *id, struct dcp_batch *b)
{
    static const uint32_t len = 20, one = 1;
    io_alloc(io, e);
    prefill(io, id, &len, 1);
    assert_int_equal(dcp_seq_extend(e, *id, 1), DCP_OK);
    *b = (struct dcp_batch){.num_seqs = 1, .seq_ids = id, .q_lens = &one};
    assert_int_equal(dcp_engine_begin_step(e, b), DCP_OK);
}

static void test_capture_refusals(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    fake_env_reset();
    dcp_deployment *dep = make_deployment(&cases[3]);
    fake_env_set("FAKE_CUDA_DEVICES", "2");
    dcp_engine *e = make_engine(dep, false);
    struct io io;
    uint32_t ids[1];
    struct dcp_batch b;
    one_decode_step(&io, e, ids, &b);
    assert_int_equal(dcp_rank_capture_begin(dcp_engine_rank(e, 0)), DCP_ENOTSUP);
    assert_contains(dcp_last_error(), "params.graphs = true");
    struct dcp_graph_shape shape;
    assert_int_equal(dcp_engine_graph_shape(e, &shape), DCP_ENOTSUP);
    dcp_graph *none = NULL;
    assert_int_equal(dcp_rank_capture_end(dcp_engine_rank(e, 0), &none), DCP_EINVAL);
    io_free(&io);
    dcp_engine_destroy(&e);

    e = make_engine(dep, true);
    one_decode_step(&io, e, ids, &b);
    dcp_rank *r0 = dcp_engine_rank(e, 0);
    assert_int_equal(dcp_rank_capture_begin(r0), DCP_OK);
    assert_int_equal(dcp_rank_capture_begin(r0), DCP_EINVAL);
    assert_int_equal(dcp_engine_begin_step(e, &b), DCP_EINVAL);
    assert_contains(dcp_last_error(), "capturing a graph");
    /* Host copies are refused, by name, instead of being recorded into the graph
     * (an upload through a staging half that later uploads overwrite) or failing it. */
    float host[4] = {1, 2, 3, 4};
    assert_int_equal(dcp_rank_upload(r0, io.q[0], host, sizeof(host)), DCP_EINVAL);
    assert_contains(dcp_last_error(), "rank_upload");
    assert_contains(dcp_last_error(), "capturing a graph");
    assert_int_equal(dcp_rank_download(r0, host, io.q[0], sizeof(host)), DCP_EINVAL);
    assert_contains(dcp_last_error(), "rank_download");
    assert_int_equal(dcp_rank_set_stream(r0, NULL), DCP_OK); /* already its own: nothing to do */
    dcp_graph *g = NULL;
    assert_int_equal(dcp_rank_capture_end(r0, &g), DCP_OK); /* an empty graph */
    assert_non_null(g);
    dcp_graph_destroy(&g);
    assert_null(g);
    assert_int_equal(dcp_engine_begin_step(e, &b), DCP_OK);
    assert_int_equal(dcp_rank_upload(r0, io.q[0], host, sizeof(host)), DCP_OK); /* after the capture */
    io_free(&io);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
    fake_env_reset();
}

/* A capture_begin that fails after the group's leader began capturing (here the step
 * was aborted, so the group's barrier fails) leaves no capture open: the leader's stream
 * stayed capturing, no capture_end could close it (the rank was not capturing for the
 * engine), every later capture was refused and eager work was recorded instead of run.
 * Virtual ranks, where the leader captures for its group. */
static void test_failed_capture_closes(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    fake_env_reset();
    fake_env_set("FAKE_CUDA_DEVICES", "1");
    dcp_deployment *dep = make_deployment(&cases[0]);
    dcp_engine *e = make_engine(dep, true);
    struct io io;
    uint32_t ids[1];
    struct dcp_batch b;
    one_decode_step(&io, e, ids, &b);
    dcp_engine_abort(e);
    assert_int_equal(dcp_rank_capture_begin(dcp_engine_rank(e, 0)), DCP_EABORTED);
    dcp_graph *none = NULL;
    assert_int_equal(dcp_rank_capture_end(dcp_engine_rank(e, 0), &none), DCP_EINVAL); /* nothing to close */
    /* The next step (it restarts the collectives) captures and runs its graph. */
    io.mode = CAPTURE;
    io.attend = true;
    io.download = true;
    run_step(&io, ids, b.q_lens, 1);
    for (uint32_t i = 0; i < TP; i++)
        assert_non_null(io.graph[i]);
    io_free(&io);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
    fake_env_reset();
}

/* Work the caller queues on its stream before the step (writing the queries) and
 * after it (copying the output away) is ordered with the step: the deferred fake
 * runs neither unless the library queued the step on that stream. */
static void check_caller_stream(const struct case_shape *c)
{
    fake_env_reset();
    fake_env_set("FAKE_CUDA_DEVICES", c->devices);
    dcp_deployment *dep = make_deployment(c);
    dcp_engine *ec = make_engine(dep, false), *er = make_engine(dep, false);
    struct io io, ref;
    io_alloc(&io, ec);
    io_alloc(&ref, er);
    const struct dcp_cuda_api *api = &driver_of(ec)->api;
    const uint32_t lens[NSEQ] = {40, 9, 60};
    uint32_t ids[NSEQ], rid[NSEQ], ones[NSEQ] = {1, 1, 1};
    prefill(&io, ids, lens, NSEQ);
    prefill(&ref, rid, lens, NSEQ);
    CUstream s[TP];
    void *copy[TP];
    const size_t qn = (size_t)NSEQ * io.in.q_heads_per_rank * io.in.qk_dim;
    const size_t on = (size_t)NSEQ * io.in.q_heads_per_rank * io.in.v_dim;
    float *qh = malloc(qn * sizeof(float)), *back = malloc(on * sizeof(float));
    for (size_t j = 0; j < qn; j++)
        qh[j] = 0.125f;
    for (uint32_t i = 0; i < TP; i++) {
        s[i] = caller_stream(ec, i);
        assert_int_equal(dcp_rank_alloc(dcp_engine_rank(ec, i), on * sizeof(float), &copy[i]), DCP_OK);
        assert_int_equal(dcp_rank_set_stream(dcp_engine_rank(ec, i), s[i]), DCP_OK);
        assert_int_equal(dcp_rank_upload(dcp_engine_rank(er, i), ref.q[i], qh, qn * sizeof(float)), DCP_OK);
    }
    for (uint32_t k = 0; k < NSEQ; k++) {
        assert_int_equal(dcp_seq_extend(ec, ids[k], 1), DCP_OK);
        assert_int_equal(dcp_seq_extend(er, rid[k], 1), DCP_OK);
    }
    const struct dcp_batch b = {.num_seqs = NSEQ, .seq_ids = ids, .q_lens = ones};
    const struct dcp_batch rb = {.num_seqs = NSEQ, .seq_ids = rid, .q_lens = ones};
    assert_int_equal(dcp_engine_begin_step(ec, &b), DCP_OK);
    assert_int_equal(dcp_engine_begin_step(er, &rb), DCP_OK);
    for (uint32_t i = 0; i < TP; i++) { /* before the step, on the caller's stream */
        assert_int_equal(api->cuCtxSetCurrent(CR(dcp_engine_rank(ec, i))->dev->ctx), CUDA_SUCCESS);
        assert_int_equal(api->cuMemsetD32Async((CUdeviceptr)(uintptr_t)io.q[i], 0x3e000000u /* 0.125f */, qn, s[i]),
                         CUDA_SUCCESS);
    }
    /* K/V as in enqueue_step; the queries are the caller's (ref: uploaded). */
    io.attend = ref.attend = io.caller_q = ref.caller_q = true;
    io.download = false;
    ref.download = true;
    io.tokens = ref.tokens = NSEQ;
    io.mode = ref.mode = EAGER;
    assert_int_equal(dcp_engine_run(ec, step_fn, &io), DCP_OK);
    assert_int_equal(dcp_engine_run(er, step_fn, &ref), DCP_OK);
    for (uint32_t i = 0; i < TP; i++) { /* after the step, on the caller's stream */
        assert_int_equal(api->cuCtxSetCurrent(CR(dcp_engine_rank(ec, i))->dev->ctx), CUDA_SUCCESS);
        assert_int_equal(api->cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)copy[i], (CUdeviceptr)(uintptr_t)io.o[i],
                                                on * sizeof(float), s[i]), CUDA_SUCCESS);
        assert_int_equal(api->cuStreamSynchronize(s[i]), CUDA_SUCCESS);
        assert_int_equal(api->cuMemcpyDtoH(back, (CUdeviceptr)(uintptr_t)copy[i], on * sizeof(float)), CUDA_SUCCESS);
        for (size_t j = 0; j < on; j++)
            if (!(back[j] == ref.out[i][j]))
                fail_msg("%s on %s device(s), rank %u, output %zu: %g on the caller's stream, %g eager", c->kind ==
                         DCP_ATTN_MLA ? "MLA" : "GQA", c->devices, i, j, back[j], ref.out[i][j]);
        dcp_rank_free(dcp_engine_rank(ec, i), copy[i]);
    }
    free(qh);
    free(back);
    io_free(&io);
    io_free(&ref);
    destroy_streams(ec, s);
    dcp_engine_destroy(&ec);
    dcp_engine_destroy(&er);
    dcp_deployment_destroy(&dep);
}

static void test_caller_stream_ordering(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_caller_stream(&cases[i]);
    fake_env_reset();
}

/* Calls that make the host wait for (or poll) the device. */
static unsigned long host_waits(dcp_engine *e)
{
    static const char *const calls[] = {"cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize",
                                        "cuStreamQuery", "cuEventQuery", "cuMemcpyHtoD", "cuMemcpyDtoH"};
    unsigned long n = 0;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        n += fake_calls(driver_of(e), calls[i]);
    return n;
}

/* begin_step right after a step that has not run, two begin_steps in a row, and
 * whole steps of appends and attentions (with collectives), eager, captured or
 * replayed: no call waits for the device. The results equal an engine that waited
 * after every step, so no begin_step overwrote staged metadata that copies queued
 * before still had to read (the deferred fake had run none of them). */
static void check_no_host_wait(const struct case_shape *c)
{
    fake_env_reset();
    fake_env_set("FAKE_CUDA_DEVICES", c->devices);
    dcp_deployment *dep = make_deployment(c);
    dcp_engine *e = make_engine(dep, true), *er = make_engine(dep, true);
    struct io io, ref;
    io_alloc(&io, e);
    io_alloc(&ref, er);
    const uint32_t lens[NSEQ] = {31, 32, 33};
    uint32_t ids[NSEQ], rid[NSEQ], ones[NSEQ] = {1, 1, 1};
    prefill(&io, ids, lens, NSEQ);
    prefill(&ref, rid, lens, NSEQ);
    for (uint32_t i = 0; i < TP; i++)
        assert_int_equal(dcp_rank_synchronize(dcp_engine_rank(e, i)), DCP_OK);
    const struct dcp_batch b = {.num_seqs = NSEQ, .seq_ids = ids, .q_lens = ones};
    const char *const what[4] = {"an eager step, not waited for", "an eager step right after it",
                                 "two begin_steps and a captured step", "a replayed step"};
    for (int step = 0; step < 4; step++) {
        for (uint32_t k = 0; k < NSEQ; k++) {
            assert_int_equal(dcp_seq_extend(e, ids[k], 1), DCP_OK);
            assert_int_equal(dcp_seq_extend(er, rid[k], 1), DCP_OK);
        }
        const unsigned long w0 = host_waits(e);
        assert_int_equal(dcp_engine_begin_step(e, &b), DCP_OK);
        if (step == 2) /* a begin_step whose step never runs */
            assert_int_equal(dcp_engine_begin_step(e, &b), DCP_OK);
        const unsigned long w1 = host_waits(e);
        io.attend = true;
        io.download = false;
        io.mode = step == 2 ? CAPTURE : step == 3 ? REPLAY : ENQUEUE_ONLY;
        io.tokens = NSEQ;
        assert_int_equal(dcp_engine_run(e, step_fn, &io), DCP_OK);
        const unsigned long w2 = host_waits(e);
        if (w1 != w0 || w2 != w1)
            fail_msg("%s on %s device(s), %s: %lu host wait(s) in begin_step, %lu in the step", c->kind ==
                     DCP_ATTN_MLA ? "MLA" : "GQA", c->devices, what[step], w1 - w0, w2 - w1);
        ref.attend = ref.download = true;
        ref.mode = EAGER;
        run_step(&ref, rid, ones, NSEQ);
        if (step == 0)
            continue; /* the next step follows it unsynchronized */
        /* From the rank threads: a replayed NCCL collective meets its peers when
         * their streams run it, as GPUs progress on their own. */
        io.mode = DOWNLOAD_ONLY;
        io.download = true;
        assert_int_equal(dcp_engine_run(e, step_fn, &io), DCP_OK);
        if (!same_result(&io, &ref))
            fail_msg("%s on %s device(s), %s: differs from the engine that waited", c->kind == DCP_ATTN_MLA ?
                     "MLA" : "GQA", c->devices, what[step]);
    }
    io_free(&io);
    io_free(&ref);
    dcp_engine_destroy(&e);
    dcp_engine_destroy(&er);
    dcp_deployment_destroy(&dep);
}

static void test_no_host_wait_in_step(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_no_host_wait(&cases[i]);
    fake_env_reset();
}

/* The host backend: no streams (NULL is fine), no capture; shapes and checks
 * work (they are the engine's). */
static void test_host_backend(void **state)
{
    (void)state;
    dcp_deployment *cdep = make_deployment(&cases[2]);
    struct dcp_config cfg = *dcp_deployment_config(cdep);
    cfg.runtime.backend = DCP_BACKEND_HOST;
    cfg.runtime.host.memory_bytes = 64e6;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_from_config(&cfg, NULL, &dep), DCP_OK);
    dcp_engine *e = make_engine(dep, true);
    dcp_rank *r = dcp_engine_rank(e, 0);
    assert_int_equal(dcp_rank_set_stream(r, NULL), DCP_OK);
    int dummy;
    assert_int_equal(dcp_rank_set_stream(r, &dummy), DCP_ENOTSUP);
    assert_contains(dcp_last_error(), "host backend has no streams");
    assert_null(dcp_rank_stream(r));
    uint32_t id;
    assert_int_equal(dcp_seq_create(e, &id), DCP_OK);
    assert_int_equal(dcp_seq_extend(e, id, 70), DCP_OK);
    const uint32_t one = 1;
    const struct dcp_batch b = {.num_seqs = 1, .seq_ids = &id, .q_lens = &one};
    struct dcp_graph_shape shape;
    assert_int_equal(dcp_engine_graph_shape(e, &shape), DCP_EINVAL); /* no step yet */
    assert_int_equal(dcp_engine_begin_step(e, &b), DCP_OK);
    assert_int_equal(dcp_engine_graph_shape(e, &shape), DCP_OK);
    assert_int_equal(shape.num_seqs, 1);
    assert_int_equal(shape.num_tokens, 1);
    assert_int_equal(shape.block_stride, e->max_blocks_per_seq);
    assert_int_equal(dcp_rank_capture_begin(r), DCP_ENOTSUP);
    assert_int_equal(dcp_engine_graph_check(e, &shape), DCP_OK);
    assert_int_equal(dcp_seq_extend(e, id, 100), DCP_OK); /* longer: the same shape */
    assert_int_equal(dcp_engine_begin_step(e, &b), DCP_OK);
    assert_int_equal(dcp_engine_graph_check(e, &shape), DCP_OK);
    const uint32_t two = 2;
    const struct dcp_batch b2 = {.num_seqs = 1, .seq_ids = &id, .q_lens = &two};
    assert_int_equal(dcp_engine_begin_step(e, &b2), DCP_OK);
    assert_int_equal(dcp_engine_graph_check(e, &shape), DCP_EINVAL);
    assert_contains(dcp_last_error(), "this step has 1 sequences and 2 query tokens");
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
    dcp_deployment_destroy(&cdep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_equals_eager),
        cmocka_unit_test(test_capture_refusals),
        cmocka_unit_test(test_failed_capture_closes),
        cmocka_unit_test(test_caller_stream_ordering),
        cmocka_unit_test(test_no_host_wait_in_step),
        cmocka_unit_test(test_host_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
