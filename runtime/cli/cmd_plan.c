/*
 * cmd_plan.c: `dcp-run plan [FILE] [--json]`, what DCP buys over plain TP for a
 * deployment. The figures come from dcp_plan_compute(); this file only presents
 * them, as aligned tables or as one JSON object (keys documented in docs/plan.md).
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format.h"
#include "perf_inputs.h"
#include "run_common.h"
#include "table.h"

/* Version of the JSON layout; bumped when a key changes meaning or goes away. */
#define PLAN_JSON_SCHEMA "dcp-plan/4"

/* A DCP size is recommended over TP only for a decode gain above this fraction. */
#define MIN_GAIN 0.05

#define PLAN_OPT(field) offsetof(struct plan_args, field)

struct plan_args {
    const char *path;
    bool json;
    struct cli_u32_list dcp;   /* --dcp */
    struct cli_perf_opts perf; /* --calibration, efficiencies */
};

static const struct cli_option plan_options[] = {
    {"--dcp", CLI_ARG_CUSTOM, "N,N,...|all",
     "DCP sizes of the decode table besides TP (default: the deployment's; all: every valid one)",
     .offset = PLAN_OPT(dcp), .parse = cli_parse_list_or_all},
    CLI_PERF_OPTIONS(struct plan_args, perf, ""),
    {"--json", CLI_ARG_FLAG, NULL, "print one JSON object with the same figures (keys: docs/plan.md)",
     .offset = PLAN_OPT(json)},
};

static const struct cli_spec plan_spec = {
    .command = "plan",
    .usage = "[FILE] [options]",
    .description =
        "Shows what Decode Context Parallelism buys over plain tensor parallelism for one\n"
        "deployment, with no GPU needed. FILE is a YAML deployment.\n",
    CLI_SPEC_DEPLOYMENT("FILE", struct plan_args, path),
    CLI_SPEC_OPTIONS(plan_options),
    .epilogue =
        "\"tp only\" is the deployment's TP layout with dcp 1: TP splits the KV heads until\n"
        "each GPU holds one, then every further rank holds a copy (MLA: every rank holds\n"
        "the whole latent cache). \"dcp N\" keeps the same heads but shards each sequence's\n"
        "tokens over N ranks. The figures:\n"
        "\n"
        "  memory        per GPU: usable = memory x gpu_fraction; weights = parameters x\n"
        "                bytes per parameter / tp; KV budget = usable - weights - reserve\n"
        "  KV layout     KV bytes per context token per GPU (all layers), copies of each\n"
        "                token across the TP group, whole pages of block_size local tokens\n"
        "                that fit the budget (same page size in both layouts), and the\n"
        "                context tokens one instance (TP group) holds: pages x block x dcp\n"
        "  capacity      per context length: pages one request needs per GPU,\n"
        "                ceil(L / block) or ceil(L / (block x dcp)), and how many such\n"
        "                requests fit at once (whole pages)\n"
        "  comm          one row per exchange of the merge scheme per layer (the query\n"
        "                gather, the merge's): how it moves (all_gather, reduce_scatter,\n"
        "                all_to_all, peer_write), and the bytes one rank sends and\n"
        "                receives per layer per query token\n"
        "  KV read       bytes one rank reads per layer per decode step for one request\n"
        "                (with DCP: its largest shard), and that time at HBM bandwidth\n"
        "  DCP sizes     the valid ones, and why each other is not\n"
        "  decode        the performance model (docs/plan.md): per context and layout, the\n"
        "                requests that fit at once, output tok/s per GPU and TPOT with all\n"
        "                of them decoding, a batch-1 step, and the concurrency from which\n"
        "                DCP decodes faster than TP; cluster totals over the instances\n"
        "  recommendation  one line: the layout to use and why\n"
        "\n"
        "exit status: 0 success, 1 the deployment could not be loaded or planned, 2 bad usage\n",
};

/* ---- shared wording ---------------------------------------------------------- */

/* Column label of the DCP layout: "dcp 8". */
static const char *dcp_label(char *buf, uint32_t dcp)
{
    snprintf(buf, CLI_FMT_LEN, "dcp %u", dcp);
    return buf;
}

/* Requests that fit with DCP over those without, or why there is no ratio. */
static const char *concurrency_gain(char *buf, const struct dcp_plan_context *c)
{
    if (c->baseline_concurrency > 0)
        return cli_fmt_ratio(buf, (double)c->dcp_concurrency / (double)c->baseline_concurrency);
    snprintf(buf, CLI_FMT_LEN, "%s", c->dcp_concurrency > 0 ? "dcp only" : "-");
    return buf;
}

/* Writes the one-line verdict into buf. */
static void verdict(const struct dcp_config *cfg, const struct dcp_plan *plan, char *buf,
                    size_t size)
{
    char a[CLI_FMT_LEN], b[CLI_FMT_LEN], c[CLI_FMT_LEN], d[CLI_FMT_LEN];
    const struct dcp_plan_memory *mem = &plan->memory;
    const uint32_t dcp = cfg->parallel.dcp;
    const uint32_t copies = (uint32_t)lround(plan->baseline.replication);

    if (mem->kv_budget_bytes <= 0) {
        snprintf(buf, size,
                 "does not fit: the weights (%s) and reserve (%s) exceed the %s usable per GPU "
                 "by %s; no KV cache fits, with or without DCP",
                 cli_fmt_bytes(a, mem->weight_bytes), cli_fmt_bytes(b, mem->reserve_bytes),
                 cli_fmt_bytes(c, mem->usable_bytes), cli_fmt_bytes(d, -mem->kv_budget_bytes));
        return;
    }
    if (plan->dcp.pages == 0) {
        snprintf(buf, size, "does not fit: the KV budget (%s) is smaller than one page (%s)",
                 cli_fmt_bytes(a, mem->kv_budget_bytes), cli_fmt_bytes(b, plan->dcp.page_bytes));
        return;
    }
    if (dcp == 1 && copies <= 1) {
        snprintf(buf, size,
                 "no DCP needed: at tp %u each GPU holds its own KV heads, nothing is stored "
                 "twice, so DCP has no copies to remove",
                 cfg->parallel.tp);
        return;
    }
    if (dcp == 1) {
        snprintf(buf, size,
                 "TP alone keeps %u copies of every token's KV; dcp %u (the largest valid at "
                 "tp %u) would hold %ux the context per instance",
                 copies, copies, cfg->parallel.tp, copies);
        return;
    }
    size_t n = (size_t)snprintf(buf, size,
                                "DCP %u holds %ux the context per instance (%s -> %s tokens)", dcp,
                                dcp, cli_fmt_count(a, plan->baseline.context_tokens),
                                cli_fmt_count(b, plan->dcp.context_tokens));
    if (plan->num_contexts > 0 && n < size) {
        const struct dcp_plan_context *longest = &plan->contexts[plan->num_contexts - 1];
        n += (size_t)snprintf(buf + n, size - n, "; at %s tokens %s -> %s requests fit",
                              cli_fmt_count(a, longest->context_len),
                              cli_fmt_count(b, longest->baseline_concurrency),
                              cli_fmt_count(c, longest->dcp_concurrency));
    }
}

