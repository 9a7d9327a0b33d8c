/*
 * fake_nccl.c: the libnccl.so.2 double's configuration, unique ids,
 * communicators (non-blocking initialisation, finalize, destroy, abort),
 * asynchronous errors, error strings and the link to the fake libcuda.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_nccl.h"

pthread_mutex_t fake_nccl_lock = PTHREAD_MUTEX_INITIALIZER;
struct fake_nccl_config fake_nccl_cfg;
struct fake_nccl_stats fake_nccl_counters;

static int configured;
static struct fake_clique *cliques;
static unsigned long ids_made;
static _Thread_local char thread_last_error[256];

/* ------------------------------------------------------------------------- */
/* Configuration, errors. */

static double env_number(const char *name, double fallback, double min, double max)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return fallback;
    char *end;
    double v = strtod(s, &end);
    if (*end || v < min || v > max) {
        fprintf(stderr, "fake libnccl: ignoring %s=%s\n", name, s);
        return fallback;
    }
    return v;
}

void fake_nccl_configure_once(void)
{
    pthread_mutex_lock(&fake_nccl_lock);
    if (!configured) {
        fake_nccl_cfg.version = (int)env_number("FAKE_NCCL_VERSION", 22809, 1000, 99999);
        fake_nccl_cfg.async_error = (unsigned long)env_number("FAKE_NCCL_ASYNC_ERROR", 0, 0, 1e12);
        fake_nccl_cfg.hang = (unsigned long)env_number("FAKE_NCCL_HANG", 0, 0, 1e12);
        fake_nccl_cfg.rendezvous_timeout = env_number("FAKE_NCCL_TIMEOUT", 60, 0.001, 1e6);
        configured = 1;
    }
    pthread_mutex_unlock(&fake_nccl_lock);
}

ncclResult_t fake_nccl_fail(struct ncclComm *comm, ncclResult_t result, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(thread_last_error, sizeof(thread_last_error), fmt, ap);
    va_end(ap);
    if (comm)
        snprintf(comm->last_error, sizeof(comm->last_error), "%s", thread_last_error);
    return result;
}

const char *ncclGetErrorString(ncclResult_t result) { return dcp_nccl_result_name(result); }

const char *ncclGetLastError(ncclComm_t comm)
{
    return comm && comm->last_error[0] ? comm->last_error : thread_last_error;
}

ncclResult_t ncclGetVersion(int *version)
{
    fake_nccl_configure_once();
    if (!version)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "ncclGetVersion: NULL");
    *version = fake_nccl_cfg.version;
    return ncclSuccess;
}

/* ------------------------------------------------------------------------- */
/* Waiting. */

void fake_nccl_deadline(struct timespec *deadline)
{
    clock_gettime(CLOCK_REALTIME, deadline);
    double t = (double)deadline->tv_sec + (double)deadline->tv_nsec * 1e-9 +
               fake_nccl_cfg.rendezvous_timeout;
    deadline->tv_sec = (time_t)t;
    deadline->tv_nsec = (long)((t - (double)deadline->tv_sec) * 1e9);
}

int fake_nccl_wait(struct fake_clique *c, const struct timespec *deadline)
{
    if (c->broken)
        return -1;
    fake_nccl_counters.waiting++;
    int r = pthread_cond_timedwait(&c->changed, &fake_nccl_lock, deadline);
    fake_nccl_counters.waiting--;
    return c->broken || r == ETIMEDOUT ? -1 : 0;
}

/* ------------------------------------------------------------------------- */
/* The link to the fake libcuda: found through its soname among loaded libraries,
 * since the loader opened it RTLD_LOCAL. */

static void *fake_cuda_symbol(const char *name, void **handle)
{
    *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *fn = *handle ? dlsym(*handle, name) : dlsym(RTLD_DEFAULT, name);
    return fn;
}

unsigned long fake_nccl_stall_stream(cudaStream_t stream)
{
    void *handle;
    fake_cuda_stream_stall_fn stall =
        (fake_cuda_stream_stall_fn)(uintptr_t)fake_cuda_symbol("fake_cuda_stream_stall", &handle);
    unsigned long id = stall ? stall(stream) : 0;
    if (handle)
        dlclose(handle);
    if (!id)
        fprintf(stderr, "fake libnccl: cannot stall the stream (is the fake libcuda loaded?)\n");
    return id;
}

int fake_nccl_flush_stream(cudaStream_t stream)
{
    void *handle;
    fake_cuda_stream_flush_fn flush =
        (fake_cuda_stream_flush_fn)(uintptr_t)fake_cuda_symbol("fake_cuda_stream_flush", &handle);
    int r = flush ? flush(stream) : 0;
    if (handle)
        dlclose(handle);
    return r == 1;
}

