/*
 * emu_kernels.h: the kernel sources of ptx/kernels compiled for the host emulator
 * (cuda_emu.h), with the helpers every emulated test uses. Include it once, first.
 */
#ifndef DCP_TEST_EMU_KERNELS_H
#define DCP_TEST_EMU_KERNELS_H

#include "cuda_emu.h"

alignas(16) unsigned char dcpk_smem[256 * 1024];

#include "dcp_kernels.cu"
extern "C" {
#include "test_util.h"
}

namespace {

/** emu::launch, failing the test on any error the emulator found (races, waits, masks, ...). */
template <class P>
void launch(void (*kernel)(P), const P &params, dim3 grid, dim3 block)
{
    emu::reset_errors();
    emu::launch(kernel, params, grid, block);
    if (emu::errors())
        fail_msg("emulator: %u errors, the first: %s", emu::errors(), emu::first_error());
}

/** A host pointer as a params.h device address. */
uint64_t addr(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

using AttnKernel = void (*)(dcpk_attn_params);

/** The attention entry point of that name (variants.h), or null. */
AttnKernel attn_entry(const char *name)
{
#define DCP_TEST_ENTRY_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    if (std::strcmp(name, "dcpk_attn__" #layout "_" #dt) == 0)                       \
        return dcpk_attn__##layout##_##dt;
    DCPK_ATTN_VARIANTS(DCP_TEST_ENTRY_)
    DCPK_ATTN_TC_VARIANTS(DCP_TEST_ENTRY_)
#undef DCP_TEST_ENTRY_
    return nullptr;
}

} // namespace

#endif /* DCP_TEST_EMU_KERNELS_H */