/* ---- decisions: the performance model over the layouts ------------------------------------ */

/* Most layouts the decode table holds (TP and every DCP size). */
#define MAX_LAYOUTS (DCP_PLAN_MAX_DCP_SIZES + 1)

/* One layout at one context. */
struct decode_point {
    uint64_t fits;          /* requests of the context that fit at once */
    double tok_s_gpu;       /* decoding all of them (0 if none fit) */
    double tpot;            /* step time with all of them */
    double step1;           /* step time with one */
    uint32_t wins_from;     /* concurrency from which it beats TP (0: never; TP: 0) */
};

struct decisions {
    struct dcp_perf_params params;
    struct dcp_plan_dcp_size sizes[DCP_PLAN_MAX_DCP_SIZES];
    uint32_t num_sizes;
    int n;                                /* layouts, TP first */
    uint32_t dcp[MAX_LAYOUTS];
    struct dcp_perf_model model[MAX_LAYOUTS];
    bool modelled;                        /* the performance model applies */
    char refused[400];                    /* why not */
    struct decode_point at[DCP_MAX_CONTEXT_LENGTHS][MAX_LAYOUTS];
    uint32_t max_clients;                 /* concurrency the crossover search goes up to */
    char warnings[4][256];
    uint32_t num_warnings;
    char recommendation[512];
};

/* decide() refused its input, having said why. */
#define REFUSED 1

/* TP first, then --dcp's sizes (all valid ones with "all"), else the deployment's. */
static int pick_layouts(const dcp_deployment *dep, const struct plan_args *args, struct decisions *d)
{
    d->num_sizes = dcp_plan_dcp_sizes(dep, d->sizes, DCP_PLAN_MAX_DCP_SIZES);
    d->dcp[d->n++] = 1;
    if (args->dcp.all) {
        for (uint32_t i = 0; i < d->num_sizes && d->n < MAX_LAYOUTS; i++)
            if (d->sizes[i].valid && d->sizes[i].dcp > 1)
                d->dcp[d->n++] = d->sizes[i].dcp;
        return DCP_OK;
    }
    if (!args->dcp.n) {
        const uint32_t dcp = dcp_deployment_config(dep)->parallel.dcp;
        if (dcp > 1)
            d->dcp[d->n++] = dcp;
        return DCP_OK;
    }
    for (uint32_t i = 0; i < args->dcp.n && d->n < MAX_LAYOUTS; i++) {
        struct dcp_plan p;
        if (args->dcp.v[i] == 1)
            continue;
        if (dcp_plan_compute_dcp(dep, args->dcp.v[i], &p)) {
            fprintf(stderr, "dcp-run plan: --dcp %u: %s\n", args->dcp.v[i], dcp_last_error());
            return REFUSED;
        }
        d->dcp[d->n++] = args->dcp.v[i];
    }
    return DCP_OK;
}

static void recommend(const dcp_deployment *dep, struct decisions *d, uint32_t num_contexts,
                      const uint64_t *contexts)
{
    char a[CLI_FMT_LEN];
    if (!d->modelled) {
        snprintf(d->recommendation, sizeof(d->recommendation), "none: %s", d->refused);
        return;
    }
    if (d->n == 1) {
        snprintf(d->recommendation, sizeof(d->recommendation),
                 "TP (dcp 1): no DCP size is valid here (%s)", d->num_sizes > 1 ? d->sizes[1].reason : "tp 1");
        return;
    }
    /* The longest context at which TP or some DCP size holds a request. */
    int ci = (int)num_contexts - 1;
    while (ci >= 0) {
        bool any = false;
        for (int k = 0; k < d->n; k++)
            any |= d->at[ci][k].fits > 0;
        if (any)
            break;
        ci--;
    }
    if (ci < 0) {
        snprintf(d->recommendation, sizeof(d->recommendation), "none: no layout holds a request of %s tokens",
                 cli_fmt_count(a, contexts[num_contexts - 1]));
        return;
    }
    const struct decode_point *at = d->at[ci];
    int best = 0;
    for (int k = 1; k < d->n; k++)
        if (at[k].tok_s_gpu > at[best].tok_s_gpu)
            best = k;
    cli_fmt_count(a, contexts[ci]);
    if (best == 0 || at[best].tok_s_gpu < (1 + MIN_GAIN) * at[0].tok_s_gpu) {
        snprintf(d->recommendation, sizeof(d->recommendation),
                 "TP (dcp 1): at %s tokens no DCP size decodes more than %.0f%% faster with all the requests "
                 "that fit (TP %s tok/s per GPU)", a, MIN_GAIN * 100, cli_fmt_count(a, (uint64_t)at[0].tok_s_gpu));
        return;
    }
    size_t n = (size_t)snprintf(d->recommendation, sizeof(d->recommendation),
                                "dcp %u: at %s tokens it holds %llu requests to TP's %llu and decodes %.2fx the tokens "
                                "per GPU with them", d->dcp[best], a, (unsigned long long)at[best].fits,
                                (unsigned long long)at[0].fits,
                                at[0].tok_s_gpu > 0 ? at[best].tok_s_gpu / at[0].tok_s_gpu : INFINITY);
    if (n < sizeof(d->recommendation) && at[best].wins_from > 1)
        snprintf(d->recommendation + n, sizeof(d->recommendation) - n,
                 "; it beats TP from %u concurrent requests up, TP is faster below", at[best].wins_from);
    else if (n < sizeof(d->recommendation) && at[best].wins_from == 1)
        snprintf(d->recommendation + n, sizeof(d->recommendation) - n, ", at every concurrency");
    (void)dep;
}