struct fake_landing *fake_nccl_landing(void *dst, size_t bytes)
{
    struct fake_landing *l = malloc(sizeof(*l) + (bytes ? bytes : 1));
    if (l) {
        l->dst = dst;
        l->bytes = bytes;
    }
    return l;
}

static void write_landing(void *arg)
{
    struct fake_landing *l = arg;
    if (l->bytes)
        memcpy(l->dst, l->data, l->bytes);
}

void fake_nccl_land(cudaStream_t stream, struct fake_landing *l)
{
    void *handle;
    fake_cuda_stream_enqueue_fn enqueue = (fake_cuda_stream_enqueue_fn)(uintptr_t)
        fake_cuda_symbol("fake_cuda_stream_enqueue", &handle);
    if (!enqueue || enqueue(stream, write_landing, l) != 0) {
        /* No fake libcuda (or a stream it does not know): land now. */
        write_landing(l);
        free(l);
    }
    if (handle)
        dlclose(handle);
}

static void release_stalls(struct ncclComm *comm)
{
    void *handle;
    fake_cuda_stream_release_fn release = (fake_cuda_stream_release_fn)(uintptr_t)
        fake_cuda_symbol("fake_cuda_stream_release", &handle);
    for (int i = 0; release && i < comm->nstalls; i++)
        release(comm->stalls[i]);
    comm->nstalls = 0;
    if (handle)
        dlclose(handle);
}

/* ------------------------------------------------------------------------- */
/* Unique ids and cliques. */

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    fake_nccl_configure_once();
    if (!id)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: NULL");
    memset(id, 0, sizeof(*id));
    pthread_mutex_lock(&fake_nccl_lock);
    unsigned long n = ++ids_made;
    pthread_mutex_unlock(&fake_nccl_lock);
    snprintf(id->internal, sizeof(id->internal), "fake-nccl pid %ld id %lu", (long)getpid(), n);
    return ncclSuccess;
}

static struct fake_clique *find_clique(const ncclUniqueId *id)
{
    for (struct fake_clique *c = cliques; c; c = c->next)
        if (memcmp(c->key, id->internal, sizeof(c->key)) == 0)
            return c;
    return NULL;
}

static void free_clique(struct fake_clique *c)
{
    for (struct fake_clique **pc = &cliques; *pc; pc = &(*pc)->next) {
        if (*pc == c) {
            *pc = c->next;
            break;
        }
    }
    while (c->messages) {
        struct fake_message *m = c->messages;
        c->messages = m->next;
        free(m);
    }
    pthread_cond_destroy(&c->changed);
    free(c->present);
    free(c->slots);
    free(c->send_seq);
    free(c->recv_seq);
    free(c);
}

static struct fake_clique *new_clique(const ncclUniqueId *id, int nranks)
{
    struct fake_clique *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    size_t pairs = (size_t)nranks * (size_t)nranks;
    c->present = calloc((size_t)nranks, sizeof(*c->present));
    c->slots = calloc((size_t)nranks, sizeof(*c->slots));
    c->send_seq = calloc(pairs, sizeof(*c->send_seq));
    c->recv_seq = calloc(pairs, sizeof(*c->recv_seq));
    pthread_cond_init(&c->changed, NULL);
    if (!c->present || !c->slots || !c->send_seq || !c->recv_seq) {
        free_clique(c);
        return NULL;
    }
    memcpy(c->key, id->internal, sizeof(c->key));
    c->nranks = nranks;
    c->next = cliques;
    cliques = c;
    return c;
}

/* ------------------------------------------------------------------------- */
/* Communicators. */

void fake_nccl_enter(struct ncclComm *comm) { comm->busy++; }

static void free_comm(struct ncclComm *comm)
{
    struct fake_clique *c = comm->clique;
    if (--c->members == 0)
        free_clique(c);
    fake_nccl_counters.live_comms--;
    free(comm);
}

void fake_nccl_leave(struct ncclComm *comm)
{
    if (--comm->busy == 0 && comm->aborted)
        free_comm(comm);
}

/* The blocking field of a config, read by its size and version as NCCL does. */
static ncclResult_t config_blocking(const ncclConfig_t *config, int *blocking)
{
    *blocking = 1;
    if (!config)
        return ncclSuccess;
    if (config->size < offsetof(ncclConfig_t, blocking) + sizeof(int) ||
        config->magic != DCP_NCCL_CONFIG_MAGIC)
        return fake_nccl_fail(NULL, ncclInvalidArgument,
                              "ncclConfig_t argument not initialized like NCCL_CONFIG_INITIALIZER");
    if (config->version < 21400 || config->blocking == DCP_NCCL_CONFIG_UNDEF_INT)
        return ncclSuccess;
    if (config->blocking != 0 && config->blocking != 1)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "invalid config blocking value %d",
                              config->blocking);
    *blocking = config->blocking;
    return ncclSuccess;
}

