/*
 * cuda_api.c: loading the CUDA driver with dlopen and resolving its entry points
 * through cuGetProcAddress_v2; CUresult names; device information.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "dl.h"
#include "util/util.h"

/* ------------------------------------------------------------------------- */
/* CUresult names and messages. Ours, because the driver's cuGetErrorString is
 * not available when it matters most (the stub answers it with error 34). */

struct cuda_result_text {
    int code;
    const char *name;
    const char *message;
};

static const struct cuda_result_text cuda_results[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "driver not initialized (cuInit not called)"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver is shutting down"},
    {5, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled"},
    {6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", "profiler not initialized"},
    {7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", "profiler already started"},
    {8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", "profiler already stopped"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "the loaded libcuda is the toolkit's stub, not a driver"},
    {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "the call needs a newer driver"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "device busy or unavailable (exclusive mode?)"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {102, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device not licensed for this operation"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "invalid kernel image"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid or no current context"},
    {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping failed"},
    {206, "CUDA_ERROR_UNMAP_FAILED", "unmapping failed"},
    {207, "CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image for this device"},
    {210, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
    {211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "resource not mapped as array"},
    {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", "resource not mapped as pointer"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error"},
    {215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit not supported by the device"},
    {216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "context already in use by another thread"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access not supported between these devices"},
    {218, "CUDA_ERROR_INVALID_PTX", "PTX JIT compilation failed"},
    {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid graphics context"},
    {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "PTX version not supported by this driver"},
    {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation disabled"},
    {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "execution affinity not supported"},
    {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "device-side synchronization not supported"},
    {226, "CUDA_ERROR_CONTAINED", "contained device error"},
    {300, "CUDA_ERROR_INVALID_SOURCE", "invalid kernel source"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
    {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "operating system call failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "operation not valid in the current state"},
    {402, "CUDA_ERROR_LOSSY_QUERY", "attribute query would lose information"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "operation not yet complete"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "illegal memory access by a kernel"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "kernel timed out"},
    {703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "incompatible texturing mode"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access already enabled"},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access not enabled"},
    {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "primary context already active"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context destroyed"},
    {710, "CUDA_ERROR_ASSERT", "device-side assertion failed"},
    {711, "CUDA_ERROR_TOO_MANY_PEERS", "too many peer mappings"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "host memory already registered"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "host memory not registered"},
    {714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "device hardware stack error"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "illegal instruction in a kernel"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address in a kernel"},
    {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "invalid address space in a kernel"},
    {718, "CUDA_ERROR_INVALID_PC", "invalid program counter in a kernel"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "kernel launch failed"},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "cooperative launch grid too large"},
    {721, "CUDA_ERROR_TENSOR_MEMORY_LEAK", "tensor memory not freed by a kernel"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported on this device"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not ready (fabric manager or driver service?)"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "driver and kernel module versions differ"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward-compatibility driver not supported on this device"},
    {805, "CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS connection failed"},
    {806, "CUDA_ERROR_MPS_RPC_FAILURE", "MPS remote call failed"},
    {807, "CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server not ready"},
    {808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "MPS client limit reached"},
    {809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "MPS connection limit reached"},
    {810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", "MPS client terminated"},
    {811, "CUDA_ERROR_CDP_NOT_SUPPORTED", "dynamic parallelism not supported"},
    {812, "CUDA_ERROR_CDP_VERSION_MISMATCH", "dynamic parallelism version mismatch"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not allowed during stream capture"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "stream capture invalidated"},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "stream capture merge not allowed"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "stream capture not started"},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "stream capture did not rejoin"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "stream capture isolation violated"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "implicit dependency on the legacy stream during capture"},
    {907, "CUDA_ERROR_CAPTURED_EVENT", "operation not allowed on a captured event"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "stream capture ended from another thread"},
    {909, "CUDA_ERROR_TIMEOUT", "wait timed out"},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "graph update failed"},
    {911, "CUDA_ERROR_EXTERNAL_DEVICE", "error in an external device"},
    {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "invalid cluster size"},
    {913, "CUDA_ERROR_FUNCTION_NOT_LOADED", "function not loaded"},
    {914, "CUDA_ERROR_INVALID_RESOURCE_TYPE", "invalid resource type"},
    {915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "invalid resource configuration"},
    {916, "CUDA_ERROR_KEY_ROTATION", "key rotation error"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct cuda_result_text *find_result(int result)
{
    for (size_t i = 0; i < DCP_ARRAY_SIZE(cuda_results); i++)
        if (cuda_results[i].code == result)
            return &cuda_results[i];
    return NULL;
}

const char *dcp_cuda_result_name(int result)
{
    const struct cuda_result_text *t = find_result(result);
    return t ? t->name : "CUDA_ERROR_UNRECOGNIZED";
}

const char *dcp_cuda_result_message(int result)
{
    const struct cuda_result_text *t = find_result(result);
    return t ? t->message : "error code not known to libdcp (newer driver?)";
}

int dcp_cuda_check(int result, const char *call)
{
    if (result == CUDA_SUCCESS)
        return DCP_OK;
    int status = result == CUDA_ERROR_OUT_OF_MEMORY ? DCP_EDEVMEM : DCP_ECUDA;
    return dcp_error(status, "%s: %s (%d): %s", call, dcp_cuda_result_name(result), result,
                     dcp_cuda_result_message(result));
}

char *dcp_cuda_version_string(int version, char *buf, size_t size)
{
    snprintf(buf, size, "%d.%d", version / 1000, version % 1000 / 10);
    return buf;
}

/* ------------------------------------------------------------------------- */
/* The symbol table, generated from DCP_CUDA_FUNCTIONS. */

struct cuda_symbol_slot {
    struct dcp_cuda_symbol symbol;
    size_t offset; /* of the function pointer in struct dcp_cuda_api */
};

static const struct cuda_symbol_slot cuda_symbols[] = {
#define DCP_CUDA_SLOT(name, version, required, ret, params) \
    {{#name, version, required}, offsetof(struct dcp_cuda_api, name)},
    DCP_CUDA_FUNCTIONS(DCP_CUDA_SLOT)
#undef DCP_CUDA_SLOT
};

typedef void (*cuda_generic_fn)(void);
_Static_assert(sizeof(cuda_generic_fn) == sizeof(void *), "function and data pointers differ");

size_t dcp_cuda_symbol_count(void) { return DCP_ARRAY_SIZE(cuda_symbols); }

const struct dcp_cuda_symbol *dcp_cuda_symbol_at(size_t i)
{
    return i < DCP_ARRAY_SIZE(cuda_symbols) ? &cuda_symbols[i].symbol : NULL;
}

static void *symbol_slot(const struct dcp_cuda_api *api, size_t i)
{
    return (char *)api + cuda_symbols[i].offset;
}

int dcp_cuda_symbol_resolved(const struct dcp_cuda *cu, size_t i)
{
    if (!cu || i >= DCP_ARRAY_SIZE(cuda_symbols))
        return 0;
    void *fn;
    memcpy(&fn, symbol_slot(&cu->api, i), sizeof(fn));
    return fn != NULL;
}

/* ------------------------------------------------------------------------- */
/* Opening the driver. */

typedef CUresult (*cuda_get_proc_address_fn)(const char *symbol, void **fn, int cuda_version,
                                             uint64_t flags,
                                             CUdriverProcAddressQueryResult *status);

/* The first required entry point the driver did not give us, reported only after
 * the version check (an old driver lacks symbols: its version is the real cause). */
struct missing_symbol {
    const char *name;
    int version;
    CUresult result;
    CUdriverProcAddressQueryResult status;
};

static int stub_driver_error(const struct dcp_cuda *cu)
{
    return dcp_error(DCP_ESTUBDRIVER,
                     "%s is the CUDA toolkit's stub libcuda, not a driver (it answers every "
                     "call with CUDA_ERROR_STUB_LIBRARY (34)); install the NVIDIA driver, or "
                     "remove the toolkit's stubs directory from the library path",
                     cu->path);
}

static const char *query_status_text(CUdriverProcAddressQueryResult status)
{
    switch (status) {
    case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: return "symbol not found";
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: return "driver version not sufficient";
    default: return "not resolved";
    }
}

/* Resolves every entry of the table. A missing required entry is remembered in
 * *missing (first one only); a stub driver is an immediate error. */
static int resolve_entry_points(struct dcp_cuda *cu, struct missing_symbol *missing)
{
    cuda_get_proc_address_fn get_proc =
        (cuda_get_proc_address_fn)(uintptr_t)dlsym(cu->dl, "cuGetProcAddress_v2");
    if (!get_proc)
        return dcp_error(DCP_EDRIVERVERSION,
                         "%s has no cuGetProcAddress_v2: not a CUDA driver, or one older "
                         "than 12.0 (libdcp needs 12.0 or newer)",
                         cu->path);
    for (size_t i = 0; i < DCP_ARRAY_SIZE(cuda_symbols); i++) {
        const struct dcp_cuda_symbol *s = &cuda_symbols[i].symbol;
        void *fn = NULL;
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = get_proc(s->name, &fn, s->version, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                              &status);
        if (r == CUDA_ERROR_STUB_LIBRARY)
            return stub_driver_error(cu);
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS)
            fn = NULL;
        memcpy(symbol_slot(&cu->api, i), &fn, sizeof(fn));
        if (!fn && s->required && !missing->name)
            *missing = (struct missing_symbol){s->name, s->version, r, status};
    }
    return DCP_OK;
}

static int missing_symbol_error(const struct dcp_cuda *cu, const struct missing_symbol *m)
{
    char have[24] = "of unknown version";
    if (cu->driver_version)
        dcp_cuda_version_string(cu->driver_version, have, sizeof(have));
    return dcp_error(DCP_EDRIVERVERSION,
                     "CUDA driver %s (%s) does not provide %s at ABI version %d: %s (%d), %s",
                     have, cu->path, m->name, m->version, dcp_cuda_result_name(m->result),
                     m->result, query_status_text(m->status));
}

static int init_driver(struct dcp_cuda *cu)
{
    CUresult r = cu->api.cuInit(0);
    if (r == CUDA_ERROR_STUB_LIBRARY)
        return stub_driver_error(cu);
    if (r == CUDA_ERROR_NO_DEVICE)
        return dcp_error(DCP_ENODEVICE, "CUDA driver %s: no CUDA device (cuInit: "
                         "CUDA_ERROR_NO_DEVICE); check nvidia-smi and CUDA_VISIBLE_DEVICES",
                         cu->path);
    return dcp_cuda_check(r, "cuInit");
}

static int check_driver_version(struct dcp_cuda *cu)
{
    int status = dcp_cuda_check(cu->api.cuDriverGetVersion(&cu->driver_version),
                                "cuDriverGetVersion");
    if (status)
        return status;
    if (cu->driver_version >= DCP_CUDA_MIN_DRIVER_VERSION)
        return DCP_OK;
    char have[16], need[16];
    return dcp_error(DCP_EDRIVERVERSION,
                     "CUDA driver %s (%s) is older than %s, the oldest libdcp supports; "
                     "update the NVIDIA driver",
                     dcp_cuda_version_string(cu->driver_version, have, sizeof(have)), cu->path,
                     dcp_cuda_version_string(DCP_CUDA_MIN_DRIVER_VERSION, need, sizeof(need)));
}

static int count_devices(struct dcp_cuda *cu)
{
    int status = dcp_cuda_check(cu->api.cuDeviceGetCount(&cu->device_count), "cuDeviceGetCount");
    if (status)
        return status;
    if (cu->device_count < 1)
        return dcp_error(DCP_ENODEVICE, "CUDA driver %s reports no CUDA device; check "
                         "nvidia-smi and CUDA_VISIBLE_DEVICES", cu->path);
    return DCP_OK;
}

/* The checks in the order that gives the most useful message: a stub first, then
 * cuInit, then the version (an old driver also misses entry points), then any
 * missing required entry point, then the device count. */
static int start_driver(struct dcp_cuda *cu)
{
    struct missing_symbol missing = {0};
    int status = resolve_entry_points(cu, &missing);
    if (status)
        return status;
    if (!cu->api.cuInit || !cu->api.cuDriverGetVersion)
        return missing_symbol_error(cu, &missing);
    if ((status = init_driver(cu)) || (status = check_driver_version(cu)))
        return status;
    if (missing.name)
        return missing_symbol_error(cu, &missing);
    return count_devices(cu);
}

int dcp_cuda_open(const struct dcp_cuda_open_params *p, struct dcp_cuda **out)
{
    if (!out)
        return dcp_error(DCP_EINVAL, "dcp_cuda_open: out is NULL");
    *out = NULL;
    const struct dcp_dl_choice lib = dcp_dl_choose(p ? p->library : NULL, DCP_CUDA_LIBRARY_ENV, "libcuda.so.1");
    struct dcp_cuda *cu = calloc(1, sizeof(*cu));
    if (!cu)
        return dcp_error(DCP_ENOMEM, "dcp_cuda_open: out of memory");
    cu->dl = dlopen(lib.library, RTLD_NOW | RTLD_LOCAL);
    if (!cu->dl) {
        const char *why = dlerror();
        free(cu);
        return dcp_dl_open_error(DCP_ENODRIVER, "the CUDA driver", &lib, why);
    }
    cu->path = dcp_dl_loaded_path(cu->dl, lib.library);
    int status = cu->path ? start_driver(cu) : dcp_error(DCP_ENOMEM, "dcp_cuda_open: out of memory");
    if (status) {
        dcp_cuda_close(&cu);
        return status == DCP_ENOMEM ? status : dcp_dl_blame_origin(status, &lib);
    }
    *out = cu;
    return DCP_OK;
}

int dcp_cuda_describe(const struct dcp_cuda *cu, char *buf, size_t size)
{
    char version[16];
    return snprintf(buf, size, "CUDA driver %s (%s), %d device%s",
                    dcp_cuda_version_string(cu->driver_version, version, sizeof(version)),
                    cu->path, cu->device_count, cu->device_count == 1 ? "" : "s");
}

void dcp_cuda_close(struct dcp_cuda **cu)
{
    if (!cu || !*cu)
        return;
    if ((*cu)->dl)
        dlclose((*cu)->dl);
    free((*cu)->path);
    free(*cu);
    *cu = NULL;
}

/* ------------------------------------------------------------------------- */

static int device_attribute(const struct dcp_cuda *cu, int dev, CUdevice_attribute attr,
                            int *value)
{
    return dcp_cuda_check(cu->api.cuDeviceGetAttribute(value, attr, dev), "cuDeviceGetAttribute");
}

int dcp_cuda_device_info(const struct dcp_cuda *cu, int dev, struct dcp_cuda_device_info *info)
{
    if (!cu || !info || dev < 0 || dev >= cu->device_count)
        return dcp_error(DCP_EINVAL, "dcp_cuda_device_info: no device %d (%d visible)", dev,
                         cu ? cu->device_count : 0);
    memset(info, 0, sizeof(*info));
    CUdevice device;
    int status = dcp_cuda_check(cu->api.cuDeviceGet(&device, dev), "cuDeviceGet");
    if (!status)
        status = dcp_cuda_check(cu->api.cuDeviceGetName(info->name, (int)sizeof(info->name), device),
                                "cuDeviceGetName");
    if (!status)
        status = dcp_cuda_check(cu->api.cuDeviceTotalMem(&info->total_memory, device),
                                "cuDeviceTotalMem");
    if (!status)
        status = device_attribute(cu, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                  &info->cc_major);
    if (!status)
        status = device_attribute(cu, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                  &info->cc_minor);
    if (!status)
        status = device_attribute(cu, device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                  &info->sm_count);
    if (!status)
        status = device_attribute(cu, device,
                                  CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                  &info->vmm_supported);
    info->name[sizeof(info->name) - 1] = '\0';
    return status;
}
