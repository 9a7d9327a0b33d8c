/*
 * fake_nccl.h: internals of the libnccl.so.2 test double (see README.md).
 *
 * Ranks are threads of one process. All ranks of one ncclUniqueId form a
 * clique; collectives meet at a barrier of the clique inside the call, after the
 * work queued before them on their stream ran, and their results land in stream
 * order (queued on the fake libcuda's stream); point-to-point messages go through
 * per-clique mailboxes.
 * One global lock guards everything; waits use the clique's condition variable.
 */
#ifndef DCP_FAKE_NCCL_H
#define DCP_FAKE_NCCL_H

#include <pthread.h>
#include <stddef.h>
#include <time.h>

#include "fake_hooks.h"
#include "nccl_api.h"

/* The exported NCCL functions, declared from the loader's table. */
#define FAKE_NCCL_DECLARE(name, required, ret, params) ret name params;
DCP_NCCL_FUNCTIONS(FAKE_NCCL_DECLARE)
#undef FAKE_NCCL_DECLARE

/** Behaviour chosen by environment variables at the first call after loading. */
struct fake_nccl_config {
    int version;              /* FAKE_NCCL_VERSION (22809) */
    unsigned long async_error; /* FAKE_NCCL_ASYNC_ERROR: after the k-th operation of a comm */
    unsigned long hang;       /* FAKE_NCCL_HANG: the k-th operation of a comm never completes */
    double rendezvous_timeout; /* FAKE_NCCL_TIMEOUT seconds (60): peers that never come */
};

/** What a rank brings to a collective. */
struct fake_slot {
    int kind;
    const void *send;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
};

/** A posted ncclSend, waiting for its ncclRecv. */
struct fake_message {
    int src, dst;
    unsigned long seq;
    const void *buf;
    size_t bytes;
    int consumed;
    struct fake_message *next;
};

/** All ranks of one unique id. */
struct fake_clique {
    char key[NCCL_UNIQUE_ID_BYTES];
    int nranks;
    int joined;        /* ranks that called ncclCommInitRankConfig */
    int members;       /* their communicators still alive */
    int broken;        /* a rank aborted: waits end with an error */
    pthread_cond_t changed;
    unsigned long arrived, generation; /* barrier */
    unsigned char *present;            /* [nranks]: rank has joined */
    struct fake_slot *slots;           /* [nranks] */
    unsigned long *send_seq, *recv_seq; /* [nranks * nranks], by src * nranks + dst */
    struct fake_message *messages;
    struct fake_clique *next;
};

#define FAKE_NCCL_MAX_STALLS 16

/** One rank's communicator. */
struct ncclComm {
    struct fake_clique *clique;
    int rank;
    int blocking;
    ncclResult_t async_error;
    unsigned long operations;            /* run so far, for fault injection */
    unsigned long stalls[FAKE_NCCL_MAX_STALLS]; /* fake CUDA stalls to release on abort */
    int nstalls;
    int busy;                            /* threads inside a call on it */
    int aborted;                         /* freed by the last busy thread */
    char last_error[256];
};

extern pthread_mutex_t fake_nccl_lock;
extern struct fake_nccl_config fake_nccl_cfg;
extern struct fake_nccl_stats fake_nccl_counters;

/** Reads the configuration once per load. */
void fake_nccl_configure_once(void);

/** Records an error on comm (may be NULL) for ncclGetLastError; returns result. */
ncclResult_t fake_nccl_fail(struct ncclComm *comm, ncclResult_t result, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * Waits once on the clique's condition variable (lock held), until deadline.
 * Returns 0 when woken, -1 when the clique broke or the deadline passed; the
 * caller rechecks what it waits for before giving up (it may have happened
 * just before a peer aborted).
 */
int fake_nccl_wait(struct fake_clique *c, const struct timespec *deadline);
/** The deadline of a rendezvous starting now. */
void fake_nccl_deadline(struct timespec *deadline);

/** Marks comm as inside a call (lock held); fake_nccl_leave frees it if aborted meanwhile. */
void fake_nccl_enter(struct ncclComm *comm);
void fake_nccl_leave(struct ncclComm *comm);

/** Stalls stream through the fake libcuda (hang injection); 0 if it cannot. */
unsigned long fake_nccl_stall_stream(cudaStream_t stream);

/**
 * Runs the work queued on stream before a collective reads its buffers (the
 * collective is ordered after it). Returns 1 when that work waits behind a stall
 * (the collective then never runs), else 0.
 */
int fake_nccl_flush_stream(cudaStream_t stream);

/** Data a collective computed for one rank, written to dst in stream order. */
struct fake_landing {
    void *dst;
    size_t bytes;
    unsigned char data[];
};

/** A landing of bytes for dst (data to be filled in); NULL when out of memory. */
struct fake_landing *fake_nccl_landing(void *dst, size_t bytes);
/** Queues the write on stream (fake libcuda runs it when the stream gets there); takes l. */
void fake_nccl_land(cudaStream_t stream, struct fake_landing *l);

#endif /* DCP_FAKE_NCCL_H */
