/*
 * fake_nccl.c: the libnccl.so.2 double's configuration, unique ids (shared-memory
 * segments), communicators (non-blocking initialisation, finalize, destroy,
 * abort), asynchronous errors, error strings and the link to the fake libcuda.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_nccl.h"

pthread_mutex_t fake_nccl_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t fake_nccl_stats_lock = PTHREAD_MUTEX_INITIALIZER;
struct fake_nccl_config fake_nccl_cfg;
struct fake_nccl_stats fake_nccl_counters;

/* What an id holds: this prefix, then the segment's name. */
static const char id_prefix[] = "fake-nccl shm ";

static int configured;
/* Segments this process created, unlinked when the double is unloaded (the names
 * of cliques whose ranks never all came). */
struct created_name {
    char name[64];
    struct created_name *next;
};
static struct created_name *created;
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
        fake_nccl_cfg.staging_bytes = (size_t)env_number("FAKE_NCCL_SHM_BYTES", 8 << 20, 4096, 1 << 30);
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
/* Counters, locks and waiting. */

void fake_nccl_count(unsigned long *counter, long delta)
{
    pthread_mutex_lock(&fake_nccl_stats_lock);
    *counter += (unsigned long)delta;
    pthread_mutex_unlock(&fake_nccl_stats_lock);
}

void fake_nccl_break(struct fake_clique *c)
{
    c->broken = 1;
    pthread_cond_broadcast(&c->changed);
}

/* A holder of the clique's lock died: what it was changing is suspect. */
static void owner_died(struct fake_clique *c)
{
    pthread_mutex_consistent(&c->lock);
    fake_nccl_break(c);
}

void fake_nccl_lock_clique(struct fake_clique *c)
{
    if (pthread_mutex_lock(&c->lock) == EOWNERDEAD)
        owner_died(c);
}

void fake_nccl_unlock_clique(struct fake_clique *c) { pthread_mutex_unlock(&c->lock); }

void fake_nccl_deadline(struct timespec *deadline)
{
    clock_gettime(CLOCK_REALTIME, deadline);
    double t = (double)deadline->tv_sec + (double)deadline->tv_nsec * 1e-9 +
               fake_nccl_cfg.rendezvous_timeout;
    deadline->tv_sec = (time_t)t;
    deadline->tv_nsec = (long)((t - (double)deadline->tv_sec) * 1e9);
}

/* Whether process pid is gone (or a zombie nobody reaped yet). */
static int process_exited(long pid)
{
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 1;
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* A member whose process exited without leaving: its peers would wait for it forever. */
static int member_died(const struct fake_clique *c)
{
    const long self = (long)getpid();
    for (int r = 0; r < c->nranks && r < FAKE_NCCL_MAX_RANKS; r++) {
        const struct fake_member *m = &c->member[r];
        if (m->present && !m->left && m->pid != self && process_exited(m->pid))
            return 1;
    }
    return 0;
}

static int before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

int fake_nccl_wait(struct fake_clique *c, const struct timespec *deadline)
{
    if (c->broken)
        return -1;
    fake_nccl_count(&fake_nccl_counters.waiting, 1);
    int result = -1;
    for (;;) {
        /* Wake up every 100 ms to look for peers whose process exited. */
        struct timespec now, slice;
        clock_gettime(CLOCK_REALTIME, &now);
        slice = now;
        slice.tv_nsec += 100000000L;
        if (slice.tv_nsec >= 1000000000L) {
            slice.tv_sec++;
            slice.tv_nsec -= 1000000000L;
        }
        const int last = !before(&slice, deadline);
        const int r = pthread_cond_timedwait(&c->changed, &c->lock, last ? deadline : &slice);
        if (r == EOWNERDEAD)
            owner_died(c);
        if (c->broken)
            break;
        if (r != ETIMEDOUT) {
            result = 0;
            break;
        }
        if (last)
            break;
        if (member_died(c)) {
            fake_nccl_break(c);
            break;
        }
    }
    fake_nccl_count(&fake_nccl_counters.waiting, -1);
    return result;
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
/* Unique ids and cliques: shared-memory segments. */

static size_t segment_bytes(size_t staging)
{
    return FAKE_NCCL_HEADER_BYTES + staging;
}

/* Lays out a new segment (nobody else knows its name yet). */
static int init_clique(struct fake_clique *c, size_t map_bytes, size_t staging)
{
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    int err = pthread_mutexattr_init(&ma);
    if (err)
        return err;
    if (!(err = pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED)) &&
        !(err = pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST)))
        err = pthread_mutex_init(&c->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    if (err || (err = pthread_condattr_init(&ca)))
        return err;
    if (!(err = pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED)))
        err = pthread_cond_init(&c->changed, &ca);
    pthread_condattr_destroy(&ca);
    if (err)
        return err;
    c->map_bytes = map_bytes;
    c->staging_bytes = staging;
    c->magic = FAKE_NCCL_MAGIC;
    return 0;
}

