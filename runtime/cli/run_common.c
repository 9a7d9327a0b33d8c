/* run_common.c: requests, set-up, synthetic data and the correctness check of `dcp-run run`. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "format.h"
#include "run_common.h"

/* ---- requests ------------------------------------------------------------- */

/* A trace file through the library's loader (one length per line or Mooncake JSONL:
 * only the prompt lengths are used), which refuses non-regular and oversized files
 * and names the line of any bad entry. */
static int load_trace(struct run_requests *r, const char *path, uint32_t limit)
{
    const struct dcp_trace_options o = {.limit = limit};
    struct dcp_trace *t = NULL;
    int err = dcp_trace_load(path, &o, &t);
    if (err) {
        fprintf(stderr, "dcp-run: %s\n", dcp_last_error());
        return err;
    }
    r->len = malloc(t->count * sizeof(*r->len));
    if (!r->len) {
        dcp_trace_destroy(&t);
        return DCP_ENOMEM;
    }
    for (uint32_t i = 0; i < t->count; i++)
        r->len[i] = t->requests[i].prompt_tokens;
    r->count = t->count;
    dcp_trace_destroy(&t);
    snprintf(r->describe, sizeof(r->describe), "trace %s", path);
    return DCP_OK;
}

int run_requests_load(struct run_requests *r, const dcp_deployment *dep, uint32_t count_override)
{
    memset(r, 0, sizeof(*r));
    const struct dcp_workload_config *w = &dcp_deployment_config(dep)->workload;
    if (w->trace) {
        int err = load_trace(r, w->trace, count_override);
        if (err)
            run_requests_free(r);
        return err;
    }
    r->count = count_override ? count_override : w->requests;
    r->len = malloc(r->count * sizeof(*r->len));
    if (!r->len)
        return DCP_ENOMEM;
    for (uint32_t i = 0; i < r->count; i++)
        r->len[i] = w->context_lengths[i % w->num_context_lengths];
    int n = snprintf(r->describe, sizeof(r->describe), "contexts ");
    for (uint32_t i = 0; i < w->num_context_lengths && n < (int)sizeof(r->describe); i++) {
        char num[CLI_FMT_LEN];
        n += snprintf(r->describe + n, sizeof(r->describe) - n, "%s%s", i ? " / " : "",
                      cli_fmt_count(num, w->context_lengths[i]));
    }
    if (n < (int)sizeof(r->describe))
        snprintf(r->describe + n, sizeof(r->describe) - n, " tokens, cycled");
    return DCP_OK;
}

void run_requests_free(struct run_requests *r)
{
    free(r->len);
    memset(r, 0, sizeof(*r));
}

/* ---- set-up ------------------------------------------------------------------- */

static int alloc_rank_io(struct run_setup *s, dcp_rank *rank, struct rank_io *io)
{
    const struct dcp_engine_info *in = &s->info;
    const size_t f = sizeof(float), Tq = in->max_query_tokens, Ts = in->max_step_tokens;
    int err;
    if ((err = dcp_rank_alloc(rank, run_query_bytes(in, (uint32_t)Tq), &io->q)) ||
        (err = dcp_rank_alloc(rank, Ts * in->kv_heads_per_rank * in->qk_dim * f, &io->k)) ||
        (!s->mla && (err = dcp_rank_alloc(rank, Ts * in->kv_heads_per_rank * in->v_dim * f, &io->v))) ||
        (err = dcp_rank_alloc(rank, Tq * in->q_heads_per_rank * in->v_dim * f, &io->out)) ||
        (err = dcp_rank_alloc(rank, Tq * in->q_heads_per_rank * f, &io->lse)))
        return err;
    const struct dcp_model_config *m = &s->cfg->model;
    const bool sharded_index = s->cfg->parallel.sparse_index == DCP_SPARSE_INDEX_SHARDED;
    if (s->max_topk) {
        io->host_list = malloc(Tq * s->max_topk * sizeof(int32_t));
        if (!io->host_list)
            return DCP_ENOMEM;
        if ((err = dcp_rank_alloc(rank, Tq * s->max_topk * sizeof(int32_t), &io->topk)))
            return err;
    }
    if (s->max_topk && sharded_index &&
        ((err = dcp_rank_alloc(rank, Ts * m->index_head_dim * f, &io->ik)) ||
         (err = dcp_rank_alloc(rank, Tq * m->index_heads * m->index_head_dim * f, &io->iq)) ||
         (err = dcp_rank_alloc(rank, Tq * m->index_heads * f, &io->iw))))
        return err;
    dcp_rank_head_offsets(rank, &io->q_head0, &io->kv_head0);
    for (uint32_t c = 0; c < s->num_checked && s->check; c++) {
        io->host_out[c] = malloc(Tq * in->q_heads_per_rank * in->v_dim * f);
        io->host_lse[c] = malloc(Tq * in->q_heads_per_rank * f);
        io->host_topk[c] = s->max_topk ? malloc(Tq * s->max_topk * sizeof(int32_t)) : NULL;
        if (!io->host_out[c] || !io->host_lse[c] || (s->max_topk && !io->host_topk[c]))
            return DCP_ENOMEM;
    }
    return DCP_OK;
}

