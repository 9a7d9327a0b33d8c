/*
 * The CUDA backend's whole host path on the test doubles: driver loading, the
 * real embedded module, pools (VMM and plain), streams, launches, virtual-rank
 * and NCCL collectives, and fault injection. The doubles run every launch
 * through the kernels' CPU implementations, so the CUDA engine must produce what
 * the host engine produces for the same inputs.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda/cuda_internal.h"
#include "cuda_test_util.h"
#include "dcp/dcp.h"
#include "dcp/tools.h"
#include "dcp_kernels/variants.h"

struct shape {
    enum dcp_attention_kind kind;
    uint32_t tp, dcp, q_heads, kv_heads, head_dim;
    enum dcp_comm_scheme comm;
    enum dcp_dtype dtype;
};

static dcp_deployment *deployment(const struct shape *s, enum dcp_backend_kind backend, double nccl_timeout)
{
    struct dcp_config c;
    dcp_config_defaults(&c);
    c.model.name = "cuda-test";
    c.model.attention = s->kind;
    c.model.num_layers = 2;
    c.model.num_q_heads = s->q_heads;
    c.model.num_kv_heads = s->kind == DCP_ATTN_MLA ? 1 : s->kv_heads;
    c.model.head_dim = s->head_dim;
    c.model.kv_dtype = s->dtype;
    c.hardware.gpu = "test";
    c.hardware.memory_bytes = 1e9;
    c.hardware.hbm_bandwidth = 1e12;
    c.hardware.link_bandwidth = 1e11;
    c.hardware.gpus_per_node = 8;
    c.parallel.tp = s->tp;
    c.parallel.dcp = s->dcp;
    c.parallel.comm = s->comm;
    c.parallel.comm_dtype = DCP_WIRE_FP32; /* CUDA vs host within 1e-5: a 16-bit wire would round their tiny differences to whole ulps */
    c.memory.block_size = 16;
    c.memory.reserve_bytes = 0;
    c.workload.context_lengths[0] = 256;
    c.workload.num_context_lengths = 1;
    c.runtime.backend = backend;
    c.runtime.host.threads = 1;
    if (nccl_timeout > 0)
        c.runtime.cuda.nccl_timeout_s = nccl_timeout;
    dcp_diag *d = NULL;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    int err = dcp_deployment_from_config(&c, d, &dep);
    dcp_diag_print(d, stderr);
    dcp_diag_destroy(&d);
    assert_int_equal(err, DCP_OK);
    return dep;
}

static int create_with(const dcp_deployment *dep, dcp_engine **e, uint32_t max_batch, uint64_t max_context,
                       double kv_budget)
{
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.kv_budget_bytes = kv_budget;
    p.max_batch = max_batch;
    p.max_seqs = max_batch;
    p.max_query_tokens = 2 * max_batch;
    p.max_step_tokens = 64;
    p.max_context = max_context;
    return dcp_engine_create(&p, e);
}

static int create(const dcp_deployment *dep, dcp_engine **e) { return create_with(dep, e, 3, 256, 4e6); }

/* One run: 3 sequences prefilled through append, then a decode step of 2 tokens
 * each; every rank's output and LSE are returned in host arrays. */
struct run_io {
    dcp_engine *e;
    float *out[8], *lse[8];
    void *q[8], *k[8], *v[8], *o[8], *l[8];
    bool decode;
    uint32_t tokens;
    int q_from_host;         /* 0: q filled on the device; 1: dcp_rank_upload; 2: cuMemcpyHtoD */
    struct dcp_cuda *driver; /* q_from_host 2: the driver, opened by the test */
    uint32_t nseq;           /* sequences (0: three, of 37, 5 and 120 tokens, decoding 2 each) */
    const uint32_t *lens;    /* [nseq] prefill lengths */
    uint32_t decode_q;       /* query tokens per sequence in the decode step */
    struct dcp_step_launch launch; /* what the decode step launched */
    bool poison;             /* a NaN in K at position 0 of sequence 0 (every KV head and layer) */
    bool poison_now;         /* this step appends that position */
};

#define MAX_SEQS 32
#define CHUNK 50 /* prefill tokens per step */

/* Queries uploaded from the host, the same for every backend. */
static int upload_q(dcp_rank *r, struct run_io *io, uint32_t layer, size_t floats)
{
    float *h = malloc(floats * sizeof(float));
    if (!h)
        return DCP_ENOMEM;
    for (size_t j = 0; j < floats; j++)
        h[j] = 0.5f * sinf(0.37f * (float)j + (float)(layer + 3 * dcp_rank_tp_rank(r)));
    void *dst = io->q[dcp_rank_tp_rank(r)];
    int err = io->q_from_host == 1 ? dcp_rank_upload(r, dst, h, floats * sizeof(float))
                                   : dcp_cuda_check(io->driver->api.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, h,
                                                                                 floats * sizeof(float)),
                                                    "cuMemcpyHtoD");
    free(h);
    return err;
}

static int rank_fn(dcp_rank *r, void *arg)
{
    struct run_io *io = arg;
    struct dcp_engine_info in;
    dcp_engine_get_info(io->e, &in);
    const uint32_t i = dcp_rank_tp_rank(r);
    uint32_t q0, kv0;
    dcp_rank_head_offsets(r, &q0, &kv0);
    const bool mla = in.v_dim != in.qk_dim;
    for (uint32_t layer = 0; layer < in.num_layers; layer++) {
        struct dcp_synth_desc d = {.seed = 100 + layer, .row_keys = dcp_rank_step_token_keys(r),
                                   .rows = io->tokens, .heads = in.kv_heads_per_rank, .dim = in.qk_dim,
                                   .head_offset = kv0, .amplitude = 1.0f};
        int err = dcp_rank_fill_synthetic(r, io->k[i], &d);
        /* Token 0 of the step: one element of its K row, every KV head of the rank. */
        const float nan = NAN;
        for (uint32_t h = 0; io->poison_now && h < in.kv_heads_per_rank && !err; h++)
            err = dcp_rank_upload(r, (float *)io->k[i] + (size_t)h * in.qk_dim + 3, &nan, sizeof(nan));
        if (!err && !mla) {
            d.seed += 1000;
            d.dim = in.v_dim;
            err = dcp_rank_fill_synthetic(r, io->v[i], &d);
        }
        if (!err)
            err = dcp_rank_append_kv(r, layer, io->k[i], mla ? NULL : io->v[i]);
        if (err)
            return err;
        if (!io->decode)
            continue;
        d = (struct dcp_synth_desc){.seed = 7 + layer, .row_keys = dcp_rank_step_token_keys(r),
                                    .rows = io->tokens, .heads = in.q_heads_per_rank, .dim = in.qk_dim,
                                    .head_offset = q0, .amplitude = 1.0f};
        if ((err = io->q_from_host ? upload_q(r, io, layer, (size_t)io->tokens * in.q_heads_per_rank * in.qk_dim)
                                   : dcp_rank_fill_synthetic(r, io->q[i], &d)) ||
            (err = dcp_rank_attention(r, layer, io->q[i], io->o[i], io->l[i])))
            return err;
    }
    if (!io->decode)
        return dcp_rank_synchronize(r);
    const size_t rows = (size_t)io->tokens * in.q_heads_per_rank;
    int err = dcp_rank_download(r, io->out[i], io->o[i], rows * in.v_dim * sizeof(float));
    return err ? err : dcp_rank_download(r, io->lse[i], io->l[i], rows * sizeof(float));
}

