/*
 * fake_cuda.h: internals of the libcuda.so.1 test double (see README.md).
 *
 * The entry points are fake_<name> with the exact signatures of the loader's
 * DCP_CUDA_FUNCTIONS table (so any ABI drift between the two fails to compile),
 * reachable only through cuGetProcAddress_v2, at the versions FAKE_CUDA_ENTRIES
 * lists. One lock guards all state; kernels and copies run outside it, when
 * their stream gets there (fake_cuda_stream.c).
 */
#ifndef DCP_FAKE_CUDA_H
#define DCP_FAKE_CUDA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"
#include "fake_hooks.h"

/*
 * X(name, first CUDA version with the ABI the fake implements, first version with
 * a newer ABI (0: none)). A lookup outside [first, newer) would hand the caller a
 * function with a different signature on a real driver: the fake refuses it and
 * counts it in bad_version_lookups.
 */
#define FAKE_CUDA_ENTRIES(X)                  \
    X(cuInit, 2000, 0)                        \
    X(cuDriverGetVersion, 2020, 0)            \
    X(cuDeviceGet, 2000, 0)                   \
    X(cuDeviceGetCount, 2000, 0)              \
    X(cuDeviceGetName, 2000, 0)               \
    X(cuDeviceGetAttribute, 2000, 0)          \
    X(cuDeviceTotalMem, 3020, 0)              \
    X(cuDevicePrimaryCtxRetain, 7000, 0)      \
    X(cuDevicePrimaryCtxRelease, 7000, 0)     \
    X(cuCtxSetCurrent, 4000, 0)               \
    X(cuCtxGetCurrent, 4000, 0)               \
    X(cuCtxGetDevice, 2000, 13000)            \
    X(cuCtxSynchronize, 2000, 13000)          \
    X(cuMemAlloc, 3020, 0)                    \
    X(cuMemFree, 3020, 0)                     \
    X(cuMemGetInfo, 3020, 0)                  \
    X(cuMemcpyHtoD, 3020, 0)                  \
    X(cuMemcpyDtoH, 3020, 0)                  \
    X(cuMemcpyHtoDAsync, 3020, 0)             \
    X(cuMemcpyDtoHAsync, 3020, 0)             \
    X(cuMemcpyDtoDAsync, 3020, 0)             \
    X(cuMemcpyPeerAsync, 4000, 0)             \
    X(cuMemsetD8Async, 3020, 0)               \
    X(cuMemsetD32Async, 3020, 0)              \
    X(cuMemAllocHost, 3020, 0)                \
    X(cuMemFreeHost, 2000, 0)                 \
    X(cuMemAddressReserve, 10020, 0)          \
    X(cuMemAddressFree, 10020, 0)             \
    X(cuMemCreate, 10020, 0)                  \
    X(cuMemRelease, 10020, 0)                 \
    X(cuMemMap, 10020, 0)                     \
    X(cuMemUnmap, 10020, 0)                   \
    X(cuMemSetAccess, 10020, 0)               \
    X(cuMemGetAllocationGranularity, 10020, 0) \
    X(cuPointerGetAttribute, 4000, 0)         \
    X(cuStreamCreate, 2000, 0)                \
    X(cuStreamDestroy, 4000, 0)               \
    X(cuStreamSynchronize, 2000, 0)           \
    X(cuStreamQuery, 2000, 0)                 \
    X(cuStreamWaitEvent, 3020, 0)             \
    X(cuEventCreate, 2000, 0)                 \
    X(cuEventDestroy, 4000, 0)                \
    X(cuEventRecord, 2000, 0)                 \
    X(cuEventSynchronize, 2000, 0)            \
    X(cuEventQuery, 2000, 0)                  \
    X(cuEventElapsedTime, 2000, 0)            \
    X(cuStreamBeginCapture, 10010, 0)         \
    X(cuStreamEndCapture, 10000, 0)           \
    X(cuStreamIsCapturing, 10000, 0)          \
    X(cuGraphInstantiateWithFlags, 11040, 0)  \
    X(cuGraphLaunch, 10000, 0)                \
    X(cuGraphExecDestroy, 10000, 0)           \
    X(cuGraphDestroy, 10000, 0)               \
    X(cuLibraryLoadData, 12000, 0)            \
    X(cuLibraryUnload, 12000, 0)              \
    X(cuLibraryGetKernel, 12000, 0)           \
    X(cuKernelGetFunction, 12000, 0)          \
    X(cuModuleLoadDataEx, 2010, 0)            \
    X(cuModuleUnload, 2000, 0)                \
    X(cuModuleGetFunction, 2000, 0)           \
    X(cuFuncGetAttribute, 2020, 0)            \
    X(cuFuncSetAttribute, 9000, 0)            \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, 0) \
    X(cuLaunchKernel, 4000, 0)                \
    X(cuDeviceCanAccessPeer, 4000, 0)         \
    X(cuCtxEnablePeerAccess, 4000, 0)         \
    X(cuGetErrorName, 6000, 0)                \
    X(cuGetErrorString, 6000, 0)

