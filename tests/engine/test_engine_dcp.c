/*
 * The engine's DCP result equals single-rank attention: random deployments (DCP
 * size, TP, interleave, block size, MLA/GQA/MHA, KV dtype, merge scheme, host
 * threads) run random sequences through the public API (prefill chunks, decode and
 * speculative multi-token steps, truncation, release and re-creation, forks), and
 * every attention result of every rank is checked against the float64 oracle over
 * the whole sequence and against the TP baseline (the same deployment at dcp = 1).
 * Plus targeted cases: empty shards, the real 512+64 MLA latent, split-KV, block
 * reuse, forks that diverge, speculative rejection, a NaN in the KV cache, the
 * leaner communication options (replicate_q, merge_after_uv); q, k, v and out in
 * bf16 and fp16 (act_dtype) with both merge schemes and split-KV.
 *
 * DCP_TEST_SEED reseeds; DCP_TEST_QUICK (or valgrind) runs fewer, smaller cases;
 * DCP_TEST_BACKEND picks the backend (see engine_fixture.h).
 */
#include <stdio.h>
#include <string.h>

#include "dcp_harness.h"
#include "test_util.h"
#include "util/util.h"

#define MAX_SEQS 8

/** What the random cases covered, printed at the end of the run. */
static struct {
    uint32_t cases, sequences, kinds[3], dcp[9], dtypes[4], comms[3], split_threads;
    uint32_t forks, releases, rejections;
} coverage;

/* ---- shared scenario pieces ---------------------------------------------- */

static uint32_t pick(struct test_rng *rng, const uint32_t *options, uint32_t n)
{
    return options[test_rng_range(rng, 0, n - 1)];
}