static int run_engine(dcp_engine *e, struct run_io *io)
{
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    io->e = e;
    static const uint32_t default_lens[3] = {37, 5, 120};
    if (!io->nseq) {
        io->nseq = 3;
        io->lens = default_lens;
        io->decode_q = 2;
    }
    const uint32_t n = io->nseq, *lens = io->lens;
    assert_true(n <= MAX_SEQS);
    const size_t f = sizeof(float), rows = (size_t)n * io->decode_q;
    for (uint32_t i = 0; i < in.tp; i++) {
        dcp_rank *r = dcp_engine_rank(e, i);
        int err;
        if ((err = dcp_rank_alloc(r, CHUNK * in.kv_heads_per_rank * in.qk_dim * f, &io->k[i])) ||
            (err = dcp_rank_alloc(r, CHUNK * in.kv_heads_per_rank * in.v_dim * f, &io->v[i])) ||
            (err = dcp_rank_alloc(r, rows * in.q_heads_per_rank * in.qk_dim * f, &io->q[i])) ||
            (err = dcp_rank_alloc(r, rows * in.q_heads_per_rank * in.v_dim * f, &io->o[i])) ||
            (err = dcp_rank_alloc(r, rows * in.q_heads_per_rank * f, &io->l[i])))
            return err;
        io->out[i] = calloc(rows * in.q_heads_per_rank * in.v_dim, f);
        io->lse[i] = calloc(rows * in.q_heads_per_rank, f);
    }
    uint32_t ids[MAX_SEQS], q[MAX_SEQS];
    int err = DCP_OK;
    for (uint32_t s = 0; s < n && !err; s++) {
        err = dcp_seq_create(e, &ids[s]);
        for (uint32_t done = 0; done < lens[s] && !err; done += q[s]) {
            q[s] = lens[s] - done < CHUNK ? lens[s] - done : CHUNK;
            err = dcp_seq_extend(e, ids[s], q[s]);
            const struct dcp_batch b = {.num_seqs = 1, .seq_ids = &ids[s], .q_lens = &q[s]};
            io->tokens = q[s];
            io->decode = false;
            io->poison_now = io->poison && s == 0 && done == 0;
            if (!err)
                err = dcp_engine_begin_step(e, &b);
            if (!err)
                err = dcp_engine_run(e, rank_fn, io);
        }
    }
    for (uint32_t s = 0; s < n && !err; s++) {
        q[s] = io->decode_q;
        err = dcp_seq_extend(e, ids[s], io->decode_q);
    }
    const struct dcp_batch b = {.num_seqs = n, .seq_ids = ids, .q_lens = q};
    io->tokens = (uint32_t)rows;
    io->decode = true;
    io->poison_now = false;
    if (!err)
        err = dcp_engine_begin_step(e, &b);
    if (!err)
        err = dcp_engine_step_launch(e, &io->launch);
    if (!err)
        err = dcp_engine_run(e, rank_fn, io);
    return err;
}

static void free_io(struct run_io *io, uint32_t tp)
{
    for (uint32_t i = 0; i < tp; i++) {
        dcp_rank *r = dcp_engine_rank(io->e, i);
        dcp_rank_free(r, io->k[i]);
        dcp_rank_free(r, io->v[i]);
        dcp_rank_free(r, io->q[i]);
        dcp_rank_free(r, io->o[i]);
        dcp_rank_free(r, io->l[i]);
        free(io->out[i]);
        free(io->lse[i]);
    }
}

/* Largest difference between two runs' outputs and LSEs (infinity where one is NaN). */
static double worst_difference(const struct run_io *a, const struct run_io *b, const struct dcp_engine_info *in)
{
    double worst = 0;
    for (uint32_t i = 0; i < in->tp; i++) {
        const size_t rows = (size_t)a->tokens * in->q_heads_per_rank;
        for (size_t j = 0; j < rows * in->v_dim; j++) {
            const double d = fabs((double)a->out[i][j] - b->out[i][j]);
            worst = isnan(d) ? INFINITY : fmax(worst, d);
        }
        for (size_t j = 0; j < rows; j++) {
            const double d = fabs((double)a->lse[i][j] - b->lse[i][j]);
            worst = isnan(d) ? INFINITY : fmax(worst, d);
        }
    }
    return worst;
}

