/*
 * The fatbin walker (loader/fatbin.h) on images built by the tests and, when
 * the build found nvcc, on a real fatbin: the layout libdcp and the fake
 * libcuda assume is checked against what nvcc writes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "cuda_test_util.h"
#include "fatbin.h"
#include "modules.h"

static void test_walk_built_image(void **state)
{
    (void)state;
    size_t size;
    unsigned char *image = test_fatbin_default(&size);
    char why[128] = "";
    assert_int_equal(dcp_fatbin_validate(image, size, why, sizeof(why)), 0);
    struct dcp_fatbin_iter it;
    assert_int_equal(dcp_fatbin_iter_init(&it, image, 0, why, sizeof(why)), size);
    struct dcp_fatbin_entry e;
    const unsigned char *payload;
    const unsigned arch[] = {80, 90, 100};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(dcp_fatbin_next(&it, &e, &payload, why, sizeof(why)), 1);
        assert_int_equal(e.arch, arch[i]);
        assert_int_equal(e.kind, i < 2 ? DCP_FATBIN_KIND_ELF : DCP_FATBIN_KIND_PTX);
    }
    assert_true(e.compressed_size > 0);
    assert_int_equal(ZSTD_getFrameContentSize(payload, e.compressed_size), e.uncompressed_size);
    assert_int_equal(dcp_fatbin_next(&it, &e, &payload, why, sizeof(why)), 0);
    free(image);
}

static void expect_invalid(const unsigned char *image, size_t size, const char *reason)
{
    char why[128] = "";
    assert_int_equal(dcp_fatbin_validate(image, size, why, sizeof(why)), -1);
    assert_contains(why, reason);
}

static void test_malformed(void **state)
{
    (void)state;
    size_t size;
    unsigned char *image = test_fatbin_default(&size);
    expect_invalid(image, size - 8, "disagrees with the image size");
    expect_invalid(image, 8, "shorter than a fatbin header");
    expect_invalid(NULL, 0, "shorter than a fatbin header");

    unsigned char *copy = malloc(size);
    assert_non_null(copy);
    memcpy(copy, image, size);
    copy[0] ^= 1;
    expect_invalid(copy, size, "no fatbin magic");

    memcpy(copy, image, size);
    copy[16] = 7; /* first entry's kind */
    expect_invalid(copy, size, "unknown kind");

    memcpy(copy, image, size);
    copy[16 + 4] = 200; /* header size beyond what is left */
    copy[16 + 5] = 200;
    expect_invalid(copy, size, "runs past the end");

    /* Entries that end before the header says: a gap is not an entry. */
    struct dcp_fatbin_header h;
    memcpy(&h, image, sizeof(h));
    size_t shorter = 16 + 40;
    h.fat_size = shorter - 16;
    memcpy(copy, &h, sizeof(h));
    expect_invalid(copy, shorter, "truncated fatbin entry header");

    h.fat_size = 0;
    memcpy(copy, &h, sizeof(h));
    expect_invalid(copy, 16, "fatbin has no entries");
    free(copy);
    free(image);
}

/* A fatbin nvcc built (tests/cuda/meson.build passes its path when nvcc exists):
 * sm_80 and sm_90 SASS plus compute_100 PTX of two dcpk_ kernels. */
static const char *nvcc_fatbin_path;

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    unsigned char *buf = malloc((size_t)n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void test_real_nvcc_fatbin(void **state)
{
    (void)state;
    if (!nvcc_fatbin_path)
        skip();
    size_t size;
    unsigned char *image = read_file(nvcc_fatbin_path, &size);
    char why[128] = "";
    if (dcp_fatbin_validate(image, size, why, sizeof(why)))
        fail_msg("nvcc's fatbin: %s", why);
    struct dcp_fatbin_iter it;
    dcp_fatbin_iter_init(&it, image, size, why, sizeof(why));
    struct dcp_fatbin_entry e;
    const unsigned char *payload;
    int elf80 = 0, elf90 = 0, ptx100 = 0;
    while (dcp_fatbin_next(&it, &e, &payload, why, sizeof(why)) == 1) {
        elf80 += e.kind == DCP_FATBIN_KIND_ELF && e.arch == 80;
        elf90 += e.kind == DCP_FATBIN_KIND_ELF && e.arch == 90;
        ptx100 += e.kind == DCP_FATBIN_KIND_PTX && e.arch == 100;
        if (e.compressed_size) /* a zstd frame of the size the header gives */
            assert_int_equal(ZSTD_getFrameContentSize(payload, e.compressed_size),
                             e.uncompressed_size);
    }
    assert_int_equal(elf80 + elf90 + ptx100, 3);
    assert_int_equal(elf80 * elf90 * ptx100, 1);

    /* The fake driver takes it, JIT-compiling the PTX for a device it has no SASS for. */
    fake_env_reset();
    fake_env_set("FAKE_CUDA_SM", "120");
    struct test_module t;
    test_module_make(&t, "nvcc", image, size, "sm_80,sm_90,compute_100");
    struct dcp_cuda *cu = fake_open();
    fake_make_current(cu, 0);
    struct dcp_module *mod = NULL;
    if (dcp_module_load(cu, &t.m, &mod))
        fail_msg("%s", dcp_last_error());
    assert_contains(dcp_module_report(mod), "PTX JIT from compute_100 on sm_120");
    CUfunction fn;
    assert_int_equal(dcp_module_get_function(mod, "dcpk_not_in_it", &fn), DCP_ENOENT);
    if (fake_has_kernels(cu))
        assert_int_equal(dcp_module_get_function(mod, "dcpk_fill", &fn), DCP_OK);
    dcp_module_unload(&mod);
    fake_drop_current(cu, 0);
    fake_close(&cu);
    test_module_free(&t);
    free(image);
}

int main(int argc, char **argv)
{
    nvcc_fatbin_path = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_built_image),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_real_nvcc_fatbin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
