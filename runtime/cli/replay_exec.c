/* replay_exec.c: execute mode of `dcp-run replay`: the scheduler's steps run on the
 * engine (K/V appended on every layer, attention for decode tokens), sampled rows are
 * checked against float64 attention, and each request's kept outputs are digested.
 *
 * Token content: the K/V/Q of a token are seeded by a content key, not by the
 * sequence id: a token inside a hashed prompt prefix gets a key made of that prefix's
 * hash chain and its position, any other token a key of its request and position. So
 * two requests sharing a prefix have the same prefix K/V (a prefix-cache hit is then
 * correct only if it returns the right blocks), and a preempted request recomputes
 * exactly what it had. The digest of a request sums (position, argmax of head 0's
 * output) over its kept decode positions; it does not depend on batching, caching or
 * preemption, so two runs can be compared. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "replay.h"
#include "run_common.h"

struct replay_exec {
    dcp_engine *engine;
    struct dcp_engine_info info;
    const struct dcp_config *cfg;
    const struct dcp_trace *trace;
    bool mla, check;
    uint64_t seed;
    uint32_t q_head0, kv_head0;      /* of local rank 0 */
    struct rank_buf {
        void *q, *k, *v, *out, *lse, *keys;
    } *bufs;                         /* [num_local_ranks] */
    uint64_t *host_keys;             /* [max_step_tokens] keys of the current engine step */
    float *host_out;                 /* [max_query_tokens][H_l][v_dim] of local rank 0, last layer */
    uint32_t *argmax;                /* [max_query_tokens] of the decode rows */
    struct dcp_sched_entry *entries; /* copy of the step's decode entries */
    size_t entries_cap;
    uint32_t num_decode;
    uint64_t *digest;                /* [trace->count] */
    uint32_t *checked;               /* [trace->count] admission (preemptions + 1) last checked */
    uint64_t *ref_keys;              /* scratch of the reference */
    size_t ref_keys_cap;
    struct replay_check res;
    /* The engine step being run. */
    uint32_t T;
    bool attend;
};

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Content keys of positions [start, start + n) of request r (see the file comment). */
static void content_keys(const struct dcp_trace *t, uint32_t r, uint64_t start, uint64_t n, uint64_t *out)
{
    const struct dcp_serve_request *q = &t->requests[r];
    const uint64_t hb = q->hash_block_tokens ? q->hash_block_tokens : 512;
    const uint64_t full = DCP_CLI_MIN((uint64_t)q->num_hashes, q->prompt_tokens / hb);
    uint64_t chain = 0x243f6a8885a308d3ull, have = 0; /* chain covers hashes [0, have) */
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t pos = start + i, j = pos / hb;
        if (j >= full) {
            out[i] = mix(0x5eed0000ull + r, pos);
            continue;
        }
        while (have <= j)
            chain = mix(chain, q->hashes[have++]);
        out[i] = mix(chain, pos);
    }
}

static int grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return DCP_OK;
    size_t c = DCP_CLI_MAX(need, 2 * *cap);
    void *p = realloc(*buf, c * elem);
    if (!p)
        return DCP_ENOMEM;
    *buf = p;
    *cap = c;
    return DCP_OK;
}

enum { TENSOR_Q, TENSOR_K, TENSOR_V };

static uint64_t stream_seed(uint64_t seed, uint32_t layer, int kind)
{
    return mix(seed, ((uint64_t)layer << 2) | (uint64_t)kind);
}

