/*
 * cmd_run.c: `dcp-run run` -- the main job.
 *
 * For the TP baseline (dcp = 1, replicated KV) and for the deployment's DCP, in
 * the same per-rank KV budget: admit long-context requests while their blocks
 * fit, fill their KV through the append path with seeded synthetic K/V, run decode
 * steps over all layers, and check sampled outputs against dense attention
 * computed on the host in float64 from the same (cache-rounded) values.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format.h"
#include "progress.h"
#include "run_common.h"

/* Tokens one prefill step appends (spread over the requests still filling). */
#define PREFILL_STEP_TOKENS 8192u
/* Sampled output rows must match dense attention to this relative L2 error. */

struct run_opts {
    const char *file;
    bool json, quiet;
    uint32_t steps, requests;  /* 0: from the deployment */
    struct cli_exec_opts exec;
};

/* What one layout achieved. */
/* Version of the JSON layout (docs/run.md); bumped when a key changes meaning or goes away. */
#define RUN_JSON_SCHEMA "dcp-run/1"

struct layout_result {
    uint32_t dcp;
    char backend[640];
    char libraries[512];          /* driver and NCCL files loaded (CUDA backend), or "" */
    char notice[640];
    uint32_t offered, admitted;
    uint64_t num_blocks, blocks_used;
    double page_bytes;            /* one logical block's bytes on one rank, all layers */
    uint64_t context_tokens;      /* tokens held at the end of the run */
    double prefill_seconds;
    uint32_t steps;
    double median_step, p99_step, tokens_per_second;
    struct check_result check;
    enum dcp_dtype wire;          /* what the engine put on the DCP wire (its info.comm_dtype); dcp 1: none */
    enum dcp_comm_scheme comm;    /* the merge scheme the engine runs (its info.comm: auto resolved) */
    bool ok;
};

/* Shared by the rank threads of one step. */
struct step_ctx {
    struct run_setup *setup;
    uint32_t phase;               /* PHASE_PREFILL or PHASE_DECODE */
    bool check;                   /* download sampled layers' outputs */
};

enum { PHASE_PREFILL, PHASE_DECODE };

static int rank_step(dcp_rank *rank, void *arg)
{
    struct step_ctx *c = arg;
    struct run_setup *s = c->setup;
    struct rank_io *io = &s->io[dcp_rank_tp_rank(rank) - s->rank_begin];
    const uint32_t T = s->step_tokens;
    const bool sharded_index = s->cfg->parallel.sparse_index == DCP_SPARSE_INDEX_SHARDED;
    for (uint32_t layer = 0; layer < s->info.num_layers; layer++) {
        const struct dcp_layer_kind *kind = &s->info.layers[layer];
        if (kind->type == DCP_LAYER_NONE) /* KV-free: the model's own layer, nothing here */
            continue;
        int err = run_fill_kv(s, rank, io, layer, T);
        if (!err)
            err = dcp_rank_append_kv(rank, layer, io->k, s->mla ? NULL : io->v);
        if (!err && kind->type == DCP_LAYER_SPARSE_TOPK && sharded_index &&
            !(err = run_fill_index_k(s, rank, io, layer, T)))
            err = dcp_rank_append_index_k(rank, layer, io->ik);
        if (err)
            return err;
        if (c->phase == PHASE_PREFILL)
            continue;
        struct dcp_attention_extra x;
        if ((err = run_fill_q(s, rank, io, layer, T)) || (err = run_layer_inputs(s, rank, io, layer, T, &x)) ||
            (err = dcp_rank_attention_ex(rank, layer, io->q, io->out, io->lse, &x)))
            return err;
        if (c->check && run_is_checked_layer(s, layer) &&
            (err = run_download_outputs(s, rank, io, layer, T)))
            return err;
    }
    return dcp_rank_synchronize(rank);
}

static int run_step(struct run_setup *s, uint32_t phase, bool check)
{
    struct step_ctx c = {.setup = s, .phase = phase, .check = check};
    return dcp_engine_run(s->engine, rank_step, &c);
}