/* The CUDA engine (virtual ranks or NCCL) gives the host engine's results. */
static void check_same_as_host(const struct shape *s, const char *devices)
{
    fake_env_reset();
    fake_env_set("FAKE_CUDA_DEVICES", devices);
    dcp_deployment *hd = deployment(s, DCP_BACKEND_HOST, 0), *cd = deployment(s, DCP_BACKEND_CUDA, 0);
    dcp_engine *he = NULL, *ceng = NULL;
    assert_int_equal(create(hd, &he), DCP_OK);
    int err = create(cd, &ceng);
    if (err)
        fprintf(stderr, "cuda engine: %s: %s\n", dcp_strerror(err), dcp_last_error());
    assert_int_equal(err, DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(ceng, &in);
    assert_string_equal(in.backend, "cuda");
    if (s->dcp > 1)
        assert_contains(in.backend_detail, atoi(devices) >= (int)s->tp ? "NCCL" : "virtual ranks");
    /* Which arithmetic runs is visible: tensor cores for bf16/fp16 KV and MLA fp8 (MLA: default
     * precision fast; GQA: hi/lo splits whatever the precision key says), SIMT fp32 otherwise. */
    const bool mla = s->kind == DCP_ATTN_MLA;
    const bool tc = s->dtype == DCP_DTYPE_BF16 || s->dtype == DCP_DTYPE_FP16 || (mla && s->dtype == DCP_DTYPE_FP8_E4M3);
    assert_contains(in.backend_detail, !tc ? "SIMT fp32" : mla ? "_mla_tc_" : "_tc_");
    assert_contains(in.backend_detail, !tc ? "SIMT fp32" : mla ? "tensor cores, precision fast" : "tensor cores, hi/lo Q and P");
    struct run_io h = {0}, c = {0};
    err = run_engine(he, &h);
    if (err)
        fprintf(stderr, "host run: %s: %s\n", dcp_strerror(err), dcp_last_error());
    assert_int_equal(err, DCP_OK);
    err = run_engine(ceng, &c);
    if (err)
        fprintf(stderr, "cuda run: %s: %s\n", dcp_strerror(err), dcp_last_error());
    assert_int_equal(err, DCP_OK);
    for (uint32_t i = 0; i < in.tp; i++)
        for (size_t j = 0; j < (size_t)c.tokens * in.q_heads_per_rank * in.v_dim; j++)
            assert_true(isfinite(c.out[i][j]));
    assert_true(worst_difference(&c, &h, &in) <= 1e-5);
    free_io(&h, in.tp);
    free_io(&c, in.tp);
    dcp_engine_destroy(&he);
    dcp_engine_destroy(&ceng);
    dcp_deployment_destroy(&hd);
    dcp_deployment_destroy(&cd);
}

static void test_matches_host(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape shapes[] = {
        {DCP_ATTN_MLA, 4, 4, 8, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16},
        {DCP_ATTN_MLA, 4, 2, 8, 1, 0, DCP_COMM_AG_RS, DCP_DTYPE_FP8_E4M3},
        {DCP_ATTN_GQA, 4, 2, 8, 2, 64, DCP_COMM_AG_RS, DCP_DTYPE_FP16},
        {DCP_ATTN_GQA, 2, 2, 4, 1, 128, DCP_COMM_A2A, DCP_DTYPE_FP32},
        {DCP_ATTN_MHA, 2, 1, 4, 4, 128, DCP_COMM_A2A, DCP_DTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        check_same_as_host(&shapes[i], "1");  /* virtual ranks */
        check_same_as_host(&shapes[i], "8");  /* a GPU per rank, NCCL */
    }
}

/*
 * A NaN in the KV cache (docs/design.md §4) through the CUDA backend's whole path
 * on the doubles (append, attention, split-KV merge, virtual-rank or NCCL
 * collectives, lse_scale/reduce or the a2a merge): a NaN in position 0 of sequence
 * 0 makes every decode row of that sequence NaN in its LSE and every output
 * element, on every rank, with the engine's split-KV choice and with 1 and 3
 * splits forced; the other sequences' rows are finite and equal the host engine's.
 */
static void check_nan_rows(const struct run_io *c, const struct run_io *h, const struct dcp_engine_info *in,
                           const char *what)
{
    const size_t rows = (size_t)c->tokens * in->q_heads_per_rank;
    for (uint32_t i = 0; i < in->tp; i++)
        for (size_t row = 0; row < rows; row++) {
            const bool want_nan = row / in->q_heads_per_rank / c->decode_q == 0; /* sequence 0 */
            if ((bool)isnan(c->lse[i][row]) != want_nan ||
                (!want_nan && fabs((double)c->lse[i][row] - h->lse[i][row]) > 1e-5))
                fail_msg("%s: rank %u row %zu: lse %g, host %g", what, i, row, c->lse[i][row], h->lse[i][row]);
            for (uint32_t d = 0; d < in->v_dim; d++) {
                const float got = c->out[i][row * in->v_dim + d], host = h->out[i][row * in->v_dim + d];
                if ((bool)isnan(got) != want_nan || (bool)isnan(host) != want_nan ||
                    (!want_nan && fabs((double)got - host) > 1e-5))
                    fail_msg("%s: rank %u row %zu dim %u: %g, host %g", what, i, row, d, got, host);
            }
        }
}

static void test_nan_in_cache(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape shapes[] = {
        {DCP_ATTN_MLA, 4, 4, 8, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16},
        {DCP_ATTN_MLA, 4, 2, 8, 1, 0, DCP_COMM_AG_RS, DCP_DTYPE_FP8_E4M3},
        {DCP_ATTN_GQA, 4, 2, 8, 2, 64, DCP_COMM_AG_RS, DCP_DTYPE_FP16},
        {DCP_ATTN_GQA, 2, 2, 4, 1, 128, DCP_COMM_A2A, DCP_DTYPE_FP32},
        {DCP_ATTN_MHA, 2, 1, 4, 4, 128, DCP_COMM_A2A, DCP_DTYPE_BF16},
    };
    static const char *const devices[] = {"1", "8"};
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (int dev = 0; dev < 2; dev++)
            for (int k = 0; k < 3; k++) {
                static const uint32_t split_choices[] = {0, 1, 3}; /* 0: the engine's */
                const uint32_t splits = split_choices[k];
                const struct shape *s = &shapes[si];
                fake_env_reset();
                fake_env_set("FAKE_CUDA_DEVICES", devices[dev]);
                dcp_deployment *hd = deployment(s, DCP_BACKEND_HOST, 0), *cd = deployment(s, DCP_BACKEND_CUDA, 0);
                dcp_engine *he = NULL, *ce = NULL;
                assert_int_equal(create(hd, &he), DCP_OK);
                assert_int_equal(create(cd, &ce), DCP_OK);
                he->split_override = ce->split_override = splits;
                struct run_io h = {.poison = true}, c = {.poison = true};
                assert_int_equal(run_engine(he, &h), DCP_OK);
                assert_int_equal(run_engine(ce, &c), DCP_OK);
                struct dcp_engine_info in;
                dcp_engine_get_info(ce, &in);
                char what[160];
                snprintf(what, sizeof(what), "shape %zu, %s device(s), splits %u (step used %u)", si, devices[dev],
                         splits, c.launch.num_splits);
                check_nan_rows(&c, &h, &in, what);
                if (splits)
                    assert_int_equal(c.launch.num_splits, splits);
                print_message("NaN in the cache: %s: NaN rows match the host engine's\n", what);
                free_io(&h, in.tp);
                free_io(&c, in.tp);
                dcp_engine_destroy(&he);
                dcp_engine_destroy(&ce);
                dcp_deployment_destroy(&hd);
                dcp_deployment_destroy(&cd);
            }
    fake_env_reset();
}

/*
 * Copies are ordered on the stream of the kernels that read them: queries
 * uploaded with dcp_rank_upload give the host engine's results, on virtual ranks
 * and with NCCL. The same upload deliberately misplaced on the legacy stream
 * (cuMemcpyHtoD, which the ranks' non-blocking streams do not wait for) gives
 * other results: the doubles' deferred streams catch the ordering bug that a
 * GPU would show only sometimes.
 */
static void test_uploads_ordered(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_GQA, 2, 2, 4, 1, 64, DCP_COMM_AG_RS, DCP_DTYPE_BF16};
    dcp_deployment *hd = deployment(&s, DCP_BACKEND_HOST, 0), *cd = deployment(&s, DCP_BACKEND_CUDA, 0);
    dcp_engine *he = NULL;
    assert_int_equal(create(hd, &he), DCP_OK);
    struct run_io h = {.q_from_host = 1};
    assert_int_equal(run_engine(he, &h), DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(he, &in);
    static const char *const devices[] = {"1", "2"};
    for (int d = 0; d < 2; d++)
        for (int mode = 1; mode <= 2; mode++) {
            fake_env_reset();
            fake_env_set("FAKE_CUDA_DEVICES", devices[d]);
            dcp_engine *ce = NULL;
            assert_int_equal(create(cd, &ce), DCP_OK);
            struct run_io c = {.q_from_host = mode};
            if (mode == 2)
                assert_int_equal(dcp_cuda_open(&(struct dcp_cuda_open_params){0}, &c.driver), DCP_OK);
            assert_int_equal(run_engine(ce, &c), DCP_OK);
            const double worst = worst_difference(&c, &h, &in);
            if (mode == 1)
                assert_true(worst <= 1e-5);
            else
                assert_false(worst <= 1e-5);
            free_io(&c, in.tp);
            dcp_engine_destroy(&ce);
            dcp_cuda_close(&c.driver);
        }
    free_io(&h, in.tp);
    dcp_engine_destroy(&he);
    dcp_deployment_destroy(&hd);
    dcp_deployment_destroy(&cd);
}

/*
 * The pinned staging buffer of small uploads is reused only once the copies out
 * of it ran (EV_STAGED, cuda_upload in cuda_memory.c): many small dcp_rank_upload
 * calls, each with its own data and together several times what the buffer
 * holds, with nothing waiting in between, all land. The doubles' streams run a
 * copy only when something waits for it, so a reuse that did not wait would
 * overwrite the staged bytes of copies still queued, and the download shows it.
 */
#define STAGING_PIECE 16 /* floats per upload: 64 bytes, one staging slot */

struct staging_io {
    float *dev[8];
    float *back[8];
    size_t floats;
};

/** The value piece data puts at float k of rank i's buffer (exact in fp32). */
static float staged_value(uint32_t i, size_t k)
{
    return (float)((i << 20) + k);
}

static int staging_rank_fn(dcp_rank *r, void *arg)
{
    struct staging_io *io = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    float piece[STAGING_PIECE]; /* reused at once: the upload copies it before returning */
    for (size_t k0 = 0; k0 < io->floats; k0 += STAGING_PIECE) {
        for (size_t j = 0; j < STAGING_PIECE; j++)
            piece[j] = staged_value(i, k0 + j);
        const int err = dcp_rank_upload(r, io->dev[i] + k0, piece, sizeof(piece));
        if (err)
            return err;
    }
    return dcp_rank_download(r, io->back[i], io->dev[i], io->floats * sizeof(float));
}

static void test_staging_reuse_waits(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_GQA, 2, 2, 4, 1, 64, DCP_COMM_AG_RS, DCP_DTYPE_BF16};
    dcp_deployment *cd = deployment(&s, DCP_BACKEND_CUDA, 0);
    static const char *const devices[] = {"1", "2"};
    for (int d = 0; d < 2; d++) {
        fake_env_reset();
        fake_env_set("FAKE_CUDA_DEVICES", devices[d]);
        dcp_engine *ce = NULL;
        assert_int_equal(create(cd, &ce), DCP_OK);
        struct dcp_engine_info in;
        dcp_engine_get_info(ce, &in);
        const size_t staging = CR(dcp_engine_rank(ce, 0))->staging_bytes;
        struct staging_io io = {.floats = (4 * staging / sizeof(float) + STAGING_PIECE - 1) / STAGING_PIECE * STAGING_PIECE};
        assert_true(io.floats < (1u << 20));
        for (uint32_t i = 0; i < in.tp; i++) {
            assert_int_equal(dcp_rank_alloc(dcp_engine_rank(ce, i), io.floats * sizeof(float), (void **)&io.dev[i]),
                             DCP_OK);
            io.back[i] = calloc(io.floats, sizeof(float));
            assert_non_null(io.back[i]);
        }
        assert_int_equal(dcp_engine_run(ce, staging_rank_fn, &io), DCP_OK);
        for (uint32_t i = 0; i < in.tp; i++) {
            for (size_t k = 0; k < io.floats; k++)
                if (io.back[i][k] != staged_value(i, k))
                    fail_msg("%s device(s), rank %u: float %zu of %zu (%zu-byte staging) is %g, uploaded %g", devices[d],
                             i, k, io.floats, staging, io.back[i][k], staged_value(i, k));
            dcp_rank_free(dcp_engine_rank(ce, i), io.dev[i]);
            free(io.back[i]);
        }
        print_message("staging: %zu uploads of %d bytes per rank through %zu bytes of staging, all landed\n",
                      io.floats / STAGING_PIECE, (int)(STAGING_PIECE * sizeof(float)), staging);
        dcp_engine_destroy(&ce);
    }
    fake_env_reset();
    dcp_deployment_destroy(&cd);
}

/* One step's launch on an H200-shaped double (132 SMs, the attention entries'
 * real shared memory), and its results against the host engine's. */
static struct dcp_step_launch launch_of(const struct shape *s, uint32_t nseq, uint32_t len)
{
    uint32_t lens[MAX_SEQS];
    for (uint32_t i = 0; i < nseq; i++)
        lens[i] = len;
    dcp_deployment *hd = deployment(s, DCP_BACKEND_HOST, 0), *cd = deployment(s, DCP_BACKEND_CUDA, 0);
    const uint64_t context = len + 1;
    dcp_engine *he = NULL, *ce = NULL;
    assert_int_equal(create_with(hd, &he, nseq, context, 64e6), DCP_OK);
    fake_env_reset();
    fake_env_set("FAKE_CUDA_SM_COUNT", "132");
    assert_int_equal(create_with(cd, &ce, nseq, context, 64e6), DCP_OK);
    struct run_io h = {.nseq = nseq, .lens = lens, .decode_q = 1};
    struct run_io c = h;
    assert_int_equal(run_engine(he, &h), DCP_OK);
    assert_int_equal(run_engine(ce, &c), DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(ce, &in);
    const double worst = worst_difference(&c, &h, &in);
    print_message("%s %u heads, batch %u x %u tokens: %u blocks/SM x 132 SMs = %u slots; splits %u, grid (%u, %u, %u) "
                  "= %llu blocks; |cuda - host| <= %.2g\n",
                  s->kind == DCP_ATTN_MLA ? "MLA" : "GQA d128", s->q_heads, nseq, len, c.launch.blocks_per_sm,
                  c.launch.slots, c.launch.num_splits, c.launch.grid[0], c.launch.grid[1], c.launch.grid[2],
                  (unsigned long long)c.launch.blocks, worst);
    assert_true(worst <= 1e-5);
    free_io(&h, in.tp);
    free_io(&c, in.tp);
    dcp_engine_destroy(&he);
    dcp_engine_destroy(&ce);
    dcp_deployment_destroy(&hd);
    dcp_deployment_destroy(&cd);
    return c.launch;
}

/*
 * The split-KV factor follows each step's sequences and the device's occupancy
 * (cuOccupancyMaxActiveBlocksPerMultiprocessor: 1 MLA block or 2 blocks of the
 * tensor-core GQA d128 entry, 111104 B of shared memory and 214 registers, per
 * SM) and fills one whole wave, never a partial second one. MLA with 128
 * gathered heads (4 head tiles of 32): batch 1 splits 33 ways, 132 blocks for 132
 * slots (a fixed cap of 32 splits gave 128); batch 32 already has 128 blocks and
 * is not split. GQA d128 with 8 heads per KV head, batch 32: 8 splits, 256
 * blocks for 264 slots (the SIMT entry's 4 blocks per SM assumed gave 16 splits,
 * 512 blocks: a second wave).
 */
static void test_split_kv_follows_occupancy(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape mla = {DCP_ATTN_MLA, 1, 1, 128, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16};
    const struct shape gqa = {DCP_ATTN_GQA, 1, 1, 8, 1, 128, DCP_COMM_A2A, DCP_DTYPE_BF16};
    struct dcp_step_launch l = launch_of(&mla, 1, 1024);
    assert_int_equal(l.blocks_per_sm, 1);
    assert_int_equal(l.slots, 132);
    assert_int_equal(l.num_splits, 33);
    assert_int_equal(l.grid[0], 33);
    assert_int_equal(l.grid[1], 4);
    assert_int_equal(l.grid[2], 1);
    assert_int_equal(l.blocks, 132);
    l = launch_of(&mla, 32, 64);
    assert_int_equal(l.num_splits, 1);
    assert_int_equal(l.blocks, 128);
    l = launch_of(&gqa, 32, 256);
    assert_int_equal(l.blocks_per_sm, 2);
    assert_int_equal(l.slots, 264);
    assert_int_equal(l.num_splits, 8);
    assert_int_equal(l.grid[0], 8);
    assert_int_equal(l.grid[1], 1);
    assert_int_equal(l.grid[2], 32);
    assert_int_equal(l.blocks, 256);
    l = launch_of(&gqa, 1, 256); /* 17 pages: no more splits than pages */
    assert_int_equal(l.num_splits, 17);
}

/* A launch every check accepts: GQA d128 bf16, 8 heads on one KV head, one split. */
static struct dcpk_attn_params servable_attn(void)
{
    return (struct dcpk_attn_params){
        .q = 0x1000, .k_cache = 0x10000, .v_cache = 0x20000, .block_table = 0x3000, .seq_lens = 0x3100,
        .q_start = 0x3200, .out = 0x4000, .lse = 0x5000, .batch = 1, .num_q_tokens = 1, .num_heads = 8,
        .heads_per_chunk = 8, .num_kv_heads = 1, .head_tile = 8, .qk_dim = 128, .v_dim = 128,
        .v_row_stride = 128, .block_size = 16, .max_blocks = 4, .group_size = 1, .interleave = 1,
        .num_splits = 1, .dtype = DCPK_BF16, .scale = 0.1f, .kv_scale = 1.0f,
    };
}

/* Every way a parameter struct can be unservable is named before cuLaunchKernel. */
static void test_launch_checks(void **state)
{
    (void)state;
    const struct dcpk_attn_variant *v = dcpk_attn_variant_find(128, 128, 0, DCPK_BF16);
    assert_non_null(v);
    const struct dcpk_attn_params ok = servable_attn();
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_attn, &ok, v->threads, v->smem_bytes));
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &ok, v->threads * 2, v->smem_bytes),
                           "block size"));
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &ok, v->threads, v->smem_bytes - 16),
                           "shared memory"));
    struct dcpk_attn_params p = ok;
    p.dtype = DCPK_FP16;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes), "dtype"));
    p = ok;
    p.qk_dim = p.v_dim = p.v_row_stride = 64;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes), "dimensions"));
    p = ok;
    p.k_cache += 8;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes), "aligned"));
    p = ok;
    p.v_row_stride = 100;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes), "V layout"));
    p = ok;
    p.head_tile = 0;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes), "zero"));
    p = ok;
    p.num_splits = 2;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes), "workspace"));
    p = ok;
    p.out += 2;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes), "misaligned"));
    /* Activation dtypes: fp8 or unknown q/out refused; alignment is the dtype's. */
    p.out_dtype = DCPK_BF16; /* out + 2 is aligned for bf16 */
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes));
    p.out_dtype = DCPK_FP8_E4M3;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes),
                           "activation dtype"));
    p = ok;
    p.q_dtype = 9;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes),
                           "activation dtype"));
    p.q_dtype = DCPK_FP16;
    p.q += 1;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_attn, &p, v->threads, v->smem_bytes), "misaligned"));

    const struct dcpk_kv_append_params a = {.k_cache = 0x1000, .v_cache = 0x2000, .k_src = 0x3000, .v_src = 0x4000,
                                            .slots = 0x5004, .block_size = 16, .dtype = DCPK_BF16};
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_kv_append, &a, 256, 0), "misaligned"));
    const struct dcpk_merge_params m = {.src_o = 0x1000, .src_lse = 0x2001, .out = 0x3000, .rows = 4,
                                        .rows_per_chunk = 4, .v_dim = 8, .n_src = 2};
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_merge, &m, 128, 0), "misaligned"));
    const struct dcpk_fill_params f = {.dst = 0x1000, .rows = 1, .heads = 1, .dim = 4, .dtype = 9};
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_fill, &f, 256, 0), "dtype"));
    const struct dcpk_reduce_params red = {.dst = 0x1000, .src_ptrs = 0x2004, .count = 4, .n_src = 2};
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_reduce, &red, 256, 0), "misaligned"));

    /* The row kernels' activation dtypes: fp8 or unknown refused, 2-byte alignment for bf16/fp16. */
    struct dcpk_kv_append_params a2 = {.k_cache = 0x1000, .v_cache = 0x2000, .k_src = 0x3002, .v_src = 0x4000,
                                       .slots = 0x5000, .block_size = 16, .dtype = DCPK_FP8_E4M3,
                                       .src_dtype = DCPK_BF16};
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_kv_append, &a2, 256, 0));
    a2.src_dtype = DCPK_FP8_E4M3;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_kv_append, &a2, 256, 0), "activation dtype"));
    struct dcpk_merge_params m2 = {.src_o = 0x1002, .src_lse = 0x2000, .out = 0x3006, .rows = 4,
                                   .rows_per_chunk = 4, .v_dim = 8, .n_src = 2, .src_dtype = DCPK_FP16,
                                   .out_dtype = DCPK_BF16};
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_merge, &m2, 128, 0));
    m2.out_dtype = 4;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_merge, &m2, 128, 0), "activation dtype"));
    struct dcpk_lse_scale_params s2 = {.lse_all = 0x1000, .o = 0x2002, .rows = 4, .rows_per_chunk = 4,
                                       .v_dim = 8, .n_src = 2, .o_dtype = DCPK_FP16};
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_lse_scale, &s2, 128, 0));
    s2.o_dtype = DCPK_FP32;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_lse_scale, &s2, 128, 0), "misaligned"));
    s2.o_dtype = DCPK_FP8_E4M3;
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_lse_scale, &s2, 128, 0), "activation dtype"));
    const struct dcpk_reduce_params red2 = {.dst = 0x1000, .src_ptrs = 0x2000, .count = 4, .n_src = 2, .dtype = 7};
    assert_non_null(strstr(cuda_launch_problem(v, DCPK_KERNEL_reduce, &red2, 256, 0), "activation dtype"));
}

