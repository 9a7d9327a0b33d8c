/*
 * nccl_api.h: NCCL as libdcp uses it, loaded with dlopen (never linked, never
 * <nccl.h>). Types mirror the NCCL ABI; functions are looked up by their exported
 * names. Communicators are created non-blocking (config.blocking = 0) so that no
 * NCCL call can hang a rank: completion and failures are observed by polling
 * (dcp_nccl_wait), which aborts the communicator on error or timeout.
 */
#ifndef DCP_LOADER_NCCL_API_H
#define DCP_LOADER_NCCL_API_H

#include <stdatomic.h>
#include <stddef.h>

#include "cuda_api.h"

/* ------------------------------------------------------------------------- */
/* NCCL types (ABI mirrors).                                                  */

typedef int ncclResult_t;               ///< ncclSuccess or an error.
typedef int ncclDataType_t;             ///< Element type of a collective.
typedef int ncclRedOp_t;                ///< Reduction operator.
typedef struct ncclComm *ncclComm_t;    ///< Communicator (one rank's handle).
typedef CUstream cudaStream_t;          ///< NCCL's stream type is the driver's CUstream.

/** ncclResult_t values. */
enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
};

/** ncclDataType_t values. */
enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9,
};

/** ncclRedOp_t values (built-in operators). */
enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
};

#define NCCL_UNIQUE_ID_BYTES 128 ///< Size of ncclUniqueId.

/** Rendezvous key made by one rank and shared with the others out of band. */
typedef struct ncclUniqueId {
    char internal[NCCL_UNIQUE_ID_BYTES]; ///< Opaque.
} ncclUniqueId;

#define DCP_NCCL_CONFIG_MAGIC 0xcafebeefu  ///< ncclConfig_t.magic (NCCL_CONFIG_INITIALIZER).
#define DCP_NCCL_CONFIG_UNDEF_INT (-2147483647 - 1) ///< "Not set" for int fields (INT_MIN).

/**
 * The prefix of ncclConfig_t that NCCL 2.18 defined. NCCL copies min(size, its
 * own sizeof) bytes and treats fields past `size`, or newer than `version`, as
 * unset, so a shorter struct that says so is read correctly by newer NCCLs.
 * Fill it with dcp_nccl_config_nonblocking().
 */
typedef struct ncclConfig_t {
    size_t size;          ///< sizeof(ncclConfig_t) (this prefix).
    unsigned int magic;   ///< DCP_NCCL_CONFIG_MAGIC.
    unsigned int version; ///< NCCL version whose layout this is (DCP_NCCL_CONFIG_VERSION).
    int blocking;         ///< 0: calls return ncclInProgress instead of waiting.
    int cgaClusterSize;   ///< Unset.
    int minCTAs;          ///< Unset.
    int maxCTAs;          ///< Unset.
    const char *netName;  ///< NULL: default network.
    int splitShare;       ///< Unset.
} ncclConfig_t;

/** NCCL version code whose ncclConfig_t layout struct ncclConfig_t mirrors (2.18.0). */
#define DCP_NCCL_CONFIG_VERSION 21800

/* ------------------------------------------------------------------------- */
/* Entry points.                                                              */

#define DCP_NCCL_REQUIRED 1 ///< dcp_nccl_open() fails without it.
#define DCP_NCCL_OPTIONAL 0 ///< May be NULL in struct dcp_nccl_api.

/** X(name, DCP_NCCL_REQUIRED/OPTIONAL, return type, parameter list). */
#define DCP_NCCL_FUNCTIONS(X)                                                                       \
    X(ncclGetVersion, DCP_NCCL_REQUIRED, ncclResult_t, (int *version))                              \
    X(ncclGetUniqueId, DCP_NCCL_REQUIRED, ncclResult_t, (ncclUniqueId *id))                        \
    X(ncclCommInitRankConfig, DCP_NCCL_REQUIRED, ncclResult_t,                                      \
      (ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config))             \
    X(ncclCommGetAsyncError, DCP_NCCL_REQUIRED, ncclResult_t,                                       \
      (ncclComm_t comm, ncclResult_t *async_error))                                                 \
    X(ncclCommFinalize, DCP_NCCL_REQUIRED, ncclResult_t, (ncclComm_t comm))                         \
    X(ncclCommDestroy, DCP_NCCL_REQUIRED, ncclResult_t, (ncclComm_t comm))                          \
    X(ncclCommAbort, DCP_NCCL_REQUIRED, ncclResult_t, (ncclComm_t comm))                            \
    X(ncclCommCount, DCP_NCCL_REQUIRED, ncclResult_t, (const ncclComm_t comm, int *count))          \
    X(ncclCommUserRank, DCP_NCCL_REQUIRED, ncclResult_t, (const ncclComm_t comm, int *rank))        \
    X(ncclAllGather, DCP_NCCL_REQUIRED, ncclResult_t,                                               \
      (const void *sendbuf, void *recvbuf, size_t sendcount, ncclDataType_t type, ncclComm_t comm,  \
       cudaStream_t stream))                                                                        \
    X(ncclReduceScatter, DCP_NCCL_REQUIRED, ncclResult_t,                                           \
      (const void *sendbuf, void *recvbuf, size_t recvcount, ncclDataType_t type, ncclRedOp_t op,   \
       ncclComm_t comm, cudaStream_t stream))                                                       \
    X(ncclAllReduce, DCP_NCCL_REQUIRED, ncclResult_t,                                               \
      (const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t type, ncclRedOp_t op,       \
       ncclComm_t comm, cudaStream_t stream))                                                       \
    X(ncclSend, DCP_NCCL_REQUIRED, ncclResult_t,                                                    \
      (const void *sendbuf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,           \
       cudaStream_t stream))                                                                        \
    X(ncclRecv, DCP_NCCL_REQUIRED, ncclResult_t,                                                    \
      (void *recvbuf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,                 \
       cudaStream_t stream))                                                                        \
    X(ncclGroupStart, DCP_NCCL_REQUIRED, ncclResult_t, (void))                                      \
    X(ncclGroupEnd, DCP_NCCL_REQUIRED, ncclResult_t, (void))                                        \
    X(ncclGetErrorString, DCP_NCCL_OPTIONAL, const char *, (ncclResult_t result))                   \
    X(ncclGetLastError, DCP_NCCL_OPTIONAL, const char *, (ncclComm_t comm))

