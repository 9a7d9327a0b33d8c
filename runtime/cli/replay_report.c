/*
 * replay_report.c: what `dcp-run replay` prints: the side-by-side table of the
 * layouts, the warnings (a layout falling behind its arrivals, DCP raising a
 * latency, groups priced on the network), the one-line recommendation, the table of
 * a concurrency sweep, and the JSON of all of it (keys in docs/serving.md, "JSON").
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format.h"
#include "replay.h"
#include "run_common.h"
#include "table.h"

/* Version of the JSON layout; bumped when a key changes meaning or goes away. */
#define REPLAY_JSON_SCHEMA "dcp-replay/1"

/* DCP raises a latency when its p50 exceeds TP's by more than this fraction. */
#define REGRESSION 0.10
/* A layout is recommended over TP only for a gain above this fraction. */
#define MIN_GAIN 0.05

static double hit_rate(const struct replay_result *r)
{
    return r->prompt_tokens ? (double)r->cached_tokens / (double)r->prompt_tokens : 0;
}

static const char *layout_label(char *buf, size_t size, uint32_t dcp)
{
    if (dcp == 1)
        snprintf(buf, size, "TP baseline (dcp=1)");
    else
        snprintf(buf, size, "DCP (dcp=%u)", dcp);
    return buf;
}

/* ---- warnings and the recommendation -------------------------------------------------------- */

#define MAX_WARNINGS 64
#define LINE 400

struct findings {
    char warnings[MAX_WARNINGS][LINE];
    uint32_t num_warnings;
    char recommendation[LINE];
};

static void __attribute__((format(printf, 2, 3))) warn(struct findings *f, const char *fmt, ...)
{
    if (f->num_warnings == MAX_WARNINGS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->warnings[f->num_warnings++], LINE, fmt, ap);
    va_end(ap);
}

/* Groups that span nodes are priced on the network: say which. */
static void link_warnings(const dcp_deployment *dep, const struct replay_opts *o, const struct replay_run *run,
                          struct findings *f)
{
    if (!o->simulate)
        return;
    const struct dcp_hardware_config *hw = &dcp_deployment_config(dep)->hardware;
    for (int i = 0; i < run->n; i++) {
        struct dcp_perf_model m;
        if (dcp_perf_model_init(dep, run->r[i].dcp, &o->model, &m))
            continue;
        if (i == 0 && m.tp_link == DCP_PERF_LINK_NETWORK)
            warn(f, "an instance of tp %u spans nodes of %u GPUs: its all-reduces are priced on the network "
                    "(%g GB/s per GPU), not NVLink", m.tp, hw->gpus_per_node, hw->internode_bandwidth / 1e9);
        if (m.dcp_link == DCP_PERF_LINK_NETWORK)
            warn(f, "a DCP group of %u spans nodes of %u GPUs: its exchanges are priced on the network "
                    "(%g GB/s per GPU), not NVLink", m.dcp, hw->gpus_per_node, hw->internode_bandwidth / 1e9);
    }
}

