/*
 * dcp_kernels/variants.h, the host's view of the attention entries: the names
 * follow the documented scheme, the lookup finds exactly the supported shapes,
 * head_tile picking stays within its bounds and the shared-memory plan adds up.
 */
#include <stdio.h>
#include <string.h>

#include "dcp_kernels/variants.h"
#include "test_util.h"

/* enum dcpk_dtype -> suffix, as dcp_dtype_name() spells the dtypes. */
static const char *const dtype_names[] = {"fp32", "bf16", "fp16", "fp8_e4m3"};

static void test_names_follow_the_scheme(void **state)
{
    (void)state;
    assert_int_equal(DCPK_ATTN_VARIANT_COUNT, 25);
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++) {
        const struct dcpk_attn_variant *v = dcpk_attn_variant_at(i);
        char want[64];
        if (v->tensor_core && v->shared_kv)
            snprintf(want, sizeof(want), "dcpk_attn__mla_tc_%s", dtype_names[v->dtype]);
        else if (v->tensor_core)
            snprintf(want, sizeof(want), "dcpk_attn__gqa_d%u_tc_%s", v->qk_dim, dtype_names[v->dtype]);
        else if (v->shared_kv)
            snprintf(want, sizeof(want), "dcpk_attn__mla_%s", dtype_names[v->dtype]);
        else
            snprintf(want, sizeof(want), "dcpk_attn__gqa_d%u_%s", v->qk_dim, dtype_names[v->dtype]);
        assert_string_equal(v->entry, want);
    }
    assert_null(dcpk_attn_variant_at(DCPK_ATTN_VARIANT_COUNT));
}

static void test_find_supported_shapes_only(void **state)
{
    (void)state;
    static const uint32_t dims[] = {64, 128, 256};
    for (uint32_t dt = DCPK_FP32; dt <= DCPK_FP8_E4M3; dt++) {
        for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
            const struct dcpk_attn_variant *v = dcpk_attn_variant_find(dims[i], dims[i], 0, dt);
            assert_non_null(v);
            assert_int_equal(v->qk_dim, dims[i]);
            assert_int_equal(v->dtype, dt);
            assert_false(v->shared_kv);
            /* Tensor cores for bf16/fp16 KV at every head dim, SIMT otherwise. */
            char want[64];
            snprintf(want, sizeof(want), "dcpk_attn__gqa_d%u%s_%s", dims[i],
                     dt == DCPK_BF16 || dt == DCPK_FP16 ? "_tc" : "", dtype_names[dt]);
            assert_string_equal(v->entry, want);
            assert_int_equal(v->tensor_core, dt == DCPK_BF16 || dt == DCPK_FP16);
        }
        const struct dcpk_attn_variant *mla = dcpk_attn_variant_find(576, 512, 1, dt);
        assert_non_null(mla);
        assert_true(mla->shared_kv);
        /* Tensor cores for the MMA input types and fp8 (widened to bf16), SIMT for fp32. */
        assert_int_equal(mla->tensor_core, dt != DCPK_FP32);
        assert_string_equal(mla->entry + strlen("dcpk_attn__"),
                            dt == DCPK_BF16 ? "mla_tc_bf16" : dt == DCPK_FP16 ? "mla_tc_fp16"
                                            : dt == DCPK_FP32 ? "mla_fp32" : "mla_tc_fp8_e4m3");
        assert_null(dcpk_attn_variant_find(576, 512, 0, dt)); /* MLA shape with separate V */
        assert_null(dcpk_attn_variant_find(128, 128, 1, dt));
        assert_null(dcpk_attn_variant_find(96, 96, 0, dt));
        assert_null(dcpk_attn_variant_find(128, 64, 0, dt));
    }
    assert_null(dcpk_attn_variant_find(128, 128, 0, 4));
}

static void test_pick_head_tile(void **state)
{
    (void)state;
    const struct dcpk_attn_variant *gqa = dcpk_attn_variant_find(128, 128, 0, DCPK_BF16);
    const struct dcpk_attn_variant *mla = dcpk_attn_variant_find(576, 512, 1, DCPK_BF16);
    assert_int_equal(dcpk_attn_pick_head_tile(gqa, 8, 1), 8);    /* all heads of a KV head */
    assert_int_equal(dcpk_attn_pick_head_tile(gqa, 8, 2), 8);    /* 16 rows fit one pass */
    assert_int_equal(dcpk_attn_pick_head_tile(gqa, 8, 3), 5);    /* 15 rows */
    assert_int_equal(dcpk_attn_pick_head_tile(gqa, 8, 40), 1);   /* never 0 */
    assert_int_equal(dcpk_attn_pick_head_tile(gqa, 1, 0), 1);    /* MHA */
    assert_int_equal(dcpk_attn_pick_head_tile(mla, 128, 1), 32); /* tiles of the 128 heads */
    assert_int_equal(dcpk_attn_pick_head_tile(mla, 16, 1), 16);
}

