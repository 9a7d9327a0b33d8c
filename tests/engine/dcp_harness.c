/* dcp_harness.c: lockstep DCP/baseline engines on shared data, checked against the oracle. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_harness.h"
#include "dcp_kernels/convert.h"
#include "oracle.h"
#include "test_util.h"

/* Only to read the split-KV factor the engine chose for a step (coverage, not
 * correctness): the public info does not report it. */
#include "engine/engine_internal.h"
#include "util/util.h"

#define MAX_SEQ_HANDLES 64
#define OUT_TOL_FP32 1e-5
#define OUT_TOL_16BIT 1e-2
#define LSE_TOL 1e-4

static struct harness_stats stats;

/** One rank's buffers: backend memory per kind covering all layers, and host staging. */
struct rank_io {
    uint32_t q0, kv0;     /* first query head and KV head of the rank */
    float *dq, *dk, *dv;  /* backend [layers][T][heads][dim]; dq with replicate_q [layers][dcp][Tq][H_l][qk] */
    float *dout, *dlse;   /* backend [layers][Tq][H_l][out_dim], [layers][Tq][H_l] */
    float *stage;         /* host: one layer's packed input */
    float *out, *lse;     /* host copies of dout, dlse */
};

/** One engine and its ranks' buffers. */
struct side {
    struct harness *h;
    dcp_engine *e;
    uint32_t dcp;
    bool replicate_q;     /* the engine takes all gathered heads' queries */
    struct rank_io io[8];
};

/** Host copy of one sequence: the values its cache holds, by global position. */
struct mirror {
    bool live;
    uint32_t id[2];
    uint64_t len;
    double *k, *v; /* [layers][max_context][kv_heads][qk or v] */
};

struct harness {
    char label[200];
    struct harness_config cfg;
    dcp_deployment *dep;
    struct side side[2];
    uint32_t nsides;
    struct test_rng rng;
    /* shape */
    uint32_t tp, dcp, interleave, layers, qh, kvh, hl, kvpr, qk, vd, dtype;
    uint32_t od;              /* output row length: vd, or v_head_dim with merge_after_uv */
    bool mla, merge_uv;
    float *w_uv;              /* merge_after_uv: [layers][qh][vd][od] */
    const float *w_uv_layers[64];
    double *w_uv64;           /* the same in float64, for the oracle */
    uint32_t act;             /* activation dtype (enum dcpk_dtype) of q, k, v, out */
    uint32_t wire;            /* the DCP engine's wire dtype (parallel.comm_dtype) when dcp > 1, else act */
    bool q_on_wire;           /* its queries are gathered in the wire dtype (dcp > 1 without replicate_q) */
    double wire_tol;          /* what the wire's roundings add to the relative L2 bound (harness_create) */
    size_t asz;               /* its bytes */
    float kv_scale;
    double scale;
    uint32_t head_rank[512]; /* query head -> tp rank that owns it */
    /* the current step */
    float *q_in, *k_in, *v_in; /* [layers][max_step][heads][dim], all heads */
    unsigned char *poison;     /* 0xff bytes (NaN in every dtype) to pre-fill outputs with */
    uint32_t tokens;
    bool attend, with_lse;
    uint64_t steps;
    /* the planted NaN (harness_poison) */
    bool poison_on, poison_value;
    uint32_t poison_seq;
    uint64_t poison_pos;
    struct mirror seqs[MAX_SEQ_HANDLES];
    uint32_t nseqs;
};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    assert_non_null(p);
    return p;
}

static double out_tolerance(uint32_t dtype)
{
    return dtype == DCP_DTYPE_FP32 ? OUT_TOL_FP32 : OUT_TOL_16BIT;
}

/** Unit roundoff of an activation dtype: the error one rounding of the output adds (relative). */
static double act_roundoff(uint32_t act)
{
    return act == DCPK_BF16 ? 0x1p-8 : act == DCPK_FP16 ? 0x1p-11 : 0.0;
}

/** x rounded to the activation dtype, as the engine reads it. */
static float act_round(uint32_t act, float x)
{
    unsigned char bits[4];
    dcpk_store_as(bits, 0, act, x);
    return dcpk_load_as_f32(bits, 0, act);
}

/* ---- per-rank work (runs on the rank's thread) ----------------------------- */

/* dst[t][j][:] = src[t][first + j][:] for j < count: one rank's heads of every token. */
static void pack_heads(float *dst, const float *src, uint32_t tokens, uint32_t heads, uint32_t first,
                       uint32_t count, uint32_t dim)
{
    for (uint32_t t = 0; t < tokens; t++)
        memcpy(dst + (size_t)t * count * dim, src + ((size_t)t * heads + first) * dim,
               (size_t)count * dim * sizeof(float));
}

/* Packs one rank's heads and uploads them in the activation dtype (converted in place:
 * element i moves down from byte 4i to byte i * asz). */