static int decide(const dcp_deployment *dep, const struct plan_args *args, struct decisions *d)
{
    int err = pick_layouts(dep, args, d);
    if (err)
        return err;
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    const struct dcp_workload_config *w = &cfg->workload;
    d->modelled = true;
    for (int k = 0; k < d->n && d->modelled; k++)
        if (dcp_perf_model_init(dep, d->dcp[k], &d->params, &d->model[k])) {
            snprintf(d->refused, sizeof(d->refused), "%s", dcp_last_error());
            d->modelled = false;
        }
    for (int k = 0; k < d->n && d->modelled; k++) {
        if (k == 0 && d->model[0].tp_link == DCP_PERF_LINK_NETWORK && d->num_warnings < 4)
            snprintf(d->warnings[d->num_warnings++], sizeof(d->warnings[0]),
                     "an instance of tp %u spans nodes of %u GPUs: its all-reduces are priced on the network",
                     cfg->parallel.tp, cfg->hardware.gpus_per_node);
        if (d->model[k].dcp_link == DCP_PERF_LINK_NETWORK && d->num_warnings < 4)
            snprintf(d->warnings[d->num_warnings++], sizeof(d->warnings[0]),
                     "a DCP group of %u spans nodes of %u GPUs: its exchanges are priced on the network "
                     "(%g GB/s per GPU), not NVLink", d->dcp[k], cfg->hardware.gpus_per_node,
                     cfg->hardware.internode_bandwidth / 1e9);
    }
    for (uint32_t i = 0; d->modelled && i < w->num_context_lengths; i++) {
        const uint64_t ctx = w->context_lengths[i];
        uint64_t most = 1;
        for (int k = 0; k < d->n; k++) {
            struct dcp_plan p;
            if ((err = dcp_plan_compute_dcp(dep, d->dcp[k], &p)))
                return err;
            struct decode_point *x = &d->at[i][k];
            x->fits = d->dcp[k] == 1 ? p.contexts[i].baseline_concurrency : p.contexts[i].dcp_concurrency;
            most = DCP_CLI_MAX(most, x->fits);
            struct dcp_perf_step t;
            dcp_perf_decode_time(&d->model[k], DCP_CLI_MAX(x->fits, (uint64_t)1), ctx, w->q_len, &t);
            x->tpot = x->fits ? t.total : 0;
            x->tok_s_gpu = dcp_perf_decode_rate(&d->model[k], x->fits, x->fits, ctx, w->q_len);
            dcp_perf_decode_time(&d->model[k], 1, ctx, w->q_len, &t);
            x->step1 = x->fits ? t.total : 0;
        }
        d->max_clients = (uint32_t)DCP_CLI_MIN(most, (uint64_t)65536);
        for (int k = 1; k < d->n; k++)
            d->at[i][k].wins_from = dcp_perf_wins_from(&d->model[0], d->at[i][0].fits, &d->model[k], d->at[i][k].fits,
                                                       ctx, w->q_len, d->max_clients);
    }
    recommend(dep, d, w->num_context_lengths, w->context_lengths);
    return DCP_OK;
}

static void print_sizes(const struct dcp_config *cfg, const struct decisions *d)
{
    printf("\nDCP sizes at tp %u (%s): valid", cfg->parallel.tp, dcp_attention_kind_name(cfg->model.attention));
    for (uint32_t i = 0, shown = 0; i < d->num_sizes; i++)
        if (d->sizes[i].valid)
            printf("%s %u", shown++ ? "," : "", d->sizes[i].dcp);
    printf("\n");
    for (uint32_t i = 0; i < d->num_sizes; i++)
        if (!d->sizes[i].valid)
            printf("  %u: %s\n", d->sizes[i].dcp, d->sizes[i].reason);
}

static void print_decisions(const dcp_deployment *dep, const struct plan_args *args, const struct decisions *d)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    const struct dcp_workload_config *w = &cfg->workload;
    char a[CLI_FMT_LEN];
    print_sizes(cfg, d);
    printf("\nDecode throughput (performance model, docs/plan.md; all requests that fit decoding)\n");
    if (!d->modelled) {
        printf("  not modelled: %s\n", d->refused);
        printf("\nrecommendation: %s\n", d->recommendation);
        return;
    }
    cli_perf_print_inputs(&args->perf, &d->params, stdout);
    struct cli_table t;
    cli_table_init(&t, 7);
    cli_table_row(&t);
    cli_table_cell(&t, "context");
    cli_table_cell(&t, "layout");
    cli_table_cell(&t, "requests at once");
    cli_table_cell(&t, "tok/s per GPU");
    cli_table_cell(&t, "TPOT");
    cli_table_cell(&t, "batch-1 step");
    cli_table_cell(&t, "beats TP from");
    for (uint32_t i = 0; i < w->num_context_lengths; i++)
        for (int k = 0; k < d->n; k++) {
            const struct decode_point *x = &d->at[i][k];
            cli_table_row(&t);
            if (k == 0)
                cli_table_cell(&t, "%s", cli_fmt_count(a, w->context_lengths[i]));
            else
                cli_table_cell(&t, "%s", "");
            if (d->dcp[k] == 1)
                cli_table_cell(&t, "%s", "TP");
            else
                cli_table_cell(&t, "dcp %u", d->dcp[k]);
            cli_table_cell(&t, "%s", cli_fmt_count(a, x->fits));
            cli_table_cell(&t, "%s", x->fits ? cli_fmt_count(a, (uint64_t)llround(x->tok_s_gpu)) : "-");
            cli_table_cell(&t, "%s", x->fits ? cli_fmt_seconds(a, x->tpot) : "-");
            cli_table_cell(&t, "%s", x->fits ? cli_fmt_seconds(a, x->step1) : "-");
            if (k == 0)
                cli_table_cell(&t, "%s", "");
            else if (x->wins_from)
                cli_table_cell(&t, "%u request%s", x->wins_from, x->wins_from == 1 ? "" : "s");
            else
                cli_table_cell(&t, "never (up to %u)", d->max_clients);
        }
    cli_table_align(&t, 1, CLI_ALIGN_LEFT);
    cli_table_print(&t, stdout, 2);
    const uint32_t inst = (uint32_t)((uint64_t)cfg->hardware.gpus_per_node * cfg->hardware.nodes / cfg->parallel.tp);
    if (inst > 1 && w->num_context_lengths) {
        const uint32_t i = w->num_context_lengths - 1;
        printf("\nCluster: %u instances of tp %u (%u GPUs); at %s tokens:", inst, cfg->parallel.tp,
               inst * cfg->parallel.tp, cli_fmt_count(a, w->context_lengths[i]));
        for (int k = 0; k < d->n; k++) {
            const struct decode_point *x = &d->at[i][k];
            char b[CLI_FMT_LEN];
            printf("%s %s %s requests at once, %s output tok/s", k ? ";" : "", d->dcp[k] == 1 ? "TP" : "dcp",
                   cli_fmt_count(a, x->fits * inst), cli_fmt_count(b, (uint64_t)llround(x->tok_s_gpu * cfg->parallel.tp * inst)));
            if (d->dcp[k] > 1)
                printf(" (dcp %u)", d->dcp[k]);
        }
        printf("\n");
    }
    printf("\n");
    for (uint32_t i = 0; i < d->num_warnings; i++)
        printf("warning: %s\n", d->warnings[i]);
    printf("recommendation: %s\n", d->recommendation);
}

