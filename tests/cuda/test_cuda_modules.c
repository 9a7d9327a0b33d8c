/*
 * Embedded modules: decompression and verification (every corruption is a clear
 * DCP_EMODULE, never a crash), loading through cuLibraryLoadData or
 * cuModuleLoadDataEx with JIT logs, the report of which image the driver runs,
 * and kernel lookup. Images are fatbins built by the test; the real registry is
 * loaded too when the build embedded one (nvcc present).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "cuda_test_util.h"
#include "dcp_kernels/cpu.h"
#include "modules.h"

#define TARGETS "sm_80,sm_90,compute_100"

/* The default test image as a registry entry. */
static void make_default_module(struct test_module *t)
{
    size_t size;
    unsigned char *image = test_fatbin_default(&size);
    test_module_make(t, "test_kernels", image, size, TARGETS);
    free(image);
}

/* Loads m with the fake as configured; returns the status, module in *mod. */
static int load_with_fake(struct dcp_cuda *cu, const struct dcp_embedded_module *m,
                          struct dcp_module **mod)
{
    fake_make_current(cu, 0);
    int status = dcp_module_load(cu, m, mod);
    return status;
}

static void test_load_library_sass(void **state)
{
    (void)state;
    struct test_module t;
    make_default_module(&t);
    struct dcp_cuda *cu = fake_open();
    struct dcp_module *mod = NULL;
    assert_int_equal(load_with_fake(cu, &t.m, &mod), DCP_OK);
    assert_non_null(mod->library);
    assert_null(mod->module);
    assert_null(mod->jit_info_log);
    assert_contains(dcp_module_report(mod), "embedded module test_kernels: SASS sm_90 on sm_90 "
                                           "via cuLibraryLoadData in ");
    assert_int_equal(fake_calls(cu, "cuLibraryLoadData"), 1);
    assert_int_equal(fake_calls(cu, "cuModuleLoadDataEx"), 0);
    assert_int_equal(fake_stats(cu).live_images, 1);

    CUfunction fn = (CUfunction)&fn;
    assert_int_equal(dcp_module_get_function(mod, "dcpk_nope", &fn), DCP_ENOENT);
    assert_null(fn);
    assert_string_equal(dcp_last_error(), "kernel dcpk_nope not found in embedded module test_kernels");
    /* A prefix of a kernel's name is not that kernel. */
    assert_int_equal(dcp_module_get_function(mod, "dcpk_fil", &fn), DCP_ENOENT);
    if (fake_has_kernels(cu)) {
        assert_int_equal(dcp_module_get_function(mod, "dcpk_fill", &fn), DCP_OK);
        assert_non_null(fn);
    }
    dcp_module_unload(&mod);
    assert_null(mod);
    dcp_module_unload(&mod);
    assert_int_equal(fake_stats(cu).live_images, 0);
    fake_drop_current(cu, 0);
    fake_close(&cu);
    test_module_free(&t);
}

static void test_load_module_fallback(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_NO_LIBRARY_API", "1");
    struct test_module t;
    make_default_module(&t);
    struct dcp_cuda *cu = fake_open();
    struct dcp_module *mod = NULL;
    assert_int_equal(load_with_fake(cu, &t.m, &mod), DCP_OK);
    assert_null(mod->library);
    assert_non_null(mod->module);
    assert_contains(dcp_module_report(mod), "SASS sm_90 on sm_90 via cuModuleLoadDataEx");
    assert_int_equal(fake_calls(cu, "cuModuleLoadDataEx"), 1);
    CUfunction fn;
    assert_int_equal(dcp_module_get_function(mod, "dcpk_nope", &fn), DCP_ENOENT);
    assert_int_equal(fake_calls(cu, "cuModuleGetFunction"), 1);
    if (fake_has_kernels(cu))
        assert_int_equal(dcp_module_get_function(mod, "dcpk_fill", &fn), DCP_OK);
    dcp_module_unload(&mod);
    assert_int_equal(fake_stats(cu).live_images, 0);
    fake_drop_current(cu, 0);
    fake_close(&cu);
    test_module_free(&t);
}