/*
 * An attention launch the entry cannot serve is an error of the call that makes
 * it, and nothing runs. Sent to the driver unchecked, the same launch "succeeds"
 * and the entry does nothing (as on a GPU: the double models it), leaving the
 * output as it was: what the check exists to prevent.
 */
static void test_unservable_launch_refused(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    fake_env_reset();
    const struct shape s = {DCP_ATTN_GQA, 1, 1, 8, 1, 128, DCP_COMM_A2A, DCP_DTYPE_BF16};
    dcp_deployment *dep = deployment(&s, DCP_BACKEND_CUDA, 0);
    dcp_engine *e = NULL;
    assert_int_equal(create(dep, &e), DCP_OK);
    struct run_io io = {0};
    assert_int_equal(run_engine(e, &io), DCP_OK);
    dcp_rank *r = dcp_engine_rank(e, 0);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    const size_t out_floats = (size_t)io.tokens * in.q_heads_per_rank * in.v_dim;

    /* Valid buffers, a wrong dtype: the backend refuses it. */
    struct dcpk_attn_params p = servable_attn();
    p.q = (uint64_t)(uintptr_t)io.q[0];
    p.out = (uint64_t)(uintptr_t)io.o[0];
    p.lse = (uint64_t)(uintptr_t)io.l[0];
    p.k_cache = p.v_cache = r->kv_arena;
    p.v_cache += r->engine->k_page_bytes * r->engine->num_blocks;
    p.block_table = r->buf.block_table;
    p.seq_lens = r->buf.seq_lens;
    p.q_start = r->buf.q_start;
    p.dtype = DCPK_FP16;
    dcp_clear_error();
    assert_int_equal(r->engine->ops->launch(r, DCPK_KERNEL_attn, &p), DCP_EINVAL);
    assert_contains(dcp_last_error(), "dcpk_attn cannot serve this launch (KV cache dtype differs");

    /* Unchecked, the driver accepts it and nothing happens. */
    struct dcp_cuda *cu = NULL;
    assert_int_equal(dcp_cuda_open(&(struct dcp_cuda_open_params){0}, &cu), DCP_OK);
    struct fake_cuda_stats before;
    ((fake_cuda_get_stats_fn)(uintptr_t)fake_hook(cu, "fake_cuda_get_stats"))(&before);
    const struct cuda_engine *ce = r->engine->backend;
    const struct cuda_rank *cr = r->backend;
    assert_int_equal(cu->api.cuCtxSetCurrent(ce->devices[0].ctx), CUDA_SUCCESS);
    void *args[1] = {&p};
    const struct dcpk_grid g = dcpk_kernels[DCPK_KERNEL_attn].grid(&p);
    assert_int_equal(cu->api.cuLaunchKernel(ce->devices[0].fn[DCPK_KERNEL_attn], g.x, g.y, g.z, ce->attn->threads,
                                            1, 1, ce->attn->smem_bytes, cr->compute, args, NULL),
                     CUDA_SUCCESS);
    float *after = calloc(out_floats, sizeof(float));
    assert_int_equal(dcp_rank_download(r, after, io.o[0], out_floats * sizeof(float)), DCP_OK);
    struct fake_cuda_stats now;
    ((fake_cuda_get_stats_fn)(uintptr_t)fake_hook(cu, "fake_cuda_get_stats"))(&now);
    assert_int_equal(now.unserved_launches, before.unserved_launches + 1);
    assert_int_equal(now.launches, before.launches);
    assert_memory_equal(after, io.out[0], out_floats * sizeof(float)); /* stale */
    free(after);
    dcp_cuda_close(&cu);
    free_io(&io, in.tp);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* Every device allocation of engine creation can fail: each gives DCP_EDEVMEM and
 * leaves no device memory, stream, event or module behind. */
static void test_every_allocation_can_fail(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_MLA, 2, 2, 4, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16};
    dcp_deployment *dep = deployment(&s, DCP_BACKEND_CUDA, 0);
    fake_env_reset();
    dcp_engine *e = NULL;
    assert_int_equal(create(dep, &e), DCP_OK);
    void *h = dlopen(fake_cuda_path(), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    fake_cuda_get_stats_fn stats = (fake_cuda_get_stats_fn)dlsym(h, "fake_cuda_get_stats");
    assert_non_null(stats);
    struct fake_cuda_stats st;
    stats(&st);
    const unsigned long allocs = st.device_allocs;
    assert_true(allocs >= 10);
    dlclose(h);
    dcp_engine_destroy(&e);
    for (unsigned long k = 1; k <= allocs; k++) {
        char v[32];
        snprintf(v, sizeof(v), "%lu", k);
        fake_env_set("FAKE_CUDA_FAIL_ALLOC", v);
        assert_int_equal(create(dep, &e), DCP_EDEVMEM);
        assert_null(e);
        assert_contains(dcp_last_error(), "memory");
    }
    dcp_deployment_destroy(&dep);
}

/* The KV arena takes the VMM path when the device supports it, cuMemAlloc otherwise. */
static void test_vmm_and_plain_arena(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_GQA, 2, 2, 4, 1, 64, DCP_COMM_A2A, DCP_DTYPE_BF16};
    dcp_deployment *dep = deployment(&s, DCP_BACKEND_CUDA, 0);
    for (int novmm = 0; novmm < 2; novmm++) {
        fake_env_reset();
        if (novmm)
            fake_env_set("FAKE_CUDA_NO_VMM", "1");
        dcp_engine *e = NULL;
        assert_int_equal(create(dep, &e), DCP_OK);
        void *h = dlopen(fake_cuda_path(), RTLD_NOW | RTLD_NOLOAD);
        fake_cuda_call_count_fn calls = (fake_cuda_call_count_fn)dlsym(h, "fake_cuda_call_count");
        assert_non_null(calls);
        if (novmm)
            assert_int_equal(calls("cuMemAddressReserve"), 0);
        else
            assert_int_equal(calls("cuMemAddressReserve"), 2); /* one arena per rank */
        struct run_io io = {0};
        assert_int_equal(run_engine(e, &io), DCP_OK);
        free_io(&io, 2);
        dlclose(h);
        dcp_engine_destroy(&e);
    }
    dcp_deployment_destroy(&dep);
}

