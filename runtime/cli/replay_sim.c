/*
 * replay_sim.c: one layout's run of `dcp-run replay`: the serving loop over one or
 * more scheduler nodes, and the summary of what happened.
 *
 * Colocated (the default), one node serves everything: it prefills and decodes, its
 * steps priced by the performance model (--simulate) or executed by the engine. With
 * --pd, prefill instances (nodes with the TP layout whose requests end at their first
 * token) compute the prompts, the KV is handed over the network to the decode node
 * (a scheduler with prompts_loaded), which only decodes.
 *
 * The nodes keep their own clocks; the loop always advances the earliest event: a
 * request arriving (the trace's time, or a closed-loop client's previous request
 * finishing), a prompt's KV arriving at the decode node, or the node whose next
 * step starts first. Requests enter each scheduler in time order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "replay.h"
#include "run_common.h"

/* ---- nodes ------------------------------------------------------------------------------- */

struct node {
    dcp_sched *s;
    struct dcp_perf_model model; /* simulate */
    struct replay_exec *x;       /* execute (colocated only) */
    double now;                  /* when its next step can start */
    bool busy;                   /* has requests it has not finished or rejected */
    uint32_t *global;            /* [count] trace request of each of its scheduler's requests */
    size_t count, cap;
};

/* A prompt's KV on its way to the decode node. */
struct transfer {
    double ready;
    uint32_t request;
};

/* What the loop knows of each trace request. */
struct req_state {
    double arrival;       /* when it was sent (closed loop: when its client's previous one finished) */
    double first_token;   /* -1 before */
    double finish;        /* -1 before */
    uint32_t generated;
    bool done;            /* finished or rejected */
    enum dcp_reject_reason reject;
};

struct sim {
    const struct replay_opts *o;
    const struct dcp_trace *trace;
    struct replay_result *res;
    struct node *decode;         /* nodes[0] */
    struct node *nodes;          /* [1 + prefill instances] */
    uint32_t num_nodes;
    struct req_state *reqs;      /* [trace->count] */
    uint32_t next;               /* next trace request to send */
    uint32_t outstanding;        /* sent, not done */
    uint32_t done;
    struct transfer *xfer;       /* min-heap on ready */
    size_t num_xfer, xfer_cap;
    double kv_link;              /* P/D: bytes/s a prompt's KV reaches one decode GPU at */
    double *step_dt[2];          /* decode node: durations of decode-only and mixed steps */
    size_t num_dt[2], dt_cap[2];
    size_t samples_cap;
};

/* Makes *buf hold need elements of elem bytes (capacity doubling). */
static int grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return DCP_OK;
    const size_t c = DCP_CLI_MAX(need, *cap ? 2 * *cap : 256);
    void *p = realloc(*buf, c * elem);
    if (!p)
        return DCP_ENOMEM;
    *buf = p;
    *cap = c;
    return DCP_OK;
}

static int add_sample(struct sim *m, double t, uint32_t running, double kv)
{
    struct replay_result *res = m->res;
    if (grow((void **)&res->samples, &m->samples_cap, res->num_samples + 1, sizeof(*res->samples)))
        return DCP_ENOMEM;
    res->samples[res->num_samples++] = (struct replay_sample){.t = t, .running = running, .kv_used = (float)kv};
    return DCP_OK;
}

static int push_transfer(struct sim *m, struct transfer t)
{
    if (grow((void **)&m->xfer, &m->xfer_cap, m->num_xfer + 1, sizeof(*m->xfer)))
        return DCP_ENOMEM;
    size_t i = m->num_xfer++;
    while (i > 0 && m->xfer[(i - 1) / 2].ready > t.ready) {
        m->xfer[i] = m->xfer[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    m->xfer[i] = t;
    return DCP_OK;
}

static struct transfer pop_transfer(struct sim *m)
{
    const struct transfer top = m->xfer[0], last = m->xfer[--m->num_xfer];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m->num_xfer)
            break;
        if (c + 1 < m->num_xfer && m->xfer[c + 1].ready < m->xfer[c].ready)
            c++;
        if (m->xfer[c].ready >= last.ready)
            break;
        m->xfer[i] = m->xfer[c];
        i = c;
    }
    if (m->num_xfer)
        m->xfer[i] = last;
    return top;
}