/* Appends every admitted request's context in chunks through the append path. */
static int prefill(struct run_setup *s, struct progress *pg, double *seconds)
{
    uint64_t total = 0, done = 0;
    for (uint32_t i = 0; i < s->admitted; i++)
        total += s->req_len[i];
    uint32_t *ids = malloc(s->admitted * sizeof(*ids));
    uint32_t *lens = malloc(s->admitted * sizeof(*lens));
    if (!ids || !lens) {
        free(ids);
        free(lens);
        return DCP_ENOMEM;
    }
    const double t0 = cli_now();
    int err = DCP_OK;
    while (done < total && !err) {
        uint32_t n = 0, budget = s->info.max_step_tokens;
        for (uint32_t i = 0; i < s->admitted && budget; i++) {
            const uint64_t have = dcp_seq_length(s->engine, s->seq[i]);
            if (have >= s->req_len[i])
                continue;
            const uint32_t take = (uint32_t)DCP_CLI_MIN(s->req_len[i] - have, (uint64_t)budget);
            if ((err = dcp_seq_extend(s->engine, s->seq[i], take)))
                break;
            ids[n] = s->seq[i];
            lens[n++] = take;
            budget -= take;
            done += take;
        }
        if (err)
            break;
        const struct dcp_batch b = {.num_seqs = n, .seq_ids = ids, .q_lens = lens};
        s->step_tokens = s->info.max_step_tokens - budget;
        if (!(err = dcp_engine_begin_step(s->engine, &b)))
            err = run_step(s, PHASE_PREFILL, false);
        progress_update(pg, done, total);
    }
    *seconds = cli_now() - t0;
    free(ids);
    free(lens);
    return err;
}

static int decode(struct run_setup *s, uint32_t steps, struct progress *pg, struct layout_result *res)
{
    const uint32_t q_len = s->q_len;
    uint32_t *lens = malloc(s->admitted * sizeof(*lens));
    double *times = malloc(steps * sizeof(*times));
    if (!lens || !times) {
        free(lens);
        free(times);
        return DCP_ENOMEM;
    }
    for (uint32_t i = 0; i < s->admitted; i++)
        lens[i] = q_len;
    int err = DCP_OK;
    double total = 0;
    for (uint32_t step = 0; step < steps && !err; step++) {
        /* Sample the first and the last step for the correctness check. */
        const bool check = s->check && (step == 0 || step == steps - 1);
        for (uint32_t i = 0; i < s->admitted && !err; i++)
            err = dcp_seq_extend(s->engine, s->seq[i], q_len);
        const struct dcp_batch b = {.num_seqs = s->admitted, .seq_ids = s->seq, .q_lens = lens};
        s->step_tokens = s->admitted * q_len;
        const double t0 = cli_now();
        if (!err)
            err = dcp_engine_begin_step(s->engine, &b);
        if (!err)
            err = run_step(s, PHASE_DECODE, check);
        times[step] = cli_now() - t0;
        total += times[step];
        if (!err && check)
            err = run_check_outputs(s, &res->check);
        progress_update(pg, step + 1, steps);
    }
    res->steps = steps;
    if (!err) {
        res->median_step = run_percentile(times, steps, 0.5);
        res->p99_step = run_percentile(times, steps, 0.99);
        res->tokens_per_second = total > 0 ? (double)s->admitted * q_len * steps / total : 0;
    }
    free(lens);
    free(times);
    return err;
}