/* A driver without the cuLibrary API loads the module with cuModuleLoadDataEx. */
static void test_module_api_fallback(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_MLA, 2, 2, 4, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16};
    dcp_deployment *dep = deployment(&s, DCP_BACKEND_CUDA, 0);
    fake_env_reset();
    fake_env_set("FAKE_CUDA_NO_LIBRARY_API", "1");
    dcp_engine *e = NULL;
    assert_int_equal(create(dep, &e), DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    assert_contains(in.backend_detail, "cuModuleLoadDataEx");
    struct run_io io = {0};
    assert_int_equal(run_engine(e, &io), DCP_OK);
    free_io(&io, 2);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* NCCL faults: an asynchronous error and a hung collective both end in an abort
 * of the communicator and a clear error, never a hang. */
static void test_nccl_faults(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_MLA, 2, 2, 4, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16};
    dcp_deployment *dep = deployment(&s, DCP_BACKEND_CUDA, 1.0);
    static const struct {
        const char *var;
        int status;
        const char *message;
    } faults[] = {
        {"FAKE_NCCL_ASYNC_ERROR", DCP_ENCCL, "ncclSystemError"},
        {"FAKE_NCCL_HANG", DCP_ETIMEOUT, "did not complete within"},
    };
    for (size_t f = 0; f < 2; f++) {
        fake_env_reset();
        fake_env_set("FAKE_CUDA_DEVICES", "2");
        fake_env_set(faults[f].var, "2");
        dcp_engine *e = NULL;
        assert_int_equal(create(dep, &e), DCP_OK);
        struct run_io io = {0};
        const int err = run_engine(e, &io);
        assert_int_equal(err, faults[f].status);
        assert_contains(dcp_last_error(), faults[f].message);
        assert_contains(dcp_last_error(), "aborted");
        free_io(&io, 2);
        dcp_engine_destroy(&e);
    }
    dcp_deployment_destroy(&dep);
}

