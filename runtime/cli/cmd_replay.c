/*
 * cmd_replay.c: `dcp-run replay` -- a request trace through the serving scheduler,
 * for the TP baseline and for DCP in the same per-GPU memory, side by side.
 *
 * One loop serves both modes: the scheduler plans a step; --simulate prices it with
 * the performance model (perf.h), otherwise the engine executes it (replay_exec.c) and its wall
 * time is the step's duration; the scheduler then completes it. Between steps with
 * nothing to run the clock jumps to the next arrival.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format.h"
#include "progress.h"
#include "replay.h"
#include "run_common.h"
#include "table.h"

/* ---- the loop -------------------------------------------------------------------------- */

static int add_sample(struct replay_result *res, size_t *cap, double t, uint32_t running, double kv)
{
    if (res->num_samples == *cap) {
        const size_t c = *cap ? 2 * *cap : 4096;
        struct replay_sample *p = realloc(res->samples, c * sizeof(*p));
        if (!p)
            return DCP_ENOMEM;
        res->samples = p;
        *cap = c;
    }
    res->samples[res->num_samples++] = (struct replay_sample){.t = t, .running = running, .kv_used = (float)kv};
    return DCP_OK;
}

/* Pool of a standalone (simulated) scheduler: the pages an engine of this layout
 * would have per GPU, from the plan. */