/** NCCL entry points; field names are the exported names. */
struct dcp_nccl_api {
#define DCP_NCCL_API_FIELD(name, required, ret, params) ret (*name) params;
    DCP_NCCL_FUNCTIONS(DCP_NCCL_API_FIELD)
#undef DCP_NCCL_API_FIELD
};

/** Oldest NCCL libdcp accepts (2.18.0, as ncclGetVersion encodes it). */
#define DCP_NCCL_MIN_VERSION 21800

/** Environment variable naming the NCCL library to load instead of libnccl.so.2. */
#define DCP_NCCL_LIBRARY_ENV "DCP_NCCL_LIBRARY"

/** A loaded NCCL. */
struct dcp_nccl {
    struct dcp_nccl_api api; ///< Entry points; optional ones may be NULL.
    void *dl;                ///< dlopen handle.
    char *path;              ///< File actually loaded.
    int version;             ///< ncclGetVersion code (22809 for 2.28.9).
};

/** Parameters of dcp_nccl_open(); zero-initialise for defaults. */
struct dcp_nccl_open_params {
    const char *library; ///< Library to dlopen; NULL: $DCP_NCCL_LIBRARY, else "libnccl.so.2".
};

/**
 * Loads NCCL and checks its version. Returns DCP_OK and *out, or DCP_ENCCL
 * (not loadable, a required function missing, or older than
 * DCP_NCCL_MIN_VERSION; the message names the path and versions), DCP_ENOMEM.
 * p may be NULL.
 */
int dcp_nccl_open(const struct dcp_nccl_open_params *p, struct dcp_nccl **out);

/** One line for logs: "NCCL 2.28.9 (/usr/lib/x86_64-linux-gnu/libnccl.so.2)"; snprintf contract. */
int dcp_nccl_describe(const struct dcp_nccl *nccl, char *buf, size_t size);

/** Unloads NCCL; sets *nccl to NULL. NULL and *nccl == NULL are fine. */
void dcp_nccl_close(struct dcp_nccl **nccl);

/** "ncclSystemError" for 2; "ncclUnknownResult" outside the table. */
const char *dcp_nccl_result_name(int result);

/** Formats an ncclGetVersion code as "2.28.9" (both encodings). Returns buf. */
char *dcp_nccl_version_string(int code, char *buf, size_t size);

/**
 * Turns an NCCL result into a status: DCP_OK for ncclSuccess and ncclInProgress
 * (non-blocking communicators report completion through dcp_nccl_wait), else
 * DCP_ENCCL with "ncclAllGather: ncclSystemError (2): <ncclGetLastError text>".
 * nccl and comm may be NULL (no last-error text then).
 */
int dcp_nccl_check(const struct dcp_nccl *nccl, int result, const char *call, ncclComm_t comm);

/** Fills *config: the 2.18 layout, every field unset except blocking = 0. */
void dcp_nccl_config_nonblocking(ncclConfig_t *config);

/**
 * Waits until work on a non-blocking communicator is done, polling rather than
 * blocking so that a failed or hung peer cannot hang this rank:
 *   - done == NULL: until ncclCommGetAsyncError stops saying ncclInProgress
 *     (communicator initialisation, finalisation, or an enqueue in progress);
 *   - done != NULL: additionally until cuEventQuery(done) succeeds (record it
 *     on the collective's stream after enqueueing).
 * On an asynchronous NCCL error, an event error, or when timeout_s seconds pass,
 * the communicator is aborted (ncclCommAbort), *comm is set to NULL, and the
 * result is DCP_ENCCL, DCP_ECUDA or DCP_ETIMEOUT with a message naming `what`
 * ("AllGather of layer 3"). timeout_s <= 0 polls once; INFINITY never times out.
 */
int dcp_nccl_wait(const struct dcp_nccl *nccl, ncclComm_t *comm, const struct dcp_cuda *cu,
                  CUevent done, double timeout_s, const char *what);

/**
 * dcp_nccl_wait() that also gives up when *cancel becomes non-zero (another
 * thread aborted the step): the communicator is aborted from this thread, the one
 * using it, and the result is DCP_EABORTED. cancel may be NULL (dcp_nccl_wait()).
 */
int dcp_nccl_wait_cancellable(const struct dcp_nccl *nccl, ncclComm_t *comm, const struct dcp_cuda *cu,
                              CUevent done, double timeout_s, const char *what, const atomic_int *cancel);

#endif /* DCP_LOADER_NCCL_API_H */