static int upload_heads(const struct harness *h, dcp_rank *r, float *stage, float *dst, const float *src,
                        uint32_t tokens, uint32_t heads, uint32_t first, uint32_t count, uint32_t dim)
{
    pack_heads(stage, src, tokens, heads, first, count, dim);
    const size_t n = (size_t)tokens * count * dim;
    for (size_t i = 0; h->act != DCPK_FP32 && i < n; i++)
        dcpk_store_as(stage, i, h->act, stage[i]);
    return dcp_rank_upload(r, dst, stage, n * h->asz);
}

/* The downloaded outputs of every layer (layer l at float offset l * per_layer, n
 * elements of the activation dtype) as fp32, in place: from the last element down,
 * so each element is read before the wider write reaches it. */
static void widen_outputs(const struct harness *h, float *out, size_t per_layer, size_t n)
{
    for (uint32_t l = 0; h->act != DCPK_FP32 && l < h->layers; l++)
        for (size_t i = n; i-- > 0;)
            out[l * per_layer + i] = dcpk_load_as_f32(out + l * per_layer, i, h->act);
}

/* Appends every layer's K/V of the step and, when the step attends, runs attention
 * into outputs pre-filled with NaN (a row nobody writes shows up). */
static int rank_step(dcp_rank *r, void *arg)
{
    struct side *sd = arg;
    const struct harness *h = sd->h;
    struct rank_io *io = &sd->io[dcp_rank_tp_rank(r)];
    const uint32_t T = h->tokens, S = h->cfg.max_step_tokens, Q = h->cfg.max_query_tokens;
    const size_t out_layer = (size_t)Q * h->hl * h->od, lse_layer = (size_t)Q * h->hl;
    int err;
    for (uint32_t l = 0; l < h->layers; l++) {
        float *dk = io->dk + (size_t)l * S * h->kvpr * h->qk;
        float *dv = h->mla ? NULL : io->dv + (size_t)l * S * h->kvpr * h->vd;
        if ((err = upload_heads(h, r, io->stage, dk, h->k_in + (size_t)l * S * h->kvh * h->qk, T, h->kvh,
                                io->kv0, h->kvpr, h->qk)))
            return err;
        if (dv && (err = upload_heads(h, r, io->stage, dv, h->v_in + (size_t)l * S * h->kvh * h->vd, T,
                                      h->kvh, io->kv0, h->kvpr, h->vd)))
            return err;
        if ((err = dcp_rank_append_kv(r, l, dk, dv)))
            return err;
        if (!h->attend)
            continue;
        /* replicate_q: chunk c holds group rank c's heads, [dcp][T][H_l][qk]. */
        const uint32_t chunks = sd->replicate_q ? sd->dcp : 1;
        const uint32_t group0 = dcp_rank_tp_rank(r) - dcp_rank_group_rank(r);
        float *dq = io->dq + (size_t)l * chunks * Q * h->hl * h->qk;
        float *dout = io->dout + l * out_layer, *dlse = io->dlse + l * lse_layer;
        for (uint32_t c = 0; c < chunks; c++)
            if ((err = upload_heads(h, r, io->stage, (float *)((char *)dq + (size_t)c * T * h->hl * h->qk * h->asz),
                                    h->q_in + (size_t)l * S * h->qh * h->qk, T, h->qh,
                                    sd->replicate_q ? sd->io[group0 + c].q0 : io->q0, h->hl, h->qk)))
                return err;
        if ((err = dcp_rank_upload(r, dout, h->poison, (size_t)T * h->hl * h->od * h->asz)) ||
            (err = dcp_rank_upload(r, dlse, h->poison, (size_t)T * h->hl * sizeof(float))))
            return err;
        if ((err = dcp_rank_attention(r, l, dq, dout, h->with_lse ? dlse : NULL)))
            return err;
    }
    if (!h->attend)
        return DCP_OK;
    /* One download per kind after all layers: it waits for the queued work. */
    if ((err = dcp_rank_download(r, io->out, io->dout, h->layers * out_layer * sizeof(float))))
        return err;
    widen_outputs(h, io->out, out_layer, (size_t)T * h->hl * h->od);
    return dcp_rank_download(r, io->lse, io->dlse, h->layers * lse_layer * sizeof(float));
}

/* ---- setup ------------------------------------------------------------------ */