static void json_decisions(struct json_writer *w, const dcp_deployment *dep, const struct plan_args *args,
                           const struct decisions *d)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    const struct dcp_workload_config *wl = &cfg->workload;
    json_key(w, "dcp_sizes");
    json_begin_array(w);
    for (uint32_t i = 0; i < d->num_sizes; i++) {
        json_begin_object(w);
        json_kv_uint(w, "dcp", d->sizes[i].dcp);
        json_kv_bool(w, "valid", d->sizes[i].valid);
        json_kv_string(w, "reason", d->sizes[i].valid ? NULL : d->sizes[i].reason);
        json_end_object(w);
    }
    json_end_array(w);
    json_kv_bool(w, "modelled", d->modelled);
    json_kv_string(w, "not_modelled", d->modelled ? NULL : d->refused);
    if (d->modelled)
        cli_perf_json_inputs(w, &args->perf, &d->params);
    json_key(w, "decode");
    json_begin_array(w);
    for (uint32_t i = 0; d->modelled && i < wl->num_context_lengths; i++) {
        json_begin_object(w);
        json_kv_uint(w, "context_len", wl->context_lengths[i]);
        json_key(w, "layouts");
        json_begin_array(w);
        for (int k = 0; k < d->n; k++) {
            const struct decode_point *x = &d->at[i][k];
            json_begin_object(w);
            json_kv_uint(w, "dcp", d->dcp[k]);
            json_kv_uint(w, "requests_at_once", x->fits);
            json_kv_number(w, "tok_s_per_gpu", x->tok_s_gpu);
            json_kv_number(w, "tpot_seconds", x->fits ? x->tpot : NAN);
            json_kv_number(w, "batch1_step_seconds", x->fits ? x->step1 : NAN);
            json_kv_number(w, "wins_from", k && x->wins_from ? (double)x->wins_from : NAN);
            json_end_object(w);
        }
        json_end_array(w);
        json_end_object(w);
    }
    json_end_array(w);
    const uint32_t inst = (uint32_t)((uint64_t)cfg->hardware.gpus_per_node * cfg->hardware.nodes / cfg->parallel.tp);
    json_key(w, "cluster");
    if (d->modelled && wl->num_context_lengths) {
        const uint32_t i = wl->num_context_lengths - 1;
        json_begin_object(w);
        json_kv_uint(w, "instances", inst);
        json_kv_uint(w, "gpus", (uint64_t)inst * cfg->parallel.tp);
        json_kv_uint(w, "context_len", wl->context_lengths[i]);
        json_key(w, "layouts");
        json_begin_array(w);
        for (int k = 0; k < d->n; k++) {
            json_begin_object(w);
            json_kv_uint(w, "dcp", d->dcp[k]);
            json_kv_uint(w, "requests_at_once", d->at[i][k].fits * inst);
            json_kv_number(w, "output_tok_s", d->at[i][k].tok_s_gpu * cfg->parallel.tp * inst);
            json_end_object(w);
        }
        json_end_array(w);
        json_end_object(w);
    } else {
        json_null(w);
    }
    json_key(w, "warnings");
    json_begin_array(w);
    for (uint32_t i = 0; i < d->num_warnings; i++)
        json_string(w, d->warnings[i]);
    json_end_array(w);
    json_kv_string(w, "recommendation", d->recommendation);
}

/* ---- text output ---------------------------------------------------------------- */