/* Pool of a simulated scheduler: the pages an engine of layout dcp would have per
 * GPU, from the plan; requests longer than the model's window are rejected. */
static int sim_pool(const dcp_deployment *dep, uint32_t dcp, const struct dcp_trace *t, uint32_t max_running,
                    struct dcp_sched_pool *pool)
{
    struct dcp_plan plan;
    int err = dcp_plan_compute_dcp(dep, dcp, &plan);
    if (err)
        return err;
    if (!plan.dcp.pages) {
        char name[CLI_LAYOUT_NAME_LEN];
        fprintf(stderr, "dcp-run replay: %s: the KV budget holds no page\n", cli_layout_name(name, dcp));
        return DCP_ENOSPC;
    }
    const uint64_t window = dcp_deployment_config(dep)->model.context_window;
    uint64_t longest = 1;
    for (uint32_t i = 0; i < t->count; i++)
        longest = DCP_CLI_MAX(longest, t->requests[i].prompt_tokens + t->requests[i].output_tokens);
    if (window)
        longest = DCP_CLI_MIN(longest, window);
    *pool = (struct dcp_sched_pool){
        .num_blocks = DCP_CLI_MIN(plan.dcp.pages, (uint64_t)INT32_MAX),
        .block_size = dcp_deployment_config(dep)->memory.block_size,
        .group_size = dcp,
        .max_seqs = max_running,
        .max_context = longest,
    };
    return DCP_OK;
}

static int sim_node(const dcp_deployment *dep, uint32_t dcp, const struct replay_opts *o, const struct dcp_trace *t,
                    bool prompts_loaded, struct node *n)
{
    struct dcp_sched_pool pool;
    struct dcp_sched_params sp = o->sched;
    sp.prompts_loaded = prompts_loaded;
    int err = sim_pool(dep, dcp, t, o->sched.max_running, &pool);
    if (!err)
        err = dcp_perf_model_init(dep, dcp, &o->model, &n->model);
    if (!err)
        err = dcp_sched_create(&pool, &sp, &n->s);
    return err;
}

/* ---- the loop ---------------------------------------------------------------------------- */

static void mark_done(struct sim *m, uint32_t i)
{
    if (m->reqs[i].done)
        return;
    m->reqs[i].done = true;
    m->outstanding--;
    m->done++;
}

/* Sends trace request i at time t to node n. A request that can never fit is
 * rejected there and then (dcp_sched_add): it is done. */
static int submit(struct sim *m, struct node *n, uint32_t i, double t, uint32_t output_tokens)
{
    struct dcp_serve_request r = m->trace->requests[i];
    r.arrival = t;
    r.output_tokens = output_tokens;
    uint32_t id;
    int err = dcp_sched_add(n->s, &r, &id);
    if (!err && !(err = grow((void **)&n->global, &n->cap, n->count + 1, sizeof(*n->global))))
        n->global[n->count++] = i;
    if (err)
        return err;
    const struct dcp_sched_request_info *in = dcp_sched_request(n->s, id);
    if (in->state == DCP_REQ_REJECTED) {
        m->reqs[i].reject = in->reject;
        mark_done(m, i);
        return DCP_OK;
    }
    if (!n->busy)
        n->now = DCP_CLI_MAX(n->now, t);
    n->busy = true;
    return DCP_OK;
}

/* The node with the fewest unfinished requests among the prefill instances. */
static struct node *least_loaded_prefill(struct sim *m)
{
    struct node *best = NULL;
    uint32_t best_load = UINT32_MAX;
    for (uint32_t k = 1; k < m->num_nodes; k++) {
        struct dcp_sched_stats st;
        dcp_sched_get_stats(m->nodes[k].s, &st);
        const uint32_t load = st.submitted - st.finished - st.rejected;
        if (load < best_load) {
            best = &m->nodes[k];
            best_load = load;
        }
    }
    return best;
}

/* Request i (of the trace) arrives at time t: the first stage takes it. */
static int send_request(struct sim *m, uint32_t i, double t)
{
    m->reqs[i] = (struct req_state){.arrival = t, .first_token = -1, .finish = -1};
    m->outstanding++;
    const uint32_t out = m->trace->requests[i].output_tokens;
    if (m->num_nodes == 1)
        return submit(m, m->decode, i, t, out);
    return submit(m, least_loaded_prefill(m), i, t, 1);
}