static void side_alloc(struct harness *h, struct side *sd)
{
    const size_t S = h->cfg.max_step_tokens, Q = h->cfg.max_query_tokens, L = h->layers, f = sizeof(float);
    struct dcp_engine_info in;
    dcp_engine_get_info(sd->e, &in);
    assert_true(in.num_local_ranks <= 8);
    sd->replicate_q = in.replicate_q;
    assert_true(in.replicate_q == (dcp_deployment_config(h->dep)->parallel.replicate_q && in.dcp > 1));
    assert_true(in.merge_after_uv == h->merge_uv);
    assert_int_equal(in.out_dim, h->od);
    const size_t chunks = in.replicate_q ? in.dcp : 1;
    for (uint32_t i = 0; i < in.num_local_ranks; i++) {
        dcp_rank *r = dcp_engine_rank(sd->e, i);
        assert_int_equal(dcp_rank_tp_rank(r), i);
        struct rank_io *io = &sd->io[i];
        dcp_rank_head_offsets(r, &io->q0, &io->kv0);
        assert_true(io->kv0 + h->kvpr <= h->kvh);
        assert_int_equal(dcp_rank_alloc(r, L * S * h->kvpr * h->qk * f, (void **)&io->dk), DCP_OK);
        if (!h->mla)
            assert_int_equal(dcp_rank_alloc(r, L * S * h->kvpr * h->vd * f, (void **)&io->dv), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, L * chunks * Q * h->hl * h->qk * f, (void **)&io->dq), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, L * Q * h->hl * h->od * f, (void **)&io->dout), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, L * Q * h->hl * f, (void **)&io->dlse), DCP_OK);
        const size_t stage = DCP_MAX(S * h->kvpr * DCP_MAX(h->qk, h->vd), Q * h->hl * h->qk);
        io->stage = xcalloc(stage, f);
        io->out = xcalloc(L * Q * h->hl * h->od, f);
        io->lse = xcalloc(L * Q * h->hl, f);
    }
}

static void side_free(struct side *sd)
{
    if (!sd->e)
        return;
    struct dcp_engine_info in;
    dcp_engine_get_info(sd->e, &in);
    for (uint32_t i = 0; i < in.num_local_ranks; i++) {
        dcp_rank *r = dcp_engine_rank(sd->e, i);
        struct rank_io *io = &sd->io[i];
        dcp_rank_free(r, io->dq);
        dcp_rank_free(r, io->dk);
        dcp_rank_free(r, io->dv);
        dcp_rank_free(r, io->dout);
        dcp_rank_free(r, io->dlse);
        free(io->stage);
        free(io->out);
        free(io->lse);
    }
    dcp_engine_destroy(&sd->e);
}

/* Reads the shape from the DCP engine's info and checks that the engine agrees with it. */
static void take_shape(struct harness *h)
{
    const struct dcp_config *cfg = dcp_deployment_config(h->dep);
    struct dcp_engine_info in;
    dcp_engine_get_info(h->side[0].e, &in);
    if (h->cfg.shape.backend != DCP_BACKEND_AUTO)
        assert_string_equal(in.backend, dcp_backend_kind_name(h->cfg.shape.backend));
    assert_int_equal(in.tp, h->cfg.shape.tp);
    assert_int_equal(in.dcp, h->cfg.shape.dcp);
    assert_int_equal(in.num_local_ranks, in.tp);
    assert_int_equal(in.tokens_per_block, (uint64_t)in.block_size * in.dcp);
    h->tp = in.tp;
    h->dcp = in.dcp;
    h->interleave = cfg->parallel.interleave;
    h->layers = in.num_layers;
    h->mla = cfg->model.attention == DCP_ATTN_MLA;
    h->qh = cfg->model.num_q_heads;
    h->kvh = cfg->model.num_kv_heads;
    h->hl = in.q_heads_per_rank;
    h->kvpr = in.kv_heads_per_rank;
    h->qk = in.qk_dim;
    h->vd = in.v_dim;
    h->dtype = cfg->model.kv_dtype;
    h->kv_scale = (float)cfg->model.kv_scale;
    h->scale = (double)(float)cfg->model.softmax_scale; /* the engine's fp32 scale */
    assert_int_equal(h->hl * h->tp, h->qh);
    assert_true(h->qh <= 512);
}

/* Every query head is owned by exactly one rank, and its KV head is the oracle's. */
static void map_heads(struct harness *h)
{
    for (uint32_t g = 0; g < h->qh; g++)
        h->head_rank[g] = UINT32_MAX;
    for (uint32_t r = 0; r < h->tp; r++) {
        const struct rank_io *io = &h->side[0].io[r];
        for (uint32_t j = 0; j < h->hl; j++) {
            assert_int_equal(h->head_rank[io->q0 + j], UINT32_MAX);
            h->head_rank[io->q0 + j] = r;
        }
    }
}

/* merge_after_uv: a random W_UV per layer over all heads (distinct per head, so a
 * head mixed up shows), scaled so projected rows stay of the latent's magnitude. */
static void make_w_uv(struct harness *h)
{
    const struct dcp_config *dc = dcp_deployment_config(h->dep);
    dcp_model_attention_dims(&dc->model, NULL, &h->od);
    h->merge_uv = dc->parallel.merge_after_uv;
    if (!h->merge_uv)
        return;
    const uint32_t L = dc->model.num_layers, vd = h->od, od = dc->model.v_head_dim;
    assert_true(L <= 64);
    const size_t per_layer = (size_t)dc->model.num_q_heads * vd * od;
    h->w_uv = xcalloc(L * per_layer, sizeof(float));
    h->w_uv64 = xcalloc(L * per_layer, sizeof(double));
    const double amplitude = 2.0 / sqrt((double)vd);
    for (size_t i = 0; i < L * per_layer; i++) {
        h->w_uv[i] = (float)(amplitude * test_rng_unit(&h->rng));
        h->w_uv64[i] = h->w_uv[i];
    }
    for (uint32_t l = 0; l < L; l++)
        h->w_uv_layers[l] = h->w_uv + l * per_layer;
    h->od = od;
}