static void print_header(const dcp_deployment *dep, const struct dcp_config *cfg,
                         const struct dcp_plan *plan)
{
    const struct dcp_model_config *m = &cfg->model;
    const struct dcp_hardware_config *hw = &cfg->hardware;
    const struct dcp_parallel_config *par = &cfg->parallel;
    char a[CLI_FMT_LEN], b[CLI_FMT_LEN], c[CLI_FMT_LEN], d[CLI_FMT_LEN];

    printf("%s (%s, kv %s) on %u x %s: tp %u, dcp %u, interleave %u, comm %s; %u instance%s\n",
           m->name, dcp_attention_kind_name(m->attention), dcp_dtype_name(m->kv_dtype),
           hw->gpus_per_node * hw->nodes, hw->gpu, par->tp, par->dcp, par->interleave,
           dcp_comm_scheme_name(par->comm), plan->instances, plan->instances == 1 ? "" : "s");
    if (m->attention == DCP_ATTN_MLA)
        printf("  model     %u layers, %u query heads, latent %u + rope %u per token",
               m->num_layers, m->num_q_heads, m->kv_lora_rank, m->rope_dim);
    else
        printf("  model     %u layers, %u query heads, %u KV heads of %u", m->num_layers,
               m->num_q_heads, m->num_kv_heads, m->head_dim);
    printf(", %s parameters in %s", cli_fmt_params(a, m->num_params), dcp_weight_dtype_name(m->weight_dtype));
    if (m->experts)
        printf(", MoE: %u of %u experts per token, %s active\n", m->experts_per_token, m->experts,
               cli_fmt_params(b, m->active_params));
    else
        printf(", dense: every parameter read each step\n");
    printf("  hardware  %s per GPU, HBM %s, link %s per direction, %s per collective, %u node%s\n",
           cli_fmt_bytes(a, hw->memory_bytes), cli_fmt_rate(b, hw->hbm_bandwidth),
           cli_fmt_rate(c, hw->link_bandwidth), cli_fmt_seconds(d, hw->collective_latency),
           hw->nodes, hw->nodes == 1 ? "" : "s");
    printf("  source    %s\n", dcp_deployment_source(dep));
}

static void print_memory(const struct dcp_config *cfg, const struct dcp_plan *plan)
{
    const struct dcp_plan_memory *mem = &plan->memory;
    char v[CLI_FMT_LEN], a[CLI_FMT_LEN];
    struct cli_table t;
    cli_table_init(&t, 3);
    cli_table_align(&t, 2, CLI_ALIGN_LEFT);

    cli_table_row(&t);
    cli_table_cell(&t, "usable");
    cli_table_cell(&t, "%s", cli_fmt_bytes(v, mem->usable_bytes));
    cli_table_cell(&t, "%s x %.2f", cli_fmt_bytes(a, cfg->hardware.memory_bytes),
                   cfg->memory.gpu_fraction);
    cli_table_row(&t);
    cli_table_cell(&t, "weights");
    cli_table_cell(&t, "%s", cli_fmt_bytes(v, mem->weight_bytes));
    const enum dcp_weight_dtype wtype = cfg->model.weight_dtype;
    cli_table_cell(&t, "%s parameters x %g B (%s) / tp %u",
                   cli_fmt_params(a, cfg->model.num_params), dcp_weight_dtype_bytes(wtype),
                   dcp_weight_dtype_name(wtype), cfg->parallel.tp);
    cli_table_row(&t);
    cli_table_cell(&t, "reserve");
    cli_table_cell(&t, "%s", cli_fmt_bytes(v, mem->reserve_bytes));
    cli_table_cell(&t, "activations, workspace, graphs");
    cli_table_row(&t);
    cli_table_cell(&t, "KV budget");
    cli_table_cell(&t, "%s", cli_fmt_bytes(v, mem->kv_budget_bytes));
    cli_table_cell(&t, "%s", mem->kv_budget_bytes > 0 ? "usable - weights - reserve"
                                                      : "NOTHING FITS: weights and reserve exceed "
                                                        "usable memory");

    printf("\nMemory per GPU\n");
    cli_table_print(&t, stdout, 2);
}

static void layout_row(struct cli_table *t, const char *label, const char *baseline,
                       const char *dcp)
{
    cli_table_row(t);
    cli_table_cell(t, "%s", label);
    cli_table_cell(t, "%s", baseline);
    cli_table_cell(t, "%s", dcp);
}

static void print_layouts(const struct dcp_config *cfg, const struct dcp_plan *plan)
{
    const struct dcp_plan_layout *x = &plan->baseline, *y = &plan->dcp;
    char label[64], a[CLI_FMT_LEN], b[CLI_FMT_LEN];
    struct cli_table t;
    cli_table_init(&t, 3);
    layout_row(&t, "", "tp only", dcp_label(b, y->dcp));
    layout_row(&t, "KV heads per GPU", cli_fmt_count(a, x->kv_heads_per_gpu),
               cli_fmt_count(b, y->kv_heads_per_gpu));
    layout_row(&t, "KV bytes per context token", cli_fmt_bytes_exact(a, x->kv_bytes_per_token),
               cli_fmt_bytes_exact(b, y->kv_bytes_per_token));
    layout_row(&t, "copies across the TP group", cli_fmt_ratio(a, x->replication),
               cli_fmt_ratio(b, y->replication));
    snprintf(label, sizeof(label), "pages (%u tokens, %s each)", cfg->memory.block_size,
             cli_fmt_bytes(a, (double)x->page_bytes));
    layout_row(&t, label, cli_fmt_count(a, x->pages), cli_fmt_count(b, y->pages));
    layout_row(&t, "local tokens", cli_fmt_count(a, x->local_tokens),
               cli_fmt_count(b, y->local_tokens));
    layout_row(&t, "context tokens per instance", cli_fmt_count(a, x->context_tokens),
               cli_fmt_count(b, y->context_tokens));

    printf("\nKV layout per GPU (all %u layers)\n", cfg->model.num_layers);
    cli_table_print(&t, stdout, 2);
}

static void print_capacity(const struct dcp_plan *plan)
{
    char label[CLI_FMT_LEN], a[CLI_FMT_LEN];
    struct cli_table t;
    cli_table_init(&t, 6);
    dcp_label(label, plan->dcp.dcp);
    cli_table_span(&t, 1, 2, "pages per request");
    cli_table_span(&t, 3, 4, "requests at once");
    cli_table_row(&t);
    cli_table_cell(&t, "context");
    cli_table_cell(&t, "tp only");
    cli_table_cell(&t, "%s", label);
    cli_table_cell(&t, "tp only");
    cli_table_cell(&t, "%s", label);
    cli_table_cell(&t, "gain");
    for (uint32_t i = 0; i < plan->num_contexts; i++) {
        const struct dcp_plan_context *c = &plan->contexts[i];
        cli_table_row(&t);
        cli_table_cell(&t, "%s", cli_fmt_count(a, c->context_len));
        cli_table_cell(&t, "%s", cli_fmt_count(a, c->baseline_pages));
        cli_table_cell(&t, "%s", cli_fmt_count(a, c->dcp_pages));
        cli_table_cell(&t, "%s", cli_fmt_count(a, c->baseline_concurrency));
        cli_table_cell(&t, "%s", cli_fmt_count(a, c->dcp_concurrency));
        cli_table_cell(&t, "%s", concurrency_gain(a, c));
    }
    cli_table_align(&t, 0, CLI_ALIGN_RIGHT);
    printf("\nCapacity per instance "
           "(pages one request needs per GPU; requests that fit at once)\n");
    cli_table_print(&t, stdout, 2);
}