static void free_rank_io(dcp_rank *rank, struct rank_io *io)
{
    dcp_rank_free(rank, io->q);
    dcp_rank_free(rank, io->k);
    dcp_rank_free(rank, io->v);
    dcp_rank_free(rank, io->out);
    dcp_rank_free(rank, io->lse);
    dcp_rank_free(rank, io->topk);
    dcp_rank_free(rank, io->ik);
    dcp_rank_free(rank, io->iq);
    dcp_rank_free(rank, io->iw);
    free(io->host_list);
    for (int c = 0; c < RUN_CHECKED_MAX; c++) {
        free(io->host_out[c]);
        free(io->host_lse[c]);
        free(io->host_topk[c]);
    }
    memset(io, 0, sizeof(*io));
}

/* Admits requests in order while the blocks they need for the whole run fit. */
static int admit(struct run_setup *s, const struct run_requests *reqs, uint32_t steps)
{
    s->seq = calloc(reqs->count, sizeof(*s->seq));
    s->req_len = calloc(reqs->count, sizeof(*s->req_len));
    if (!s->seq || !s->req_len)
        return DCP_ENOMEM;
    uint64_t used = 0;
    for (uint32_t i = 0; i < reqs->count; i++) {
        const uint64_t need = dcp_engine_blocks_for(s->engine, reqs->len[i] + (uint64_t)steps * s->q_len);
        if (used + need > s->info.num_blocks)
            break;
        int err = dcp_seq_create(s->engine, &s->seq[i]);
        if (err)
            return err;
        used += need;
        s->req_len[i] = reqs->len[i];
        s->admitted = i + 1;
    }
    return DCP_OK;
}

