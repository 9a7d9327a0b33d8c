/*
 * The fake libcuda itself, through the loader's entry points: memory and its
 * checks, VMM, streams and events (with stalls), fault injection, and a kernel
 * launch through the CPU implementation when ptx/cpu is linked in. The CUDA
 * backend's tests rely on this behaviour.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "dcp_kernels/cpu.h"
#include "modules.h"

/* Absent until ptx/cpu lands; the launch test skips then. */
#pragma weak dcpk_kernel_by_entry_name

static void test_alloc_copy_free(void **state)
{
    (void)state;
    struct dcp_cuda *cu = fake_open();
    const struct dcp_cuda_api *api = &cu->api;
    CUdeviceptr d = 0;
    assert_int_equal(api->cuMemAlloc(&d, 1000), CUDA_ERROR_INVALID_CONTEXT);
    fake_make_current(cu, 0);
    size_t free0, total;
    assert_int_equal(api->cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
    assert_int_equal(total, (size_t)1024 << 20);
    assert_int_equal(api->cuMemAlloc(&d, 1000), CUDA_SUCCESS);
    size_t free1;
    assert_int_equal(api->cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
    assert_true(free1 < free0);

    /* New memory is poisoned (NaN as floats). */
    float f[250];
    assert_int_equal(api->cuMemcpyDtoH(f, d, sizeof(f)), CUDA_SUCCESS);
    assert_true(isnan(f[0]) && isnan(f[249]));
    for (int i = 0; i < 250; i++)
        f[i] = (float)i;
    assert_int_equal(api->cuMemcpyHtoD(d, f, sizeof(f)), CUDA_SUCCESS);
    assert_int_equal(api->cuMemsetD32Async(d, 0x3f800000u, 10, NULL), CUDA_SUCCESS);
    float back[250];
    assert_int_equal(api->cuMemcpyDtoH(back, d, sizeof(back)), CUDA_SUCCESS);
    assert_true(back[0] == 1.0f && back[9] == 1.0f && back[10] == 10.0f && back[249] == 249.0f);

    /* Out of bounds, unallocated, misaligned: refused. */
    assert_int_equal(api->cuMemcpyHtoD(d + 8, f, sizeof(f)), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(api->cuMemcpyDtoH(back, (CUdeviceptr)(uintptr_t)back, 4),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(api->cuMemsetD32Async(d + 2, 0, 1, NULL), CUDA_ERROR_INVALID_VALUE);

    unsigned int type = 0;
    CUdeviceptr base = 0;
    size_t range = 0;
    assert_int_equal(api->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 40),
                     CUDA_SUCCESS);
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    assert_int_equal(api->cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 40),
                     CUDA_SUCCESS);
    assert_true(base == d);
    assert_int_equal(api->cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d), CUDA_SUCCESS);
    assert_true(range >= 1000);

    void *host = NULL;
    assert_int_equal(api->cuMemAllocHost(&host, 64), CUDA_SUCCESS);
    assert_int_equal(api->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                (CUdeviceptr)(uintptr_t)host), CUDA_SUCCESS);
    assert_int_equal(type, CU_MEMORYTYPE_HOST);
    assert_int_equal(fake_stats(cu).live_host_allocs, 1);
    assert_int_equal(api->cuMemFreeHost(host), CUDA_SUCCESS);
    assert_int_equal(api->cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(api->cuMemFree(d), CUDA_SUCCESS);
    assert_int_equal(api->cuMemFree(d), CUDA_ERROR_INVALID_VALUE);
    struct fake_cuda_stats s = fake_stats(cu);
    assert_int_equal(s.live_device_bytes, 0);
    assert_int_equal(s.device_allocs, 1);
    assert_int_equal(s.device_frees, 1);
    assert_int_equal(s.live_host_allocs, 0);
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

static void test_injected_alloc_failure(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_FAIL_ALLOC", "2");
    struct dcp_cuda *cu = fake_open();
    fake_make_current(cu, 0);
    CUdeviceptr a = 0, b = 0, c = 0;
    assert_int_equal(cu->api.cuMemAlloc(&a, 4096), CUDA_SUCCESS);
    assert_int_equal(dcp_cuda_check(cu->api.cuMemAlloc(&b, 4096), "cuMemAlloc"), DCP_EDEVMEM);
    assert_string_equal(dcp_last_error(), "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory");
    assert_int_equal(cu->api.cuMemAlloc(&c, 4096), CUDA_SUCCESS);
    assert_int_equal(cu->api.cuMemFree(a), CUDA_SUCCESS);
    assert_int_equal(cu->api.cuMemFree(c), CUDA_SUCCESS);
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

static void test_memory_limit(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_MEMORY_MB", "1");
    struct dcp_cuda *cu = fake_open();
    fake_make_current(cu, 0);
    CUdeviceptr a = 0;
    assert_int_equal(cu->api.cuMemAlloc(&a, (size_t)2 << 20), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu->api.cuMemAlloc(&a, (size_t)1 << 19), CUDA_SUCCESS);
    assert_int_equal(cu->api.cuMemFree(a), CUDA_SUCCESS);
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

static CUmemAllocationProp device_prop(int dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

static void test_vmm(void **state)
{
    (void)state;
    struct dcp_cuda *cu = fake_open();
    const struct dcp_cuda_api *api = &cu->api;
    fake_make_current(cu, 0);
    CUmemAllocationProp prop = device_prop(0);
    size_t gran = 0;
    assert_int_equal(api->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                     CUDA_SUCCESS);
    assert_int_equal(gran, (size_t)2 << 20);

    CUdeviceptr va = 0;
    assert_int_equal(api->cuMemAddressReserve(&va, 4 * gran, 0, 0, 0), CUDA_SUCCESS);
    assert_int_equal(va % gran, 0);
    CUmemGenericAllocationHandle h = 0;
    assert_int_equal(api->cuMemCreate(&h, gran, &prop, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    /* The same physical memory at two addresses. */
    assert_int_equal(api->cuMemMap(va, gran, 0, h, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuMemMap(va + 2 * gran, gran, 0, h, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuMemMap(va, gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* mapped */
    int x = 42, y = 0;
    /* Not accessible before cuMemSetAccess. */
    assert_int_equal(api->cuMemcpyHtoD(va, &x, sizeof(x)), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    assert_int_equal(api->cuMemSetAccess(va, gran, &access, 1), CUDA_SUCCESS);
    assert_int_equal(api->cuMemSetAccess(va + 2 * gran, gran, &access, 1), CUDA_SUCCESS);
    assert_int_equal(api->cuMemSetAccess(va + gran, gran, &access, 1), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(api->cuMemcpyHtoD(va + 100, &x, sizeof(x)), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoH(&y, va + 2 * gran + 100, sizeof(y)), CUDA_SUCCESS);
    assert_int_equal(y, 42);
    /* A copy across the unmapped hole is refused. */
    assert_int_equal(api->cuMemcpyDtoDAsync(va, va + gran - 8, 16, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(fake_stats(cu).live_device_bytes, gran);

    /* Released while mapped: stays usable until unmapped. */
    assert_int_equal(api->cuMemRelease(h), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoH(&y, va + 100, sizeof(y)), CUDA_SUCCESS);
    assert_int_equal(api->cuMemAddressFree(va, 4 * gran), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    assert_int_equal(api->cuMemUnmap(va, gran), CUDA_SUCCESS);
    assert_int_equal(api->cuMemUnmap(va + 2 * gran, gran), CUDA_SUCCESS);
    assert_int_equal(api->cuMemUnmap(va, gran), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(api->cuMemRelease(h), CUDA_ERROR_INVALID_VALUE); /* released already */
    assert_int_equal(api->cuMemMap(va, gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(api->cuMemAddressFree(va, 4 * gran), CUDA_SUCCESS);
    struct fake_cuda_stats s = fake_stats(cu);
    assert_int_equal(s.live_device_bytes, 0);
    assert_int_equal(s.live_reservations, 0);
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

static void test_no_vmm(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_NO_VMM", "1");
    struct dcp_cuda *cu = fake_open();
    int vmm = -1;
    assert_int_equal(cu->api.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
                     CUDA_SUCCESS);
    assert_int_equal(vmm, 0);
    CUmemAllocationProp prop = device_prop(0);
    CUmemGenericAllocationHandle h;
    assert_int_equal(cu->api.cuMemCreate(&h, (size_t)2 << 20, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
    fake_close(&cu);
}

static void test_vmm_allocation_failure(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_FAIL_ALLOC", "1");
    struct dcp_cuda *cu = fake_open();
    CUmemAllocationProp prop = device_prop(0);
    CUmemGenericAllocationHandle h;
    assert_int_equal(cu->api.cuMemCreate(&h, (size_t)2 << 20, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu->api.cuMemCreate(&h, (size_t)2 << 20, &prop, 0), CUDA_SUCCESS);
    assert_int_equal(cu->api.cuMemRelease(h), CUDA_SUCCESS);
    fake_close(&cu);
}

static void test_streams_events_and_stalls(void **state)
{
    (void)state;
    struct dcp_cuda *cu = fake_open();
    const struct dcp_cuda_api *api = &cu->api;
    fake_make_current(cu, 0);
    CUstream s = NULL, other = NULL;
    CUevent a = NULL, b = NULL;
    assert_int_equal(api->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(api->cuEventCreate(&a, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(api->cuEventCreate(&b, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    assert_int_equal(api->cuEventRecord(a, s), CUDA_SUCCESS);
    assert_int_equal(api->cuEventQuery(a), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamQuery(s), CUDA_SUCCESS);
    float ms = -1;
    assert_int_equal(api->cuEventElapsedTime(&ms, a, a), CUDA_SUCCESS);
    assert_true(ms == 0.0f);
    assert_int_equal(api->cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);

    fake_cuda_stream_stall_fn stall =
        (fake_cuda_stream_stall_fn)(uintptr_t)fake_hook(cu, "fake_cuda_stream_stall");
    fake_cuda_stream_release_fn release =
        (fake_cuda_stream_release_fn)(uintptr_t)fake_hook(cu, "fake_cuda_stream_release");
    unsigned long id = stall(s);
    assert_true(id > 0);
    assert_int_equal(api->cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    assert_int_equal(api->cuEventQuery(a), CUDA_SUCCESS); /* recorded before the stall */
    assert_int_equal(api->cuEventRecord(b, s), CUDA_SUCCESS);
    assert_int_equal(api->cuEventQuery(b), CUDA_ERROR_NOT_READY);
    /* Work ordered after the stalled event waits too. */
    assert_int_equal(api->cuStreamWaitEvent(other, b, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamQuery(other), CUDA_ERROR_NOT_READY);
    release(id);
    assert_int_equal(api->cuEventQuery(b), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamQuery(other), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(s), CUDA_SUCCESS);
    assert_int_equal(api->cuEventSynchronize(b), CUDA_SUCCESS);
    assert_int_equal(api->cuCtxSynchronize(), CUDA_SUCCESS);
    release(id); /* twice: ignored */

    assert_int_equal(api->cuEventDestroy(a), CUDA_SUCCESS);
    assert_int_equal(api->cuEventDestroy(b), CUDA_SUCCESS);
    assert_int_equal(api->cuEventQuery(a), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(api->cuStreamDestroy(s), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamDestroy(other), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    struct fake_cuda_stats st = fake_stats(cu);
    assert_int_equal(st.live_streams, 0);
    assert_int_equal(st.live_events, 0);
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

/* Copies n floats of value v into a fresh device buffer's view: fills host[] */
static void fill_host(float *h, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        h[i] = v + (float)i;
}

/* What the device buffer holds now (a synchronous copy on the legacy stream,
 * after the context's work: cuCtxSynchronize first, so nothing is left pending). */
static float first_value(const struct dcp_cuda_api *api, CUdeviceptr d)
{
    float v = -1;
    assert_int_equal(api->cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoH(&v, d, sizeof(v)), CUDA_SUCCESS);
    return v;
}

/*
 * Streams really defer their work, so ordering bugs fail: a host-to-device copy
 * on the legacy stream (cuMemcpyHtoD) lands after a consumer on a non-blocking
 * stream, and a consumer that does not wait for its producer's event reads the
 * old data. The correct orderings (the copy on the consumer's stream, an event,
 * a blocking stream) see the new data. FAKE_CUDA_EAGER=1 runs everything in call
 * order and hides the bugs, as the double used to.
 */
static void check_orderings(int eager)
{
    if (eager)
        fake_env_set("FAKE_CUDA_EAGER", "1");
    struct dcp_cuda *cu = fake_open();
    const struct dcp_cuda_api *api = &cu->api;
    fake_make_current(cu, 0);
    enum { N = 64 };
    CUstream nb, nb2, blocking;
    CUevent ev;
    CUdeviceptr src, dst;
    assert_int_equal(api->cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamCreate(&nb2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(api->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    assert_int_equal(api->cuMemAlloc(&src, N * sizeof(float)), CUDA_SUCCESS);
    assert_int_equal(api->cuMemAlloc(&dst, N * sizeof(float)), CUDA_SUCCESS);
    float h[N];
    const size_t bytes = sizeof(h);

    /* 1. cuMemcpyHtoD (legacy stream) then a consumer on a non-blocking stream:
     * the consumer runs first and copies what was there before. */
    assert_int_equal(api->cuMemsetD32Async(src, 0, N, nb), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(nb), CUDA_SUCCESS);
    fill_host(h, N, 1.0f);
    assert_int_equal(api->cuMemcpyHtoD(src, h, bytes), CUDA_SUCCESS);
    fill_host(h, N, -5.0f); /* the host buffer may be reused at once (staged) */
    assert_int_equal(api->cuMemcpyDtoDAsync(dst, src, bytes, nb), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(nb), CUDA_SUCCESS);
    assert_true(first_value(api, dst) == (eager ? 1.0f : 0.0f));
    assert_true(first_value(api, src) == 1.0f); /* it did land, later */

    /* 2. The same consumer on a blocking stream waits for the legacy stream. */
    fill_host(h, N, 2.0f);
    assert_int_equal(api->cuMemcpyHtoD(src, h, bytes), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoDAsync(dst, src, bytes, blocking), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(blocking), CUDA_SUCCESS);
    assert_true(first_value(api, dst) == 2.0f);

    /* 3. The copy on the consumer's stream, or ordered by an event. */
    fill_host(h, N, 3.0f);
    assert_int_equal(api->cuMemcpyHtoDAsync(src, h, bytes, nb), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoDAsync(dst, src, bytes, nb), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(nb), CUDA_SUCCESS);
    assert_true(first_value(api, dst) == 3.0f);
    fill_host(h, N, 4.0f);
    assert_int_equal(api->cuMemcpyHtoD(src, h, bytes), CUDA_SUCCESS);
    assert_int_equal(api->cuEventRecord(ev, NULL), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamWaitEvent(nb, ev, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoDAsync(dst, src, bytes, nb), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(nb), CUDA_SUCCESS);
    assert_true(first_value(api, dst) == 4.0f);

    /* 4. Producer on one non-blocking stream, consumer on another: without the
     * event the consumer reads the old data. */
    assert_int_equal(api->cuMemsetD32Async(src, 0x40a00000u /* 5.0f */, N, nb), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoDAsync(dst, src, bytes, nb2), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(nb2), CUDA_SUCCESS);
    assert_true(first_value(api, dst) == (eager ? 5.0f : 4.0f));
    assert_int_equal(api->cuMemsetD32Async(src, 0x40c00000u /* 6.0f */, N, nb), CUDA_SUCCESS);
    assert_int_equal(api->cuEventRecord(ev, nb), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamWaitEvent(nb2, ev, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoDAsync(dst, src, bytes, nb2), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(nb2), CUDA_SUCCESS);
    assert_true(first_value(api, dst) == 6.0f);

    /* 5. A pinned source is read when the copy runs; a pageable one when enqueued. */
    float *pinned = NULL;
    assert_int_equal(api->cuMemAllocHost((void **)&pinned, bytes), CUDA_SUCCESS);
    fill_host(pinned, N, 7.0f);
    assert_int_equal(api->cuMemcpyHtoDAsync(src, pinned, bytes, nb), CUDA_SUCCESS);
    pinned[0] = 8.0f; /* too early: the copy has not run */
    assert_int_equal(api->cuStreamSynchronize(nb), CUDA_SUCCESS);
    assert_true(first_value(api, src) == (eager ? 7.0f : 8.0f));
    assert_int_equal(api->cuMemFreeHost(pinned), CUDA_SUCCESS);

    assert_int_equal(api->cuMemFree(src), CUDA_SUCCESS);
    assert_int_equal(api->cuMemFree(dst), CUDA_SUCCESS);
    assert_int_equal(api->cuEventDestroy(ev), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamDestroy(nb), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamDestroy(nb2), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamDestroy(blocking), CUDA_SUCCESS);
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

static void test_deferred_streams(void **state)
{
    (void)state;
    check_orderings(0);
}

static void test_eager_streams_hide_ordering_bugs(void **state)
{
    (void)state;
    check_orderings(1);
}

static void test_peers(void **state)
{
    (void)state;
    fake_env_set("FAKE_CUDA_DEVICES", "2");
    struct dcp_cuda *cu = fake_open();
    int can = -1;
    assert_int_equal(cu->api.cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
    assert_int_equal(can, 1);
    CUcontext other = NULL;
    assert_int_equal(cu->api.cuDevicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
    fake_make_current(cu, 0);
    assert_int_equal(cu->api.cuCtxEnablePeerAccess(other, 0), CUDA_SUCCESS);
    assert_int_equal(cu->api.cuCtxEnablePeerAccess(other, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    CUdevice dev = -1;
    assert_int_equal(cu->api.cuCtxGetDevice(&dev), CUDA_SUCCESS);
    assert_int_equal(dev, 0);
    fake_drop_current(cu, 0);
    assert_int_equal(cu->api.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
    assert_int_equal(cu->api.cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
    fake_close(&cu);
}

/* A whole launch: module -> function -> cuLaunchKernel -> CPU implementation. */
static void test_launch_fill(void **state)
{
    (void)state;
    struct dcp_cuda *cu = fake_open();
    if (!fake_has_kernels(cu) || !dcpk_kernel_by_entry_name) {
        fake_close(&cu);
        skip();
    }
    const struct dcpk_kernel_desc *desc = dcpk_kernel_by_entry_name("dcpk_fill");
    assert_non_null(desc);
    size_t size;
    unsigned char *image = test_fatbin_default(&size);
    struct test_module t;
    test_module_make(&t, "fill", image, size, "sm_80,sm_90,compute_100");
    free(image);
    fake_make_current(cu, 0);
    struct dcp_module *mod = NULL;
    assert_int_equal(dcp_module_load(cu, &t.m, &mod), DCP_OK);
    CUfunction fn;
    assert_int_equal(dcp_module_get_function(mod, "dcpk_fill", &fn), DCP_OK);

    enum { ROWS = 5, HEADS = 3, DIM = 8 };
    CUdeviceptr dst;
    assert_int_equal(cu->api.cuMemAlloc(&dst, ROWS * HEADS * DIM * sizeof(float)), CUDA_SUCCESS);
    struct dcpk_fill_params p = {.dst = dst, .key_base = 100, .seed = 7, .rows = ROWS,
                                 .heads = HEADS, .dim = DIM, .head_offset = 2,
                                 .dtype = DCPK_FP32, .amplitude = 0.5f, .inv_scale = 1.0f};
    struct dcpk_grid g = desc->grid(&p);
    void *args[] = {&p};
    assert_int_equal(cu->api.cuLaunchKernel(fn, g.x, g.y, g.z, 128, 1, 1, 0, NULL, args, NULL),
                     CUDA_SUCCESS);
    assert_int_equal(fake_stats(cu).launches, 0); /* queued: runs when someone waits */
    /* The wrong grid is refused: the CPU run would not match a GPU's. */
    assert_int_equal(cu->api.cuLaunchKernel(fn, g.x + 1, g.y, g.z, 128, 1, 1, 0, NULL, args, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    float out[ROWS * HEADS * DIM];
    assert_int_equal(cu->api.cuMemcpyDtoH(out, dst, sizeof(out)), CUDA_SUCCESS);
    for (uint32_t r = 0; r < ROWS; r++)
        for (uint32_t h = 0; h < HEADS; h++)
            for (uint32_t d = 0; d < DIM; d++)
                assert_float_equal(out[(r * HEADS + h) * DIM + d],
                                   0.5f * dcpk_synth_unit(7, 100 + r, 2 + h, d), 0.0);
    assert_int_equal(fake_stats(cu).launches, 1);
    assert_int_equal(cu->api.cuMemFree(dst), CUDA_SUCCESS);
    dcp_module_unload(&mod);
    fake_drop_current(cu, 0);
    fake_close(&cu);
    test_module_free(&t);
}

/* Stream capture as the driver does it: work on a capturing stream is recorded,
 * not run; a second stream joins through an event and must rejoin before the
 * end; the graph replays with what memory holds at launch; and what a capture
 * cannot hold is refused and invalidates it. */
static void test_stream_capture(void **state)
{
    (void)state;
    struct dcp_cuda *cu = fake_open();
    const struct dcp_cuda_api *api = &cu->api;
    fake_make_current(cu, 0);
    CUstream a, b;
    CUevent fork, join, outside;
    CUdeviceptr d;
    unsigned int *pinned = NULL;
    assert_int_equal(api->cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(api->cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    assert_int_equal(api->cuEventCreate(&join, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    assert_int_equal(api->cuEventCreate(&outside, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    assert_int_equal(api->cuMemAlloc(&d, 64), CUDA_SUCCESS);
    assert_int_equal(api->cuMemAllocHost((void **)&pinned, 16), CUDA_SUCCESS);
    assert_int_equal(api->cuMemsetD32Async(d, 0, 16, a), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamSynchronize(a), CUDA_SUCCESS);

    int st = -1;
    assert_int_equal(api->cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_RELAXED),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* the legacy stream */
    assert_int_equal(api->cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamIsCapturing(a, &st), CUDA_SUCCESS);
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    /* a: word 0 = 7; fork to b: word 1 = the pinned word, read when the graph runs */
    assert_int_equal(api->cuMemsetD32Async(d, 7, 1, a), CUDA_SUCCESS);
    assert_int_equal(api->cuEventRecord(fork, a), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamWaitEvent(b, fork, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamIsCapturing(b, &st), CUDA_SUCCESS);
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    assert_int_equal(api->cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
    assert_int_equal(api->cuMemcpyHtoDAsync(d + 4, pinned, 4, b), CUDA_SUCCESS);
    /* a copy of word 1 to word 2 on a, after b's copy: needs the join */
    assert_int_equal(api->cuEventRecord(join, b), CUDA_SUCCESS);
    CUgraph g = NULL;
    assert_int_equal(api->cuStreamEndCapture(a, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    assert_null(g);
    assert_int_equal(api->cuStreamIsCapturing(b, &st), CUDA_SUCCESS);
    assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE); /* the failed end ended the capture */

    /* Again, joined. Nothing ran while capturing. */
    assert_int_equal(api->cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
    assert_int_equal(api->cuMemsetD32Async(d, 7, 1, a), CUDA_SUCCESS);
    assert_int_equal(api->cuEventRecord(fork, a), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamWaitEvent(b, fork, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyHtoDAsync(d + 4, pinned, 4, b), CUDA_SUCCESS);
    assert_int_equal(api->cuEventRecord(join, b), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamWaitEvent(a, join, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuMemcpyDtoDAsync(d + 8, d + 4, 4, a), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamEndCapture(a, &g), CUDA_SUCCESS);
    assert_non_null(g);
    unsigned int words[3];
    assert_int_equal(api->cuMemcpyDtoH(words, d, sizeof(words)), CUDA_SUCCESS);
    assert_true(words[0] == 0 && words[1] == 0 && words[2] == 0);
    CUgraphExec x = NULL;
    assert_int_equal(api->cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    assert_int_equal(api->cuGraphDestroy(g), CUDA_SUCCESS);
    for (unsigned int run = 1; run <= 3; run++) {
        *pinned = 100 + run; /* a replay reads the host word as it is at launch */
        assert_int_equal(api->cuGraphLaunch(x, b), CUDA_SUCCESS);
        assert_int_equal(api->cuStreamSynchronize(b), CUDA_SUCCESS);
        assert_int_equal(api->cuMemcpyDtoH(words, d, sizeof(words)), CUDA_SUCCESS);
        assert_true(words[0] == 7 && words[1] == 100 + run && words[2] == 100 + run);
    }
    assert_int_equal(api->cuGraphExecDestroy(x), CUDA_SUCCESS);

    /* Refused under capture, each invalidating it: a synchronize of the stream, a
     * wait for work outside the capture, a pageable copy, a synchronous copy. */
    unsigned int pageable = 5;
    assert_int_equal(api->cuEventRecord(outside, b), CUDA_SUCCESS);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(api->cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
        const CUresult want[4] = {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                                  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED};
        const CUresult got = k == 0   ? api->cuStreamSynchronize(a)
                             : k == 1 ? api->cuStreamWaitEvent(a, outside, 0)
                             : k == 2 ? api->cuMemcpyHtoDAsync(d, &pageable, 4, a)
                                      : api->cuMemcpyHtoD(d, pinned, 4); /* unsafe in the capturing thread */
        assert_int_equal(got, want[k]);
        assert_int_equal(api->cuStreamIsCapturing(a, &st), CUDA_SUCCESS);
        assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        assert_int_equal(api->cuMemsetD32Async(d, 1, 1, a), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_int_equal(api->cuStreamEndCapture(a, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_null(g);
    }
    assert_int_equal(api->cuStreamEndCapture(a, &g), 401); /* not capturing: CUDA_ERROR_ILLEGAL_STATE */
    assert_int_equal(api->cuMemcpyDtoH(words, d, sizeof(words)), CUDA_SUCCESS);
    assert_int_equal(words[0], 7); /* nothing of the failed captures ran */

    assert_int_equal(api->cuMemFreeHost(pinned), CUDA_SUCCESS);
    assert_int_equal(api->cuMemFree(d), CUDA_SUCCESS);
    assert_int_equal(api->cuEventDestroy(fork), CUDA_SUCCESS);
    assert_int_equal(api->cuEventDestroy(join), CUDA_SUCCESS);
    assert_int_equal(api->cuEventDestroy(outside), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamDestroy(a), CUDA_SUCCESS);
    assert_int_equal(api->cuStreamDestroy(b), CUDA_SUCCESS);
    fake_drop_current(cu, 0);
    fake_close(&cu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_alloc_copy_free, fake_test_setup),
        cmocka_unit_test_setup(test_injected_alloc_failure, fake_test_setup),
        cmocka_unit_test_setup(test_memory_limit, fake_test_setup),
        cmocka_unit_test_setup(test_vmm, fake_test_setup),
        cmocka_unit_test_setup(test_no_vmm, fake_test_setup),
        cmocka_unit_test_setup(test_vmm_allocation_failure, fake_test_setup),
        cmocka_unit_test_setup(test_streams_events_and_stalls, fake_test_setup),
        cmocka_unit_test_setup(test_deferred_streams, fake_test_setup),
        cmocka_unit_test_setup(test_eager_streams_hide_ordering_bugs, fake_test_setup),
        cmocka_unit_test_setup(test_peers, fake_test_setup),
        cmocka_unit_test_setup(test_launch_fill, fake_test_setup),
        cmocka_unit_test_setup(test_stream_capture, fake_test_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