/* The next event's time and kind: 0 a request arrives, 1 a prompt's KV reaches the
 * decode node, 2 node *which steps. INFINITY when nothing is left. */
static double next_event(struct sim *m, int *kind, struct node **which)
{
    double t = INFINITY;
    *kind = -1;
    if (!m->o->clients && m->next < m->trace->count) {
        t = m->trace->requests[m->next].arrival;
        *kind = 0;
    }
    if (m->num_xfer && m->xfer[0].ready < t) {
        t = m->xfer[0].ready;
        *kind = 1;
    }
    for (uint32_t k = 0; k < m->num_nodes; k++)
        if (m->nodes[k].busy && m->nodes[k].now < t) {
            t = m->nodes[k].now;
            *kind = 2;
            *which = &m->nodes[k];
        }
    return t;
}

/* Closed loop: clients whose requests are done send the next ones at t. */
static int feed_clients(struct sim *m, double t)
{
    int err = DCP_OK;
    while (!err && m->o->clients && m->next < m->trace->count && m->outstanding < m->o->clients)
        err = send_request(m, m->next++, t);
    return err;
}

/* After a step of node n ending at `end`: requests it finished or rejected. */
static int after_step(struct sim *m, struct node *n, const struct dcp_sched_step *step, double end)
{
    const bool prefill_node = n != m->decode;
    for (uint32_t e = 0; e < step->num_entries; e++) {
        const uint32_t local = step->entries[e].request, i = n->global[local];
        const struct dcp_sched_request_info *in = dcp_sched_request(n->s, local);
        struct req_state *r = &m->reqs[i];
        if (in->state != DCP_REQ_FINISHED || r->done)
            continue;
        if (prefill_node) {
            /* The prompt is computed and the first token known: hand the KV over. */
            if (r->first_token >= 0)
                continue;
            r->first_token = in->first_token;
            r->generated = 1;
            if (m->trace->requests[i].output_tokens <= 1) {
                r->finish = in->finish;
                mark_done(m, i);
                continue;
            }
            /* Each decode GPU receives what it keeps of the prompt, over its own link. */
            const double xfer =
                dcp_perf_kv_request_bytes(&m->decode->model, m->trace->requests[i].prompt_tokens) / m->kv_link;
            int err = push_transfer(m, (struct transfer){end + xfer, i});
            if (err)
                return err;
        } else {
            if (m->num_nodes == 1)
                r->first_token = in->first_token;
            r->generated = in->generated;
            r->finish = in->finish;
            mark_done(m, i);
        }
    }
    return DCP_OK;
}

/* The decode node's state over time: a sample holds the state during (previous t, t]. */
static int sample(struct sim *m)
{
    struct dcp_sched_stats st;
    dcp_sched_get_stats(m->decode->s, &st);
    return add_sample(m, m->decode->now, st.running, (double)st.used_blocks / (double)st.num_blocks);
}