/* Joins rank to the clique of id (lock held). */
static ncclResult_t join(struct ncclComm *comm, int nranks, const ncclUniqueId *id, int rank)
{
    struct fake_clique *c = find_clique(id);
    if (c && c->nranks != nranks)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "rank %d says %d ranks, others %d", rank,
                              nranks, c->nranks);
    if (c && c->present[rank])
        return fake_nccl_fail(NULL, ncclInvalidUsage, "rank %d joined twice", rank);
    if (!c && !(c = new_clique(id, nranks)))
        return fake_nccl_fail(NULL, ncclSystemError, "out of memory");
    c->present[rank] = 1;
    c->joined++;
    c->members++;
    comm->clique = c;
    comm->rank = rank;
    fake_nccl_counters.comms_created++;
    fake_nccl_counters.live_comms++;
    pthread_cond_broadcast(&c->changed);
    return ncclSuccess;
}

static ncclResult_t wait_for_all_ranks(struct ncclComm *comm)
{
    struct timespec deadline;
    fake_nccl_deadline(&deadline);
    struct fake_clique *c = comm->clique;
    while (c->joined < c->nranks && !comm->aborted)
        if (fake_nccl_wait(c, &deadline) && c->joined < c->nranks)
            return fake_nccl_fail(comm, ncclSystemError, "fake NCCL: only %d of %d ranks joined",
                                  c->joined, c->nranks);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    fake_nccl_configure_once();
    int blocking;
    ncclResult_t r = config_blocking(config, &blocking);
    if (r != ncclSuccess)
        return r;
    if (!out || nranks < 1 || rank < 0 || rank >= nranks)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "rank %d of %d", rank, nranks);
    struct ncclComm *comm = calloc(1, sizeof(*comm));
    if (!comm)
        return fake_nccl_fail(NULL, ncclSystemError, "out of memory");
    comm->blocking = blocking;
    pthread_mutex_lock(&fake_nccl_lock);
    r = join(comm, nranks, &id, rank);
    if (r != ncclSuccess) {
        pthread_mutex_unlock(&fake_nccl_lock);
        free(comm);
        return r;
    }
    *out = comm;
    if (blocking) {
        fake_nccl_enter(comm);
        r = wait_for_all_ranks(comm);
        fake_nccl_leave(comm);
    } else if (comm->clique->joined < nranks) {
        r = ncclInProgress;
    }
    pthread_mutex_unlock(&fake_nccl_lock);
    return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    if (!comm || !async_error)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: NULL");
    pthread_mutex_lock(&fake_nccl_lock);
    if (comm->async_error != ncclSuccess)
        *async_error = comm->async_error;
    else
        *async_error = comm->clique->joined < comm->clique->nranks ? ncclInProgress : ncclSuccess;
    pthread_mutex_unlock(&fake_nccl_lock);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "ncclCommCount: NULL");
    *count = comm->clique->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "ncclCommUserRank: NULL");
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    if (!comm)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "ncclCommFinalize: NULL");
    return ncclSuccess; /* all work is done synchronously: nothing to flush */
}

/* Takes comm out of service: its stalls end, its peers stop waiting for it. */
static ncclResult_t retire(ncclComm_t comm, int abort)
{
    if (!comm)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "NULL communicator");
    pthread_mutex_lock(&fake_nccl_lock);
    release_stalls(comm);
    if (abort) {
        comm->clique->broken = 1;
        fake_nccl_counters.aborts++;
    }
    pthread_cond_broadcast(&comm->clique->changed);
    comm->aborted = 1;
    if (comm->busy == 0)
        free_comm(comm);
    pthread_mutex_unlock(&fake_nccl_lock);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return retire(comm, 0); }

ncclResult_t ncclCommAbort(ncclComm_t comm) { return retire(comm, 1); }

void fake_nccl_get_stats(struct fake_nccl_stats *out)
{
    pthread_mutex_lock(&fake_nccl_lock);
    *out = fake_nccl_counters;
    pthread_mutex_unlock(&fake_nccl_lock);
}

/* Frees cliques a test left behind, so valgrind reports only the code under test. */
__attribute__((destructor)) static void fake_nccl_unload(void)
{
    while (cliques)
        free_clique(cliques);
}