static int sim_pool(const dcp_deployment *dep, uint32_t dcp, const struct dcp_trace *t, struct dcp_sched_pool *pool,
                    uint32_t max_running)
{
    struct dcp_plan plan;
    int err = dcp_plan_compute(dep, &plan);
    if (err)
        return err;
    const struct dcp_plan_layout *lay = dcp == 1 ? &plan.baseline : &plan.dcp;
    if (!lay->pages) {
        char name[CLI_LAYOUT_NAME_LEN];
        fprintf(stderr, "dcp-run replay: %s: the KV budget holds no page\n", cli_layout_name(name, dcp));
        return DCP_ENOSPC;
    }
    /* Requests longer than the model's window are rejected (reason "context"). */
    const uint64_t window = dcp_deployment_config(dep)->model.context_window;
    uint64_t longest = 0;
    for (uint32_t i = 0; i < t->count; i++)
        longest = DCP_CLI_MAX(longest, t->requests[i].prompt_tokens + t->requests[i].output_tokens);
    if (window)
        longest = DCP_CLI_MIN(longest, window);
    *pool = (struct dcp_sched_pool){
        .num_blocks = DCP_CLI_MIN(lay->pages, (uint64_t)INT32_MAX),
        .block_size = dcp_deployment_config(dep)->memory.block_size,
        .group_size = dcp,
        .max_seqs = max_running,
        .max_context = longest,
    };
    return DCP_OK;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Latency percentiles and the time-weighted means of the timeline. */
static int summarize(dcp_sched *s, struct replay_result *res, double first_arrival)
{
    struct dcp_sched_stats st;
    dcp_sched_get_stats(s, &st);
    res->requests = st.submitted;
    res->finished = st.finished;
    res->rejected = st.rejected;
    res->preemptions = st.preemptions;
    res->steps = st.steps;
    res->evictions = st.evictions;
    res->output_tokens = st.generated_tokens;
    res->prompt_tokens = st.prompt_tokens;
    res->cached_tokens = st.cached_tokens;
    res->drafted = st.drafted_tokens;
    res->accepted = st.accepted_drafts;
    res->num_blocks = st.num_blocks;
    res->tokens_per_block = st.tokens_per_block;
    double *ttft = malloc((st.submitted + 1) * sizeof(double)), *tpot = malloc((st.submitted + 1) * sizeof(double));
    if (!ttft || !tpot) {
        free(ttft);
        free(tpot);
        return DCP_ENOMEM;
    }
    uint32_t n1 = 0, n2 = 0;
    double last = first_arrival;
    for (uint32_t i = 0; i < st.submitted; i++) {
        const struct dcp_sched_request_info *in = dcp_sched_request(s, i);
        if (in->state == DCP_REQ_REJECTED) {
            res->rejected_pool += in->reject == DCP_REJECT_POOL;
            res->rejected_context += in->reject == DCP_REJECT_CONTEXT;
            continue;
        }
        ttft[n1++] = in->first_token - in->arrival;
        if (in->generated > 1)
            tpot[n2++] = (in->finish - in->first_token) / (in->generated - 1);
        last = DCP_CLI_MAX(last, in->finish);
    }
    qsort(ttft, n1, sizeof(double), cmp_double);
    qsort(tpot, n2, sizeof(double), cmp_double);
    static const double pct[3] = {0.5, 0.9, 0.99};
    for (int k = 0; k < 3; k++) {
        res->ttft[k] = n1 ? ttft[(uint32_t)ceil(pct[k] * n1) - 1] : 0;
        res->tpot[k] = n2 ? tpot[(uint32_t)ceil(pct[k] * n2) - 1] : 0;
    }
    free(ttft);
    free(tpot);
    res->makespan = last - first_arrival;
    res->tok_s_gpu = res->makespan > 0 ? (double)res->output_tokens / res->makespan / res->tp : 0;
    /* Sample i holds the state during (t[i-1], t[i]]; idle gaps count as they are. */
    double area_c = 0, area_kv = 0, prev = first_arrival;
    for (uint64_t i = 0; i < res->num_samples; i++) {
        const struct replay_sample *p = &res->samples[i];
        const double dt = DCP_CLI_MAX(p->t - prev, 0.0);
        area_c += dt * p->running;
        area_kv += dt * p->kv_used;
        prev = p->t;
        res->conc_max = DCP_CLI_MAX(res->conc_max, p->running);
        res->kv_max = DCP_CLI_MAX(res->kv_max, (double)p->kv_used);
    }
    if (res->makespan > 0) {
        res->conc_mean = area_c / res->makespan;
        res->kv_mean = area_kv / res->makespan;
    }
    return DCP_OK;
}

/* Plans, runs (model or engine) and completes steps until every request is done. */
/* Closed loop (--clients N): a finished request's client sends the next request of
 * the trace at once, whatever its timestamp. Submits requests while fewer than
 * clients are unfinished. */
static int feed_clients(dcp_sched *s, const struct dcp_trace *t, uint32_t clients, uint32_t *next, double now)
{
    struct dcp_sched_stats st;
    dcp_sched_get_stats(s, &st);
    int err = DCP_OK;
    while (!err && *next < t->count && st.submitted - st.finished - st.rejected < clients) {
        struct dcp_serve_request r = t->requests[*next];
        r.arrival = now;
        err = dcp_sched_add(s, &r, NULL);
        ++*next;
        dcp_sched_get_stats(s, &st);
    }
    return err;
}

static int serve_loop(dcp_sched *s, const struct dcp_perf_model *model, struct replay_exec *x,
                      struct replay_result *res, struct progress *pg, const struct dcp_trace *trace,
                      uint32_t clients)
{
    const uint32_t total = trace->count;
    size_t cap = 0;
    double now = 0;
    uint32_t fed = 0;
    uint32_t *gen_before = NULL;
    size_t gen_cap = 0;
    int err = DCP_OK;
    while (!err && (!dcp_sched_done(s) || (clients && fed < total))) {
        if (clients && (err = feed_clients(s, trace, clients, &fed, now)))
            break;
        struct dcp_sched_step step;
        if ((err = dcp_sched_plan_step(s, now, &step)))
            break;
        if (!step.num_entries) {
            const double next = dcp_sched_next_arrival(s);
            if (!isfinite(next)) {
                fprintf(stderr, "dcp-run replay: scheduler stalled with requests left (a bug)\n");
                err = DCP_EINVAL;
                break;
            }
            now = DCP_CLI_MAX(now, next);
            /* The idle gap up to the arrival is recorded as it was (nothing running). */
            struct dcp_sched_stats st;
            dcp_sched_get_stats(s, &st);
            err = add_sample(res, &cap, now, st.running, (double)st.used_blocks / (double)st.num_blocks);
            continue;
        }
        double dt = 0;
        if (model) {
            struct dcp_perf_step t;
            dcp_perf_step_time(model, &step, &t);
            dt = t.total;
            res->model_seconds[0] += t.linear;
            res->model_seconds[1] += t.attention;
            res->model_seconds[2] += t.tp_comm + t.dcp_comm;
            res->model_seconds[3] += t.overhead;
        } else {
            if (gen_cap < step.num_decode) {
                free(gen_before);
                gen_cap = step.num_decode;
                if (!(gen_before = malloc(gen_cap * sizeof(*gen_before)))) {
                    err = DCP_ENOMEM;
                    break;
                }
            }
            for (uint32_t i = 0; i < step.num_decode; i++)
                gen_before[i] = dcp_sched_request(s, step.entries[i].request)->generated;
            if ((err = replay_exec_step(x, s, &step, &dt)))
                break;
        }
        now += dt;
        if ((err = dcp_sched_complete(s, now)))
            break;
        if (x) {
            replay_exec_after_complete(x, s, &step, gen_before);
            /* Executed runs are small: check the scheduler's invariants every step too. */
            if ((err = dcp_sched_check(s))) {
                fprintf(stderr, "dcp-run replay: invariant broken: %s\n", dcp_last_error());
                break;
            }
        }
        struct dcp_sched_stats st;
        dcp_sched_get_stats(s, &st);
        err = add_sample(res, &cap, now, st.running, (double)st.used_blocks / (double)st.num_blocks);
        progress_update(pg, st.finished + st.rejected, total);
    }
    free(gen_before);
    return err;
}

int replay_layout(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *trace,
                  uint32_t dcp, struct replay_result *res)
{
    memset(res, 0, sizeof(*res));
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    res->dcp = dcp;
    res->tp = cfg->parallel.tp;
    const double t0 = cli_now();
    dcp_sched *s = NULL;
    struct replay_exec *x = NULL;
    struct dcp_perf_model model;
    int err;
    if (o->simulate) {
        struct dcp_sched_pool pool;
        err = sim_pool(dep, dcp, trace, &pool, o->sched.max_running);
        if (!err)
            err = dcp_perf_model_init(dep, dcp, &o->model, &model);
        if (!err)
            err = dcp_sched_create(&pool, &o->sched, &s);
        snprintf(res->backend, sizeof(res->backend), "simulated (performance model)");
    } else {
        err = replay_exec_create(dep, o, trace, dcp, &x);
        if (!err) {
            struct dcp_engine_info info;
            dcp_engine_get_info(replay_exec_engine(x), &info);
            snprintf(res->backend, sizeof(res->backend), "%s (%s)", info.backend, info.backend_detail);
            err = dcp_sched_create_for_engine(replay_exec_engine(x), &o->sched, &s);
        }
        res->executed = true;
    }
    for (uint32_t i = 0; !err && !o->clients && i < trace->count; i++)
        err = dcp_sched_add(s, &trace->requests[i], NULL);
    struct progress pg;
    progress_init(&pg, o->quiet);
    char label[64];
    snprintf(label, sizeof(label), "replay %s", dcp == 1 ? "TP baseline" : "DCP");
    progress_begin(&pg, label);
    if (!err)
        err = serve_loop(s, o->simulate ? &model : NULL, x, res, &pg, trace, o->clients);
    progress_end(&pg);
    if (!err)
        err = summarize(s, res, o->clients ? 0 : trace->requests[0].arrival);
    if (err) {
        fprintf(stderr, "dcp-run replay: %s: %s: %s\n", cli_layout_name(label, dcp), dcp_strerror(err),
                dcp_last_error());
        cli_hint_kv_mb("replay", err, cfg, o->exec.kv_mb);
    }
    dcp_sched_destroy(&s);
    replay_exec_finish(&x, &res->check);
    res->wall_seconds = cli_now() - t0;
    return err;
}

void replay_result_free(struct replay_result *res)
{
    free(res->samples);
    free(res->check.request_digest);
    memset(res, 0, sizeof(*res));
}

/* ---- output ---------------------------------------------------------------------------- */

static double hit_rate(const struct replay_result *r)
{
    return r->prompt_tokens ? (double)r->cached_tokens / (double)r->prompt_tokens : 0;
}

static void print_text(const struct dcp_config *cfg, const struct replay_opts *o, const struct dcp_trace *t,
                       const struct replay_result *r, int n)
{
    printf("dcp-run replay: %s\n", o->file);
    printf("model %s (%s, %u layers) on %u x %s, tp %u; %s\n", cfg->model.name,
           dcp_attention_kind_name(cfg->model.attention), cfg->model.num_layers, cfg->parallel.tp,
           cfg->hardware.gpu, cfg->parallel.tp, r[0].backend);
    printf("trace %s (%s): %u requests over %.0f s, length scale %g, time scale %g", o->trace ? o->trace : "synthetic agentic",
           t->format, t->count, t->requests[t->count - 1].arrival - t->requests[0].arrival,
           o->length_scale ? o->length_scale : 1, o->time_scale ? o->time_scale : 1);
    if (o->clients)
        printf("; closed loop of %u clients (timestamps ignored)", o->clients);
    printf("\n");
    printf("scheduler: max running %u, step tokens %u, watermark %g, prefix caching %s, MTP drafts %u",
           o->sched.max_running, o->sched.step_tokens, o->sched.watermark, o->sched.prefix_caching ? "on" : "off",
           o->sched.mtp_drafts);
    if (o->sched.mtp_drafts)
        printf(" (acceptance %g)", o->sched.mtp_acceptance);
    printf("\n\n");
    /* Columns sized to their widest cell, two spaces apart: wide values (TTFT in
     * hours) never run into the next column. */
    struct cli_table tb;
    cli_table_init(&tb, (unsigned)n + 1);
    cli_table_row(&tb);
    cli_table_cell(&tb, "%s", "");
    for (int i = 0; i < n; i++) {
        if (r[i].dcp == 1)
            cli_table_cell(&tb, "TP baseline (dcp=1)");
        else
            cli_table_cell(&tb, "DCP (dcp=%u)", r[i].dcp);
    }
    char a[CLI_FMT_LEN], b[CLI_FMT_LEN];
#define ROW(label, ...)                          \
    do {                                         \
        cli_table_row(&tb);                      \
        cli_table_cell(&tb, "%s", label);        \
        for (int i = 0; i < n; i++)              \
            cli_table_cell(&tb, __VA_ARGS__);    \
    } while (0)
    ROW("KV pool (blocks x tokens)", "%s x %s", cli_fmt_count(a, r[i].num_blocks),
        cli_fmt_count(b, r[i].tokens_per_block));
    ROW("requests completed", "%u of %u", r[i].finished, r[i].requests);
    ROW("rejected (never fit)", "%u", r[i].rejected);
    ROW("  reason: pool / context", "%u / %u", r[i].rejected_pool, r[i].rejected_context);
    ROW("output tok/s per GPU", "%.1f", r[i].tok_s_gpu);
    ROW("makespan", "%.1f s", r[i].makespan);
    ROW("TTFT p50 / p90 / p99", "%.2f / %.2f / %.2f s", r[i].ttft[0], r[i].ttft[1], r[i].ttft[2]);
    ROW("TPOT p50 / p90 / p99", "%.1f / %.1f / %.1f ms", r[i].tpot[0] * 1e3, r[i].tpot[1] * 1e3, r[i].tpot[2] * 1e3);
    ROW("concurrency mean / max", "%.1f / %u", r[i].conc_mean, r[i].conc_max);
    ROW("KV use mean / max", "%.0f%% / %.0f%%", r[i].kv_mean * 100, r[i].kv_max * 100);
    ROW("prefix-cache hit rate", "%.1f%%", hit_rate(&r[i]) * 100);
    ROW("preemptions", "%llu", (unsigned long long)r[i].preemptions);
    if (o->sched.mtp_drafts)
        ROW("MTP drafts accepted", "%.1f%%", r[i].drafted ? 100.0 * (double)r[i].accepted / r[i].drafted : 0.0);
    ROW("steps", "%s", cli_fmt_count(a, r[i].steps));
    if (o->simulate)
        ROW("time: linear/attention/comm/overhead", "%.0f/%.0f/%.0f/%.0f s", r[i].model_seconds[0], r[i].model_seconds[1],
            r[i].model_seconds[2], r[i].model_seconds[3]);
    ROW("wall time of the replay", "%.2f s", r[i].wall_seconds);
    if (!o->simulate) {
        ROW("correctness", "%s (%llu rows, %.1e)", !r[i].check.rows ? "off" : r[i].check.pass ? "ok" : "FAIL",
            (unsigned long long)r[i].check.rows, r[i].check.max_rel_err);
        ROW("  rows: cached / preempted", "%llu / %llu", (unsigned long long)r[i].check.rows_cached,
            (unsigned long long)r[i].check.rows_preempted);
        ROW("output digest", "%016llx", (unsigned long long)r[i].check.digest);
    }
#undef ROW
    cli_table_print(&tb, stdout, 0);
    if (n == 2 && r[0].tok_s_gpu > 0)
        printf("\nDCP / TP: %.2fx output tok/s per GPU, %.2fx mean concurrency.\n", r[1].tok_s_gpu / r[0].tok_s_gpu,
               r[0].conc_mean > 0 ? r[1].conc_mean / r[0].conc_mean : 0.0);
    if (o->simulate)
        printf("Simulated: times are predictions of the performance model (docs/plan.md); the inputs are the\n"
               "deployment's hardware figures, kv_efficiency %g, gemm_efficiency %g.\n",
               o->model.kv_efficiency, o->model.gemm_efficiency);
    else
        printf("Executed: step times are wall times of the engine on this machine; correctness compares one\n"
               "decode row per request and admission with float64 attention (tolerance %.1e).\n",
               run_check_tolerance(cfg));
}

static void print_json(const struct dcp_config *cfg, const struct replay_opts *o, const struct dcp_trace *t,
                       const struct replay_result *r, int n)
{
    struct json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_kv_string(&w, "deployment", o->file);
    json_kv_string(&w, "model", cfg->model.name);
    json_kv_string(&w, "trace", o->trace ? o->trace : "synthetic");
    json_kv_string(&w, "trace_format", t->format);
    json_kv_uint(&w, "requests", t->count);
    json_kv_bool(&w, "simulate", o->simulate);
    json_kv_number(&w, "length_scale", o->length_scale ? o->length_scale : 1);
    json_kv_number(&w, "time_scale", o->time_scale ? o->time_scale : 1);
    json_kv_uint(&w, "clients", o->clients);
    json_key(&w, "layouts");
    json_begin_array(&w);
    for (int i = 0; i < n; i++) {
        const struct replay_result *x = &r[i];
        json_begin_object(&w);
        json_kv_string(&w, "name", x->dcp == 1 ? "tp_baseline" : "dcp");
        json_kv_uint(&w, "dcp", x->dcp);
        json_kv_string(&w, "backend", x->backend);
        json_kv_uint(&w, "kv_blocks", x->num_blocks);
        json_kv_uint(&w, "tokens_per_block", x->tokens_per_block);
        json_kv_uint(&w, "requests", x->requests);
        json_kv_uint(&w, "completed", x->finished);
        json_kv_uint(&w, "rejected", x->rejected);
        json_kv_uint(&w, "rejected_pool", x->rejected_pool);
        json_kv_uint(&w, "rejected_context", x->rejected_context);
        json_kv_uint(&w, "output_tokens", x->output_tokens);
        json_kv_number(&w, "makespan_seconds", x->makespan);
        json_kv_number(&w, "output_tok_s_per_gpu", x->tok_s_gpu);
        json_kv_number(&w, "ttft_p50", x->ttft[0]);
        json_kv_number(&w, "ttft_p90", x->ttft[1]);
        json_kv_number(&w, "ttft_p99", x->ttft[2]);
        json_kv_number(&w, "tpot_p50", x->tpot[0]);
        json_kv_number(&w, "tpot_p90", x->tpot[1]);
        json_kv_number(&w, "tpot_p99", x->tpot[2]);
        json_kv_number(&w, "concurrency_mean", x->conc_mean);
        json_kv_uint(&w, "concurrency_max", x->conc_max);
        json_kv_number(&w, "kv_use_mean", x->kv_mean);
        json_kv_number(&w, "kv_use_max", x->kv_max);
        json_kv_number(&w, "prefix_hit_rate", hit_rate(x));
        json_kv_uint(&w, "preemptions", x->preemptions);
        json_kv_uint(&w, "mtp_drafted", x->drafted);
        json_kv_uint(&w, "mtp_accepted", x->accepted);
        json_kv_uint(&w, "steps", x->steps);
        json_kv_number(&w, "wall_seconds", x->wall_seconds);
        if (x->executed) {
            json_key(&w, "check");
            json_begin_object(&w);
            json_kv_uint(&w, "rows", x->check.rows);
            json_kv_uint(&w, "rows_cached", x->check.rows_cached);
            json_kv_uint(&w, "rows_preempted", x->check.rows_preempted);
            json_kv_number(&w, "max_rel_err", x->check.max_rel_err);
            json_kv_bool(&w, "pass", x->check.pass && x->check.rows > 0);
            char hex[24];
            snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)x->check.digest);
            json_kv_string(&w, "digest", hex);
            json_end_object(&w);
        } else {
            json_key(&w, "model_seconds");
            json_begin_object(&w);
            json_kv_number(&w, "linear", x->model_seconds[0]);
            json_kv_number(&w, "attention", x->model_seconds[1]);
            json_kv_number(&w, "comm", x->model_seconds[2]);
            json_kv_number(&w, "overhead", x->model_seconds[3]);
            json_end_object(&w);
        }
        json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
}

