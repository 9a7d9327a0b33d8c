/*
 * cuda_api.h: the CUDA driver API as libdcp uses it, loaded with dlopen.
 *
 * libdcp never includes <cuda.h> and never links libcuda: the types below mirror
 * the driver ABI (values and layouts as in CUDA 13.0's cuda.h) for the subset we
 * use, and every entry point is resolved at run time through cuGetProcAddress_v2
 * by its base name and the CUDA version whose ABI we call it with ("cuMemAlloc"
 * at 3020 is the 64-bit cuMemAlloc_v2). Nothing is ever looked up with dlsym but
 * cuGetProcAddress_v2 itself, so macro renames in cuda.h cannot bite us.
 */
#ifndef DCP_LOADER_CUDA_API_H
#define DCP_LOADER_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------- */
/* Driver types (ABI mirrors).                                                */

typedef int CUresult;                              ///< CUDA_SUCCESS or a CUDA_ERROR_* code.
typedef int CUdevice;                              ///< Device ordinal.
typedef unsigned long long CUdeviceptr;            ///< Device address (64-bit ABI, "_v2").
typedef unsigned long long CUmemGenericAllocationHandle; ///< Physical allocation of the VMM API.
typedef struct CUctx_st *CUcontext;                ///< Context.
typedef struct CUmod_st *CUmodule;                 ///< Module (context-bound code).
typedef struct CUfunc_st *CUfunction;              ///< Kernel in one context.
typedef struct CUlib_st *CUlibrary;                ///< Library (context-independent code, 12.0+).
typedef struct CUkern_st *CUkernel;                ///< Kernel of a library.
typedef struct CUstream_st *CUstream;              ///< Stream (NULL: the legacy default stream).
typedef struct CUevent_st *CUevent;                ///< Event.
typedef struct CUgraph_st *CUgraph;                ///< Graph (what a stream capture recorded).
typedef struct CUgraphExec_st *CUgraphExec;        ///< Instantiated graph, launched on a stream.
typedef int CUdevice_attribute;                    ///< CU_DEVICE_ATTRIBUTE_* value.
typedef int CUfunction_attribute;                  ///< CU_FUNC_ATTRIBUTE_* value.
typedef int CUpointer_attribute;                   ///< CU_POINTER_ATTRIBUTE_* value.
typedef int CUjit_option;                          ///< CU_JIT_* option.
typedef int CUlibraryOption;                       ///< CU_LIBRARY_* option.
typedef int CUmemAllocationGranularity_flags;      ///< CU_MEM_ALLOC_GRANULARITY_* value.
typedef int CUdriverProcAddressQueryResult;        ///< CU_GET_PROC_ADDRESS_{SUCCESS,SYMBOL_NOT_FOUND,VERSION_NOT_SUFFICIENT}.

/** Where memory lives (cuda.h CUmemLocation). */
typedef struct CUmemLocation {
    int type; ///< CU_MEM_LOCATION_TYPE_*.
    int id;   ///< Device ordinal for CU_MEM_LOCATION_TYPE_DEVICE.
} CUmemLocation;

/** Properties of a VMM allocation (cuda.h CUmemAllocationProp, 32 bytes). */
typedef struct CUmemAllocationProp {
    int type;                    ///< CU_MEM_ALLOCATION_TYPE_PINNED.
    int requestedHandleTypes;    ///< CU_MEM_HANDLE_TYPE_NONE unless exported.
    CUmemLocation location;      ///< Device that holds the memory.
    void *win32HandleMetaData;   ///< Windows only; must be NULL.
    struct {
        unsigned char compressionType;      ///< 0: not compressible.
        unsigned char gpuDirectRDMACapable; ///< 0 unless used with RDMA.
        unsigned short usage;               ///< 0.
        unsigned char reserved[4];          ///< Zero.
    } allocFlags;                ///< Allocation hints; zero them.
} CUmemAllocationProp;

/** Access rights of one location to a mapped range (cuda.h CUmemAccessDesc). */
typedef struct CUmemAccessDesc {
    CUmemLocation location; ///< Who gets access.
    int flags;              ///< CU_MEM_ACCESS_FLAGS_PROT_*.
} CUmemAccessDesc;

_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp ABI");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc ABI");

/** CUresult values libdcp acts on (the full list is in the name table of cuda_api.c). */
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_MERGE = 902,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    CUDA_ERROR_CAPTURED_EVENT = 907,
    CUDA_ERROR_UNKNOWN = 999,
};

/** cuGetProcAddress flags and results. */
enum {
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

/** Device attributes we query. */
enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
};