int replay_exec_create(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *trace,
                       uint32_t dcp, struct replay_exec **out)
{
    *out = NULL;
    struct replay_exec *x = calloc(1, sizeof(*x));
    if (!x)
        return DCP_ENOMEM;
    x->cfg = dcp_deployment_config(dep);
    x->trace = trace;

    x->mla = x->cfg->model.attention == DCP_ATTN_MLA;
    x->check = o->exec.check;
    x->seed = x->cfg->workload.seed;
    x->res.pass = true;
    uint64_t longest = 0;
    for (uint32_t i = 0; i < trace->count; i++)
        longest = DCP_CLI_MAX(longest, trace->requests[i].prompt_tokens + trace->requests[i].output_tokens);
    const uint32_t q_len = 1 + o->sched.mtp_drafts;
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.dcp = dcp;
    p.num_layers = o->exec.layers;
    p.kv_budget_bytes = (double)o->exec.kv_mb * 1e6;
    p.max_batch = o->sched.max_running;
    p.max_seqs = o->sched.max_running;
    p.max_query_tokens = o->sched.max_running * q_len;
    p.max_step_tokens = DCP_CLI_MAX(o->sched.step_tokens, p.max_query_tokens);
    p.replicate_q = x->cfg->parallel.replicate_q; /* run_query_bytes and the fills take either layout */
    /* A request longer than the engine can hold (positions are 32-bit; the model's context
     * window) is rejected by the scheduler (reason "context"), as with --simulate, instead of
     * failing the engine and with it the whole run. */
    const uint64_t window = x->cfg->model.context_window;
    p.max_context = DCP_CLI_MIN(DCP_CLI_MIN(longest, window ? window : longest), (uint64_t)INT32_MAX);
    int err = dcp_engine_create(&p, &x->engine);
    if (!err) {
        dcp_engine_get_info(x->engine, &x->info);
        x->bufs = calloc(x->info.num_local_ranks, sizeof(*x->bufs));
        x->host_keys = malloc(x->info.max_step_tokens * sizeof(*x->host_keys));
        x->host_out = malloc((size_t)x->info.max_query_tokens * x->info.q_heads_per_rank * x->info.v_dim * sizeof(float));
        x->argmax = malloc(x->info.max_query_tokens * sizeof(*x->argmax));
        x->digest = calloc(trace->count, sizeof(*x->digest));
        x->checked = calloc(trace->count, sizeof(*x->checked));
        if (!x->bufs || !x->host_keys || !x->host_out || !x->argmax || !x->digest || !x->checked)
            err = DCP_ENOMEM;
    }
    const struct dcp_engine_info *in = &x->info;
    const size_t f = sizeof(float), Tq = in->max_query_tokens, Ts = in->max_step_tokens;
    for (uint32_t i = 0; !err && i < in->num_local_ranks; i++) {
        dcp_rank *rank = dcp_engine_rank(x->engine, i);
        struct rank_buf *b = &x->bufs[i];
        if ((err = dcp_rank_alloc(rank, run_query_bytes(in, (uint32_t)Tq), &b->q)) ||
            (err = dcp_rank_alloc(rank, Ts * in->kv_heads_per_rank * in->qk_dim * f, &b->k)) ||
            (!x->mla && (err = dcp_rank_alloc(rank, Ts * in->kv_heads_per_rank * in->v_dim * f, &b->v))) ||
            (err = dcp_rank_alloc(rank, Tq * in->q_heads_per_rank * in->v_dim * f, &b->out)) ||
            (err = dcp_rank_alloc(rank, Tq * in->q_heads_per_rank * f, &b->lse)) ||
            (err = dcp_rank_alloc(rank, Ts * sizeof(uint64_t), &b->keys)))
            break;
        if (i == 0)
            dcp_rank_head_offsets(rank, &x->q_head0, &x->kv_head0);
    }
    if (err) {
        struct replay_check discard;
        replay_exec_finish(&x, &discard);
        free(discard.request_digest);
        return err;
    }
    *out = x;
    return DCP_OK;
}

dcp_engine *replay_exec_engine(struct replay_exec *x) { return x->engine; }

static int rank_fn(dcp_rank *rank, void *arg)
{
    struct replay_exec *x = arg;
    const uint32_t li = dcp_rank_tp_rank(rank) - dcp_rank_tp_rank(dcp_engine_rank(x->engine, 0));
    struct rank_buf *b = &x->bufs[li];
    uint32_t q_head0, kv_head0;
    dcp_rank_head_offsets(rank, &q_head0, &kv_head0);
    int err = dcp_rank_upload(rank, b->keys, x->host_keys, x->T * sizeof(uint64_t));
    const uint32_t last = x->info.num_layers - 1;
    for (uint32_t layer = 0; layer < x->info.num_layers && !err; layer++) {
        struct dcp_synth_desc d = {
            .seed = stream_seed(x->seed, layer, TENSOR_K), .row_keys = b->keys, .rows = x->T,
            .heads = x->info.kv_heads_per_rank, .dim = x->info.qk_dim, .head_offset = kv_head0, .amplitude = 1.0f,
        };
        err = dcp_rank_fill_synthetic(rank, b->k, &d);
        if (!err && !x->mla) {
            d.seed = stream_seed(x->seed, layer, TENSOR_V);
            d.dim = x->info.v_dim;
            err = dcp_rank_fill_synthetic(rank, b->v, &d);
        }
        if (!err)
            err = dcp_rank_append_kv(rank, layer, b->k, x->mla ? NULL : b->v);
        if (err || !x->attend)
            continue;
        if ((err = run_fill_queries(rank, &x->info, b->q, stream_seed(x->seed, layer, TENSOR_Q), b->keys, x->T)) ||
            (err = dcp_rank_attention(rank, layer, b->q, b->out, b->lse)))
            break;
        if (li == 0 && layer == last)
            err = dcp_rank_download(rank, x->host_out, b->out,
                                    (size_t)x->T * x->info.q_heads_per_rank * x->info.v_dim * sizeof(float));
    }
    return err ? err : dcp_rank_synchronize(rank);
}