/* ---- options ---------------------------------------------------------------------------- */

#define REPLAY_OPT(field) offsetof(struct replay_opts, field)
static const struct cli_option replay_options[] = {
    {"--trace", CLI_ARG_STRING, "FILE", "request trace", .offset = REPLAY_OPT(trace)},
    {"--synthetic", CLI_ARG_U32, "N", "generate an agentic trace of N requests instead (median input ~67k)", 1,
     DCP_TRACE_MAX_REQUESTS,
     .offset = REPLAY_OPT(synthetic)},
    {"--rate", CLI_ARG_REAL, "X", "its arrivals per second (default 4)", 1e-6, 1e6, .offset = REPLAY_OPT(synthetic_rate)},
    {"--write-trace", CLI_ARG_STRING, "FILE", "also write the trace used as JSONL", .offset = REPLAY_OPT(write_trace)},
    {"--simulate", CLI_ARG_FLAG, NULL, "price steps with the performance model instead of running kernels (GPU deployments)",
     .offset = REPLAY_OPT(simulate)},
    {"--length-scale", CLI_ARG_REAL, "X", "multiply prompt lengths by X (default 1)", 1e-4, 1e4,
     .offset = REPLAY_OPT(length_scale)},
    {"--output-scale", CLI_ARG_REAL, "X", "multiply output lengths by X (default 1)", 1e-4, 1e4,
     .offset = REPLAY_OPT(output_scale)},
    {"--time-scale", CLI_ARG_REAL, "X", "multiply arrival times by X (< 1 compresses; default 1)", 1e-6, 1e6,
     .offset = REPLAY_OPT(time_scale)},
    {"--limit", CLI_ARG_U32, "N", "first N requests only", 1, UINT32_MAX, .offset = REPLAY_OPT(limit)},
    {"--output-tokens", CLI_ARG_U32, "N",
     "output tokens of every request: required for a lengths trace; with --synthetic\n"
     "every request gets N instead of a drawn length; a Mooncake trace keeps its own", 1, 1u << 24,
     .offset = REPLAY_OPT(output_tokens)},
    {"--clients", CLI_ARG_U32, "N",
     "closed loop: N clients, each sends its next request when the last\n"
     "finished (timestamps ignored), like a benchmark's max concurrency", 1, 1e6, .offset = REPLAY_OPT(clients)},
    {"--max-running", CLI_ARG_U32, "N", "most requests running at once (default 256)", 1, 65536,
     .offset = REPLAY_OPT(sched.max_running)},
    {"--step-tokens", CLI_ARG_U32, "N", "token budget of a step (default 8192)", 1, 1u << 24,
     .offset = REPLAY_OPT(sched.step_tokens)},
    {"--watermark", CLI_ARG_REAL, "X", "fraction of blocks kept free at admission (default 0.01)", 0, 0.5,
     .offset = REPLAY_OPT(sched.watermark)},
    {"--no-prefix-cache", CLI_ARG_FLAG_OFF, NULL, "no prefix caching", .offset = REPLAY_OPT(sched.prefix_caching)},
    {"--mtp", CLI_ARG_U32, "N", "MTP draft tokens per step (default 0)", 0, 15, .offset = REPLAY_OPT(sched.mtp_drafts)},
    {"--mtp-acceptance", CLI_ARG_REAL, "X", "probability each draft is accepted (default 0.7)", 0, 1,
     .offset = REPLAY_OPT(sched.mtp_acceptance)},
    {"--kv-efficiency", CLI_ARG_REAL, "X", "simulate: fraction of HBM bandwidth decode attention reaches (default 0.9)",
     1e-3, 1, .offset = REPLAY_OPT(model.kv_efficiency)},
    {"--gemm-efficiency", CLI_ARG_REAL, "X", "simulate: fraction of the tensor peak GEMMs reach (default 0.6)", 1e-3, 1,
     .offset = REPLAY_OPT(model.gemm_efficiency)},
    CLI_EXEC_OPTIONS(struct replay_opts, exec, "execute: "),
    {"--plot", CLI_ARG_STRING, "FILE.svg", "write concurrency and KV use over time and the comparison",
     .offset = REPLAY_OPT(plot)},
    CLI_OPTION_JSON(struct replay_opts, json),
    CLI_OPTION_QUIET(struct replay_opts, quiet),
};

