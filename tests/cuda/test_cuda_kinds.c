/*
 * The layer kinds' kernels (docs/design.md §13) through the CUDA backend on the
 * test doubles: the backend finds their entries in the real embedded module,
 * checks and launches them with their families' grids and block sizes, and the
 * double runs each through its CPU implementation with the same parameter
 * struct, so a launch must give exactly what the CPU implementation gives.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "cuda_test_util.h"
#include "dcp/dcp.h"
#include "dcp_kernels/convert.h"
#include "dcp_kernels/placement.h"
#include "dcp_kernels/variants.h"

/** The settings of every engine here: two virtual ranks of one DCP group on the doubles. */
static void base_config(struct dcp_config *c)
{
    dcp_config_defaults(c);
    c->hardware.gpu = "test";
    c->hardware.memory_bytes = 1e9;
    c->hardware.hbm_bandwidth = 1e12;
    c->hardware.link_bandwidth = 1e11;
    c->hardware.gpus_per_node = 8;
    c->parallel.tp = 2;
    c->parallel.dcp = 2;
    c->memory.block_size = 16;
    c->memory.reserve_bytes = 0;
    c->workload.context_lengths[0] = 256;
    c->workload.num_context_lengths = 1;
    c->runtime.backend = DCP_BACKEND_CUDA;
}

static dcp_deployment *deploy(const struct dcp_config *c)
{
    dcp_diag *d = NULL;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    const int err = dcp_deployment_from_config(c, d, &dep);
    dcp_diag_print(d, stderr);
    dcp_diag_destroy(&d);
    assert_int_equal(err, DCP_OK);
    return dep;
}

/** A CUDA engine on the doubles (GQA, bf16 KV, two virtual ranks). */
static dcp_deployment *deployment(void)
{
    struct dcp_config c;
    base_config(&c);
    c.model.name = "cuda-kinds";
    c.model.attention = DCP_ATTN_GQA;
    c.model.num_layers = 1;
    c.model.num_q_heads = 8;
    c.model.num_kv_heads = 1;
    c.model.head_dim = 128;
    c.model.kv_dtype = DCP_DTYPE_BF16;
    return deploy(&c);
}

/** Device copies of host arrays on one rank, freed together. */
struct dev {
    dcp_rank *r;
    void *ptr[16];
    unsigned n;
};

static uint64_t dev_copy(struct dev *d, const void *host, size_t bytes)
{
    assert_true(d->n < 16);
    void **p = &d->ptr[d->n++];
    assert_int_equal(dcp_rank_alloc(d->r, bytes, p), DCP_OK);
    assert_int_equal(dcp_rank_upload(d->r, *p, host, bytes), DCP_OK);
    return (uint64_t)(uintptr_t)*p;
}

static void dev_read(struct dev *d, void *host, uint64_t addr, size_t bytes)
{
    assert_int_equal(dcp_rank_download(d->r, host, (void *)(uintptr_t)addr, bytes), DCP_OK);
}

static void dev_free(struct dev *d)
{
    for (unsigned i = 0; i < d->n; i++)
        dcp_rank_free(d->r, d->ptr[i]);
    d->n = 0;
}

/** Launches kernel id through the backend and checks that the double served it. */
static void backend_launch(dcp_rank *r, enum dcpk_kernel_id id, const void *params)
{
    struct dcp_cuda *cu = fake_open();
    const struct fake_cuda_stats before = fake_stats(cu);
    const int err = r->engine->ops->launch(r, id, params);
    if (err)
        fprintf(stderr, "dcpk_%s: %s\n", dcpk_kernels[id].name, dcp_last_error());
    assert_int_equal(err, DCP_OK);
    assert_int_equal(dcp_rank_synchronize(r), DCP_OK);
    const struct fake_cuda_stats after = fake_stats(cu);
    assert_true(after.launches > before.launches);
    assert_int_equal(after.unserved_launches, before.unserved_launches);
    dcp_cuda_close(&cu); /* the engine keeps the double loaded */
}

/** The CPU implementation of a family over its whole grid. */
static void cpu_run(enum dcpk_kernel_id id, const void *params)
{
    const struct dcpk_kernel_desc *k = &dcpk_kernels[id];
    const size_t bytes = k->scratch(params);
    void *scratch = malloc(bytes ? bytes : 1);
    assert_non_null(scratch);
    k->cpu(params, 0, dcpk_grid_items(k->grid(params)), scratch);
    free(scratch);
}