static void findings_of(const dcp_deployment *dep, const struct replay_opts *o, const struct replay_run *run,
                        struct findings *f)
{
    memset(f, 0, sizeof(*f));
    const struct replay_result *r = run->r, *tp = &r[0];
    char a[64];
    link_warnings(dep, o, run, f);
    for (int i = 0; i < run->n; i++) {
        layout_label(a, sizeof(a), r[i].dcp);
        if (r[i].overloaded)
            warn(f, "%s falls behind the arrivals: the mean TTFT grows from %.3g s (first quarter of the requests) "
                    "to %.3g s (last quarter): more arrive than it serves", a, r[i].ttft_first_quarter,
                 r[i].ttft_last_quarter);
        if (r[i].rejected)
            warn(f, "%s rejects %u of %u requests (pool %u, context %u): they can never fit", a, r[i].rejected,
                 r[i].requests, r[i].rejected_pool, r[i].rejected_context);
        if (i == 0)
            continue;
        if (tp->tpot[0] > 0 && r[i].tpot[0] > (1 + REGRESSION) * tp->tpot[0])
            warn(f, "%s raises TPOT p50 from %.3g to %.3g ms (+%.0f%%)", a, tp->tpot[0] * 1e3, r[i].tpot[0] * 1e3,
                 (r[i].tpot[0] / tp->tpot[0] - 1) * 100);
        if (tp->ttft[0] > 0 && r[i].ttft[0] > (1 + REGRESSION) * tp->ttft[0])
            warn(f, "%s raises TTFT p50 from %.3g to %.3g s (+%.0f%%)", a, tp->ttft[0], r[i].ttft[0],
                 (r[i].ttft[0] / tp->ttft[0] - 1) * 100);
    }
    /* The recommendation: the highest output tok/s per GPU among the layouts that
     * complete the most requests; TP unless a DCP size gains more than MIN_GAIN. */
    uint32_t most = 0;
    for (int i = 0; i < run->n; i++)
        most = DCP_CLI_MAX(most, r[i].finished);
    int best = 0;
    for (int i = 1; i < run->n; i++)
        if (r[i].finished == most && (r[best].finished < most || r[i].tok_s_gpu > r[best].tok_s_gpu))
            best = i;
    if (run->n == 1) {
        snprintf(f->recommendation, LINE, "TP (dcp 1): the only layout replayed");
        return;
    }
    const double gain = tp->tok_s_gpu > 0 ? r[best].tok_s_gpu / tp->tok_s_gpu : INFINITY;
    if (best == 0 || (tp->finished == most && gain < 1 + MIN_GAIN)) {
        int dbest = 1;
        for (int i = 2; i < run->n; i++)
            if (r[i].tok_s_gpu > r[dbest].tok_s_gpu)
                dbest = i;
        snprintf(f->recommendation, LINE,
                 "TP (dcp 1): DCP gains no more than %.0f%% here (dcp %u: %.2fx TP's output tok/s per GPU) and "
                 "adds collectives to every step", MIN_GAIN * 100, r[dbest].dcp,
                 tp->tok_s_gpu > 0 ? r[dbest].tok_s_gpu / tp->tok_s_gpu : 0.0);
        return;
    }
    size_t len = (size_t)snprintf(f->recommendation, LINE, "dcp %u: %.2fx TP's output tok/s per GPU (%.1f vs %.1f)",
                                  r[best].dcp, gain, r[best].tok_s_gpu, tp->tok_s_gpu);
    if (r[best].finished > tp->finished && len < LINE)
        len += (size_t)snprintf(f->recommendation + len, LINE - len, ", completing %u requests to TP's %u",
                                r[best].finished, tp->finished);
    if (len < LINE && tp->conc_mean > 0)
        len += (size_t)snprintf(f->recommendation + len, LINE - len, ", %.1fx the requests running at once",
                                r[best].conc_mean / tp->conc_mean);
    if (len < LINE && tp->tpot[0] > 0 && r[best].tpot[0] > (1 + REGRESSION) * tp->tpot[0])
        snprintf(f->recommendation + len, LINE - len, "; at a TPOT p50 %.0f%% higher",
                 (r[best].tpot[0] / tp->tpot[0] - 1) * 100);
}

/* ---- text -------------------------------------------------------------------------------- */

static void print_header(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *t,
                         const char *backend)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    printf("dcp-run replay: %s\n", o->file);
    printf("model %s (%s, %u layers", cfg->model.name, dcp_attention_kind_name(cfg->model.attention),
           cfg->model.num_layers);
    if (cfg->model.experts)
        printf(", MoE %u of %u experts per token", cfg->model.experts_per_token, cfg->model.experts);
    else
        printf(", dense: every parameter read each step");
    printf(") on %u x %s, tp %u; %s\n", cfg->parallel.tp, cfg->hardware.gpu, cfg->parallel.tp, backend);
    printf("trace %s (%s): %u requests over %.0f s, length scale %g, time scale %g",
           o->trace ? o->trace : "synthetic agentic", t->format, t->count,
           t->requests[t->count - 1].arrival - t->requests[0].arrival, o->length_scale ? o->length_scale : 1,
           o->time_scale ? o->time_scale : 1);
    if (o->output_tokens)
        printf(", %u output tokens each", o->output_tokens);
    if (o->clients)
        printf("; closed loop of %u clients (timestamps ignored)", o->clients);
    printf("\n");
    printf("scheduler: max running %u, step tokens %u, watermark %g, prefix caching %s, MTP drafts %u",
           o->sched.max_running, o->sched.step_tokens, o->sched.watermark, o->sched.prefix_caching ? "on" : "off",
           o->sched.mtp_drafts);
    if (o->sched.mtp_drafts)
        printf(" (acceptance %g)", o->sched.mtp_acceptance);
    printf("\n");
    if (o->pd)
        printf("P/D: prompts prefilled on %u instance%s of tp %u (TP layout), their KV sent to the decode instance "
               "at %g GB/s per GPU\n", o->prefill_instances, o->prefill_instances == 1 ? "" : "s",
               o->prefill_tp ? o->prefill_tp : cfg->parallel.tp, cfg->hardware.internode_bandwidth / 1e9);
    if (o->simulate)
        cli_perf_print_inputs(&o->perf, &o->model, stdout);
}