/** The one driver symbol the fake exports (fake_cuda.map). */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, uint64_t flags,
                             CUdriverProcAddressQueryResult *status);

/* The fake's entry points, declared from the loader's table. */
#define FAKE_DECLARE(name, version, required, ret, params) ret fake_##name params;
DCP_CUDA_FUNCTIONS(FAKE_DECLARE)
#undef FAKE_DECLARE

/** Index of each entry point, for call counters. */
enum fake_entry {
#define FAKE_ENTRY_ENUM(name, first, newer) FAKE_ENTRY_##name,
    FAKE_CUDA_ENTRIES(FAKE_ENTRY_ENUM)
#undef FAKE_ENTRY_ENUM
    FAKE_ENTRY_COUNT
};

#define FAKE_MAX_DEVICES 16
#define FAKE_GRANULARITY ((size_t)2 << 20) /* VMM granularity, as on real GPUs */
#define FAKE_SHARED_PER_BLOCK (48 << 10)        /* dynamic shared memory without opting in */
#define FAKE_SHARED_PER_BLOCK_OPTIN (227 << 10) /* the most a kernel may opt in to (H100) */
#define FAKE_SHARED_PER_SM (228 << 10)          /* shared memory of one SM (H100/H200) */
#define FAKE_SHARED_RESERVED_PER_BLOCK (1 << 10) /* what the driver keeps per resident block */
#define FAKE_THREADS_PER_SM 2048
#define FAKE_BLOCKS_PER_SM 32
#define FAKE_REGS_PER_SM 65536
#define FAKE_REGS_PER_THREAD 64                 /* a kernel's registers when no report says (NUM_REGS) */

/** Behaviour chosen by environment variables at the first call after loading. */
struct fake_config {
    int stub;               /* FAKE_CUDA_STUB: every call answers CUDA_ERROR_STUB_LIBRARY */
    int driver_version;     /* FAKE_CUDA_DRIVER_VERSION (13000) */
    int devices;            /* FAKE_CUDA_DEVICES (1) */
    int sm;                 /* FAKE_CUDA_SM: compute capability as 90 for 9.0 */
    int sm_count;           /* FAKE_CUDA_SM_COUNT (16) */
    size_t memory_bytes;    /* FAKE_CUDA_MEMORY_MB (1024) per device */
    unsigned long fail_alloc; /* FAKE_CUDA_FAIL_ALLOC: the k-th device allocation fails (0: none) */
    int no_vmm;             /* FAKE_CUDA_NO_VMM */
    int no_library_api;     /* FAKE_CUDA_NO_LIBRARY_API */
    int eager;              /* FAKE_CUDA_EAGER: run work when enqueued (call order) */
    unsigned long hang_launch; /* FAKE_CUDA_HANG_LAUNCH: the k-th kernel launch never finishes (0: none) */
    int break_replay;       /* FAKE_CUDA_BREAK_REPLAY: cuGraphLaunch leaves out the last node of the replay order */
};