/*
 * dcpk_sink, dcpk_index_score and dcpk_topk launched by the backend give the CPU
 * implementation's results exactly (the double runs it with the struct the
 * backend passed), and none of them is refused or left unserved.
 */
static void test_kind_kernels_launch(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    fake_env_reset();
    dcp_deployment *dep = deployment();
    struct dcp_engine_params ep;
    dcp_engine_default_params(&ep);
    ep.deployment = dep;
    ep.kv_budget_bytes = 4e6;
    dcp_engine *e = NULL;
    assert_int_equal(dcp_engine_create(&ep, &e), DCP_OK);
    struct dev d = {.r = dcp_engine_rank(e, 1)};

    /* The sink on 5 rows of 3 heads: ordinary, empty, no sink, NaN rows. */
    enum { ROWS = 5, V = 24 };
    float out[ROWS * V], lse[ROWS] = {0.5f, -INFINITY, 1.0f, NAN, 2.0f};
    const float sinks[3] = {0.25f, 3.0f, -INFINITY};
    for (int i = 0; i < ROWS * V; i++)
        out[i] = lse[i / V] == -INFINITY ? 0.0f : 0.01f * (float)i;
    struct dcpk_sink_params sp = {
        .out = dev_copy(&d, out, sizeof(out)), .lse = dev_copy(&d, lse, sizeof(lse)),
        .sinks = dev_copy(&d, sinks, sizeof(sinks)), .rows = ROWS, .num_heads = 3, .v_dim = V, .out_dtype = DCPK_FP32,
    };
    backend_launch(d.r, DCPK_KERNEL_sink, &sp);
    float got_out[ROWS * V], got_lse[ROWS];
    dev_read(&d, got_out, sp.out, sizeof(got_out));
    dev_read(&d, got_lse, sp.lse, sizeof(got_lse));
    sp.out = (uint64_t)(uintptr_t)out;
    sp.lse = (uint64_t)(uintptr_t)lse;
    sp.sinks = (uint64_t)(uintptr_t)sinks;
    cpu_run(DCPK_KERNEL_sink, &sp);
    assert_memory_equal(got_out, out, sizeof(out));
    assert_memory_equal(got_lse, lse, sizeof(lse));
    dev_free(&d);

    /* The indexer of rank 1 of 2 (interleave 2): 2 sequences, 3 query tokens, 4 heads of 32, fp8 keys. */
    enum { H = 4, D = 32, T = 3, BS = 8, PAGES = 6, STRIDE = 40 };
    const int32_t seq_lens[2] = {40, 9}, q_start[3] = {0, 2, 3}, table[2 * 3] = {5, 2, 0, 4, -1, -1};
    unsigned char keys[PAGES * BS * D];
    uint16_t q[T * H * D];
    float w[T * H], scores[T * STRIDE];
    int32_t lens[T];
    for (size_t i = 0; i < sizeof(keys); i++) { /* e4m3 values of both signs, no NaN (S.1111.111) */
        keys[i] = (unsigned char)(i * 37 % 255);
        keys[i] -= (keys[i] & 0x7f) == 0x7f;
    }
    for (size_t i = 0; i < T * H * D; i++)
        dcpk_store_as(q, i, DCPK_BF16, sinf(0.3f * (float)i));
    for (size_t i = 0; i < T * H; i++)
        w[i] = 0.5f - 0.1f * (float)i;
    for (size_t i = 0; i < T * STRIDE; i++)
        scores[i] = 7.0f;
    struct dcpk_index_score_params ip = {
        .q = dev_copy(&d, q, sizeof(q)), .weights = dev_copy(&d, w, sizeof(w)), .k_cache = dev_copy(&d, keys, sizeof(keys)),
        .block_table = dev_copy(&d, table, sizeof(table)), .seq_lens = dev_copy(&d, seq_lens, sizeof(seq_lens)),
        .q_start = dev_copy(&d, q_start, sizeof(q_start)), .scores = dev_copy(&d, scores, sizeof(scores)),
        .score_lens = dev_copy(&d, lens, sizeof(lens)), .score_stride = STRIDE, .batch = 2, .num_q_tokens = T,
        .num_index_heads = H, .index_dim = D, .block_size = BS, .max_blocks = 3, .rank = 1, .group_size = 2,
        .interleave = 2, .dtype = DCPK_FP8_E4M3, .kv_scale = 0.5f, .q_dtype = DCPK_BF16,
    };
    backend_launch(d.r, DCPK_KERNEL_index_score, &ip);
    float got_scores[T * STRIDE];
    int32_t got_lens[T];
    dev_read(&d, got_scores, ip.scores, sizeof(got_scores));
    dev_read(&d, got_lens, ip.score_lens, sizeof(got_lens));

    /* Its local top-5 on the device, from the scores the launch left there. */
    enum { K = 5 };
    float top_s[T * K];
    int32_t top_p[T * K];
    const struct dcpk_topk_params tp = {
        .scores = ip.scores, .row_lens = ip.score_lens, .out_scores = dev_copy(&d, top_s, sizeof(top_s)),
        .out_positions = dev_copy(&d, top_p, sizeof(top_p)), .row_stride = STRIDE, .rows = T, .n_src = 1,
        .n_entries = STRIDE, .k = K, .rank = 1, .group_size = 2, .interleave = 2,
    };
    backend_launch(d.r, DCPK_KERNEL_topk, &tp);
    float got_top_s[T * K];
    int32_t got_top_p[T * K];
    dev_read(&d, got_top_s, tp.out_scores, sizeof(got_top_s));
    dev_read(&d, got_top_p, tp.out_positions, sizeof(got_top_p));

    /* The same on the host. */
    ip.q = (uint64_t)(uintptr_t)q;
    ip.weights = (uint64_t)(uintptr_t)w;
    ip.k_cache = (uint64_t)(uintptr_t)keys;
    ip.block_table = (uint64_t)(uintptr_t)table;
    ip.seq_lens = (uint64_t)(uintptr_t)seq_lens;
    ip.q_start = (uint64_t)(uintptr_t)q_start;
    ip.scores = (uint64_t)(uintptr_t)scores;
    ip.score_lens = (uint64_t)(uintptr_t)lens;
    cpu_run(DCPK_KERNEL_index_score, &ip);
    assert_memory_equal(got_scores, scores, sizeof(scores));
    assert_memory_equal(got_lens, lens, sizeof(lens));
    assert_int_equal(lens[0], (int32_t)dcpk_local_length(39, 1, 2, 2)); /* token 0 sits at position 38 */
    struct dcpk_topk_params hp = tp;
    hp.scores = ip.scores;
    hp.row_lens = ip.score_lens;
    hp.out_scores = (uint64_t)(uintptr_t)top_s;
    hp.out_positions = (uint64_t)(uintptr_t)top_p;
    cpu_run(DCPK_KERNEL_topk, &hp);
    assert_memory_equal(got_top_s, top_s, sizeof(top_s));
    assert_memory_equal(got_top_p, top_p, sizeof(top_p));
    for (int i = 0; i < T * K; i++) /* rank 1's keys (each token sees lens[t] of them), then padding */
        assert_true(i % K < lens[i / K] ? top_p[i] >= 0 && dcpk_owner_rank((uint64_t)top_p[i], 2, 2) == 1
                                        : top_p[i] == -1);

    dev_free(&d);
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

/* A launch of a kind's kernel that its GPU entry would not serve is refused by name. */
static void test_kind_launch_checks(void **state)
{
    (void)state;
    const struct dcpk_attn_variant *v = dcpk_attn_variant_at(0);
    struct dcpk_sink_params s = {.out = 16, .lse = 32, .sinks = 48, .rows = 1, .num_heads = 1, .out_dtype = DCPK_BF16};
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_sink, &s, 128, 0));
    s.out_dtype = DCPK_FP8_E4M3;
    assert_contains(cuda_launch_problem(v, DCPK_KERNEL_sink, &s, 128, 0), "activation dtype");
    s.out_dtype = DCPK_FP32;
    s.lse = 34;
    assert_contains(cuda_launch_problem(v, DCPK_KERNEL_sink, &s, 128, 0), "misaligned");

    const struct dcpk_index_score_params ok = {
        .q = 64, .weights = 64, .k_cache = 64, .block_table = 64, .seq_lens = 64, .q_start = 64, .scores = 64,
        .score_lens = 64, .batch = 1, .index_dim = 128, .block_size = 16, .group_size = 1, .interleave = 1,
        .dtype = DCPK_FP8_E4M3, .q_dtype = DCPK_BF16,
    };
    struct dcpk_index_score_params ip = ok;
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_index_score, &ip, 256, 0));
    ip.index_dim = DCPK_INDEX_SCORE_MAX_DIM + 1;
    assert_contains(cuda_launch_problem(v, DCPK_KERNEL_index_score, &ip, 256, 0), "DCPK_INDEX_SCORE_MAX_DIM");
    ip = ok;
    ip.block_size = 0;
    assert_contains(cuda_launch_problem(v, DCPK_KERNEL_index_score, &ip, 256, 0), "zero");
    ip = ok;
    ip.q = 65;
    assert_contains(cuda_launch_problem(v, DCPK_KERNEL_index_score, &ip, 256, 0), "misaligned");
    ip = ok;
    ip.q_dtype = DCPK_FP8_E4M3;
    assert_contains(cuda_launch_problem(v, DCPK_KERNEL_index_score, &ip, 256, 0), "activation dtype");

    struct dcpk_topk_params tp = {.scores = 64, .out_scores = 64, .out_positions = 64, .rows = 1, .k = 4,
                                  .group_size = 2, .interleave = 1};
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_topk, &tp, 256, 0));
    tp.interleave = 0; /* local keys need the placement map */
    assert_contains(cuda_launch_problem(v, DCPK_KERNEL_topk, &tp, 256, 0), "zero");
    tp.positions = 128; /* gathered candidates do not */
    assert_null(cuda_launch_problem(v, DCPK_KERNEL_topk, &tp, 256, 0));
    tp.out_positions = 66;
    assert_contains(cuda_launch_problem(v, DCPK_KERNEL_topk, &tp, 256, 0), "misaligned");
}

