/* kinds_harness.c: see kinds_harness.h. */
#include "kinds_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_kernels/placement.h"
#include "oracle.h"
#include "test_util.h"

#define KH_MAX_LAYERS 8
#define KH_MAX_SEQS 8
#define KH_CAP 192 /* most tokens a sequence reaches in these tests */

static struct kinds_stats stats;

const struct kinds_stats *kinds_get_stats(void) { return &stats; }

/** One sequence: its engine id, length and every cached value of every layer (float64 mirror). */
struct kseq {
    uint32_t id;
    uint32_t len;
    double *k[KH_MAX_LAYERS];  ///< [KH_CAP][Hkv][qk]
    double *v[KH_MAX_LAYERS];  ///< [KH_CAP][Hkv][vd] (GQA/MHA)
    double *ik[KH_MAX_LAYERS]; ///< [KH_CAP][index_dim] (sparse layers)
};

/** One rank's device buffers and what it returned. */
struct krank {
    void *q, *k, *v, *out, *lse, *ik, *iq, *w, *topk, *topk_out, *sinks;
    float *res_out[KH_MAX_LAYERS]; ///< [T][H][od]
    float *res_lse[KH_MAX_LAYERS]; ///< [T][H]
    int32_t *res_topk[KH_MAX_LAYERS]; ///< [T][K] (mode b)
};

struct kinds {
    struct kinds_case c;
    dcp_deployment *dep;
    dcp_engine *eng;
    struct dcp_engine_info info;
    struct test_rng rng;
    uint32_t L, tp, N, Hq, Hkv, H, kvh, qk, vd, od, ih, id, K, Tmax;
    bool mla;
    double scale;
    double sinks_d[KH_MAX_LAYERS][64];
    float sinks_f[KH_MAX_LAYERS][64];
    const float *sinks_ptr[KH_MAX_LAYERS];
    struct kseq seqs[KH_MAX_SEQS];
    uint32_t nseqs;
    /* the step */
    uint32_t T, batch, bseq[KH_MAX_SEQS], bq[KH_MAX_SEQS];
    bool attend;
    float *q[KH_MAX_LAYERS];  ///< [T][Hq][qk]
    float *kn[KH_MAX_LAYERS]; ///< [T][Hkv][qk]
    float *vn[KH_MAX_LAYERS]; ///< [T][Hkv][vd]
    float *ikn[KH_MAX_LAYERS]; ///< [T][id]
    float *iq[KH_MAX_LAYERS]; ///< [T][ih][id]
    float *w[KH_MAX_LAYERS];  ///< [T][ih]
    int32_t *topk[KH_MAX_LAYERS]; ///< [T][K]: the lists given (mode a), or selected (mode b, rank 0's)
    struct krank *ranks;
    const struct kinds *follow; ///< kinds_follow(): attend a's lists and match its bits
};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    assert_non_null(p);
    return p;
}

/* A multiple of 1/8 in [-2, 2]: exact in every cache and activation dtype used here. */
static float eighths(struct test_rng *rng)
{
    return (float)((int)test_rng_range(rng, 0, 32) - 16) / 8.0f;
}