/* Runs one engine step over entries [from, to) of the plan. */
static int engine_step(struct replay_exec *x, const struct dcp_sched_entry *e, uint32_t n, bool attend)
{
    if (!n)
        return DCP_OK;
    uint32_t *ids = malloc(n * sizeof(*ids)), *lens = malloc(n * sizeof(*lens));
    if (!ids || !lens) {
        free(ids);
        free(lens);
        return DCP_ENOMEM;
    }
    uint32_t T = 0;
    for (uint32_t i = 0; i < n; i++) {
        ids[i] = e[i].seq_id;
        lens[i] = e[i].q_len;
        content_keys(x->trace, e[i].request, e[i].start, e[i].q_len, x->host_keys + T);
        T += e[i].q_len;
    }
    x->T = T;
    x->attend = attend;
    const struct dcp_batch batch = {.num_seqs = n, .seq_ids = ids, .q_lens = lens};
    int err = dcp_engine_begin_step(x->engine, &batch);
    if (!err)
        err = dcp_engine_run(x->engine, rank_fn, x);
    free(ids);
    free(lens);
    return err;
}

/* float64 attention of head 0 of local rank 0 at the last layer for the query at
 * position pos of request r, compared with the engine's row. */
static void check_row(struct replay_exec *x, const dcp_sched *s, uint32_t r, uint64_t pos, const float *row)
{
    const struct dcp_model_config *m = &x->cfg->model;
    const uint32_t qk = x->info.qk_dim, vd = x->info.v_dim, layer = x->info.num_layers - 1;
    const uint32_t hq = x->q_head0;
    const uint32_t hk = dcp_model_kv_head_of(m, hq);
    const uint64_t sq = stream_seed(x->seed, layer, TENSOR_Q), sk = stream_seed(x->seed, layer, TENSOR_K),
                   sv = stream_seed(x->seed, layer, TENSOR_V);
    double q[1024], k[1024], acc[1024];
    if (qk > 1024 || vd > 1024 || grow((void **)&x->ref_keys, &x->ref_keys_cap, pos + 1, sizeof(uint64_t))) {
        x->res.pass = false; /* cannot check: say so rather than pass */
        return;
    }
    content_keys(x->trace, r, 0, pos + 1, x->ref_keys);
    for (uint32_t d = 0; d < qk; d++)
        q[d] = dcp_synth_value(sq, x->ref_keys[pos], hq, d);
    memset(acc, 0, vd * sizeof(double));
    double mx = -INFINITY, l = 0;
    const double scale = (double)(float)m->softmax_scale;
    for (uint64_t p = 0; p <= pos; p++) {
        const uint64_t key = x->ref_keys[p];
        double sc = 0;
        for (uint32_t d = 0; d < qk; d++) {
            k[d] = dcp_dtype_round(m->kv_dtype, dcp_synth_value(sk, key, hk, d), (float)m->kv_scale);
            sc += q[d] * k[d];
        }
        sc *= scale;
        const double nm = sc > mx ? sc : mx, c = exp(mx - nm), w = exp(sc - nm);
        l = l * c + w;
        for (uint32_t d = 0; d < vd; d++) {
            const double v = x->mla ? k[d] : dcp_dtype_round(m->kv_dtype, dcp_synth_value(sv, key, hk, d), (float)m->kv_scale);
            acc[d] = acc[d] * c + w * v;
        }
        mx = nm;
    }
    double num = 0, den = 0;
    bool finite = true;
    for (uint32_t d = 0; d < vd; d++) {
        const double ref = acc[d] / l;
        finite = finite && isfinite(row[d]);
        num += (row[d] - ref) * (row[d] - ref);
        den += ref * ref;
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    x->res.rows++;
    const struct dcp_sched_request_info *in = dcp_sched_request(s, r);
    x->res.rows_cached += in->cached_tokens > 0;
    x->res.rows_preempted += in->preemptions > 0;
    if (!finite || !(rel <= run_check_tolerance(x->cfg)))
        x->res.pass = false;
    if (!finite || rel > x->res.max_rel_err)
        x->res.max_rel_err = finite ? rel : INFINITY;
}

int replay_exec_step(struct replay_exec *x, dcp_sched *s, const struct dcp_sched_step *step, double *seconds)
{
    const double t0 = cli_now();
    x->num_decode = step->num_decode;
    if (grow((void **)&x->entries, &x->entries_cap, DCP_CLI_MAX(step->num_decode, 1u), sizeof(*x->entries)))
        return DCP_ENOMEM;
    memcpy(x->entries, step->entries, step->num_decode * sizeof(*x->entries));
    int err = engine_step(x, step->entries, step->num_decode, true);
    if (!err && step->num_decode) {
        /* Row of head 0 of token i: host_out[i][0][:]. The check samples the last
         * query token of every decode entry. */
        const size_t stride = (size_t)x->info.q_heads_per_rank * x->info.v_dim;
        uint32_t row = 0;
        for (uint32_t i = 0; i < step->num_decode; i++) {
            const struct dcp_sched_entry *e = &step->entries[i];
            for (uint32_t j = 0; j < e->q_len; j++, row++) {
                const float *o = x->host_out + row * stride;
                uint32_t best = 0;
                for (uint32_t d = 1; d < x->info.v_dim; d++)
                    best = o[d] > o[best] ? d : best;
                x->argmax[row] = best;
                /* One row per request and admission: its first decode step, which for
                 * a preempted request comes after the recompute. */
                const struct dcp_sched_request_info *in = dcp_sched_request(s, e->request);
                if (x->check && j == e->q_len - 1 && x->checked[e->request] != in->preemptions + 1) {
                    x->checked[e->request] = in->preemptions + 1;
                    check_row(x, s, e->request, e->start + j, o);
                }
            }
        }
    }
    if (!err)
        err = engine_step(x, step->entries + step->num_decode, step->num_entries - step->num_decode, false);
    *seconds = cli_now() - t0;
    return err;
}

void replay_exec_after_complete(struct replay_exec *x, dcp_sched *s, const struct dcp_sched_step *step,
                                const uint32_t *generated_before)
{
    (void)step;
    uint32_t row = 0;
    for (uint32_t i = 0; i < x->num_decode; i++) {
        const struct dcp_sched_entry *e = &x->entries[i];
        const uint32_t kept = dcp_sched_request(s, e->request)->generated - generated_before[i];
        for (uint32_t j = 0; j < kept && j < e->q_len; j++)
            x->digest[e->request] += mix(e->start + j, x->argmax[row + j]);
        row += e->q_len;
    }
}

void replay_exec_finish(struct replay_exec **px, struct replay_check *res)
{
    struct replay_exec *x = *px;
    memset(res, 0, sizeof(*res));
    if (!x)
        return;
    *res = x->res;
    res->request_digest = x->digest;
    for (uint32_t i = 0; x->digest && i < x->trace->count; i++)
        res->digest += x->digest[i];
    for (uint32_t i = 0; x->bufs && i < x->info.num_local_ranks; i++) {
        dcp_rank *rank = dcp_engine_rank(x->engine, i);
        struct rank_buf *b = &x->bufs[i];
        dcp_rank_free(rank, b->q);
        dcp_rank_free(rank, b->k);
        dcp_rank_free(rank, b->v);
        dcp_rank_free(rank, b->out);
        dcp_rank_free(rank, b->lse);
        dcp_rank_free(rank, b->keys);
    }
    free(x->bufs);
    free(x->host_keys);
    free(x->host_out);
    free(x->argmax);
    free(x->entries);
    free(x->checked);
    free(x->ref_keys);
    dcp_engine_destroy(&x->engine);
    free(x);
    *px = NULL;
}