static int step_node(struct sim *m, struct node *n, uint32_t **gen_before, size_t *gen_cap)
{
    struct dcp_sched_step step;
    /* An idle gap before this step (nothing admitted changes between steps) keeps the
     * state the last step left. */
    const struct replay_result *res = m->res;
    if (n == m->decode && (!res->num_samples || res->samples[res->num_samples - 1].t < n->now)) {
        int err = sample(m);
        if (err)
            return err;
    }
    int err = dcp_sched_plan_step(n->s, n->now, &step);
    if (err)
        return err;
    if (!step.num_entries) {
        const double next = dcp_sched_next_arrival(n->s);
        struct dcp_sched_stats st;
        dcp_sched_get_stats(n->s, &st);
        if (isfinite(next)) {
            n->now = DCP_CLI_MAX(n->now, next);
        } else if (st.submitted == st.finished + st.rejected) {
            n->busy = false;
        } else {
            fprintf(stderr, "dcp-run replay: scheduler stalled with requests left (a bug)\n");
            return DCP_EINVAL;
        }
        return DCP_OK;
    }
    double dt = 0;
    if (n->x) {
        if (*gen_cap < step.num_decode) {
            free(*gen_before);
            *gen_cap = step.num_decode;
            if (!(*gen_before = malloc(*gen_cap * sizeof(**gen_before))))
                return DCP_ENOMEM;
        }
        for (uint32_t i = 0; i < step.num_decode; i++)
            (*gen_before)[i] = dcp_sched_request(n->s, step.entries[i].request)->generated;
        if ((err = replay_exec_step(n->x, n->s, &step, &dt)))
            return err;
    } else {
        struct dcp_perf_step t;
        dcp_perf_step_time(&n->model, &step, &t);
        dt = t.total;
        if (n == m->decode) {
            m->res->model_seconds[0] += t.linear;
            m->res->model_seconds[1] += t.attention;
            m->res->model_seconds[2] += t.tp_comm + t.dcp_comm;
            m->res->model_seconds[3] += t.overhead;
        }
    }
    if (n == m->decode && step.num_decode) {
        const int mixed = step.prefill_tokens > 0;
        if ((err = grow((void **)&m->step_dt[mixed], &m->dt_cap[mixed], m->num_dt[mixed] + 1, sizeof(double))))
            return err;
        m->step_dt[mixed][m->num_dt[mixed]++] = dt;
        m->res->decode_tokens[mixed] += step.decode_tokens;
    }
    n->now += dt;
    if ((err = dcp_sched_complete(n->s, n->now)))
        return err;
    if (n->x) {
        replay_exec_after_complete(n->x, n->s, &step, *gen_before);
        /* Executed runs are small: check the scheduler's invariants every step too. */
        if ((err = dcp_sched_check(n->s))) {
            fprintf(stderr, "dcp-run replay: invariant broken: %s\n", dcp_last_error());
            return err;
        }
    }
    if ((err = after_step(m, n, &step, n->now)))
        return err;
    return n == m->decode ? sample(m) : DCP_OK;
}

static int serve(struct sim *m, struct progress *pg)
{
    const uint32_t total = m->trace->count;
    uint32_t *gen_before = NULL;
    size_t gen_cap = 0;
    int err = feed_clients(m, 0);
    while (!err && m->done < total) {
        int kind;
        struct node *n = NULL;
        const double t = next_event(m, &kind, &n);
        if (kind < 0) {
            fprintf(stderr, "dcp-run replay: nothing left to run with %u requests unfinished (a bug)\n",
                    total - m->done);
            err = DCP_EINVAL;
        } else if (kind == 0) {
            err = send_request(m, m->next++, t);
        } else if (kind == 1) {
            const struct transfer x = pop_transfer(m);
            err = submit(m, m->decode, x.request, x.ready, m->trace->requests[x.request].output_tokens);
        } else {
            err = step_node(m, n, &gen_before, &gen_cap);
            if (!err)
                err = feed_clients(m, n->now);
        }
        progress_update(pg, m->done, total);
    }
    free(gen_before);
    return err;
}

/* ---- the summary ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile (nearest rank) of n sorted values; 0 for none. */
static double percentile(const double *v, size_t n, double p)
{
    return n ? v[(size_t)ceil(p * (double)n) - 1] : 0;
}

/* Open loop only: the layout falls behind its arrivals when the TTFT of the last
 * quarter of the requests (in arrival order) is many times that of the first. */
static void overload(struct sim *m, const double *ttft_in_order, uint32_t n)
{
    struct replay_result *res = m->res;
    if (m->o->clients || n < 8)
        return;
    const uint32_t q = n / 4;
    double first = 0, last = 0;
    for (uint32_t i = 0; i < q; i++) {
        first += ttft_in_order[i];
        last += ttft_in_order[n - q + i];
    }
    res->ttft_first_quarter = first / q;
    res->ttft_last_quarter = last / q;
    res->overloaded = res->ttft_last_quarter > REPLAY_OVERLOAD_RATIO * res->ttft_first_quarter &&
                      res->ttft_last_quarter > REPLAY_OVERLOAD_SECONDS;
}