struct kinds *kinds_create(const struct kinds_case *c, uint64_t seed)
{
    struct kinds *k = xcalloc(1, sizeof(*k));
    k->c = *c;
    test_rng_seed(&k->rng, seed);
    struct dcp_config cfg;
    fixture_config(&c->shape, &cfg);
    memcpy(cfg.model.layer_pattern, c->pattern, sizeof(c->pattern));
    cfg.model.num_layer_kinds = c->pattern_len;
    cfg.model.window_kv = c->window_kv;
    cfg.model.index_heads = c->index_heads ? c->index_heads : 2;
    cfg.model.index_head_dim = c->index_dim ? c->index_dim : 16;
    cfg.model.index_dtype = DCP_DTYPE_BF16;
    cfg.parallel.sparse_index = c->sparse_index;
    dcp_diag *diag = NULL;
    assert_int_equal(dcp_diag_create(&diag), DCP_OK);
    int err = dcp_deployment_from_config(&cfg, diag, &k->dep);
    if (err)
        dcp_diag_print(diag, stderr);
    dcp_diag_destroy(&diag);
    assert_int_equal(err, DCP_OK);
    const struct dcp_config *dc = dcp_deployment_config(k->dep);
    k->L = c->shape.layers;
    assert_true(k->L <= KH_MAX_LAYERS && dc->model.num_q_heads <= 64);
    k->Tmax = c->max_query_tokens ? c->max_query_tokens : 12;
    for (uint32_t l = 0; l < k->L; l++) {
        const struct dcp_layer_kind lk = dcp_model_layer_kind(&dc->model, l);
        for (uint32_t h = 0; h < dc->model.num_q_heads; h++) {
            /* Sinks from "no sink" to ones that outweigh the scores; every 5th head none. */
            k->sinks_d[l][h] = h % 5 == 4 ? -INFINITY : (double)eighths(&k->rng) * 2.0;
            k->sinks_f[l][h] = (float)k->sinks_d[l][h];
        }
        k->sinks_ptr[l] = lk.sink && c->sinks_at_creation ? k->sinks_f[l] : NULL;
        if (lk.type == DCP_LAYER_SPARSE_TOPK)
            k->K = lk.topk > k->K ? lk.topk : k->K;
    }
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = k->dep;
    p.kv_budget_bytes = 64.0 * 1024 * 1024;
    p.max_batch = c->max_batch ? c->max_batch : 4;
    p.max_query_tokens = k->Tmax;
    p.max_step_tokens = 4 * k->Tmax;
    p.max_seqs = c->max_seqs ? c->max_seqs : KH_MAX_SEQS;
    p.max_context = KH_CAP;
    p.sinks = c->sinks_at_creation ? k->sinks_ptr : NULL;
    err = dcp_engine_create(&p, &k->eng);
    if (err == DCP_ENOTSUP && fixture_backend() != DCP_BACKEND_HOST) { /* kinds not on this backend yet */
        print_message("skipped: %s\n", dcp_last_error());
        dcp_deployment_destroy(&k->dep);
        free(k);
        return NULL;
    }
    if (err)
        fprintf(stderr, "engine: %s: %s\n", dcp_strerror(err), dcp_last_error());
    assert_int_equal(err, DCP_OK);
    dcp_engine_get_info(k->eng, &k->info);
    k->tp = k->info.tp;
    k->N = k->info.dcp;
    k->H = k->info.q_heads_per_rank;
    k->kvh = k->info.kv_heads_per_rank;
    k->qk = k->info.qk_dim;
    k->vd = k->info.v_dim;
    k->od = k->info.out_dim;
    k->Hq = dc->model.num_q_heads;
    k->Hkv = dc->model.attention == DCP_ATTN_MLA ? 1 : dc->model.num_kv_heads;
    k->mla = dc->model.attention == DCP_ATTN_MLA;
    k->scale = dc->model.softmax_scale;
    k->ih = dc->model.index_heads;
    k->id = dc->model.index_head_dim;
    for (uint32_t l = 0; l < k->L; l++) { /* the engine lists the deployment's kinds */
        const struct dcp_layer_kind want = dcp_model_layer_kind(&dc->model, l), got = k->info.layers[l];
        assert_true(got.type == want.type && got.window == want.window && got.topk == want.topk &&
                    got.sink == want.sink && got.repeat == 1);
    }
    /* Every rank's buffers, sized for the largest step. */
    const size_t T = 4 * k->Tmax;
    k->ranks = xcalloc(k->tp, sizeof(*k->ranks));
    for (uint32_t r = 0; r < k->tp; r++) {
        dcp_rank *rank = dcp_engine_rank(k->eng, r);
        struct krank *kr = &k->ranks[r];
        const size_t K = k->K ? k->K : 1;
        assert_int_equal(dcp_rank_alloc(rank, T * k->N * k->H * k->qk * 4, &kr->q), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * k->kvh * k->qk * 4, &kr->k), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * k->kvh * k->vd * 4, &kr->v), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * k->H * k->od * 4, &kr->out), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * k->H * 4, &kr->lse), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * k->id * 4, &kr->ik), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * k->ih * k->id * 4, &kr->iq), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * k->ih * 4, &kr->w), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * K * 4, &kr->topk), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, T * K * 4, &kr->topk_out), DCP_OK);
        assert_int_equal(dcp_rank_alloc(rank, (size_t)k->H * 4, &kr->sinks), DCP_OK);
        for (uint32_t l = 0; l < k->L; l++) {
            kr->res_out[l] = xcalloc(T * k->H * k->od, sizeof(float));
            kr->res_lse[l] = xcalloc(T * k->H, sizeof(float));
            kr->res_topk[l] = xcalloc(T * K, sizeof(int32_t));
        }
    }
    for (uint32_t l = 0; l < k->L; l++) {
        k->q[l] = xcalloc(T * k->Hq * k->qk, sizeof(float));
        k->kn[l] = xcalloc(T * k->Hkv * k->qk, sizeof(float));
        k->vn[l] = xcalloc(T * k->Hkv * k->vd, sizeof(float));
        k->ikn[l] = xcalloc(T * k->id, sizeof(float));
        k->iq[l] = xcalloc(T * k->ih * k->id, sizeof(float));
        k->w[l] = xcalloc(T * k->ih, sizeof(float));
        k->topk[l] = xcalloc(T * (k->K ? k->K : 1), sizeof(int32_t));
    }
    return k;
}