struct harness *harness_create(const struct harness_config *cfg, uint64_t seed, const char *label)
{
    struct harness *h = xcalloc(1, sizeof(*h));
    h->cfg = *cfg;
    fixture_adapt_to_backend(&h->cfg.shape);
    cfg = &h->cfg;
    snprintf(h->label, sizeof(h->label), "%s", label);
    test_rng_seed(&h->rng, seed);
    h->dep = fixture_deployment(&cfg->shape);
    make_w_uv(h);
    const uint32_t N = cfg->shape.dcp, B = cfg->shape.block_size;
    const uint64_t blocks = cfg->num_blocks
                                ? cfg->num_blocks
                                : cfg->max_live * dcp_div_ceil_u64(cfg->max_context, (uint64_t)B * N);
    struct fixture_limits lim = {
        .num_blocks = blocks,
        .max_batch = cfg->max_batch,
        .max_query_tokens = cfg->max_query_tokens,
        .max_step_tokens = cfg->max_step_tokens,
        .max_context = cfg->max_context,
        .w_uv = h->merge_uv ? h->w_uv_layers : NULL,
        .profile = cfg->profile,
        .act_dtype = cfg->act_dtype,
    };
    h->act = (uint32_t)cfg->act_dtype;
    h->asz = dcpk_dtype_size(h->act);
    /* A 16-bit wire rounds each partial output once to it (a2a: the attention's store;
     * ag_rs: that store, the LSE scaling's store and the ReduceScatter's sum: 3), each
     * within u relative per element. Summed over N partials of random sign the L2 error
     * of the merged row stays within rounds * sqrt(N) * u of it (Cauchy-Schwarz over the
     * partials, each no larger than the merged row for these inputs). The queries are
     * made representable in the wire dtype (generate_step), so the oracle sees exactly
     * what the DCP engine attends and the LSE bound is unchanged. */
    const struct dcp_config *dc = dcp_deployment_config(h->dep);
    h->wire = N > 1 ? (uint32_t)dcp_wire_dtype_of(dc->parallel.comm_dtype, (enum dcp_dtype)h->act) : h->act;
    h->q_on_wire = N > 1 && !dc->parallel.replicate_q;
    const double rounds = dc->parallel.comm == DCP_COMM_AG_RS ? 3.0 : 1.0;
    h->wire_tol = N > 1 ? rounds * sqrt((double)N) * act_roundoff(h->wire) : 0.0;
    h->side[0].e = fixture_engine_with(h->dep, &lim);
    h->side[0].e->split_override = cfg->splits;
    h->side[0].dcp = N;
    h->nsides = 1;
    if (cfg->baseline && N > 1) {
        lim.dcp = 1;
        lim.num_blocks = blocks * N; /* the same tokens */
        h->side[1].e = fixture_engine_with(h->dep, &lim);
        h->side[1].dcp = 1;
        struct dcp_engine_info in;
        dcp_engine_get_info(h->side[1].e, &in);
        assert_int_equal(in.dcp, 1);
        h->nsides = 2;
    }
    take_shape(h);
    for (uint32_t s = 0; s < h->nsides; s++) {
        h->side[s].h = h;
        side_alloc(h, &h->side[s]);
    }
    map_heads(h);
    const size_t S = cfg->max_step_tokens, L = h->layers;
    h->q_in = xcalloc(L * S * h->qh * h->qk, sizeof(float));
    h->k_in = xcalloc(L * S * h->kvh * h->qk, sizeof(float));
    h->v_in = xcalloc(L * S * h->kvh * h->vd, sizeof(float));
    const size_t poison = (size_t)cfg->max_query_tokens * h->hl * DCP_MAX(h->vd, h->od);
    h->poison = xcalloc(poison, sizeof(float));
    memset(h->poison, 0xff, poison * sizeof(float));
    return h;
}

void harness_destroy(struct harness **hp)
{
    struct harness *h = *hp;
    if (!h)
        return;
    for (uint32_t s = 0; s < h->nsides; s++)
        side_free(&h->side[s]);
    for (uint32_t i = 0; i < h->nseqs; i++) {
        free(h->seqs[i].k);
        free(h->seqs[i].v);
    }
    dcp_deployment_destroy(&h->dep);
    free(h->w_uv);
    free(h->w_uv64);
    free(h->q_in);
    free(h->k_in);
    free(h->v_in);
    free(h->poison);
    free(h);
    *hp = NULL;
}

const dcp_deployment *harness_deployment(const struct harness *h)
{
    return h->dep;
}

dcp_engine *harness_engine(struct harness *h, bool baseline)
{
    return baseline ? (h->nsides > 1 ? h->side[1].e : NULL) : h->side[0].e;
}

