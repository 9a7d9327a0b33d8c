/* group.c: abortable barrier and value exchange among a group's rank threads. */
#include <stdlib.h>
#include <string.h>

#include "backend/group.h"
#include "util/util.h"

int rank_group_init(struct rank_group *g, uint32_t size)
{
    memset(g, 0, sizeof(*g));
    g->size = size;
    g->published = calloc(size, sizeof(*g->published));
    if (!g->published)
        return dcp_error(DCP_ENOMEM, "rank group of %u", size);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->initialised = true;
    return DCP_OK;
}

void rank_group_fini(struct rank_group *g)
{
    if (g->initialised) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
    free(g->published);
    memset(g, 0, sizeof(*g));
}

int rank_group_barrier(struct rank_group *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->aborted) {
        pthread_mutex_unlock(&g->mu);
        return dcp_error(DCP_EABORTED, "collective abandoned: another rank failed");
    }
    const uint64_t gen = g->generation;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->generation == gen && !g->aborted)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    const bool aborted = g->generation == gen;
    pthread_mutex_unlock(&g->mu);
    return aborted ? dcp_error(DCP_EABORTED, "collective abandoned: another rank failed") : DCP_OK;
}

int rank_group_publish(struct rank_group *g, uint32_t member, uint64_t value)
{
    g->published[member] = value;
    return rank_group_barrier(g);
}

void rank_group_abort(struct rank_group *g)
{
    if (!g->initialised)
        return;
    pthread_mutex_lock(&g->mu);
    g->aborted = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
