/*
 * cmd_bench.c: `dcp-run bench` -- how fast decode attention streams the KV cache
 * compared with what the machine can do, measured side by side.
 *
 * For each case (GQA, MLA) and context length: one rank, a batch of sequences
 * large enough that the KV cache far exceeds the CPU caches, filled through the
 * append path. Each repetition times one attention step, then the yardsticks
 * (bench_ref.h), alternately; medians are reported. On the host backend the
 * yardsticks are a read-only pass over the same bytes of the KV arena (what a
 * kernel that reads its input once can reach) and an fp32 FMA loop in the widest
 * ISA of the CPU, both on the backend's threads. Other backends get a device copy
 * of the same bytes, counted as the 2N bytes it moves.
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_ref.h"
#include "cli.h"
#include "progress.h"
#include "run_common.h"
#include "dcp_build_config.h"

/* KV bytes per case: well above the last-level cache of common CPUs. */
#define BENCH_TARGET_KV_BYTES (256ull << 20)
#define BENCH_MAX_BATCH 256u

struct bench_case {
    const char *name;
    enum dcp_attention_kind kind;
    uint32_t q_heads;   /* query heads attending (all share one KV head for GQA/MLA here) */
    uint32_t kv_heads;
    uint32_t head_dim;  /* GQA */
};

static const struct bench_case cases[] = {
    {"gqa", DCP_ATTN_GQA, 8, 1, 128},   /* Llama-3.1-70B at tp 8: 8 query heads share one KV head */
    {"mla", DCP_ATTN_MLA, 16, 1, 0},    /* DeepSeek-V3 at tp 8 without DCP: 16 heads per rank */
    {"mla", DCP_ATTN_MLA, 128, 1, 0},   /* ... with DCP 8: 8 x 16 gathered heads */
};

/* Context lengths of --contexts. */
#define BENCH_MAX_CONTEXTS 8
struct bench_contexts {
    uint64_t len[BENCH_MAX_CONTEXTS];
    uint32_t count;
};

struct bench_opts {
    bool json, quiet;
    uint32_t repeat, threads;
    struct cli_backend_opt backend;
    enum dcp_dtype dtype;
    struct bench_contexts contexts;
};

struct bench_row {
    const char *name;
    uint32_t heads;
    uint64_t context, batch;
    double kv_bytes;
    double attn_s;           /* median */
    bool read_ref;           /* the bandwidth yardstick is a read-only pass (host), else a copy */
    double ref_gbps;         /* its median rate: bytes read, or bytes moved (2N) by the copy */
    double attn_gbps, ratio; /* ratio = attn_gbps / ref_gbps */
    double gflops;           /* attention arithmetic rate */
    double fma_gflops;       /* median of the FMA loop, host only (0 otherwise) */
    char backend[160];
    char libraries[512];     /* driver and NCCL files the CUDA backend loaded, or "" */
    char error[400];         /* why the case failed, or "" */
};

/* ---- one case ------------------------------------------------------------- */

static int make_deployment(const struct bench_case *c, const struct bench_opts *o, dcp_deployment **dep)
{
    struct dcp_config cfg;
    dcp_config_defaults(&cfg);
    cfg.model.name = c->name;
    cfg.model.attention = c->kind;
    cfg.model.num_layers = 1;
    cfg.model.num_q_heads = c->q_heads;
    cfg.model.num_kv_heads = c->kv_heads;
    cfg.model.head_dim = c->head_dim;
    cfg.model.kv_dtype = o->dtype;
    cfg.hardware.gpu = "bench";
    cfg.hardware.memory_bytes = 1e12;
    cfg.hardware.hbm_bandwidth = 1e12;
    cfg.hardware.link_bandwidth = 1e11;
    cfg.parallel.tp = 1;
    cfg.parallel.dcp = 1;
    cfg.memory.reserve_bytes = 0;
    cfg.workload.context_lengths[0] = o->contexts.len[0];
    cfg.workload.num_context_lengths = 1;
    cfg.runtime.host.threads = o->threads;
    if (o->backend.given)
        cfg.runtime.backend = o->backend.kind;
    dcp_diag *diag = NULL;
    int err = dcp_diag_create(&diag);
    if (!err)
        err = dcp_deployment_from_config(&cfg, diag, dep);
    dcp_diag_print(diag, stderr);
    dcp_diag_destroy(&diag);
    return err;
}

