/*
 * engine_fixture.h: building small deployments and engines for engine tests.
 */
#ifndef DCP_TEST_ENGINE_FIXTURE_H
#define DCP_TEST_ENGINE_FIXTURE_H

#include "dcp/dcp.h"

/** Shape of a test deployment. */
struct fixture_shape {
    enum dcp_attention_kind kind;
    uint32_t tp, dcp, interleave, block_size;
    uint32_t q_heads, kv_heads, head_dim; /* GQA/MHA */
    uint32_t kv_lora_rank, rope_dim;      /* MLA */
    uint32_t layers;
    enum dcp_dtype dtype;
    enum dcp_comm_scheme comm;
    enum dcp_backend_kind backend;
};

/** A valid small shape: MLA with 64+16 latent/rope, 4 heads, tp 2, dcp 2. */
struct fixture_shape fixture_default_shape(void);

/** Builds a validated deployment (fails the test on error). */
dcp_deployment *fixture_deployment(const struct fixture_shape *s);

/** Creates an engine with the given limits (fails the test on error). */
dcp_engine *fixture_engine(const dcp_deployment *dep, uint32_t dcp, uint64_t num_blocks_hint,
                           uint32_t max_batch, uint32_t max_tokens, uint64_t max_context);

#endif /* DCP_TEST_ENGINE_FIXTURE_H */