static int summarize(struct sim *m, double first_arrival)
{
    struct replay_result *res = m->res;
    const uint32_t count = m->trace->count;
    struct dcp_sched_stats st;
    dcp_sched_get_stats(m->decode->s, &st);
    res->preemptions = st.preemptions;
    res->steps = st.steps;
    res->evictions = st.evictions;
    res->drafted = st.drafted_tokens;
    res->accepted = st.accepted_drafts;
    res->num_blocks = st.num_blocks;
    res->tokens_per_block = st.tokens_per_block;
    /* Prompt and cache figures come from the nodes that prefill. */
    for (uint32_t k = m->num_nodes > 1 ? 1 : 0; k < m->num_nodes; k++) {
        dcp_sched_get_stats(m->nodes[k].s, &st);
        res->prompt_tokens += st.prompt_tokens;
        res->cached_tokens += st.cached_tokens;
        if (k > 0)
            res->preemptions += st.preemptions;
    }
    double *ttft = malloc((count + 1) * sizeof(double)), *tpot = malloc((count + 1) * sizeof(double));
    double *ordered = malloc((count + 1) * sizeof(double));
    if (!ttft || !tpot || !ordered) {
        free(ttft);
        free(tpot);
        free(ordered);
        return DCP_ENOMEM;
    }
    uint32_t n1 = 0, n2 = 0;
    double last = first_arrival;
    res->requests = count;
    for (uint32_t i = 0; i < count; i++) {
        const struct req_state *r = &m->reqs[i];
        if (r->reject) {
            res->rejected++;
            res->rejected_pool += r->reject == DCP_REJECT_POOL;
            res->rejected_context += r->reject == DCP_REJECT_CONTEXT;
            continue;
        }
        if (!r->done)
            continue;
        res->finished++;
        res->output_tokens += r->generated;
        ttft[n1] = ordered[n1] = r->first_token - r->arrival;
        n1++;
        if (r->generated > 1)
            tpot[n2++] = (r->finish - r->first_token) / (r->generated - 1);
        last = DCP_CLI_MAX(last, r->finish);
    }
    overload(m, ordered, n1);
    qsort(ttft, n1, sizeof(double), cmp_double);
    qsort(tpot, n2, sizeof(double), cmp_double);
    static const double pct[3] = {0.5, 0.9, 0.99};
    for (int k = 0; k < 3; k++) {
        res->ttft[k] = percentile(ttft, n1, pct[k]);
        res->tpot[k] = percentile(tpot, n2, pct[k]);
    }
    free(ttft);
    free(tpot);
    free(ordered);
    for (int k = 0; k < 2; k++) {
        if (m->num_dt[k]) /* no steps of that kind: no array (qsort takes none) */
            qsort(m->step_dt[k], m->num_dt[k], sizeof(double), cmp_double);
        res->decode_steps[k] = m->num_dt[k];
        res->step_p50[k] = percentile(m->step_dt[k], m->num_dt[k], 0.5);
    }
    res->makespan = last - first_arrival;
    res->tok_s_gpu = res->makespan > 0 ? (double)res->output_tokens / res->makespan / res->gpus : 0;
    res->tok_s_decode_gpu = res->makespan > 0 ? (double)res->output_tokens / res->makespan / res->tp : 0;
    /* Sample i holds the state during (t[i-1], t[i]]; idle gaps count as they are. */
    double area_c = 0, area_kv = 0, prev = first_arrival;
    for (uint64_t i = 0; i < res->num_samples; i++) {
        const struct replay_sample *p = &res->samples[i];
        const double dt = DCP_CLI_MAX(p->t - prev, 0.0);
        area_c += dt * p->running;
        area_kv += dt * p->kv_used;
        prev = DCP_CLI_MAX(prev, p->t);
        res->conc_max = DCP_CLI_MAX(res->conc_max, p->running);
        res->kv_max = DCP_CLI_MAX(res->kv_max, (double)p->kv_used);
    }
    if (res->makespan > 0) {
        res->conc_mean = area_c / res->makespan;
        res->kv_mean = area_kv / res->makespan;
    }
    return DCP_OK;
}

/* ---- one layout -------------------------------------------------------------------------- */

/* The deployment of a prefill instance: the TP layout with prefill_tp GPUs. */
static int prefill_deployment(const dcp_deployment *dep, uint32_t tp, dcp_deployment **out)
{
    struct dcp_config cfg = *dcp_deployment_config(dep);
    cfg.parallel.tp = tp;
    cfg.parallel.dcp = 1;
    dcp_diag *diag = NULL;
    int err = dcp_diag_create(&diag);
    if (!err && (err = dcp_deployment_from_config(&cfg, diag, out)) != DCP_OK) {
        fprintf(stderr, "dcp-run replay: a prefill instance of tp %u:\n", tp);
        dcp_diag_print(diag, stderr);
    }
    dcp_diag_destroy(&diag);
    return err;
}