static const struct cli_spec replay_spec = {
    .command = "replay",
    .usage = "[DEPLOYMENT] --trace FILE [options]\n[DEPLOYMENT] --synthetic N [options]",
    .description =
        "Replays a request trace through the serving scheduler (continuous batching, chunked\n"
        "prefill, prefix caching, preemption, MTP) for the TP baseline (dcp=1) and for the\n"
        "deployment's DCP in the same per-GPU memory, and prints side by side: requests completed,\n"
        "output tok/s per GPU, TTFT and TPOT percentiles, concurrency, KV use, prefix-cache hit\n"
        "rate, preemptions, rejections. Traces: Mooncake JSONL or one prompt length per line.\n"
        "Without --simulate the engine executes every step (use small models: the host backend\n"
        "runs on the CPU) and sampled outputs are checked against float64 attention.\n",
    CLI_SPEC_DEPLOYMENT("DEPLOYMENT", struct replay_opts, file),
    CLI_SPEC_OPTIONS(replay_options),
    .epilogue = "exit status: 0 ok, 1 failure (including a failed check or a request left unfinished), 2 bad usage\n",
};

static int parse(int argc, char **argv, struct replay_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->exec.check = true;
    dcp_sched_default_params(&o->sched);
    dcp_perf_default_params(&o->model);
    int rc = cli_parse(&replay_spec, argc, argv, o);
    if (rc)
        return rc;
    if (!o->trace == !o->synthetic) {
        fprintf(stderr, "dcp-run replay: give one of --trace FILE or --synthetic N (see dcp-run replay --help)\n");
        return CLI_EXIT_USAGE;
    }
    if (!o->file)
        o->file = cli_default_deployment();
    return 0;
}