static void shuffle(struct test_rng *rng, uint32_t *a, uint32_t n)
{
    for (uint32_t i = n; i > 1; i--) {
        const uint32_t j = (uint32_t)test_rng_range(rng, 0, i - 1), t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* Grows every sequence to its target in steps of random batches (random order) and
 * chunk sizes: small chunks are attended (chunked prefill with multi-token queries),
 * large ones only append. */
static void prefill(struct harness *h, struct test_rng *rng, uint32_t n, const uint32_t *seqs,
                    const uint64_t *target, uint32_t step_tokens)
{
    for (;;) {
        uint32_t batch[MAX_SEQS], grow[MAX_SEQS], count = 0, tokens = 0;
        for (uint32_t i = 0; i < n; i++)
            if (harness_seq_length(h, seqs[i]) < target[i] && (count == 0 || test_rng_range(rng, 0, 3)))
                batch[count++] = i;
        if (count == 0)
            return;
        shuffle(rng, batch, count);
        for (uint32_t j = 0; j < count; j++) {
            const uint32_t i = batch[j];
            const uint64_t left = target[i] - harness_seq_length(h, seqs[i]);
            const uint64_t chunk = test_rng_range(rng, 0, 1) ? test_rng_range(rng, 1, 4) : test_rng_range(rng, 1, 48);
            grow[j] = (uint32_t)DCP_MIN(DCP_MIN(left, chunk), (uint64_t)(step_tokens - tokens - (count - 1 - j)));
            tokens += grow[j];
            batch[j] = seqs[i];
        }
        harness_step(h, count, batch, grow);
    }
}

/* Decode steps over all given sequences in random order, each growing by 1, 2 or 4
 * tokens (plain decode or speculative/MTP verification). */
static void decode(struct harness *h, struct test_rng *rng, uint32_t n, const uint32_t *seqs, uint32_t steps)
{
    static const uint32_t q_lens[] = {1, 2, 4};
    for (uint32_t s = 0; s < steps; s++) {
        uint32_t batch[MAX_SEQS], grow[MAX_SEQS];
        memcpy(batch, seqs, n * sizeof(*batch));
        shuffle(rng, batch, n);
        for (uint32_t i = 0; i < n; i++)
            grow[i] = pick(rng, q_lens, 3);
        assert_true(harness_step(h, n, batch, grow));
    }
}

static struct harness_config base_config(void)
{
    struct harness_config c = {
        .shape = fixture_default_shape(),
        .max_live = 4,
        .max_batch = 4,
        .max_query_tokens = 16,
        .max_step_tokens = 64,
        .max_context = 256,
        .baseline = true,
    };
    c.shape.layers = 1;
    c.shape.block_size = 16;
    return c;
}

static void describe(char *buf, size_t size, const char *name, const struct fixture_shape *s)
{
    const bool mla = s->kind == DCP_ATTN_MLA;
    snprintf(buf, size, "%s: %s tp=%u dcp=%u I=%u B=%u q_heads=%u kv_heads=%u dims=%u+%u %s %s layers=%u threads=%u",
             name, dcp_attention_kind_name(s->kind), s->tp, s->dcp, s->interleave, s->block_size, s->q_heads,
             mla ? 1 : s->kv_heads, mla ? s->kv_lora_rank : s->head_dim, mla ? s->rope_dim : s->head_dim,
             dcp_dtype_name(s->dtype), dcp_comm_scheme_name(s->comm), s->layers, s->host_threads);
}

/* ---- random deployments ----------------------------------------------------- */

/* GQA/MHA heads valid for tp and dcp: tp splits or replicates the KV heads, DCP
 * shards the replicas (so dcp > 1 needs tp / kv_heads to be a multiple of dcp). */
static void pick_gqa_heads(struct test_rng *rng, struct fixture_shape *s)
{
    static const uint32_t dims[] = {16, 24, 32, 48, 64, 80, 128};
    const bool mha = s->dcp == 1 && test_rng_range(rng, 0, 2) == 0;
    s->kind = mha ? DCP_ATTN_MHA : DCP_ATTN_GQA;
    s->head_dim = pick(rng, dims, 7);
    uint32_t hl = (uint32_t)test_rng_range(rng, 1, 3);
    if (mha) {
        s->q_heads = s->kv_heads = s->tp * hl;
        return;
    }
    uint32_t options[4], n = 0;
    for (uint32_t kv = 1; kv <= 4; kv++) {
        const bool ok = s->tp >= kv ? s->tp % kv == 0 && (s->tp / kv) % s->dcp == 0
                                    : kv % s->tp == 0 && s->dcp == 1;
        if (ok)
            options[n++] = kv;
    }
    s->kv_heads = pick(rng, options, n);
    while ((s->tp * hl) % s->kv_heads)
        hl++;
    s->q_heads = s->tp * hl;
}

static struct fixture_shape random_shape(struct test_rng *rng, uint32_t index)
{
    static const uint32_t dcps[] = {1, 2, 3, 4, 8}, blocks[] = {16, 64};
    static const uint32_t latents[][2] = {{32, 16}, {64, 16}, {48, 8}};
    struct fixture_shape s = fixture_default_shape();
    /* index -> (index mod 5, index mod 8) is one-to-one over 40 cases: every dcp x
     * dtype x comm combination, and any 8 consecutive cases cover every dcp and dtype. */
    s.dcp = dcps[index % 5];
    s.dtype = (enum dcp_dtype)(index % 4);
    /* p2p (a2a's merge through peer stores) on the host backend, which runs it; a2a elsewhere. */
    s.comm = index % 8 < 4                                      ? DCP_COMM_AG_RS
             : index % 8 < 6 || s.backend != DCP_BACKEND_HOST ? DCP_COMM_A2A
                                                                : DCP_COMM_P2P;
    s.tp = s.dcp <= 4 && test_rng_range(rng, 0, 1) ? 2 * s.dcp : s.dcp;
    s.block_size = pick(rng, blocks, 2);
    const uint32_t interleaves[] = {1, 2, 16, s.block_size};
    s.interleave = pick(rng, interleaves, 4);
    s.layers = (uint32_t)test_rng_range(rng, 1, 2);
    s.host_threads = test_rng_range(rng, 0, 3) ? 1 : (uint32_t)test_rng_range(rng, 2, 4);
    if (test_rng_range(rng, 0, 4) < 2) {
        const uint32_t *lat = latents[test_rng_range(rng, 0, 2)];
        s.kind = DCP_ATTN_MLA;
        s.kv_lora_rank = lat[0];
        s.rope_dim = lat[1];
        s.q_heads = s.tp * (uint32_t)test_rng_range(rng, 1, 3);
    } else {
        pick_gqa_heads(rng, &s);
    }
    return s;
}

/* A target length: often 1 or shorter than N * I (empty shards), else anything. */
static uint64_t random_length(struct test_rng *rng, const struct fixture_shape *s, uint64_t longest)
{
    const uint64_t spread = (uint64_t)s->dcp * s->interleave;
    const uint64_t kind = test_rng_range(rng, 0, 7);
    if (kind == 0)
        return 1;
    if (kind <= 2 && spread > 1)
        return test_rng_range(rng, 1, DCP_MIN(spread - 1, longest));
    return test_rng_range(rng, 1, longest);
}

/* Truncates one sequence longer than floor by a few tokens and regrows it with
 * different tokens in one attended step (speculative rejection). */
static void reject_and_regrow(struct harness *h, struct test_rng *rng, uint32_t n, const uint32_t *seqs,
                              uint64_t floor)
{
    const uint32_t s = seqs[test_rng_range(rng, 0, n - 1)];
    const uint64_t len = harness_seq_length(h, s);
    if (len <= floor + 1)
        return;
    const uint32_t cut = (uint32_t)test_rng_range(rng, 1, DCP_MIN(len - floor - 1, 6));
    harness_seq_truncate(h, s, len - cut);
    assert_true(harness_step(h, 1, &s, &cut));
    coverage.rejections++;
}

static void random_case(uint32_t index, bool quick)
{
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() + 7919ull * (index + 1));
    struct harness_config c = base_config();
    c.shape = random_shape(&rng, index);
    static const uint32_t contexts[] = {128, 320, 640};
    c.max_context = quick ? 96 : pick(&rng, contexts, 3);
    const uint32_t n = (uint32_t)test_rng_range(&rng, 1, 4);
    c.max_live = c.max_batch = n + 1;
    c.max_query_tokens = 4 * c.max_batch;
    char label[256];
    char name[32];
    snprintf(name, sizeof(name), "case %u", index);
    describe(label, sizeof(label), name, &c.shape);
    print_message("%s, %u sequences\n", label, n);
    coverage.cases++;
    coverage.sequences += n;
    coverage.kinds[c.shape.kind]++;
    coverage.dcp[c.shape.dcp]++;
    coverage.dtypes[c.shape.dtype]++;
    coverage.comms[c.shape.comm]++;
    coverage.split_threads += c.shape.host_threads > 1;
    struct harness *h = harness_create(&c, test_seed() ^ (0x5eedull << 20) ^ index, label);

    /* Room for decode (3 x 4), a regrow (6) and slack. */
    const uint64_t longest = c.max_context - 24;
    uint32_t seqs[MAX_SEQS];
    uint64_t target[MAX_SEQS];
    for (uint32_t i = 0; i < n; i++) {
        seqs[i] = harness_seq_create(h);
        target[i] = random_length(&rng, &c.shape, longest);
    }
    /* Sometimes the first sequence ends block aligned so it can be forked. */
    const uint64_t per_block = harness_tokens_per_block(h);
    const bool fork = longest / per_block >= 1 && test_rng_range(&rng, 0, 2) == 0;
    if (fork)
        target[0] = per_block * test_rng_range(&rng, 1, longest / per_block);
    prefill(h, &rng, n, seqs, target, c.max_step_tokens);

    uint32_t live = n;
    uint64_t floor = 0;
    if (fork) {
        seqs[live++] = harness_seq_fork(h, seqs[0]);
        coverage.forks++;
        floor = target[0]; /* neither may cut into the shared blocks */
    }
    if (test_rng_range(&rng, 0, 1))
        reject_and_regrow(h, &rng, live, seqs, floor);
    if (!fork && test_rng_range(&rng, 0, 2) == 0) { /* release one, re-create it on the freed blocks */
        const uint32_t i = (uint32_t)test_rng_range(&rng, 0, live - 1);
        harness_seq_release(h, seqs[i]);
        seqs[i] = harness_seq_create(h);
        const uint64_t len = random_length(&rng, &c.shape, longest);
        prefill(h, &rng, 1, &seqs[i], &len, c.max_step_tokens);
        coverage.releases++;
    }
    decode(h, &rng, live, seqs, quick ? 2 : 3);
    harness_destroy(&h);
}

static void test_random_deployments(void **state)
{
    (void)state;
    const bool quick = fixture_quick();
    const uint32_t cases = quick ? 8 : 120;
    for (uint32_t i = 0; i < cases; i++)
        random_case(i, quick);
    print_message("random deployments: %u cases, %u sequences; mla %u, gqa %u, mha %u; dcp 1/2/3/4/8: "
                  "%u/%u/%u/%u/%u; fp32/bf16/fp16/fp8: %u/%u/%u/%u; ag_rs %u, a2a %u, p2p %u; split-KV threads %u; "
                  "forks %u, releases %u, rejections %u\n",
                  coverage.cases, coverage.sequences, coverage.kinds[DCP_ATTN_MLA], coverage.kinds[DCP_ATTN_GQA],
                  coverage.kinds[DCP_ATTN_MHA], coverage.dcp[1], coverage.dcp[2], coverage.dcp[3], coverage.dcp[4],
                  coverage.dcp[8], coverage.dtypes[0], coverage.dtypes[1], coverage.dtypes[2], coverage.dtypes[3],
                  coverage.comms[DCP_COMM_AG_RS], coverage.comms[DCP_COMM_A2A], coverage.comms[DCP_COMM_P2P],
                  coverage.split_threads,
                  coverage.forks, coverage.releases, coverage.rejections);
}

/* ---- targeted cases ------------------------------------------------------- */

/* Every sequence shorter than N * I: most ranks hold nothing of it; a length-1
 * sequence sees only its own token. Both schemes, MLA and GQA. */
static void test_empty_shards(void **state)
{
    (void)state;
    const uint64_t before = harness_get_stats()->empty_shard_checks;
    for (int variant = 0; variant < 4; variant++) {
        struct test_rng rng;
        test_rng_seed(&rng, test_seed() + 31u * (uint32_t)variant);
        struct harness_config c = base_config();
        c.shape.dcp = 4;
        c.shape.interleave = 16;
        c.shape.comm = variant & 1 ? DCP_COMM_A2A : DCP_COMM_AG_RS;
        if (variant & 2) {
            c.shape.kind = DCP_ATTN_GQA;
            c.shape.tp = 8;
            c.shape.q_heads = 16;
            c.shape.kv_heads = 2;
            c.shape.head_dim = 32;
            c.shape.dtype = DCP_DTYPE_BF16;
        } else {
            c.shape.tp = 4;
            c.shape.q_heads = 8;
            c.shape.kv_lora_rank = 32;
            c.shape.rope_dim = 16;
        }
        char label[256];
        describe(label, sizeof(label), "empty shards", &c.shape);
        struct harness *h = harness_create(&c, test_seed() + (uint32_t)variant, label);
        uint32_t seqs[4];
        const uint64_t target[4] = {1, 5, 17, 40};
        for (uint32_t i = 0; i < 4; i++)
            seqs[i] = harness_seq_create(h);
        const uint32_t one = 1;
        assert_true(harness_step(h, 1, &seqs[0], &one)); /* length 1 */
        prefill(h, &rng, 4, seqs, target, c.max_step_tokens);
        decode(h, &rng, 4, seqs, 2); /* at most 48 of 64 */
        harness_destroy(&h);
    }
    assert_true(harness_get_stats()->empty_shard_checks > before);
}

/* The real MLA latent (512 + 64) of DeepSeek-V3 / Kimi K2 at dcp 8. */
static void test_real_mla(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() + 576);
    struct harness_config c = base_config();
    c.shape.tp = 8;
    c.shape.dcp = 8;
    c.shape.q_heads = 16;
    c.shape.kv_lora_rank = 512;
    c.shape.rope_dim = 64;
    c.shape.block_size = 64;
    c.shape.dtype = DCP_DTYPE_BF16;
    c.shape.comm = DCP_COMM_A2A;
    c.max_context = fixture_quick() ? 96 : 200;
    char label[256];
    describe(label, sizeof(label), "real mla", &c.shape);
    struct harness *h = harness_create(&c, test_seed() + 576, label);
    uint32_t seqs[3];
    const uint64_t target[3] = {3, 70, c.max_context - 16};
    for (uint32_t i = 0; i < 3; i++)
        seqs[i] = harness_seq_create(h);
    prefill(h, &rng, 3, seqs, target, c.max_step_tokens);
    decode(h, &rng, 3, seqs, 2);
    harness_destroy(&h);
}

