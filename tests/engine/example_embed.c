/*
 * example_embed.c: the smallest complete use of libdcp's attention/KV layer by an
 * inference engine, as in docs/embedding.md. It is built and run as a test, so
 * the guide's code keeps working.
 *
 * A GQA model (8 query heads, 2 KV heads, head_dim 64) on tp 4 with dcp 2: each
 * pair of TP ranks shares one KV head and splits every sequence's tokens between
 * them. The "engine" here feeds random Q/K/V; a real one feeds its projections.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dcp/dcp.h>

static const char deployment_yaml[] =
    "model:\n"
    "  name: example-gqa\n"
    "  attention: gqa\n"
    "  layers: 2\n"
    "  query_heads: 8\n"
    "  kv_heads: 2\n"
    "  head_dim: 64\n"
    "hardware:\n"
    "  gpu: cpu\n"
    "  memory_gb: 0.05\n"
    "  hbm_gbps: 20\n"
    "  link_gbps: 10\n"
    "  gpus_per_node: 4\n"
    "parallel:\n"
    "  tp: 4\n"
    "  dcp: 2\n"
    "memory:\n"
    "  reserve_gb: 0\n"
    "  block_size: 16\n"
    "workload:\n"
    "  context_lengths: [1024]\n"
    "runtime:\n"
    "  backend: host\n";

/* Per-rank buffers; with the host backend they are plain host memory. */
struct rank_buffers {
    float *q, *k, *v, *out, *lse;
};

struct step {
    struct dcp_engine_info info;
    struct rank_buffers buf[4];
    uint32_t tokens; /* query tokens of this step (all sequences) */
    bool attend;     /* false: a prefill chunk that only appends */
};

static void fill_random(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
}

/* What every rank's thread does in one step: per layer, append the new tokens'
 * K/V (only the rank that owns a position keeps it), then attention. */
static int rank_step(dcp_rank *rank, void *arg)
{
    struct step *s = arg;
    struct rank_buffers *b = &s->buf[dcp_rank_tp_rank(rank)];
    for (uint32_t layer = 0; layer < s->info.num_layers; layer++) {
        int err = dcp_rank_append_kv(rank, layer, b->k, b->v);
        if (!err && s->attend)
            err = dcp_rank_attention(rank, layer, b->q, b->out, b->lse);
        if (err)
            return err;
    }
    return DCP_OK;
}

