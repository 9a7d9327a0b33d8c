/*
 * example_graph.c: a GPU engine's decode step on its own CUDA stream, captured
 * once in a CUDA graph and replayed while the sequences grow, with bf16 tensors, as in
 * docs/embedding.md ("Your stream and CUDA graphs"). Built against the public API
 * and run as a test on the test doubles (DCP_CUDA_LIBRARY names the fake
 * libcuda, which captures and replays like the driver).
 *
 * An MLA model (DeepSeek-like latent 512 + RoPE 64, 4 query heads) on tp 2 with
 * dcp 2. The "model" writes its queries and new latents into static buffers inside
 * the graph (here: libdcp's synthetic fill, keyed by the step's token keys, which
 * begin_step rewrites; a real engine's projections do the same from its hidden
 * states). A real engine takes its stream from its framework; here the driver is
 * opened only to make one.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dcp/dcp.h>
#include <dcp/tools.h> /* synthetic inputs without a model: dcp_rank_fill_synthetic, the step token keys */

static const char deployment_yaml[] =
    "model: {name: example-mla, attention: mla, layers: 2, query_heads: 4, kv_dtype: bf16}\n"
    "hardware: {gpu: h200, memory_gb: 1, hbm_gbps: 4800, link_gbps: 450, gpus_per_node: 8}\n"
    "parallel: {tp: 2, dcp: 2, comm: a2a}\n"
    "memory: {reserve_gb: 0, block_size: 16}\n"
    "workload: {context_lengths: [256]}\n"
    "runtime: {backend: cuda, cuda: {comm: virtual}}\n";

/* ---- the caller's streams (a framework gives these) ------------------------------ */

typedef int (*get_proc_fn)(const char *, void **, int, uint64_t, int *);
struct driver {
    void *dl;
    int (*device_get)(int *, int);
    int (*ctx_retain)(void **, int);
    int (*ctx_release)(int);
    int (*ctx_set)(void *);
    int (*stream_create)(void **, unsigned);
    int (*stream_sync)(void *);
    int (*stream_destroy)(void *);
};

static int open_driver(struct driver *d)
{
    const char *path = getenv("DCP_CUDA_LIBRARY");
    d->dl = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW);
    get_proc_fn get = d->dl ? (get_proc_fn)(uintptr_t)dlsym(d->dl, "cuGetProcAddress_v2") : NULL;
    if (!get)
        return DCP_ENODRIVER;
    const struct {
        const char *name;
        int version;
        void **fn;
    } want[] = {
        {"cuDeviceGet", 2000, (void **)&d->device_get},
        {"cuDevicePrimaryCtxRetain", 7000, (void **)&d->ctx_retain},
        {"cuDevicePrimaryCtxRelease", 11000, (void **)&d->ctx_release},
        {"cuCtxSetCurrent", 4000, (void **)&d->ctx_set},
        {"cuStreamCreate", 2000, (void **)&d->stream_create},
        {"cuStreamSynchronize", 2000, (void **)&d->stream_sync},
        {"cuStreamDestroy", 4000, (void **)&d->stream_destroy},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        int found = 0;
        if (get(want[i].name, want[i].fn, want[i].version, 0, &found) || !*want[i].fn)
            return DCP_ENODRIVER;
    }
    return DCP_OK;
}

/* ---- the decode step -------------------------------------------------------------- */

struct step {
    struct dcp_engine_info info;
    void *q[2], *kv[2], *out[2], *lse[2]; /* static buffers: the graph reads and writes these */
    uint32_t tokens;
    bool attend;
    dcp_graph *graph[2];
    enum { EAGER, CAPTURE, REPLAY } mode;
};

/* The model's part of the step: this rank's queries and new latent rows. */
static int project(dcp_rank *rank, struct step *s, uint32_t layer, bool queries)
{
    const uint32_t r = dcp_rank_tp_rank(rank);
    uint32_t q0, kv0;
    dcp_rank_head_offsets(rank, &q0, &kv0);
    const struct dcp_synth_desc d = {
        .seed = 2 * layer + queries, .row_keys = dcp_rank_step_token_keys(rank), .rows = s->tokens,
        .heads = queries ? s->info.q_heads_per_rank : s->info.kv_heads_per_rank, .dim = s->info.qk_dim,
        .head_offset = queries ? q0 : kv0, .amplitude = 1.0f, .dtype = s->info.act_dtype};
    return dcp_rank_fill_synthetic(rank, queries ? s->q[r] : s->kv[r], &d);
}