/* More than one host thread per rank: the engine splits the KV of a rank's shard
 * and merges the splits; the results must not change. */
static void test_split_kv(void **state)
{
    (void)state;
    const uint64_t before = harness_get_stats()->split_steps;
    for (int variant = 0; variant < 2; variant++) {
        struct test_rng rng;
        test_rng_seed(&rng, test_seed() + 3u + (uint32_t)variant);
        struct harness_config c = base_config();
        c.shape.host_threads = 3 + (uint32_t)variant;
        c.shape.interleave = 2;
        c.max_context = fixture_quick() ? 128 : 320;
        if (variant == 0) {
            c.shape.kind = DCP_ATTN_GQA;
            c.shape.tp = 2;
            c.shape.dcp = 2;
            c.shape.q_heads = 4;
            c.shape.kv_heads = 1;
            c.shape.head_dim = 64;
            c.shape.comm = DCP_COMM_AG_RS;
        } else {
            c.shape.tp = 4;
            c.shape.dcp = 4;
            c.shape.q_heads = 8;
            c.shape.kv_lora_rank = 32;
            c.shape.rope_dim = 16;
            c.shape.dtype = DCP_DTYPE_FP16;
        }
        char label[256];
        describe(label, sizeof(label), "split-kv", &c.shape);
        struct harness *h = harness_create(&c, test_seed() + 77u + (uint32_t)variant, label);
        struct dcp_engine_info in;
        dcp_engine_get_info(harness_engine(h, false), &in);
        print_message("%s: backend %s\n", label, in.backend_detail);
        if (!strcmp(in.backend, "host")) {
            char want[32];
            snprintf(want, sizeof(want), "%u CPU threads per rank", c.shape.host_threads);
            assert_non_null(strstr(in.backend_detail, want));
        }
        uint32_t seqs[2] = {harness_seq_create(h), harness_seq_create(h)};
        const uint64_t target[2] = {c.max_context - 24, 40};
        prefill(h, &rng, 1, seqs, target, c.max_step_tokens);
        decode(h, &rng, 1, seqs, 3); /* one long sequence: splits */
        prefill(h, &rng, 1, &seqs[1], &target[1], c.max_step_tokens);
        decode(h, &rng, 2, seqs, 2);
        harness_destroy(&h);
    }
    if (fixture_backend() == DCP_BACKEND_HOST)
        assert_true(harness_get_stats()->split_steps > before);
}