/* Windows and sparse attention: the entries the backend launches take them; launches they would not serve are refused. */
static void test_attention_kind_checks(void **state)
{
    (void)state;
    const struct dcpk_attn_params ok = {
        .q = 0x1000, .k_cache = 0x2000, .v_cache = 0x3000, .block_table = 0x3100, .seq_lens = 0x3200,
        .q_start = 0x3200, .out = 0x4000, .lse = 0x5000, .batch = 1, .num_q_tokens = 1, .num_heads = 8,
        .heads_per_chunk = 8, .num_kv_heads = 1, .head_tile = 8, .qk_dim = 128, .v_dim = 128,
        .v_row_stride = 128, .block_size = 16, .max_blocks = 4, .group_size = 1, .interleave = 1,
        .num_splits = 1, .dtype = DCPK_BF16, .scale = 0.1f, .kv_scale = 1.0f, .window = 128, .ring_pages = 9,
    };
    /* Every entry reads a window and ring pages, tensor-core and SIMT. */
    const struct dcpk_attn_variant *tc = dcpk_attn_variant_find(128, 128, 0, DCPK_BF16);
    assert_true(tc->tensor_core);
    assert_null(cuda_launch_problem(tc, DCPK_KERNEL_attn, &ok, tc->threads, tc->smem_bytes));
    struct dcpk_attn_params p = ok;
    p.dtype = DCPK_FP32;
    const struct dcpk_attn_variant *simt = dcpk_attn_variant_find(128, 128, 0, DCPK_FP32);
    assert_false(simt->tensor_core);
    assert_null(cuda_launch_problem(simt, DCPK_KERNEL_attn, &p, simt->threads, simt->smem_bytes));

    const struct dcpk_sparse_attn_params sok = {
        .q = 0x1000, .k_cache = 0x2000, .v_cache = 0x2000, .block_table = 0x3100, .seq_lens = 0x3200,
        .q_start = 0x3200, .topk = 0x3400, .out = 0x4000, .lse = 0x5000, .topk_stride = 2048, .num_topk = 2048,
        .batch = 1, .num_q_tokens = 1, .num_heads = 128, .heads_per_chunk = 16, .num_kv_heads = 1,
        .head_tile = 32, .qk_dim = 576, .v_dim = 512, .v_row_stride = 576, .block_size = 64, .max_blocks = 4,
        .rank = 1, .group_size = 8, .interleave = 1, .dtype = DCPK_FP8_E4M3, .scale = 0.1f, .kv_scale = 1.0f,
    };
    const struct dcpk_attn_variant *sv = dcpk_sparse_variant_find(576, 512, 1, DCPK_FP8_E4M3);
    assert_true(sv && sv->tensor_core); /* DSA's fp8 latents on tensor cores */
    assert_null(cuda_launch_problem(sv, DCPK_KERNEL_sparse_attn, &sok, sv->threads, sv->smem_bytes));
    assert_contains(cuda_launch_problem(sv, DCPK_KERNEL_sparse_attn, &sok, sv->threads, sv->smem_bytes - 4),
                    "shared memory");
    struct dcpk_sparse_attn_params sp = sok;
    sp.v_cache = 0x3000; /* MLA reads V from the K rows */
    assert_contains(cuda_launch_problem(sv, DCPK_KERNEL_sparse_attn, &sp, sv->threads, sv->smem_bytes), "V layout");
    sp = sok;
    sp.topk = 0x3402;
    assert_contains(cuda_launch_problem(sv, DCPK_KERNEL_sparse_attn, &sp, sv->threads, sv->smem_bytes), "misaligned");
    sp = sok;
    sp.head_tile = 0;
    assert_contains(cuda_launch_problem(sv, DCPK_KERNEL_sparse_attn, &sp, sv->threads, sv->smem_bytes), "zero");
    sp = sok;
    sp.dtype = DCPK_BF16;
    assert_contains(cuda_launch_problem(sv, DCPK_KERNEL_sparse_attn, &sp, sv->threads, sv->smem_bytes), "dtype");
    sp = sok;
    sp.precision = 2;
    assert_contains(cuda_launch_problem(sv, DCPK_KERNEL_sparse_attn, &sp, sv->threads, sv->smem_bytes), "precision");
}