static void print_findings(const struct findings *f)
{
    for (uint32_t i = 0; i < f->num_warnings; i++)
        printf("warning: %s\n", f->warnings[i]);
    printf("recommendation: %s\n", f->recommendation);
}

void replay_print_text(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *t,
                       const struct replay_run *run)
{
    const struct replay_result *r = run->r;
    const int n = run->n;
    print_header(dep, o, t, r[0].backend);
    printf("\n");
    /* Columns sized to their widest cell, two spaces apart: wide values (TTFT in
     * hours) never run into the next column. */
    struct cli_table tb;
    cli_table_init(&tb, (unsigned)n + 1);
    cli_table_row(&tb);
    cli_table_cell(&tb, "%s", "");
    char a[CLI_FMT_LEN], b[CLI_FMT_LEN];
    for (int i = 0; i < n; i++)
        cli_table_cell(&tb, "%s", layout_label(a, sizeof(a), r[i].dcp));
#define ROW(label, ...)                          \
    do {                                         \
        cli_table_row(&tb);                      \
        cli_table_cell(&tb, "%s", label);        \
        for (int i = 0; i < n; i++)              \
            cli_table_cell(&tb, __VA_ARGS__);    \
    } while (0)
    ROW("KV pool (blocks x tokens)", "%s x %s", cli_fmt_count(a, r[i].num_blocks),
        cli_fmt_count(b, r[i].tokens_per_block));
    if (o->pd)
        ROW("GPUs: decode + prefill", "%u + %u", r[i].tp, r[i].prefill_gpus);
    ROW("requests completed", "%u of %u", r[i].finished, r[i].requests);
    ROW("rejected (never fit)", "%u", r[i].rejected);
    ROW("  reason: pool / context", "%u / %u", r[i].rejected_pool, r[i].rejected_context);
    ROW("output tok/s per GPU", "%.1f", r[i].tok_s_gpu);
    if (o->pd)
        ROW("  per decode GPU", "%.1f", r[i].tok_s_decode_gpu);
    ROW("makespan", "%.1f s", r[i].makespan);
    ROW("TTFT p50 / p90 / p99", "%.2f / %.2f / %.2f s", r[i].ttft[0], r[i].ttft[1], r[i].ttft[2]);
    ROW("TPOT p50 / p90 / p99", "%.1f / %.1f / %.1f ms", r[i].tpot[0] * 1e3, r[i].tpot[1] * 1e3, r[i].tpot[2] * 1e3);
    ROW("decode step p50: alone / mixed", "%.1f / %.1f ms", r[i].step_p50[0] * 1e3, r[i].step_p50[1] * 1e3);
    ROW("  decode tokens in mixed steps", "%.0f%%",
        r[i].decode_tokens[0] + r[i].decode_tokens[1]
            ? 100.0 * (double)r[i].decode_tokens[1] / (double)(r[i].decode_tokens[0] + r[i].decode_tokens[1])
            : 0.0);
    ROW("concurrency mean / max", "%.1f / %u", r[i].conc_mean, r[i].conc_max);
    ROW("KV use mean / max", "%.0f%% / %.0f%%", r[i].kv_mean * 100, r[i].kv_max * 100);
    ROW("prefix-cache hit rate", "%.1f%%", hit_rate(&r[i]) * 100);
    ROW("preemptions", "%llu", (unsigned long long)r[i].preemptions);
    if (o->sched.mtp_drafts)
        ROW("MTP drafts accepted", "%.1f%%", r[i].drafted ? 100.0 * (double)r[i].accepted / r[i].drafted : 0.0);
    ROW("steps", "%s", cli_fmt_count(a, r[i].steps));
    if (o->simulate)
        ROW("time: linear/attention/comm/overhead", "%.0f/%.0f/%.0f/%.0f s", r[i].model_seconds[0],
            r[i].model_seconds[1], r[i].model_seconds[2], r[i].model_seconds[3]);
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
    printf("\n");
    for (int i = 1; i < n && r[0].tok_s_gpu > 0; i++)
        printf("DCP %u / TP: %.2fx output tok/s per GPU, %.2fx mean concurrency.\n", r[i].dcp,
               r[i].tok_s_gpu / r[0].tok_s_gpu, r[0].conc_mean > 0 ? r[i].conc_mean / r[0].conc_mean : 0.0);
    if (o->simulate)
        printf("Simulated: times are predictions of the performance model (docs/plan.md, \"The performance "
               "model\").\n");
    else
        printf("Executed: step times are wall times of the engine on this machine; correctness compares one\n"
               "decode row per request and admission with float64 attention (tolerance %.1e).\n",
               run_check_tolerance(dcp_deployment_config(dep)));
    struct findings f;
    findings_of(dep, o, run, &f);
    print_findings(&f);
}

