/*
 * cmd_replay.c: `dcp-run replay` -- a request trace through the serving scheduler,
 * for the TP baseline and DCP layouts in the same per-GPU memory, side by side.
 *
 * This file reads the command line and the trace, picks the layouts (TP, the
 * deployment's dcp or those of --dcp) and runs them (replay_sim.c), once or for each
 * point of a concurrency sweep; replay_report.c prints the result and replay_plot.c
 * draws it.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format.h"
#include "perf_inputs.h"
#include "replay.h"
#include "run_common.h"

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
    {"--sweep-clients", CLI_ARG_CUSTOM, "N,N,...",
     "simulate: a closed loop for each number of clients (ascending, e.g. 1,2,4,8,16,32,64)\n"
     "for every layout; prints tok/s per GPU against TPOT (--plot: the Pareto view)",
     .offset = REPLAY_OPT(sweep), .parse = cli_parse_list},
    {"--dcp", CLI_ARG_CUSTOM, "N,N,...|all",
     "DCP sizes to replay besides TP (default: the deployment's; all: every valid one)",
     .offset = REPLAY_OPT(dcp), .parse = cli_parse_list_or_all},
    {"--pd", CLI_ARG_FLAG, NULL,
     "simulate: prefill on separate instances; the decode instance only decodes,\n"
     "receiving each prompt's KV over hardware.internode_gbps", .offset = REPLAY_OPT(pd)},
    {"--prefill-instances", CLI_ARG_U32, "N", "--pd: prefill instances (default 1)", 1, 1024,
     .offset = REPLAY_OPT(prefill_instances)},
    {"--prefill-tp", CLI_ARG_U32, "N", "--pd: GPUs of one prefill instance, TP layout (default: the deployment's tp)",
     1, 65536, .offset = REPLAY_OPT(prefill_tp)},
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
    CLI_PERF_OPTIONS(struct replay_opts, perf, "simulate: "),
    CLI_EXEC_OPTIONS(struct replay_opts, exec, "execute: "),
    {"--plot", CLI_ARG_STRING, "FILE.svg",
     "write concurrency and KV use over time and the comparison (with\n--sweep-clients: tok/s per GPU against TPOT)",
     .offset = REPLAY_OPT(plot)},
    CLI_OPTION_JSON(struct replay_opts, json),
    CLI_OPTION_QUIET(struct replay_opts, quiet),
};

static const struct cli_spec replay_spec = {
    .command = "replay",
    .usage = "[DEPLOYMENT] --trace FILE [options]\n[DEPLOYMENT] --synthetic N [options]",
    .description =
        "Replays a request trace through the serving scheduler (continuous batching, chunked\n"
        "prefill, prefix caching, preemption, MTP) for the TP baseline (dcp=1) and for DCP in the\n"
        "same per-GPU memory, and prints side by side: requests completed, output tok/s per GPU,\n"
        "TTFT and TPOT percentiles, decode step times alone and mixed with prefill, concurrency,\n"
        "KV use, prefix-cache hit rate, preemptions, rejections; then warnings (a layout falling\n"
        "behind its arrivals, DCP raising a latency) and a one-line recommendation.\n"
        "Traces: Mooncake JSONL or one prompt length per line (with --output-tokens).\n"
        "--simulate prices every step with the performance model of `plan` (docs/plan.md); without\n"
        "it the engine executes every step (use small models: the host backend runs on the CPU)\n"
        "and sampled outputs are checked against float64 attention.\n",
    CLI_SPEC_DEPLOYMENT("DEPLOYMENT", struct replay_opts, file),
    CLI_SPEC_OPTIONS(replay_options),
    .epilogue = "exit status: 0 ok, 1 failure (including a failed check or a request left unfinished), 2 bad usage\n",
};

static int parse(int argc, char **argv, struct replay_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->exec.check = true;
    o->prefill_instances = 1;
    dcp_sched_default_params(&o->sched);
    cli_perf_opts_init(&o->perf);
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

/* Options that need others: checked once the deployment loaded (each option alone
 * passes the parser). */
