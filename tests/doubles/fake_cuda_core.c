/*
 * fake_cuda_core.c: the libcuda.so.1 double's configuration, cuGetProcAddress_v2,
 * initialisation, devices, contexts, peers, error names and test hooks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

struct fake_driver fake = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .stall_changed = PTHREAD_COND_INITIALIZER,
};
_Thread_local struct CUctx_st *fake_current;

void fake_lock(void) { pthread_mutex_lock(&fake.lock); }
void fake_unlock(void) { pthread_mutex_unlock(&fake.lock); }

/* ------------------------------------------------------------------------- */
/* Configuration. */

static long env_long(const char *name, long fallback, long min, long max)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return fallback;
    char *end;
    long v = strtol(s, &end, 0);
    if (*end || v < min || v > max) {
        fprintf(stderr, "fake libcuda: ignoring %s=%s (want %ld..%ld)\n", name, s, min, max);
        return fallback;
    }
    return v;
}

static void configure(void)
{
    struct fake_config *c = &fake.cfg;
    c->stub = (int)env_long("FAKE_CUDA_STUB", 0, 0, 1);
    c->driver_version = (int)env_long("FAKE_CUDA_DRIVER_VERSION", 13000, 1000, 99999);
    c->devices = (int)env_long("FAKE_CUDA_DEVICES", 1, 0, FAKE_MAX_DEVICES);
    c->sm = (int)env_long("FAKE_CUDA_SM", 90, 10, 999);
    c->sm_count = (int)env_long("FAKE_CUDA_SM_COUNT", 16, 1, 1024);
    c->memory_bytes = (size_t)env_long("FAKE_CUDA_MEMORY_MB", 1024, 1, 1 << 20) << 20;
    c->fail_alloc = (unsigned long)env_long("FAKE_CUDA_FAIL_ALLOC", 0, 0, 1L << 40);
    c->no_vmm = (int)env_long("FAKE_CUDA_NO_VMM", 0, 0, 1);
    c->no_library_api = (int)env_long("FAKE_CUDA_NO_LIBRARY_API", 0, 0, 1);
    c->eager = (int)env_long("FAKE_CUDA_EAGER", 0, 0, 1);
    c->hang_launch = (unsigned long)env_long("FAKE_CUDA_HANG_LAUNCH", 0, 0, 1L << 40);
    c->break_replay = (int)env_long("FAKE_CUDA_BREAK_REPLAY", 0, 0, 1);
    for (int i = 0; i < FAKE_ENTRY_COUNT; i++)
        fake.requested_version[i] = -1;
    for (int d = 0; d < FAKE_MAX_DEVICES; d++)
        fake.contexts[d].device = d;
    fake.configured = 1;
}

/* Read once per load: the loader dlcloses the library, so each test that opens
 * the driver again sees its own environment. */
static void configure_once(void)
{
    fake_lock();
    if (!fake.configured)
        configure();
    fake_unlock();
}