/*
 * act_dtype bf16 and fp16: q, k, v and out in the activation dtype, against the
 * oracle on the rounded inputs and against the TP baseline, within the fp32 bound
 * plus one output rounding: dcp = 1 (the TP engine alone), dcp = 2 with ag_rs (its
 * ReduceScatter lands in fp32 and the merge kernel stores out) and with a2a (the
 * merge stores out), GQA and MLA, split-KV forced to 2 on some. A backend that read
 * q or k/v, or wrote out, as fp32 gives garbage and fails.
 */
static void test_act_dtypes(void **state)
{
    (void)state;
    static const struct {
        uint32_t dcp;
        enum dcp_comm_scheme comm;
        int mla;
        uint32_t splits;
    } cases[] = {{1, DCP_COMM_AG_RS, 0, 1}, {2, DCP_COMM_AG_RS, 0, 2}, {2, DCP_COMM_A2A, 0, 1},
                 {2, DCP_COMM_A2A, 1, 2}, {2, DCP_COMM_AG_RS, 1, 1}};
    const enum dcp_dtype acts[] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (int a = 0; a < 2; a++)
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            if (fixture_quick() && (i + (size_t)a) % 2)
                continue;
            struct test_rng rng;
            test_rng_seed(&rng, test_seed() + 11u + (uint32_t)(a * 16 + (int)i));
            struct harness_config c = base_config();
            c.act_dtype = acts[a];
            c.splits = cases[i].splits;
            c.shape.tp = 2;
            c.shape.dcp = cases[i].dcp;
            c.shape.interleave = 2;
            c.shape.comm = cases[i].comm;
            c.shape.dtype = a ? DCP_DTYPE_BF16 : DCP_DTYPE_FP32;
            c.max_context = 160;
            if (cases[i].mla) {
                c.shape.kind = DCP_ATTN_MLA;
                c.shape.q_heads = 4;
                c.shape.kv_lora_rank = 32;
                c.shape.rope_dim = 16;
            } else {
                c.shape.kind = DCP_ATTN_GQA;
                c.shape.q_heads = 4;
                c.shape.kv_heads = 1;
                c.shape.head_dim = 64;
            }
            char label[256];
            describe(label, sizeof(label), a ? "act fp16" : "act bf16", &c.shape);
            struct harness *h = harness_create(&c, test_seed() + 91u + (uint32_t)i, label);
            struct dcp_engine_info in;
            dcp_engine_get_info(harness_engine(h, false), &in);
            assert_int_equal(in.act_dtype, acts[a]);
            uint32_t seqs[2] = {harness_seq_create(h), harness_seq_create(h)};
            const uint64_t target[2] = {120, 9};
            prefill(h, &rng, 2, seqs, target, c.max_step_tokens);
            decode(h, &rng, 2, seqs, 2);
            harness_destroy(&h);
        }
}