/* A lengths trace says nothing about outputs: --output-tokens must. */
static int check_output_tokens(const struct replay_opts *o, const struct dcp_trace *t)
{
    if (o->output_tokens || strcmp(t->format, "lengths") != 0)
        return DCP_OK;
    fprintf(stderr, "dcp-run replay: %s lists prompt lengths only: give --output-tokens N (the output tokens of "
                    "every request)\n", o->trace);
    return DCP_EINVAL;
}

static int load_trace(const struct replay_opts *o, struct dcp_trace **t)
{
    int err;
    if (o->synthetic) {
        struct dcp_agentic_trace_params p;
        dcp_agentic_trace_default_params(&p);
        p.requests = o->limit && o->limit < o->synthetic ? o->limit : o->synthetic; /* --limit first */
        if (o->synthetic_rate > 0)
            p.rate = o->synthetic_rate;
        err = dcp_trace_synthesize(&p, t);
        /* Scales apply to the generated trace as they would to a file. */
        const double ls = o->length_scale ? o->length_scale : 1;
        for (uint32_t i = 0; !err && i < (*t)->count; i++) {
            struct dcp_serve_request *r = &(*t)->requests[i];
            r->arrival *= o->time_scale ? o->time_scale : 1;
            r->prompt_tokens = (uint64_t)DCP_CLI_MAX(1.0, round((double)r->prompt_tokens * ls));
            r->hash_block_tokens = (uint32_t)DCP_CLI_MAX(1.0, round(512 * ls));
        }
        if (!err)
            (*t)->hash_block_tokens = (uint32_t)DCP_CLI_MAX(1.0, round(512 * ls));
        for (uint32_t i = 0; !err && o->output_tokens && i < (*t)->count; i++)
            (*t)->requests[i].output_tokens = o->output_tokens;
    } else {
        const struct dcp_trace_options to = {
            .limit = o->limit, .length_scale = o->length_scale, .time_scale = o->time_scale,
            .output_tokens = o->output_tokens,
        };
        err = dcp_trace_load(o->trace, &to, t);
    }
    if (err) {
        fprintf(stderr, "dcp-run replay: %s\n", dcp_last_error());
        return err;
    }
    if ((err = check_output_tokens(o, *t)))
        return err;
    for (uint32_t i = 0; o->output_scale > 0 && i < (*t)->count; i++) {
        struct dcp_serve_request *r = &(*t)->requests[i];
        r->output_tokens = (uint32_t)DCP_CLI_MAX(1.0, DCP_CLI_MIN(round(r->output_tokens * o->output_scale), 4e9));
    }
    if (o->write_trace && (err = dcp_trace_write_jsonl(*t, o->write_trace)))
        fprintf(stderr, "dcp-run replay: %s\n", dcp_last_error());
    return err;
}