struct bench_state {
    dcp_engine *engine;
    dcp_rank *rank;
    void *q, *k, *v, *out, *lse, *copy_dst;
    void *arena;
    size_t arena_bytes;
    uint32_t batch;
    uint32_t step_tokens;
    struct dcp_engine_info info;
    bool mla;
    bool host;        /* host backend: KV in host memory, yardsticks on the CPU */
    uint32_t threads; /* the host backend's worker threads */
};

static int bench_fill(dcp_rank *rank, void *arg)
{
    struct bench_state *b = arg;
    struct dcp_synth_desc d = {
        .seed = 11, .row_keys = dcp_rank_step_token_keys(rank), .rows = b->step_tokens,
        .heads = b->info.kv_heads_per_rank, .dim = b->info.qk_dim, .amplitude = 1.0f,
    };
    int err = dcp_rank_fill_synthetic(rank, b->k, &d);
    if (!err && !b->mla) {
        d.seed = 12;
        d.dim = b->info.v_dim;
        err = dcp_rank_fill_synthetic(rank, b->v, &d);
    }
    return err ? err : dcp_rank_append_kv(rank, 0, b->k, b->mla ? NULL : b->v);
}

/* Creates `batch` sequences of `context` tokens (minus the decode token) filled through append. */
static int bench_prefill(struct bench_state *b, uint64_t context, uint32_t chunk)
{
    uint32_t *ids = calloc(b->batch, sizeof(*ids)), *lens = calloc(b->batch, sizeof(*lens));
    int err = ids && lens ? DCP_OK : DCP_ENOMEM;
    for (uint32_t i = 0; i < b->batch && !err; i++)
        err = dcp_seq_create(b->engine, &ids[i]);
    for (uint32_t i = 0; i < b->batch && !err; i++) {
        for (uint64_t done = 0; done < context - 1 && !err;) {
            const uint32_t n = (uint32_t)DCP_CLI_MIN((uint64_t)chunk, context - 1 - done);
            err = dcp_seq_extend(b->engine, ids[i], n);
            const struct dcp_batch one = {.num_seqs = 1, .seq_ids = &ids[i], .q_lens = &n};
            if (!err)
                err = dcp_engine_begin_step(b->engine, &one);
            b->step_tokens = n;
            if (!err)
                err = dcp_engine_run(b->engine, bench_fill, b);
            done += n;
        }
    }
    /* The decode step: one new token per sequence. */
    for (uint32_t i = 0; i < b->batch && !err; i++) {
        lens[i] = 1;
        err = dcp_seq_extend(b->engine, ids[i], 1);
    }
    const struct dcp_batch all = {.num_seqs = b->batch, .seq_ids = ids, .q_lens = lens};
    if (!err)
        err = dcp_engine_begin_step(b->engine, &all);
    b->step_tokens = b->batch;
    if (!err)
        err = dcp_engine_run(b->engine, bench_fill, b);
    free(ids);
    free(lens);
    return err;
}

static int time_attention(struct bench_state *b, double *seconds)
{
    const double t0 = cli_now();
    int err = dcp_rank_attention(b->rank, 0, b->q, b->out, b->lse);
    if (!err)
        err = dcp_rank_synchronize(b->rank);
    *seconds = cli_now() - t0;
    return err;
}

/* FMA loop steps per thread per sample: about 10 ms of AVX-512 work at 3 GHz. */
#define BENCH_FMA_ITERATIONS (4ull << 20)

/* The bandwidth yardstick over `bytes` bytes of the KV arena: GB/s of a read-only
 * pass on the host backend's threads, or of a device copy counting 2N bytes moved. */
static int time_bandwidth(struct bench_state *b, size_t bytes, double *gbps)
{
    if (b->host) {
        struct bench_ref_sample s;
        if (bench_ref_stream(b->arena, bytes, b->threads, &s))
            return DCP_ENOMEM;
        *gbps = s.amount / s.seconds / 1e9;
        return DCP_OK;
    }
    const double t0 = cli_now();
    int err = dcp_rank_copy(b->rank, b->copy_dst, b->arena, bytes);
    if (!err)
        err = dcp_rank_synchronize(b->rank);
    *gbps = 2.0 * (double)bytes / (cli_now() - t0) / 1e9;
    return err;
}