uint64_t harness_tokens_per_block(const struct harness *h)
{
    return (uint64_t)h->cfg.shape.block_size * h->dcp;
}

/* ---- sequences ------------------------------------------------------------- */

static size_t k_stride(const struct harness *h) { return (size_t)h->kvh * h->qk; }
static size_t v_stride(const struct harness *h) { return (size_t)h->kvh * h->vd; }

static struct mirror *live_seq(struct harness *h, uint32_t seq)
{
    assert_true(seq < h->nseqs);
    assert_true(h->seqs[seq].live);
    return &h->seqs[seq];
}

static uint32_t new_mirror(struct harness *h)
{
    assert_true(h->nseqs < MAX_SEQ_HANDLES);
    struct mirror *m = &h->seqs[h->nseqs];
    const size_t rows = (size_t)h->layers * h->cfg.max_context;
    m->k = xcalloc(rows * k_stride(h), sizeof(double));
    m->v = xcalloc(rows * v_stride(h), sizeof(double));
    m->live = true;
    return h->nseqs++;
}

static void free_mirror(struct mirror *m)
{
    free(m->k);
    free(m->v);
    m->k = m->v = NULL;
    m->live = false;
}

void harness_poison(struct harness *h, uint32_t seq, uint64_t pos, bool value)
{
    assert_true(pos >= live_seq(h, seq)->len); /* appended by a later step */
    assert_true(pos < h->cfg.max_context);
    h->poison_on = true;
    h->poison_seq = seq;
    h->poison_pos = pos;
    h->poison_value = value;
}

uint32_t harness_seq_create(struct harness *h)
{
    const uint32_t seq = new_mirror(h);
    for (uint32_t s = 0; s < h->nsides; s++)
        assert_int_equal(dcp_seq_create(h->side[s].e, &h->seqs[seq].id[s]), DCP_OK);
    return seq;
}

void harness_seq_release(struct harness *h, uint32_t seq)
{
    struct mirror *m = live_seq(h, seq);
    for (uint32_t s = 0; s < h->nsides; s++)
        assert_int_equal(dcp_seq_release(h->side[s].e, m->id[s]), DCP_OK);
    free_mirror(m);
}

void harness_seq_truncate(struct harness *h, uint32_t seq, uint64_t len)
{
    struct mirror *m = live_seq(h, seq);
    for (uint32_t s = 0; s < h->nsides; s++) {
        assert_int_equal(dcp_seq_truncate(h->side[s].e, m->id[s], len), DCP_OK);
        assert_int_equal(dcp_seq_length(h->side[s].e, m->id[s]), len);
    }
    m->len = len;
}

uint32_t harness_seq_fork(struct harness *h, uint32_t seq)
{
    const uint32_t child = new_mirror(h);
    struct mirror *src = live_seq(h, seq), *dst = &h->seqs[child];
    for (uint32_t s = 0; s < h->nsides; s++) {
        assert_int_equal(dcp_seq_fork(h->side[s].e, src->id[s], &dst->id[s]), DCP_OK);
        assert_int_equal(dcp_seq_length(h->side[s].e, dst->id[s]), src->len);
    }
    const size_t rows = (size_t)h->layers * h->cfg.max_context;
    memcpy(dst->k, src->k, rows * k_stride(h) * sizeof(double));
    memcpy(dst->v, src->v, rows * v_stride(h) * sizeof(double));
    dst->len = src->len;
    return child;
}

uint32_t harness_seq_id(const struct harness *h, uint32_t seq, bool baseline)
{
    return h->seqs[seq].id[baseline && h->nsides > 1 ? 1 : 0];
}

uint64_t harness_seq_length(const struct harness *h, uint32_t seq)
{
    return h->seqs[seq].len;
}

/* ---- one step -------------------------------------------------------------- */

/* The planted NaN, if token t of the step (position pos of seq) is its place: one
 * element of the K or V row of every KV head of one layer's inputs k and v. */
static void plant_nan(const struct harness *h, uint32_t seq, uint64_t pos, float *k, float *v, uint32_t t)
{
    if (!h->poison_on || seq != h->poison_seq || pos != h->poison_pos)
        return;
    const uint32_t d = (uint32_t)(pos % (h->poison_value ? h->vd : h->qk)); /* MLA: below vd, the latent part */
    for (uint32_t kvh = 0; kvh < h->kvh; kvh++) {
        if (h->poison_value && !h->mla)
            v[t * v_stride(h) + (size_t)kvh * h->vd + d] = NAN;
        else
            k[t * k_stride(h) + (size_t)kvh * h->qk + d] = NAN;
    }
}

