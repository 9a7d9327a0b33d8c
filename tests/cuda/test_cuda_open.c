/*
 * Loading the CUDA driver: every open error and its message, entry point
 * resolution through cuGetProcAddress_v2 at the right ABI versions, result
 * names, device information. Runs against the fake libcuda (tests/doubles).
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_test_util.h"

static int open_library(const char *library, struct dcp_cuda **cu)
{
    struct dcp_cuda_open_params p = {.library = library};
    return dcp_cuda_open(&p, cu);
}

static void test_missing_library(void **state)
{
    (void)state;
    struct dcp_cuda *cu = (struct dcp_cuda *)&cu; /* must be reset to NULL */
    assert_int_equal(open_library("/nonexistent/libcuda.so.1", &cu), DCP_ENODRIVER);
    assert_null(cu);
    assert_contains(dcp_last_error(), "cannot load the CUDA driver /nonexistent/libcuda.so.1");
    assert_contains(dcp_last_error(), "No such file");
    assert_contains(dcp_last_error(), "DCP_CUDA_LIBRARY");
}

/* DCP_CUDA_LIBRARY naming a bad file: the message names the file once, the variable it
 * came from and the dynamic linker's reason, and says how to get the default back. */
static void test_environment_names_the_variable(void **state)
{
    (void)state;
    char keep[4096];
    snprintf(keep, sizeof(keep), "%s", getenv(DCP_CUDA_LIBRARY_ENV));
    fake_env_set(DCP_CUDA_LIBRARY_ENV, "/nonexistent/dir/libcuda-test.so");
    struct dcp_cuda *cu = NULL;
    assert_int_equal(dcp_cuda_open(NULL, &cu), DCP_ENODRIVER);
    const char *msg = dcp_last_error();
    assert_contains(msg, "cannot load the CUDA driver /nonexistent/dir/libcuda-test.so (named by DCP_CUDA_LIBRARY)");
    assert_contains(msg, "No such file");
    assert_contains(msg, "unset it to load libcuda.so.1");
    assert_null(strstr(strstr(msg, "libcuda-test.so") + 1, "libcuda-test.so")); /* named once */
    /* A file that loads but is no CUDA driver: the variable is blamed too. */
    fake_env_set(DCP_CUDA_LIBRARY_ENV, getenv("DCP_NCCL_LIBRARY"));
    assert_int_not_equal(dcp_cuda_open(NULL, &cu), DCP_OK);
    assert_contains(dcp_last_error(), "named by DCP_CUDA_LIBRARY");
    fake_env_set(DCP_CUDA_LIBRARY_ENV, keep);
}

static void test_param_overrides_environment(void **state)
{
    (void)state;
    struct dcp_cuda *cu = NULL;
    /* DCP_CUDA_LIBRARY names the fake, which would open fine. */
    assert_int_equal(open_library("/nonexistent/libcuda.so.1", &cu), DCP_ENODRIVER);
}

static void test_fake_stub(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_STUB", "1");
    struct dcp_cuda *cu = NULL;
    assert_int_equal(dcp_cuda_open(NULL, &cu), DCP_ESTUBDRIVER);
    assert_null(cu);
    assert_contains(dcp_last_error(), "stub libcuda");
    assert_contains(dcp_last_error(), "install the NVIDIA driver");
    char real[PATH_MAX];
    assert_non_null(realpath(fake_cuda_path(), real));
    assert_contains(dcp_last_error(), real);
}

/* The toolkit's own stub answers even cuGetProcAddress_v2 with error 34. */
static void test_toolkit_stub(void **state)
{
    (void)state;
    static const char *const stubs[] = {"/usr/local/cuda/lib64/stubs/libcuda.so",
                                        "/usr/local/cuda/lib/stubs/libcuda.so"};
    const char *stub = NULL;
    for (size_t i = 0; i < 2 && !stub; i++)
        if (access(stubs[i], R_OK) == 0)
            stub = stubs[i];
    if (!stub)
        skip();
    struct dcp_cuda *cu = NULL;
    assert_int_equal(open_library(stub, &cu), DCP_ESTUBDRIVER);
    assert_contains(dcp_last_error(), "stubs/libcuda.so is the CUDA toolkit's stub libcuda");
}

static void test_driver_too_old(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_DRIVER_VERSION", "11080");
    struct dcp_cuda *cu = NULL;
    assert_int_equal(dcp_cuda_open(NULL, &cu), DCP_EDRIVERVERSION);
    assert_contains(dcp_last_error(), "CUDA driver 11.8 ");
    assert_contains(dcp_last_error(), "older than 12.0");
}

static void test_oldest_supported_driver(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_DRIVER_VERSION", "12000");
    struct dcp_cuda *cu = fake_open();
    assert_int_equal(cu->driver_version, DCP_CUDA_MIN_DRIVER_VERSION);
    fake_close(&cu);
}

