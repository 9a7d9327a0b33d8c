/*
 * cuda_internal.h: state of the CUDA backend (engine, devices, ranks) and the
 * functions its files share (cuda_backend.c, cuda_rank.c, cuda_comm.c,
 * cuda_memory.c; see cuda_backend.c for which concern lives where).
 */
#ifndef DCP_CUDA_INTERNAL_H
#define DCP_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "cuda_api.h"
#include "engine/engine_internal.h"
#include "modules.h"
#include "nccl_api.h"

struct rank_group;
struct dcpk_attn_variant;

enum cuda_comm_mode {
    CUDA_COMM_VIRTUAL, ///< All ranks on one GPU; collectives are device copies.
    CUDA_COMM_NCCL,    ///< One GPU per rank; NCCL communicators per DCP group.
};

/** A GPU this process uses. */
struct cuda_device {
    int ordinal;
    CUdevice dev;
    CUcontext ctx;               ///< The device's primary context.
    bool ctx_retained;
    struct dcp_cuda_device_info info;
    struct dcp_module *module;   ///< The embedded kernels, loaded into ctx.
    CUfunction fn[DCPK_KERNEL_COUNT]; ///< One entry per family (attn: the chosen variant).
    bool vmm;                    ///< KV arena through cuMemAddressReserve/cuMemCreate/cuMemMap.
    bool busy;                   ///< A rank on it was stuck at teardown: module and context are left loaded.
};

/** One device allocation (setup time only). */
struct cuda_alloc {
    CUdeviceptr addr;
    bool vmm;
    size_t reserved;             ///< VMM: bytes of address space.
    size_t chunk_bytes;          ///< VMM: bytes per physical chunk.
    uint32_t chunks;             ///< VMM: chunks mapped.
    CUmemGenericAllocationHandle *handles;
};

enum {
    EV_READY,        ///< Producer work of a collective's send buffer is done.
    EV_DONE,         ///< This rank's part of a collective is done.
    EV_SYNC,         ///< Marks the end of queued work for polling.
    EV_STAGED0,      ///< After the last copy out of staging half 0 ...
    EV_STAGED1,      ///< ... and half 1 (begin_step alternates between them).
    EV_SWITCH,       ///< End of the work on the stream a rank leaves (dcp_rank_set_stream).
    EV_FORK,         ///< Virtual group leader: capture began / a graph launch was queued.
    EV_JOIN,         ///< Virtual group member: its part of a capture, or its work before a launch.
    CUDA_RANK_EVENTS
};

/** Event pairs per rank for profiling; when they run out, finished ones are collected. */
#define CUDA_TIMER_PAIRS 256

struct cuda_rank {
    struct cuda_device *dev;
    CUstream compute;            ///< Kernels, copies, virtual collectives: own_stream or the caller's.
    CUstream own_stream;         ///< The library's stream (compute unless dcp_rank_set_stream gave one).
    bool caller_stream;          ///< compute is the caller's.
    bool capturing;              ///< Between capture_begin and capture_end.
    CUstream comm_stream;        ///< NCCL collectives.
    CUevent events[CUDA_RANK_EVENTS];
    bool queued;                 ///< Work was queued on the streams since the last synchronize.
    struct rank_group *group;    ///< Virtual ranks: the group's host rendezvous.
    CUdeviceptr d_src_ptrs;      ///< Virtual ReduceScatter: device table of member send addresses.
    uint64_t *h_src_ptrs;        ///< Pinned host copy of that table.
    bool src_ptrs_valid;
    unsigned char *staging;      ///< Pinned host staging of uploads: two halves, each holds one
                                 ///< step's metadata whole (begin_step alternates between them).
    size_t staging_bytes;        ///< Bytes of one half.
    uint32_t stage_cur;          ///< The half uploads go to now.
    size_t staging_used;         ///< Bytes of it handed out since it was last known free.
    bool stage_pending[2];       ///< EV_STAGED0/1 was recorded and not yet seen done.
    ncclComm_t nccl_comm;        ///< NCCL: this rank's communicator in its DCP group.
    uint64_t nccl_sent;          ///< NCCL: bytes of its collectives destined for other ranks (wire bytes).
    struct cuda_alloc *allocs;
    size_t num_allocs, cap_allocs;
    CUevent timer_start[CUDA_TIMER_PAIRS]; ///< Profiling: timing events (engine params.profile).
    CUevent timer_end[CUDA_TIMER_PAIRS];
    uint8_t timer_cat[CUDA_TIMER_PAIRS];   ///< enum dcp_prof_cat of each pair in use.
    uint32_t timers_used;
    pthread_mutex_t comm_mu;     ///< Held by the rank's thread while it uses nccl_comm (cuda_abort
                                 ///< aborts the communicator itself only while nobody holds it).
    bool comm_mu_init;
    atomic_bool stuck;           ///< Device work did not finish within the bound (a hung kernel or
                                 ///< collective): what it may still use is leaked, never freed under it.
};

