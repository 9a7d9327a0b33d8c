/* host_pool.c: work-item scheduling over a rank's threads. */
#include <stdlib.h>
#include <string.h>

#include "backend/host/host_pool.h"
#include "util/util.h"

/* Takes chunks of the current job until none are left. */
static void work(struct host_pool *pool, void *scratch)
{
    for (;;) {
        const uint64_t begin = atomic_fetch_add(&pool->next, pool->chunk);
        if (begin >= pool->items)
            return;
        const uint64_t end = DCP_MIN(begin + pool->chunk, pool->items);
        pool->kernel->cpu(pool->params, begin, end, scratch);
    }
}

struct worker_arg {
    struct host_pool *pool;
    uint32_t index;
};

static void *worker_main(void *p)
{
    struct worker_arg arg = *(struct worker_arg *)p;
    free(p);
    struct host_pool *pool = arg.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->generation == seen)
            pthread_cond_wait(&pool->wake, &pool->mu);
        if (pool->stop)
            break;
        seen = pool->generation;
        pthread_mutex_unlock(&pool->mu);
        work(pool, pool->scratch[arg.index + 1]);
        pthread_mutex_lock(&pool->mu);
        if (--pool->busy == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

int host_pool_init(struct host_pool *pool, uint32_t num_workers, size_t scratch_bytes)
{
    memset(pool, 0, sizeof(*pool));
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    pool->num_workers = num_workers;
    pool->scratch_bytes = scratch_bytes;
    pool->scratch = calloc(num_workers + 1, sizeof(*pool->scratch));
    if (!pool->scratch)
        return dcp_error(DCP_ENOMEM, "host pool scratch table");
    for (uint32_t i = 0; i <= num_workers && scratch_bytes; i++)
        if (posix_memalign(&pool->scratch[i], 64, scratch_bytes))
            return dcp_error(DCP_ENOMEM, "host pool scratch (%zu bytes)", scratch_bytes);
    pool->workers = calloc(num_workers ? num_workers : 1, sizeof(*pool->workers));
    if (!pool->workers)
        return dcp_error(DCP_ENOMEM, "host pool threads");
    for (uint32_t i = 0; i < num_workers; i++) {
        struct worker_arg *arg = malloc(sizeof(*arg));
        if (!arg)
            return dcp_error(DCP_ENOMEM, "host pool thread argument");
        *arg = (struct worker_arg){.pool = pool, .index = i};
        if (pthread_create(&pool->workers[i], NULL, worker_main, arg)) {
            free(arg);
            return dcp_error(DCP_ENOMEM, "pthread_create failed for a worker");
        }
        pool->started++;
    }
    return DCP_OK;
}

void host_pool_fini(struct host_pool *pool)
{
    if (pool->started) {
        pthread_mutex_lock(&pool->mu);
        pool->stop = true;
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mu);
        for (uint32_t i = 0; i < pool->started; i++)
            pthread_join(pool->workers[i], NULL);
    }
    if (pool->scratch)
        for (uint32_t i = 0; i <= pool->num_workers; i++)
            free(pool->scratch[i]);
    free(pool->scratch);
    free(pool->workers);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    memset(pool, 0, sizeof(*pool));
}

int host_pool_run(struct host_pool *pool, const struct dcpk_kernel_desc *kernel, const void *params)
{
    const uint64_t items = dcpk_grid_items(kernel->grid(params));
    if (items == 0)
        return DCP_OK;
    const size_t need = kernel->scratch(params);
    if (need > pool->scratch_bytes)
        return dcp_error(DCP_EINVAL, "kernel %s needs %zu bytes of scratch, the pool has %zu",
                         kernel->name, need, pool->scratch_bytes);
    if (pool->started == 0 || items == 1) {
        kernel->cpu(params, 0, items, pool->scratch[0]);
        return DCP_OK;
    }
    /* Several chunks per thread so uneven items (sequences of different lengths) balance. */
    const uint64_t threads = pool->started + 1;
    pthread_mutex_lock(&pool->mu);
    pool->kernel = kernel;
    pool->params = params;
    pool->items = items;
    pool->chunk = DCP_MAX(1, items / (threads * 4));
    atomic_store(&pool->next, 0);
    pool->busy = pool->started;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    work(pool, pool->scratch[0]);

    pthread_mutex_lock(&pool->mu);
    while (pool->busy)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    return DCP_OK;
}
