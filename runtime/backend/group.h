/*
 * group.h: the rendezvous point of a DCP group's rank threads in one process.
 *
 * Used by the host backend (collectives through shared memory) and by CUDA
 * virtual ranks (collectives as device copies ordered by events). A barrier can be
 * aborted: a rank that fails wakes the others, which return DCP_EABORTED.
 */
#ifndef DCP_BACKEND_GROUP_H
#define DCP_BACKEND_GROUP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct rank_group {
    uint32_t size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t arrived;
    uint64_t generation;
    bool aborted;
    bool initialised;
    uint64_t *published; ///< [size] each member's value for the current collective (e.g. a send address).
};

/** Initialises a group of size members. */
int rank_group_init(struct rank_group *g, uint32_t size);
/** Frees a group (accepts a zeroed one). */
void rank_group_fini(struct rank_group *g);
/** Waits until every member arrived; DCP_EABORTED if the group was aborted. */
int rank_group_barrier(struct rank_group *g);
/** Publishes value as member's contribution and waits for everyone's. */
int rank_group_publish(struct rank_group *g, uint32_t member, uint64_t value);
/** Aborts the group: present and future barriers fail with DCP_EABORTED. */
void rank_group_abort(struct rank_group *g);

#endif /* DCP_BACKEND_GROUP_H */