static int run_layout(const dcp_deployment *dep, const struct run_opts *o, uint32_t dcp,
                      const struct run_requests *reqs, struct progress *pg, struct layout_result *res)
{
    memset(res, 0, sizeof(*res));
    res->dcp = dcp;
    char name[CLI_LAYOUT_NAME_LEN];
    struct run_setup s;
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    const uint32_t steps = o->steps ? o->steps : cfg->workload.decode_steps;
    int err = run_setup_create(&s, dep, dcp, o->exec.layers, (double)o->exec.kv_mb * 1e6, reqs, steps,
                               PREFILL_STEP_TOKENS, o->exec.check);
    if (err) {
        fprintf(stderr, "dcp-run run: %s: %s: %s\n", cli_layout_name(name, dcp), dcp_strerror(err),
                dcp_last_error());
        cli_hint_kv_mb("run", err, cfg, o->exec.kv_mb);
        return err;
    }
    snprintf(res->backend, sizeof(res->backend), "%s (%s)", s.info.backend, s.info.backend_detail);
    res->wire = s.info.comm_dtype;
    res->comm = s.info.comm;
    snprintf(res->notice, sizeof(res->notice), "%s", s.info.backend_notice);
    snprintf(res->libraries, sizeof(res->libraries), "%s", s.info.backend_libraries);
    res->offered = reqs->count;
    res->admitted = s.admitted;
    res->num_blocks = s.info.num_blocks;
    res->page_bytes = (double)s.info.kv_bytes_per_rank / (double)s.info.num_blocks;
    char label[64];
    snprintf(label, sizeof(label), "prefill %s", dcp == 1 ? "TP baseline" : "DCP");
    progress_begin(pg, label);
    err = prefill(&s, pg, &res->prefill_seconds);
    if (!err) {
        snprintf(label, sizeof(label), "decode %s", dcp == 1 ? "TP baseline" : "DCP");
        progress_begin(pg, label);
        err = decode(&s, steps, pg, res);
    }
    progress_end(pg);
    if (err)
        fprintf(stderr, "dcp-run run: %s: %s: %s\n", cli_layout_name(name, dcp), dcp_strerror(err),
                dcp_last_error());
    res->blocks_used = s.info.num_blocks - dcp_engine_free_blocks(s.engine);
    for (uint32_t i = 0; i < s.admitted; i++)
        res->context_tokens += dcp_seq_length(s.engine, s.seq[i]);
    res->ok = !err && (!o->exec.check || res->check.pass);
    run_setup_destroy(&s);
    return err;
}

/* ---- output ---------------------------------------------------------------- */

static void print_text(const struct dcp_config *cfg, const char *path, const struct run_requests *reqs,
                       const struct layout_result *r, int n)
{
    printf("dcp-run run: %s\n", path);
    printf("model %s (%s, %u layers, %u query heads, kv %s) on %u x %s, tp %u\n", cfg->model.name,
           dcp_attention_kind_name(cfg->model.attention), cfg->model.num_layers, cfg->model.num_q_heads,
           dcp_dtype_name(cfg->model.kv_dtype), cfg->parallel.tp, cfg->hardware.gpu, cfg->parallel.tp);
    for (int i = 0; i < n; i++)
        if (i == 0 || strcmp(r[i].backend, r[0].backend))
            printf("backend%s: %s\n", n > 1 && strcmp(r[n - 1].backend, r[0].backend)
                                           ? (r[i].dcp == 1 ? " (TP baseline)" : " (DCP)") : "",
                   r[i].backend);
    /* The driver and NCCL files the CUDA backend loaded (one line per layout if they differ). */
    const bool libs_differ = n > 1 && strcmp(r[n - 1].libraries, r[0].libraries);
    for (int i = 0; i < n; i++)
        if (r[i].libraries[0] && (i == 0 || libs_differ))
            printf("loaded%s: %s\n", libs_differ ? (r[i].dcp == 1 ? " (TP baseline)" : " (DCP)") : "",
                   r[i].libraries);
    if (r[0].notice[0])
        printf("note: %s\n", r[0].notice);
    printf("requests offered: %u (%s), decode steps %u, q_len %u\n\n", reqs->count, reqs->describe,
           r[0].steps, cfg->workload.q_len);
    printf("%-30s", "");
    for (int i = 0; i < n; i++) {
        char h[48];
        if (r[i].dcp == 1)
            snprintf(h, sizeof(h), "TP baseline (dcp=1)");
        else
            snprintf(h, sizeof(h), "DCP (dcp=%u, %s)", r[i].dcp, dcp_comm_scheme_name(r[i].comm));
        printf("%24s", h);
    }
    printf("\n");
    char cell[64];
#define ROW(label, ...)                                          \
    do {                                                         \
        printf("%-30s", label);                                  \
        for (int i = 0; i < n; i++) {                            \
            snprintf(cell, sizeof(cell), __VA_ARGS__);           \
            printf("%24s", cell);                                \
        }                                                        \
        printf("\n");                                            \
    } while (0)
    char n1[CLI_FMT_LEN], n2[CLI_FMT_LEN];
    ROW("concurrency reached", "%u of %u", r[i].admitted, r[i].offered);
    ROW("context tokens held", "%s", cli_fmt_count(n1, r[i].context_tokens));
    ROW("KV blocks used per rank", "%s of %s", cli_fmt_count(n1, r[i].blocks_used),
        cli_fmt_count(n2, r[i].num_blocks));
    ROW("KV memory used per rank", "%.1f of %.1f MB", r[i].blocks_used * r[i].page_bytes / 1e6,
        r[i].num_blocks * r[i].page_bytes / 1e6);
    ROW("prefill (append path)", "%.2f s", r[i].prefill_seconds);
    ROW("decode tokens/s", "%.1f", r[i].tokens_per_second);
    ROW("step latency median", "%.2f ms", r[i].median_step * 1e3);
    ROW("step latency p99", "%.2f ms", r[i].p99_step * 1e3);
    ROW("correctness: max rel err", "%.1e %s", r[i].check.max_rel_err,
        !r[i].check.rows ? "(off)" : r[i].check.pass ? "ok" : "FAIL");
    ROW("correctness: max |dLSE|", "%.1e", r[i].check.max_lse_err);
    ROW("correctness: wire dtype", "%s", r[i].dcp > 1 ? dcp_dtype_name(r[i].wire) : "none (no exchange)");
    ROW("rows checked", "%llu", (unsigned long long)r[i].check.rows);
#undef ROW
    if (n == 2 && r[0].admitted > 0)
        printf("\nDCP holds %.2fx the baseline's concurrency in the same per-rank KV budget "
               "(%.2fx the decode tokens/s on this backend).\n",
               (double)r[1].admitted / r[0].admitted,
               r[0].tokens_per_second > 0 ? r[1].tokens_per_second / r[0].tokens_per_second : 0.0);
    printf("Step latency covers KV append and attention over all layers, synthetic Q/K/V generation\n"
           "included; correctness compares sampled outputs with float64 dense attention (tolerance %.1e).\n",
           run_check_tolerance(cfg));
}