struct cuda_engine {
    struct dcp_cuda *cu;
    struct dcp_nccl *nccl;       ///< NULL unless comm is NCCL and dcp > 1.
    enum cuda_comm_mode comm;
    uint32_t world_rank, world_size; ///< From the launcher (1 process: 0, 1).
    uint32_t num_groups;         ///< DCP groups (tp / dcp).
    struct rank_group *groups;   ///< Virtual ranks: one per group.
    ncclUniqueId *ids;           ///< NCCL: one per group.
    const struct dcpk_attn_variant *attn; ///< The attention entry for this model and dtype.
    const struct dcpk_attn_variant *sparse; ///< The sparse attention entry for them (dcpk_sparse_attn).
    uint32_t num_devices;
    struct cuda_device *devices;
};

/* Calls a driver entry point and turns its result into a status naming it. */
#define CU_CALL(api, fn, ...) dcp_cuda_check((api)->fn(__VA_ARGS__), #fn)

static inline struct cuda_engine *CE(const struct dcp_engine *e) { return e->backend; }
static inline struct cuda_rank *CR(const struct dcp_rank *r) { return r->backend; }

static inline int set_device(const struct cuda_engine *ce, const struct cuda_device *d)
{
    return CU_CALL(&ce->cu->api, cuCtxSetCurrent, d->ctx);
}

/* Makes this rank's device current on the calling thread. */
static inline int use_rank(const struct dcp_rank *r)
{
    return set_device(CE(r->engine), CR(r)->dev);
}

/* cuda_rank.c: ranks, launch, synchronize, profiling (backend operations). */
int cuda_rank_init(struct dcp_rank *r);
void cuda_rank_fini(struct dcp_rank *r);
int cuda_launch(struct dcp_rank *r, enum dcpk_kernel_id kernel, const void *params);
int cuda_synchronize(struct dcp_rank *r);
/** Waits for ev (recorded on the rank's streams); with NCCL a bounded poll that aborts on failure. */
int cuda_wait_event(struct dcp_rank *r, CUevent ev, const char *what);
/** Longest wait for the device, in seconds: runtime.cuda.nccl_timeout_s. */
double cuda_wait_bound(const struct dcp_engine *e);
/**
 * Waits for ev, or for both of the rank's streams when ev is NULL, polling with the
 * bound. DCP_ETIMEOUT when the work is still running then: the rank is marked stuck.
 * A rank already stuck fails at once with DCP_ETIMEOUT.
 */
int cuda_wait_device(struct dcp_rank *r, CUevent ev, const char *what);
/**
 * Polls every rank's streams until all are idle or deadline (dcp_now_seconds())
 * passes; marks the ranks still busy then as stuck (and the others not). Returns
 * how many are stuck. Called while no rank function runs.
 */
uint32_t cuda_wait_ranks_idle(struct dcp_engine *e, double deadline);
/** First step of teardown: after a failure aborts the communicators, then waits (bounded) for the devices. */
void cuda_engine_stop(struct dcp_engine *e);
/** Between steps after an abort: virtual ranks restart once their devices are idle; NCCL cannot. */
int cuda_recover(struct dcp_engine *e);
int cuda_timer_begin(struct dcp_rank *r, uint32_t *token);
int cuda_timer_end(struct dcp_rank *r, uint32_t token, enum dcp_prof_cat cat);
int cuda_timer_collect(struct dcp_rank *r);