/* ---- failures: hung device work, a failed rank, recovery --------------------------------- */

/* A test that would hang without the fix fails instead: SIGALRM ends the process. */
#define HANG_GUARD_S 60

/* A kernel that never finishes (FAKE_CUDA_HANG_LAUNCH: the first launch of the run,
 * on whichever rank comes first): the step fails within the bound
 * (runtime.cuda.nccl_timeout_s = 1 s), and dcp_rank_free and dcp_engine_destroy
 * return within a bound too, leaking what the hung work may still use and saying
 * so, instead of waiting for the stream for ever. NCCL (2 GPUs) and virtual ranks. */
static void test_hung_kernel_teardown_bounded(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_MLA, 2, 2, 4, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16};
    dcp_deployment *dep = deployment(&s, DCP_BACKEND_CUDA, 1.0);
    for (int devices = 1; devices <= 2; devices++) {
        fake_env_reset();
        fake_env_set("FAKE_CUDA_DEVICES", devices == 2 ? "2" : "1");
        fake_env_set("FAKE_CUDA_HANG_LAUNCH", "1");
        alarm(HANG_GUARD_S);
        dcp_engine *e = NULL;
        assert_int_equal(create(dep, &e), DCP_OK);
        struct dcp_engine_info in;
        dcp_engine_get_info(e, &in);
        assert_contains(in.backend_detail, devices == 2 ? "NCCL" : "virtual ranks");
        struct run_io io = {0};
        assert_int_equal(run_engine(e, &io), DCP_ETIMEOUT);
        assert_contains(dcp_last_error(), devices == 2 ? "did not complete within" : "did not finish within");
        /* The engine failed with it (engine.h, Errors): a rank function returns DCP_EABORTED
         * at once, naming the cause (it queued more work behind the hung kernel). */
        if (devices == 1) {
            const double t_failed = dcp_now_seconds();
            for (uint32_t i = 0; i < 2; i++) {
                assert_int_equal(dcp_rank_append_kv(dcp_engine_rank(e, i), 0, io.k[i], NULL), DCP_EABORTED);
                assert_contains(dcp_last_error(), "did not finish within");
            }
            assert_true(dcp_now_seconds() - t_failed < 0.5);
        }
        /* The next step is refused: the device still runs the hung work. */
        uint32_t id = 0, one = 1;
        assert_int_equal(dcp_seq_create(e, &id), DCP_OK);
        assert_int_equal(dcp_seq_extend(e, id, 1), DCP_OK);
        const struct dcp_batch b = {.num_seqs = 1, .seq_ids = &id, .q_lens = &one};
        assert_int_equal(dcp_engine_begin_step(e, &b), DCP_EABORTED);
        /* dcp_rank_free of the hung rank's buffer returns, and says it leaked it. */
        const double t0 = dcp_now_seconds();
        bool leaked = false;
        for (uint32_t i = 0; i < 2; i++) {
            dcp_rank_free(dcp_engine_rank(e, i), io.k[i]);
            leaked |= strstr(dcp_last_error(), "leaked") != NULL;
            io.k[i] = NULL;
        }
        assert_true(leaked);
        free_io(&io, 2);
        dcp_engine_destroy(&e);
        const double took = dcp_now_seconds() - t0;
        assert_null(e);
        assert_contains(dcp_last_error(), "leaked");
        /* One bound (1 s) for the whole teardown, not one per rank or buffer. */
        assert_true(took < 4.0);
        alarm(0);
    }
    dcp_deployment_destroy(&dep);
}