/* Fresh K/V (and queries) for the step's tokens; the mirror takes the cached values. */
static void generate_step(struct harness *h, uint32_t count, const uint32_t *seqs, const uint32_t *grow)
{
    const size_t S = h->cfg.max_step_tokens;
    const float inv_scale = 1.0f / h->kv_scale;
    for (uint32_t l = 0; l < h->layers; l++) {
        float *k = h->k_in + l * S * k_stride(h), *v = h->v_in + l * S * v_stride(h);
        float *q = h->q_in + l * S * h->qh * h->qk;
        for (size_t i = 0; i < h->tokens * k_stride(h); i++)
            k[i] = (float)test_rng_unit(&h->rng);
        if (!h->mla)
            for (size_t i = 0; i < h->tokens * v_stride(h); i++)
                v[i] = (float)test_rng_unit(&h->rng);
        for (size_t i = 0; i < (size_t)h->tokens * h->qh * h->qk; i++)
            q[i] = (float)(2.0 * test_rng_unit(&h->rng)); /* peaky enough to weigh keys unevenly */
        /* Queries gathered in another (16-bit) wire dtype: representable in it too, so
         * the conversion before the gather is exact (a bf16 value of magnitude at least
         * 2^-14, fp16's smallest normal, is an fp16 value; smaller ones become 0). */
        for (size_t i = 0; h->q_on_wire && h->wire != h->act && h->wire != DCPK_FP32 &&
                           i < (size_t)h->tokens * h->qh * h->qk; i++) {
            q[i] = act_round(h->wire, q[i]);
            q[i] = fabsf(q[i]) < 0x1p-14f ? 0.0f : q[i];
        }
        /* The values the engine reads: rounded to the activation dtype. */
        for (size_t i = 0; h->act != DCPK_FP32 && i < h->tokens * k_stride(h); i++)
            k[i] = act_round(h->act, k[i]);
        for (size_t i = 0; h->act != DCPK_FP32 && !h->mla && i < h->tokens * v_stride(h); i++)
            v[i] = act_round(h->act, v[i]);
        for (size_t i = 0; h->act != DCPK_FP32 && i < (size_t)h->tokens * h->qh * h->qk; i++)
            q[i] = act_round(h->act, q[i]);
        uint32_t t = 0;
        for (uint32_t i = 0; i < count; i++) {
            struct mirror *m = &h->seqs[seqs[i]];
            for (uint64_t pos = m->len - grow[i]; pos < m->len; pos++, t++) {
                plant_nan(h, seqs[i], pos, k, v, t);
                const size_t row = (size_t)l * h->cfg.max_context + pos;
                double *mk = m->k + row * k_stride(h), *mv = m->v + row * v_stride(h);
                oracle_quantize_array(mk, k + t * k_stride(h), k_stride(h), h->dtype, inv_scale, h->kv_scale);
                if (h->mla) /* V is the latent part of the cached K row */
                    memcpy(mv, mk, h->vd * sizeof(double));
                else
                    oracle_quantize_array(mv, v + t * v_stride(h), v_stride(h), h->dtype, inv_scale,
                                          h->kv_scale);
            }
        }
    }
}

/* A side's output rows for tokens [t0, t0 + n) of a layer, all heads: [n][qh][vd] and [n][qh]. */
static void gather_side(const struct harness *h, const struct side *sd, uint32_t layer, uint32_t t0,
                        uint32_t n, double *out, double *lse)
{
    const size_t Q = h->cfg.max_query_tokens;
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t g = 0; g < h->qh; g++) {
            const struct rank_io *io = &sd->io[h->head_rank[g]];
            const size_t row = ((size_t)layer * Q + t0 + t) * h->hl + (g - io->q0);
            for (uint32_t d = 0; d < h->od; d++)
                out[((size_t)t * h->qh + g) * h->od + d] = io->out[row * h->od + d];
            lse[(size_t)t * h->qh + g] = io->lse[row];
        }
}

/* Marks the rows the oracle makes NaN (a planted NaN reached them) and sets them
 * to 0, so the error measures compare the finite rows only. Returns their count. */
static size_t mask_nan_rows(const struct harness *h, double *ref, double *ref_lse, bool *nan, size_t rows)
{
    size_t count = 0;
    for (size_t i = 0; i < rows; i++) {
        nan[i] = isnan(ref_lse[i]);
        if (!nan[i])
            continue;
        count++;
        ref_lse[i] = 0.0;
        for (size_t d = 0; d < h->od; d++)
            ref[i * h->od + d] = 0.0;
    }
    return count;
}

/* A side's result has NaN exactly in the marked rows, in the LSE and every output
 * element, and is finite elsewhere; its NaN rows are then set to 0 like the oracle's. */
static void check_nan_rows(const struct harness *h, const char *what, double *out, double *lse, const bool *nan,
                           size_t rows)
{
    for (size_t i = 0; i < rows; i++) {
        for (size_t d = 0; d < h->od; d++)
            if ((bool)isnan(out[i * h->od + d]) != nan[i])
                fail_msg("%s: %s: output %g at row %zu dim %zu where the oracle's row is %s (step %llu)", h->label,
                         what, out[i * h->od + d], i, d, nan[i] ? "NaN" : "finite", (unsigned long long)h->steps);
        /* Every query sees at least its own key, so its LSE is finite unless NaN. */
        if (h->with_lse && (nan[i] ? !isnan(lse[i]) : !isfinite(lse[i])))
            fail_msg("%s: %s: lse %g at row %zu where the oracle's row is %s (step %llu)", h->label, what, lse[i],
                     i, nan[i] ? "NaN" : "finite", (unsigned long long)h->steps);
        if (!nan[i])
            continue;
        lse[i] = 0.0;
        for (size_t d = 0; d < h->od; d++)
            out[i * h->od + d] = 0.0;
    }
}