int main(void)
{
    dcp_diag *diag = NULL;
    dcp_deployment *dep = NULL;
    dcp_engine *engine = NULL;
    struct step s = {0};
    int err = dcp_diag_create(&diag);
    if (!err)
        err = dcp_deployment_load_string("example.yaml", deployment_yaml, strlen(deployment_yaml), diag, &dep);
    dcp_diag_print(diag, stderr); /* every problem with its line and column */
    if (err)
        goto out;

    struct dcp_engine_params params;
    dcp_engine_default_params(&params);
    params.deployment = dep;
    params.max_batch = 2;
    params.max_query_tokens = 2;    /* decode: one token per sequence */
    params.max_step_tokens = 256;   /* prefill chunks append up to 256 tokens */
    params.max_context = 1024;
    if ((err = dcp_engine_create(&params, &engine)))
        goto out;

    dcp_engine_get_info(engine, &s.info);
    printf("%s backend: tp %u, dcp %u, %u query heads and %u KV head per rank, %u heads after the Q gather\n",
           s.info.backend, s.info.tp, s.info.dcp, s.info.q_heads_per_rank, s.info.kv_heads_per_rank,
           s.info.gathered_heads);
    const size_t T = params.max_step_tokens, D = s.info.qk_dim;
    for (uint32_t r = 0; r < s.info.tp; r++) {
        struct rank_buffers *b = &s.buf[r];
        b->q = calloc(T * s.info.q_heads_per_rank * D, sizeof(float));
        b->k = calloc(T * s.info.kv_heads_per_rank * D, sizeof(float));
        b->v = calloc(T * s.info.kv_heads_per_rank * D, sizeof(float));
        b->out = calloc(T * s.info.q_heads_per_rank * D, sizeof(float));
        b->lse = calloc(T * s.info.q_heads_per_rank, sizeof(float));
        if (!b->q || !b->k || !b->v || !b->out || !b->lse) {
            err = DCP_ENOMEM;
            goto out;
        }
    }

    /* Two requests with 600 and 200 prompt tokens, prefilled in chunks of 256. */
    uint32_t seq[2], remaining[2] = {600, 200};
    for (int i = 0; i < 2 && !err; i++)
        err = dcp_seq_create(engine, &seq[i]);
    while (!err && (remaining[0] || remaining[1])) {
        uint32_t ids[2], lens[2], n = 0;
        s.tokens = 0;
        for (int i = 0; i < 2 && !err; i++) {
            const uint32_t chunk = remaining[i] < 128 ? remaining[i] : 128;
            if (!chunk)
                continue;
            err = dcp_seq_extend(engine, seq[i], chunk); /* reserve the positions */
            ids[n] = seq[i];
            lens[n++] = chunk;
            remaining[i] -= chunk;
            s.tokens += chunk;
        }
        const struct dcp_batch batch = {.num_seqs = n, .seq_ids = ids, .q_lens = lens};
        s.attend = false;
        for (uint32_t r = 0; r < s.info.tp; r++) { /* each TP rank's K/V for its KV heads */
            fill_random(s.buf[r].k, (size_t)s.tokens * s.info.kv_heads_per_rank * D);
            fill_random(s.buf[r].v, (size_t)s.tokens * s.info.kv_heads_per_rank * D);
        }
        if (!err)
            err = dcp_engine_begin_step(engine, &batch);
        if (!err)
            err = dcp_engine_run(engine, rank_step, &s);
    }

    /* Eight decode steps: one new token per request. */
    for (int step = 0; step < 8 && !err; step++) {
        const uint32_t ones[2] = {1, 1};
        for (int i = 0; i < 2 && !err; i++)
            err = dcp_seq_extend(engine, seq[i], 1);
        const struct dcp_batch batch = {.num_seqs = 2, .seq_ids = seq, .q_lens = ones};
        s.tokens = 2;
        s.attend = true;
        for (uint32_t r = 0; r < s.info.tp; r++) {
            fill_random(s.buf[r].q, (size_t)s.tokens * s.info.q_heads_per_rank * D);
            fill_random(s.buf[r].k, (size_t)s.tokens * s.info.kv_heads_per_rank * D);
            fill_random(s.buf[r].v, (size_t)s.tokens * s.info.kv_heads_per_rank * D);
        }
        if (!err)
            err = dcp_engine_begin_step(engine, &batch);
        if (!err)
            err = dcp_engine_run(engine, rank_step, &s);
    }
    if (!err) {
        /* Rank 0's first head, first request: out[token 0][head 0][0..3] and its LSE. */
        printf("after %llu and %llu tokens: out[0][0][0..3] = %.4f %.4f %.4f %.4f, lse = %.4f\n",
               (unsigned long long)dcp_seq_length(engine, seq[0]), (unsigned long long)dcp_seq_length(engine, seq[1]),
               s.buf[0].out[0], s.buf[0].out[1], s.buf[0].out[2], s.buf[0].out[3], s.buf[0].lse[0]);
        if (!isfinite(s.buf[0].lse[0]))
            err = DCP_EINVAL;
    }
out:
    if (err)
        fprintf(stderr, "example: %s: %s\n", dcp_strerror(err), dcp_last_error());
    for (int r = 0; r < 4; r++) {
        free(s.buf[r].q);
        free(s.buf[r].k);
        free(s.buf[r].v);
        free(s.buf[r].out);
        free(s.buf[r].lse);
    }
    dcp_engine_destroy(&engine);
    dcp_deployment_destroy(&dep);
    dcp_diag_destroy(&diag);
    return err ? 1 : 0;
}