/* parallel.comm_dtype bf16/fp16: the gathered queries and the partial outputs cross
 * the wire in it (the queries converted first when act_dtype differs), with both merge
 * schemes, GQA and MLA, act_dtype fp32 and bf16, dcp 2 and 4; the oracle's bound grows
 * by the wire's roundings (dcp_harness.c wire_tol). The bytes are engine_wire's. */
static void test_comm_dtypes(void **state)
{
    (void)state;
    const enum dcp_dtype wires[] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    const enum dcp_dtype acts[] = {DCP_DTYPE_FP32, DCP_DTYPE_BF16};
    const enum dcp_comm_scheme comms[] = {DCP_COMM_A2A, DCP_COMM_AG_RS};
    int n = 0;
    for (int w = 0; w < 2; w++)
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 2; k++, n++) {
                /* Quick: 4 of the 8, still both schemes, both kinds, both wires and acts. */
                if (fixture_quick() && ((n ^ (n >> 1)) & 1))
                    continue;
                const bool mla = ((n >> 1) ^ (n >> 2)) & 1;
                struct test_rng rng;
                test_rng_seed(&rng, test_seed() + 301u + (uint32_t)n);
                struct harness_config c = base_config();
                c.act_dtype = acts[a];
                c.splits = 1 + (uint32_t)(n % 3 == 0);
                c.shape.comm_dtype = wires[w];
                c.shape.comm = comms[k];
                c.shape.tp = n % 3 == 0 ? 4 : 2;
                c.shape.dcp = c.shape.tp;
                c.shape.interleave = 2;
                c.shape.dtype = DCP_DTYPE_FP32;
                c.max_context = 160;
                if (mla) {
                    c.shape.kind = DCP_ATTN_MLA;
                    c.shape.q_heads = c.shape.tp * 2;
                    c.shape.kv_lora_rank = 32;
                    c.shape.rope_dim = 16;
                } else {
                    c.shape.kind = DCP_ATTN_GQA;
                    c.shape.q_heads = c.shape.tp * 2;
                    c.shape.kv_heads = 1;
                    c.shape.head_dim = 64;
                }
                char label[256];
                describe(label, sizeof(label), w ? "wire fp16" : "wire bf16", &c.shape);
                struct harness *h = harness_create(&c, test_seed() + 391u + (uint32_t)n, label);
                struct dcp_engine_info in;
                dcp_engine_get_info(harness_engine(h, false), &in);
                assert_int_equal(in.comm_dtype, wires[w]);
                uint32_t seqs[2] = {harness_seq_create(h), harness_seq_create(h)};
                const uint64_t target[2] = {120, 9};
                prefill(h, &rng, 2, seqs, target, c.max_step_tokens);
                decode(h, &rng, 2, seqs, 2);
                harness_destroy(&h);
            }
}

/* Every split-KV factor gives the oracle's result, more splits than pages (empty
 * splits) included, with an uneven batch: forced factors from 1 to 9, or as many
 * as the backend's workspace holds. */
static void test_every_split_count(void **state)
{
    (void)state;
    for (uint32_t splits = 1; splits <= 9; splits++) {
        struct test_rng rng;
        test_rng_seed(&rng, test_seed() + 40u + splits);
        struct harness_config c = base_config();
        c.shape.host_threads = 5;
        c.shape.tp = 2;
        c.shape.dcp = 2;
        c.shape.q_heads = 4;
        c.shape.kv_lora_rank = 32;
        c.shape.rope_dim = 16;
        c.shape.dtype = DCP_DTYPE_BF16;
        c.max_context = 96;
        c.splits = splits;
        char label[256];
        describe(label, sizeof(label), "splits", &c.shape);
        struct harness *h = harness_create(&c, test_seed() + 90u + splits, label);
        uint32_t seqs[2] = {harness_seq_create(h), harness_seq_create(h)};
        const uint64_t target[2] = {c.max_context - 8, 9};
        prefill(h, &rng, 2, seqs, target, c.max_step_tokens);
        decode(h, &rng, 2, seqs, 2);
        harness_destroy(&h);
    }
    assert_true(harness_get_stats()->most_splits >= 9);
}

/*
 * A NaN in the KV cache (docs/design.md §4): one element of one position of
 * sequence A (in its K row, or its V row; MLA: the latent part) makes every row of
 * A that sees the position NaN in its LSE and every output element, for every
 * split-KV factor from 1 to 9, DCP 1, 2 and 4 and both merge schemes, on MLA and
 * GQA, as the oracle says; the rows that do not see it (the earlier tokens of the
 * multi-token step that appends it) and sequence B, in the same batches, keep the
 * oracle's finite result, and the TP baseline agrees.
 */