static int time_fma(struct bench_state *b, double *gflops)
{
    struct bench_ref_sample s;
    if (bench_ref_fma(BENCH_FMA_ITERATIONS, b->threads, &s))
        return DCP_ENOMEM;
    *gflops = s.amount / s.seconds / 1e9;
    return DCP_OK;
}

static int run_case(const struct bench_case *c, uint64_t context, const struct bench_opts *o,
                    struct progress *pg, struct bench_row *row)
{
    row->name = c->name;
    row->heads = c->q_heads;
    row->context = context;
    dcp_deployment *dep = NULL;
    int err = make_deployment(c, o, &dep);
    if (err) {
        snprintf(row->error, sizeof(row->error), "%s: the case's deployment is invalid", dcp_strerror(err));
        return err;
    }
    const uint64_t bytes_per_token = dcp_model_kv_bytes_per_token_layer(&dcp_deployment_config(dep)->model);
    const uint64_t per_seq = bytes_per_token * context;
    const uint32_t batch = (uint32_t)DCP_CLI_MAX(1ull, DCP_CLI_MIN((unsigned long long)BENCH_MAX_BATCH,
                                                                  (BENCH_TARGET_KV_BYTES + per_seq - 1) / per_seq));
    const uint32_t chunk = 4096;
    struct dcp_engine_params p;
    dcp_engine_default_params(&p);
    p.deployment = dep;
    p.max_batch = batch;
    p.max_seqs = batch;
    p.max_context = context;
    p.max_query_tokens = batch;
    p.max_step_tokens = DCP_CLI_MAX(chunk, batch);
    /* A little more than the sequences need, in whole 64-token pages. */
    p.kv_budget_bytes = (double)bytes_per_token * 64.0 * (double)(batch * ((context + 63) / 64) + 1);
    struct bench_state b = {.batch = batch, .mla = c->kind == DCP_ATTN_MLA};
    err = dcp_engine_create(&p, &b.engine);
    if (err)
        goto out;
    dcp_engine_get_info(b.engine, &b.info);
    b.host = !strcmp(b.info.backend, "host");
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    b.threads = o->threads ? o->threads : (uint32_t)(cpus > 0 ? cpus : 1);
    b.rank = dcp_engine_rank(b.engine, 0);
    dcp_rank_kv_arena(b.rank, &b.arena, &b.arena_bytes);
    const size_t f = sizeof(float), Ts = p.max_step_tokens;
    if ((err = dcp_rank_alloc(b.rank, batch * b.info.q_heads_per_rank * b.info.qk_dim * f, &b.q)) ||
        (err = dcp_rank_alloc(b.rank, Ts * b.info.qk_dim * f, &b.k)) ||
        (!b.mla && (err = dcp_rank_alloc(b.rank, Ts * b.info.v_dim * f, &b.v))) ||
        (err = dcp_rank_alloc(b.rank, batch * b.info.q_heads_per_rank * b.info.v_dim * f, &b.out)) ||
        (err = dcp_rank_alloc(b.rank, batch * b.info.q_heads_per_rank * f, &b.lse)) ||
        (!b.host && (err = dcp_rank_alloc(b.rank, b.arena_bytes, &b.copy_dst))))
        goto out;
    err = bench_prefill(&b, context, chunk);
    const struct dcp_synth_desc qd = {
        .seed = 13, .key_base = 0, .rows = batch, .heads = b.info.q_heads_per_rank,
        .dim = b.info.qk_dim, .amplitude = 1.0f,
    };
    if (!err)
        err = dcp_rank_fill_synthetic(b.rank, b.q, &qd);
    const double kv_bytes = (double)bytes_per_token * (double)context * batch;
    const size_t ref_bytes = (size_t)DCP_CLI_MIN((double)b.arena_bytes, kv_bytes);
    const uint32_t reps = o->repeat;
    double *ta = calloc(reps, sizeof(double)), *tr = calloc(reps, sizeof(double)),
           *tf = calloc(reps, sizeof(double));
    if (!ta || !tr || !tf)
        err = DCP_ENOMEM;
    /* One untimed round warms every path, then they alternate. */
    double warm;
    if (!err)
        err = time_attention(&b, &warm);
    if (!err)
        err = time_bandwidth(&b, ref_bytes, &warm);
    for (uint32_t i = 0; i < reps && !err; i++) {
        err = time_attention(&b, &ta[i]);
        if (!err)
            err = time_bandwidth(&b, ref_bytes, &tr[i]);
        if (!err && b.host)
            err = time_fma(&b, &tf[i]);
        progress_update(pg, i + 1, reps);
    }
    if (!err) {
        row->batch = batch;
        row->kv_bytes = kv_bytes;
        row->attn_s = run_percentile(ta, reps, 0.5);
        row->read_ref = b.host;
        row->ref_gbps = run_percentile(tr, reps, 0.5);
        row->attn_gbps = kv_bytes / row->attn_s / 1e9;
        row->ratio = row->attn_gbps / row->ref_gbps;
        const double flops_per_token_head = 2.0 * b.info.qk_dim + 2.0 * b.info.v_dim;
        row->gflops = flops_per_token_head * (double)context * batch * c->q_heads / row->attn_s / 1e9;
        row->fma_gflops = b.host ? run_percentile(tf, reps, 0.5) : 0;
        snprintf(row->backend, sizeof(row->backend), "%s (%s)", b.info.backend, b.info.backend_detail);
        snprintf(row->libraries, sizeof(row->libraries), "%s", b.info.backend_libraries);
    }
    free(ta);
    free(tr);
    free(tf);
out:
    if (err) {
        snprintf(row->error, sizeof(row->error), "%s: %s", dcp_strerror(err), dcp_last_error());
        fprintf(stderr, "dcp-run bench: %s h=%u L=%llu: %s\n", c->name, c->q_heads, (unsigned long long)context,
                row->error);
    }
    if (b.rank) {
        dcp_rank_free(b.rank, b.q);
        dcp_rank_free(b.rank, b.k);
        dcp_rank_free(b.rank, b.v);
        dcp_rank_free(b.rank, b.out);
        dcp_rank_free(b.rank, b.lse);
        dcp_rank_free(b.rank, b.copy_dst);
    }
    dcp_engine_destroy(&b.engine);
    dcp_deployment_destroy(&dep);
    return err;
}

