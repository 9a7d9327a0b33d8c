/*
 * Every shipped deployment (the YAML files in configs/) loads without a diagnostic and plans,
 * sets dcp to the largest valid size, and gives the figures worked out by hand
 * (the derivations are in test_plan.c and in the files' comments).
 */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dcp/plan.h"
#include "test_util.h"

/* What each shipped file must give. */
struct expected_config {
    const char *file;
    uint32_t dcp;
    double baseline_kv_bytes_per_token; ///< Per GPU, all layers.
    uint64_t pages;                     ///< Per GPU.
};

static const struct expected_config shipped[] = {
    /* 2 layers * 576 * 2 B = 2,304 B; 64e6 * 0.75 = 48e6 / (64 * 2,304) = 325 pages. */
    {"default.yaml", 4, 2304, 325},
    /* 39.025e9 / 4,497,408 = 8,677 (test_deepseek_v3_h200). */
    {"deepseek-v3-8xh200.yaml", 8, 70272, 8677},
    /* 180e9 * 0.9 - 83.875e9 - 4e9 = 74.125e9 / 4,497,408 = 16,481. */
    {"deepseek-v3-8xb200.yaml", 8, 70272, 16481},
    /* 84.875e9 / 4,497,408 = 18,871 (test_kimi_k2_b200_one_million). */
    {"kimi-k2-8xb200.yaml", 8, 70272, 18871},
    /* int4: 1.04e12 * 0.515625 / 8 = 67.03125e9; 126.9e9 - 67.03125e9 - 4e9 = 55.86875e9
     * / 4,497,408 = 12,422. */
    {"kimi-k2-8xh200.yaml", 8, 70272, 12422},
    /* 64.15e9 / 3,080,192 = 20,826 (test_gqa_replication). */
    {"qwen3-235b-8xh200.yaml", 2, 48128, 20826},
    /* 70,553,706,496 * 2 / 8 = 17.638e9; 126.9e9 - 17.638e9 - 4e9 = 105.2616e9
     * / (64 * 40,960) = 40,154. */
    {"llama-3.1-70b-8xh200.yaml", 1, 40960, 40154},
    /* Layer kinds (docs/design.md §13). DSA with the sharded index: 61 x (576 + 128) B = 42,944 B
     * per owned token; 39.025e9 / (64 x 42,944) = 14,199. */
    {"deepseek-v3.2-8xh200.yaml", 8, 42944, 14199},
    /* 18 full layers x 256 B (the 18 windows are rings, per request); mxfp4 116.8e9 x 0.53125 / 8 =
     * 7.7558e9; 126.9e9 - 7.7558e9 - 4e9 = 115.1442e9 / (64 x 4,608) = 390,434. */
    {"gpt-oss-120b-8xh200.yaml", 1, 4608, 390434},
    /* 12 full layers x 1,024 B (the 36 linear layers keep state, per request); 80e9 x 2 / 8 = 20e9;
     * 102.9e9 / (64 x 12,288) = 130,844. */
    {"qwen3-next-80b-8xh200.yaml", 4, 12288, 130844},
    /* CPU-sized kinds (24e6 B of KV per emulated GPU): DSA 2 x ((64 + 16) x 2 + 16 x 2) = 384 B,
     * 24e6 / (64 x 384) = 976; gpt-oss-like 2 full layers x 2 x 32 x 2 B = 256 B, 1,464; hybrid
     * 2 full layers x 2 x 64 x 2 B = 512 B, 732. */
    {"cpu-dsa.yaml", 4, 384, 976},
    {"cpu-gpt-oss.yaml", 2, 256, 1464},
    {"cpu-hybrid.yaml", 4, 512, 732},
};

static const struct expected_config *find_expected(const char *file)
{
    for (size_t i = 0; i < sizeof(shipped) / sizeof(shipped[0]); i++)
        if (!strcmp(shipped[i].file, file))
            return &shipped[i];
    return NULL;
}

static void load_and_plan(const char *path, struct dcp_plan *plan)
{
    dcp_diag *diag = NULL;
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_diag_create(&diag), DCP_OK);
    int err = dcp_deployment_load_file(path, diag, &dep);
    dcp_diag_print(diag, stderr);
    assert_int_equal(err, DCP_OK);
    /* Shipped files are clean: not even a warning. */
    assert_int_equal(dcp_diag_count(diag), 0);
    assert_int_equal(dcp_plan_compute(dep, plan), DCP_OK);
    dcp_deployment_destroy(&dep);
    dcp_diag_destroy(&diag);
}

/* Properties every shipped deployment has, whatever its figures. */
static void check_properties(const struct dcp_plan *plan)
{
    assert_true(plan->memory.kv_budget_bytes > 0);
    assert_true(plan->instances >= 1);
    assert_true(plan->num_contexts >= 1);
    /* The largest valid dcp is the baseline's replication: DCP removes every copy. */
    assert_int_equal(plan->dcp.dcp, (uint32_t)lround(plan->baseline.replication));
    assert_true(fabs(plan->dcp.replication - 1.0) < 1e-9);
    assert_int_equal(plan->dcp.context_tokens, plan->baseline.context_tokens * plan->dcp.dcp);
    for (uint32_t i = 0; i < plan->num_contexts; i++)
        assert_true(plan->contexts[i].dcp_concurrency >= plan->contexts[i].baseline_concurrency);
}

static void test_shipped_configs(void **state)
{
    (void)state;
    const char *root = getenv("DCP_SOURCE_ROOT");
    assert_non_null(root);
    char pattern[4096];
    snprintf(pattern, sizeof(pattern), "%s/configs/*.yaml", root);
    glob_t files;
    assert_int_equal(glob(pattern, 0, NULL, &files), 0);

    size_t checked = 0;
    for (size_t i = 0; i < files.gl_pathc; i++) {
        const char *path = files.gl_pathv[i];
        const char *file = strrchr(path, '/') + 1;
        fprintf(stderr, "%s\n", file);
        struct dcp_plan plan;
        load_and_plan(path, &plan);
        check_properties(&plan);
        const struct expected_config *want = find_expected(file);
        if (!want)
            continue;
        assert_int_equal(plan.dcp.dcp, want->dcp);
        assert_true(plan.baseline.kv_bytes_per_token == want->baseline_kv_bytes_per_token);
        assert_int_equal(plan.dcp.pages, want->pages);
        checked++;
    }
    globfree(&files);
    /* Every file of the table is shipped. */
    assert_int_equal(checked, sizeof(shipped) / sizeof(shipped[0]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