/* The smallest concurrency of the sweep from which layout k beats TP at every larger
 * one, or 0 when it does not (at the largest). */
static uint32_t wins_from(const struct replay_run *runs, uint32_t num_runs, int k)
{
    uint32_t from = 0;
    for (uint32_t j = num_runs; j-- > 0;) {
        const struct replay_result *r = runs[j].r;
        if (!(r[k].tok_s_gpu > r[0].tok_s_gpu))
            break;
        from = runs[j].clients;
    }
    return from;
}

static void sweep_recommendation(const struct replay_run *runs, uint32_t num_runs, char *buf, size_t size)
{
    const struct replay_run *top = &runs[num_runs - 1];
    int best = 0;
    for (int k = 1; k < top->n; k++)
        if (top->r[k].tok_s_gpu > top->r[best].tok_s_gpu)
            best = k;
    if (best == 0 || top->r[best].tok_s_gpu < (1 + MIN_GAIN) * top->r[0].tok_s_gpu) {
        snprintf(buf, size, "TP (dcp 1): no DCP size gains more than %.0f%% up to concurrency %u", MIN_GAIN * 100,
                 top->clients);
        return;
    }
    const uint32_t from = wins_from(runs, num_runs, best);
    size_t len = (size_t)snprintf(buf, size, "dcp %u from concurrency %u up (%.2fx TP's output tok/s per GPU at %u)",
                                  top->r[best].dcp, from, top->r[best].tok_s_gpu / top->r[0].tok_s_gpu, top->clients);
    if (from > runs[0].clients && len < size)
        snprintf(buf + len, size - len, "; TP below (%.2fx at %u)", runs[0].r[best].tok_s_gpu /
                 DCP_CLI_MAX(runs[0].r[0].tok_s_gpu, 1e-30), runs[0].clients);
}

void replay_print_sweep(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *t,
                        const struct replay_run *runs, uint32_t num_runs)
{
    print_header(dep, o, t, runs[0].r[0].backend);
    const int n = runs[0].n;
    printf("\nConcurrency sweep (a closed loop of each number of clients over the trace)\n");
    struct cli_table tb;
    cli_table_init(&tb, 7);
    cli_table_row(&tb);
    cli_table_cell(&tb, "clients");
    cli_table_cell(&tb, "layout");
    cli_table_cell(&tb, "tok/s/GPU");
    cli_table_cell(&tb, "vs TP");
    cli_table_cell(&tb, "TPOT p50 ms");
    cli_table_cell(&tb, "TTFT p50 s");
    cli_table_cell(&tb, "completed");
    for (uint32_t j = 0; j < num_runs; j++)
        for (int k = 0; k < n; k++) {
            const struct replay_result *r = &runs[j].r[k], *tp = &runs[j].r[0];
            cli_table_row(&tb);
            if (k == 0)
                cli_table_cell(&tb, "%u", runs[j].clients);
            else
                cli_table_cell(&tb, "%s", "");
            if (r->dcp == 1)
                cli_table_cell(&tb, "%s", "TP");
            else
                cli_table_cell(&tb, "dcp %u", r->dcp);
            cli_table_cell(&tb, "%.1f", r->tok_s_gpu);
            cli_table_cell(&tb, "%.2fx", tp->tok_s_gpu > 0 ? r->tok_s_gpu / tp->tok_s_gpu : 0.0);
            cli_table_cell(&tb, "%.1f", r->tpot[0] * 1e3);
            cli_table_cell(&tb, "%.3g", r->ttft[0]);
            cli_table_cell(&tb, "%u/%u", r->finished, r->requests);
        }
    cli_table_align(&tb, 0, CLI_ALIGN_RIGHT);
    cli_table_align(&tb, 1, CLI_ALIGN_LEFT);
    cli_table_print(&tb, stdout, 2);
    printf("\n");
    for (int k = 1; k < n; k++) {
        const uint32_t from = wins_from(runs, num_runs, k);
        if (from)
            printf("dcp %u beats TP from concurrency %u up\n", runs[0].r[k].dcp, from);
        else
            printf("dcp %u does not beat TP at concurrency %u\n", runs[0].r[k].dcp, runs[num_runs - 1].clients);
    }
    struct findings f;
    findings_of(dep, o, &runs[num_runs - 1], &f);
    sweep_recommendation(runs, num_runs, f.recommendation, sizeof(f.recommendation));
    print_findings(&f);
}

