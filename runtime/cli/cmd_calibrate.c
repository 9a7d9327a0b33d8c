/*
 * cmd_calibrate.c: `dcp-run calibrate [DEPLOYMENT] --out FILE`: measures the
 * performance model's inputs on the backend the deployment runs on (dcp_calibrate(),
 * include/dcp/perf.h) and writes them as a calibration file that `plan` and
 * `replay` read with --calibration FILE. Prints what it measured and the fits.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format.h"
#include "json.h"
#include "run_common.h"
#include "table.h"

struct calibrate_opts {
    const char *file, *out;
    bool quick, json;
    uint32_t repeats;
    uint64_t max_bytes, max_context, kv_mb;
    struct cli_backend_opt backend;
};

#define CAL_OPT(field) offsetof(struct calibrate_opts, field)
static const struct cli_option calibrate_options[] = {
    {"--out", CLI_ARG_STRING, "FILE", "write the calibration file here (required)", .offset = CAL_OPT(out)},
    {"--quick", CLI_ARG_FLAG, NULL, "a short run: 3 repeats, messages up to 256 KiB, contexts up to 4,096, 16 MB of KV",
     .offset = CAL_OPT(quick)},
    {"--repeats", CLI_ARG_U32, "N", "timed calls per point, the median kept (default 20)", 1, 100000,
     .offset = CAL_OPT(repeats)},
    {"--max-bytes", CLI_ARG_U64, "N", "largest collective message per rank (default 4M; from 4k up by 4x)", 4096,
     1ull << 32, .offset = CAL_OPT(max_bytes)},
    {"--max-context", CLI_ARG_U64, "N", "longest per-rank context timed (default 64k; from 256 up by 4x)", 256,
     1ull << 30, .offset = CAL_OPT(max_context)},
    {"--kv-mb", CLI_ARG_U64, "N", "KV arena per rank of the attention runs, MB (default 256)", 1, 1e9,
     .offset = CAL_OPT(kv_mb)},
    CLI_OPTION_BACKEND(struct calibrate_opts, backend, "auto, host or cuda (default runtime.backend)"),
    CLI_OPTION_JSON(struct calibrate_opts, json),
};

static const struct cli_spec calibrate_spec = {
    .command = "calibrate",
    .usage = "[DEPLOYMENT] --out FILE [options]",
    .description =
        "Measures the performance model's inputs on the backend the deployment runs on (host\n"
        "threads, CUDA virtual ranks, or NCCL across GPUs) with the deployment's shapes: each\n"
        "collective of the DCP merge (all-gather, reduce-scatter, all-to-all) over its DCP group\n"
        "from 4 KiB to 4 MiB per rank, fitted to alpha + bytes / beta; one rank's decode attention\n"
        "at per-rank contexts from 256 tokens up, giving kv_efficiency (against hardware.hbm_gbps)\n"
        "and the fixed cost of a call; the smallest call eagerly (launch) and replayed from a CUDA\n"
        "graph where the backend captures graphs. Writes FILE for `plan` and `replay`\n"
        "--calibration FILE, which say which inputs were calibrated.\n",
    CLI_SPEC_DEPLOYMENT("DEPLOYMENT", struct calibrate_opts, file),
    CLI_SPEC_OPTIONS(calibrate_options),
    .epilogue = "exit status: 0 ok, 1 the deployment, an engine or the file failed, 2 bad usage\n",
};

static void print_text(const struct dcp_calibration *c, const char *out)
{
    const struct dcp_perf_params *f = &c->fit;
    char a[CLI_FMT_LEN], b[CLI_FMT_LEN];
    printf("dcp-run calibrate: %s on %s\n", c->deployment, c->backend);
    if (c->num_collectives) {
        struct cli_table t;
        cli_table_init(&t, 4);
        cli_table_row(&t);
        cli_table_cell(&t, "collective");
        cli_table_cell(&t, "ranks");
        cli_table_cell(&t, "bytes per rank");
        cli_table_cell(&t, "time (median)");
        for (uint32_t i = 0; i < c->num_collectives; i++) {
            const struct dcp_calibration_collective *x = &c->collectives[i];
            cli_table_row(&t);
            cli_table_cell(&t, "%s", dcp_plan_comm_kind_name(x->kind));
            cli_table_cell(&t, "%u", x->ranks);
            cli_table_cell(&t, "%s", cli_fmt_bytes(a, x->bytes));
            cli_table_cell(&t, "%s", cli_fmt_seconds(b, x->seconds));
        }
        printf("\nCollectives of the DCP group\n");
        cli_table_print(&t, stdout, 2);
        for (uint32_t i = 0; i < f->num_collective_fits; i++) {
            const struct dcp_perf_collective_fit *x = &f->collective_fits[i];
            printf("  fit %s x%u (%s): %s + bytes / %s\n", dcp_plan_comm_kind_name(x->kind), x->ranks,
                   dcp_perf_link_name(x->link), cli_fmt_seconds(a, x->alpha), cli_fmt_rate(b, x->beta));
        }
    } else {
        printf("\nCollectives: none to measure (dcp 1)\n");
    }
    struct cli_table t;
    cli_table_init(&t, 5);
    cli_table_row(&t);
    cli_table_cell(&t, "context per rank");
    cli_table_cell(&t, "batch");
    cli_table_cell(&t, "KV read");
    cli_table_cell(&t, "time (median)");
    cli_table_cell(&t, "rate");
    for (uint32_t i = 0; i < c->num_attention; i++) {
        const struct dcp_calibration_attention *x = &c->attention[i];
        cli_table_row(&t);
        cli_table_cell(&t, "%s", cli_fmt_count(a, x->context));
        cli_table_cell(&t, "%u", x->batch);
        cli_table_cell(&t, "%s", cli_fmt_bytes(b, x->bytes));
        cli_table_cell(&t, "%s", cli_fmt_seconds(a, x->seconds));
        cli_table_cell(&t, "%s", cli_fmt_rate(b, x->seconds > 0 ? x->bytes / x->seconds : 0));
    }
    printf("\nDecode attention of one rank, one layer\n");
    cli_table_print(&t, stdout, 2);
    if (f->calibrated & DCP_PERF_CAL_KV)
        printf("  fit: bytes / (%s x kv_efficiency %.3g) + attention_call %s\n", cli_fmt_rate(a, c->hbm_bandwidth),
               f->kv_efficiency, cli_fmt_seconds(b, f->attention_call));
    if (f->calibrated & DCP_PERF_CAL_LAUNCH)
        printf("  launch: the smallest call takes %s (kernel_gap_eager)\n", cli_fmt_seconds(a, f->kernel_gap_eager));
    if (f->calibrated & DCP_PERF_CAL_GRAPH)
        printf("  graph: replayed from a CUDA graph it takes %s (kernel_gap_graph)\n",
               cli_fmt_seconds(a, f->kernel_gap_graph));
    else
        printf("  graph: not measured (this backend captures no CUDA graphs); kernel_gap_graph keeps its default\n");
    printf("\nwrote %s (use it with plan/replay --calibration %s)\n", out, out);
}

static void print_json(const struct dcp_calibration *c, const char *out)
{
    const struct dcp_perf_params *f = &c->fit;
    struct json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_kv_string(&w, "schema", "dcp-calibrate/1");
    json_kv_string(&w, "deployment", c->deployment);
    json_kv_string(&w, "backend", c->backend);
    json_kv_string(&w, "file", out);
    json_kv_number(&w, "hbm_bytes_per_s", c->hbm_bandwidth);
    json_key(&w, "collectives");
    json_begin_array(&w);
    for (uint32_t i = 0; i < c->num_collectives; i++) {
        const struct dcp_calibration_collective *x = &c->collectives[i];
        json_begin_object(&w);
        json_kv_string(&w, "kind", dcp_plan_comm_kind_name(x->kind));
        json_kv_uint(&w, "ranks", x->ranks);
        json_kv_number(&w, "bytes", x->bytes);
        json_kv_number(&w, "seconds", x->seconds);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "collective_fits");
    json_begin_array(&w);
    for (uint32_t i = 0; i < f->num_collective_fits; i++) {
        const struct dcp_perf_collective_fit *x = &f->collective_fits[i];
        json_begin_object(&w);
        json_kv_string(&w, "kind", dcp_plan_comm_kind_name(x->kind));
        json_kv_uint(&w, "ranks", x->ranks);
        json_kv_string(&w, "link", dcp_perf_link_name(x->link));
        json_kv_number(&w, "alpha_seconds", x->alpha);
        json_kv_number(&w, "beta_bytes_per_s", x->beta);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "attention");
    json_begin_array(&w);
    for (uint32_t i = 0; i < c->num_attention; i++) {
        const struct dcp_calibration_attention *x = &c->attention[i];
        json_begin_object(&w);
        json_kv_uint(&w, "context", x->context);
        json_kv_uint(&w, "batch", x->batch);
        json_kv_number(&w, "bytes", x->bytes);
        json_kv_number(&w, "seconds", x->seconds);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_kv_number(&w, "kv_efficiency", f->calibrated & DCP_PERF_CAL_KV ? f->kv_efficiency : NAN);
    json_kv_number(&w, "attention_call_seconds", f->calibrated & DCP_PERF_CAL_KV ? f->attention_call : NAN);
    json_kv_number(&w, "kernel_gap_eager_seconds", f->calibrated & DCP_PERF_CAL_LAUNCH ? f->kernel_gap_eager : NAN);
    json_kv_number(&w, "kernel_gap_graph_seconds", f->calibrated & DCP_PERF_CAL_GRAPH ? f->kernel_gap_graph : NAN);
    json_end_object(&w);
    json_finish(&w);
}

int cmd_calibrate(int argc, char **argv)
{
    struct calibrate_opts o = {0};
    int rc = cli_parse(&calibrate_spec, argc, argv, &o);
    if (rc)
        return rc == CLI_PARSE_HELP ? CLI_EXIT_OK : rc;
    struct cli_exec_opts exec = {.backend = o.backend};
    dcp_deployment *dep = NULL;
    if ((rc = cli_open_exec_deployment("calibrate", o.file ? o.file : cli_default_deployment(), &exec, &dep)))
        return rc;
    if (!o.out) {
        fprintf(stderr, "dcp-run calibrate: give --out FILE (see dcp-run calibrate --help)\n");
        dcp_deployment_destroy(&dep);
        return CLI_EXIT_USAGE;
    }
    struct dcp_calibrate_params p;
    dcp_calibrate_default_params(&p);
    if (o.quick) {
        p.repeats = 3;
        p.max_bytes = 256u << 10;
        p.max_context = 4096;
        p.kv_bytes = 16e6;
    }
    if (o.repeats)
        p.repeats = o.repeats;
    if (o.max_bytes)
        p.max_bytes = o.max_bytes;
    if (o.max_context)
        p.max_context = o.max_context;
    if (o.kv_mb)
        p.kv_bytes = (double)o.kv_mb * 1e6;
    struct dcp_calibration *c = calloc(1, sizeof(*c));
    int err = c ? dcp_calibrate(dep, &p, c) : DCP_ENOMEM;
    if (!err)
        err = dcp_calibration_write(c, o.out);
    if (err) {
        fprintf(stderr, "dcp-run calibrate: %s: %s\n", dcp_strerror(err), dcp_last_error());
    } else if (o.json) {
        print_json(c, o.out);
    } else {
        print_text(c, o.out);
    }
    free(c);
    dcp_deployment_destroy(&dep);
    return err ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