void kinds_destroy(struct kinds **kp)
{
    struct kinds *k = *kp;
    if (!k)
        return;
    for (uint32_t r = 0; r < k->tp; r++) {
        dcp_rank *rank = dcp_engine_rank(k->eng, r);
        struct krank *kr = &k->ranks[r];
        void *bufs[] = {kr->q, kr->k, kr->v, kr->out, kr->lse, kr->ik, kr->iq, kr->w, kr->topk, kr->topk_out, kr->sinks};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            dcp_rank_free(rank, bufs[i]);
        for (uint32_t l = 0; l < k->L; l++) {
            free(kr->res_out[l]);
            free(kr->res_lse[l]);
            free(kr->res_topk[l]);
        }
    }
    for (uint32_t s = 0; s < k->nseqs; s++)
        for (uint32_t l = 0; l < k->L; l++) {
            free(k->seqs[s].k[l]);
            free(k->seqs[s].v[l]);
            free(k->seqs[s].ik[l]);
        }
    for (uint32_t l = 0; l < k->L; l++) {
        free(k->q[l]);
        free(k->kn[l]);
        free(k->vn[l]);
        free(k->ikn[l]);
        free(k->iq[l]);
        free(k->w[l]);
        free(k->topk[l]);
    }
    free(k->ranks);
    dcp_engine_destroy(&k->eng);
    dcp_deployment_destroy(&k->dep);
    free(k);
    *kp = NULL;
}

dcp_engine *kinds_engine(struct kinds *k) { return k->eng; }

uint32_t kinds_seq_id(const struct kinds *k, uint32_t i)
{
    assert_true(i < k->nseqs);
    return k->seqs[i].id;
}

uint32_t kinds_seq_create(struct kinds *k)
{
    assert_true(k->nseqs < KH_MAX_SEQS);
    struct kseq *s = &k->seqs[k->nseqs];
    assert_int_equal(dcp_seq_create(k->eng, &s->id), DCP_OK);
    for (uint32_t l = 0; l < k->L; l++) {
        s->k[l] = xcalloc((size_t)KH_CAP * k->Hkv * k->qk, sizeof(double));
        s->v[l] = xcalloc((size_t)KH_CAP * k->Hkv * k->vd, sizeof(double));
        s->ik[l] = xcalloc((size_t)KH_CAP * k->id, sizeof(double));
    }
    return k->nseqs++;
}

void kinds_follow(struct kinds *b, const struct kinds *a)
{
    assert_int_equal(b->c.sparse_index, DCP_SPARSE_INDEX_CALLER);
    assert_int_equal(a->c.sparse_index, DCP_SPARSE_INDEX_SHARDED);
    b->follow = a;
}

/* ---- the step's inputs --------------------------------------------------------------- */

/* The caller's top-k list of query token i of sequence s at position pos: K entries, positions
 * it may see (or not: some past it, to be ignored), distinct, -1 padding, in random order;
 * only positions group rank one_rank owns when one_rank >= 0. */