/* ---- output ------------------------------------------------------------------------ */

/* The first case that ran (its backend heads the output), or NULL if every case failed. */
static const struct bench_row *first_ok(const struct bench_row *rows, int n)
{
    for (int i = 0; i < n; i++)
        if (!rows[i].error[0])
            return &rows[i];
    return NULL;
}

/* Prints the table; a failed case gets its row with the error. Prints nothing if no
 * case ran (the errors are on stderr): never an empty table. */
static void print_text(const struct bench_row *rows, int n, const struct bench_opts *o)
{
    const struct bench_row *ok = first_ok(rows, n);
    if (!ok)
        return;
    const bool host = ok->read_ref;
    printf("dcp-run bench: decode attention vs %s, one rank, kv %s\n",
           host ? "a read-only pass over the same bytes and an FMA loop" : "a copy of the same bytes",
           dcp_dtype_name(o->dtype));
    printf("backend: %s; medians of %u alternating runs%s%s\n", ok->backend, o->repeat,
           host ? "; FMA loop: " : "", host ? bench_ref_fma_isa() : "");
    if (ok->libraries[0])
        printf("loaded: %s\n", ok->libraries);
    printf("\n");
    printf("%-4s %5s %8s %6s %9s %9s %10s %10s %6s %9s %11s %6s\n", "kind", "heads", "context", "batch",
           "KV MB", "attn ms", "attn GB/s", host ? "read GB/s" : "copy GB/s", "ratio", "GFLOP/s",
           "FMA GFLOP/s", "ratio");
    for (int i = 0; i < n; i++) {
        const struct bench_row *r = &rows[i];
        if (r->error[0]) {
            printf("%-4s %5u %8llu FAILED: %s\n", r->name, r->heads, (unsigned long long)r->context, r->error);
            continue;
        }
        printf("%-4s %5u %8llu %6llu %9.1f %9.2f %10.2f %10.2f %6.2f %9.1f", r->name, r->heads,
               (unsigned long long)r->context, (unsigned long long)r->batch, r->kv_bytes / 1e6,
               r->attn_s * 1e3, r->attn_gbps, r->ref_gbps, r->ratio, r->gflops);
        if (r->fma_gflops > 0)
            printf(" %11.1f %6.2f\n", r->fma_gflops, r->gflops / r->fma_gflops);
        else
            printf(" %11s %6s\n", "-", "-");
    }
    if (host)
        printf("\nattn GB/s: KV bytes the step reads / its time; read GB/s: the same bytes of the KV arena\n"
               "read once (a read-only pass, same threads); ratio = attn / read. GFLOP/s counts 2*(qk+v)\n"
               "flops per token per head; FMA GFLOP/s: an fp32 FMA loop in the widest ISA of this CPU on\n"
               "the same threads; ratio = GFLOP/s / FMA GFLOP/s.\n");
    else
        printf("\nattn GB/s: KV bytes the step reads / its time; copy GB/s: a device copy of the same\n"
               "bytes, counted as the 2N bytes it moves (read + write); ratio = attn / copy.\n");
}