/* sm_120 has no SASS in the image: the driver JIT-compiles the PTX and says so. */
static void test_load_ptx_jit(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_SM", "120");
    struct test_module t;
    make_default_module(&t);
    struct dcp_cuda *cu = fake_open();
    struct dcp_module *mod = NULL;
    assert_int_equal(load_with_fake(cu, &t.m, &mod), DCP_OK);
    assert_contains(dcp_module_report(mod), "PTX JIT from compute_100 on sm_120");
    assert_non_null(mod->jit_info_log);
    assert_string_equal(mod->jit_info_log, "fake libcuda: JIT-compiled compute_100 PTX for sm_120");
    assert_contains(dcp_module_report(mod), "; JIT info log: fake libcuda: JIT-compiled");
    dcp_module_unload(&mod);
    fake_drop_current(cu, 0);
    fake_close(&cu);
    test_module_free(&t);
}

/* sm_75: nothing runs; the driver's JIT error log is in the message. */
static void test_load_no_binary(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_SM", "75");
    struct test_module t;
    make_default_module(&t);
    struct dcp_cuda *cu = fake_open();
    struct dcp_module *mod = (struct dcp_module *)&mod;
    assert_int_equal(load_with_fake(cu, &t.m, &mod), DCP_EMODULE);
    assert_null(mod);
    const char *e = dcp_last_error();
    assert_contains(e, "embedded module test_kernels: cuLibraryLoadData: "
                       "CUDA_ERROR_NO_BINARY_FOR_GPU (209)");
    assert_contains(e, "device sm_75: no image for sm_75; module has " TARGETS);
    assert_contains(e, "JIT error log: fake libcuda: no SASS for sm_75");
    assert_int_equal(fake_stats(cu).live_images, 0);
    fake_drop_current(cu, 0);
    fake_close(&cu);
    test_module_free(&t);
}

static void test_load_needs_context(void **state)
{
    (void)state;
    struct test_module t;
    make_default_module(&t);
    struct dcp_cuda *cu = fake_open();
    struct dcp_module *mod = NULL;
    assert_int_equal(dcp_module_load(cu, &t.m, &mod), DCP_ECUDA);
    assert_contains(dcp_last_error(), "cuCtxGetDevice");
    assert_contains(dcp_last_error(), "CUDA_ERROR_INVALID_CONTEXT");
    assert_int_equal(dcp_module_load(cu, NULL, &mod), DCP_EINVAL);
    assert_int_equal(dcp_module_load(cu, &t.m, NULL), DCP_EINVAL);
    fake_close(&cu);
    test_module_free(&t);
}

/* Loads a corrupted copy of the default module; asserts DCP_EMODULE with message
 * text `expect` and that the driver never saw the bytes. */