/* A library without cuGetProcAddress_v2 (here the fake NCCL) is no 12.0+ driver. */
static void test_not_a_driver(void **state)
{
    (void)state;
    struct dcp_cuda *cu = NULL;
    assert_int_equal(open_library(fake_nccl_path(), &cu), DCP_EDRIVERVERSION);
    assert_contains(dcp_last_error(), "has no cuGetProcAddress_v2");
    assert_contains(dcp_last_error(), "12.0");
}

static void test_no_device(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_DEVICES", "0");
    struct dcp_cuda *cu = NULL;
    assert_int_equal(dcp_cuda_open(NULL, &cu), DCP_ENODEVICE);
    assert_contains(dcp_last_error(), "no CUDA device");
    assert_contains(dcp_last_error(), "CUDA_VISIBLE_DEVICES");
}

static void test_open_reports_path_and_version(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_DEVICES", "3");
    struct dcp_cuda *cu = fake_open();
    char real[PATH_MAX], loaded[PATH_MAX];
    assert_non_null(realpath(fake_cuda_path(), real));
    assert_non_null(realpath(cu->path, loaded));
    assert_string_equal(real, loaded);
    assert_int_equal(cu->driver_version, 13000);
    assert_int_equal(cu->device_count, 3);
    char line[PATH_MAX + 64], want[PATH_MAX + 64];
    snprintf(want, sizeof(want), "CUDA driver 13.0 (%s), 3 devices", cu->path);
    assert_int_equal(dcp_cuda_describe(cu, line, sizeof(line)), (int)strlen(want));
    assert_string_equal(line, want);
    assert_int_equal(fake_calls(cu, "cuInit"), 1);
    fake_close(&cu);
    dcp_cuda_close(&cu); /* NULL handle: no-op */
    dcp_cuda_close(NULL);
}

/* Every required entry resolved, each requested at the version of the ABI the
 * loader declares (the fake knows the real version ranges independently). */
static void test_symbols_resolved_at_their_versions(void **state)
{
    (void)state;
    struct dcp_cuda *cu = fake_open();
    fake_cuda_requested_version_fn requested = (fake_cuda_requested_version_fn)(uintptr_t)
        fake_hook(cu, "fake_cuda_requested_version");
    assert_true(dcp_cuda_symbol_count() >= 55);
    for (size_t i = 0; i < dcp_cuda_symbol_count(); i++) {
        const struct dcp_cuda_symbol *s = dcp_cuda_symbol_at(i);
        assert_int_equal(dcp_cuda_symbol_resolved(cu, i), 1);
        assert_int_equal(requested(s->name), s->version);
        assert_null(strstr(s->name, "_v2")); /* base names only */
    }
    assert_null(dcp_cuda_symbol_at(dcp_cuda_symbol_count()));
    struct fake_cuda_stats st = fake_stats(cu);
    assert_int_equal(st.bad_version_lookups, 0);
    assert_int_equal(st.proc_lookups, dcp_cuda_symbol_count());
    assert_non_null(cu->api.cuLibraryLoadData);
    fake_close(&cu);
}

static void test_optional_symbols_may_be_missing(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_NO_LIBRARY_API", "1");
    struct dcp_cuda *cu = fake_open();
    assert_null(cu->api.cuLibraryLoadData);
    assert_null(cu->api.cuLibraryGetKernel);
    assert_null(cu->api.cuKernelGetFunction);
    assert_null(cu->api.cuLibraryUnload);
    assert_non_null(cu->api.cuModuleLoadDataEx);
    for (size_t i = 0; i < dcp_cuda_symbol_count(); i++)
        if (dcp_cuda_symbol_at(i)->required)
            assert_int_equal(dcp_cuda_symbol_resolved(cu, i), 1);
    fake_close(&cu);
}

/* The fake's own check of the ABI versions works: asking for a newer ABI than the
 * loader's declaration (cuCtxSynchronize at 13.0 takes a context) is refused. */
