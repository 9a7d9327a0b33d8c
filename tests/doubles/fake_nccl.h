/*
 * fake_nccl.h: internals of the libnccl.so.2 test double (see README.md).
 *
 * Ranks are threads of one process or of several processes on one host: the
 * same code either way. ncclGetUniqueId creates a POSIX shared-memory segment
 * (a random name, created exclusively, mode 0600) and the id names it; every
 * ncclCommInitRank* maps it, so all ranks of one id form a clique there. The
 * segment holds a process-shared robust mutex and condition variable, each
 * member's published arguments and posted messages, and one staging area per
 * rank that the data of collectives and sends goes through (each rank copies
 * its part in, a barrier, each copies its result out; larger operations go in
 * rounds). The name is unlinked once every rank joined (or by the last member to
 * leave, or by the creating process when the double is unloaded).
 * Every wait is bounded (FAKE_NCCL_TIMEOUT) and looks out for members whose
 * process exited, so a dead peer fails its clique instead of hanging it.
 * fake_nccl_lock guards what is private to this process (communicators'
 * bookkeeping) and nobody waits holding it; fake_nccl_stats_lock the counters.
 * Locks are taken in that order: fake_nccl_lock, a clique's, the counters'.
 */
#ifndef DCP_FAKE_NCCL_H
#define DCP_FAKE_NCCL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
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
    size_t staging_bytes;     /* FAKE_NCCL_SHM_BYTES (8 MiB): staging of a new clique, all ranks */
};

#define FAKE_NCCL_MAX_RANKS 64
/** Messages one rank may have posted and not yet seen taken. */
#define FAKE_NCCL_MAX_POSTS 64

/** What a rank brings to a collective (in the segment). */
struct fake_slot {
    int kind;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
};

enum fake_post_state { POST_FREE, POST_READY, POST_TAKEN };

/** A piece of an ncclSend, in its sender's staging area until the receiver takes it. */
struct fake_post {
    int state;           /* enum fake_post_state */
    int dst;
    int last;            /* the send's last piece */
    unsigned long seq;   /* per (src, dst) pair, in send order */
    size_t offset, bytes; /* in the sender's staging area */
    size_t total;        /* bytes of the whole send */
};

/** One rank of a clique (in the segment). */
struct fake_member {
    int present;         /* joined */
    int left;            /* its communicator was destroyed or aborted */
    long pid;            /* its process */
    struct fake_slot slot;
    struct fake_post posts[FAKE_NCCL_MAX_POSTS];
};

#define FAKE_NCCL_MAGIC 0x46414b454e43434cull /* "FAKENCCL" */

/** All ranks of one unique id: the head of the shared segment; staging follows. */
struct fake_clique {
    uint64_t magic;
    pthread_mutex_t lock;    /* process-shared, robust */
    pthread_cond_t changed;  /* process-shared */
    size_t map_bytes;        /* the whole segment */
    size_t staging_bytes;    /* all ranks' staging areas */
    size_t rank_staging;     /* one rank's, set by the first to join */
    int nranks;              /* 0 until the first rank joins */
    int joined;              /* ranks that called ncclCommInitRankConfig */
    int members;             /* their communicators still alive */
    int broken;              /* a rank aborted, failed or exited: waits end with an error */
    int unlinked;            /* the segment's name is gone */
    unsigned long arrived, generation; /* barrier */
    struct fake_member member[FAKE_NCCL_MAX_RANKS];
};

/** Where the staging areas begin in the segment. */
#define FAKE_NCCL_HEADER_BYTES ((sizeof(struct fake_clique) + 4095) & ~(size_t)4095)

/** Rank r's staging area. */
static inline unsigned char *fake_nccl_staging(struct fake_clique *c, int r)
{
    return (unsigned char *)c + FAKE_NCCL_HEADER_BYTES + (size_t)r * c->rank_staging;
}

#define FAKE_NCCL_MAX_STALLS 16

/** One rank's communicator (private to its process). */
struct ncclComm {
    struct fake_clique *clique;          /* this process's mapping of the segment */
    char name[NCCL_UNIQUE_ID_BYTES];     /* the segment's name */
    int rank;
    int blocking;
    ncclResult_t async_error;
    unsigned long operations;            /* run so far, for fault injection */
    unsigned long stalls[FAKE_NCCL_MAX_STALLS]; /* fake CUDA stalls to release on abort */
    int nstalls;
    int busy;                            /* threads inside a call on it */
    int aborted;                         /* freed by the last busy thread */
    unsigned long send_seq[FAKE_NCCL_MAX_RANKS]; /* pieces sent to each peer */
    unsigned long recv_seq[FAKE_NCCL_MAX_RANKS]; /* pieces taken from each peer */
    char last_error[256];
};

extern pthread_mutex_t fake_nccl_lock, fake_nccl_stats_lock;
extern struct fake_nccl_config fake_nccl_cfg;
extern struct fake_nccl_stats fake_nccl_counters;

/** Reads the configuration once per load. */
void fake_nccl_configure_once(void);

/** Records an error on comm (may be NULL) for ncclGetLastError; returns result. */
ncclResult_t fake_nccl_fail(struct ncclComm *comm, ncclResult_t result, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Takes the clique's lock; a holder that died leaves the clique broken. */
void fake_nccl_lock_clique(struct fake_clique *c);
void fake_nccl_unlock_clique(struct fake_clique *c);

/**
 * Waits once on the clique's condition variable (clique lock held), until
 * deadline. Returns 0 when woken, -1 when the clique broke, a member's process
 * exited (the clique is then broken) or the deadline passed; the caller rechecks
 * what it waits for before giving up (it may have happened just before a peer
 * aborted).
 */
int fake_nccl_wait(struct fake_clique *c, const struct timespec *deadline);
/** The deadline of a rendezvous starting now. */
void fake_nccl_deadline(struct timespec *deadline);
/** Marks the clique broken and wakes its waiters (clique lock held). */
void fake_nccl_break(struct fake_clique *c);
/** Adds delta to a counter of fake_nccl_counters. */
void fake_nccl_count(unsigned long *counter, long delta);

/** Marks comm as inside a call (fake_nccl_lock held); fake_nccl_leave frees it if aborted meanwhile. */
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