static void make_list(struct kinds *k, int32_t *row, uint32_t K, uint64_t pos, int one_rank)
{
    uint32_t e = 0;
    for (uint64_t p = 0; p <= pos + 2 && e < K; p++) {
        const uint32_t owner = dcpk_owner_rank(p, k->N, dcp_deployment_config(k->dep)->parallel.interleave);
        const bool mine = one_rank < 0 || owner == (uint32_t)one_rank;
        if (mine && test_rng_range(&k->rng, 0, 1))
            row[e++] = (int32_t)p;
    }
    for (; e < K; e++)
        row[e] = -1;
    for (uint32_t x = K; x > 1; x--) {
        const uint32_t y = (uint32_t)test_rng_range(&k->rng, 0, x - 1);
        const int32_t t = row[x - 1];
        row[x - 1] = row[y];
        row[y] = t;
    }
}

static void fill_step(struct kinds *k, int one_rank)
{
    const struct dcp_model_config *m = &dcp_deployment_config(k->dep)->model;
    for (uint32_t l = 0; l < k->L; l++) {
        const struct dcp_layer_kind lk = dcp_model_layer_kind(m, l);
        uint32_t t = 0;
        for (uint32_t b = 0; b < k->batch; b++) {
            struct kseq *s = &k->seqs[k->bseq[b]];
            for (uint32_t i = 0; i < k->bq[b]; i++, t++) {
                const uint32_t pos = s->len - k->bq[b] + i;
                for (uint32_t x = 0; x < k->Hkv * k->qk; x++)
                    s->k[l][(size_t)pos * k->Hkv * k->qk + x] = k->kn[l][(size_t)t * k->Hkv * k->qk + x] =
                        eighths(&k->rng);
                for (uint32_t x = 0; x < k->Hkv * k->vd; x++)
                    s->v[l][(size_t)pos * k->Hkv * k->vd + x] = k->vn[l][(size_t)t * k->Hkv * k->vd + x] =
                        k->mla ? 0.0f : eighths(&k->rng);
                for (uint32_t x = 0; x < k->id; x++)
                    s->ik[l][(size_t)pos * k->id + x] = k->ikn[l][(size_t)t * k->id + x] = eighths(&k->rng);
                for (uint32_t x = 0; x < k->Hq * k->qk; x++)
                    k->q[l][(size_t)t * k->Hq * k->qk + x] = eighths(&k->rng);
                for (uint32_t x = 0; x < k->ih * k->id; x++)
                    k->iq[l][(size_t)t * k->ih * k->id + x] = eighths(&k->rng);
                for (uint32_t x = 0; x < k->ih; x++)
                    k->w[l][(size_t)t * k->ih + x] = (float)(test_rng_range(&k->rng, 1, 8)) / 8.0f;
                if (lk.type == DCP_LAYER_SPARSE_TOPK && k->c.sparse_index == DCP_SPARSE_INDEX_CALLER && !k->follow)
                    make_list(k, k->topk[l] + (size_t)t * k->K, lk.topk, pos, one_rank);
            }
        }
        if (k->follow && lk.type == DCP_LAYER_SPARSE_TOPK) /* a's selection, rank 0's (every rank's is the same) */
            memcpy(k->topk[l], k->follow->ranks[0].res_topk[l], (size_t)k->T * k->K * sizeof(int32_t));
    }
}

/* ---- the ranks ---------------------------------------------------------------------- */

