/*
 * engine_fixture.h: building small deployments and engines for engine tests.
 *
 * Environment knobs shared by every engine suite:
 *   DCP_TEST_BACKEND = host (default) | cuda | auto: the backend the engines use,
 *                      so the same suites run through the CUDA backend (on test
 *                      doubles or a real GPU) unchanged.
 *   DCP_TEST_QUICK   = 1: smaller property runs (also implied under valgrind).
 */
#ifndef DCP_TEST_ENGINE_FIXTURE_H
#define DCP_TEST_ENGINE_FIXTURE_H

#include <stdbool.h>

#include "dcp/dcp.h"
#include "dcp/tools.h"

/** Shape of a test deployment. */
struct fixture_shape {
    enum dcp_attention_kind kind;
    uint32_t tp, dcp, interleave, block_size;
    uint32_t q_heads, kv_heads, head_dim; /* GQA/MHA */
    uint32_t kv_lora_rank, rope_dim;      /* MLA */
    uint32_t layers;
    enum dcp_dtype dtype;                 /* fp8 gets kv_scale 0.05 */
    enum dcp_comm_scheme comm;
    enum dcp_backend_kind backend;
    uint32_t host_threads;                /* runtime.host.threads (> 1 enables split-KV) */
    bool replicate_q;                     /* parallel.replicate_q */
    bool merge_after_uv;                  /* parallel.merge_after_uv (MLA) */
    uint32_t v_head_dim;                  /* model.v_head_dim (MLA); 0 = the default */
    enum dcp_dtype comm_dtype;            /* parallel.comm_dtype (0: fp32, what the engine moves) */
    enum dcp_cuda_comm cuda_comm;         /* runtime.cuda.comm (0: auto) */
};

/** Limits of a test engine (see struct dcp_engine_params). */
struct fixture_limits {
    uint32_t dcp;              /* 0 = the deployment's, 1 = TP baseline */
    uint64_t num_blocks;       /* KV budget in logical blocks of this engine */
    uint32_t max_batch;
    uint32_t max_query_tokens;
    uint32_t max_step_tokens;  /* 0 = max_query_tokens */
    uint32_t max_seqs;         /* 0 = 64 */
    uint64_t max_context;
    const float *const *w_uv;  /* dcp_engine_params.w_uv (merge_after_uv) */
    bool profile;              /* dcp_engine_params.profile */
    enum dcp_dtype act_dtype;  /* q, k, v and out (0 = fp32) */
};

/** The backend DCP_TEST_BACKEND selects (host when unset; fails the test on a bad value). */
enum dcp_backend_kind fixture_backend(void);

/**
 * What a suite's main() returns before running when not 0: 0 if the selected
 * backend creates an engine here, 77 (skip) if it cannot, 1 for a bad DCP_TEST_BACKEND.
 */
int fixture_backend_check(void);

/** DCP_OK if a small engine of shape s can be created here, else its error (printed to stderr). */
int fixture_probe(const struct fixture_shape *s);

/** DCP_TEST_QUICK is set (not "0") or the test runs under valgrind. */
bool fixture_quick(void);

/** A valid small shape: MLA with 64+16 latent/rope, 4 heads, tp 2, dcp 2, one host thread. */
struct fixture_shape fixture_default_shape(void);

/** Fills cfg (from dcp_config_defaults) for a shape; validate with dcp_deployment_from_config. */
void fixture_config(const struct fixture_shape *s, struct dcp_config *cfg);

/** With DCP_TEST_BACKEND=cuda, changes the dims to ones the GPU kernels have
 *  (MLA 512+64, head_dim 64/128/256); otherwise leaves the shape alone. */
void fixture_adapt_to_backend(struct fixture_shape *s);

/** Builds a validated deployment (fails the test on error). */
dcp_deployment *fixture_deployment(const struct fixture_shape *s);

/** Creates an engine with the given limits (fails the test on error). */
dcp_engine *fixture_engine_with(const dcp_deployment *dep, const struct fixture_limits *lim);

/** fixture_engine_with() with max_query_tokens = max_step_tokens = max_tokens. */
dcp_engine *fixture_engine(const dcp_deployment *dep, uint32_t dcp, uint64_t num_blocks_hint,
                           uint32_t max_batch, uint32_t max_tokens, uint64_t max_context);

#endif /* DCP_TEST_ENGINE_FIXTURE_H */
