/*
 * fake_hooks.h: what the test doubles of libcuda.so.1 and libnccl.so.2 export
 * besides the driver and NCCL entry points, for tests (looked up with dlsym on
 * the handle the loader opened: dlsym(cu->dl, "fake_cuda_get_stats")) and for
 * each other (fake libnccl stalls fake CUDA streams to simulate a hang).
 */
#ifndef DCP_FAKE_HOOKS_H
#define DCP_FAKE_HOOKS_H

#include <stddef.h>

#include "cuda_api.h"

/** Counters of the fake driver since it was loaded. */
struct fake_cuda_stats {
    unsigned long proc_lookups;        ///< cuGetProcAddress_v2 calls.
    unsigned long bad_version_lookups; ///< Lookups at a version whose ABI the fake does not implement.
    unsigned long device_allocs;       ///< Successful cuMemAlloc and cuMemCreate.
    unsigned long device_frees;        ///< cuMemFree and cuMemRelease.
    size_t live_device_bytes;          ///< Bytes of device memory allocated now.
    unsigned long live_host_allocs;    ///< cuMemAllocHost blocks not yet freed.
    unsigned long live_streams;        ///< Streams not yet destroyed.
    unsigned long live_events;         ///< Events not yet destroyed.
    unsigned long live_images;         ///< Libraries and modules not yet unloaded.
    unsigned long live_reservations;   ///< cuMemAddressReserve ranges not yet freed.
    unsigned long launches;            ///< Kernels run.
    unsigned long unserved_launches;   ///< Attention launches the entry would not serve: accepted, nothing done (as on a GPU).
    unsigned long context_creations;   ///< Primary contexts made: cuDevicePrimaryCtxRetain with none held (what a driver pays for).
};

/** Snapshot of the counters. */
typedef void (*fake_cuda_get_stats_fn)(struct fake_cuda_stats *out);
/** Calls of a driver entry point by base name ("cuMemAlloc"); 0 if unknown. */
typedef unsigned long (*fake_cuda_call_count_fn)(const char *name);
/** Version last requested for a symbol through cuGetProcAddress_v2; -1 if never. */
typedef int (*fake_cuda_requested_version_fn)(const char *name);
/** 1 if the CPU kernels (ptx/cpu) are linked in, so kernel lookups can succeed. */
typedef int (*fake_cuda_has_cpu_kernels_fn)(void);
/**
 * Makes a stream (NULL: the default stream) stall: cuStreamQuery and
 * cuEventQuery of events recorded on it afterwards say CUDA_ERROR_NOT_READY and
 * the synchronize calls block, until fake_cuda_stream_release(id). Returns the
 * stall id (> 0), or 0 for an unknown stream.
 */
typedef unsigned long (*fake_cuda_stream_stall_fn)(CUstream stream);
/** Ends a stall; unknown or already released ids are ignored. */
typedef void (*fake_cuda_stream_release_fn)(unsigned long id);
/**
 * Runs the work queued on a stream (and what it depends on) up to its end now,
 * without waiting out a stall. Returns 0 when the stream is idle, 1 when work
 * waits behind a stall, -1 for an unknown stream. Fake libnccl calls it before a
 * collective reads its buffers, since the collective is ordered after that work.
 */
typedef int (*fake_cuda_stream_flush_fn)(CUstream stream);
/**
 * Queues fn(arg) on a stream, run when the stream gets there; arg is malloc'd
 * and freed after fn (or at once on failure). Returns 0, or -1 for an unknown
 * stream. Fake libnccl lands collective results this way, in stream order.
 */
typedef int (*fake_cuda_stream_enqueue_fn)(CUstream stream, void (*fn)(void *arg), void *arg);
/**
 * Like fake_cuda_stream_enqueue, with arg's size: on a capturing stream fn(arg)
 * becomes a node of the capture, and each launch of the graph runs fn on a fresh
 * copy of those bytes (so arg must hold no pointer it owns). Returns 0, or -1 for
 * an unknown stream or a capture that refused it.
 */
typedef int (*fake_cuda_stream_enqueue_sized_fn)(CUstream stream, void (*fn)(void *arg), void *arg, size_t bytes);
/** 1 if the stream is capturing (cuStreamBeginCapture, or joined through an event), else 0. */
typedef int (*fake_cuda_stream_capturing_fn)(CUstream stream);

/** Ranks whose wire bytes fake_nccl_stats counts one by one (by rank within their communicator). */
#define FAKE_NCCL_STATS_RANKS 16

/** Counters of the fake NCCL since it was loaded. */
struct fake_nccl_stats {
    unsigned long comms_created;  ///< ncclCommInitRankConfig calls that made a communicator.
    unsigned long live_comms;     ///< Communicators not yet destroyed or aborted.
    unsigned long aborts;         ///< ncclCommAbort calls.
    unsigned long operations;     ///< Collectives and groups run (or stalled by injection).
    unsigned long stalled;        ///< Operations stalled by FAKE_NCCL_HANG.
    unsigned long waiting;        ///< Ranks blocked in a rendezvous right now.
    /** Wire bytes each rank sends to the other ranks of its communicator, counted when an operation is
     *  submitted (planner's definition, runtime/plan/plan.c: a rank sends its share to each of the n-1
     *  others): ncclAllGather sendcount x (n-1), ncclReduceScatter recvcount x (n-1), ncclSend to a
     *  peer its count (to itself: 0), in bytes of the data type; ncclAllReduce is not counted. Indexed by
     *  the rank within the communicator (summed over communicators of the same rank; ranks beyond
     *  FAKE_NCCL_STATS_RANKS counted only in sent_bytes). */
    unsigned long long sent_bytes_by_rank[FAKE_NCCL_STATS_RANKS];
    unsigned long long sent_bytes; ///< All ranks together.
};

/** Snapshot of the NCCL counters. */
typedef void (*fake_nccl_get_stats_fn)(struct fake_nccl_stats *out);

/* The exported functions themselves. Tests reach them with dlsym on the loader's
 * handle (linking them would load a second copy of the fake). */
void fake_cuda_get_stats(struct fake_cuda_stats *out);
unsigned long fake_cuda_call_count(const char *name);
int fake_cuda_requested_version(const char *name);
int fake_cuda_has_cpu_kernels(void);
unsigned long fake_cuda_stream_stall(CUstream stream);
void fake_cuda_stream_release(unsigned long id);
int fake_cuda_stream_flush(CUstream stream);
int fake_cuda_stream_enqueue(CUstream stream, void (*fn)(void *arg), void *arg);
int fake_cuda_stream_enqueue_sized(CUstream stream, void (*fn)(void *arg), void *arg, size_t bytes);
int fake_cuda_stream_capturing(CUstream stream);
void fake_nccl_get_stats(struct fake_nccl_stats *out);

#endif /* DCP_FAKE_HOOKS_H */