static void expect_corrupt(struct dcp_embedded_module *m, const char *expect)
{
    struct dcp_cuda *cu = fake_open();
    struct dcp_module *mod = NULL;
    assert_int_equal(load_with_fake(cu, m, &mod), DCP_EMODULE);
    assert_null(mod);
    assert_contains(dcp_last_error(), expect);
    assert_int_equal(fake_calls(cu, "cuLibraryLoadData"), 0);
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

static void rehash(struct dcp_embedded_module *m)
{
    m->zstd_hash = dcp_fnv1a64(m->zstd, m->zstd_size);
}

static void test_corrupt_blobs(void **state)
{
    (void)state;
    struct test_module t;
    make_default_module(&t);
    unsigned char *copy = malloc(t.m.zstd_size);
    assert_non_null(copy);
    struct dcp_embedded_module m;

    /* One flipped bit anywhere in the compressed bytes. */
    memcpy(copy, t.zstd, t.m.zstd_size);
    copy[t.m.zstd_size / 2] ^= 0x10;
    m = t.m;
    m.zstd = copy;
    expect_corrupt(&m, "embedded module test_kernels: compressed data hash mismatch (corrupt library?)");

    /* Truncated frame whose hash was (wrongly) regenerated. */
    m = t.m;
    m.zstd_size -= 9;
    rehash(&m);
    expect_corrupt(&m, "zstd decompression failed: ");

    /* The decompressed image is not what the registry promised. */
    m = t.m;
    m.image_hash ^= 1;
    expect_corrupt(&m, "decompressed image hash mismatch (corrupt library?)");

    /* The registry's size disagrees with the frame. */
    m = t.m;
    m.image_size += 8;
    expect_corrupt(&m, "zstd frame size disagrees with the registry");

    /* Garbage. */
    struct test_rng rng;
    test_rng_seed(&rng, test_seed());
    for (size_t i = 0; i < t.m.zstd_size; i++)
        copy[i] = (unsigned char)test_rng_next(&rng);
    m = t.m;
    m.zstd = copy;
    rehash(&m);
    expect_corrupt(&m, "compressed data is not a zstd frame");

    /* Empty entry. */
    m = t.m;
    m.zstd = NULL;
    expect_corrupt(&m, "embedded module test_kernels: empty registry entry");

    free(copy);
    test_module_free(&t);
}

/* A frame that does not record its size (as streaming compressors write them). */
static void test_frame_without_size(void **state)
{
    (void)state;
    size_t size;
    unsigned char *image = test_fatbin_default(&size);
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    assert_non_null(cctx);
    size_t cap = ZSTD_compressBound(size);
    unsigned char *frame = malloc(cap);
    assert_non_null(frame);
    assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
    size_t n = ZSTD_compress2(cctx, frame, cap, image, size);
    assert_false(ZSTD_isError(n));
    ZSTD_freeCCtx(cctx);
    struct dcp_embedded_module m = {"sizeless", frame, n, size, dcp_fnv1a64(frame, n),
                                    dcp_fnv1a64(image, size), TARGETS, 0};
    assert_int_equal(ZSTD_getFrameContentSize(frame, n), ZSTD_CONTENTSIZE_UNKNOWN);
    expect_corrupt(&m, "embedded module sizeless: zstd frame does not record its decompressed size");
    free(frame);
    free(image);
}

/* Correctly compressed, but not a fatbin: the driver never sees it. */
static void test_not_a_fatbin(void **state)
{
    (void)state;
    static const char text[] = "this is not a fatbin, just text that compresses";
    struct test_module t;
    test_module_make(&t, "text", text, sizeof(text), TARGETS);
    expect_corrupt(&t.m, "embedded module text: decompressed image is not a fatbin: no fatbin magic");
    test_module_free(&t);

    size_t size;
    unsigned char *image = test_fatbin_default(&size);
    image[16 + 8 + 3] ^= 0x40; /* first entry's payload size: now runs past the end */
    test_module_make(&t, "bad_entry", image, size, TARGETS);
    expect_corrupt(&t.m, "decompressed image is not a fatbin: fatbin entry runs past the end");
    test_module_free(&t);
    free(image);
}

static void expect_pick(const char *targets, int major, int minor, enum dcp_image_choice choice,
                        const char *text)
{
    char buf[64];
    assert_int_equal(dcp_module_pick_image(targets, major, minor, buf, sizeof(buf)), choice);
    assert_string_equal(buf, text);
}

static void test_pick_image(void **state)
{
    (void)state;
    const char *t = "sm_80,sm_90,sm_100,compute_100";
    expect_pick(t, 9, 0, DCP_IMAGE_SASS, "SASS sm_90");
    expect_pick(t, 8, 0, DCP_IMAGE_SASS, "SASS sm_80");
    expect_pick(t, 8, 9, DCP_IMAGE_SASS, "SASS sm_80"); /* same major, newer minor runs it */
    expect_pick(t, 10, 3, DCP_IMAGE_SASS, "SASS sm_100");
    expect_pick(t, 12, 0, DCP_IMAGE_PTX, "PTX JIT from compute_100");
    expect_pick(t, 7, 5, DCP_IMAGE_NONE, "no image for sm_75");
    expect_pick("sm_90a,compute_90", 9, 0, DCP_IMAGE_SASS, "SASS sm_90a");
    expect_pick("sm_90a,compute_90", 10, 0, DCP_IMAGE_PTX, "PTX JIT from compute_90");
    expect_pick("sm_90a", 9, 1, DCP_IMAGE_NONE, "no image for sm_91");
    expect_pick("compute_80,compute_90", 9, 0, DCP_IMAGE_PTX, "PTX JIT from compute_90");
    expect_pick("", 9, 0, DCP_IMAGE_NONE, "no image for sm_90");
    expect_pick(NULL, 9, 0, DCP_IMAGE_NONE, "no image for sm_90");
    expect_pick("lto_90,sm_,sm_x,,compute_", 9, 0, DCP_IMAGE_NONE, "no image for sm_90");
    assert_int_equal(dcp_module_pick_image(t, 9, 0, NULL, 0), DCP_IMAGE_SASS);
}

static void test_registry_lookup(void **state)
{
    (void)state;
    assert_null(dcp_embedded_module_find("no such module"));
    assert_null(dcp_embedded_module_find(NULL));
    for (size_t i = 0; i < dcp_embedded_module_count; i++)
        assert_ptr_equal(dcp_embedded_module_find(dcp_embedded_modules[i].name),
                         &dcp_embedded_modules[i]);
}

/* A fatbin from CUDA 13 needs a 13.x driver (R580+): an older one is refused before
 * the image reaches it, naming both versions, instead of failing with the driver's
 * opaque image error; a newer minor of the same major (minor-version compatibility)
 * and an unrecorded toolkit load. */
static void test_driver_older_than_toolkit(void **state)
{
    (void)state;
    struct test_module t;
    make_default_module(&t);
    t.m.toolkit_version = 13000;
    assert_int_equal(dcp_module_min_driver(&t.m), 13000);
    fake_env_set("FAKE_CUDA_DRIVER_VERSION", "12000");
    struct dcp_cuda *cu = fake_open();
    struct dcp_module *mod = NULL;
    assert_int_equal(load_with_fake(cu, &t.m, &mod), DCP_EDRIVERVERSION);
    assert_null(mod);
    assert_contains(dcp_last_error(), "built by CUDA 13.0");
    assert_contains(dcp_last_error(), "R580 or newer");
    assert_contains(dcp_last_error(), "the driver is CUDA 12.0");
    assert_int_equal(fake_calls(cu, "cuLibraryLoadData"), 0);
    assert_int_equal(fake_calls(cu, "cuModuleLoadDataEx"), 0);
    /* 12.8's fatbin on a 12.0 driver: the same major loads. */
    t.m.toolkit_version = 12080;
    assert_int_equal(dcp_module_min_driver(&t.m), 12000);
    assert_int_equal(load_with_fake(cu, &t.m, &mod), DCP_OK);
    dcp_module_unload(&mod);
    t.m.toolkit_version = 0; /* unknown: not checked */
    assert_int_equal(dcp_module_min_driver(&t.m), 0);
    assert_int_equal(load_with_fake(cu, &t.m, &mod), DCP_OK);
    dcp_module_unload(&mod);
    fake_drop_current(cu, 0);
    fake_close(&cu);
    test_module_free(&t);
}

/* The modules this build embedded (nvcc present) load on the fake. */
static void test_real_registry(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    struct dcp_cuda *cu = fake_open();
    fake_make_current(cu, 0);
    for (size_t i = 0; i < dcp_embedded_module_count; i++) {
        struct dcp_module *mod = NULL;
        const struct dcp_embedded_module *m = &dcp_embedded_modules[i];
        int status = dcp_module_load(cu, m, &mod);
        if (status)
            fail_msg("%s", dcp_last_error());
        char picked[64];
        dcp_module_pick_image(m->targets, 9, 0, picked, sizeof(picked));
        assert_contains(dcp_module_report(mod), picked);
        dcp_module_unload(&mod);
        /* The build recorded the toolkit (ptx/kernels/nvcc_fatbin.py --toolkit-version). */
        assert_true(m->toolkit_version >= 11000);
    }
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

/* A driver of the major release before the toolkit's cannot load this build's kernels. */
static void test_real_registry_old_driver(void **state)
{
    (void)state;
    if (dcp_embedded_module_count == 0)
        skip();
    const struct dcp_embedded_module *m = dcp_embedded_module_find("dcp_kernels");
    assert_non_null(m);
    char old[16];
    snprintf(old, sizeof(old), "%d", dcp_module_min_driver(m) - 1000);
    fake_env_set("FAKE_CUDA_DRIVER_VERSION", old);
    struct dcp_cuda *cu = fake_open();
    struct dcp_module *mod = NULL;
    assert_int_equal(load_with_fake(cu, m, &mod), DCP_EDRIVERVERSION);
    assert_contains(dcp_last_error(), "embedded module dcp_kernels was built by CUDA ");
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_load_library_sass, fake_test_setup),
        cmocka_unit_test_setup(test_load_module_fallback, fake_test_setup),
        cmocka_unit_test_setup(test_load_ptx_jit, fake_test_setup),
        cmocka_unit_test_setup(test_load_no_binary, fake_test_setup),
        cmocka_unit_test_setup(test_load_needs_context, fake_test_setup),
        cmocka_unit_test_setup(test_corrupt_blobs, fake_test_setup),
        cmocka_unit_test_setup(test_frame_without_size, fake_test_setup),
        cmocka_unit_test_setup(test_not_a_fatbin, fake_test_setup),
        cmocka_unit_test_setup(test_pick_image, fake_test_setup),
        cmocka_unit_test_setup(test_registry_lookup, fake_test_setup),
        cmocka_unit_test_setup(test_real_registry, fake_test_setup),
        cmocka_unit_test_setup(test_driver_older_than_toolkit, fake_test_setup),
        cmocka_unit_test_setup(test_real_registry_old_driver, fake_test_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