/* Every layer: new latents appended, then attention (collectives inside). */
static int layers(dcp_rank *rank, struct step *s)
{
    const uint32_t r = dcp_rank_tp_rank(rank);
    int err = DCP_OK;
    for (uint32_t layer = 0; layer < s->info.num_layers && !err; layer++) {
        err = project(rank, s, layer, false);
        if (!err)
            err = dcp_rank_append_kv(rank, layer, s->kv[r], NULL);
        if (!err && s->attend && !(err = project(rank, s, layer, true)))
            err = dcp_rank_attention(rank, layer, s->q[r], s->out[r], s->lse[r]);
    }
    return err;
}

static int rank_step(dcp_rank *rank, void *arg)
{
    struct step *s = arg;
    const uint32_t r = dcp_rank_tp_rank(rank);
    switch (s->mode) {
    case EAGER:
        return layers(rank, s);
    case CAPTURE: { /* record the step once; the launch then runs it */
        int err = dcp_rank_capture_begin(rank);
        if (err)
            return err;
        const int inside = layers(rank, s);
        err = dcp_rank_capture_end(rank, &s->graph[r]); /* ends the capture even after an error */
        if (inside || err)
            return inside ? inside : err;
        return dcp_graph_launch(s->graph[r]);
    }
    case REPLAY:
        return dcp_graph_launch(s->graph[r]);
    }
    return DCP_EINVAL;
}