/* cuda_graph.c: caller streams, double-buffered step uploads, stream capture. */
int cuda_set_stream(struct dcp_rank *r, void *stream);
void *cuda_get_stream(const struct dcp_rank *r);
int cuda_step_uploads(struct dcp_rank *r);
/** DCP_OK unless the rank's stream is capturing (the library's capture or the
 *  caller's): then DCP_EINVAL, with a message naming what was refused. */
int cuda_refuse_capture(struct dcp_rank *r, const char *what);
int cuda_capture_begin(struct dcp_rank *r);
int cuda_capture_end(struct dcp_rank *r, void **exec);
int cuda_graph_launch(struct dcp_rank *r, void *exec);
void cuda_graph_destroy(struct dcp_rank *r, void *exec);
/** The staging half to copy bytes through (waits, bounded, only when that half's
 *  earlier copies may not have run); NULL with the error in *err. */
unsigned char *cuda_staging_take(struct dcp_rank *r, size_t bytes, int *err);
/** After queuing the copies out of the current half. */
int cuda_staging_record(struct dcp_rank *r);
/** Member s of r's DCP group (virtual ranks: all are local). */
const struct cuda_rank *cuda_group_member(const struct dcp_rank *r, uint32_t s);

/* cuda_comm.c: collectives. */
/** Engine-wide: NCCL unique ids (exchanged when multi_process) or virtual groups. */
int cuda_comm_engine_init(const struct dcp_engine *e, struct cuda_engine *ce, bool multi_process);
/** Frees what cuda_comm_engine_init made; accepts a partial init. */
void cuda_comm_engine_fini(struct cuda_engine *ce);
/** Per rank: virtual group membership or the (non-blocking) NCCL communicator. */
int cuda_comm_rank_init(struct dcp_rank *r);
/** Per rank: finalizes the communicator (bounded), frees the reduce source table
 *  (leaked when the rank is stuck). */
void cuda_comm_rank_fini(struct dcp_rank *r);
/** Aborts every local NCCL communicator; wait: also those in use (only while no rank function runs). */
void cuda_comm_abort_all(struct dcp_engine *e, bool wait);
int cuda_engine_start(struct dcp_engine *e);
int cuda_all_gather(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes);
int cuda_reduce_scatter(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t count, uint32_t dtype);
int cuda_all_to_all(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes);
/** Wire bytes the rank sent to its peers (virtual: copied from it; NCCL: handed to NCCL for them). */
uint64_t cuda_wire_bytes(const struct dcp_rank *r);
void cuda_abort(struct dcp_engine *e);

/* cuda_memory.c: allocations and copies. */
int cuda_alloc(struct dcp_rank *r, size_t bytes, uint64_t *addr);
int cuda_alloc_arena(struct dcp_rank *r, size_t bytes, uint64_t *addr);
void cuda_free(struct dcp_rank *r, uint64_t addr);
/** Frees every allocation the rank still holds. */
void cuda_memory_rank_fini(struct dcp_rank *r);
int cuda_upload(struct dcp_rank *r, uint64_t dst, const void *src, size_t bytes);
int cuda_download(struct dcp_rank *r, void *dst, uint64_t src, size_t bytes);
int cuda_copy(struct dcp_rank *r, uint64_t dst, uint64_t src, size_t bytes);

/* cuda_launch_check.c */
/**
 * Why kernel could not serve a launch with these params, block size and dynamic
 * shared memory (attn: the entry launched for attn or sparse_attn, variants.h), or NULL when it can. The
 * GPU kernels would do nothing (attention) or fault (misaligned buffers), so
 * cuda_launch refuses such a launch with an error instead.
 */
const char *cuda_launch_problem(const struct dcpk_attn_variant *attn, enum dcpk_kernel_id kernel,
                                const void *params, uint32_t threads, uint32_t smem);

#endif /* DCP_CUDA_INTERNAL_H */
