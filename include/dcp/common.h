/*
 * libdcp: Decode Context Parallelism runtime.
 *
 * common.h: export macro, version, status codes. Every public function that can
 * fail returns 0 (DCP_OK) or a negative DCP_E* code; dcp_strerror() names it and
 * dcp_last_error() gives the detail recorded by the failing call on this thread.
 */
#ifndef DCP_COMMON_H
#define DCP_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DCP_BUILDING_LIBRARY) && defined(__GNUC__)
#define DCP_API __attribute__((visibility("default")))
#else
#define DCP_API
#endif

#define DCP_VERSION_MAJOR 0 ///< Major version: incompatible API changes.
#define DCP_VERSION_MINOR 1 ///< Minor version: compatible additions.
#define DCP_VERSION_PATCH 0 ///< Patch version: fixes only.

/** Status codes. 0 is success; every error is negative. */
enum dcp_status {
    DCP_OK = 0,                 ///< Success.
    DCP_EINVAL = -1,            ///< An argument is invalid (NULL, out of range, inconsistent).
    DCP_ENOMEM = -2,            ///< Host memory allocation failed.
    DCP_ENOSPC = -3,            ///< No free KV blocks (or other fixed pool) left; nothing was changed.
    DCP_ECONFIG = -4,           ///< The deployment is invalid; the diagnostics say why and where.
    DCP_EIO = -5,               ///< A file could not be read or written.
    DCP_ENOTSUP = -6,           ///< The operation is not supported by this build or backend.
    DCP_ENODRIVER = -7,         ///< The CUDA driver library (libcuda.so.1, or the file DCP_CUDA_LIBRARY names) could not be loaded.
    DCP_ESTUBDRIVER = -8,       ///< The loaded libcuda is the toolkit's stub, not a real driver.
    DCP_EDRIVERVERSION = -9,    ///< The CUDA driver is older than this library needs.
    DCP_ENODEVICE = -10,        ///< No usable CUDA device (or fewer than the deployment needs).
    DCP_ECUDA = -11,            ///< A CUDA driver call failed; dcp_last_error() names it.
    DCP_ENCCL = -12,            ///< NCCL could not be loaded or a NCCL call failed.
    DCP_EMODULE = -13,          ///< An embedded kernel module is corrupt or could not be loaded.
    DCP_ETIMEOUT = -14,         ///< A collective or rendezvous did not complete in time.
    DCP_ENOENT = -15,           ///< No such object (sequence id, kernel, file).
    DCP_EDEVMEM = -16,          ///< Device memory allocation failed.
    DCP_EABORTED = -17,         ///< Another rank failed; this rank's operation was abandoned.
    DCP_EBUSY = -18,            ///< The rank is inside another call (from another thread); nothing was done.
};

/**
 * Returns a short static description of a status code ("no free KV blocks").
 * Unknown codes give "unknown error". Never returns NULL.
 */
DCP_API const char *dcp_strerror(int status);

/**
 * Returns the detail message of the most recent failure recorded on the calling
 * thread by any libdcp function (e.g. "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2):
 * out of memory"), or "" if none. The string stays valid until the next libdcp
 * call on this thread.
 */
DCP_API const char *dcp_last_error(void);

/** Returns the library version as "MAJOR.MINOR.PATCH". */
DCP_API const char *dcp_version(void);

#ifdef __cplusplus
}
#endif

#endif /* DCP_COMMON_H */