static void test_nan_in_cache(void **state)
{
    (void)state;
    static const uint32_t dcps[] = {1, 2, 4};
    const uint64_t before = harness_get_stats()->nan_rows;
    for (uint32_t di = 0; di < 3; di++)
        for (uint32_t comm = 0; comm < (dcps[di] == 1 ? 1u : 2u); comm++)
            for (uint32_t splits = 1; splits <= 9; splits++) {
                struct test_rng rng;
                test_rng_seed(&rng, test_seed() + 1000u * di + 100u * comm + splits);
                struct harness_config c = base_config();
                c.shape.host_threads = 5;
                c.shape.dcp = c.shape.tp = dcps[di];
                c.shape.comm = comm ? DCP_COMM_A2A : DCP_COMM_AG_RS;
                c.shape.interleave = splits % 2 ? 1 : 16;
                c.shape.q_heads = 2 * c.shape.tp;
                if (splits % 2 == 0) {
                    c.shape.kind = DCP_ATTN_GQA;
                    c.shape.kv_heads = 1;
                    c.shape.head_dim = 32;
                    c.shape.dtype = DCP_DTYPE_BF16;
                } else {
                    c.shape.kv_lora_rank = 32;
                    c.shape.rope_dim = 16;
                }
                c.max_context = 96;
                c.splits = splits;
                const bool value = splits % 3 == 0;
                char label[256];
                describe(label, sizeof(label), value ? "NaN in a value" : "NaN in a key", &c.shape);
                const uint64_t nan_before = harness_get_stats()->nan_rows;
                struct harness *h = harness_create(&c, test_seed() + 500u + splits, label);
                uint32_t seqs[2] = {harness_seq_create(h), harness_seq_create(h)};
                const uint64_t target[2] = {c.max_context - 16, 30};
                harness_poison(h, seqs[0], test_rng_range(&rng, 0, target[0] - 1), value);
                prefill(h, &rng, 2, seqs, target, c.max_step_tokens);
                decode(h, &rng, 2, seqs, 2);
                harness_destroy(&h);
                if (harness_get_stats()->nan_rows == nan_before)
                    fail_msg("%s: the NaN reached no row", label);
            }
    print_message("NaN in the cache: %llu NaN rows checked\n",
                  (unsigned long long)(harness_get_stats()->nan_rows - before));
}

/* A full pool, released and refilled: new sequences land on pages that hold old
 * tokens (and on the released sequence's slot); nothing stale may show in their results. */
static void test_block_reuse(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() + 11);
    struct harness_config c = base_config();
    c.shape.interleave = 2;
    c.shape.comm = DCP_COMM_AG_RS;
    c.num_blocks = 6; /* 6 x 32 tokens */
    c.max_context = 192;
    struct harness *h = harness_create(&c, test_seed() + 12, "block reuse");
    dcp_engine *e = harness_engine(h, false), *base = harness_engine(h, true);
    const uint32_t a = harness_seq_create(h);
    const uint64_t full = 186;
    prefill(h, &rng, 1, &a, &full, c.max_step_tokens);
    decode(h, &rng, 1, &a, 1);
    assert_int_equal(dcp_engine_free_blocks(e), 0);
    assert_int_equal(dcp_engine_free_blocks(base), 0);
    const uint32_t old_id = harness_seq_id(h, a, false);
    harness_seq_release(h, a);
    assert_int_equal(dcp_engine_free_blocks(e), 6);

    uint32_t seqs[2] = {harness_seq_create(h), harness_seq_create(h)};
    assert_int_not_equal(harness_seq_id(h, seqs[0], false), old_id); /* its slot, under a new id */
    const uint64_t target[2] = {100, 56};
    prefill(h, &rng, 2, seqs, target, c.max_step_tokens);
    assert_int_equal(dcp_engine_free_blocks(e), 0);
    decode(h, &rng, 2, seqs, 1);
    /* Shrink one across a block boundary; the other grows into the freed block. */
    harness_seq_truncate(h, seqs[0], 50);
    assert_int_equal(dcp_engine_free_blocks(e), 2);
    const uint64_t grow[2] = {50, 120};
    prefill(h, &rng, 2, seqs, grow, c.max_step_tokens);
    decode(h, &rng, 2, seqs, 1);
    harness_destroy(&h);
}