int run_setup_create(struct run_setup *s, const dcp_deployment *dep, uint32_t dcp, uint32_t layers,
                     double kv_budget_bytes, const struct run_requests *reqs, uint32_t steps,
                     uint32_t prefill_step_tokens, bool check)
{
    memset(s, 0, sizeof(*s));
    s->cfg = dcp_deployment_config(dep);
    s->mla = s->cfg->model.attention == DCP_ATTN_MLA;
    s->q_len = s->cfg->workload.q_len;
    s->seed = s->cfg->workload.seed;
    s->check = check;
    uint64_t longest = 0;
    for (uint32_t i = 0; i < reqs->count; i++)
        longest = DCP_CLI_MAX(longest, reqs->len[i]);
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.dcp = dcp;
    p.num_layers = layers;
    p.kv_budget_bytes = kv_budget_bytes;
    p.max_batch = reqs->count;
    p.max_seqs = reqs->count;
    p.max_query_tokens = reqs->count * s->q_len;
    p.max_step_tokens = DCP_CLI_MAX(prefill_step_tokens, p.max_query_tokens);
    p.max_context = longest + (uint64_t)steps * s->q_len;
    /* Sinks (model.layers sink: true): seeded logits per head, given at creation. */
    const uint32_t L = layers ? layers : s->cfg->model.num_layers, Hq = s->cfg->model.num_q_heads;
    s->sinks = calloc(L, sizeof(*s->sinks));
    if (!s->sinks)
        return DCP_ENOMEM;
    s->sink_layers = L;
    for (uint32_t l = 0; l < L; l++) {
        const struct dcp_layer_kind k = dcp_model_layer_kind(&s->cfg->model, l);
        if (k.type == DCP_LAYER_SPARSE_TOPK)
            s->max_topk = DCP_CLI_MAX(s->max_topk, k.topk);
        if (!k.sink)
            continue;
        if (!(s->sinks[l] = malloc(Hq * sizeof(float))))
            return DCP_ENOMEM;
        for (uint32_t h = 0; h < Hq; h++)
            s->sinks[l][h] = 2.0f * dcp_synth_value(s->seed ^ 0x51c4, l, h, 0);
    }
    p.sinks = (const float *const *)s->sinks;
    p.replicate_q = s->cfg->parallel.replicate_q; /* run_fill_queries writes either layout */
    int err = dcp_engine_create(&p, &s->engine);
    if (err)
        return err;
    dcp_engine_get_info(s->engine, &s->info);
    /* Checked: the first and last layers and the first of each attention kind. */
    for (uint32_t l = 0; l < s->info.num_layers && s->num_checked < RUN_CHECKED_MAX; l++) {
        const struct dcp_layer_kind *k = &s->info.layers[l];
        bool first_of_kind = k->type != DCP_LAYER_NONE;
        for (uint32_t j = 0; j < l && first_of_kind; j++)
            first_of_kind = s->info.layers[j].type != k->type || s->info.layers[j].sink != k->sink;
        if (first_of_kind || (l == s->info.num_layers - 1 && k->type != DCP_LAYER_NONE))
            s->checked_layers[s->num_checked++] = l;
    }
    s->rank_begin = dcp_rank_tp_rank(dcp_engine_rank(s->engine, 0));
    s->io = calloc(s->info.num_local_ranks, sizeof(*s->io));
    if (!s->io)
        return DCP_ENOMEM;
    for (uint32_t i = 0; i < s->info.num_local_ranks && !err; i++)
        err = alloc_rank_io(s, dcp_engine_rank(s->engine, i), &s->io[i]);
    return err ? err : admit(s, reqs, steps);
}

void run_setup_destroy(struct run_setup *s)
{
    if (s->io)
        for (uint32_t i = 0; i < s->info.num_local_ranks; i++)
            free_rank_io(dcp_engine_rank(s->engine, i), &s->io[i]);
    free(s->io);
    free(s->seq);
    free(s->req_len);
    dcp_engine_destroy(&s->engine);
    for (uint32_t l = 0; s->sinks && l < s->sink_layers; l++)
        free(s->sinks[l]);
    free(s->sinks);
    memset(s, 0, sizeof(*s));
}

/* ---- synthetic data --------------------------------------------------------------- */

enum tensor_kind { TENSOR_Q, TENSOR_K, TENSOR_V, TENSOR_IK, TENSOR_IQ, TENSOR_IW };

/* One generator stream per (run seed, layer, tensor). */
static uint64_t stream_seed(uint64_t seed, uint32_t layer, enum tensor_kind kind)
{
    return seed * 0x9e3779b97f4a7c15ull + ((uint64_t)layer << 3 | (uint64_t)kind) + 1;
}

int run_fill_kv(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer, uint32_t T)
{
    const struct dcp_engine_info *in = &s->info;
    struct dcp_synth_desc d = {
        .seed = stream_seed(s->seed, layer, TENSOR_K),
        .row_keys = dcp_rank_step_token_keys(rank),
        .rows = T,
        .heads = in->kv_heads_per_rank,
        .dim = in->qk_dim,
        .head_offset = io->kv_head0,
        .amplitude = 1.0f,
    };
    int err = dcp_rank_fill_synthetic(rank, io->k, &d);
    if (err || s->mla)
        return err;
    d.seed = stream_seed(s->seed, layer, TENSOR_V);
    d.dim = in->v_dim;
    return dcp_rank_fill_synthetic(rank, io->v, &d);
}