/* Creates a segment under a new random name (exclusively, mode 0600). */
static ncclResult_t create_segment(char *name, size_t name_size)
{
    unsigned char random[16];
    if (getrandom(random, sizeof(random), 0) != (ssize_t)sizeof(random))
        return fake_nccl_fail(NULL, ncclSystemError, "ncclGetUniqueId: getrandom: %s", strerror(errno));
    int n = snprintf(name, name_size, "/fake-nccl-%ld-", (long)getpid());
    for (size_t i = 0; i < sizeof(random) && n + 2 < (int)name_size; i++)
        n += snprintf(name + n, name_size - (size_t)n, "%02x", random[i]);
    const size_t staging = fake_nccl_cfg.staging_bytes, bytes = segment_bytes(staging);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return fake_nccl_fail(NULL, ncclSystemError, "ncclGetUniqueId: shm_open %s: %s", name, strerror(errno));
    void *map = MAP_FAILED;
    int err = ftruncate(fd, (off_t)bytes) ? errno : 0;
    if (!err && (map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        err = errno;
    close(fd);
    if (!err)
        err = init_clique(map, bytes, staging);
    if (map != MAP_FAILED)
        munmap(map, bytes);
    if (err) {
        shm_unlink(name);
        return fake_nccl_fail(NULL, ncclSystemError, "ncclGetUniqueId: shared segment %s: %s", name,
                              strerror(err));
    }
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    fake_nccl_configure_once();
    if (!id)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: NULL");
    struct created_name *c = calloc(1, sizeof(*c));
    if (!c)
        return fake_nccl_fail(NULL, ncclSystemError, "out of memory");
    ncclResult_t r = create_segment(c->name, sizeof(c->name));
    if (r != ncclSuccess) {
        free(c);
        return r;
    }
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "%s%s", id_prefix, c->name);
    pthread_mutex_lock(&fake_nccl_lock);
    c->next = created;
    created = c;
    pthread_mutex_unlock(&fake_nccl_lock);
    return ncclSuccess;
}

/* Maps the segment an id names into comm. */
static ncclResult_t open_clique(struct ncclComm *comm, const ncclUniqueId *id)
{
    const size_t prefix = sizeof(id_prefix) - 1;
    if (memcmp(id->internal, id_prefix, prefix) || !memchr(id->internal, '\0', sizeof(id->internal)))
        return fake_nccl_fail(NULL, ncclInvalidArgument, "not a unique id of the fake NCCL");
    snprintf(comm->name, sizeof(comm->name), "%s", id->internal + prefix);
    int fd = shm_open(comm->name, O_RDWR, 0);
    if (fd < 0)
        return fake_nccl_fail(NULL, ncclInvalidUsage, "fake NCCL: clique %s: %s (its ranks all joined "
                              "already, or it is gone)", comm->name, strerror(errno));
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= FAKE_NCCL_HEADER_BYTES)
        map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return fake_nccl_fail(NULL, ncclSystemError, "fake NCCL: cannot map clique %s", comm->name);
    struct fake_clique *c = map;
    if (c->magic != FAKE_NCCL_MAGIC || c->map_bytes != (size_t)st.st_size) {
        munmap(map, (size_t)st.st_size);
        return fake_nccl_fail(NULL, ncclInvalidArgument, "fake NCCL: %s is not a clique", comm->name);
    }
    comm->clique = c;
    return ncclSuccess;
}

/* The name is needed only until every rank has the segment mapped (clique lock held). */
static void unlink_name(struct ncclComm *comm)
{
    if (!comm->clique->unlinked) {
        shm_unlink(comm->name);
        comm->clique->unlinked = 1;
    }
}

/* ------------------------------------------------------------------------- */
/* Communicators. */

void fake_nccl_enter(struct ncclComm *comm) { comm->busy++; }