/** Kernel attributes we query or set. */
enum {
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
    CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9,
};

/** Pointer attributes we query, and the memory types they report. */
enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
};

/** JIT options passed to module/library loading. */
enum {
    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_JIT_LOG_VERBOSE = 12,
};

/** Virtual memory management (VMM) constants. */
enum {
    CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_HANDLE_TYPE_NONE = 0,
    CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
    CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
};

/** Stream and event creation flags. */
enum {
    CU_STREAM_DEFAULT = 0,
    CU_STREAM_NON_BLOCKING = 1,
    CU_EVENT_DEFAULT = 0,
    CU_EVENT_DISABLE_TIMING = 2,
};

/** Stream capture (cuStreamBeginCapture modes, cuStreamIsCapturing states). */
enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2,
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};

/* ------------------------------------------------------------------------- */
/* Entry points.                                                              */

#define DCP_CUDA_REQUIRED 1 ///< dcp_cuda_open() fails without it.
#define DCP_CUDA_OPTIONAL 0 ///< May be NULL in struct dcp_cuda_api.

/**
 * Every driver entry point libdcp calls:
 *   X(base name, CUDA version of the ABI we call, DCP_CUDA_REQUIRED/OPTIONAL,
 *     return type, parameter list).
 * The version selects the ABI: cuGetProcAddress_v2 returns the newest variant of
 * the symbol that exists at that version, e.g. cuMemAlloc at 3020 is cuMemAlloc_v2
 * (64-bit sizes), cuCtxSynchronize at 2000 is the argument-less one (13.0 added a
 * variant with a context parameter), cuStreamDestroy at 4000 is cuStreamDestroy_v2.
 * cuStreamBeginCapture at 10010 is cuStreamBeginCapture_v2 (with a capture mode);
 * cuGraphInstantiateWithFlags (11.4) is what cuda.h 12 calls cuGraphInstantiate.
 * Optional entries: the cuLibrary API (12.0+; modules are the fallback) and the
 * driver's own error strings, which libdcp never relies on (the toolkit's stub
 * answers even cuGetErrorString with CUDA_ERROR_STUB_LIBRARY).
 */