size_t run_query_bytes(const struct dcp_engine_info *in, uint32_t T)
{
    return (size_t)(in->replicate_q ? in->dcp : 1) * T * in->q_heads_per_rank * in->qk_dim * sizeof(float);
}

int run_fill_queries(dcp_rank *rank, const struct dcp_engine_info *in, void *q, uint64_t seed, const void *row_keys,
                     uint32_t T)
{
    const uint32_t H = in->q_heads_per_rank, chunks = in->replicate_q ? in->dcp : 1;
    uint32_t q_head0;
    dcp_rank_head_offsets(rank, &q_head0, NULL);
    /* The group's first head: group ranks hold consecutive heads. */
    const uint32_t first = chunks > 1 ? q_head0 - dcp_rank_group_rank(rank) * H : q_head0;
    int err = DCP_OK;
    for (uint32_t c = 0; c < chunks && !err; c++) {
        const struct dcp_synth_desc d = {
            .seed = seed, .row_keys = row_keys, .rows = T, .heads = H, .dim = in->qk_dim,
            .head_offset = first + c * H, .amplitude = 1.0f,
        };
        err = dcp_rank_fill_synthetic(rank, (float *)q + (size_t)c * T * H * in->qk_dim, &d);
    }
    return err;
}

int run_fill_q(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer, uint32_t T)
{
    return run_fill_queries(rank, &s->info, io->q, stream_seed(s->seed, layer, TENSOR_Q),
                            dcp_rank_step_token_keys(rank), T);
}

int run_fill_index_k(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer, uint32_t T)
{
    const struct dcp_synth_desc d = {
        .seed = stream_seed(s->seed, layer, TENSOR_IK), .row_keys = dcp_rank_step_token_keys(rank), .rows = T,
        .heads = 1, .dim = s->cfg->model.index_head_dim, .amplitude = 1.0f,
    };
    return dcp_rank_fill_synthetic(rank, io->ik, &d);
}

/* Position j of the mode (a) list of a query token at position pos: K positions spread evenly
 * over [0, pos] (all of them, then -1, when pos < K). */
static int32_t run_list_position(uint64_t pos, uint32_t K, uint32_t j)
{
    if (pos + 1 <= K)
        return j <= pos ? (int32_t)j : -1;
    return (int32_t)((uint64_t)j * (pos + 1) / K);
}

/* The global position of token t of the step (decode: every sequence has q_len of them). */
static uint64_t step_position(const struct run_setup *s, uint32_t t)
{
    const uint64_t len = dcp_seq_length(s->engine, s->seq[t / s->q_len]);
    return len - s->q_len + t % s->q_len;
}

int run_layer_inputs(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer, uint32_t T,
                     struct dcp_attention_extra *x)
{
    const struct dcp_layer_kind *k = &s->info.layers[layer];
    memset(x, 0, sizeof(*x));
    if (k->type != DCP_LAYER_SPARSE_TOPK)
        return DCP_OK;
    const struct dcp_model_config *m = &s->cfg->model;
    if (s->cfg->parallel.sparse_index == DCP_SPARSE_INDEX_CALLER) {
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t j = 0; j < k->topk; j++)
                io->host_list[(size_t)t * k->topk + j] = run_list_position(step_position(s, t), k->topk, j);
        x->topk = io->topk;
        return dcp_rank_upload(rank, io->topk, io->host_list, (size_t)T * k->topk * sizeof(int32_t));
    }
    const void *keys = dcp_rank_step_token_keys(rank);
    const struct dcp_synth_desc q = {
        .seed = stream_seed(s->seed, layer, TENSOR_IQ), .row_keys = keys, .rows = T, .heads = m->index_heads,
        .dim = m->index_head_dim, .amplitude = 1.0f,
    };
    const struct dcp_synth_desc w = {
        .seed = stream_seed(s->seed, layer, TENSOR_IW), .row_keys = keys, .rows = T, .heads = 1,
        .dim = m->index_heads, .amplitude = 1.0f,
    };
    x->index_q = io->iq;
    x->index_weights = io->iw;
    x->topk_out = io->topk;
    int err = dcp_rank_fill_synthetic(rank, io->iq, &q);
    return err ? err : dcp_rank_fill_synthetic(rank, io->iw, &w);
}