static int check_combinations(const struct replay_opts *o)
{
    const char *sim_only = o->pd ? "--pd" : o->sweep.n ? "--sweep-clients" : NULL;
    if (sim_only && !o->simulate) {
        fprintf(stderr, "dcp-run replay: %s needs --simulate (the engine executes one instance)\n", sim_only);
        return CLI_EXIT_USAGE;
    }
    if (o->sweep.n && o->clients) {
        fprintf(stderr, "dcp-run replay: give --clients or --sweep-clients, not both\n");
        return CLI_EXIT_USAGE;
    }
    if (!o->pd && (o->prefill_instances != 1 || o->prefill_tp)) {
        fprintf(stderr, "dcp-run replay: --prefill-instances and --prefill-tp need --pd\n");
        return CLI_EXIT_USAGE;
    }
    /* Before the replay, which may take long: the plot is written at its end. */
    char why[160];
    if (o->plot && cli_unwritable(o->plot, why, sizeof(why))) {
        fprintf(stderr, "dcp-run replay: --plot %s: %s\n", o->plot, why);
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* ---- the trace ---------------------------------------------------------------------------- */

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

/* ---- layouts ------------------------------------------------------------------------------ */

/* TP first, then the DCP sizes: --dcp's (each checked), every valid one (--dcp all), or
 * the deployment's. Returns the count, 0 after printing why a size is refused. */
static int pick_layouts(const dcp_deployment *dep, const struct replay_opts *o, uint32_t *out, int max)
{
    struct dcp_plan_dcp_size sizes[DCP_PLAN_MAX_DCP_SIZES];
    const uint32_t ns = dcp_plan_dcp_sizes(dep, sizes, DCP_PLAN_MAX_DCP_SIZES);
    int n = 0;
    out[n++] = 1;
    if (o->dcp.all) {
        for (uint32_t i = 0; i < ns && n < max; i++)
            if (sizes[i].valid && sizes[i].dcp > 1)
                out[n++] = sizes[i].dcp;
        return n;
    }
    if (!o->dcp.n) {
        const uint32_t d = dcp_deployment_config(dep)->parallel.dcp;
        if (d > 1)
            out[n++] = d;
        return n;
    }
    for (uint32_t i = 0; i < o->dcp.n && n < max; i++) {
        struct dcp_plan plan;
        if (o->dcp.v[i] == 1)
            continue;
        if (dcp_plan_compute_dcp(dep, o->dcp.v[i], &plan)) {
            fprintf(stderr, "dcp-run replay: --dcp %u: %s\n", o->dcp.v[i], dcp_last_error());
            return 0;
        }
        out[n++] = o->dcp.v[i];
    }
    return n;
}

/* Checks a run of the layouts: every request finished or rejected, executed checks passed. */
static bool run_ok(const struct replay_opts *o, const struct replay_run *run)
{
    bool ok = true;
    for (int i = 0; i < run->n; i++) {
        const struct replay_result *r = &run->r[i];
        char name[CLI_LAYOUT_NAME_LEN];
        if (r->finished + r->rejected != r->requests) {
            fprintf(stderr, "dcp-run replay: %s: %u requests unfinished\n", cli_layout_name(name, r->dcp),
                    r->requests - r->finished - r->rejected);
            ok = false;
        }
        if (r->executed && o->exec.check && !r->finished) {
            /* Every request rejected: there was nothing to check, which is not a failed check. */
            fprintf(stderr, "dcp-run replay: %s: no request ran (%u rejected: %u by the KV pool, %u by the "
                    "context limit), so nothing was executed or checked\n", cli_layout_name(name, r->dcp),
                    r->rejected, r->rejected_pool, r->rejected_context);
            ok = false;
        } else if (r->executed && o->exec.check && (!r->check.pass || !r->check.rows)) {
            fprintf(stderr, "dcp-run replay: %s: correctness check FAILED\n", cli_layout_name(name, r->dcp));
            ok = false;
        }
    }
    return ok;
}

static int run_layouts(const dcp_deployment *dep, const struct replay_opts *o, const struct dcp_trace *trace,
                       const uint32_t *layouts, int n, dcp_deployment **prefill_dep, struct replay_run *run)
{
    run->clients = o->clients;
    run->n = n;
    run->r = calloc((size_t)n, sizeof(*run->r));
    if (!run->r)
        return DCP_ENOMEM;
    int err = DCP_OK;
    for (int i = 0; i < n && !err; i++)
        err = replay_layout(dep, o, trace, layouts[i], prefill_dep, &run->r[i]);
    return err;
}

static void free_runs(struct replay_run *runs, uint32_t num_runs)
{
    for (uint32_t j = 0; runs && j < num_runs; j++) {
        for (int i = 0; runs[j].r && i < runs[j].n; i++)
            replay_result_free(&runs[j].r[i]);
        free(runs[j].r);
    }
    free(runs);
}

/* The replay's inputs a run cannot start without: the model's (simulate) and the
 * network of a P/D handover. */
static int check_inputs(const dcp_deployment *dep, const struct replay_opts *o)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    if (o->pd && !(cfg->hardware.internode_bandwidth > 0)) {
        fprintf(stderr, "dcp-run replay: --pd hands each prompt's KV from the prefill instances to the decode "
                        "instance over the network: %s gives no hardware.internode_gbps\n", o->file);
        return DCP_EINVAL;
    }
    for (uint32_t l = 0; !o->simulate && l < (o->exec.layers ? o->exec.layers : cfg->model.num_layers); l++) {
        const struct dcp_layer_kind k = dcp_model_layer_kind(&cfg->model, l);
        if (k.type != DCP_LAYER_FULL || k.sink) { /* the layer kinds: docs/design.md §13 */
            fprintf(stderr, "dcp-run replay: %s: the executed replay drives full attention layers, and layer %u is "
                            "%s%s; `dcp-run run` executes the layer kinds\n", o->file, l, dcp_layer_type_name(k.type),
                    k.sink ? " with a sink" : "");
            return DCP_ENOTSUP;
        }
    }
    if (o->simulate) {
        struct dcp_perf_model m;
        if (dcp_perf_model_init(dep, 1, &o->model, &m)) {
            fprintf(stderr, "dcp-run replay: %s: %s\n", o->file, dcp_last_error());
            return DCP_EINVAL;
        }
    }
    return DCP_OK;
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
    if ((rc = check_combinations(&o))) {
        dcp_deployment_destroy(&dep);
        return rc;
    }
    struct dcp_trace *trace = NULL;
    uint32_t layouts[DCP_PLAN_MAX_DCP_SIZES + 1];
    int n = 0;
    if (cli_perf_params(&o.perf, "replay", &o.model) || load_trace(&o, &trace) || check_inputs(dep, &o) ||
        !(n = pick_layouts(dep, &o, layouts, DCP_PLAN_MAX_DCP_SIZES + 1))) {
        dcp_trace_destroy(&trace);
        dcp_deployment_destroy(&dep);
        return CLI_EXIT_FAIL;
    }
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    const uint32_t num_runs = o.sweep.n ? o.sweep.n : 1;
    struct replay_run *runs = calloc(num_runs, sizeof(*runs));
    dcp_deployment *prefill_dep = NULL;
    int err = runs ? DCP_OK : DCP_ENOMEM;
    for (uint32_t j = 0; j < num_runs && !err; j++) {
        if (o.sweep.n)
            o.clients = o.sweep.v[j];
        err = run_layouts(dep, &o, trace, layouts, n, &prefill_dep, &runs[j]);
    }
    if (o.sweep.n)
        o.clients = 0;
    bool ok = !err;
    for (uint32_t j = 0; ok && j < num_runs; j++)
        ok = run_ok(&o, &runs[j]);
    if (!err) {
        if (o.json)
            replay_print_json(dep, &o, trace, runs, num_runs);
        else if (o.sweep.n)
            replay_print_sweep(dep, &o, trace, runs, num_runs);
        else
            replay_print_text(dep, &o, trace, &runs[0]);
        if (o.plot) {
            char title[256];
            snprintf(title, sizeof(title), "%s on %u x %s: %s", cfg->model.name, cfg->parallel.tp, cfg->hardware.gpu,
                     o.trace ? o.trace : "synthetic agentic trace");
            const int werr = o.sweep.n ? replay_plot_pareto(o.plot, title, runs, num_runs)
                                       : replay_plot_svg(o.plot, title, runs[0].r, runs[0].n);
            if (werr) {
                fprintf(stderr, "dcp-run replay: cannot write %s\n", o.plot);
                ok = false;
            }
        }
    }
    free_runs(runs, num_runs);
    dcp_deployment_destroy(&prefill_dep);
    dcp_trace_destroy(&trace);
    dcp_deployment_destroy(&dep);
    return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
