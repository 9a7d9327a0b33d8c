/*
 * config_test_structs.h: filled struct dcp_config values of real deployments and
 * checks through dcp_deployment_from_config() (header only).
 */
#ifndef DCP_CONFIG_TEST_STRUCTS_H
#define DCP_CONFIG_TEST_STRUCTS_H

#include "config_test.h"

/** DeepSeek-V3 (MLA, 128 query heads, 671B fp8) on one 8x H200 node, TP8/DCP8. */
static inline struct dcp_config deepseek_v3_h200(void)
{
    struct dcp_config c;
    dcp_config_defaults(&c);
    c.model.name = "DeepSeek-V3";
    c.model.attention = DCP_ATTN_MLA;
    c.model.num_layers = 61;
    c.model.num_q_heads = 128;
    c.model.num_params = 671e9;
    c.model.weight_dtype = DCP_WEIGHT_FP8;
    c.hardware.gpu = "H200";
    c.hardware.memory_bytes = 141e9;
    c.hardware.hbm_bandwidth = 4.8e12;
    c.hardware.link_bandwidth = 450e9;
    c.parallel.tp = 8;
    c.parallel.dcp = 8;
    c.workload.context_lengths[0] = 131072;
    c.workload.num_context_lengths = 1;
    return c;
}

/** Llama-3.1-70B (GQA, 64 query / 8 KV heads of 128, 70B bf16) on 8x H200, TP8. */
static inline struct dcp_config llama_70b_h200(void)
{
    struct dcp_config c = deepseek_v3_h200();
    c.model.name = "Llama-3.1-70B";
    c.model.attention = DCP_ATTN_GQA;
    c.model.num_layers = 80;
    c.model.num_q_heads = 64;
    c.model.num_kv_heads = 8;
    c.model.head_dim = 128;
    c.model.num_params = 70e9;
    c.model.weight_dtype = DCP_WEIGHT_BF16;
    c.parallel.dcp = 1;
    return c;
}

/** Builds a deployment from cfg; asserts success with no diagnostics and returns it. */
static inline dcp_deployment *expect_config_ok(const struct dcp_config *cfg)
{
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    dcp_deployment *dep = NULL;
    const int status = dcp_deployment_from_config(cfg, d, &dep);
    diag_dump(d);
    assert_int_equal(status, DCP_OK);
    assert_int_equal(dcp_diag_count(d), 0);
    assert_non_null(dep);
    dcp_diag_destroy(&d);
    return dep;
}

/** Asserts that cfg is accepted (and frees the deployment). */
static inline void expect_config_accepted(const struct dcp_config *cfg)
{
    dcp_deployment *dep = expect_config_ok(cfg);
    dcp_deployment_destroy(&dep);
}

/** Asserts that cfg is rejected with exactly one diagnostic, printed as expected. */
static inline void expect_config_error(const struct dcp_config *cfg, const char *expected)
{
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    dcp_deployment *dep = NULL;
    const int status = dcp_deployment_from_config(cfg, d, &dep);
    diag_dump(d);
    assert_int_equal(status, DCP_ECONFIG);
    assert_null(dep);
    assert_int_equal(dcp_diag_count(d), 1);
    const struct dcp_diag_entry *e = dcp_diag_get(d, 0);
    assert_int_equal(e->line, 0);
    assert_int_equal(e->column, 0);
    assert_string_equal(e->file, "");
    assert_string_equal(diag_text(d, 0), expected);
    dcp_diag_destroy(&d);
}

#endif /* DCP_CONFIG_TEST_STRUCTS_H */