static void print_comm(const struct dcp_config *cfg, const struct dcp_plan *plan)
{
    const struct dcp_plan_comm *comm = &plan->comm;
    char a[CLI_FMT_LEN], b[CLI_FMT_LEN];
    const enum dcp_wire_dtype wire = cfg->parallel.comm_dtype;
    printf("\nCommunication per rank, per layer, per query token (%s, %s on the wire%s%s%s)\n",
           dcp_comm_scheme_name(comm->scheme), dcp_dtype_name(dcp_wire_dtype_of(wire, DCP_PLAN_ACT_DTYPE)),
           wire == DCP_WIRE_AUTO ? " (comm_dtype auto: the activation dtype, priced as bf16, what GPU engines "
                                   "run)"
                                 : "",
           cfg->parallel.replicate_q ? ", replicate_q: no query gather" : "",
           cfg->parallel.merge_after_uv ? ", outputs after W_UV" : "");
    if (cfg->parallel.dcp == 1) {
        printf("  none: dcp 1 keeps each sequence on every rank, nothing to gather or merge\n");
        return;
    }
    struct cli_table t;
    cli_table_init(&t, 5);
    cli_table_row(&t);
    cli_table_cell(&t, "what");
    cli_table_cell(&t, "how");
    cli_table_cell(&t, "ranks");
    cli_table_cell(&t, "send");
    cli_table_cell(&t, "receive");
    for (uint32_t i = 0; i < comm->num_rows; i++) {
        const struct dcp_plan_comm_row *row = &comm->rows[i];
        cli_table_row(&t);
        cli_table_cell(&t, "%s", row->what);
        cli_table_cell(&t, "%s", dcp_plan_comm_kind_name(row->kind));
        cli_table_cell(&t, "%u", row->ranks);
        cli_table_cell(&t, "%s", cli_fmt_bytes(a, row->send_bytes));
        cli_table_cell(&t, "%s", cli_fmt_bytes(b, row->recv_bytes));
    }
    cli_table_row(&t);
    cli_table_cell(&t, "total");
    cli_table_cell(&t, "%s", "");
    cli_table_cell(&t, "%s", "");
    cli_table_cell(&t, "%s", cli_fmt_bytes(a, comm->total_send));
    cli_table_cell(&t, "%s", cli_fmt_bytes(b, comm->total_recv));
    cli_table_align(&t, 1, CLI_ALIGN_LEFT);
    cli_table_print(&t, stdout, 2);
    printf("  exchanges per layer per step: %u\n", comm->collectives);
}

static void print_kv_read(const struct dcp_config *cfg, const struct dcp_plan *plan)
{
    const double hbm = cfg->hardware.hbm_bandwidth;
    char label[CLI_FMT_LEN], a[CLI_FMT_LEN];
    struct cli_table t;
    cli_table_init(&t, 5);
    cli_table_align(&t, 0, CLI_ALIGN_RIGHT);
    snprintf(label, sizeof(label), "dcp %u (largest shard)", plan->dcp.dcp);
    cli_table_span(&t, 1, 2, "tp only");
    cli_table_span(&t, 3, 4, label);
    cli_table_row(&t);
    cli_table_cell(&t, "context");
    cli_table_cell(&t, "bytes");
    cli_table_cell(&t, "time");
    cli_table_cell(&t, "bytes");
    cli_table_cell(&t, "time");
    for (uint32_t i = 0; i < plan->num_contexts; i++) {
        const struct dcp_plan_context *c = &plan->contexts[i];
        cli_table_row(&t);
        cli_table_cell(&t, "%s", cli_fmt_count(a, c->context_len));
        cli_table_cell(&t, "%s", cli_fmt_bytes(a, c->baseline_kv_read_bytes));
        cli_table_cell(&t, "%s", cli_fmt_seconds(a, c->baseline_kv_read_bytes / hbm));
        cli_table_cell(&t, "%s", cli_fmt_bytes(a, c->dcp_kv_read_bytes));
        cli_table_cell(&t, "%s", cli_fmt_seconds(a, c->dcp_kv_read_bytes / hbm));
    }
    printf("\nKV read per rank, per layer, per request, per decode step (time at %s)\n",
           cli_fmt_rate(a, hbm));
    cli_table_print(&t, stdout, 2);
}

/* ---- layer kinds (docs/design.md §13) ------------------------------------------- */

/** The layers of one kind (type, window, top-k and sink alike), with their KV on one GPU in both layouts. */
struct kind_group {
    struct dcp_layer_kind kind;
    uint32_t count;
    struct dcp_layer_kv base, dcp;
};

/** Groups the model's layers by kind, in order of first appearance; returns the number of groups. */
static uint32_t kind_groups(const struct dcp_config *cfg, struct kind_group *g, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t l = 0; l < cfg->model.num_layers; l++) {
        struct dcp_layer_kv base, dcp;
        if (dcp_layer_kv_init(cfg, 1, l, &base) || dcp_layer_kv_init(cfg, cfg->parallel.dcp, l, &dcp))
            continue; /* the deployment was validated: not reached */
        uint32_t i = 0;
        while (i < n && !(g[i].kind.type == base.kind.type && g[i].kind.window == base.kind.window &&
                          g[i].kind.topk == base.kind.topk && g[i].kind.sink == base.kind.sink))
            i++;
        if (i == n && n < cap)
            g[n++] = (struct kind_group){.kind = base.kind, .base = base, .dcp = dcp};
        if (i < n)
            g[i].count++;
    }
    return n;
}

/** Room for a kind's label or what it keeps. */
#define KIND_TEXT 96