/* A block-aligned prefix shared by a fork; both then follow their own tokens. */
static void test_fork_diverge(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() + 21);
    struct harness_config c = base_config();
    c.shape.kind = DCP_ATTN_GQA;
    c.shape.tp = 4;
    c.shape.dcp = 2;
    c.shape.q_heads = 8;
    c.shape.kv_heads = 2;
    c.shape.head_dim = 32;
    c.shape.interleave = 2;
    c.shape.dtype = DCP_DTYPE_FP8_E4M3;
    c.shape.layers = 2;
    struct harness *h = harness_create(&c, test_seed() + 22, "fork");
    dcp_engine *e = harness_engine(h, false);
    const uint32_t a = harness_seq_create(h);
    const uint64_t prefix = 2 * harness_tokens_per_block(h);
    prefill(h, &rng, 1, &a, &prefix, c.max_step_tokens);
    const uint64_t free_before = dcp_engine_free_blocks(e);
    uint32_t seqs[3] = {a, harness_seq_fork(h, a), 0};
    assert_int_equal(dcp_engine_free_blocks(e), free_before); /* shared, not copied */
    decode(h, &rng, 2, seqs, 3);
    /* Cutting into the shared prefix is refused and changes nothing. */
    const uint32_t id = harness_seq_id(h, a, false);
    const uint64_t len = dcp_seq_length(e, id);
    assert_int_equal(dcp_seq_truncate(e, id, prefix - 1), DCP_EINVAL);
    assert_int_equal(dcp_seq_length(e, id), len);
    /* Rejected drafts down to the fork point, then regrown differently. */
    harness_seq_truncate(h, a, prefix);
    const uint32_t regrow = 3;
    assert_true(harness_step(h, 1, &a, &regrow));
    /* A second fork of the child's own aligned length, then the parent goes. */
    const uint64_t aligned = 3 * harness_tokens_per_block(h);
    prefill(h, &rng, 1, &seqs[1], &aligned, c.max_step_tokens);
    seqs[2] = harness_seq_fork(h, seqs[1]);
    harness_seq_release(h, a);
    decode(h, &rng, 2, &seqs[1], 3);
    harness_destroy(&h);
}

/* Speculative decoding: 4 draft tokens per round, a random number accepted, the
 * rest truncated and regrown with other tokens; queries cross shard boundaries. */
static void test_truncate_regrow(void **state)
{
    (void)state;
    struct test_rng rng;
    test_rng_seed(&rng, test_seed() + 41);
    struct harness_config c = base_config();
    c.shape.tp = 3;
    c.shape.dcp = 3;
    c.shape.q_heads = 6;
    c.shape.kv_lora_rank = 32;
    c.shape.rope_dim = 16;
    c.shape.interleave = 2;
    c.shape.dtype = DCP_DTYPE_FP16;
    c.shape.comm = DCP_COMM_AG_RS;
    struct harness *h = harness_create(&c, test_seed() + 42, "speculative");
    uint32_t seqs[2] = {harness_seq_create(h), harness_seq_create(h)};
    const uint64_t target[2] = {37, 5};
    prefill(h, &rng, 2, seqs, target, c.max_step_tokens);
    const uint32_t drafts[2] = {4, 4};
    for (int round = 0; round < 8; round++) {
        assert_true(harness_step(h, 2, seqs, drafts));
        for (uint32_t i = 0; i < 2; i++) {
            const uint64_t len = harness_seq_length(h, seqs[i]);
            harness_seq_truncate(h, seqs[i], len - test_rng_range(&rng, 1, 4));
        }
    }
    /* A deep rollback across blocks, then regrowth. */
    harness_seq_truncate(h, seqs[0], 9);
    const uint64_t regrow[2] = {60, harness_seq_length(h, seqs[1]) + 1};
    prefill(h, &rng, 2, seqs, regrow, c.max_step_tokens);
    decode(h, &rng, 2, seqs, 2);
    harness_destroy(&h);
}

/*
 * Leaner communication: replicate_q (the caller passes every gathered head's
 * queries, no Q gather) and merge_after_uv (MLA partial outputs projected by W_UV
 * before the merge) in every combination with both merge schemes, on one DCP group
 * (tp = dcp = 4) and on two (tp 4, dcp 2: the second group's heads and W_UV rows
 * are offset), with split-KV on some (splits merged in latent space, then
 * projected); GQA with replicate_q. The oracle projects its float64 latent output.
 */
static void test_lean_comm(void **state)
{
    (void)state;
    const uint64_t split_before = harness_get_stats()->split_steps;
    for (int variant = 0; variant < 10; variant++) {
        struct test_rng rng;
        test_rng_seed(&rng, test_seed() + 808u + (uint32_t)variant);
        struct harness_config c = base_config();
        c.max_context = fixture_quick() ? 80 : 128;
        c.shape.layers = 2;
        c.shape.comm = variant & 1 ? DCP_COMM_A2A : DCP_COMM_AG_RS;
        c.shape.replicate_q = variant & 2;
        c.shape.tp = 4;
        c.shape.dcp = variant & 4 ? 2 : 4;
        c.shape.interleave = 2;
        c.shape.host_threads = 2;
        c.splits = variant % 3 == 0 ? 3 : 0;
        if (variant < 8) {
            c.shape.merge_after_uv = variant < 4 || variant >= 6;
            c.shape.q_heads = 8;
            c.shape.kv_lora_rank = 32;
            c.shape.rope_dim = 16;
            c.shape.v_head_dim = 20;
            c.shape.dtype = variant & 4 ? DCP_DTYPE_BF16 : DCP_DTYPE_FP32;
        } else {
            c.shape.kind = DCP_ATTN_GQA;
            c.shape.replicate_q = true;
            c.shape.q_heads = 8;
            c.shape.kv_heads = 1;
            c.shape.head_dim = 32;
        }
        char label[300];
        describe(label, sizeof(label), c.shape.replicate_q ? "lean, replicate_q" : "lean", &c.shape);
        if (c.shape.merge_after_uv)
            snprintf(label + strlen(label), sizeof(label) - strlen(label), " merge_after_uv v_head_dim=%u",
                     c.shape.v_head_dim);
        struct harness *h = harness_create(&c, test_seed() + 909u + (uint32_t)variant, label);
        struct dcp_engine_info in;
        dcp_engine_get_info(harness_engine(h, false), &in);
        assert_true(in.replicate_q == c.shape.replicate_q);
        assert_true(in.merge_after_uv == c.shape.merge_after_uv);
        if (c.shape.merge_after_uv)
            assert_int_equal(in.out_dim, c.shape.v_head_dim);
        else
            assert_int_equal(in.out_dim, in.v_dim);
        uint32_t seqs[3];
        const uint64_t target[3] = {3, 41, c.max_context - 20};
        for (uint32_t i = 0; i < 3; i++)
            seqs[i] = harness_seq_create(h);
        prefill(h, &rng, 3, seqs, target, c.max_step_tokens);
        decode(h, &rng, 3, seqs, 2);
        harness_destroy(&h);
    }
    if (fixture_backend() == DCP_BACKEND_HOST)
        assert_true(harness_get_stats()->split_steps > split_before);
}