static int rank_step(dcp_rank *rank, void *arg)
{
    struct kinds *k = arg;
    const uint32_t r = dcp_rank_tp_rank(rank), T = k->T, H = k->H, N = k->N;
    struct krank *kr = &k->ranks[r];
    const struct dcp_config *dc = dcp_deployment_config(k->dep);
    uint32_t q0 = 0, kv0 = 0;
    dcp_rank_head_offsets(rank, &q0, &kv0);
    float *buf = malloc((size_t)T * N * H * k->qk * sizeof(float) + (size_t)T * k->Hkv * (k->qk + k->vd) * 4 + 64);
    if (!buf)
        return DCP_ENOMEM;
    int err = DCP_OK;
    for (uint32_t l = 0; l < k->L && !err; l++) {
        const struct dcp_layer_kind lk = k->info.layers[l];
        if (lk.type == DCP_LAYER_NONE)
            continue;
        /* This rank's KV heads of the new tokens. */
        float *kb = buf, *vb = buf + (size_t)T * k->kvh * k->qk;
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t h = 0; h < k->kvh; h++) {
                memcpy(kb + ((size_t)t * k->kvh + h) * k->qk, k->kn[l] + ((size_t)t * k->Hkv + kv0 + h) * k->qk,
                       k->qk * 4);
                memcpy(vb + ((size_t)t * k->kvh + h) * k->vd, k->vn[l] + ((size_t)t * k->Hkv + kv0 + h) * k->vd,
                       k->vd * 4);
            }
        if ((err = dcp_rank_upload(rank, kr->k, kb, (size_t)T * k->kvh * k->qk * 4)) ||
            (err = dcp_rank_upload(rank, kr->v, vb, (size_t)T * k->kvh * k->vd * 4)) ||
            (err = dcp_rank_append_kv(rank, l, kr->k, k->mla ? NULL : kr->v)))
            break;
        const bool sharded = lk.type == DCP_LAYER_SPARSE_TOPK && dc->parallel.sparse_index == DCP_SPARSE_INDEX_SHARDED;
        if (sharded && ((err = dcp_rank_upload(rank, kr->ik, k->ikn[l], (size_t)T * k->id * 4)) ||
                        (err = dcp_rank_append_index_k(rank, l, kr->ik))))
            break;
        if (!k->attend)
            continue;
        /* Queries: this rank's heads, or with replicate_q its group's [N][T][H][qk]. */
        const bool group = dc->parallel.replicate_q && N > 1;
        const uint32_t chunks = group ? N : 1, first = group ? (r / N) * N * H : q0;
        for (uint32_t c = 0; c < chunks; c++)
            for (uint32_t t = 0; t < T; t++)
                for (uint32_t h = 0; h < H; h++)
                    memcpy(buf + (((size_t)c * T + t) * H + h) * k->qk,
                           k->q[l] + ((size_t)t * k->Hq + first + c * H + h) * k->qk, k->qk * 4);
        struct dcp_attention_extra x = {0};
        if ((err = dcp_rank_upload(rank, kr->q, buf, (size_t)chunks * T * H * k->qk * 4)))
            break;
        if (lk.sink && !k->c.sinks_at_creation) {
            if ((err = dcp_rank_upload(rank, kr->sinks, k->sinks_f[l] + q0, (size_t)H * 4)))
                break;
            x.sinks = kr->sinks;
        }
        if (lk.type == DCP_LAYER_SPARSE_TOPK && !sharded) {
            if ((err = dcp_rank_upload(rank, kr->topk, k->topk[l], (size_t)T * k->K * 4)))
                break;
            x.topk = kr->topk;
        }
        if (sharded) {
            if ((err = dcp_rank_upload(rank, kr->iq, k->iq[l], (size_t)T * k->ih * k->id * 4)) ||
                (err = dcp_rank_upload(rank, kr->w, k->w[l], (size_t)T * k->ih * 4)))
                break;
            x.index_q = kr->iq;
            x.index_weights = kr->w;
            x.topk_out = kr->topk_out;
        }
        if ((err = dcp_rank_attention_ex(rank, l, kr->q, kr->out, kr->lse, &x)) ||
            (err = dcp_rank_download(rank, kr->res_out[l], kr->out, (size_t)T * H * k->od * 4)) ||
            (err = dcp_rank_download(rank, kr->res_lse[l], kr->lse, (size_t)T * H * 4)))
            break;
        if (sharded && (err = dcp_rank_download(rank, kr->res_topk[l], kr->topk_out, (size_t)T * k->K * 4)))
            break;
    }
    free(buf);
    return err;
}

/* ---- the checks -------------------------------------------------------------------------- */