static void test_fake_refuses_other_abi(void **state)
{
    (void)state;
    struct dcp_cuda *cu = fake_open();
    typedef CUresult (*gpa_fn)(const char *, void **, int, uint64_t, CUdriverProcAddressQueryResult *);
    gpa_fn gpa = (gpa_fn)(uintptr_t)fake_hook(cu, "cuGetProcAddress_v2");
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    assert_int_equal(gpa("cuCtxSynchronize", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(gpa("cuMemAlloc", &fn, 2000, 0, &status), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    assert_int_equal(gpa("cuNoSuchThing", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    assert_int_equal(fake_stats(cu).bad_version_lookups, 2);
    /* Nothing but cuGetProcAddress_v2 and the hooks is exported. */
    assert_null(dlsym(cu->dl, "cuInit"));
    assert_null(dlsym(cu->dl, "cuMemAlloc_v2"));
    fake_close(&cu);
}

static void test_result_names(void **state)
{
    (void)state;
    assert_string_equal(dcp_cuda_result_name(0), "CUDA_SUCCESS");
    assert_string_equal(dcp_cuda_result_name(34), "CUDA_ERROR_STUB_LIBRARY");
    assert_string_equal(dcp_cuda_result_name(46), "CUDA_ERROR_DEVICE_UNAVAILABLE");
    assert_string_equal(dcp_cuda_result_name(100), "CUDA_ERROR_NO_DEVICE");
    assert_string_equal(dcp_cuda_result_name(209), "CUDA_ERROR_NO_BINARY_FOR_GPU");
    assert_string_equal(dcp_cuda_result_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
    assert_string_equal(dcp_cuda_result_name(999), "CUDA_ERROR_UNKNOWN");
    assert_string_equal(dcp_cuda_result_name(12345), "CUDA_ERROR_UNRECOGNIZED");
    assert_string_equal(dcp_cuda_result_message(2), "out of memory");
    assert_non_null(dcp_cuda_result_message(-7));
    /* Names are unique and all spelled CUDA_*. */
    for (int a = 0; a < 1000; a++) {
        const char *na = dcp_cuda_result_name(a);
        assert_int_equal(strncmp(na, "CUDA_", 5), 0);
        if (strcmp(na, "CUDA_ERROR_UNRECOGNIZED") == 0)
            continue;
        for (int b = a + 1; b < 1000; b++)
            assert_string_not_equal(na, dcp_cuda_result_name(b));
    }
}

static void test_check(void **state)
{
    (void)state;
    assert_int_equal(dcp_cuda_check(CUDA_SUCCESS, "cuInit"), DCP_OK);
    assert_int_equal(dcp_cuda_check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"), DCP_EDEVMEM);
    assert_string_equal(dcp_last_error(), "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory");
    assert_int_equal(dcp_cuda_check(700, "cuStreamSynchronize"), DCP_ECUDA);
    assert_string_equal(dcp_last_error(), "cuStreamSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (700): "
                                          "illegal memory access by a kernel");
}

static void test_version_string(void **state)
{
    (void)state;
    char buf[16];
    assert_string_equal(dcp_cuda_version_string(13000, buf, sizeof(buf)), "13.0");
    assert_string_equal(dcp_cuda_version_string(12040, buf, sizeof(buf)), "12.4");
    assert_string_equal(dcp_cuda_version_string(11080, buf, sizeof(buf)), "11.8");
}

static void test_device_info(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_SM", "100");
    fake_env_set("FAKE_CUDA_NO_VMM", "1");
    fake_env_set("FAKE_CUDA_MEMORY_MB", "512");
    fake_env_set("FAKE_CUDA_DEVICES", "2");
    struct dcp_cuda *cu = fake_open();
    struct dcp_cuda_device_info info;
    assert_int_equal(dcp_cuda_device_info(cu, 1, &info), DCP_OK);
    assert_string_equal(info.name, "Fake GPU");
    assert_int_equal(info.cc_major, 10);
    assert_int_equal(info.cc_minor, 0);
    assert_int_equal(info.sm_count, 16);
    assert_int_equal(info.total_memory, (size_t)512 << 20);
    assert_int_equal(info.vmm_supported, 0);
    assert_int_equal(dcp_cuda_device_info(cu, 2, &info), DCP_EINVAL);
    assert_int_equal(dcp_cuda_device_info(cu, -1, &info), DCP_EINVAL);
    fake_close(&cu);

    fake_env_reset();
    cu = fake_open();
    assert_int_equal(dcp_cuda_device_info(cu, 0, &info), DCP_OK);
    assert_int_equal(info.cc_major, 9);
    assert_int_equal(info.vmm_supported, 1);
    fake_close(&cu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_missing_library, fake_test_setup),
        cmocka_unit_test_setup(test_param_overrides_environment, fake_test_setup),
        cmocka_unit_test_setup(test_environment_names_the_variable, fake_test_setup),
        cmocka_unit_test_setup(test_fake_stub, fake_test_setup),
        cmocka_unit_test_setup(test_toolkit_stub, fake_test_setup),
        cmocka_unit_test_setup(test_driver_too_old, fake_test_setup),
        cmocka_unit_test_setup(test_oldest_supported_driver, fake_test_setup),
        cmocka_unit_test_setup(test_not_a_driver, fake_test_setup),
        cmocka_unit_test_setup(test_no_device, fake_test_setup),
        cmocka_unit_test_setup(test_open_reports_path_and_version, fake_test_setup),
        cmocka_unit_test_setup(test_symbols_resolved_at_their_versions, fake_test_setup),
        cmocka_unit_test_setup(test_optional_symbols_may_be_missing, fake_test_setup),
        cmocka_unit_test_setup(test_fake_refuses_other_abi, fake_test_setup),
        cmocka_unit_test_setup(test_result_names, fake_test_setup),
        cmocka_unit_test_setup(test_check, fake_test_setup),
        cmocka_unit_test_setup(test_version_string, fake_test_setup),
        cmocka_unit_test_setup(test_device_info, fake_test_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