static void print_json(const struct dcp_config *cfg, const char *path, const struct run_requests *reqs,
                       const struct layout_result *r, int n)
{
    struct json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_kv_string(&w, "schema", RUN_JSON_SCHEMA);
    json_kv_string(&w, "deployment", path);
    json_kv_string(&w, "model", cfg->model.name);
    json_kv_uint(&w, "tp", cfg->parallel.tp);
    json_kv_string(&w, "comm", dcp_comm_scheme_name(cfg->parallel.comm));
    json_kv_uint(&w, "requests_offered", reqs->count);
    json_kv_uint(&w, "q_len", cfg->workload.q_len);
    json_kv_number(&w, "check_tolerance", run_check_tolerance(cfg));
    json_key(&w, "layouts");
    json_begin_array(&w);
    for (int i = 0; i < n; i++) {
        json_begin_object(&w);
        json_kv_string(&w, "name", r[i].dcp == 1 ? "tp_baseline" : "dcp");
        json_kv_uint(&w, "dcp", r[i].dcp);
        json_kv_string(&w, "comm", dcp_comm_scheme_name(r[i].comm));
        json_kv_string(&w, "backend", r[i].backend);
        json_kv_string(&w, "backend_notice", r[i].notice);
        json_kv_string(&w, "backend_libraries", r[i].libraries);
        json_kv_uint(&w, "concurrency", r[i].admitted);
        json_kv_uint(&w, "context_tokens", r[i].context_tokens);
        json_kv_uint(&w, "kv_blocks_used_per_rank", r[i].blocks_used);
        json_kv_uint(&w, "kv_blocks_per_rank", r[i].num_blocks);
        json_kv_number(&w, "kv_bytes_used_per_rank", r[i].blocks_used * r[i].page_bytes);
        json_kv_number(&w, "kv_bytes_per_rank", r[i].num_blocks * r[i].page_bytes);
        json_kv_number(&w, "prefill_seconds", r[i].prefill_seconds);
        json_kv_uint(&w, "decode_steps", r[i].steps);
        json_kv_number(&w, "decode_tokens_per_second", r[i].tokens_per_second);
        json_kv_number(&w, "step_latency_median_seconds", r[i].median_step);
        json_kv_number(&w, "step_latency_p99_seconds", r[i].p99_step);
        json_key(&w, "check");
        json_begin_object(&w);
        json_kv_uint(&w, "rows", r[i].check.rows);
        json_kv_number(&w, "max_rel_err", r[i].check.max_rel_err);
        json_kv_number(&w, "max_lse_abs_err", r[i].check.max_lse_err);
        json_kv_bool(&w, "pass", r[i].check.pass);
        json_kv_string(&w, "wire_dtype", r[i].dcp > 1 ? dcp_dtype_name(r[i].wire) : "none");
        json_end_object(&w);
        json_kv_bool(&w, "ok", r[i].ok);
        json_end_object(&w);
    }
    json_end_array(&w);
    if (n == 2 && r[0].admitted)
        json_kv_number(&w, "concurrency_gain", (double)r[1].admitted / r[0].admitted);
    json_end_object(&w);
    json_finish(&w);
}