/* merge_after_uv with 16-bit destinations: uv_proj sums in fp32 and stores once in
 * the destination's dtype, the wire's (comm_dtype, dcp > 1, both schemes) or the
 * caller's out (act_dtype, dcp = 1); and act bf16 with a bf16 wire. Oracle-checked
 * (the bound grows by those roundings, as for test_comm_dtypes). */
static void test_uv_dtypes(void **state)
{
    (void)state;
    static const struct {
        enum dcp_dtype act, wire;
        enum dcp_comm_scheme comm;
        uint32_t dcp;
    } cases[] = {
        {DCP_DTYPE_FP32, DCP_DTYPE_BF16, DCP_COMM_A2A, 4},
        {DCP_DTYPE_FP32, DCP_DTYPE_FP16, DCP_COMM_AG_RS, 2},
        {DCP_DTYPE_BF16, DCP_DTYPE_BF16, DCP_COMM_AG_RS, 4},
        {DCP_DTYPE_BF16, DCP_DTYPE_FP32, DCP_COMM_A2A, 2},
        {DCP_DTYPE_BF16, DCP_DTYPE_BF16, DCP_COMM_A2A, 1},
        {DCP_DTYPE_FP16, DCP_DTYPE_BF16, DCP_COMM_A2A, 1},
    };
    for (size_t n = 0; n < sizeof(cases) / sizeof(cases[0]); n++) {
        if (fixture_quick() && n % 2)
            continue;
        struct test_rng rng;
        test_rng_seed(&rng, test_seed() + 611u + (uint32_t)n);
        struct harness_config c = base_config();
        c.act_dtype = cases[n].act;
        c.splits = n % 3 == 0 ? 2 : 0;
        c.max_context = 96;
        c.shape.comm_dtype = cases[n].wire;
        c.shape.comm = cases[n].comm;
        c.shape.tp = 4;
        c.shape.dcp = cases[n].dcp;
        c.shape.interleave = 2;
        c.shape.merge_after_uv = true;
        c.shape.q_heads = 8;
        c.shape.kv_lora_rank = 32;
        c.shape.rope_dim = 16;
        c.shape.v_head_dim = 20;
        char label[300];
        describe(label, sizeof(label), "merge_after_uv dtypes", &c.shape);
        struct harness *h = harness_create(&c, test_seed() + 677u + (uint32_t)n, label);
        struct dcp_engine_info in;
        dcp_engine_get_info(harness_engine(h, false), &in);
        assert_true(in.merge_after_uv);
        assert_int_equal(in.act_dtype, cases[n].act);
        uint32_t seqs[2] = {harness_seq_create(h), harness_seq_create(h)};
        const uint64_t target[2] = {70, 9};
        prefill(h, &rng, 2, seqs, target, c.max_step_tokens);
        decode(h, &rng, 2, seqs, 2);
        harness_destroy(&h);
    }
}

/* GQA (V in its own cache) with a step of exactly max_query_tokens tokens: the
 * host backend once sized the attention scratch without the V tile. */
static void test_gqa_full_query_step(void **state)
{
    (void)state;
    struct harness_config c = base_config();
    c.shape.kind = DCP_ATTN_GQA;
    c.shape.q_heads = 4;
    c.shape.kv_heads = 1;
    c.shape.head_dim = 64;
    c.max_query_tokens = 8;
    struct harness *h = harness_create(&c, test_seed() + 8, "gqa full query step");
    const uint32_t seq = harness_seq_create(h), grow = 8;
    assert_true(harness_step(h, 1, &seq, &grow));
    assert_true(harness_step(h, 1, &seq, &grow));
    harness_destroy(&h);
}

static int print_stats(void **state)
{
    (void)state;
    harness_print_stats(stdout);
    return 0;
}

int main(void)
{
    const int status = fixture_backend_check();
    if (status)
        return status;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_shards),
        cmocka_unit_test(test_real_mla),
        cmocka_unit_test(test_split_kv),
        cmocka_unit_test(test_every_split_count),
        cmocka_unit_test(test_nan_in_cache),
        cmocka_unit_test(test_block_reuse),
        cmocka_unit_test(test_fork_diverge),
        cmocka_unit_test(test_truncate_regrow),
        cmocka_unit_test(test_gqa_full_query_step),
        cmocka_unit_test(test_lean_comm),
        cmocka_unit_test(test_act_dtypes),
        cmocka_unit_test(test_comm_dtypes),
        cmocka_unit_test(test_uv_dtypes),
        cmocka_unit_test(test_random_deployments),
    };
    return cmocka_run_group_tests(tests, NULL, print_stats);
}