/** A primary context. */
struct CUctx_st {
    int device;
    int retained;
    unsigned char peer_enabled[FAKE_MAX_DEVICES];
};

/** State of the whole fake driver. */
struct fake_driver {
    pthread_mutex_t lock;
    pthread_cond_t stall_changed;
    int configured;
    int initialized;
    struct fake_config cfg;
    struct CUctx_st contexts[FAKE_MAX_DEVICES];
    size_t used_bytes[FAKE_MAX_DEVICES];
    unsigned long alloc_attempts;      /* device allocations tried, for FAKE_CUDA_FAIL_ALLOC */
    unsigned long launch_attempts;     /* kernel launches accepted, for FAKE_CUDA_HANG_LAUNCH */
    struct fake_cuda_stats stats;
    unsigned long calls[FAKE_ENTRY_COUNT];
    int requested_version[FAKE_ENTRY_COUNT];
};

extern struct fake_driver fake;
/** The calling thread's current context (NULL: none). */
extern _Thread_local struct CUctx_st *fake_current;

/**
 * Every entry point starts with FAKE_ENTER (counts the call, answers 34 in stub
 * mode and CUDA_ERROR_NOT_INITIALIZED before cuInit) or FAKE_ENTER_UNINIT (for
 * the calls that work before cuInit).
 */
CUresult fake_enter(enum fake_entry entry, int needs_init);
#define FAKE_ENTER_IMPL(name, needs_init)                                 \
    do {                                                                  \
        CUresult fake_enter_result_ = fake_enter(FAKE_ENTRY_##name, needs_init); \
        if (fake_enter_result_ != CUDA_SUCCESS)                           \
            return fake_enter_result_;                                    \
    } while (0)
#define FAKE_ENTER(name) FAKE_ENTER_IMPL(name, 1)
#define FAKE_ENTER_UNINIT(name) FAKE_ENTER_IMPL(name, 0)

/** CUDA_SUCCESS if a context is current, else CUDA_ERROR_INVALID_CONTEXT. */
CUresult fake_need_context(void);
/** Device of the current context (call after fake_need_context()). */
int fake_current_device(void);

void fake_lock(void);
void fake_unlock(void);

/** Whether a stream handle is live (NULL, the default stream, is). */
int fake_stream_ok(CUstream stream);

/** Deferred work: runs outside the lock when its stream gets there; then arg is freed. */
typedef void (*fake_work_fn)(void *arg);
/**
 * Queues run(arg) on stream (NULL: the current device's legacy stream) and takes
 * arg (malloc'd, arg_bytes long; freed after running, or at once on failure).
 * sync: returns only once it ran, with everything it depends on. On a capturing
 * stream the work becomes a node of the capture instead (a graph launch runs a
 * copy of arg each time), and a sync call, or arg_bytes 0 (a size unknown, so no
 * copy can be replayed), is refused like the driver refuses what cannot be captured.
 */
CUresult fake_enqueue(CUstream stream, fake_work_fn run, void *arg, size_t arg_bytes, int sync);
/** Whether a live stream is in capture mode (cuStreamBeginCapture or joined). */
int fake_stream_capturing(CUstream stream);
/** Invalidates stream's capture (if any) and returns r: a call the capture cannot hold. */
CUresult fake_capture_refuse(CUstream stream, CUresult r);
/** Runs stream's queued work (and what it depends on) to the end, waiting out stalls. */
void fake_drain_stream(CUstream stream);
/**
 * Runs the queued work of the current context's device that is not behind a
 * stall: frees and unmaps do, as the driver synchronizes the device for them.
 */
void fake_drain_device(void);

/** Frees what the memory part of the fake still holds (at unload). */
void fake_memory_cleanup(void);
/** Frees images still alive (at unload). */
void fake_exec_cleanup(void);
/** Frees streams, their queued work and events still alive (at unload); also captures and graphs. */
void fake_stream_cleanup(void);

#endif /* DCP_FAKE_CUDA_H */