int cmd_replay(int argc, char **argv)
{
    struct replay_opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    dcp_deployment *dep = NULL;
    if ((rc = cli_open_exec_deployment("replay", o.file, &o.exec, &dep)))
        return rc;
    struct dcp_trace *trace = NULL;
    if (load_trace(&o, &trace)) {
        dcp_deployment_destroy(&dep);
        return CLI_EXIT_FAIL;
    }
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    const uint32_t layouts[2] = {1, cfg->parallel.dcp};
    const int n = cfg->parallel.dcp > 1 ? 2 : 1;
    struct replay_result res[2];
    memset(res, 0, sizeof(res));
    int err = DCP_OK;
    for (int i = 0; i < n && !err; i++)
        err = replay_layout(dep, &o, trace, layouts[i], &res[i]);
    bool ok = !err;
    if (!err) {
        if (o.json)
            print_json(cfg, &o, trace, res, n);
        else
            print_text(cfg, &o, trace, res, n);
        for (int i = 0; i < n; i++) {
            char name[CLI_LAYOUT_NAME_LEN];
            if (res[i].finished + res[i].rejected != res[i].requests) {
                fprintf(stderr, "dcp-run replay: %s: %u requests unfinished\n", cli_layout_name(name, res[i].dcp),
                        res[i].requests - res[i].finished - res[i].rejected);
                ok = false;
            }
            if (res[i].executed && o.exec.check && !res[i].finished) {
                /* Every request rejected: there was nothing to check, which is not a failed check. */
                fprintf(stderr, "dcp-run replay: %s: no request ran (%u rejected: %u by the KV pool, %u by the "
                        "context limit), so nothing was executed or checked\n", cli_layout_name(name, res[i].dcp),
                        res[i].rejected, res[i].rejected_pool, res[i].rejected_context);
                ok = false;
            } else if (res[i].executed && o.exec.check && (!res[i].check.pass || !res[i].check.rows)) {
                fprintf(stderr, "dcp-run replay: %s: correctness check FAILED\n", cli_layout_name(name, res[i].dcp));
                ok = false;
            }
        }
        if (o.plot) {
            char title[256];
            snprintf(title, sizeof(title), "%s on %u x %s: %s", cfg->model.name, cfg->parallel.tp, cfg->hardware.gpu,
                     o.trace ? o.trace : "synthetic agentic trace");
            if (replay_plot_svg(o.plot, title, res, n)) {
                fprintf(stderr, "dcp-run replay: cannot write %s\n", o.plot);
                ok = false;
            }
        }
    }
    for (int i = 0; i < n; i++)
        replay_result_free(&res[i]);
    dcp_trace_destroy(&trace);
    dcp_deployment_destroy(&dep);
    return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