/* Index of layer among the checked ones, or -1. */
static int checked_index(const struct run_setup *s, uint32_t layer)
{
    for (uint32_t c = 0; c < s->num_checked; c++)
        if (s->checked_layers[c] == layer)
            return (int)c;
    return -1;
}

bool run_is_checked_layer(const struct run_setup *s, uint32_t layer)
{
    return checked_index(s, layer) >= 0;
}

int run_download_outputs(struct run_setup *s, dcp_rank *rank, struct rank_io *io, uint32_t layer,
                         uint32_t T)
{
    const int c = checked_index(s, layer);
    const size_t rows = (size_t)T * s->info.q_heads_per_rank;
    const struct dcp_layer_kind *k = &s->info.layers[layer];
    int err = dcp_rank_download(rank, io->host_out[c], io->out, rows * s->info.v_dim * sizeof(float));
    if (!err)
        err = dcp_rank_download(rank, io->host_lse[c], io->lse, rows * sizeof(float));
    if (!err && k->type == DCP_LAYER_SPARSE_TOPK) /* the lists it attended: given (mode a) or selected (mode b) */
        err = dcp_rank_download(rank, io->host_topk[c], io->topk, (size_t)T * k->topk * sizeof(int32_t));
    return err;
}

/* ---- float64 reference ------------------------------------------------------------- */

/* One checked output row: (local rank, local head, step token) and its running softmax. */
struct ref_row {
    uint32_t rank, head, token;
    uint64_t pos;      /* the query's global position */
    double m, l;
    double *acc;       /* [v_dim] */
    float *q;          /* [qk_dim] */
    const int32_t *list; /* sparse_topk: the positions it attends ([list_len], -1 pads), else NULL */
    uint32_t list_len;
};

/* KV head a global query head reads. */
static uint32_t kv_head_of(const struct run_setup *s, uint32_t q_head)
{
    return dcp_model_kv_head_of(&s->cfg->model, q_head);
}

/* Whether row r attends position p: causal, within a sliding window, in a top-k list. */
static bool row_sees(const struct ref_row *r, uint64_t p, uint32_t window)
{
    if (p > r->pos || (window && p + window <= r->pos))
        return false;
    if (!r->list)
        return true;
    for (uint32_t j = 0; j < r->list_len; j++)
        if (r->list[j] == (int64_t)p)
            return true;
    return false;
}

/* Streams the sequence's keys once for all rows that share kv_head, updating each
 * row's online softmax in double precision from the cache-rounded values (only the
 * keys its layer kind lets it see: a window's, a top-k list's). */
