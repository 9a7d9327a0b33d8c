/* cuda_test_util.c: see cuda_test_util.h. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "cuda_test_util.h"
#include "fatbin.h"

static const char *const fake_variables[] = {
    "FAKE_CUDA_STUB",      "FAKE_CUDA_DRIVER_VERSION", "FAKE_CUDA_DEVICES",
    "FAKE_CUDA_SM",        "FAKE_CUDA_SM_COUNT",       "FAKE_CUDA_MEMORY_MB",
    "FAKE_CUDA_FAIL_ALLOC", "FAKE_CUDA_NO_VMM",        "FAKE_CUDA_NO_LIBRARY_API",
    "FAKE_CUDA_EAGER",     "FAKE_CUDA_HANG_LAUNCH",
    "FAKE_NCCL_VERSION",   "FAKE_NCCL_ASYNC_ERROR",    "FAKE_NCCL_HANG",
    "FAKE_NCCL_TIMEOUT",
};

void assert_contains(const char *haystack, const char *needle)
{
    if (!haystack || !strstr(haystack, needle))
        fail_msg("\"%s\" does not contain \"%s\"", haystack ? haystack : "(null)", needle);
}

void fake_env_reset(void)
{
    for (size_t i = 0; i < sizeof(fake_variables) / sizeof(fake_variables[0]); i++)
        unsetenv(fake_variables[i]);
}

int fake_test_setup(void **state)
{
    (void)state;
    fake_env_reset();
    dcp_clear_error();
    return 0;
}

struct dcp_nccl *fake_nccl_open(void)
{
    struct dcp_nccl *nccl = NULL;
    if (dcp_nccl_open(NULL, &nccl))
        fail_msg("dcp_nccl_open: %s", dcp_last_error());
    return nccl;
}

void fake_env_set(const char *name, const char *value) { assert_int_equal(setenv(name, value, 1), 0); }

const char *fake_cuda_path(void)
{
    const char *p = getenv(DCP_CUDA_LIBRARY_ENV);
    assert_non_null(p);
    return p;
}

const char *fake_nccl_path(void)
{
    const char *p = getenv("DCP_NCCL_LIBRARY");
    assert_non_null(p);
    return p;
}

struct dcp_cuda *fake_open(void)
{
    struct dcp_cuda *cu = NULL;
    int status = dcp_cuda_open(NULL, &cu);
    if (status)
        fail_msg("dcp_cuda_open: %d: %s", status, dcp_last_error());
    assert_non_null(cu);
    return cu;
}

void fake_close(struct dcp_cuda **cu)
{
    dcp_cuda_close(cu);
    assert_null(*cu);
    void *still = dlopen(fake_cuda_path(), RTLD_NOW | RTLD_NOLOAD);
    if (still) {
        dlclose(still);
        fail_msg("the fake libcuda stayed loaded after dcp_cuda_close");
    }
}

void *fake_hook(const struct dcp_cuda *cu, const char *name)
{
    void *fn = dlsym(cu->dl, name);
    if (!fn)
        fail_msg("the fake libcuda has no %s", name);
    return fn;
}

struct fake_cuda_stats fake_stats(const struct dcp_cuda *cu)
{
    struct fake_cuda_stats s;
    fake_cuda_get_stats_fn get = (fake_cuda_get_stats_fn)(uintptr_t)fake_hook(cu, "fake_cuda_get_stats");
    get(&s);
    return s;
}

unsigned long fake_calls(const struct dcp_cuda *cu, const char *name)
{
    fake_cuda_call_count_fn count =
        (fake_cuda_call_count_fn)(uintptr_t)fake_hook(cu, "fake_cuda_call_count");
    return count(name);
}

int fake_has_kernels(const struct dcp_cuda *cu)
{
    fake_cuda_has_cpu_kernels_fn has =
        (fake_cuda_has_cpu_kernels_fn)(uintptr_t)fake_hook(cu, "fake_cuda_has_cpu_kernels");
    return has();
}

CUcontext fake_make_current(const struct dcp_cuda *cu, int dev)
{
    CUcontext ctx = NULL;
    assert_int_equal(cu->api.cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    assert_int_equal(cu->api.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    return ctx;
}

void fake_drop_current(const struct dcp_cuda *cu, int dev)
{
    assert_int_equal(cu->api.cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_int_equal(cu->api.cuDevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
}

/* ------------------------------------------------------------------------- */

