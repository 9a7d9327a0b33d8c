/* group.c: abortable barrier with a timeout, and value exchange among a group's rank threads. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/group.h"
#include "util/util.h"

int rank_group_init(struct rank_group *g, uint32_t size)
{
    memset(g, 0, sizeof(*g));
    g->size = size;
    g->timeout_s = RANK_GROUP_DEFAULT_TIMEOUT_S;
    g->published = calloc(size, sizeof(*g->published));
    g->sent = calloc(size, sizeof(*g->sent));
    if (!g->published || !g->sent)
        return dcp_error(DCP_ENOMEM, "rank group of %u", size);
    /* Deadlines are on the monotonic clock, so a clock change does not stretch a wait. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, &attr);
    pthread_condattr_destroy(&attr);
    g->initialised = true;
    return DCP_OK;
}

void rank_group_set_timeout(struct rank_group *g, double seconds)
{
    g->timeout_s = isfinite(seconds) && seconds > 0 ? seconds : RANK_GROUP_DEFAULT_TIMEOUT_S;
}

void rank_group_fini(struct rank_group *g)
{
    if (g->initialised) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
    free(g->published);
    free((void *)g->sent);
    memset(g, 0, sizeof(*g));
}

void rank_group_count_sent(struct rank_group *g, uint32_t self, uint32_t from, uint64_t bytes)
{
    if (from != self)
        atomic_fetch_add_explicit(&g->sent[from], bytes, memory_order_relaxed);
}

uint64_t rank_group_sent(const struct rank_group *g, uint32_t member)
{
    return atomic_load_explicit(&g->sent[member], memory_order_relaxed);
}

static struct timespec deadline_after(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    /* Capped at a day: a longer wait is the same as forever, and the sum stays in range. */
    const double s = DCP_MIN(seconds, 86400.0);
    const double whole = floor(s);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Called with g->mu held. */
static void abort_locked(struct rank_group *g)
{
    g->aborted = true;
    pthread_cond_broadcast(&g->cv);
}

int rank_group_barrier(struct rank_group *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->aborted) {
        pthread_mutex_unlock(&g->mu);
        return dcp_error(DCP_EABORTED, "collective abandoned: another rank failed");
    }
    const uint64_t gen = g->generation;
    bool timed_out = false;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        const struct timespec deadline = deadline_after(g->timeout_s);
        while (g->generation == gen && !g->aborted)
            if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) == ETIMEDOUT && g->generation == gen &&
                !g->aborted) {
                timed_out = true;
                abort_locked(g);
            }
    }
    const bool aborted = g->generation == gen;
    const uint32_t arrived = g->arrived;
    pthread_mutex_unlock(&g->mu);
    if (timed_out)
        return dcp_error(DCP_ETIMEOUT, "collective: waited %.3g s for the other ranks of the DCP group (%u of %u "
                         "arrived); one failed or was not called. The group was aborted",
                         g->timeout_s, arrived, g->size);
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
    abort_locked(g);
    pthread_mutex_unlock(&g->mu);
}

void rank_group_reset(struct rank_group *g)
{
    if (!g->initialised)
        return;
    pthread_mutex_lock(&g->mu);
    g->aborted = false;
    g->arrived = 0;
    g->generation++;
    pthread_mutex_unlock(&g->mu);
}
