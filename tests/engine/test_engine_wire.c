/*
 * The bytes each rank sends per layer per query token, counted where they move,
 * equal what the planner (dcp_plan_compute, `dcp-run plan`) prices for the same
 * deployment, for every communication option: the merge schemes (a2a, ag_rs, p2p),
 * replicate_q, merge_after_uv (MLA) and their combinations, MLA and GQA, with
 * every parallel.comm_dtype (fp32, bf16, fp16: queries and partial outputs in it, LSEs
 * fp32), with act_dtype fp32 and bf16. Counted by
 *   - the host backend: what the other members copied out of a rank's buffers (p2p: what
 *     a rank stored into the others');
 *   - CUDA virtual ranks (the fake libcuda): the device copies and reduce reads from it;
 *   - CUDA with NCCL (the fake libnccl, one fake GPU per rank): the fake's own count
 *     (fake_nccl_stats.sent_bytes_by_rank), and what the backend handed NCCL.
 * The collectives each rank runs per layer (its profile's comm_calls) equal the
 * plan's count too (a2a: outputs and LSEs in one message per peer, one collective).
 * Each case runs through the DCP harness, so its results are also checked against
 * the float64 oracle. CUDA cases are skipped when the doubles cannot run them.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_harness.h"
#include "../doubles/fake_hooks.h"
#include "test_util.h"

#include "engine/engine_internal.h"

enum path { PATH_HOST, PATH_VIRTUAL, PATH_NCCL, PATH_COUNT };
static const char *const path_names[PATH_COUNT] = {"host", "cuda virtual ranks", "cuda nccl (fake libnccl)"};

/** One communication option set. */
struct wire_case {
    enum dcp_attention_kind kind;
    enum dcp_comm_scheme comm;
    bool replicate_q, merge_after_uv;
    uint32_t dcp;
    enum dcp_dtype comm_dtype, act_dtype; /* 0: fp32 */
};

