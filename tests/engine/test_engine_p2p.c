/*
 * parallel.comm p2p (one-sided stores into the peers' receive slots, published by an
 * epoch): the results equal a2a's bit for bit, MLA and GQA, dcp 1, 2, 4 and 8, fp32 and
 * 16-bit wires, also while one rank of each group lags behind the others; auto resolves
 * to p2p here and the planner prices p2p's rows as peer writes with their own latency; a
 * rank that never stores makes every peer fail within the comm timeout with an error
 * naming it, and the engine runs again after it. Deliberate bugs of the exchange (the
 * test hook dcp_p2p_test_mutant: an epoch that is not bumped, a store into the wrong
 * slot, an epoch never published) make these checks fail. The wire bytes of p2p equal
 * the planner's in test_engine_wire.c. Host backend (p2p's only backend so far).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dcp/plan.h"
#include "dcp/tools.h"
#include "engine_fixture.h"
#include "test_util.h"

#include "engine/engine_internal.h"

#define LAYERS 2
#define MAX_T 6
#define MAX_RANKS 8

/** One engine and its per-rank buffers, with every layer's results of the last step on the host. */
struct eng {
    dcp_deployment *dep;
    dcp_engine *e;
    struct dcp_engine_info in;
    bool gqa;
    void *q[MAX_RANKS], *k[MAX_RANKS], *v[MAX_RANKS], *out[MAX_RANKS], *lse[MAX_RANKS];
    float *res_out[MAX_RANKS][LAYERS], *res_lse[MAX_RANKS][LAYERS];
};

/** One case: the model, the DCP size and the wire. */
struct p2p_case {
    enum dcp_attention_kind kind;
    uint32_t dcp;
    enum dcp_wire_dtype comm_dtype; /* 0: fp32 */
};

static struct fixture_shape case_shape(const struct p2p_case *c, enum dcp_comm_scheme comm)
{
    struct fixture_shape s = fixture_default_shape();
    s.backend = DCP_BACKEND_HOST;
    s.kind = c->kind;
    s.tp = 8;
    s.dcp = c->dcp;
    s.block_size = 4;
    s.q_heads = 16;
    s.layers = LAYERS;
    s.comm = comm;
    s.comm_dtype = (enum dcp_dtype)c->comm_dtype;
    if (c->kind == DCP_ATTN_GQA) {
        s.kv_heads = c->dcp == 8 ? 1 : 2; /* a DCP group divides the tp / kv_heads replicas of a KV head */
        s.head_dim = 40;
    }
    return s;
}