#define DCP_CUDA_FUNCTIONS(X)                                                                      \
    X(cuInit, 2000, DCP_CUDA_REQUIRED, CUresult, (unsigned int flags))                             \
    X(cuDriverGetVersion, 2020, DCP_CUDA_REQUIRED, CUresult, (int *version))                       \
    X(cuDeviceGet, 2000, DCP_CUDA_REQUIRED, CUresult, (CUdevice *device, int ordinal))             \
    X(cuDeviceGetCount, 2000, DCP_CUDA_REQUIRED, CUresult, (int *count))                           \
    X(cuDeviceGetName, 2000, DCP_CUDA_REQUIRED, CUresult, (char *name, int len, CUdevice dev))     \
    X(cuDeviceGetAttribute, 2000, DCP_CUDA_REQUIRED, CUresult,                                     \
      (int *value, CUdevice_attribute attrib, CUdevice dev))                                       \
    X(cuDeviceTotalMem, 3020, DCP_CUDA_REQUIRED, CUresult, (size_t *bytes, CUdevice dev))          \
    X(cuDevicePrimaryCtxRetain, 7000, DCP_CUDA_REQUIRED, CUresult, (CUcontext *ctx, CUdevice dev)) \
    X(cuDevicePrimaryCtxRelease, 11000, DCP_CUDA_REQUIRED, CUresult, (CUdevice dev))               \
    X(cuCtxSetCurrent, 4000, DCP_CUDA_REQUIRED, CUresult, (CUcontext ctx))                         \
    X(cuCtxGetCurrent, 4000, DCP_CUDA_REQUIRED, CUresult, (CUcontext *ctx))                        \
    X(cuCtxGetDevice, 2000, DCP_CUDA_REQUIRED, CUresult, (CUdevice *device))                       \
    X(cuCtxSynchronize, 2000, DCP_CUDA_REQUIRED, CUresult, (void))                                 \
    X(cuMemAlloc, 3020, DCP_CUDA_REQUIRED, CUresult, (CUdeviceptr *dptr, size_t bytes))            \
    X(cuMemFree, 3020, DCP_CUDA_REQUIRED, CUresult, (CUdeviceptr dptr))                            \
    X(cuMemGetInfo, 3020, DCP_CUDA_REQUIRED, CUresult, (size_t *free_bytes, size_t *total_bytes))  \
    X(cuMemcpyHtoD, 3020, DCP_CUDA_REQUIRED, CUresult,                                             \
      (CUdeviceptr dst, const void *src, size_t bytes))                                            \
    X(cuMemcpyDtoH, 3020, DCP_CUDA_REQUIRED, CUresult, (void *dst, CUdeviceptr src, size_t bytes)) \
    X(cuMemcpyHtoDAsync, 3020, DCP_CUDA_REQUIRED, CUresult,                                        \
      (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream))                           \
    X(cuMemcpyDtoHAsync, 3020, DCP_CUDA_REQUIRED, CUresult,                                        \
      (void *dst, CUdeviceptr src, size_t bytes, CUstream stream))                                 \
    X(cuMemcpyDtoDAsync, 3020, DCP_CUDA_REQUIRED, CUresult,                                        \
      (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))                           \
    X(cuMemcpyPeerAsync, 4000, DCP_CUDA_REQUIRED, CUresult,                                        \
      (CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t bytes,       \
       CUstream stream))                                                                           \
    X(cuMemsetD8Async, 3020, DCP_CUDA_REQUIRED, CUresult,                                          \
      (CUdeviceptr dst, unsigned char value, size_t count, CUstream stream))                       \
    X(cuMemsetD32Async, 3020, DCP_CUDA_REQUIRED, CUresult,                                         \
      (CUdeviceptr dst, unsigned int value, size_t count, CUstream stream))                        \
    X(cuMemAllocHost, 3020, DCP_CUDA_REQUIRED, CUresult, (void **ptr, size_t bytes))               \
    X(cuMemFreeHost, 2000, DCP_CUDA_REQUIRED, CUresult, (void *ptr))                               \
    X(cuMemAddressReserve, 10020, DCP_CUDA_REQUIRED, CUresult,                                     \
      (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,                         \
       unsigned long long flags))                                                                  \
    X(cuMemAddressFree, 10020, DCP_CUDA_REQUIRED, CUresult, (CUdeviceptr ptr, size_t size))        \
    X(cuMemCreate, 10020, DCP_CUDA_REQUIRED, CUresult,                                             \
      (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,        \
       unsigned long long flags))                                                                  \
    X(cuMemRelease, 10020, DCP_CUDA_REQUIRED, CUresult, (CUmemGenericAllocationHandle handle))     \
    X(cuMemMap, 10020, DCP_CUDA_REQUIRED, CUresult,                                                \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,           \
       unsigned long long flags))                                                                  \
    X(cuMemUnmap, 10020, DCP_CUDA_REQUIRED, CUresult, (CUdeviceptr ptr, size_t size))              \
    X(cuMemSetAccess, 10020, DCP_CUDA_REQUIRED, CUresult,                                          \
      (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))                   \
    X(cuMemGetAllocationGranularity, 10020, DCP_CUDA_REQUIRED, CUresult,                           \
      (size_t *granularity, const CUmemAllocationProp *prop,                                       \
       CUmemAllocationGranularity_flags option))                                                   \
    X(cuPointerGetAttribute, 4000, DCP_CUDA_REQUIRED, CUresult,                                    \
      (void *data, CUpointer_attribute attribute, CUdeviceptr ptr))                                \
    X(cuStreamCreate, 2000, DCP_CUDA_REQUIRED, CUresult, (CUstream *stream, unsigned int flags))   \
    X(cuStreamDestroy, 4000, DCP_CUDA_REQUIRED, CUresult, (CUstream stream))                       \
    X(cuStreamSynchronize, 2000, DCP_CUDA_REQUIRED, CUresult, (CUstream stream))                   \
    X(cuStreamQuery, 2000, DCP_CUDA_REQUIRED, CUresult, (CUstream stream))                         \
    X(cuStreamWaitEvent, 3020, DCP_CUDA_REQUIRED, CUresult,                                        \
      (CUstream stream, CUevent event, unsigned int flags))                                        \
    X(cuEventCreate, 2000, DCP_CUDA_REQUIRED, CUresult, (CUevent *event, unsigned int flags))      \
    X(cuEventDestroy, 4000, DCP_CUDA_REQUIRED, CUresult, (CUevent event))                          \
    X(cuEventRecord, 2000, DCP_CUDA_REQUIRED, CUresult, (CUevent event, CUstream stream))          \
    X(cuEventSynchronize, 2000, DCP_CUDA_REQUIRED, CUresult, (CUevent event))                      \
    X(cuEventQuery, 2000, DCP_CUDA_REQUIRED, CUresult, (CUevent event))                            \
    X(cuStreamBeginCapture, 10010, DCP_CUDA_REQUIRED, CUresult, (CUstream stream, int mode))       \
    X(cuStreamEndCapture, 10000, DCP_CUDA_REQUIRED, CUresult, (CUstream stream, CUgraph *graph))   \
    X(cuStreamIsCapturing, 10000, DCP_CUDA_REQUIRED, CUresult, (CUstream stream, int *status))     \
    X(cuGraphInstantiateWithFlags, 11040, DCP_CUDA_REQUIRED, CUresult,                             \
      (CUgraphExec *exec, CUgraph graph, unsigned long long flags))                                \
    X(cuGraphLaunch, 10000, DCP_CUDA_REQUIRED, CUresult, (CUgraphExec exec, CUstream stream))      \
    X(cuGraphExecDestroy, 10000, DCP_CUDA_REQUIRED, CUresult, (CUgraphExec exec))                  \
    X(cuGraphDestroy, 10000, DCP_CUDA_REQUIRED, CUresult, (CUgraph graph))                         \
    X(cuEventElapsedTime, 2000, DCP_CUDA_REQUIRED, CUresult,                                       \
      (float *ms, CUevent start, CUevent end))                                                     \
    X(cuLibraryLoadData, 12000, DCP_CUDA_OPTIONAL, CUresult,                                       \
      (CUlibrary *library, const void *code, CUjit_option *jit_options, void **jit_values,        \
       unsigned int num_jit_options, CUlibraryOption *library_options, void **library_values,      \
       unsigned int num_library_options))                                                          \
    X(cuLibraryUnload, 12000, DCP_CUDA_OPTIONAL, CUresult, (CUlibrary library))                    \
    X(cuLibraryGetKernel, 12000, DCP_CUDA_OPTIONAL, CUresult,                                      \
      (CUkernel *kernel, CUlibrary library, const char *name))                                    \
    X(cuKernelGetFunction, 12000, DCP_CUDA_OPTIONAL, CUresult, (CUfunction *fn, CUkernel kernel)) \
    X(cuModuleLoadDataEx, 2010, DCP_CUDA_REQUIRED, CUresult,                                       \
      (CUmodule *module, const void *image, unsigned int num_options, CUjit_option *options,      \
       void **values))                                                                             \
    X(cuModuleUnload, 2000, DCP_CUDA_REQUIRED, CUresult, (CUmodule module))                        \
    X(cuModuleGetFunction, 2000, DCP_CUDA_REQUIRED, CUresult,                                      \
      (CUfunction *fn, CUmodule module, const char *name))                                        \
    X(cuFuncGetAttribute, 2020, DCP_CUDA_REQUIRED, CUresult,                                       \
      (int *value, CUfunction_attribute attrib, CUfunction fn))                                    \
    X(cuFuncSetAttribute, 9000, DCP_CUDA_REQUIRED, CUresult,                                       \
      (CUfunction fn, CUfunction_attribute attrib, int value))                                     \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, DCP_CUDA_REQUIRED, CUresult,              \
      (int *num_blocks, CUfunction fn, int block_size, size_t dynamic_smem_bytes))                \
    X(cuLaunchKernel, 4000, DCP_CUDA_REQUIRED, CUresult,                                           \
      (CUfunction fn, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,               \
       unsigned int block_x, unsigned int block_y, unsigned int block_z,                           \
       unsigned int shared_bytes, CUstream stream, void **params, void **extra))                   \
    X(cuDeviceCanAccessPeer, 4000, DCP_CUDA_REQUIRED, CUresult,                                    \
      (int *can_access, CUdevice dev, CUdevice peer))                                              \
    X(cuCtxEnablePeerAccess, 4000, DCP_CUDA_REQUIRED, CUresult,                                    \
      (CUcontext peer, unsigned int flags))                                                        \
    X(cuGetErrorName, 6000, DCP_CUDA_OPTIONAL, CUresult, (CUresult error, const char **name))      \
    X(cuGetErrorString, 6000, DCP_CUDA_OPTIONAL, CUresult, (CUresult error, const char **text))