CUresult fake_enter(enum fake_entry entry, int needs_init)
{
    configure_once();
    __atomic_add_fetch(&fake.calls[entry], 1, __ATOMIC_RELAXED);
    if (fake.cfg.stub)
        return CUDA_ERROR_STUB_LIBRARY;
    if (needs_init && !__atomic_load_n(&fake.initialized, __ATOMIC_ACQUIRE))
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

CUresult fake_need_context(void) { return fake_current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

int fake_current_device(void) { return fake_current->device; }

/* ------------------------------------------------------------------------- */
/* cuGetProcAddress_v2: the only symbol of the driver API the fake exports. */

typedef void (*fake_generic_fn)(void);

struct fake_proc {
    const char *name;
    int first, newer;
    fake_generic_fn fn;
};

static const struct fake_proc fake_procs[] = {
#define FAKE_PROC(name, first, newer) {#name, first, newer, (fake_generic_fn)fake_##name},
    FAKE_CUDA_ENTRIES(FAKE_PROC)
#undef FAKE_PROC
};

static int find_proc(const char *name)
{
    for (int i = 0; i < FAKE_ENTRY_COUNT; i++)
        if (strcmp(fake_procs[i].name, name) == 0)
            return i;
    return -1;
}

static int hidden_by_config(const char *name)
{
    return fake.cfg.no_library_api &&
           (strncmp(name, "cuLibrary", 9) == 0 || strncmp(name, "cuKernel", 8) == 0);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, uint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    configure_once();
    fake_lock();
    fake.stats.proc_lookups++;
    fake_unlock();
    if (fake.cfg.stub)
        return CUDA_ERROR_STUB_LIBRARY;
    if (!symbol || !pfn || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    int i = find_proc(symbol);
    if (i >= 0 && !hidden_by_config(symbol)) {
        const struct fake_proc *p = &fake_procs[i];
        fake_lock();
        fake.requested_version[i] = cuda_version;
        if (cuda_version < p->first || (p->newer && cuda_version >= p->newer)) {
            fake.stats.bad_version_lookups++;
            found = cuda_version < p->first ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        } else {
            found = CU_GET_PROC_ADDRESS_SUCCESS;
        }
        fake_unlock();
    }
    if (status)
        *status = found;
    if (found != CU_GET_PROC_ADDRESS_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    memcpy(pfn, &fake_procs[i].fn, sizeof(*pfn));
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Initialisation and devices. */

CUresult fake_cuInit(unsigned int flags)
{
    FAKE_ENTER_UNINIT(cuInit);
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake.cfg.devices == 0)
        return CUDA_ERROR_NO_DEVICE;
    __atomic_store_n(&fake.initialized, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

CUresult fake_cuDriverGetVersion(int *version)
{
    FAKE_ENTER_UNINIT(cuDriverGetVersion);
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = fake.cfg.driver_version;
    return CUDA_SUCCESS;
}

static int valid_device(CUdevice dev) { return dev >= 0 && dev < fake.cfg.devices; }

CUresult fake_cuDeviceGet(CUdevice *device, int ordinal)
{
    FAKE_ENTER(cuDeviceGet);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetCount(int *count)
{
    FAKE_ENTER(cuDeviceGetCount);
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fake.cfg.devices;
    return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetName(char *name, int len, CUdevice dev)
{
    FAKE_ENTER(cuDeviceGetName);
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "Fake GPU");
    return CUDA_SUCCESS;
}

/* The attributes the fake models; anything else is an error so that a runtime
 * querying something new gets it added here rather than a silent 0. */
static int device_attribute(CUdevice_attribute attrib, CUdevice dev, int *value)
{
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = FAKE_SHARED_PER_BLOCK; return 1;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = fake.cfg.sm_count; return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x10 + dev; return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = 50 << 20; return 1;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = fake.cfg.sm / 10; return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = fake.cfg.sm % 10; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *value = FAKE_SHARED_PER_SM; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = FAKE_SHARED_PER_BLOCK_OPTIN; return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = !fake.cfg.no_vmm; return 1;
    default: return 0;
    }
}

CUresult fake_cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev)
{
    FAKE_ENTER(cuDeviceGetAttribute);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!device_attribute(attrib, dev, value)) {
        fprintf(stderr, "fake libcuda: device attribute %d is not modelled (add it to "
                "tests/doubles/fake_cuda_core.c)\n", attrib);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult fake_cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    FAKE_ENTER(cuDeviceTotalMem);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fake.cfg.memory_bytes;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Contexts: one primary context per device; "current" is per thread. */

CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    FAKE_ENTER(cuDevicePrimaryCtxRetain);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    if (fake.contexts[dev].retained++ == 0)
        fake.stats.context_creations++; /* a driver creates the context here, and destroys it at the last release */
    fake_unlock();
    *ctx = &fake.contexts[dev];
    return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    FAKE_ENTER(cuDevicePrimaryCtxRelease);
    if (!valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_SUCCESS;
    fake_lock();
    if (fake.contexts[dev].retained > 0)
        fake.contexts[dev].retained--;
    else
        r = CUDA_ERROR_INVALID_CONTEXT;
    fake_unlock();
    return r;
}

static int known_context(CUcontext ctx)
{
    return ctx >= &fake.contexts[0] && ctx < &fake.contexts[fake.cfg.devices];
}

CUresult fake_cuCtxSetCurrent(CUcontext ctx)
{
    FAKE_ENTER(cuCtxSetCurrent);
    if (ctx && !known_context(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    fake_current = ctx;
    return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetCurrent(CUcontext *ctx)
{
    FAKE_ENTER(cuCtxGetCurrent);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    *ctx = fake_current;
    return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetDevice(CUdevice *device)
{
    FAKE_ENTER(cuCtxGetDevice);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fake_need_context();
    if (r == CUDA_SUCCESS)
        *device = fake_current_device();
    return r;
}

CUresult fake_cuDeviceCanAccessPeer(int *can_access, CUdevice dev, CUdevice peer)
{
    FAKE_ENTER(cuDeviceCanAccessPeer);
    if (!can_access)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev) || !valid_device(peer))
        return CUDA_ERROR_INVALID_DEVICE;
    *can_access = dev != peer;
    return CUDA_SUCCESS;
}

CUresult fake_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    FAKE_ENTER(cuCtxEnablePeerAccess);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (flags || !peer || !known_context(peer))
        return CUDA_ERROR_INVALID_VALUE;
    if (peer == fake_current)
        return CUDA_ERROR_INVALID_DEVICE;
    fake_lock();
    if (fake_current->peer_enabled[peer->device])
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    fake_current->peer_enabled[peer->device] = 1;
    fake_unlock();
    return r;
}

/* ------------------------------------------------------------------------- */
/* Error strings: offered, using the loader's table (libdcp never trusts them). */

CUresult fake_cuGetErrorName(CUresult error, const char **name)
{
    FAKE_ENTER_UNINIT(cuGetErrorName);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    *name = dcp_cuda_result_name(error);
    return CUDA_SUCCESS;
}

CUresult fake_cuGetErrorString(CUresult error, const char **text)
{
    FAKE_ENTER_UNINIT(cuGetErrorString);
    if (!text)
        return CUDA_ERROR_INVALID_VALUE;
    *text = dcp_cuda_result_message(error);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Test hooks. */

void fake_cuda_get_stats(struct fake_cuda_stats *out)
{
    fake_lock();
    *out = fake.stats;
    fake_unlock();
}

unsigned long fake_cuda_call_count(const char *name)
{
    int i = name ? find_proc(name) : -1;
    return i < 0 ? 0 : __atomic_load_n(&fake.calls[i], __ATOMIC_RELAXED);
}

int fake_cuda_requested_version(const char *name)
{
    int i = name ? find_proc(name) : -1;
    if (i < 0)
        return -1;
    fake_lock();
    int v = fake.configured ? fake.requested_version[i] : -1;
    fake_unlock();
    return v;
}

/* Unloading the double frees what a test left behind, so valgrind reports
 * only leaks of the code under test. */
__attribute__((destructor)) static void fake_cuda_unload(void)
{
    fake_stream_cleanup();
    fake_exec_cleanup();
    fake_memory_cleanup();
}
