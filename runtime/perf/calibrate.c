/*
 * calibrate.c: measuring the performance model's inputs on the backend a deployment
 * runs on (dcp_calibrate(), include/dcp/perf.h).
 *
 * Collectives: an engine of the deployment's layout, one layer and a small KV pool;
 * every rank runs each collective of the DCP merge (the backend's all-gather,
 * reduce-scatter and all-to-all, as the engine calls them) at sizes from min_bytes to
 * max_bytes per rank, each call followed by a wait for the rank's work; rank 0 keeps
 * the median time, and a least-squares line time = alpha + bytes / beta is fitted per
 * kind. Attention: an engine with dcp 1 (the TP layout's heads on each rank) times
 * one layer's decode attention of a batch at per-rank contexts from 256 tokens up;
 * bytes / time against the deployment's hbm_gbps gives kv_efficiency, the fit's
 * intercept attention_call. The smallest call (one sequence of one token) is the
 * eager launch cost, and where the backend captures CUDA graphs the same call
 * replayed from a graph is the graph's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dcp/perf.h"
#include "engine/engine_internal.h"
#include "util/util.h"

void dcp_calibrate_default_params(struct dcp_calibrate_params *p)
{
    if (!p)
        return;
    *p = (struct dcp_calibrate_params){
        .min_bytes = 4096, .max_bytes = 4u << 20, .repeats = 20, .max_context = 65536, .kv_bytes = 256e6,
    };
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n values (sorted in place). */
static double median(double *v, uint32_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Least squares y = a + b x over n points in relative error (each point weighted by
 * 1 / y^2, so a 4 KiB call counts as much as a 4 MiB one); false with fewer than two
 * distinct x. */
static bool fit_line(const double *x, const double *y, uint32_t n, double *a, double *b)
{
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!(y[i] > 0))
            return false;
        const double w = 1 / (y[i] * y[i]);
        sw += w;
        sx += w * x[i];
        sy += w * y[i];
        sxx += w * x[i] * x[i];
        sxy += w * x[i] * y[i];
    }
    const double d = sw * sxx - sx * sx;
    if (n < 2 || !(d > 0))
        return false;
    *b = (sw * sxy - sx * sy) / d;
    *a = (sy - *b * sx) / sw;
    return true;
}

static int make_engine(const dcp_deployment *dep, const struct dcp_calibrate_params *p, uint32_t dcp,
                       uint32_t max_batch, uint64_t max_context, bool graphs, dcp_engine **out)
{
    struct dcp_engine_params e;
    dcp_engine_default_params(&e);
    e.deployment = dep;
    e.dcp = dcp;
    e.num_layers = 1;
    e.kv_budget_bytes = p->kv_bytes;
    e.max_batch = max_batch;
    e.max_seqs = max_batch;
    e.max_query_tokens = max_batch;
    e.max_context = max_context;
    e.graphs = graphs;
    return dcp_engine_create(&e, out);
}

/* ---- collectives ------------------------------------------------------------------------- */

static const enum dcp_collective engine_kind[3] = {DCP_ALL_GATHER, DCP_REDUCE_SCATTER, DCP_ALL_TO_ALL};
static const enum dcp_plan_comm_kind plan_kind[3] = {DCP_PLAN_COMM_ALL_GATHER, DCP_PLAN_COMM_REDUCE_SCATTER,
                                                     DCP_PLAN_COMM_ALL_TO_ALL};

struct coll_job {
    const struct dcp_calibrate_params *p;
    uint32_t kind;           /* index into engine_kind */
    uint64_t bytes;          /* bytes one rank sends to the others */
    double *times;           /* [repeats], rank 0's */
    int status;
};

static int coll_rank(dcp_rank *rank, void *arg)
{
    struct coll_job *j = arg;
    const struct dcp_engine *e = rank->engine;
    const uint32_t n = e->geo.dcp, peers = n - 1;
    const uint32_t elem = dcp_dtype_size((enum dcp_dtype)e->part_dtype);
    /* Per member: all-gather and all-to-all move a chunk to each peer, the
     * reduce-scatter a chunk of count elements. */
    const uint64_t chunk = DCP_MAX(j->bytes / peers, (uint64_t)elem) / elem * elem;
    void *send = NULL, *recv = NULL;
    int err = dcp_rank_alloc(rank, chunk * n, &send);
    if (!err)
        err = dcp_rank_alloc(rank, chunk * n, &recv);
    const size_t arg_n = engine_kind[j->kind] == DCP_REDUCE_SCATTER ? chunk / elem : chunk;
    for (uint32_t i = 0; !err && i < j->p->repeats + 2; i++) {
        const double t0 = now_seconds();
        err = dcp_rank_collective(rank, engine_kind[j->kind], (uint64_t)(uintptr_t)send, (uint64_t)(uintptr_t)recv,
                                  arg_n);
        if (!err)
            err = dcp_rank_synchronize(rank);
        if (i >= 2 && rank->tp_rank == 0)
            j->times[i - 2] = now_seconds() - t0;
    }
    dcp_rank_free(rank, send);
    dcp_rank_free(rank, recv);
    return err;
}