static void eng_create(struct eng *g, const struct fixture_shape *s, double timeout_s)
{
    memset(g, 0, sizeof(*g));
    struct dcp_config cfg;
    fixture_config(s, &cfg);
    if (timeout_s > 0)
        cfg.runtime.cuda.nccl_timeout_s = timeout_s;
    const int err = dcp_deployment_from_config(&cfg, NULL, &g->dep);
    if (err)
        fail_msg("deployment: %s", dcp_last_error());
    g->e = fixture_engine(g->dep, 0, 32, 3, MAX_T, 48);
    dcp_engine_get_info(g->e, &g->in);
    g->gqa = s->kind == DCP_ATTN_GQA;
    const size_t f = sizeof(float);
    assert_true(g->in.num_local_ranks <= MAX_RANKS);
    for (uint32_t i = 0; i < g->in.num_local_ranks; i++) {
        dcp_rank *r = dcp_engine_rank(g->e, i);
        const size_t rows = (size_t)MAX_T * g->in.q_heads_per_rank;
        assert_int_equal(dcp_rank_alloc(r, rows * g->in.qk_dim * f, &g->q[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, MAX_T * g->in.kv_heads_per_rank * g->in.qk_dim * f, &g->k[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, MAX_T * g->in.kv_heads_per_rank * g->in.v_dim * f, &g->v[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, rows * g->in.out_dim * f, &g->out[i]), DCP_OK);
        assert_int_equal(dcp_rank_alloc(r, rows * f, &g->lse[i]), DCP_OK);
        for (int l = 0; l < LAYERS; l++) {
            g->res_out[i][l] = calloc(rows * g->in.out_dim, f);
            g->res_lse[i][l] = calloc(rows, f);
            assert_true(g->res_out[i][l] && g->res_lse[i][l]);
        }
    }
}

static void eng_destroy(struct eng *g)
{
    for (uint32_t i = 0; i < g->in.num_local_ranks; i++) {
        dcp_rank *r = dcp_engine_rank(g->e, i);
        dcp_rank_free(r, g->q[i]);
        dcp_rank_free(r, g->k[i]);
        dcp_rank_free(r, g->v[i]);
        dcp_rank_free(r, g->out[i]);
        dcp_rank_free(r, g->lse[i]);
        for (int l = 0; l < LAYERS; l++) {
            free(g->res_out[i][l]);
            free(g->res_lse[i][l]);
        }
    }
    dcp_engine_destroy(&g->e);
    dcp_deployment_destroy(&g->dep);
}

/** One step's rank function: appends and attends every layer, keeps the results. */
struct step_job {
    struct eng *g;
    uint32_t tokens;
    uint64_t seed;
    int lagging;          /* group rank that sleeps before each attention (-1: none) */
    int silent;           /* tp rank that makes no call at all (-1: none) */
    int result[MAX_RANKS];
    char message[MAX_RANKS][256];
    double seconds[MAX_RANKS];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int step_rank(dcp_rank *r, struct step_job *j)
{
    struct eng *g = j->g;
    const uint32_t i = dcp_rank_tp_rank(r);
    uint32_t q0, kv0;
    dcp_rank_head_offsets(r, &q0, &kv0);
    const size_t rows = (size_t)j->tokens * g->in.q_heads_per_rank;
    for (uint32_t l = 0; l < LAYERS; l++) {
        struct dcp_synth_desc d = {
            .seed = j->seed + 16 * l, .row_keys = dcp_rank_step_token_keys(r), .rows = j->tokens,
            .heads = g->in.kv_heads_per_rank, .dim = g->in.qk_dim, .head_offset = kv0, .amplitude = 1.0f,
        };
        int err = dcp_rank_fill_synthetic(r, g->k[i], &d);
        if (!err && g->gqa) {
            d.seed += 1;
            d.dim = g->in.v_dim;
            err = dcp_rank_fill_synthetic(r, g->v[i], &d);
        }
        if (!err)
            err = dcp_rank_append_kv(r, l, g->k[i], g->gqa ? g->v[i] : NULL);
        d.seed = j->seed + 16 * l + 2;
        d.heads = g->in.q_heads_per_rank;
        d.dim = g->in.qk_dim;
        d.head_offset = q0;
        if (!err)
            err = dcp_rank_fill_synthetic(r, g->q[i], &d);
        if (!err && (int)dcp_rank_group_rank(r) == j->lagging) {
            const struct timespec ts = {0, 15 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (!err)
            err = dcp_rank_attention(r, l, g->q[i], g->out[i], g->lse[i]);
        if (!err)
            err = dcp_rank_download(r, g->res_out[i][l], g->out[i], rows * g->in.out_dim * sizeof(float));
        if (!err)
            err = dcp_rank_download(r, g->res_lse[i][l], g->lse[i], rows * sizeof(float));
        if (err)
            return err;
    }
    return DCP_OK;
}

static int step_fn(dcp_rank *r, void *arg)
{
    struct step_job *j = arg;
    const uint32_t i = dcp_rank_tp_rank(r);
    if ((int)i == j->silent)
        return DCP_OK;
    const double t0 = now_s();
    j->result[i] = step_rank(r, j);
    j->seconds[i] = now_s() - t0;
    snprintf(j->message[i], sizeof(j->message[i]), "%s", j->result[i] ? dcp_last_error() : "");
    return j->result[i];
}

/** Sequences of both engines: three, grown by a prefill, then decode and speculative steps. */
static const uint32_t prefill[3] = {3, 1, 2};
static const uint32_t grows[][3] = {{1, 1, 1}, {2, 1, 3}, {1, 2, 1}, {1, 1, 1}};
#define STEPS (1 + sizeof(grows) / sizeof(grows[0]))

static int run_step(struct eng *g, const uint32_t *grow, struct step_job *j)
{
    uint32_t ids[3], tokens = 0;
    for (uint32_t s = 0; s < 3; s++) {
        ids[s] = s;
        tokens += grow[s];
        assert_int_equal(dcp_seq_extend(g->e, s, grow[s]), DCP_OK);
    }
    const struct dcp_batch b = {.num_seqs = 3, .seq_ids = ids, .q_lens = grow};
    assert_int_equal(dcp_engine_begin_step(g->e, &b), DCP_OK);
    j->g = g;
    j->tokens = tokens;
    return dcp_engine_run(g->e, step_fn, j);
}

/* Whether the last steps of a and b gave the same bits on every rank and layer. */
static bool same_bits(const struct eng *a, const struct eng *b, uint32_t tokens)
{
    const size_t rows = (size_t)tokens * a->in.q_heads_per_rank;
    for (uint32_t i = 0; i < a->in.num_local_ranks; i++)
        for (int l = 0; l < LAYERS; l++)
            if (memcmp(a->res_out[i][l], b->res_out[i][l], rows * a->in.out_dim * sizeof(float)) ||
                memcmp(a->res_lse[i][l], b->res_lse[i][l], rows * sizeof(float)))
                return false;
    return true;
}

/*
 * Runs the steps on an a2a engine and a p2p engine of case c (p2p's group rank lagging
 * sleeping before each attention, or -1) and returns whether every step's results were
 * bitwise equal; *failed: a p2p step returned an error (checked by the caller).
 */
static bool p2p_follows_a2a(const struct p2p_case *c, int lagging, bool *failed)
{
    struct eng a, p;
    const struct fixture_shape sa = case_shape(c, DCP_COMM_A2A), sp = case_shape(c, DCP_COMM_P2P);
    eng_create(&a, &sa, 0);
    eng_create(&p, &sp, 2.0);
    assert_int_equal(p.in.comm, DCP_COMM_P2P);
    assert_int_equal(a.in.comm, DCP_COMM_A2A);
    for (uint32_t s = 0; s < 3; s++) {
        uint32_t id;
        assert_int_equal(dcp_seq_create(a.e, &id), DCP_OK);
        assert_int_equal(dcp_seq_create(p.e, &id), DCP_OK);
    }
    bool equal = true;
    *failed = false;
    const uint64_t seed = test_seed() * 131 + c->dcp;
    for (uint32_t st = 0; st < STEPS && !*failed; st++) {
        const uint32_t *grow = st == 0 ? prefill : grows[st - 1];
        struct step_job ja = {.seed = seed + st * 64, .lagging = -1, .silent = -1};
        struct step_job jp = {.seed = seed + st * 64, .lagging = lagging, .silent = -1};
        assert_int_equal(run_step(&a, grow, &ja), DCP_OK);
        if (run_step(&p, grow, &jp) != DCP_OK) {
            *failed = true;
            break;
        }
        equal = equal && same_bits(&a, &p, ja.tokens);
    }
    eng_destroy(&a);
    eng_destroy(&p);
    return equal;
}

static const struct p2p_case cases[] = {
    {DCP_ATTN_MLA, 1, 0},
    {DCP_ATTN_MLA, 2, 0},
    {DCP_ATTN_MLA, 4, 0},
    {DCP_ATTN_MLA, 8, 0},
    {DCP_ATTN_GQA, 2, 0},
    {DCP_ATTN_GQA, 4, 0},
    {DCP_ATTN_GQA, 8, 0},
    {DCP_ATTN_MLA, 4, DCP_WIRE_BF16},
    {DCP_ATTN_GQA, 2, DCP_WIRE_FP16},
};
#define NUM_CASES (sizeof(cases) / sizeof(cases[0]))

static void test_p2p_equals_a2a(void **state)
{
    (void)state;
    for (size_t i = 0; i < NUM_CASES; i++) {
        /* The last group rank lags on every other case: the others wait for its epochs. */
        const int lagging = i % 2 ? (int)cases[i].dcp - 1 : -1;
        bool failed;
        const bool equal = p2p_follows_a2a(&cases[i], lagging, &failed);
        if (failed || !equal)
            fail_msg("%s dcp=%u wire %s%s: p2p %s", dcp_attention_kind_name(cases[i].kind), cases[i].dcp,
                     dcp_dtype_name((enum dcp_dtype)cases[i].comm_dtype), lagging >= 0 ? " (a rank lagging)" : "",
                     failed ? "failed" : "differs from a2a");
        print_message("%s dcp=%u wire %s%s: p2p equals a2a bit for bit over %zu steps\n",
                      dcp_attention_kind_name(cases[i].kind), cases[i].dcp,
                      dcp_dtype_name((enum dcp_dtype)cases[i].comm_dtype), lagging >= 0 ? " (a rank lagging)" : "",
                      (size_t)STEPS);
    }
}

/* The deliberate bugs make the comparison fail (or the step fail), never pass. */
static void test_mutants_fail(void **state)
{
    (void)state;
    const struct p2p_case c = {DCP_ATTN_MLA, 4, 0};
    static const enum dcp_p2p_mutant mutants[] = {DCP_P2P_MUTANT_WRONG_SLOT, DCP_P2P_MUTANT_NO_EPOCH_BUMP};
    static const char *const names[] = {"store into the wrong slot", "epoch not bumped"};
    for (size_t m = 0; m < 2; m++) {
        dcp_p2p_test_mutant = mutants[m];
        bool failed;
        const bool equal = p2p_follows_a2a(&c, 1, &failed); /* group rank 1 lags: stale slots are read */
        dcp_p2p_test_mutant = DCP_P2P_MUTANT_NONE;
        if (equal && !failed)
            fail_msg("mutant \"%s\" was not caught", names[m]);
        print_message("mutant \"%s\": caught (%s)\n", names[m], failed ? "a step failed" : "results differ");
    }
}

/* Runs one step of e where silent (a tp rank) makes no call; every other rank must fail
 * within the timeout plus a margin, one of them with DCP_ETIMEOUT naming silent's group rank. */
static void expect_peers_fail(struct eng *g, int silent, double timeout_s)
{
    struct step_job j = {.seed = 3, .lagging = -1, .silent = silent};
    const double t0 = now_s();
    const int err = run_step(g, grows[0], &j);
    const double took = now_s() - t0;
    assert_int_not_equal(err, DCP_OK);
    if (took > timeout_s + 5)
        fail_msg("the step took %.1f s with a comm timeout of %.1f s", took, timeout_s);
    char want[64];
    snprintf(want, sizeof(want), "group rank %u did not publish", (unsigned)silent % g->in.dcp);
    bool named = false;
    for (uint32_t i = 0; i < g->in.num_local_ranks; i++) {
        if ((int)i == silent)
            continue;
        const bool same_group = i / g->in.dcp == (uint32_t)silent / g->in.dcp;
        if (same_group && j.result[i] == DCP_OK)
            fail_msg("rank %u finished its step although group rank %u never stored", i, silent % g->in.dcp);
        if (j.result[i] == DCP_ETIMEOUT && strstr(j.message[i], want))
            named = true;
        if (same_group)
            print_message("rank %u: %s after %.2f s: %s\n", i, dcp_strerror(j.result[i]), j.seconds[i], j.message[i]);
    }
    if (!named)
        fail_msg("no rank reported DCP_ETIMEOUT with \"%s\"", want);
}

static void test_silent_rank_times_out(void **state)
{
    (void)state;
    const double timeout_s = 0.3;
    const struct p2p_case c = {DCP_ATTN_MLA, 4, 0};
    const struct fixture_shape s = case_shape(&c, DCP_COMM_P2P);
    struct eng g;
    eng_create(&g, &s, timeout_s);
    for (uint32_t k = 0; k < 3; k++) {
        uint32_t id;
        assert_int_equal(dcp_seq_create(g.e, &id), DCP_OK);
    }
    struct step_job j0 = {.seed = 1, .lagging = -1, .silent = -1};
    assert_int_equal(run_step(&g, prefill, &j0), DCP_OK);
    expect_peers_fail(&g, 6, timeout_s);
    /* The engine recovers (epochs from 0 again) and runs the next steps. */
    struct step_job j1 = {.seed = 2, .lagging = -1, .silent = -1};
    assert_int_equal(run_step(&g, grows[1], &j1), DCP_OK);
    assert_int_equal(run_step(&g, grows[2], &j1), DCP_OK);
    eng_destroy(&g);

    /* The mutant that never publishes its epochs: every step times out. */
    eng_create(&g, &s, timeout_s);
    for (uint32_t k = 0; k < 3; k++) {
        uint32_t id;
        assert_int_equal(dcp_seq_create(g.e, &id), DCP_OK);
    }
    dcp_p2p_test_mutant = DCP_P2P_MUTANT_NO_PUBLISH;
    struct step_job jm = {.seed = 1, .lagging = -1, .silent = -1};
    const int err = run_step(&g, prefill, &jm);
    dcp_p2p_test_mutant = DCP_P2P_MUTANT_NONE;
    if (err == DCP_OK)
        fail_msg("mutant \"release store deleted\" was not caught");
    print_message("mutant \"release store deleted\": caught (%s)\n", dcp_strerror(err));
    eng_destroy(&g);
}

/* auto is p2p on the host backend (dcp > 1), a2a for dcp 1; the planner prices p2p as peer
 * writes with hardware.peer_latency_us, and auto as a2a when a DCP group spans nodes. */
static void test_auto_and_plan(void **state)
{
    (void)state;
    const struct p2p_case c = {DCP_ATTN_MLA, 4, 0};
    struct fixture_shape s = case_shape(&c, DCP_COMM_AUTO);
    struct eng g;
    eng_create(&g, &s, 0);
    assert_int_equal(g.in.comm, DCP_COMM_P2P);
    struct dcp_plan plan;
    assert_int_equal(dcp_plan_compute(g.dep, &plan), DCP_OK);
    assert_int_equal(plan.comm.scheme, DCP_COMM_P2P);
    assert_int_equal(plan.comm.num_rows, 2);
    for (uint32_t i = 0; i < plan.comm.num_rows; i++)
        assert_int_equal(plan.comm.rows[i].kind, DCP_PLAN_COMM_PEER_WRITE);
    eng_destroy(&g);

    struct fixture_shape s1 = s;
    s1.dcp = 1;
    eng_create(&g, &s1, 0);
    assert_int_equal(g.in.comm, DCP_COMM_A2A);
    eng_destroy(&g);

    /* p2p's rows are a2a's bytes; a round of peer writes costs peer_latency + bytes / link. */
    struct dcp_config cfg;
    fixture_config(&s, &cfg);
    cfg.parallel.comm = DCP_COMM_A2A;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_from_config(&cfg, NULL, &dep), DCP_OK);
    struct dcp_plan a2a;
    assert_int_equal(dcp_plan_compute(dep, &a2a), DCP_OK);
    dcp_deployment_destroy(&dep);
    assert_true(a2a.comm.total_send == plan.comm.total_send && a2a.comm.num_rows == plan.comm.num_rows);
    assert_int_equal(a2a.comm.rows[1].kind, DCP_PLAN_COMM_ALL_TO_ALL);

    /* Groups that span nodes: auto prices a2a. */
    cfg.parallel.comm = DCP_COMM_AUTO;
    cfg.hardware.gpus_per_node = 2;
    cfg.hardware.nodes = 4;
    cfg.hardware.internode_bandwidth = 50e9;
    assert_int_equal(dcp_deployment_from_config(&cfg, NULL, &dep), DCP_OK);
    struct dcp_plan spanning;
    assert_int_equal(dcp_plan_compute(dep, &spanning), DCP_OK);
    assert_int_equal(spanning.comm.scheme, DCP_COMM_A2A);
    dcp_deployment_destroy(&dep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p2p_equals_a2a),
        cmocka_unit_test(test_mutants_fail),
        cmocka_unit_test(test_silent_rank_times_out),
        cmocka_unit_test(test_auto_and_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