/** Driver entry points; field names are the base names of DCP_CUDA_FUNCTIONS. */
struct dcp_cuda_api {
#define DCP_CUDA_API_FIELD(name, version, required, ret, params) ret (*name) params;
    DCP_CUDA_FUNCTIONS(DCP_CUDA_API_FIELD)
#undef DCP_CUDA_API_FIELD
};

/** Oldest driver libdcp accepts: 12.0, the first with cuGetProcAddress_v2. */
#define DCP_CUDA_MIN_DRIVER_VERSION 12000

/** Environment variable naming the driver library to load instead of libcuda.so.1. */
#define DCP_CUDA_LIBRARY_ENV "DCP_CUDA_LIBRARY"

/** A loaded, initialised driver. */
struct dcp_cuda {
    struct dcp_cuda_api api; ///< Entry points; optional ones may be NULL.
    void *dl;                ///< dlopen handle of the driver library.
    char *path;              ///< File actually loaded (from the dynamic linker).
    int driver_version;      ///< cuDriverGetVersion, e.g. 13000 for 13.0.
    int device_count;        ///< Devices visible to this process (>= 1).
};

/** Parameters of dcp_cuda_open(); zero-initialise for defaults. */
struct dcp_cuda_open_params {
    const char *library; ///< Library to dlopen; NULL: $DCP_CUDA_LIBRARY, else "libcuda.so.1".
};