/*
 * An MLA bf16 model of every kind (a 4-token window with a sink, DSA's sparse top-k
 * with the sharded indexer, a full layer) on the CUDA backend over the doubles: the
 * engine takes it, with its tensor-core attention and sparse entries (the sparse
 * one's list beside the attention entry's plan: the launches go through the launch
 * check with that shared memory).
 */
static void test_mla_kinds_engine(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    fake_env_reset();
    struct dcp_config c;
    base_config(&c);
    c.model.name = "cuda-kinds-mla";
    c.model.attention = DCP_ATTN_MLA;
    c.model.num_layers = 3;
    c.model.num_q_heads = 16;
    c.model.num_kv_heads = 1;
    c.model.kv_dtype = DCP_DTYPE_BF16;
    c.model.layer_pattern[0] = (struct dcp_layer_kind){.type = DCP_LAYER_SLIDING_WINDOW, .window = 4, .sink = true};
    c.model.layer_pattern[1] = (struct dcp_layer_kind){.type = DCP_LAYER_SPARSE_TOPK, .topk = 8};
    c.model.layer_pattern[2] = (struct dcp_layer_kind){.type = DCP_LAYER_FULL};
    c.model.num_layer_kinds = 3;
    c.model.index_heads = 4;
    c.model.index_head_dim = 32;
    c.parallel.sparse_index = DCP_SPARSE_INDEX_SHARDED;
    dcp_deployment *dep = deploy(&c);
    struct dcp_engine_params ep;
    dcp_engine_default_params(&ep);
    ep.deployment = dep;
    ep.kv_budget_bytes = 64e6;
    ep.max_seqs = 4;
    ep.max_batch = 4;
    ep.max_context = 1024;
    static const float logits[16] = {0};
    const float *sinks[3] = {logits, NULL, NULL};
    ep.sinks = sinks;
    dcp_engine *e = NULL;
    const int err = dcp_engine_create(&ep, &e);
    if (err)
        fprintf(stderr, "engine: %s: %s\n", dcp_strerror(err), dcp_last_error());
    assert_int_equal(err, DCP_OK);
    const struct cuda_engine *ce = dcp_engine_rank(e, 0)->engine->backend;
    assert_string_equal(ce->attn->entry, "dcpk_attn__mla_tc_bf16");
    assert_string_equal(ce->sparse->entry, "dcpk_sparse_attn__mla_tc_bf16");
    dcp_engine_destroy(&e);
    dcp_deployment_destroy(&dep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind_launch_checks),
        cmocka_unit_test(test_attention_kind_checks),
        cmocka_unit_test_setup(test_mla_kinds_engine, fake_test_setup),
        cmocka_unit_test_setup(test_kind_kernels_launch, fake_test_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
