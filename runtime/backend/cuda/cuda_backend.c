/* cuda_backend.c: placeholder until the driver-API backend lands; reports it unavailable. */
#include "engine/engine_internal.h"
#include "util/util.h"

static int cuda_engine_init(struct dcp_engine *e)
{
    (void)e;
    return dcp_error(DCP_ENOTSUP, "this build has no CUDA backend");
}

static void cuda_engine_fini(struct dcp_engine *e) { (void)e; }

const struct dcp_backend_ops dcp_cuda_backend = {
    .name = "cuda",
    .engine_init = cuda_engine_init,
    .engine_fini = cuda_engine_fini,
};