#define RUN_OPT(field) offsetof(struct run_opts, field)
static const struct cli_option run_options[] = {
    CLI_OPTION_JSON(struct run_opts, json),
    {"--steps", CLI_ARG_U32, "N", "decode steps (default workload.decode_steps)", 1, 1e6, .offset = RUN_OPT(steps)},
    {"--requests", CLI_ARG_U32, "N", "requests offered (default workload.requests)", 1, 1e6,
     .offset = RUN_OPT(requests)},
    CLI_EXEC_OPTIONS(struct run_opts, exec, ""),
    CLI_OPTION_QUIET(struct run_opts, quiet),
};

static const struct cli_spec run_spec = {
    .command = "run",
    .usage = "[FILE] [options]",
    .description =
        "Runs the deployment: the TP baseline (dcp=1, KV replicated) and the configured DCP in the\n"
        "same per-rank KV budget. Requests (workload.context_lengths, cycled, or workload.trace)\n"
        "are admitted while their blocks fit; their KV is filled through the append path with\n"
        "seeded synthetic K/V; then decode steps run over all layers. Prints the concurrency each\n"
        "layout reaches, KV memory used, decode tokens/s, step latency, and a correctness check of\n"
        "sampled outputs against float64 dense attention.\n",
    CLI_SPEC_DEPLOYMENT("FILE", struct run_opts, file),
    CLI_SPEC_OPTIONS(run_options),
    .epilogue = "exit status: 0 ok, 1 failure (including a failed correctness check), 2 bad usage\n",
};

static int parse(int argc, char **argv, struct run_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->exec.check = true;
    int rc = cli_parse(&run_spec, argc, argv, o);
    if (!rc && !o->file)
        o->file = cli_default_deployment();
    return rc;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    dcp_deployment *dep = NULL;
    if ((rc = cli_open_exec_deployment("run", o.file, &o.exec, &dep)))
        return rc;
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    struct run_requests reqs;
    if (run_requests_load(&reqs, dep, o.requests)) {
        dcp_deployment_destroy(&dep);
        return CLI_EXIT_FAIL;
    }
    struct progress pg;
    progress_init(&pg, o.quiet);
    struct layout_result res[2];
    const uint32_t layouts[2] = {1, cfg->parallel.dcp};
    const int n = cfg->parallel.dcp > 1 ? 2 : 1;
    int err = DCP_OK;
    for (int i = 0; i < n && !err; i++)
        err = run_layout(dep, &o, layouts[i], &reqs, &pg, &res[i]);
    if (!err) {
        if (o.json)
            print_json(cfg, o.file, &reqs, res, n);
        else
            print_text(cfg, o.file, &reqs, res, n);
    }
    bool ok = !err;
    for (int i = 0; i < n && ok; i++)
        ok = res[i].ok;
    if (!err && !ok)
        fprintf(stderr, "dcp-run run: correctness check FAILED (see the table)\n");
    run_requests_free(&reqs);
    dcp_deployment_destroy(&dep);
    return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
