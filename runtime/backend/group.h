/*
 * group.h: the rendezvous point of a DCP group's rank threads in one process.
 *
 * Used by the host backend (collectives through shared memory) and by CUDA
 * virtual ranks (collectives as device copies ordered by events). A barrier can be
 * aborted: a rank that fails wakes the others, which return DCP_EABORTED. A
 * barrier also gives up after the group's timeout (a member failed without
 * aborting, or was never called): it aborts the group and returns DCP_ETIMEOUT.
 * An aborted group is usable again after rank_group_reset(), called while no
 * member is inside a barrier (between steps).
 */
#ifndef DCP_BACKEND_GROUP_H
#define DCP_BACKEND_GROUP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/** Seconds a barrier waits for the other members unless the group is given its own timeout. */
#define RANK_GROUP_DEFAULT_TIMEOUT_S 120.0

struct rank_group {
    uint32_t size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t arrived;
    uint64_t generation;
    bool aborted;
    bool initialised;
    double timeout_s;    ///< Longest wait in a barrier (RANK_GROUP_DEFAULT_TIMEOUT_S after init).
    uint64_t *published; ///< [size] each member's value for the current collective (e.g. a send address).
    _Atomic uint64_t *sent; ///< [size] wire bytes: what the other members copied out of each member's send
                            ///< buffers so far (a member's copies of its own data are not counted).
};

/** Initialises a group of size members (timeout RANK_GROUP_DEFAULT_TIMEOUT_S). */
int rank_group_init(struct rank_group *g, uint32_t size);
/** Sets how long a barrier waits for the others (<= 0 or not finite: the default). */
void rank_group_set_timeout(struct rank_group *g, double seconds);
/** Frees a group (accepts a zeroed one). */
void rank_group_fini(struct rank_group *g);
/** Waits until every member arrived; DCP_EABORTED if the group was aborted, DCP_ETIMEOUT
 *  (and the group aborted) if the others did not all arrive within the timeout. */
int rank_group_barrier(struct rank_group *g);
/** Publishes value as member's contribution and waits for everyone's. */
int rank_group_publish(struct rank_group *g, uint32_t member, uint64_t value);
/** Aborts the group: present and future barriers fail with DCP_EABORTED. */
void rank_group_abort(struct rank_group *g);
/** Counts bytes a member copied from member from's send buffer (nothing when from is itself). */
void rank_group_count_sent(struct rank_group *g, uint32_t self, uint32_t from, uint64_t bytes);
/** Wire bytes member has sent to the others so far (see sent). */
uint64_t rank_group_sent(const struct rank_group *g, uint32_t member);
/** Makes an aborted group usable again. Only while no member is inside a barrier. */
void rank_group_reset(struct rank_group *g);

#endif /* DCP_BACKEND_GROUP_H */