static const char *kind_label(char *buf, const struct dcp_layer_kind *k)
{
    const char *sink = k->sink ? " + sink" : "";
    if (k->type == DCP_LAYER_SLIDING_WINDOW || k->type == DCP_LAYER_SPARSE_TOPK)
        snprintf(buf, KIND_TEXT, "%s %u%s", dcp_layer_type_name(k->type),
                 k->type == DCP_LAYER_SLIDING_WINDOW ? k->window : k->topk, sink);
    else
        snprintf(buf, KIND_TEXT, "%s%s", dcp_layer_type_name(k->type), sink);
    return buf;
}

/* What one request keeps per GPU of one kind's layer in one layout. */
static const char *kind_kept(char *buf, const struct dcp_config *cfg, const struct dcp_layer_kv *lk)
{
    char a[CLI_FMT_LEN], b[CLI_FMT_LEN];
    switch (lk->kind.type) {
    case DCP_LAYER_SLIDING_WINDOW:
        snprintf(buf, KIND_TEXT, "ring of %llu tokens (%s)", (unsigned long long)lk->ring_tokens,
                 cli_fmt_bytes(a, (double)lk->ring_tokens * lk->token_bytes));
        break;
    case DCP_LAYER_NONE: snprintf(buf, KIND_TEXT, "state %s", cli_fmt_bytes(a, lk->state_bytes)); break;
    default:
        if (lk->index_token_bytes)
            snprintf(buf, KIND_TEXT, "+ index keys %s/token (%s)", cli_fmt_bytes_exact(b, (double)lk->index_token_bytes),
                     cfg->parallel.sparse_index == DCP_SPARSE_INDEX_SHARDED ? "sharded" : "caller's, every rank");
        else
            snprintf(buf, KIND_TEXT, "grows with the context");
        break;
    }
    return buf;
}

/* The layers by kind, for a model with a layer pattern: KV per token per GPU and what a request keeps. */
static void print_layer_kinds(const struct dcp_config *cfg)
{
    if (cfg->model.num_layer_kinds == 0)
        return;
    struct kind_group g[DCP_MAX_LAYER_PATTERN];
    const uint32_t n = kind_groups(cfg, g, DCP_MAX_LAYER_PATTERN);
    char a[KIND_TEXT], b[CLI_FMT_LEN], c[KIND_TEXT];
    struct cli_table t;
    cli_table_init(&t, 5);
    cli_table_align(&t, 4, CLI_ALIGN_LEFT);
    cli_table_row(&t);
    cli_table_cell(&t, "kind");
    cli_table_cell(&t, "layers");
    cli_table_cell(&t, "KV per token, tp only");
    cli_table_cell(&t, "%s", dcp_label(a, cfg->parallel.dcp));
    cli_table_cell(&t, "kept per request");
    for (uint32_t i = 0; i < n; i++) {
        const struct kind_group *k = &g[i];
        cli_table_row(&t);
        cli_table_cell(&t, "%s", kind_label(a, &k->kind));
        cli_table_cell(&t, "%u", k->count);
        cli_table_cell(&t, "%s", k->kind.type == DCP_LAYER_NONE ? "-" : cli_fmt_bytes_exact(b, (double)k->base.token_bytes));
        cli_table_cell(&t, "%s", k->kind.type == DCP_LAYER_NONE ? "-"
                                 : k->dcp.sharded ? cli_fmt_bytes_exact(b, (double)k->dcp.token_bytes / cfg->parallel.dcp)
                                                  : "replicated");
        cli_table_cell(&t, "%s", kind_kept(c, cfg, &k->dcp));
    }
    printf("\nLayers by kind, per GPU (DCP shards the KV of the layers it merges; windows are bounded rings)\n");
    cli_table_print(&t, stdout, 2);
}

static void print_text(const dcp_deployment *dep, const struct dcp_plan *plan, const struct plan_args *args,
                       const struct decisions *d)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    char line[1024];
    print_header(dep, cfg, plan);
    print_memory(cfg, plan);
    print_layouts(cfg, plan);
    print_layer_kinds(cfg);
    print_capacity(plan);
    print_comm(cfg, plan);
    print_kv_read(cfg, plan);
    verdict(cfg, plan, line, sizeof(line));
    printf("\nverdict: %s\n", line);
    print_decisions(dep, args, d);
}

/* ---- JSON output ------------------------------------------------------------------ */

static void json_memory(struct json_writer *w, const struct dcp_plan *plan)
{
    const struct dcp_plan_memory *mem = &plan->memory;
    json_key(w, "memory");
    json_begin_object(w);
    json_kv_number(w, "usable_bytes", mem->usable_bytes);
    json_kv_number(w, "weight_bytes", mem->weight_bytes);
    json_kv_number(w, "reserve_bytes", mem->reserve_bytes);
    json_kv_number(w, "kv_budget_bytes", mem->kv_budget_bytes);
    json_kv_bool(w, "fits", plan->dcp.pages > 0);
    json_end_object(w);
}

static void json_layout(struct json_writer *w, const char *key, const struct dcp_plan_layout *l)
{
    json_key(w, key);
    json_begin_object(w);
    json_kv_uint(w, "dcp", l->dcp);
    json_kv_uint(w, "kv_heads_per_gpu", l->kv_heads_per_gpu);
    json_kv_number(w, "kv_bytes_per_token", l->kv_bytes_per_token);
    json_kv_number(w, "replication", l->replication);
    json_kv_number(w, "fixed_bytes", l->fixed_bytes);
    json_kv_uint(w, "page_bytes", l->page_bytes);
    json_kv_uint(w, "pages", l->pages);
    json_kv_uint(w, "local_tokens", l->local_tokens);
    json_kv_uint(w, "context_tokens", l->context_tokens);
    json_end_object(w);
}