/* ---- JSON -------------------------------------------------------------------------------- */

static void json_layout(struct json_writer *w, const dcp_deployment *dep, const struct replay_opts *o,
                        const struct replay_result *x)
{
    json_begin_object(w);
    json_kv_string(w, "name", x->dcp == 1 ? "tp_baseline" : "dcp");
    json_kv_uint(w, "dcp", x->dcp);
    json_kv_string(w, "backend", x->backend);
    json_kv_uint(w, "gpus", x->gpus);
    json_kv_uint(w, "prefill_gpus", x->prefill_gpus);
    json_kv_uint(w, "kv_blocks", x->num_blocks);
    json_kv_uint(w, "tokens_per_block", x->tokens_per_block);
    json_kv_uint(w, "requests", x->requests);
    json_kv_uint(w, "completed", x->finished);
    json_kv_uint(w, "rejected", x->rejected);
    json_kv_uint(w, "rejected_pool", x->rejected_pool);
    json_kv_uint(w, "rejected_context", x->rejected_context);
    json_kv_uint(w, "output_tokens", x->output_tokens);
    json_kv_number(w, "makespan_seconds", x->makespan);
    json_kv_number(w, "output_tok_s_per_gpu", x->tok_s_gpu);
    json_kv_number(w, "output_tok_s_per_decode_gpu", x->tok_s_decode_gpu);
    json_kv_number(w, "ttft_p50", x->ttft[0]);
    json_kv_number(w, "ttft_p90", x->ttft[1]);
    json_kv_number(w, "ttft_p99", x->ttft[2]);
    json_kv_number(w, "tpot_p50", x->tpot[0]);
    json_kv_number(w, "tpot_p90", x->tpot[1]);
    json_kv_number(w, "tpot_p99", x->tpot[2]);
    json_kv_uint(w, "decode_only_steps", x->decode_steps[0]);
    json_kv_uint(w, "mixed_steps", x->decode_steps[1]);
    json_kv_number(w, "decode_only_step_p50", x->step_p50[0]);
    json_kv_number(w, "mixed_step_p50", x->step_p50[1]);
    const uint64_t dt = x->decode_tokens[0] + x->decode_tokens[1];
    json_kv_number(w, "mixed_decode_share", dt ? (double)x->decode_tokens[1] / (double)dt : 0);
    json_kv_number(w, "concurrency_mean", x->conc_mean);
    json_kv_uint(w, "concurrency_max", x->conc_max);
    json_kv_number(w, "kv_use_mean", x->kv_mean);
    json_kv_number(w, "kv_use_max", x->kv_max);
    json_kv_number(w, "prefix_hit_rate", hit_rate(x));
    json_kv_uint(w, "preemptions", x->preemptions);
    json_kv_uint(w, "mtp_drafted", x->drafted);
    json_kv_uint(w, "mtp_accepted", x->accepted);
    json_kv_uint(w, "steps", x->steps);
    json_kv_bool(w, "overloaded", x->overloaded);
    json_kv_number(w, "ttft_first_quarter", o->clients ? NAN : x->ttft_first_quarter);
    json_kv_number(w, "ttft_last_quarter", o->clients ? NAN : x->ttft_last_quarter);
    json_kv_number(w, "wall_seconds", x->wall_seconds);
    if (x->executed) {
        json_key(w, "check");
        json_begin_object(w);
        json_kv_uint(w, "rows", x->check.rows);
        json_kv_uint(w, "rows_cached", x->check.rows_cached);
        json_kv_uint(w, "rows_preempted", x->check.rows_preempted);
        json_kv_number(w, "max_rel_err", x->check.max_rel_err);
        json_kv_bool(w, "pass", x->check.pass && x->check.rows > 0);
        char hex[24];
        snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)x->check.digest);
        json_kv_string(w, "digest", hex);
        json_end_object(w);
    } else {
        struct dcp_perf_model m;
        const bool have = dcp_perf_model_init(dep, x->dcp, &o->model, &m) == DCP_OK;
        json_kv_string(w, "tp_link", have ? dcp_perf_link_name(m.tp_link) : "");
        json_kv_string(w, "dcp_link", have ? dcp_perf_link_name(m.dcp_link) : "");
        json_key(w, "model_seconds");
        json_begin_object(w);
        json_kv_number(w, "linear", x->model_seconds[0]);
        json_kv_number(w, "attention", x->model_seconds[1]);
        json_kv_number(w, "comm", x->model_seconds[2]);
        json_kv_number(w, "overhead", x->model_seconds[3]);
        json_end_object(w);
    }
    json_end_object(w);
}