static void free_comm(struct ncclComm *comm)
{
    struct fake_clique *c = comm->clique;
    fake_nccl_lock_clique(c);
    if (--c->members == 0)
        unlink_name(comm);
    fake_nccl_unlock_clique(c);
    munmap(c, c->map_bytes);
    fake_nccl_count(&fake_nccl_counters.live_comms, -1);
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

/* Joins rank to its clique (clique lock held). */
static ncclResult_t join(struct ncclComm *comm, int nranks, int rank)
{
    struct fake_clique *c = comm->clique;
    if (c->nranks == 0) {
        /* One staging area per rank, 64-byte aligned. */
        c->rank_staging = c->staging_bytes / (size_t)nranks & ~(size_t)63;
        if (c->rank_staging < 64)
            return fake_nccl_fail(NULL, ncclInvalidArgument, "fake NCCL: %zu staging bytes are too few "
                                  "for %d ranks (FAKE_NCCL_SHM_BYTES)", c->staging_bytes, nranks);
        c->nranks = nranks;
    }
    if (c->nranks != nranks)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "rank %d says %d ranks, others %d", rank,
                              nranks, c->nranks);
    if (c->member[rank].present)
        return fake_nccl_fail(NULL, ncclInvalidUsage, "rank %d joined twice", rank);
    c->member[rank].present = 1;
    c->member[rank].pid = (long)getpid();
    c->joined++;
    c->members++;
    if (c->joined == c->nranks)
        unlink_name(comm);
    comm->rank = rank;
    fake_nccl_count(&fake_nccl_counters.comms_created, 1);
    fake_nccl_count(&fake_nccl_counters.live_comms, 1);
    pthread_cond_broadcast(&c->changed);
    return ncclSuccess;
}

static ncclResult_t wait_for_all_ranks(struct ncclComm *comm)
{
    struct timespec deadline;
    fake_nccl_deadline(&deadline);
    struct fake_clique *c = comm->clique;
    fake_nccl_lock_clique(c);
    ncclResult_t r = ncclSuccess;
    while (c->joined < c->nranks && !c->member[comm->rank].left) {
        if (fake_nccl_wait(c, &deadline) && c->joined < c->nranks) {
            r = fake_nccl_fail(comm, ncclSystemError, "fake NCCL: only %d of %d ranks joined",
                               c->joined, c->nranks);
            break;
        }
    }
    fake_nccl_unlock_clique(c);
    return r;
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
    if (nranks > FAKE_NCCL_MAX_RANKS)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "fake NCCL: %d ranks, at most %d", nranks,
                              FAKE_NCCL_MAX_RANKS);
    struct ncclComm *comm = calloc(1, sizeof(*comm));
    if (!comm)
        return fake_nccl_fail(NULL, ncclSystemError, "out of memory");
    comm->blocking = blocking;
    if ((r = open_clique(comm, &id)) != ncclSuccess) {
        free(comm);
        return r;
    }
    struct fake_clique *c = comm->clique;
    fake_nccl_lock_clique(c);
    r = join(comm, nranks, rank);
    const int all_joined = c->joined == c->nranks;
    fake_nccl_unlock_clique(c);
    if (r != ncclSuccess) {
        munmap(c, c->map_bytes);
        free(comm);
        return r;
    }
    *out = comm;
    if (blocking) {
        pthread_mutex_lock(&fake_nccl_lock);
        fake_nccl_enter(comm);
        pthread_mutex_unlock(&fake_nccl_lock);
        r = wait_for_all_ranks(comm);
        pthread_mutex_lock(&fake_nccl_lock);
        fake_nccl_leave(comm);
        pthread_mutex_unlock(&fake_nccl_lock);
    } else if (!all_joined) {
        r = ncclInProgress;
    }
    return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    if (!comm || !async_error)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: NULL");
    pthread_mutex_lock(&fake_nccl_lock);
    const ncclResult_t failed = comm->async_error;
    fake_nccl_lock_clique(comm->clique);
    const int ready = comm->clique->joined == comm->clique->nranks;
    fake_nccl_unlock_clique(comm->clique);
    pthread_mutex_unlock(&fake_nccl_lock);
    *async_error = failed != ncclSuccess ? failed : ready ? ncclSuccess : ncclInProgress;
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
    struct fake_clique *c = comm->clique;
    fake_nccl_lock_clique(c);
    if (abort)
        c->broken = 1;
    c->member[comm->rank].left = 1;
    pthread_cond_broadcast(&c->changed);
    fake_nccl_unlock_clique(c);
    if (abort)
        fake_nccl_count(&fake_nccl_counters.aborts, 1);
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
    pthread_mutex_lock(&fake_nccl_stats_lock);
    *out = fake_nccl_counters;
    pthread_mutex_unlock(&fake_nccl_stats_lock);
}

/* Unlinks the segments this process created whose ranks never all joined, so
 * nothing is left in /dev/shm, and frees the list (valgrind reports only the code
 * under test). */
__attribute__((destructor)) static void fake_nccl_unload(void)
{
    while (created) {
        struct created_name *c = created;
        created = c->next;
        shm_unlink(c->name);
        free(c);
    }
}