static void test_shared_memory_plan(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++) {
        const struct dcpk_attn_variant *v = dcpk_attn_variant_at(i);
        const uint32_t es = dcpk_dtype_size(v->dtype);
        if (v->tensor_core && !v->shared_kv) {
            /* GQA: 3-4 stages of unpadded (swizzled) K and V tiles, 16 keys per warp;
             * Q fragments per lane; per-warp P^T tiles and softmax states; the warps'
             * fp32 outputs fit in the KV ring at the end; 16 bytes for the pass's
             * first sanitized key (the NaN policy, docs/design.md §4); the pass rows'
             * visible key ranges, 8 bytes a row (no division in the tile loop). */
            const uint32_t warps = v->threads / 32, stage = 2 * v->tile_tokens * v->qk_dim * es;
            const uint32_t stages = stage <= 16384 ? 4 : 3;
            assert_int_equal(v->tile_tokens, 16 * warps);
            assert_int_equal(v->rows % 8, 0);
            assert_int_equal(v->qk_dim * es / 16 % 8, 0);
            const uint32_t want = stages * stage + 32 * (v->qk_dim / 16) * (v->rows / 8) * 16 +
                                  warps * (v->rows / 8) * 512 + warps * v->rows * 8 + 16 + 8 * v->rows;
            assert_int_equal(v->smem_bytes, want);
            assert_true(warps * v->rows * (v->qk_dim + 4) * 4 <= stages * stage);
            /* Two blocks per SM on sm_90 (227 KiB), one on the A100. */
            assert_true(2 * v->smem_bytes <= 232448);
            continue;
        }
        if (v->tensor_core) {
            /* K tiles with one pad chunk per row (fp8: one bf16 tile and two raw fp8 ones),
             * 4 partial score tiles per row group, Q fragments. */
            const uint32_t quarters = v->threads / 32 / (v->rows / 16);
            assert_int_equal(quarters, 4);
            assert_int_equal((v->qk_dim * 2 / 16 + 1) % 2, 1);
            const uint32_t k_bytes = es == 1 ? v->tile_tokens * (v->qk_dim * 2 / 16 + 1) * 16 + 2 * v->tile_tokens * v->qk_dim
                                             : 2 * v->tile_tokens * (v->qk_dim * es / 16 + 1) * 16;
            const uint32_t want = k_bytes +
                                  v->rows * v->tile_tokens * quarters * 4 + 2 * v->threads * (v->qk_dim / quarters / 16) * 16;
            assert_int_equal(v->smem_bytes, want);
            assert_true(v->smem_bytes <= 166912);
            continue;
        }
        const uint32_t ks = DCPK_ATTN_KSPLIT(v->threads, v->rows, v->tile_tokens);
        /* K rows padded to a stride congruent to the qk split mod 8, never by a whole bank cycle. */
        const uint32_t krow = DCPK_ATTN_KROW_CHUNKS(v->qk_dim, es, ks);
        assert_int_equal(krow % 8, ks % 8);
        assert_true(krow >= v->qk_dim * es / 16 && krow < v->qk_dim * es / 16 + 8);
        const uint32_t want = 2 * v->tile_tokens * krow * 16 +
                              (v->shared_kv ? 0 : 2 * v->tile_tokens * v->v_dim * es) + v->rows * v->qk_dim * 4 +
                              v->rows * (v->tile_tokens + 8) * 4 + v->rows * 16;
        assert_int_equal(v->smem_bytes, want);
        /* Opt-in limit of the smallest target (A100, 163 KiB). */
        assert_true(v->smem_bytes <= 166912);
    }
}

/*
 * The sparse entries: one per SIMT attention entry and one per tensor-core MLA entry,
 * "dcpk_sparse_attn__<layout>_<dtype>", each with its attention entry's shared
 * memory plus a list of whole tiles of keys and the counts that rank them (within
 * an A100's 163 KiB); the lookup finds one for every shape an attention entry has,
 * the tensor-core one for MLA bf16/fp16/fp8.
 */
static void test_sparse_entries(void **state)
{
    (void)state;
    uint32_t simt = 0, mla_tc = 0;
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++) {
        simt += !dcpk_attn_variant_at(i)->tensor_core;
        mla_tc += dcpk_attn_variant_at(i)->tensor_core && dcpk_attn_variant_at(i)->shared_kv;
    }
    assert_int_equal(DCPK_SPARSE_VARIANT_COUNT, simt + mla_tc);
    for (uint32_t i = 0; i < DCPK_SPARSE_VARIANT_COUNT; i++) {
        const struct dcpk_attn_variant *v = dcpk_sparse_variant_at(i);
        assert_true(strncmp(v->entry, "dcpk_sparse_attn__", strlen("dcpk_sparse_attn__")) == 0);
        /* Its attention entry: the SIMT rows in their order, then the MLA tensor-core ones (the first TC rows). */
        const struct dcpk_attn_variant *a = dcpk_attn_variant_at(i);
        assert_string_equal(v->entry + strlen("dcpk_sparse_attn__"), a->entry + strlen("dcpk_attn__"));
        assert_int_equal(v->threads, a->threads);
        assert_int_equal(v->tensor_core, a->tensor_core);
        const uint32_t cap = DCPK_SPARSE_CAP(v->threads, v->tile_tokens);
        assert_true(cap % v->tile_tokens == 0 && cap >= v->tile_tokens);
        assert_int_equal(v->smem_bytes, a->smem_bytes + (cap + v->threads / 32 + 2) * 4);
        assert_true(v->smem_bytes <= 166912);
    }
    assert_null(dcpk_sparse_variant_at(DCPK_SPARSE_VARIANT_COUNT));
    static const uint32_t dims[] = {64, 128, 256};
    for (uint32_t dt = DCPK_FP32; dt <= DCPK_FP8_E4M3; dt++) {
        for (size_t i = 0; i < 3; i++)
            assert_false(dcpk_sparse_variant_find(dims[i], dims[i], 0, dt)->tensor_core);
        assert_int_equal(dcpk_sparse_variant_find(576, 512, 1, dt)->tensor_core, dt != DCPK_FP32);
        assert_null(dcpk_sparse_variant_find(96, 96, 0, dt));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_follow_the_scheme),
        cmocka_unit_test(test_find_supported_shapes_only),
        cmocka_unit_test(test_pick_head_tile),
        cmocka_unit_test(test_shared_memory_plan),
        cmocka_unit_test(test_sparse_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