static double worst_lse_error(const double *ref, const double *got, size_t rows)
{
    double worst = 0.0;
    for (size_t i = 0; i < rows; i++)
        worst = DCP_MAX(worst, fabs(got[i] - ref[i]) / (1.0 + fabs(ref[i])));
    return worst;
}

/** Float64 buffers of one sequence's check: queries, the oracle's and each side's results. */
struct check_buffers {
    double *q;
    double *latent;          /* the oracle's attention output [rows][vd] (projected into ref with W_UV) */
    uint32_t *head_of;       /* [rows]: the global head of each row */
    double *ref, *ref_lse;
    bool *nan;               /* rows the oracle makes NaN */
    double *out[2], *lse[2]; /* DCP engine, baseline */
};

/* One sequence's result of one layer: every side against the oracle, DCP against the baseline. */
static void check_sequence(struct harness *h, const struct mirror *m, uint32_t layer, uint32_t t0, uint32_t n,
                           const struct check_buffers *b)
{
    const size_t S = h->cfg.max_step_tokens, rows = (size_t)n * h->qh;
    const float *qs = h->q_in + ((size_t)layer * S + t0) * h->qh * h->qk;
    for (size_t i = 0; i < rows * h->qk; i++)
        b->q[i] = qs[i];
    const struct oracle_attn_shape shape = {
        .len = (uint32_t)m->len, .q_len = n, .heads = h->qh, .kv_heads = h->kvh,
        .qk_dim = h->qk, .v_dim = h->vd, .scale = h->scale,
    };
    const size_t row0 = (size_t)layer * h->cfg.max_context;
    oracle_attention(&shape, b->q, m->k + row0 * k_stride(h), m->v + row0 * v_stride(h), b->latent, b->ref_lse);
    if (h->merge_uv)
        oracle_uv_proj(rows, h->vd, h->od, b->latent, b->head_of, h->w_uv64 + (size_t)layer * h->qh * h->vd * h->od,
                       b->ref);
    else
        memcpy(b->ref, b->latent, rows * h->vd * sizeof(double));
    stats.nan_rows += mask_nan_rows(h, b->ref, b->ref_lse, b->nan, rows);
    /* One more rounding (the output's) when out is bf16/fp16: relative, so it adds to the L2 bound. */
    const double tol = out_tolerance(h->dtype) + act_roundoff(h->act) + h->wire_tol;
    for (uint32_t s = 0; s < h->nsides; s++) {
        const char *what = s ? "baseline" : "dcp";
        double *o = b->out[s], *l = b->lse[s];
        gather_side(h, &h->side[s], layer, t0, n, o, l);
        check_nan_rows(h, what, o, l, b->nan, rows);
        const double err = oracle_rel_l2(b->ref, o, rows * h->od);
        if (!(err <= tol))
            fail_msg("%s: %s layer %u: relative L2 error %.3g > %.3g (len %llu, q_len %u, step %llu)", h->label,
                     what, layer, err, tol, (unsigned long long)m->len, n, (unsigned long long)h->steps);
        stats.worst_out[h->dtype] = DCP_MAX(stats.worst_out[h->dtype], err);
        if (h->with_lse) {
            const double lerr = worst_lse_error(b->ref_lse, l, rows);
            if (!(lerr <= LSE_TOL))
                fail_msg("%s: %s layer %u: LSE error %.3g > %.3g (len %llu, q_len %u)", h->label, what, layer,
                         lerr, LSE_TOL, (unsigned long long)m->len, n);
            stats.worst_lse[h->dtype] = DCP_MAX(stats.worst_lse[h->dtype], lerr);
        }
    }
    if (h->nsides > 1) {
        const double diff = oracle_rel_l2(b->out[1], b->out[0], rows * h->od);
        if (!(diff <= tol + act_roundoff(h->act))) /* each side rounded its output once */
            fail_msg("%s: layer %u: DCP differs from the TP baseline by %.3g > %.3g", h->label, layer, diff, tol);
        stats.worst_baseline[h->dtype] = DCP_MAX(stats.worst_baseline[h->dtype], diff);
        stats.baseline_checks++;
    }
    stats.checks[h->dtype]++;
    stats.rows[h->dtype] += rows;
    if (h->dcp > 1 && m->len < (uint64_t)h->dcp * h->interleave)
        stats.empty_shard_checks++;
    if (n > 1)
        stats.multi_query_checks++;
}