static size_t padded(size_t n) { return (n + 7) / 8 * 8; }

/* The stored payload of one entry: the text, or its zstd frame. */
static unsigned char *entry_payload(const struct test_fatbin_entry *e, size_t *stored)
{
    size_t len = strlen(e->payload) + 1;
    size_t cap = e->compress ? ZSTD_compressBound(len) : len;
    unsigned char *buf = malloc(cap);
    assert_non_null(buf);
    if (e->compress) {
        *stored = ZSTD_compress(buf, cap, e->payload, len, 3);
        assert_false(ZSTD_isError(*stored));
    } else {
        memcpy(buf, e->payload, len);
        *stored = len;
    }
    return buf;
}

unsigned char *test_fatbin_build(const struct test_fatbin_entry *entries, size_t n, size_t *size)
{
    struct dcp_fatbin_header h = {DCP_FATBIN_MAGIC, DCP_FATBIN_VERSION, sizeof(h), 0};
    unsigned char *out = malloc(sizeof(h));
    assert_non_null(out);
    size_t used = sizeof(h);
    for (size_t i = 0; i < n; i++) {
        size_t stored;
        unsigned char *payload = entry_payload(&entries[i], &stored);
        /* PTX entries carry a 16-byte longer header, as nvcc writes them. */
        size_t header = entries[i].kind == DCP_FATBIN_KIND_PTX ? 80 : 64;
        struct dcp_fatbin_entry e = {
            .kind = (uint16_t)entries[i].kind,
            .version = 0x0101,
            .header_size = (uint32_t)header,
            .payload_size = padded(stored),
            .compressed_size = entries[i].compress ? (uint32_t)stored : 0,
            .binary_major = entries[i].kind == DCP_FATBIN_KIND_PTX ? 9 : 1,
            .arch = entries[i].arch,
            .flags = entries[i].compress ? 0x8011 : 0x11,
            .uncompressed_size = entries[i].compress ? strlen(entries[i].payload) + 1 : 0,
        };
        unsigned char *grown = realloc(out, used + header + e.payload_size);
        assert_non_null(grown);
        out = grown;
        memset(out + used, 0, header + e.payload_size);
        memcpy(out + used, &e, sizeof(e));
        memcpy(out + used + header, payload, stored);
        used += header + e.payload_size;
        free(payload);
    }
    h.fat_size = used - sizeof(h);
    memcpy(out, &h, sizeof(h));
    *size = used;
    return out;
}

unsigned char *test_fatbin_default(size_t *size)
{
    const struct test_fatbin_entry entries[] = {
        {DCP_FATBIN_KIND_ELF, 80, "\x7f" "ELF .text.dcpk_fill .nv.info.dcpk_fill", 0},
        {DCP_FATBIN_KIND_ELF, 90, "\x7f" "ELF .text.dcpk_fill .nv.info.dcpk_fill", 0},
        {DCP_FATBIN_KIND_PTX, 100, ".version 9.0 .target sm_100 .visible .entry dcpk_fill(", 1},
    };
    return test_fatbin_build(entries, sizeof(entries) / sizeof(entries[0]), size);
}

void test_module_make(struct test_module *t, const char *name, const void *image, size_t size,
                      const char *targets)
{
    size_t cap = ZSTD_compressBound(size);
    t->zstd = malloc(cap);
    assert_non_null(t->zstd);
    size_t n = ZSTD_compress(t->zstd, cap, image, size, 3);
    assert_false(ZSTD_isError(n));
    t->m = (struct dcp_embedded_module){
        .name = name,
        .zstd = t->zstd,
        .zstd_size = n,
        .image_size = size,
        .zstd_hash = dcp_fnv1a64(t->zstd, n),
        .image_hash = dcp_fnv1a64(image, size),
        .targets = targets,
    };
}

void test_module_free(struct test_module *t)
{
    free(t->zstd);
    t->zstd = NULL;
}