static int calibrate_collectives(const dcp_deployment *dep, const struct dcp_calibrate_params *p,
                                 struct dcp_calibration *out)
{
    const uint32_t dcp = dcp_deployment_config(dep)->parallel.dcp;
    if (dcp < 2)
        return DCP_OK;
    dcp_engine *eng = NULL;
    int err = make_engine(dep, p, dcp, 1, 1024, false, &eng);
    double *times = err ? NULL : malloc(p->repeats * sizeof(double));
    if (!err && !times)
        err = dcp_error(DCP_ENOMEM, "calibrate: %u times", p->repeats);
    for (uint32_t k = 0; k < 3 && !err; k++) {
        double xs[DCP_CALIBRATION_MAX_SAMPLES], ys[DCP_CALIBRATION_MAX_SAMPLES];
        uint32_t n = 0;
        for (uint64_t b = p->min_bytes; b <= p->max_bytes && !err && out->num_collectives < DCP_CALIBRATION_MAX_SAMPLES;
             b *= 4) {
            struct coll_job j = {.p = p, .kind = k, .bytes = b, .times = times};
            err = dcp_engine_run(eng, coll_rank, &j);
            if (err)
                break;
            const double t = median(times, p->repeats);
            out->collectives[out->num_collectives++] = (struct dcp_calibration_collective){plan_kind[k], dcp, (double)b, t};
            xs[n] = (double)b;
            ys[n++] = t;
        }
        double alpha, slope;
        if (!err && fit_line(xs, ys, n, &alpha, &slope) && slope > 0 &&
            out->fit.num_collective_fits < DCP_PERF_MAX_FITS) {
            struct dcp_perf_model m;
            const enum dcp_perf_link link =
                dcp_perf_model_init(dep, dcp, &out->fit, &m) == DCP_OK ? m.dcp_link : DCP_PERF_LINK_NVLINK;
            out->fit.collective_fits[out->fit.num_collective_fits++] =
                (struct dcp_perf_collective_fit){plan_kind[k], dcp, link, DCP_MAX(alpha, 0.0), 1 / slope};
            out->fit.calibrated |= DCP_PERF_CAL_COLLECTIVES;
        }
    }
    free(times);
    dcp_engine_destroy(&eng);
    return err;
}

/* ---- attention --------------------------------------------------------------------------- */

enum attn_mode { ATTN_SETUP, ATTN_TIME, ATTN_CAPTURE, ATTN_REPLAY, ATTN_TEARDOWN };

/* A rank's query, output and LSE buffers (sized for max_tokens query tokens), and its
 * captured graph: they live across the jobs, since a graph replays with them. */
struct attn_bufs {
    void *q, *out, *lse;
    dcp_graph *graph;
};

struct attn_job {
    const struct dcp_calibrate_params *p;
    enum attn_mode mode;
    uint32_t max_tokens;
    struct attn_bufs *bufs;  /* [local ranks] */
    double *times;           /* [repeats], the first local rank's */
};

static int zero_arena(dcp_rank *rank)
{
    void *arena;
    size_t bytes;
    dcp_rank_kv_arena(rank, &arena, &bytes);
    const size_t chunk = DCP_MIN(bytes, (size_t)16 << 20);
    void *zeros = calloc(1, chunk ? chunk : 1);
    if (!zeros)
        return dcp_error(DCP_ENOMEM, "calibrate: zeros");
    int err = DCP_OK;
    for (size_t off = 0; off < bytes && !err; off += chunk)
        err = dcp_rank_upload(rank, (char *)arena + off, zeros, DCP_MIN(chunk, bytes - off));
    free(zeros);
    return err;
}

