/*
 * cuda_test_util.h: helpers for the suites that drive the loader against the
 * test doubles (tests/doubles). Meson points DCP_CUDA_LIBRARY and
 * DCP_NCCL_LIBRARY at the doubles; each test sets the FAKE_* variables it wants
 * with fake_env_set() before opening, and every open reloads the double (the
 * loader dlcloses it), so settings never leak from one test to the next.
 */
#ifndef DCP_CUDA_TEST_UTIL_H
#define DCP_CUDA_TEST_UTIL_H

#include <stddef.h>

#include "cuda_api.h"
#include "nccl_api.h"
#include "embedded.h"
#include "fake_hooks.h"
#include "test_util.h"
#include "util/util.h"

/** Fails the test unless haystack contains needle. */
void assert_contains(const char *haystack, const char *needle);

/** Unsets every FAKE_* variable; call at the start of each test. */
void fake_env_reset(void);
/** cmocka setup shared by the loader tests: fake_env_reset() and dcp_clear_error(). */
int fake_test_setup(void **state);
/** Opens the fake libnccl through the loader (dcp_nccl_open; fails the test on error). */
struct dcp_nccl *fake_nccl_open(void);
/** setenv(name, value, 1). */
void fake_env_set(const char *name, const char *value);
/** Path of the fake libcuda.so.1 / libnccl.so.2 (from the environment); fails the test if unset. */
const char *fake_cuda_path(void);
const char *fake_nccl_path(void);

/** Opens the fake driver (asserts success). */
struct dcp_cuda *fake_open(void);
/** Closes it and asserts the double was unloaded (so the next open rereads FAKE_*). */
void fake_close(struct dcp_cuda **cu);
/** A test hook of the double, looked up on the loader's handle (asserts it exists). */
void *fake_hook(const struct dcp_cuda *cu, const char *name);
/** Counters of the double. */
struct fake_cuda_stats fake_stats(const struct dcp_cuda *cu);
/** Calls of one entry point. */
unsigned long fake_calls(const struct dcp_cuda *cu, const char *name);
/** Whether the double can run kernels (ptx/cpu linked in). */
int fake_has_kernels(const struct dcp_cuda *cu);
/** Retains device dev's primary context and makes it current on this thread. */
CUcontext fake_make_current(const struct dcp_cuda *cu, int dev);
/** Makes no context current and releases dev's primary context. */
void fake_drop_current(const struct dcp_cuda *cu, int dev);

/** One entry of a test fatbin. */
struct test_fatbin_entry {
    int kind;            ///< DCP_FATBIN_KIND_ELF or DCP_FATBIN_KIND_PTX.
    unsigned arch;       ///< 90 for sm_90 / compute_90.
    const char *payload; ///< Text standing in for the ELF or PTX (kernel names go here).
    int compress;        ///< Store the payload as a zstd frame, as nvcc 12.8+ does.
};

/** A fatbin with the layout of loader/fatbin.h (malloc'd, *size bytes). */
unsigned char *test_fatbin_build(const struct test_fatbin_entry *entries, size_t n, size_t *size);

/** A registry entry made in the test: image compressed with zstd, hashes filled in. */
struct test_module {
    struct dcp_embedded_module m; ///< Points into zstd below.
    unsigned char *zstd;          ///< Owned compressed bytes (m.zstd).
};

/** Compresses image into t->m (asserts success). */
void test_module_make(struct test_module *t, const char *name, const void *image, size_t size,
                      const char *targets);
void test_module_free(struct test_module *t);

/** The usual test image: sm_80 and sm_90 SASS and compressed compute_100 PTX naming dcpk_fill. */
unsigned char *test_fatbin_default(size_t *size);

#endif /* DCP_CUDA_TEST_UTIL_H */