static void reference_rows(const struct run_setup *s, uint32_t seq, uint64_t len, uint32_t layer,
                           uint32_t kv_head, struct ref_row *rows, uint32_t n, float *k, float *v)
{
    const struct dcp_model_config *m = &s->cfg->model;
    const uint32_t qk = s->info.qk_dim, vd = s->info.v_dim;
    const uint32_t window = s->info.layers[layer].type == DCP_LAYER_SLIDING_WINDOW ? s->info.layers[layer].window : 0;
    const double scale = (double)(float)m->softmax_scale;
    const uint64_t sk = stream_seed(s->seed, layer, TENSOR_K), sv = stream_seed(s->seed, layer, TENSOR_V);
    uint64_t first = len; /* no row sees a key before this one */
    for (uint32_t i = 0; i < n; i++)
        first = DCP_CLI_MIN(first, window && rows[i].pos + 1 > window ? rows[i].pos + 1 - window : 0);
    for (uint64_t p = first; p < len; p++) {
        bool any = false;
        for (uint32_t i = 0; i < n && !any; i++)
            any = row_sees(&rows[i], p, window);
        if (!any)
            continue;
        const uint64_t key = dcp_token_key(seq, p);
        for (uint32_t d = 0; d < qk; d++)
            k[d] = dcp_dtype_round(m->kv_dtype, dcp_synth_value(sk, key, kv_head, d), (float)m->kv_scale);
        const float *vv = k; /* MLA: the value is the latent part of the cached row */
        if (!s->mla) {
            for (uint32_t d = 0; d < vd; d++)
                v[d] = dcp_dtype_round(m->kv_dtype, dcp_synth_value(sv, key, kv_head, d), (float)m->kv_scale);
            vv = v;
        }
        for (uint32_t i = 0; i < n; i++) {
            struct ref_row *r = &rows[i];
            if (!row_sees(r, p, window))
                continue;
            double dot = 0;
            for (uint32_t d = 0; d < qk; d++)
                dot += (double)r->q[d] * k[d];
            const double sc = dot * scale;
            const double m_new = sc > r->m ? sc : r->m;
            const double corr = exp(r->m - m_new), w = exp(sc - m_new);
            for (uint32_t d = 0; d < vd; d++)
                r->acc[d] = r->acc[d] * corr + w * vv[d];
            r->l = r->l * corr + w;
            r->m = m_new;
        }
    }
}

/* Compares rows with the downloaded outputs of checked layer index c (layer `layer`): a row that
 * sees no key is 0 with LSE -inf (its sink's LSE with a sink); a sink adds e^s_h to the softmax. */
static void compare_rows(const struct run_setup *s, int c, uint32_t layer, const struct ref_row *rows, uint32_t n,
                         struct check_result *res)
{
    const uint32_t H = s->info.q_heads_per_rank, vd = s->info.v_dim;
    for (uint32_t i = 0; i < n; i++) {
        const struct ref_row *r = &rows[i];
        const struct rank_io *io = &s->io[r->rank];
        const size_t row = (size_t)r->token * H + r->head;
        const float *o = io->host_out[c] + row * vd;
        double lse_ref = r->l > 0 ? r->m + log(r->l) : -INFINITY, weight = r->l > 0 ? 1.0 / r->l : 0.0;
        if (s->info.layers[layer].sink && s->sinks[layer]) {
            const double sink = s->sinks[layer][io->q_head0 + r->head];
            const double top = lse_ref > sink ? lse_ref : sink;
            const double total = top + log(exp(lse_ref - top) + exp(sink - top));
            weight *= exp(lse_ref - total);
            lse_ref = total;
        }
        double diff = 0, norm = 0;
        bool finite = true;
        for (uint32_t d = 0; d < vd; d++) {
            const double ref = r->acc[d] * weight;
            finite = finite && isfinite(o[d]);
            diff += (o[d] - ref) * (o[d] - ref);
            norm += ref * ref;
        }
        const double rel = sqrt(diff) / (norm > 0 ? sqrt(norm) : 1.0);
        const double lse_err = isinf(lse_ref) ? (io->host_lse[c][row] == lse_ref ? 0.0 : INFINITY)
                                              : fabs((double)io->host_lse[c][row] - lse_ref);
        if (!finite || !isfinite(rel) || !isfinite(lse_err) || rel > s->tolerance)
            res->pass = false;
        if (!finite || !isfinite(rel))
            res->max_rel_err = INFINITY;
        else if (rel > res->max_rel_err)
            res->max_rel_err = rel;
        if (isfinite(lse_err) && lse_err > res->max_lse_err)
            res->max_lse_err = lse_err;
        res->rows++;
    }
}

/* The rows checked for one sequence: the first and last head of every local rank. */
static uint32_t pick_rows(const struct run_setup *s, uint32_t seq_index, struct ref_row *rows, uint32_t cap)
{
    const uint32_t H = s->info.q_heads_per_rank;
    const uint64_t len = dcp_seq_length(s->engine, s->seq[seq_index]);
    uint32_t n = 0;
    for (uint32_t r = 0; r < s->info.num_local_ranks; r++)
        for (uint32_t hi = 0; hi < (H > 1 ? 2u : 1u); hi++)
            for (uint32_t j = 0; j < s->q_len && n < cap; j++) {
                struct ref_row *row = &rows[n++];
                row->rank = r;
                row->head = hi ? H - 1 : 0;
                row->token = seq_index * s->q_len + j;
                row->pos = len - s->q_len + j;
            }
    return n;
}