/* Checks every rank's rows of layer l for sequence b of the batch (tokens from t0) against the oracle. */
static void check_layer_seq(struct kinds *k, uint32_t l, uint32_t b, uint32_t t0)
{
    const struct dcp_layer_kind lk = k->info.layers[l];
    const struct kseq *s = &k->seqs[k->bseq[b]];
    const uint32_t q = k->bq[b], len = s->len;
    double *qd = xcalloc((size_t)q * k->Hq * k->qk, sizeof(double));
    for (size_t x = 0; x < (size_t)q * k->Hq * k->qk; x++)
        qd[x] = k->q[l][(size_t)t0 * k->Hq * k->qk + x];
    double *vv = k->mla ? xcalloc((size_t)len * k->vd, sizeof(double)) : s->v[l];
    for (uint32_t p = 0; k->mla && p < len; p++) /* MLA: V is the head of the K row */
        memcpy(vv + (size_t)p * k->vd, s->k[l] + (size_t)p * k->qk, k->vd * sizeof(double));
    struct oracle_attn_shape shape = {
        .len = len, .q_len = q, .heads = k->Hq, .kv_heads = k->Hkv, .qk_dim = k->qk, .v_dim = k->vd,
        .scale = k->scale, .window = lk.type == DCP_LAYER_SLIDING_WINDOW ? lk.window : 0,
        .sinks = lk.sink ? k->sinks_d[l] : NULL,
    };
    if (lk.type == DCP_LAYER_SPARSE_TOPK) {
        shape.topk = k->topk[l] + (size_t)t0 * k->K;
        shape.num_topk = lk.topk;
        shape.topk_stride = k->K;
    }
    double *ro = xcalloc((size_t)q * k->Hq * k->vd, sizeof(double)), *rl = xcalloc((size_t)q * k->Hq, sizeof(double));
    oracle_attention(&shape, qd, s->k[l], vv, ro, rl);
    char what[160];
    for (uint32_t r = 0; r < k->tp; r++) {
        uint32_t q0 = 0, kv0 = 0;
        dcp_rank_head_offsets(dcp_engine_rank(k->eng, r), &q0, &kv0);
        const struct krank *kr = &k->ranks[r];
        double err2 = 0, norm2 = 0;
        for (uint32_t i = 0; i < q; i++)
            for (uint32_t h = 0; h < k->H; h++) {
                const double want_l = rl[(size_t)i * k->Hq + q0 + h];
                const float got_l = kr->res_lse[l][((size_t)(t0 + i)) * k->H + h];
                const double *wo = ro + ((size_t)i * k->Hq + q0 + h) * k->vd;
                const float *go = kr->res_out[l] + ((size_t)(t0 + i) * k->H + h) * k->od;
                snprintf(what, sizeof(what), "layer %u (%s%s) seq %u token %u rank %u head %u", l,
                         dcp_layer_type_name(lk.type), lk.sink ? "+sink" : "", b, i, r, q0 + h);
                if (isinf(want_l) && want_l < 0) {
                    if (!(isinf(got_l) && got_l < 0))
                        fail_msg("%s: sees no key, but lse = %g", what, (double)got_l);
                    for (uint32_t d = 0; d < k->vd; d++)
                        if (go[d] != 0.0f)
                            fail_msg("%s: sees no key, but out[%u] = %g", what, d, (double)go[d]);
                } else if (!(fabs(got_l - want_l) <= 1e-4 * (1.0 + fabs(want_l)))) {
                    fail_msg("%s: lse %.9g, oracle %.9g", what, (double)got_l, want_l);
                }
                for (uint32_t d = 0; d < k->vd; d++) {
                    err2 += (go[d] - wo[d]) * (go[d] - wo[d]);
                    norm2 += wo[d] * wo[d];
                }
                stats.rows[lk.type]++;
                stats.sink_rows += lk.sink;
            }
        const double rel = norm2 > 0 ? sqrt(err2 / norm2) : sqrt(err2);
        stats.worst_out = rel > stats.worst_out ? rel : stats.worst_out;
        if (!(rel <= 2e-5))
            fail_msg("layer %u (%s) seq %u rank %u: relative L2 error %.3g", l, dcp_layer_type_name(lk.type), b, r,
                     rel);
    }
    /* Ranks with none of the keys a row sees: for a window or a top-k list, some. */
    for (uint32_t r = 0; r < k->tp && k->N > 1; r++)
        for (uint32_t i = 0; i < q; i++)
            stats.empty_rank_rows += isinf(k->ranks[r].res_lse[l][(size_t)(t0 + i) * k->H]) != 0;
    if (k->mla)
        free(vv);
    free(qd);
    free(ro);
    free(rl);
}

/* Mode (b): every rank selected the same lists, and they are the oracle's top-k of the
 * float64 index scores (exact here: every value is a multiple of 1/8, so are the scores,
 * and ties are broken by position on both sides). */