static int setup_nodes(struct sim *m, const dcp_deployment *dep, dcp_deployment **prefill_dep, uint32_t dcp)
{
    const struct replay_opts *o = m->o;
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    struct replay_result *res = m->res;
    struct node *d = m->decode;
    int err;
    if (!o->simulate) {
        err = replay_exec_create(dep, o, m->trace, dcp, &d->x);
        if (!err) {
            struct dcp_engine_info info;
            dcp_engine_get_info(replay_exec_engine(d->x), &info);
            snprintf(res->backend, sizeof(res->backend), "%s (%s)", info.backend, info.backend_detail);
            err = dcp_sched_create_for_engine(replay_exec_engine(d->x), &o->sched, &d->s);
        }
        res->executed = true;
        return err;
    }
    snprintf(res->backend, sizeof(res->backend), "simulated (performance model)");
    if ((err = sim_node(dep, dcp, o, m->trace, m->num_nodes > 1, d)))
        return err;
    if (m->num_nodes == 1)
        return DCP_OK;
    /* P/D: prefill instances of prefill_tp GPUs; the KV of a prompt crosses the network
     * to every decode GPU, each receiving what it stores (all of it with TP's copies,
     * 1/dcp with DCP) over its own link. */
    const uint32_t ptp = o->prefill_tp ? o->prefill_tp : cfg->parallel.tp;
    if (!*prefill_dep && (err = prefill_deployment(dep, ptp, prefill_dep)))
        return err;
    for (uint32_t k = 1; k < m->num_nodes && !err; k++)
        err = sim_node(*prefill_dep, 1, o, m->trace, false, &m->nodes[k]);
    res->prefill_gpus = ptp * (m->num_nodes - 1);
    res->gpus += res->prefill_gpus;
    m->kv_link = cfg->hardware.internode_bandwidth * o->model.link_efficiency;
    return err;
}

int replay_layout(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *trace,
                  uint32_t dcp, dcp_deployment **prefill_dep, struct replay_result *res)
{
    memset(res, 0, sizeof(*res));
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    res->dcp = dcp;
    res->tp = res->gpus = cfg->parallel.tp;
    const double t0 = cli_now();
    const uint32_t num_nodes = o->pd ? 1 + o->prefill_instances : 1;
    struct sim m = {.o = o, .trace = trace, .res = res, .num_nodes = num_nodes};
    m.nodes = calloc(num_nodes, sizeof(*m.nodes));
    m.reqs = calloc(trace->count + 1, sizeof(*m.reqs));
    int err = m.nodes && m.reqs ? DCP_OK : DCP_ENOMEM;
    m.decode = m.nodes;
    if (!err)
        err = setup_nodes(&m, dep, prefill_dep, dcp);
    struct progress pg;
    progress_init(&pg, o->quiet);
    char label[64];
    snprintf(label, sizeof(label), "replay %s", dcp == 1 ? "TP baseline" : "DCP");
    progress_begin(&pg, label);
    if (!err)
        err = serve(&m, &pg);
    progress_end(&pg);
    if (!err)
        err = summarize(&m, o->clients ? 0 : trace->requests[0].arrival);
    if (err) {
        fprintf(stderr, "dcp-run replay: %s: %s: %s\n", cli_layout_name(label, dcp), dcp_strerror(err),
                dcp_last_error());
        cli_hint_kv_mb("replay", err, cfg, o->exec.kv_mb);
    }
    for (uint32_t k = 0; m.nodes && k < num_nodes; k++) {
        dcp_sched_destroy(&m.nodes[k].s);
        free(m.nodes[k].global);
    }
    if (m.decode)
        replay_exec_finish(&m.decode->x, &res->check);
    free(m.nodes);
    free(m.reqs);
    free(m.xfer);
    free(m.step_dt[0]);
    free(m.step_dt[1]);
    res->wall_seconds = cli_now() - t0;
    return err;
}

void replay_result_free(struct replay_result *res)
{
    free(res->samples);
    free(res->check.request_digest);
    memset(res, 0, sizeof(*res));
}