static int attn_setup(dcp_rank *rank, const struct attn_job *j, struct attn_bufs *b)
{
    const struct dcp_engine *e = rank->engine;
    const size_t act = dcp_dtype_size((enum dcp_dtype)e->params.act_dtype);
    const size_t q_bytes = (size_t)j->max_tokens * e->geo.gathered_heads * e->geo.qk_dim * act;
    int err = zero_arena(rank);
    if (!err)
        err = dcp_rank_alloc(rank, q_bytes, &b->q);
    if (!err)
        err = dcp_rank_alloc(rank, (size_t)j->max_tokens * e->geo.q_heads_per_rank * e->out_dim * act, &b->out);
    if (!err)
        err = dcp_rank_alloc(rank, (size_t)j->max_tokens * e->geo.q_heads_per_rank * sizeof(float), &b->lse);
    if (!err) {
        void *zeros = calloc(1, q_bytes);
        err = zeros ? dcp_rank_upload(rank, b->q, zeros, q_bytes) : dcp_error(DCP_ENOMEM, "calibrate: queries");
        free(zeros);
    }
    return err;
}

static int attn_rank(dcp_rank *rank, void *arg)
{
    struct attn_job *j = arg;
    struct attn_bufs *b = &j->bufs[rank->local_index];
    int err = DCP_OK;
    switch (j->mode) {
    case ATTN_SETUP:
        return attn_setup(rank, j, b);
    case ATTN_TEARDOWN:
        dcp_graph_destroy(&b->graph);
        dcp_rank_free(rank, b->q);
        dcp_rank_free(rank, b->out);
        dcp_rank_free(rank, b->lse);
        return DCP_OK;
    case ATTN_CAPTURE:
        if ((err = dcp_rank_capture_begin(rank)))
            return err;
        err = dcp_rank_attention(rank, 0, b->q, b->out, b->lse);
        const int cerr = dcp_rank_capture_end(rank, &b->graph);
        return err ? err : cerr;
    case ATTN_TIME:
    case ATTN_REPLAY:
        break;
    }
    for (uint32_t i = 0; !err && i < j->p->repeats + 1; i++) {
        const double t0 = now_seconds();
        err = j->mode == ATTN_REPLAY ? dcp_graph_launch(b->graph) : dcp_rank_attention(rank, 0, b->q, b->out, b->lse);
        if (!err)
            err = dcp_rank_synchronize(rank);
        if (i >= 1 && rank->local_index == 0)
            j->times[i - 1] = now_seconds() - t0;
    }
    return err;
}

/* Sequences of len tokens each, one query token per sequence (its last), as one step. */
static int attention_step(dcp_engine *eng, uint32_t batch, uint64_t len, uint32_t *ids, uint32_t *q_lens)
{
    for (uint32_t i = 0; i < batch; i++) {
        q_lens[i] = 1;
        int err = dcp_seq_create(eng, &ids[i]);
        if (!err)
            err = dcp_seq_extend(eng, ids[i], (uint32_t)len);
        if (err)
            return err;
    }
    const struct dcp_batch b = {.num_seqs = batch, .seq_ids = ids, .q_lens = q_lens};
    return dcp_engine_begin_step(eng, &b);
}

static void release(dcp_engine *eng, const uint32_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] != UINT32_MAX)
            dcp_seq_release(eng, ids[i]);
}

/* Runs job mode j on a step of batch sequences of len tokens; *t the median time. */
static int attention_point(dcp_engine *eng, struct attn_job *j, enum attn_mode mode, uint32_t batch, uint64_t len,
                           double *t)
{
    uint32_t *ids = malloc(batch * sizeof(*ids)), *q_lens = malloc(batch * sizeof(*q_lens));
    int err = ids && q_lens ? DCP_OK : dcp_error(DCP_ENOMEM, "calibrate: batch");
    for (uint32_t i = 0; ids && i < batch; i++)
        ids[i] = UINT32_MAX;
    if (!err)
        err = attention_step(eng, batch, len, ids, q_lens);
    j->mode = mode;
    if (!err)
        err = dcp_engine_run(eng, attn_rank, j);
    if (!err && mode == ATTN_CAPTURE) {
        j->mode = ATTN_REPLAY;
        err = dcp_engine_run(eng, attn_rank, j);
    }
    if (!err && t)
        *t = median(j->times, j->p->repeats);
    if (ids)
        release(eng, ids, batch);
    free(ids);
    free(q_lens);
    return err;
}