static void json_contexts(struct json_writer *w, const struct dcp_plan *plan)
{
    json_key(w, "contexts");
    json_begin_array(w);
    for (uint32_t i = 0; i < plan->num_contexts; i++) {
        const struct dcp_plan_context *c = &plan->contexts[i];
        json_begin_object(w);
        json_kv_uint(w, "context_len", c->context_len);
        json_kv_uint(w, "baseline_pages", c->baseline_pages);
        json_kv_uint(w, "dcp_pages", c->dcp_pages);
        json_kv_uint(w, "baseline_concurrency", c->baseline_concurrency);
        json_kv_uint(w, "dcp_concurrency", c->dcp_concurrency);
        /* null when nothing fits without DCP */
        json_kv_number(w, "concurrency_gain",
                       c->baseline_concurrency
                           ? (double)c->dcp_concurrency / (double)c->baseline_concurrency
                           : NAN);
        json_kv_number(w, "baseline_kv_read_bytes", c->baseline_kv_read_bytes);
        json_kv_number(w, "dcp_kv_read_bytes", c->dcp_kv_read_bytes);
        json_end_object(w);
    }
    json_end_array(w);
}

static void json_comm(struct json_writer *w, const struct dcp_plan_comm *comm)
{
    json_key(w, "comm");
    json_begin_object(w);
    json_kv_string(w, "scheme", dcp_comm_scheme_name(comm->scheme));
    json_key(w, "rows");
    json_begin_array(w);
    for (uint32_t i = 0; i < comm->num_rows; i++) {
        const struct dcp_plan_comm_row *row = &comm->rows[i];
        json_begin_object(w);
        json_kv_string(w, "kind", dcp_plan_comm_kind_name(row->kind));
        json_kv_string(w, "what", row->what);
        json_kv_uint(w, "ranks", row->ranks);
        json_kv_number(w, "send_bytes", row->send_bytes);
        json_kv_number(w, "recv_bytes", row->recv_bytes);
        json_kv_uint(w, "layers", row->layers);
        json_end_object(w);
    }
    json_end_array(w);
    json_kv_number(w, "total_send", comm->total_send);
    json_kv_number(w, "total_recv", comm->total_recv);
    json_kv_uint(w, "collectives", comm->collectives);
    json_end_object(w);
}

/* The layers by kind (every deployment: a model without a pattern has one group of full layers). */
static void json_layer_kinds(struct json_writer *w, const struct dcp_config *cfg)
{
    struct kind_group g[DCP_MAX_LAYER_PATTERN];
    const uint32_t n = kind_groups(cfg, g, DCP_MAX_LAYER_PATTERN);
    json_key(w, "layer_kinds");
    json_begin_array(w);
    for (uint32_t i = 0; i < n; i++) {
        const struct kind_group *k = &g[i];
        json_begin_object(w);
        json_kv_string(w, "kind", dcp_layer_type_name(k->kind.type));
        json_kv_uint(w, "window", k->kind.window);
        json_kv_uint(w, "topk", k->kind.topk);
        json_kv_bool(w, "sink", k->kind.sink);
        json_kv_uint(w, "layers", k->count);
        json_kv_bool(w, "sharded", k->dcp.sharded);
        json_kv_uint(w, "token_bytes", k->base.token_bytes);
        json_kv_uint(w, "index_token_bytes", k->base.index_token_bytes);
        json_kv_uint(w, "baseline_ring_tokens", k->base.ring_tokens);
        json_kv_uint(w, "dcp_ring_tokens", k->dcp.ring_tokens);
        json_kv_number(w, "state_bytes", k->dcp.state_bytes);
        json_end_object(w);
    }
    json_end_array(w);
}

/* Returns DCP_OK or DCP_ENOMEM (the settings could not be formatted; nothing printed). */
static int print_json(const dcp_deployment *dep, const struct dcp_plan *plan, const struct plan_args *args,
                      const struct decisions *d)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    /* The settings in the deployment file's own names and units (the schema's), so
     * the "config" object can be pasted back as a deployment file. */
    char *settings = NULL;
    const int err = dcp_deployment_to_json(dep, &settings);
    if (err)
        return err;
    char line[1024];
    struct json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_kv_string(&w, "schema", PLAN_JSON_SCHEMA);
    json_kv_string(&w, "source", dcp_deployment_source(dep));
    json_key(&w, "config");
    json_raw(&w, settings);
    free(settings);
    json_kv_uint(&w, "instances", plan->instances);
    json_kv_bool(&w, "dense", cfg->model.experts == 0);
    json_memory(&w, plan);
    json_key(&w, "layouts");
    json_begin_object(&w);
    json_layout(&w, "baseline", &plan->baseline);
    json_layout(&w, "dcp", &plan->dcp);
    json_end_object(&w);
    json_contexts(&w, plan);
    json_key(&w, "kv_read_per_token");
    json_begin_object(&w);
    json_kv_number(&w, "baseline_bytes", plan->baseline_kv_read_per_token);
    json_kv_number(&w, "dcp_bytes", plan->dcp_kv_read_per_token);
    json_end_object(&w);
    json_layer_kinds(&w, cfg);
    json_comm(&w, &plan->comm);
    verdict(cfg, plan, line, sizeof(line));
    json_kv_string(&w, "verdict", line);
    json_decisions(&w, dep, args, d);
    json_end_object(&w);
    json_finish(&w);
    return DCP_OK;
}

/* ---- command --------------------------------------------------------------------- */

int cmd_plan(int argc, char **argv)
{
    struct plan_args args = {.path = NULL, .json = false};
    cli_perf_opts_init(&args.perf);
    const int rc = cli_parse(&plan_spec, argc, argv, &args);
    if (rc)
        return rc == CLI_PARSE_HELP ? CLI_EXIT_OK : rc;
    dcp_deployment *dep = cli_load_deployment(args.path ? args.path : cli_default_deployment());
    if (!dep)
        return CLI_EXIT_FAIL;
    struct dcp_plan plan;
    struct decisions *d = calloc(1, sizeof(*d));
    int err = d ? dcp_plan_compute(dep, &plan) : DCP_ENOMEM;
    if (!err && cli_perf_params(&args.perf, "plan", &d->params)) {
        free(d);
        dcp_deployment_destroy(&dep);
        return CLI_EXIT_FAIL;
    }
    if (!err)
        err = decide(dep, &args, d);
    if (!err && args.json)
        err = print_json(dep, &plan, &args, d);
    else if (!err)
        print_text(dep, &plan, &args, d);
    if (err && err != REFUSED)
        fprintf(stderr, "dcp-run plan: %s: %s\n", dcp_strerror(err), dcp_last_error());
    free(d);
    dcp_deployment_destroy(&dep);
    return err ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