static const struct wire_case cases[] = {
    {DCP_ATTN_MLA, DCP_COMM_A2A, false, false, 4, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_AG_RS, false, false, 4, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_A2A, true, false, 2, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_AG_RS, true, false, 4, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_A2A, false, true, 4, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_AG_RS, false, true, 2, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_A2A, true, true, 2, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_AG_RS, true, true, 4, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_GQA, DCP_COMM_A2A, false, false, 2, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_GQA, DCP_COMM_AG_RS, false, false, 2, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_GQA, DCP_COMM_A2A, true, false, 2, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_GQA, DCP_COMM_AG_RS, true, false, 2, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    /* 16-bit wires (with merge_after_uv: uv_proj stores the wire's dtype) */
    {DCP_ATTN_MLA, DCP_COMM_A2A, false, false, 4, DCP_DTYPE_BF16, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_AG_RS, false, false, 4, DCP_DTYPE_FP16, DCP_DTYPE_BF16},
    {DCP_ATTN_MLA, DCP_COMM_A2A, true, false, 2, DCP_DTYPE_FP16, DCP_DTYPE_FP32},
    {DCP_ATTN_GQA, DCP_COMM_A2A, false, false, 2, DCP_DTYPE_FP16, DCP_DTYPE_BF16},
    {DCP_ATTN_GQA, DCP_COMM_AG_RS, false, false, 2, DCP_DTYPE_BF16, DCP_DTYPE_FP32},
    {DCP_ATTN_GQA, DCP_COMM_AG_RS, true, false, 2, DCP_DTYPE_BF16, DCP_DTYPE_BF16},
    {DCP_ATTN_MLA, DCP_COMM_A2A, false, true, 4, DCP_DTYPE_BF16, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_AG_RS, true, true, 2, DCP_DTYPE_BF16, DCP_DTYPE_BF16},
    /* p2p: a2a's bytes in one-sided stores (the host backend only, so far) */
    {DCP_ATTN_MLA, DCP_COMM_P2P, false, false, 4, DCP_DTYPE_FP32, DCP_DTYPE_FP32},
    {DCP_ATTN_MLA, DCP_COMM_P2P, true, true, 2, DCP_DTYPE_BF16, DCP_DTYPE_FP32},
    {DCP_ATTN_GQA, DCP_COMM_P2P, false, false, 2, DCP_DTYPE_FP16, DCP_DTYPE_BF16},
    {DCP_ATTN_MLA, DCP_COMM_P2P, false, true, 4, DCP_DTYPE_BF16, DCP_DTYPE_BF16},
};
#define NUM_CASES (sizeof(cases) / sizeof(cases[0]))

static struct fixture_shape case_shape(const struct wire_case *wc, enum path path)
{
    struct fixture_shape s = fixture_default_shape();
    s.kind = wc->kind;
    s.tp = 4;
    s.dcp = wc->dcp;
    s.block_size = 8;
    s.q_heads = 8;
    s.layers = 2;
    s.comm = wc->comm;
    s.replicate_q = wc->replicate_q;
    s.merge_after_uv = wc->merge_after_uv;
    s.comm_dtype = wc->comm_dtype;
    const bool cuda = path != PATH_HOST;
    s.backend = cuda ? DCP_BACKEND_CUDA : DCP_BACKEND_HOST;
    s.cuda_comm = path == PATH_NCCL ? DCP_CUDA_COMM_NCCL : DCP_CUDA_COMM_VIRTUAL;
    if (wc->kind == DCP_ATTN_MLA) {
        s.kv_lora_rank = cuda ? 512 : 48; /* the GPU kernels have MLA 512 + 64 only */
        s.rope_dim = cuda ? 64 : 16;
        s.v_head_dim = 24;
    } else {
        s.kv_heads = 2; /* tp 4: two replicas of each KV head, sharded by dcp 2 */
        s.head_dim = cuda ? 64 : 40;
    }
    return s;
}

/* The fake libnccl the engine loaded (while it is loaded), or NULL. */
static fake_nccl_get_stats_fn fake_nccl_stats_fn(void **handle)
{
    const char *path = getenv("DCP_NCCL_LIBRARY");
    *handle = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    return *handle ? (fake_nccl_get_stats_fn)dlsym(*handle, "fake_nccl_get_stats") : NULL;
}

/* Whether the path can run here: the CUDA backend needs the doubles and the embedded kernels. */
static bool path_available(enum path path)
{
    if (path == PATH_HOST)
        return true;
    const struct fixture_shape s = case_shape(&cases[0], path);
    const int err = fixture_probe(&s);
    if (err)
        print_message("%s: skipped\n", path_names[path]);
    return err == DCP_OK;
}

/** Bytes each local rank has sent so far: the backend's count, and the fake libnccl's by group rank. */
struct wire_counts {
    uint64_t rank[8];
    uint64_t collectives[8];  /* the rank's profile's comm_calls */
    unsigned long long nccl_by_group_rank[FAKE_NCCL_STATS_RANKS];
};

static void read_counts(dcp_engine *e, fake_nccl_get_stats_fn nccl, struct wire_counts *c)
{
    memset(c, 0, sizeof(*c));
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    for (uint32_t i = 0; i < in.num_local_ranks; i++) {
        dcp_rank *r = dcp_engine_rank(e, i);
        struct dcp_profile prof;
        assert_int_equal(dcp_rank_get_profile(r, &prof), DCP_OK);
        c->rank[i] = dcp_rank_wire_bytes(r);
        c->collectives[i] = prof.comm_calls;
    }
    if (nccl) {
        struct fake_nccl_stats st;
        nccl(&st);
        memcpy(c->nccl_by_group_rank, st.sent_bytes_by_rank, sizeof(c->nccl_by_group_rank));
    }
}

/* Runs steps of known query tokens and checks every rank's bytes per layer per query
 * token against the plan; returns the bytes per layer per query token. */
static double run_case(const struct wire_case *wc, enum path path)
{
    struct harness_config hc = {
        .shape = case_shape(wc, path),
        .max_live = 3,
        .max_batch = 3,
        .max_query_tokens = 12,
        .max_step_tokens = 48,
        .max_context = 96,
        .profile = true,
        .act_dtype = wc->act_dtype,
    };
    char label[200];
    snprintf(label, sizeof(label), "%s: %s %s%s%s dcp=%u wire %s act %s", path_names[path],
             dcp_attention_kind_name(wc->kind), dcp_comm_scheme_name(wc->comm), wc->replicate_q ? " replicate_q" : "",
             wc->merge_after_uv ? " merge_after_uv" : "", wc->dcp, dcp_dtype_name(wc->comm_dtype),
             dcp_dtype_name(wc->act_dtype));
    struct harness *h = harness_create(&hc, test_seed() + (uint64_t)(wc - cases), label);
    dcp_engine *e = harness_engine(h, false);
    struct dcp_engine_info in;
    dcp_engine_get_info(e, &in);
    assert_int_equal(in.dcp, wc->dcp);
    assert_true(in.replicate_q == wc->replicate_q && in.merge_after_uv == wc->merge_after_uv);
    struct dcp_plan plan;
    assert_int_equal(dcp_plan_compute(harness_deployment(h), &plan), DCP_OK);
    void *nccl_dl = NULL;
    const fake_nccl_get_stats_fn nccl = path == PATH_NCCL ? fake_nccl_stats_fn(&nccl_dl) : NULL;
    if (path == PATH_NCCL && !nccl)
        fail_msg("%s: the engine did not load the fake libnccl (%s)", label, dlerror());

    uint32_t seqs[3];
    for (uint32_t i = 0; i < 3; i++)
        seqs[i] = harness_seq_create(h);
    const uint32_t prefill[3] = {30, 5, 13};
    harness_step(h, 3, seqs, prefill); /* 48 tokens: append only, no attention, no collective */
    const uint32_t grows[][3] = {{1, 1, 1}, {4, 2, 1}, {3, 3, 3}};
    const uint32_t groups = in.tp / in.dcp;
    for (size_t g = 0; g < sizeof(grows) / sizeof(grows[0]); g++) {
        struct wire_counts before, after;
        read_counts(e, nccl, &before);
        assert_true(harness_step(h, 3, seqs, grows[g]));
        read_counts(e, nccl, &after);
        const uint64_t tokens = (uint64_t)grows[g][0] + grows[g][1] + grows[g][2];
        const double want = plan.comm.total_send * in.num_layers * (double)tokens;
        for (uint32_t r = 0; r < in.num_local_ranks; r++) {
            const double got = (double)(after.rank[r] - before.rank[r]);
            if (got != want)
                fail_msg("%s: rank %u sent %.0f bytes in a step of %llu query tokens x %u layers; the plan says "
                         "%.0f per layer per token = %.0f", label, r, got, (unsigned long long)tokens,
                         in.num_layers, plan.comm.total_send, want);
            const uint64_t calls = after.collectives[r] - before.collectives[r];
            if (calls != (uint64_t)plan.comm.collectives * in.num_layers)
                fail_msg("%s: rank %u ran %llu collectives in %u layers; the plan says %u per layer", label, r,
                         (unsigned long long)calls, in.num_layers, plan.comm.collectives);
        }
        for (uint32_t gr = 0; nccl && gr < in.dcp; gr++) {
            const double got = (double)(after.nccl_by_group_rank[gr] - before.nccl_by_group_rank[gr]);
            if (got != want * groups)
                fail_msg("%s: fake libnccl counted %.0f bytes from the %u ranks of group rank %u; the plan says "
                         "%.0f each", label, got, groups, gr, want);
        }
    }
    if (nccl_dl)
        dlclose(nccl_dl);
    harness_destroy(&h);
    return plan.comm.total_send;
}

static void test_wire_bytes_equal_plan(void **state)
{
    (void)state;
    for (int p = 0; p < PATH_COUNT; p++) {
        const enum path path = (enum path)p;
        if (path == PATH_NCCL)
            assert_int_equal(setenv("FAKE_CUDA_DEVICES", "4", 1), 0); /* a fake GPU per rank */
        if (!path_available(path))
            continue;
        for (size_t i = 0; i < NUM_CASES; i++) {
            /* Quick runs (valgrind) take every third case on the CUDA paths. */
            if (path != PATH_HOST && fixture_quick() && i % 3 != (size_t)p % 3)
                continue;
            if (path != PATH_HOST && cases[i].comm == DCP_COMM_P2P)
                continue; /* the CUDA backend refuses p2p (no peer stores yet) */
            const double bytes = run_case(&cases[i], path);
            print_message("%s: %s %s%s%s dcp=%u wire %s: %.0f bytes per rank per layer per query token, as "
                          "planned\n", path_names[path], dcp_attention_kind_name(cases[i].kind),
                          dcp_comm_scheme_name(cases[i].comm), cases[i].replicate_q ? " replicate_q" : "",
                          cases[i].merge_after_uv ? " merge_after_uv" : "", cases[i].dcp,
                          dcp_dtype_name(cases[i].comm_dtype), bytes);
        }
    }
    unsetenv("FAKE_CUDA_DEVICES");
}

/* The options shrink what is sent, by the planner's formula: merge_after_uv sends
 * v_head_dim values per head instead of kv_lora_rank, replicate_q no queries. */
static void test_options_send_less(void **state)
{
    (void)state;
    const double base = run_case(&cases[0], PATH_HOST);
    const double uv = run_case(&cases[4], PATH_HOST);
    const struct fixture_shape s = case_shape(&cases[0], PATH_HOST);
    const double h_l = (double)s.q_heads / s.tp, peers = s.dcp - 1;
    assert_true(base - uv == peers * h_l * (s.kv_lora_rank - s.v_head_dim) * 4.0);
    const double repq = run_case(&cases[2], PATH_HOST); /* dcp 2: one peer, no queries */
    assert_true(repq == h_l * (s.kv_lora_rank * 4.0 + 4.0));
    /* A bf16 wire (cases[12], otherwise cases[0]) halves the queries and partial outputs, not the LSEs. */
    const double bf16 = run_case(&cases[12], PATH_HOST);
    const double qk = s.kv_lora_rank + s.rope_dim;
    assert_true(base - bf16 == peers * h_l * (s.kv_lora_rank + qk) * 2.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_bytes_equal_plan),
        cmocka_unit_test(test_options_send_less),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