static void print_json(const struct bench_row *rows, int n, const struct bench_opts *o)
{
    struct json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_kv_string(&w, "kv_dtype", dcp_dtype_name(o->dtype));
    json_kv_uint(&w, "repeat", o->repeat);
    json_key(&w, "results");
    json_begin_array(&w);
    for (int i = 0; i < n; i++) {
        const struct bench_row *r = &rows[i];
        json_begin_object(&w);
        json_kv_string(&w, "kind", r->name);
        json_kv_uint(&w, "heads", r->heads);
        json_kv_uint(&w, "context", r->context);
        json_kv_bool(&w, "ok", !r->error[0]);
        if (r->error[0]) {
            json_kv_string(&w, "error", r->error);
            json_end_object(&w);
            continue;
        }
        json_kv_uint(&w, "batch", r->batch);
        json_kv_number(&w, "kv_bytes", r->kv_bytes);
        json_kv_number(&w, "attention_seconds", r->attn_s);
        json_kv_number(&w, "attention_gbps", r->attn_gbps);
        /* "read": a read-only pass, bytes read; "copy": a device copy, bytes moved (2N). */
        json_kv_string(&w, "bandwidth_reference", r->read_ref ? "read" : "copy");
        json_kv_number(&w, "reference_gbps", r->ref_gbps);
        json_kv_number(&w, "bandwidth_ratio", r->ratio);
        json_kv_number(&w, "attention_gflops", r->gflops);
        if (r->fma_gflops > 0) {
            json_kv_string(&w, "fma_isa", bench_ref_fma_isa());
            json_kv_number(&w, "fma_gflops", r->fma_gflops);
            json_kv_number(&w, "flops_ratio", r->gflops / r->fma_gflops);
        }
        json_kv_string(&w, "backend", r->backend);
        json_kv_string(&w, "backend_libraries", r->libraries);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
}

static bool parse_dtype(const char *s, void *dest, char *why, size_t why_size)
{
    if (dcp_dtype_from_name(s, dest) == DCP_OK)
        return true;
    const char *names = strstr(dcp_last_error(), "one of "); /* the library lists every dtype */
    snprintf(why, why_size, "%s", names ? names : "a KV dtype name");
    return false;
}

/* Context lengths: 2 up to 2^40 tokens, at most BENCH_MAX_CONTEXTS of them. */
#define BENCH_MAX_CONTEXT_LEN (1ull << 40)

static bool parse_contexts(const char *s, void *dest, char *why, size_t why_size)
{
    struct bench_contexts c = {.count = 0};
    const char *p = s;
    for (;;) {
        const size_t n = strcspn(p, ",");
        char tok[32];
        unsigned long long v = 0;
        if (c.count == BENCH_MAX_CONTEXTS || n == 0 || n >= sizeof(tok)) {
            snprintf(why, why_size, "1 to %d comma-separated lengths in 2..%llu (k, M suffixes allowed)",
                     BENCH_MAX_CONTEXTS, BENCH_MAX_CONTEXT_LEN);
            return false;
        }
        memcpy(tok, p, n);
        tok[n] = '\0';
        if (!cli_parse_u64(tok, &v) || v < 2 || v > BENCH_MAX_CONTEXT_LEN) {
            snprintf(why, why_size, "comma-separated lengths in 2..%llu (k, M suffixes allowed); '%s' is not one",
                     BENCH_MAX_CONTEXT_LEN, tok);
            return false;
        }
        c.len[c.count++] = v;
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    *(struct bench_contexts *)dest = c;
    return true;
}

#define BENCH_OPT(field) offsetof(struct bench_opts, field)
static const struct cli_option bench_options[] = {
    {"--contexts", CLI_ARG_CUSTOM, "L,L,..", "context lengths (default 4k,16k,64k; k/M suffixes)",
     .offset = BENCH_OPT(contexts), .parse = parse_contexts},
    {"--dtype", CLI_ARG_CUSTOM, "D", "KV dtype: bf16 (default), fp16, fp32, fp8_e4m3", .offset = BENCH_OPT(dtype),
     .parse = parse_dtype},
    {"--repeat", CLI_ARG_U32, "N", "timed runs per case (default 5; medians are reported)", 1, 1000,
     .offset = BENCH_OPT(repeat)},
    {"--threads", CLI_ARG_U32, "N", "host worker threads (default 0: all CPUs)", 0, 1024,
     .offset = BENCH_OPT(threads)},
    CLI_OPTION_BACKEND(struct bench_opts, backend, "auto (default), host or cuda"),
    CLI_OPTION_JSON(struct bench_opts, json),
    CLI_OPTION_QUIET(struct bench_opts, quiet),
};

static const struct cli_spec bench_spec = {
    .command = "bench",
    .usage = "[options]",
    .description =
        "Measures decode attention's KV streaming rate next to yardsticks run alternately with it\n"
        "(host: a read-only pass over the same bytes and an fp32 FMA loop in the widest ISA of the\n"
        "CPU; cuda: a device copy of the same bytes, counted as 2N bytes moved), for GQA (8 query\n"
        "heads per KV head, head_dim 128) and MLA (576/512, 16 and 128 heads) at several context\n"
        "lengths, on one rank of the selected backend. A case that fails is reported on stderr and\n"
        "in its row; the others still run.\n",
    CLI_SPEC_OPTIONS(bench_options),
    .epilogue = "exit status: 0 ok, 1 a case failed (the others are still reported), 2 bad usage\n",
};

static int parse(int argc, char **argv, struct bench_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->repeat = 5;
    o->dtype = DCP_DTYPE_BF16;
    char why[8];
    parse_contexts("4k,16k,64k", &o->contexts, why, sizeof(why));
    return cli_parse(&bench_spec, argc, argv, o);
}

int cmd_bench(int argc, char **argv)
{
    struct bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    struct progress pg;
    progress_init(&pg, o.quiet);
    struct bench_row rows[3 * BENCH_MAX_CONTEXTS];
    int n = 0, failed = 0;
    /* A failing case is reported and the others still run. */
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        for (uint32_t i = 0; i < o.contexts.count; i++) {
            char label[64];
            snprintf(label, sizeof(label), "bench %s h=%u L=%llu", cases[c].name, cases[c].q_heads,
                     (unsigned long long)o.contexts.len[i]);
            progress_begin(&pg, label);
            memset(&rows[n], 0, sizeof(rows[n]));
            failed += run_case(&cases[c], o.contexts.len[i], &o, &pg, &rows[n]) != DCP_OK;
            n++;
        }
    progress_end(&pg);
    if (o.json)
        print_json(rows, n, &o);
    else
        print_text(rows, n, &o);
    if (failed)
        fprintf(stderr, "dcp-run bench: %d of %d cases failed%s\n", failed, n,
                failed == n && !o.json ? "; no table printed" : " (see their rows)");
    return failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