static void check_step(struct harness *h, uint32_t count, const uint32_t *seqs, const uint32_t *grow)
{
    uint32_t most = 0;
    for (uint32_t i = 0; i < count; i++)
        most = DCP_MAX(most, grow[i]);
    const size_t rows = (size_t)most * h->qh;
    struct check_buffers b = {
        .q = xcalloc(rows * h->qk, sizeof(double)),
        .latent = xcalloc(rows * h->vd, sizeof(double)),
        .head_of = xcalloc(rows, sizeof(uint32_t)),
        .ref = xcalloc(rows * h->od, sizeof(double)),
        .ref_lse = xcalloc(rows, sizeof(double)),
        .nan = xcalloc(rows, sizeof(bool)),
    };
    for (int s = 0; s < 2; s++) {
        b.out[s] = xcalloc(rows * h->od, sizeof(double));
        b.lse[s] = xcalloc(rows, sizeof(double));
    }
    for (size_t i = 0; i < rows; i++)
        b.head_of[i] = (uint32_t)(i % h->qh);
    for (uint32_t l = 0; l < h->layers; l++) {
        uint32_t t0 = 0;
        for (uint32_t i = 0; i < count; i++) {
            check_sequence(h, &h->seqs[seqs[i]], l, t0, grow[i], &b);
            t0 += grow[i];
        }
    }
    free(b.q);
    free(b.latent);
    free(b.head_of);
    free(b.ref);
    free(b.ref_lse);
    free(b.nan);
    for (int s = 0; s < 2; s++) {
        free(b.out[s]);
        free(b.lse[s]);
    }
}

/* Extends every engine's sequences and fixes the step's batch. */
static void begin_step(struct harness *h, uint32_t count, const uint32_t *seqs, const uint32_t *grow)
{
    uint32_t ids[64];
    assert_true(count <= 64);
    for (uint32_t s = 0; s < h->nsides; s++) {
        for (uint32_t i = 0; i < count; i++) {
            ids[i] = h->seqs[seqs[i]].id[s];
            const int err = dcp_seq_extend(h->side[s].e, ids[i], grow[i]);
            if (err)
                fail_msg("%s: extend by %u: %s: %s", h->label, grow[i], dcp_strerror(err), dcp_last_error());
        }
        const struct dcp_batch batch = {.num_seqs = count, .seq_ids = ids, .q_lens = grow};
        const int err = dcp_engine_begin_step(h->side[s].e, &batch);
        if (err)
            fail_msg("%s: begin_step: %s: %s", h->label, dcp_strerror(err), dcp_last_error());
    }
}

bool harness_step(struct harness *h, uint32_t count, const uint32_t *seqs, const uint32_t *grow)
{
    h->tokens = 0;
    for (uint32_t i = 0; i < count; i++) {
        struct mirror *m = live_seq(h, seqs[i]);
        assert_true(grow[i] >= 1);
        m->len += grow[i];
        assert_true(m->len <= h->cfg.max_context);
        h->tokens += grow[i];
    }
    assert_true(h->tokens <= h->cfg.max_step_tokens);
    h->attend = h->tokens <= h->cfg.max_query_tokens;
    h->with_lse = h->steps % 5 != 4; /* sometimes no LSE buffer: the engine's scratch takes it */
    begin_step(h, count, seqs, grow);
    generate_step(h, count, seqs, grow);
    if (h->attend && h->side[0].e->step.num_splits > 1)
        stats.split_steps++;
    if (h->attend && h->side[0].e->step.num_splits > stats.most_splits)
        stats.most_splits = h->side[0].e->step.num_splits;
    for (uint32_t s = 0; s < h->nsides; s++) {
        const int err = dcp_engine_run(h->side[s].e, rank_step, &h->side[s]);
        if (err)
            fail_msg("%s: %s step %llu: %s: %s", h->label, s ? "baseline" : "dcp", (unsigned long long)h->steps,
                     dcp_strerror(err), dcp_last_error());
    }
    if (h->attend)
        check_step(h, count, seqs, grow);
    h->steps++;
    return h->attend;
}

/* ---- statistics ------------------------------------------------------------- */

const struct harness_stats *harness_get_stats(void)
{
    return &stats;
}

void harness_print_stats(FILE *f)
{
    static const char *const names[4] = {"fp32", "bf16", "fp16", "fp8_e4m3"};
    fprintf(f, "engine DCP checks: %llu empty-shard, %llu multi-token, %llu vs baseline, %llu split-KV steps, "
               "%llu NaN rows\n",
            (unsigned long long)stats.empty_shard_checks, (unsigned long long)stats.multi_query_checks,
            (unsigned long long)stats.baseline_checks, (unsigned long long)stats.split_steps,
            (unsigned long long)stats.nan_rows);
    for (int d = 0; d < 4; d++)
        fprintf(f, "  %-8s %6llu results (%8llu rows): worst rel L2 %.3g (tol %.0e), worst LSE %.3g, "
                   "DCP vs baseline %.3g\n",
                names[d], (unsigned long long)stats.checks[d], (unsigned long long)stats.rows[d],
                stats.worst_out[d], out_tolerance((uint32_t)d), stats.worst_lse[d], stats.worst_baseline[d]);
}
