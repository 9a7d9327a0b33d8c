/*
 * modules.h: loading the embedded kernel modules (embedded.h) into the driver.
 *
 * A module's fatbin is stored zstd-compressed in the library. Loading checks the
 * compressed bytes' hash, decompresses with every zstd error checked, checks the
 * image's hash and fatbin header, and hands it to cuLibraryLoadData (when the
 * driver has it) or cuModuleLoadDataEx, with JIT logs captured. A corrupt or
 * truncated blob is a DCP_EMODULE error, never a crash.
 */
#ifndef DCP_LOADER_MODULES_H
#define DCP_LOADER_MODULES_H

#include <stddef.h>

#include "cuda_api.h"
#include "embedded.h"

/** A module loaded into the driver. */
struct dcp_module {
    const struct dcp_cuda *cu;        ///< Driver it was loaded with (not owned).
    const char *name;                 ///< Registry name ("dcp_kernels"; static).
    CUlibrary library;                ///< Set when loaded with cuLibraryLoadData.
    CUmodule module;                  ///< Set when loaded with cuModuleLoadDataEx.
    double load_ms;                   ///< Wall time of decompressing and loading.
    char *jit_info_log;               ///< Driver's JIT info log; NULL when empty.
    char report[320];                 ///< One line saying what was loaded and how (dcp_module_report()).
};

/** What the driver runs on a device, from a module's target list. */
enum dcp_image_choice {
    DCP_IMAGE_NONE = 0, ///< Nothing in the module runs on the device.
    DCP_IMAGE_SASS = 1, ///< Machine code built for the device (or its family).
    DCP_IMAGE_PTX = 2,  ///< PTX compiled by the driver's JIT at load time.
};

/**
 * Which image of a fatbin with the given targets ("sm_80,sm_90,sm_100,compute_100")
 * the driver picks for a device of compute capability major.minor, following the
 * driver's rule: SASS sm_XY runs on X.Z for Z >= Y (sm_XYa only on X.Y exactly),
 * the newest such wins; otherwise the newest PTX compute_XY with XY <= the device's
 * is JIT-compiled. Writes "SASS sm_90", "PTX JIT from compute_100" or "no image
 * for sm_75" to buf (may be NULL).
 */
enum dcp_image_choice dcp_module_pick_image(const char *targets, int cc_major, int cc_minor,
                                            char *buf, size_t size);

/**
 * The oldest driver (as cuDriverGetVersion encodes it) that loads module m: a fatbin
 * from CUDA toolkit X.Y needs a driver of release X.0 or newer (minor-version
 * compatibility within X; an older major rejects the image with an opaque error).
 * 0 when the module does not record its toolkit.
 */
int dcp_module_min_driver(const struct dcp_embedded_module *m);

/**
 * DCP_OK if cu's driver can load module m (dcp_module_min_driver), else
 * DCP_EDRIVERVERSION with a message naming the driver's version, the toolkit's
 * and the driver branch it needs ("CUDA 13.0 ... R580 or newer").
 */
int dcp_module_check_driver(const struct dcp_cuda *cu, const struct dcp_embedded_module *m);

/**
 * Decompresses, verifies and loads embedded module m for the device of the
 * calling thread's current context (which must be set: cuModuleLoadDataEx needs
 * it, and the report names what runs on that device). Returns DCP_OK and *out,
 * or DCP_EMODULE ("embedded module dcp_kernels: compressed data hash mismatch
 * (corrupt library?)", or the driver's error with its JIT error log), DCP_ENOMEM,
 * DCP_EINVAL, DCP_EDRIVERVERSION (dcp_module_check_driver), or a dcp_cuda_check() status.
 */
int dcp_module_load(const struct dcp_cuda *cu, const struct dcp_embedded_module *m,
                    struct dcp_module **out);

/**
 * Looks up a kernel ("dcpk_attn__mla_bf16") for the current context:
 * cuLibraryGetKernel + cuKernelGetFunction, or cuModuleGetFunction. Returns DCP_OK,
 * DCP_ENOENT (no such kernel in the module), or a dcp_cuda_check() status.
 */
int dcp_module_get_function(const struct dcp_module *mod, const char *name, CUfunction *fn);

/**
 * One line for logs: "embedded module dcp_kernels: SASS sm_90 on sm_90 via
 * cuLibraryLoadData in 3.2 ms" (plus "; JIT info log: ..." when the driver wrote one).
 */
const char *dcp_module_report(const struct dcp_module *mod);

/** Unloads the module; sets *mod to NULL. NULL and *mod == NULL are fine. */
void dcp_module_unload(struct dcp_module **mod);

/**
 * Frees the host-side record of a module without unloading it from the driver,
 * for a context whose device work never finished (unloading would wait for it):
 * the driver's copy is leaked with that context. Sets *mod to NULL.
 */
void dcp_module_abandon(struct dcp_module **mod);

/** The registry entry named name, or NULL. */
const struct dcp_embedded_module *dcp_embedded_module_find(const char *name);

#endif /* DCP_LOADER_MODULES_H */
