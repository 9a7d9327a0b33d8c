/*
 * ref.c: CPU implementations of the reference kernels of dcp_kernels/ref.h, so
 * the test doubles of libcuda run the GPU check's yardsticks (and the check has
 * something to compare their results with). Work item = block.
 */
#include <string.h>

#include "dcp_kernels/convert.h"
#include "dcp_kernels/cpu.h"
#include "dcp_kernels/ref.h"

/* dcpk_ref_read: block b reads the runs of DCPK_REF_THREADS words that start at
 * (b + k * blocks) * DCPK_REF_THREADS, as the grid-stride loop of the GPU does. */
static void ref_read_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_ref_read_params *p = params;
    const unsigned char *src = (const unsigned char *)(uintptr_t)p->src;
    uint64_t *partial = (uint64_t *)(uintptr_t)p->partial;
    const uint64_t stride = (uint64_t)p->blocks * DCPK_REF_THREADS;
    (void)scratch;
    for (uint64_t b = begin; b < end; b++) {
        uint64_t sum = 0;
        for (uint64_t base = b * DCPK_REF_THREADS; base < p->n16; base += stride) {
            const uint64_t stop = base + DCPK_REF_THREADS < p->n16 ? base + DCPK_REF_THREADS : p->n16;
            for (uint64_t i = base; i < stop; i++) {
                uint32_t w[4];
                memcpy(w, src + i * 16, sizeof(w));
                sum += (uint64_t)w[0] + w[1] + w[2] + w[3];
            }
        }
        partial[b] = sum;
    }
}

static struct dcpk_grid ref_read_grid(const void *params)
{
    const struct dcpk_ref_read_params *p = params;
    const struct dcpk_grid g = {p->blocks, 1, 1};
    return g;
}

/* dcpk_ref_mma: the result in closed form (the GPU computes it with the tensor cores). */
static void ref_mma_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_ref_mma_params *p = params;
    float *out = (float *)(uintptr_t)p->out;
    const float v = (float)((double)p->iterations * 16.0 * dcpk_bf16_to_f32(p->a_bits) *
                            dcpk_bf16_to_f32(p->b_bits));
    const uint64_t per_block = (uint64_t)DCPK_REF_THREADS * DCPK_REF_MMA_OUT_PER_THREAD;
    (void)scratch;
    for (uint64_t i = begin * per_block; i < end * per_block; i++)
        out[i] = v;
}

static struct dcpk_grid ref_mma_grid(const void *params)
{
    const struct dcpk_ref_mma_params *p = params;
    const struct dcpk_grid g = {p->blocks, 1, 1};
    return g;
}

static size_t ref_no_scratch(const void *params)
{
    (void)params;
    return 0;
}

const struct dcpk_kernel_desc dcpk_ref_kernels[DCPK_REF_KERNEL_COUNT] = {
    {"ref_read", sizeof(struct dcpk_ref_read_params), ref_read_cpu, ref_read_grid, ref_no_scratch},
    {"ref_mma", sizeof(struct dcpk_ref_mma_params), ref_mma_cpu, ref_mma_grid, ref_no_scratch},
};