static int calibrate_attention(const dcp_deployment *dep, const struct dcp_calibrate_params *p,
                               struct dcp_calibration *out)
{
    /* The TP layout: each rank attends its own heads over whole sequences. */
    enum { MAX_BATCH = 256 };
    dcp_engine *eng = NULL;
    int err = make_engine(dep, p, 1, MAX_BATCH, p->max_context + 1, true, &eng);
    if (err)
        return err;
    struct dcp_engine_info info;
    dcp_engine_get_info(eng, &info);
    snprintf(out->backend, sizeof(out->backend), "%s (%s)", info.backend, info.backend_detail);
    const double tokens = (double)info.num_blocks * info.block_size; /* per rank */
    const double token_bytes = (double)eng->geo.token_layer_bytes;   /* one layer */
    struct attn_job j = {.p = p, .max_tokens = MAX_BATCH};
    j.bufs = calloc(eng->num_ranks, sizeof(*j.bufs));
    j.times = malloc(p->repeats * sizeof(double));
    if (!j.bufs || !j.times)
        err = dcp_error(DCP_ENOMEM, "calibrate: buffers");
    j.mode = ATTN_SETUP;
    if (!err)
        err = dcp_engine_run(eng, attn_rank, &j);
    double xs[DCP_CALIBRATION_MAX_SAMPLES], ys[DCP_CALIBRATION_MAX_SAMPLES];
    uint32_t n = 0;
    /* One batch for every context, as large as the longest allows: the bytes read then
     * grow with the context, which separates the per-byte cost from the per-call one. */
    const uint64_t longest = DCP_MIN(p->max_context, (uint64_t)(tokens * 0.9) - 1);
    const uint32_t batch = (uint32_t)DCP_MAX(1.0, DCP_MIN((double)MAX_BATCH, floor(tokens * 0.9 / (double)(longest + 1))));
    for (uint64_t len = 256; !err && len <= longest && n < DCP_CALIBRATION_MAX_SAMPLES; len *= 4) {
        double t;
        if ((err = attention_point(eng, &j, ATTN_TIME, batch, len, &t)))
            break;
        const double bytes = (double)batch * (double)len * token_bytes;
        out->attention[out->num_attention++] = (struct dcp_calibration_attention){len, batch, bytes, t};
        xs[n] = bytes;
        ys[n++] = t;
    }
    double call, slope;
    if (!err && fit_line(xs, ys, n, &call, &slope) && slope > 0) {
        out->fit.kv_efficiency = DCP_MIN(1.0, 1 / (slope * out->hbm_bandwidth));
        out->fit.attention_call = DCP_MAX(call, 0.0);
        out->fit.calibrated |= DCP_PERF_CAL_KV;
    }
    /* The smallest call: one sequence of one token, eagerly and replayed from a graph. */
    double t;
    if (!err && !(err = attention_point(eng, &j, ATTN_TIME, 1, 1, &t))) {
        out->fit.kernel_gap_eager = t;
        out->fit.calibrated |= DCP_PERF_CAL_LAUNCH;
        err = attention_point(eng, &j, ATTN_CAPTURE, 1, 1, &t);
        if (!err) {
            out->fit.kernel_gap_graph = t;
            out->fit.calibrated |= DCP_PERF_CAL_GRAPH;
        } else if (err == DCP_ENOTSUP) {
            err = DCP_OK; /* this backend captures no graphs */
        }
    }
    if (j.bufs) {
        j.mode = ATTN_TEARDOWN;
        const int terr = dcp_engine_run(eng, attn_rank, &j);
        err = err ? err : terr;
    }
    free(j.bufs);
    free(j.times);
    dcp_engine_destroy(&eng);
    return err;
}

DCP_API int dcp_calibrate(const dcp_deployment *dep, const struct dcp_calibrate_params *p,
                          struct dcp_calibration *out)
{
    dcp_clear_error();
    if (!dep || !p || !out)
        return dcp_error(DCP_EINVAL, "calibrate: NULL argument");
    if (!p->repeats || p->repeats > 100000 || !p->min_bytes || p->min_bytes > p->max_bytes ||
        p->max_bytes > ((uint64_t)1 << 32) || p->max_context < 256 || p->max_context > ((uint64_t)1 << 30) ||
        !(p->kv_bytes > 0 && p->kv_bytes <= 0x1p53))
        return dcp_error(DCP_EINVAL, "calibrate: bad parameters (repeats %u, bytes %llu..%llu, max_context %llu, "
                         "kv_bytes %g)", p->repeats, (unsigned long long)p->min_bytes,
                         (unsigned long long)p->max_bytes, (unsigned long long)p->max_context, p->kv_bytes);
    memset(out, 0, sizeof(*out));
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    snprintf(out->deployment, sizeof(out->deployment), "%s", dcp_deployment_source(dep));
    out->hbm_bandwidth = cfg->hardware.hbm_bandwidth;
    dcp_perf_default_params(&out->fit);
    int err = calibrate_attention(dep, p, out);
    if (!err)
        err = calibrate_collectives(dep, p, out);
    snprintf(out->fit.calibrated_on, sizeof(out->fit.calibrated_on), "%s", out->backend);
    return err;
}