static void json_layouts(struct json_writer *w, const dcp_deployment *dep, const struct replay_opts *o,
                         const struct replay_run *run)
{
    json_key(w, "layouts");
    json_begin_array(w);
    for (int i = 0; i < run->n; i++)
        json_layout(w, dep, o, &run->r[i]);
    json_end_array(w);
}

static void json_findings(struct json_writer *w, const struct findings *f)
{
    json_key(w, "warnings");
    json_begin_array(w);
    for (uint32_t i = 0; i < f->num_warnings; i++)
        json_string(w, f->warnings[i]);
    json_end_array(w);
    json_kv_string(w, "recommendation", f->recommendation);
}

void replay_print_json(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *t,
                       const struct replay_run *runs, uint32_t num_runs)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    struct json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_kv_string(&w, "schema", REPLAY_JSON_SCHEMA);
    json_kv_string(&w, "deployment", o->file);
    json_kv_string(&w, "model", cfg->model.name);
    json_kv_bool(&w, "dense", cfg->model.experts == 0);
    json_kv_string(&w, "trace", o->trace ? o->trace : "synthetic");
    json_kv_string(&w, "trace_format", t->format);
    json_kv_uint(&w, "requests", t->count);
    json_kv_bool(&w, "simulate", o->simulate);
    json_kv_number(&w, "length_scale", o->length_scale ? o->length_scale : 1);
    json_kv_number(&w, "time_scale", o->time_scale ? o->time_scale : 1);
    json_kv_uint(&w, "output_tokens", o->output_tokens);
    json_key(&w, "pd");
    if (o->pd) {
        json_begin_object(&w);
        json_kv_uint(&w, "prefill_instances", o->prefill_instances);
        json_kv_uint(&w, "prefill_tp", o->prefill_tp ? o->prefill_tp : cfg->parallel.tp);
        json_kv_number(&w, "kv_link_bytes_per_s", cfg->hardware.internode_bandwidth);
        json_end_object(&w);
    } else {
        json_null(&w);
    }
    if (o->simulate)
        cli_perf_json_inputs(&w, &o->perf, &o->model);
    struct findings f;
    if (num_runs == 1 && !o->sweep.n) {
        json_kv_uint(&w, "clients", o->clients);
        json_layouts(&w, dep, o, &runs[0]);
        findings_of(dep, o, &runs[0], &f);
    } else {
        json_key(&w, "sweep");
        json_begin_array(&w);
        for (uint32_t j = 0; j < num_runs; j++) {
            json_begin_object(&w);
            json_kv_uint(&w, "clients", runs[j].clients);
            json_layouts(&w, dep, o, &runs[j]);
            json_end_object(&w);
        }
        json_end_array(&w);
        findings_of(dep, o, &runs[num_runs - 1], &f);
        sweep_recommendation(runs, num_runs, f.recommendation, sizeof(f.recommendation));
    }
    json_findings(&w, &f);
    json_end_object(&w);
    json_finish(&w);
}