/* Rank 0 fails with an argument error inside dcp_engine_run while rank 1 waits for
 * it in the attention's first collective. */
struct fail_io {
    void *q[2], *o[2], *l[2];
    int result[2];
    char message[2][256];
};

static int fail_rank0_fn(dcp_rank *r, void *arg)
{
    struct fail_io *io = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    int err = i == 0 ? dcp_rank_attention(r, 99, io->q[i], io->o[i], io->l[i]) /* no layer 99 */
                     : dcp_rank_attention(r, 0, io->q[i], io->o[i], io->l[i]);
    if (!err)
        err = dcp_rank_synchronize(r);
    io->result[i] = err;
    snprintf(io->message[i], sizeof(io->message[i]), "%s", dcp_last_error());
    return err;
}

/* One sequence of 8 tokens (KV appended), a step querying its last token, and a
 * run of fail_rank0_fn: returns the run's status and how long it took. */
static int run_failing_step(dcp_engine *e, struct fail_io *io, uint32_t *seq, double *took)
{
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    const size_t f = sizeof(float);
    for (uint32_t i = 0; i < 2; i++) {
        dcp_rank *r = dcp_engine_rank(e, i);
        assert_int_equal(dcp_rank_alloc(r, in.q_heads_per_rank * in.qk_dim * f, &io->q[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, in.q_heads_per_rank * in.v_dim * f, &io->o[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, in.q_heads_per_rank * f, &io->l[i]), DCP_OK);
    }
    uint32_t one = 1;
    assert_int_equal(dcp_seq_create(e, seq), DCP_OK);
    assert_int_equal(dcp_seq_extend(e, *seq, 8), DCP_OK);
    const struct dcp_batch b = {.num_seqs = 1, .seq_ids = seq, .q_lens = &one};
    assert_int_equal(dcp_engine_begin_step(e, &b), DCP_OK);
    const double t0 = dcp_now_seconds();
    const int err = dcp_engine_run(e, fail_rank0_fn, io);
    *took = dcp_now_seconds() - t0;
    return err;
}

static void free_fail_io(dcp_engine *e, struct fail_io *io)
{
    for (uint32_t i = 0; i < 2; i++) {
        dcp_rank *r = dcp_engine_rank(e, i);
        dcp_rank_free(r, io->q[i]);
        dcp_rank_free(r, io->o[i]);
        dcp_rank_free(r, io->l[i]);
    }
}

/* NCCL, one process, two GPUs, timeouts of 20 s (the library's and the fake's
 * rendezvous): when rank 0 fails, rank 1's communicator is aborted at once, so the
 * run returns rank 0's error in far less than the timeout, rank 1 says it was
 * aborted, and the engine is failed (NCCL communicators are not rebuilt). */
static void test_failed_rank_aborts_nccl_peers(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_MLA, 2, 2, 4, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16};
    dcp_deployment *dep = deployment(&s, DCP_BACKEND_CUDA, 20.0);
    fake_env_reset();
    fake_env_set("FAKE_CUDA_DEVICES", "2");
    fake_env_set("FAKE_NCCL_TIMEOUT", "20");
    alarm(HANG_GUARD_S);
    dcp_engine *e = NULL;
    assert_int_equal(create(dep, &e), DCP_OK);
    struct fail_io io = {0};
    uint32_t seq = 0;
    double took = 0;
    assert_int_equal(run_failing_step(e, &io, &seq, &took), DCP_EINVAL);
    assert_contains(dcp_last_error(), "rank 0");
    assert_contains(dcp_last_error(), "layer 99");
    assert_true(io.result[1] == DCP_EABORTED || io.result[1] == DCP_ENCCL);
    assert_contains(io.message[1], "ommunicator aborted");
    assert_true(took < 5.0); /* the timeouts are 20 s */
    uint32_t one = 1;
    const struct dcp_batch b = {.num_seqs = 1, .seq_ids = &seq, .q_lens = &one};
    assert_int_equal(dcp_engine_begin_step(e, &b), DCP_EABORTED);
    assert_contains(dcp_last_error(), "cannot be restarted");
    free_fail_io(e, &io);
    const double t0 = dcp_now_seconds();
    dcp_engine_destroy(&e);
    assert_true(dcp_now_seconds() - t0 < 5.0);
    alarm(0);
    dcp_deployment_destroy(&dep);
}

/* Virtual ranks (two on one GPU): an argument error on rank 0 inside dcp_engine_run
 * aborts the step (rank 1 leaves its collective with DCP_EABORTED), and the engine
 * recovers: the next steps run, and give what the host backend gives. */
static void test_virtual_argument_error_recovers(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct shape s = {DCP_ATTN_MLA, 2, 2, 4, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16};
    dcp_deployment *dep = deployment(&s, DCP_BACKEND_CUDA, 5.0);
    dcp_deployment *hdep = deployment(&s, DCP_BACKEND_HOST, 0);
    fake_env_reset();
    alarm(HANG_GUARD_S);
    dcp_engine *e = NULL, *h = NULL;
    assert_int_equal(create(dep, &e), DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    assert_contains(in.backend_detail, "virtual ranks");
    assert_int_equal(create(hdep, &h), DCP_OK);
    /* The same history on both engines (sequence ids key the synthetic data). */
    dcp_engine *both[2] = {e, h};
    for (int k = 0; k < 2; k++) {
        struct fail_io io = {0};
        uint32_t seq = 0;
        double took = 0;
        assert_int_equal(run_failing_step(both[k], &io, &seq, &took), DCP_EINVAL);
        assert_contains(dcp_last_error(), "rank 0");
        assert_int_equal(io.result[1], DCP_EABORTED);
        assert_true(took < 10.0); /* the barrier's wait was cut short, not timed out */
        free_fail_io(both[k], &io);
        assert_int_equal(dcp_seq_release(both[k], seq), DCP_OK);
    }
    struct run_io a = {0}, ref = {0};
    assert_int_equal(run_engine(e, &a), DCP_OK);
    assert_int_equal(run_engine(h, &ref), DCP_OK);
    const double worst = worst_difference(&a, &ref, &in);
    if (!(worst <= 1e-5))
        fprintf(stderr, "after recovery |cuda - host| = %g\n", worst);
    assert_true(worst <= 1e-5);
    free_io(&a, 2);
    free_io(&ref, 2);
    dcp_engine_destroy(&e);
    dcp_engine_destroy(&h);
    alarm(0);
    dcp_deployment_destroy(&dep);
    dcp_deployment_destroy(&hdep);
}

/* backend cuda without a usable driver is an error; auto falls back to the host
 * with a one-line notice; a shape no GPU kernel covers is reported as such. */
static void test_unavailable(void **state)
{
    (void)state;
    fake_env_reset();
    const struct shape s = {DCP_ATTN_MLA, 2, 2, 4, 1, 0, DCP_COMM_A2A, DCP_DTYPE_BF16};
    const char *saved = getenv("DCP_CUDA_LIBRARY");
    char keep[4096];
    snprintf(keep, sizeof(keep), "%s", saved ? saved : "");
    setenv("DCP_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    dcp_deployment *cd = deployment(&s, DCP_BACKEND_CUDA, 0), *ad = deployment(&s, DCP_BACKEND_AUTO, 0);
    dcp_engine *e = NULL;
    /* A build without kernels refuses the CUDA backend before it looks for a driver. */
    assert_int_equal(create(cd, &e), dcp_embedded_module_count == 0 ? DCP_ENOTSUP : DCP_ENODRIVER);
    assert_int_equal(create(ad, &e), DCP_OK);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    assert_string_equal(in.backend, "host");
    assert_contains(in.backend_notice, "using the host backend");
    dcp_engine_destroy(&e);
    setenv("DCP_CUDA_LIBRARY", keep, 1);
    dcp_deployment_destroy(&cd);
    dcp_deployment_destroy(&ad);

    if (dcp_embedded_module_count == 0)
        return;
    const struct shape odd = {DCP_ATTN_GQA, 2, 1, 4, 2, 48, DCP_COMM_A2A, DCP_DTYPE_BF16};
    cd = deployment(&odd, DCP_BACKEND_CUDA, 0);
    assert_int_equal(create(cd, &e), DCP_ENOTSUP);
    assert_contains(dcp_last_error(), "no GPU attention kernel");
    dcp_deployment_destroy(&cd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_host),
        cmocka_unit_test(test_uploads_ordered),
        cmocka_unit_test(test_nan_in_cache),
        cmocka_unit_test(test_staging_reuse_waits),
        cmocka_unit_test(test_split_kv_follows_occupancy),
        cmocka_unit_test(test_launch_checks),
        cmocka_unit_test(test_unservable_launch_refused),
        cmocka_unit_test(test_every_allocation_can_fail),
        cmocka_unit_test(test_vmm_and_plain_arena),
        cmocka_unit_test(test_module_api_fallback),
        cmocka_unit_test(test_nccl_faults),
        cmocka_unit_test(test_hung_kernel_teardown_bounded),
        cmocka_unit_test(test_failed_rank_aborts_nccl_peers),
        cmocka_unit_test(test_virtual_argument_error_recovers),
        cmocka_unit_test(test_unavailable),
    };
    const char *only = getenv("DCP_TEST_FILTER"); /* e.g. test_hung_* while debugging */
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