/**
 * Loads the driver, resolves every entry point, calls cuInit(0) and checks the
 * driver version and device count. Returns DCP_OK and *out, or (with a
 * dcp_last_error() message naming the library path and versions):
 * DCP_ENODRIVER (library not loadable), DCP_ESTUBDRIVER (the toolkit's stub
 * libcuda), DCP_EDRIVERVERSION (older than DCP_CUDA_MIN_DRIVER_VERSION, or a
 * required entry point missing), DCP_ENODEVICE (no device), DCP_ECUDA, DCP_ENOMEM.
 * p may be NULL.
 */
int dcp_cuda_open(const struct dcp_cuda_open_params *p, struct dcp_cuda **out);

/**
 * One line for logs and `dcp-run` output: "CUDA driver 13.0
 * (/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06), 8 devices". snprintf
 * contract: returns the full length, writes at most size bytes.
 */
int dcp_cuda_describe(const struct dcp_cuda *cu, char *buf, size_t size);

/** Unloads the driver library; sets *cu to NULL. NULL and *cu == NULL are fine. */
void dcp_cuda_close(struct dcp_cuda **cu);

/** One entry of DCP_CUDA_FUNCTIONS, for reporting and tests. */
struct dcp_cuda_symbol {
    const char *name; ///< Base name ("cuMemAlloc").
    int version;      ///< ABI version requested from cuGetProcAddress_v2.
    int required;     ///< DCP_CUDA_REQUIRED or DCP_CUDA_OPTIONAL.
};

/** Number of entries in DCP_CUDA_FUNCTIONS. */
size_t dcp_cuda_symbol_count(void);
/** Entry i (< dcp_cuda_symbol_count()) of DCP_CUDA_FUNCTIONS. */
const struct dcp_cuda_symbol *dcp_cuda_symbol_at(size_t i);
/** Whether entry i was resolved in cu. */
int dcp_cuda_symbol_resolved(const struct dcp_cuda *cu, size_t i);

/** "CUDA_ERROR_OUT_OF_MEMORY" for 2; "CUDA_ERROR_UNRECOGNIZED" for codes not in the table. */
const char *dcp_cuda_result_name(int result);
/** "out of memory" for 2; a generic text for codes not in the table. Never NULL. */
const char *dcp_cuda_result_message(int result);

/**
 * Turns a driver result into a status: DCP_OK for CUDA_SUCCESS, DCP_EDEVMEM for
 * CUDA_ERROR_OUT_OF_MEMORY, DCP_ECUDA otherwise, recording
 * "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory" as the last error.
 */
int dcp_cuda_check(int result, const char *call);

/** Formats a driver version as "13.0" (12040 -> "12.4"). Returns buf. */
char *dcp_cuda_version_string(int version, char *buf, size_t size);

/** What libdcp needs to know about a device. */
struct dcp_cuda_device_info {
    char name[256];       ///< Marketing name ("NVIDIA H200").
    int cc_major;         ///< Compute capability major (9 for sm_90).
    int cc_minor;         ///< Compute capability minor.
    int sm_count;         ///< Streaming multiprocessors.
    size_t total_memory;  ///< Bytes of device memory.
    int vmm_supported;    ///< 1 if cuMemCreate/cuMemMap work on this device.
};

/** Fills *info for device ordinal dev. DCP_OK, DCP_EINVAL or a dcp_cuda_check() status. */
int dcp_cuda_device_info(const struct dcp_cuda *cu, int dev, struct dcp_cuda_device_info *info);

#endif /* DCP_LOADER_CUDA_API_H */