static void check_selection(struct kinds *k, uint32_t l)
{
    const uint32_t K = k->info.layers[l].topk;
    for (uint32_t r = 1; r < k->tp; r++)
        assert_memory_equal(k->ranks[r].res_topk[l], k->ranks[0].res_topk[l], (size_t)k->T * k->K * 4);
    memcpy(k->topk[l], k->ranks[0].res_topk[l], (size_t)k->T * k->K * 4); /* what the oracle attends */
    uint32_t t = 0;
    for (uint32_t b = 0; b < k->batch; b++) {
        const struct kseq *s = &k->seqs[k->bseq[b]];
        const uint32_t q = k->bq[b];
        double *qd = xcalloc((size_t)q * k->ih * k->id, sizeof(double)), *wd = xcalloc((size_t)q * k->ih, sizeof(double));
        for (size_t x = 0; x < (size_t)q * k->ih * k->id; x++)
            qd[x] = k->iq[l][(size_t)t * k->ih * k->id + x];
        for (size_t x = 0; x < (size_t)q * k->ih; x++)
            wd[x] = k->w[l][(size_t)t * k->ih + x];
        double *sc = xcalloc((size_t)q * s->len, sizeof(double));
        oracle_index_scores(s->len, q, k->ih, k->id, qd, wd, s->ik[l], sc);
        int32_t want[256];
        assert_true(K <= 256);
        for (uint32_t i = 0; i < q; i++, t++) {
            oracle_topk(sc + (size_t)i * s->len, s->len, K, want);
            if (memcmp(want, k->topk[l] + (size_t)t * k->K, K * sizeof(int32_t)) != 0)
                fail_msg("layer %u seq %u token %u: the selected top-%u differs from the oracle's (first: %d vs %d)", l,
                         b, i, K, k->topk[l][(size_t)t * k->K], want[0]);
            stats.topk_checked += K;
        }
        free(qd);
        free(wd);
        free(sc);
    }
}

/* kinds_follow(): b's results equal a's, bit for bit, on every layer and rank. */
static void check_same_bits(const struct kinds *b, const struct kinds *a)
{
    for (uint32_t l = 0; l < b->L; l++) {
        if (b->info.layers[l].type == DCP_LAYER_NONE)
            continue;
        for (uint32_t r = 0; r < b->tp; r++) {
            if (memcmp(b->ranks[r].res_out[l], a->ranks[r].res_out[l], (size_t)b->T * b->H * b->od * 4) ||
                memcmp(b->ranks[r].res_lse[l], a->ranks[r].res_lse[l], (size_t)b->T * b->H * 4))
                fail_msg("layer %u (%s) rank %u: mode (a) given mode (b)'s lists differs from mode (b)", l,
                         dcp_layer_type_name(b->info.layers[l].type), r);
            stats.same_bits_rows += (uint64_t)b->T * b->H;
        }
    }
}

bool kinds_step(struct kinds *k, uint32_t count, const uint32_t *seqs, const uint32_t *grow, int one_rank)
{
    assert_true(count <= KH_MAX_SEQS);
    uint32_t ids[KH_MAX_SEQS];
    k->batch = count;
    k->T = 0;
    for (uint32_t i = 0; i < count; i++) {
        struct kseq *s = &k->seqs[seqs[i]];
        assert_true(s->len + grow[i] <= KH_CAP);
        assert_int_equal(dcp_seq_extend(k->eng, s->id, grow[i]), DCP_OK);
        s->len += grow[i];
        k->bseq[i] = seqs[i];
        k->bq[i] = grow[i];
        ids[i] = s->id;
        k->T += grow[i];
    }
    assert_true(k->T <= 4 * k->Tmax);
    k->attend = k->T <= k->Tmax;
    fill_step(k, one_rank);
    const struct dcp_batch batch = {.num_seqs = count, .seq_ids = ids, .q_lens = grow};
    assert_int_equal(dcp_engine_begin_step(k->eng, &batch), DCP_OK);
    const int err = dcp_engine_run(k->eng, rank_step, k);
    if (err)
        fail_msg("step: %s: %s", dcp_strerror(err), dcp_last_error());
    if (!k->attend)
        return false;
    for (uint32_t l = 0; l < k->L; l++) {
        if (k->info.layers[l].type == DCP_LAYER_NONE)
            continue;
        if (k->info.layers[l].type == DCP_LAYER_SPARSE_TOPK && k->c.sparse_index == DCP_SPARSE_INDEX_SHARDED)
            check_selection(k, l);
        for (uint32_t b = 0, t0 = 0; b < count; t0 += grow[b], b++)
            check_layer_seq(k, l, b, t0);
    }
    if (k->follow)
        check_same_bits(k, k->follow);
    return true;
}