int main(void)
{
    dcp_deployment *dep = NULL;
    dcp_engine *engine = NULL;
    struct driver drv = {0};
    void *streams[2] = {NULL, NULL};
    struct step s = {0};
    int err = dcp_deployment_load_string("example.yaml", deployment_yaml, strlen(deployment_yaml), NULL, &dep);
    struct dcp_engine_params params;
    dcp_engine_default_params(&params);
    params.deployment = dep;
    params.max_batch = 4;
    params.max_query_tokens = 4;
    params.max_step_tokens = 128;
    params.max_context = 512;
    params.kv_budget_bytes = 8e6;
    params.graphs = true; /* fixed block-table stride and split count: captured steps replay */
    params.act_dtype = DCP_DTYPE_BF16; /* q, new latents and out in bf16; LSE in fp32 */
    if (!err)
        err = dcp_engine_create(&params, &engine);
    if (err == DCP_ENODRIVER || err == DCP_ENODEVICE || err == DCP_ENOTSUP) {
        printf("no CUDA here (%s): skipped\n", dcp_last_error());
        dcp_deployment_destroy(&dep);
        return 77;
    }
    if (!err)
        err = open_driver(&drv);
    if (err)
        goto out;
    dcp_engine_get_info(engine, &s.info);

    /* Each rank's work goes on "the engine's" stream of its GPU (virtual ranks: one GPU). */
    int dev = 0;
    void *ctx = NULL;
    if (drv.device_get(&dev, 0) || drv.ctx_retain(&ctx, dev) || drv.ctx_set(ctx))
        err = DCP_ECUDA;
    for (uint32_t r = 0; r < 2 && !err; r++) {
        dcp_rank *rank = dcp_engine_rank(engine, r);
        const size_t T = params.max_step_tokens, H = s.info.q_heads_per_rank, a = sizeof(uint16_t), f = sizeof(float);
        if (drv.stream_create(&streams[r], 1 /* CU_STREAM_NON_BLOCKING */))
            err = DCP_ECUDA;
        if (!err)
            err = dcp_rank_set_stream(rank, streams[r]);
        if (!err && !(err = dcp_rank_alloc(rank, T * H * s.info.qk_dim * a, &s.q[r])) &&
            !(err = dcp_rank_alloc(rank, T * s.info.kv_heads_per_rank * s.info.qk_dim * a, &s.kv[r])) &&
            !(err = dcp_rank_alloc(rank, T * H * s.info.v_dim * a, &s.out[r])))
            err = dcp_rank_alloc(rank, T * H * f, &s.lse[r]);
    }

    /* Three requests with 40, 70 and 100 prompt tokens (eager prefill). */
    uint32_t seq[3];
    const uint32_t prompt[3] = {40, 70, 100}, ones[3] = {1, 1, 1};
    for (int i = 0; i < 3 && !err; i++) {
        const struct dcp_batch one = {.num_seqs = 1, .seq_ids = &seq[i], .q_lens = &prompt[i]};
        s.tokens = prompt[i];
        s.attend = false;
        s.mode = EAGER;
        if (!(err = dcp_seq_create(engine, &seq[i])) && !(err = dcp_seq_extend(engine, seq[i], prompt[i])) &&
            !(err = dcp_engine_begin_step(engine, &one)))
            err = dcp_engine_run(engine, rank_step, &s);
    }

    /* Decode: the first step is captured, the next ones replay it while the
     * sequences grow (pages fill and new ones are taken: begin_step rewrites the
     * block tables and lengths in place). The last step has another shape (one
     * request finished): the graph refuses it and the step runs eagerly. */
    int replayed = 0, eager = 0;
    for (int step = 0; step < 12 && !err; step++) {
        const uint32_t n = step < 11 ? 3 : 2;
        for (uint32_t i = 0; i < n && !err; i++)
            err = dcp_seq_extend(engine, seq[i], 1);
        const struct dcp_batch batch = {.num_seqs = n, .seq_ids = seq, .q_lens = ones};
        s.tokens = n;
        s.attend = true;
        if (!err)
            err = dcp_engine_begin_step(engine, &batch);
        if (err)
            break;
        struct dcp_graph_shape captured = {0};
        dcp_graph_get_shape(s.graph[0], &captured);
        if (!s.graph[0])
            s.mode = CAPTURE;
        else if (dcp_engine_graph_check(engine, &captured) == DCP_OK)
            s.mode = REPLAY;
        else /* "this step has 2 sequences ..., the graph was captured for 3 ..." */
            s.mode = EAGER;
        replayed += s.mode == REPLAY;
        eager += s.mode == EAGER;
        err = dcp_engine_run(engine, rank_step, &s);
    }

    /* The caller reads the result after its stream got there. */
    uint16_t bits[4] = {0};
    float out[4], lse = NAN;
    if (!err && drv.stream_sync(streams[0]))
        err = DCP_ECUDA;
    if (!err && !(err = dcp_rank_download(dcp_engine_rank(engine, 0), bits, s.out[0], sizeof(bits))))
        err = dcp_rank_download(dcp_engine_rank(engine, 0), &lse, s.lse[0], sizeof(lse));
    for (int i = 0; i < 4; i++) { /* bf16 is the top half of an fp32 */
        const uint32_t w = (uint32_t)bits[i] << 16;
        memcpy(&out[i], &w, sizeof(w));
    }
    if (!err) {
        printf("%s: %d decode steps replayed from one captured graph, %d of another shape run eagerly; "
               "out[0][0][0..3] = %.4f %.4f %.4f %.4f, lse = %.4f\n", s.info.backend, replayed, eager, out[0], out[1],
               out[2], out[3], lse);
        if (!isfinite(lse) || !isfinite(out[0]) || s.info.act_dtype != DCP_DTYPE_BF16 || replayed != 10 || eager != 1)
            err = DCP_EINVAL;
    }
out:
    if (err)
        fprintf(stderr, "example_graph: %s: %s\n", dcp_strerror(err), dcp_last_error());
    for (uint32_t r = 0; engine && r < 2; r++) {
        dcp_rank *rank = dcp_engine_rank(engine, r);
        dcp_graph_destroy(&s.graph[r]);
        dcp_rank_free(rank, s.q[r]);
        dcp_rank_free(rank, s.kv[r]);
        dcp_rank_free(rank, s.out[r]);
        dcp_rank_free(rank, s.lse[r]);
        dcp_rank_set_stream(rank, NULL); /* before the stream goes away */
        if (streams[r])
            drv.stream_destroy(streams[r]);
    }
    dcp_engine_destroy(&engine);
    if (drv.ctx_release)
        drv.ctx_release(0);
    if (drv.dl)
        dlclose(drv.dl);
    dcp_deployment_destroy(&dep);
    return err ? 1 : 0;
}
