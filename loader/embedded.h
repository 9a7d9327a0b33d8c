/*
 * embedded.h: the registry of kernel modules compiled into the library.
 *
 * ptx/kernels/ generates one C source holding every module's zstd-compressed
 * fatbin (SASS for each target architecture plus PTX for the newest) and this
 * table; without nvcc the table is empty and the CUDA backend has no kernels.
 */
#ifndef DCP_LOADER_EMBEDDED_H
#define DCP_LOADER_EMBEDDED_H

#include <stddef.h>
#include <stdint.h>

/** One embedded module. */
struct dcp_embedded_module {
    const char *name;            ///< Module name ("dcp_kernels").
    const unsigned char *zstd;   ///< zstd frame holding the fatbin.
    size_t zstd_size;            ///< Bytes of the zstd frame.
    size_t image_size;           ///< Bytes of the decompressed fatbin.
    uint64_t zstd_hash;          ///< FNV-1a 64 of the compressed bytes (checked before decompressing).
    uint64_t image_hash;         ///< FNV-1a 64 of the decompressed fatbin (checked after).
    const char *targets;         ///< What the fatbin holds, e.g. "sm_80,sm_90,sm_100,compute_100".
    int toolkit_version;         ///< CUDA release of the nvcc that built it, encoded as cuDriverGetVersion
                                 ///< does (1000*major + 10*minor: 13000 for 13.0); 0 when unknown.
};

/** All embedded modules. */
extern const struct dcp_embedded_module dcp_embedded_modules[];
/** Number of entries in dcp_embedded_modules (0 when built without nvcc). */
extern const size_t dcp_embedded_module_count;

/** FNV-1a 64-bit hash (offset basis 0xcbf29ce484222325, prime 0x100000001b3). */
static inline uint64_t dcp_fnv1a64(const void *data, size_t size)
{
    const unsigned char *p = (const unsigned char *)data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif /* DCP_LOADER_EMBEDDED_H */