enum dcp_dtype run_wire_dtype(const struct dcp_config *cfg)
{
    return dcp_wire_dtype_of(cfg->parallel.comm_dtype, RUN_ACT_DTYPE);
}

double run_check_tolerance(const struct dcp_config *cfg)
{
    const enum dcp_dtype w = run_wire_dtype(cfg);
    return 1e-3 + (w == DCP_DTYPE_BF16 ? 2 * 0x1p-8 : w == DCP_DTYPE_FP16 ? 2 * 0x1p-11 : 0.0);
}

int run_check_outputs(struct run_setup *s, struct check_result *res)
{
    if (s->admitted == 0)
        return DCP_OK;
    if (res->rows == 0) {
        res->pass = true;
        res->max_rel_err = 0;
    }
    s->tolerance = run_check_tolerance(s->cfg);
    const uint32_t qk = s->info.qk_dim, vd = s->info.v_dim;
    const uint32_t cap = s->info.num_local_ranks * 2 * s->q_len;
    struct ref_row *rows = calloc(cap, sizeof(*rows));
    double *acc = calloc((size_t)cap * vd, sizeof(*acc));
    float *qbuf = calloc((size_t)cap * qk, sizeof(*qbuf));
    float *k = calloc(qk, sizeof(*k)), *v = calloc(vd, sizeof(*v));
    if (!rows || !acc || !qbuf || !k || !v) {
        free(rows), free(acc), free(qbuf), free(k), free(v);
        return DCP_ENOMEM;
    }
    const uint32_t picks[2] = {0, s->admitted - 1};
    for (uint32_t pi = 0; pi < (s->admitted > 1 ? 2u : 1u); pi++) {
        const uint32_t si = picks[pi], seq = s->seq[si];
        const uint64_t len = dcp_seq_length(s->engine, seq);
        for (uint32_t c = 0; c < s->num_checked; c++) {
            const uint32_t layer = s->checked_layers[c];
            const struct dcp_layer_kind *kind = &s->info.layers[layer];
            uint32_t n = pick_rows(s, si, rows, cap);
            for (uint32_t i = 0; i < n; i++) {
                struct ref_row *r = &rows[i];
                r->acc = acc + (size_t)i * vd;
                r->q = qbuf + (size_t)i * qk;
                memset(r->acc, 0, vd * sizeof(double));
                r->m = -INFINITY;
                r->l = 0;
                r->list = kind->type == DCP_LAYER_SPARSE_TOPK ? s->io[r->rank].host_topk[c] + (size_t)r->token * kind->topk
                                                              : NULL;
                r->list_len = kind->topk;
                const uint32_t hq = s->io[r->rank].q_head0 + r->head;
                for (uint32_t d = 0; d < qk; d++)
                    r->q[d] = dcp_synth_value(stream_seed(s->seed, layer, TENSOR_Q), dcp_token_key(seq, r->pos), hq, d);
            }
            /* Group rows by the KV head they read so each key stream is generated once. */
            for (uint32_t i = 0; i < n;) {
                const uint32_t g = kv_head_of(s, s->io[rows[i].rank].q_head0 + rows[i].head);
                uint32_t j = i;
                while (j < n && kv_head_of(s, s->io[rows[j].rank].q_head0 + rows[j].head) == g)
                    j++;
                reference_rows(s, seq, len, layer, g, rows + i, j - i, k, v);
                i = j;
            }
            compare_rows(s, (int)c, layer, rows, n, res);
        }
    }
    free(rows), free(acc), free(qbuf), free(k), free(v);
    return DCP_OK;
}

/* ---- misc ------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double run_percentile(const double *v, uint32_t n, double p)
{
    if (n == 0)
        return 0;
    double *c = malloc(n * sizeof(*c));
    if (!c)
        return NAN;
    memcpy(c, v, n * sizeof(*c));
    qsort(c, n, sizeof(*c), cmp_double);
    uint32_t k = (uint32_t)ceil(p * n);
    const double r = c[k ? k - 1 : 0];
    free(c);
    return r;
}

int cli_override_backend(dcp_deployment **dep, enum dcp_backend_kind backend)
{
    struct dcp_config cfg = *dcp_deployment_config(*dep);
    cfg.runtime.backend = backend;
    dcp_diag *diag = NULL;
    dcp_deployment *copy = NULL;
    int err = dcp_diag_create(&diag);
    if (!err)
        err = dcp_deployment_from_config(&cfg, diag, &copy);
    dcp_diag_print(diag, stderr);
    dcp_diag_destroy(&diag);
    if (err)
        return err;
    dcp_deployment_destroy(dep);
    *dep = copy;
    return DCP_OK;
}

int cli_check_layers(const char *command, uint32_t layers, const char *file, const struct dcp_config *cfg)
{
    if (layers <= cfg->model.num_layers)
        return CLI_EXIT_OK;
    fprintf(stderr, "dcp-run %s: --layers %u: the model (%s) has %u layers; give 1..%u\n", command, layers, file,
            cfg->model.num_layers, cfg->model.num_layers);
    return CLI_EXIT_USAGE;
}

const char *cli_layout_name(char buf[CLI_LAYOUT_NAME_LEN], uint32_t dcp)
{
    if (dcp == 1)
        snprintf(buf, CLI_LAYOUT_NAME_LEN, "TP baseline (dcp=1)");
    else
        snprintf(buf, CLI_LAYOUT_NAME_LEN, "DCP layout (dcp=%u)", dcp);
    return buf;
}

void cli_hint_kv_mb(const char *command, int err, const struct dcp_config *cfg, uint64_t kv_mb)
{
    if (err != DCP_EDEVMEM)
        return;
    const char *given = kv_mb ? "a smaller " : "";
    /* The host backend's "device" memory is this machine's: suggest a budget that fits
     * in a quarter of what is free (and of an address-space limit), over the ranks. */
    if (!strstr(dcp_last_error(), "host backend")) {
        fprintf(stderr, "dcp-run %s: the KV budget per rank does not fit in device memory; give %s--kv-mb N "
                "(MB per rank) to run with a smaller one\n", command, given);
        return;
    }
    double avail = (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < avail)
        avail = (double)rl.rlim_cur;
    const uint32_t ranks = cfg->parallel.tp ? cfg->parallel.tp : 1;
    double mb = avail / 4 / ranks / 1e6;
    /* Two significant digits. */
    double unit = 1;
    while (mb >= 100 * unit)
        unit *= 10;
    mb = floor(mb / unit) * unit;
    fprintf(stderr, "dcp-run %s: the CPU backend holds each of the %u ranks' KV in this machine's memory, and a "
            "budget sized by %s does not fit; give %s--kv-mb N (MB per rank), e.g. --kv-mb %.0f (a quarter of the "
            "%.1f GB free, over %u ranks), or set runtime.host.memory_mb in the deployment\n", command, ranks,
            cfg->runtime.host.memory_bytes > 0 ? "runtime.host.memory_mb" : "the deployment's GPUs (hardware.memory_gb)",
            given, mb < 1 ? 1 : mb, avail / 1e9, ranks);
}

int cli_open_exec_deployment(const char *command, const char *file, const struct cli_exec_opts *exec,
                             dcp_deployment **dep)
{
    *dep = cli_load_deployment(file);
    if (!*dep)
        return CLI_EXIT_FAIL;
    int rc = CLI_EXIT_OK;
    if (exec->backend.given && cli_override_backend(dep, exec->backend.kind))
        rc = CLI_EXIT_FAIL;
    else
        rc = cli_check_layers(command, exec->layers, file, dcp_deployment_config(*dep));
    if (rc)
        dcp_deployment_destroy(dep);
    return rc;
}
