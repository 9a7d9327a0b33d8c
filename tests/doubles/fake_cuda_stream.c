/*
 * fake_cuda_stream.c: streams and events of the libcuda.so.1 double, with work
 * that really is deferred.
 *
 * Every asynchronous call (kernel, copy, memset, event record, stream wait, and
 * what fake libnccl enqueues) becomes an operation in its stream's queue. Nothing
 * runs when it is enqueued: work runs when someone needs it done (a synchronize
 * or query of a stream or event, cuCtxSynchronize, a blocking copy, a free, or a
 * NCCL call on the stream) and then only the operations that the awaited one
 * depends on, in the calling thread. Dependencies are the order within a stream,
 * cuStreamWaitEvent, and the legacy default stream's implicit ones: the legacy
 * stream (NULL) waits for, and is waited for by, the *blocking* streams of its
 * device only; non-blocking streams never wait for it. So work that a program
 * forgot to order before a consumer has simply not happened when the consumer
 * runs, every time: the double fails such a program deterministically instead of
 * passing it because everything ran in call order. FAKE_CUDA_EAGER=1 runs every
 * operation as soon as it is enqueued (call order, what the double used to do),
 * for comparison.
 *
 * Stalls (fake_cuda_stream_stall, fake libnccl's hang injection) are operations
 * too: work behind one waits until it is released; queries say NOT_READY and
 * synchronize calls block meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_cuda.h"

#define FAKE_LIVE_MAGIC 0x66616b65u /* tags live handles: catches stale or foreign ones */

/** A point in a stream's history: done once the stream completed op seq. */
struct fake_point {
    unsigned long stream; /* stream id (0: none, always done) */
    unsigned long seq;
};

enum op_kind { OP_WORK, OP_WAIT, OP_STALL, OP_RECORD };

struct fake_op {
    enum op_kind kind;
    unsigned long seq;
    fake_work_fn run;         /* OP_WORK: runs outside the lock, then arg is freed */
    void *arg;
    struct fake_point *deps;  /* must be done before the op runs */
    size_t ndeps;
    unsigned long stall_id;   /* OP_STALL */
    struct CUevent_st *event; /* OP_RECORD: stamps the event's time (NULL once destroyed) */
    unsigned long event_gen;
    struct fake_op *next;
};

struct CUstream_st {
    unsigned int magic;
    unsigned long id;
    int device;
    int nonblocking;
    unsigned long enqueued, done; /* operations queued and completed so far */
    int busy;                     /* a thread is running the head operation */
    unsigned long stalled_pass;   /* drive_device pass that found it stalled */
    struct fake_op *head, *tail;
    struct CUstream_st *next;
};

struct CUevent_st {
    unsigned int magic;
    unsigned int flags;
    int recorded;
    struct fake_point at; /* where the last record sits */
    unsigned long gen;    /* bumped by each record */
    int stamped;
    double time_ms;
    struct CUevent_st *next;
};

static struct CUstream_st legacy[FAKE_MAX_DEVICES]; /* the NULL stream of each device */
static struct CUstream_st *streams;                 /* created streams */
static struct CUevent_st *events;
static unsigned long next_stream_id = FAKE_MAX_DEVICES + 1;
static unsigned long *active_stalls;
static size_t active_count, active_capacity;
static unsigned long next_stall_id = 1;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void progress(void) { pthread_cond_broadcast(&fake.stall_changed); }

/* ------------------------------------------------------------------------- */
/* Streams by handle and id (lock held). */

static int current_device_or_0(void) { return fake_current ? fake_current->device : 0; }

static struct CUstream_st *legacy_of(int device)
{
    struct CUstream_st *s = &legacy[device];
    if (!s->magic) {
        s->magic = FAKE_LIVE_MAGIC;
        s->id = (unsigned long)device + 1;
        s->device = device;
    }
    return s;
}

static int stream_live(CUstream s)
{
    if (!s)
        return 1;
    for (struct CUstream_st *p = streams; p; p = p->next)
        if (p == s)
            return 1;
    return 0;
}

/* The stream a handle names; NULL: the calling thread's device's legacy stream. */
static struct CUstream_st *stream_of(CUstream s) { return s ? s : legacy_of(current_device_or_0()); }

static struct CUstream_st *stream_by_id(unsigned long id)
{
    if (id >= 1 && id <= FAKE_MAX_DEVICES)
        return legacy[id - 1].magic ? &legacy[id - 1] : NULL;
    for (struct CUstream_st *p = streams; p; p = p->next)
        if (p->id == id)
            return p;
    return NULL;
}

int fake_stream_ok(CUstream stream)
{
    fake_lock();
    int ok = stream_live(stream);
    fake_unlock();
    return ok;
}

/* A point is done when its stream got there or no longer exists (destroyed
 * streams finish or drop their work first). */
static int point_done(struct fake_point p)
{
    const struct CUstream_st *s = p.stream ? stream_by_id(p.stream) : NULL;
    return !s || s->done >= p.seq;
}

static struct fake_point tail_of(const struct CUstream_st *s)
{
    return (struct fake_point){s->enqueued > s->done ? s->id : 0, s->enqueued};
}

/* ------------------------------------------------------------------------- */
/* Stalls (lock held). */

static int stall_active(unsigned long id)
{
    for (size_t i = 0; id && i < active_count; i++)
        if (active_stalls[i] == id)
            return 1;
    return 0;
}

static int reserve_stall_slot(void)
{
    if (active_count < active_capacity)
        return 1;
    size_t cap = active_capacity ? active_capacity * 2 : 8;
    unsigned long *grown = realloc(active_stalls, cap * sizeof(*grown));
    if (!grown)
        return 0;
    active_stalls = grown;
    active_capacity = cap;
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Running queued work (lock held). */

static void free_op(struct fake_op *op)
{
    if (op->kind == OP_WORK)
        free(op->arg);
    free(op->deps);
    free(op);
}

/* Runs the head operation of s, whose dependencies are done; the lock is released
 * while OP_WORK runs (s stays alive: destroy waits while it is busy). */
static void run_head(struct CUstream_st *s)
{
    struct fake_op *op = s->head;
    s->busy = 1;
    if (op->kind == OP_WORK) {
        fake_unlock();
        op->run(op->arg);
        fake_lock();
    } else if (op->kind == OP_RECORD && op->event && op->event->gen == op->event_gen) {
        op->event->time_ms = now_ms();
        op->event->stamped = 1;
    }
    s->head = op->next;
    if (!s->head)
        s->tail = NULL;
    s->done = op->seq;
    s->busy = 0;
    free_op(op);
    progress();
}

/*
 * Runs work until point p is done. With block = 0 it gives up at a stall and
 * returns 1 (the caller answers CUDA_ERROR_NOT_READY); with block = 1 it waits
 * for the stall to be released. Waiting for another thread's running operation
 * is always short (operations never wait themselves). Returns 0 when p is done.
 * Dependencies always point to earlier enqueued work, so the recursion ends.
 */
static int drive(struct fake_point p, int block)
{
    for (;;) {
        struct CUstream_st *s = p.stream ? stream_by_id(p.stream) : NULL;
        if (!s || s->done >= p.seq)
            return 0;
        if (s->busy) {
            pthread_cond_wait(&fake.stall_changed, &fake.lock);
            continue;
        }
        struct fake_op *op = s->head;
        int waited = 0;
        for (size_t i = 0; i < op->ndeps && !waited; i++) {
            if (point_done(op->deps[i]))
                continue;
            if (drive(op->deps[i], block))
                return 1;
            waited = 1; /* the lock was released: look at the stream again */
        }
        if (waited)
            continue;
        if (op->kind == OP_STALL && stall_active(op->stall_id)) {
            if (!block)
                return 1;
            pthread_cond_wait(&fake.stall_changed, &fake.lock);
            continue;
        }
        run_head(s);
    }
}

/* The next stream of device with work left, not stalled in this pass (lock held). */
static struct CUstream_st *pending_stream(int device, unsigned long pass)
{
    struct CUstream_st *l = legacy_of(device);
    if (l->done < l->enqueued && l->stalled_pass != pass)
        return l;
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s->device == device && s->done < s->enqueued && s->stalled_pass != pass)
            return s;
    return NULL;
}

/* Every stream of a device (the legacy one included) to its current end. With
 * block = 0, streams that stop at a stall are left there and the others are
 * still run; returns 1 if some stopped. */
static int drive_device(int device, int block)
{
    static unsigned long passes;
    const unsigned long pass = ++passes;
    int stalled = 0;
    struct CUstream_st *s;
    while ((s = pending_stream(device, pass))) { /* driving releases the lock: look again each time */
        const unsigned long id = s->id;
        if (drive(tail_of(s), block)) {
            stalled = 1;
            if ((s = stream_by_id(id)))
                s->stalled_pass = pass;
        }
    }
    return stalled;
}

/* ------------------------------------------------------------------------- */
/* Enqueueing (lock held). */

static int add_dep(struct fake_op *op, struct fake_point p)
{
    if (!p.stream || point_done(p))
        return 0;
    struct fake_point *grown = realloc(op->deps, (op->ndeps + 1) * sizeof(*grown));
    if (!grown)
        return -1;
    op->deps = grown;
    op->deps[op->ndeps++] = p;
    return 0;
}

/* The legacy stream's implicit ordering with the device's blocking streams. */
static int add_legacy_deps(struct fake_op *op, const struct CUstream_st *s)
{
    if (s->nonblocking)
        return 0;
    if (s != &legacy[s->device])
        return add_dep(op, tail_of(legacy_of(s->device)));
    for (const struct CUstream_st *b = streams; b; b = b->next)
        if (b->device == s->device && !b->nonblocking && add_dep(op, tail_of(b)))
            return -1;
    return 0;
}

static struct fake_op *new_op(enum op_kind kind, struct CUstream_st *s)
{
    struct fake_op *op = calloc(1, sizeof(*op));
    if (op && add_legacy_deps(op, s)) {
        free(op->deps);
        free(op);
        op = NULL;
    }
    if (op)
        op->kind = kind;
    return op;
}

/* Appends op to s; in eager mode runs everything up to it at once. */
static unsigned long push(struct CUstream_st *s, struct fake_op *op)
{
    const unsigned long seq = op->seq = ++s->enqueued;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    if (fake.cfg.eager) /* op may be done and freed when this returns */
        drive((struct fake_point){s->id, seq}, 0);
    return seq;
}

CUresult fake_enqueue(CUstream stream, fake_work_fn run, void *arg, int sync)
{
    fake_lock();
    struct CUstream_st *s = stream_live(stream) ? stream_of(stream) : NULL;
    struct fake_op *op = s ? new_op(OP_WORK, s) : NULL;
    CUresult r = !s ? CUDA_ERROR_INVALID_HANDLE : !op ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (op) {
        op->run = run;
        op->arg = arg;
        unsigned long seq = push(s, op);
        if (sync)
            drive((struct fake_point){s->id, seq}, 1);
    } else {
        free(arg);
    }
    fake_unlock();
    return r;
}

void fake_drain_stream(CUstream stream)
{
    fake_lock();
    if (stream_live(stream))
        drive(tail_of(stream_of(stream)), 1);
    fake_unlock();
}

void fake_drain_device(void)
{
    fake_lock();
    drive_device(current_device_or_0(), 0);
    fake_unlock();
}

/* ------------------------------------------------------------------------- */
/* Hooks for fake libnccl and tests. */

unsigned long fake_cuda_stream_stall(CUstream stream)
{
    unsigned long id = 0;
    fake_lock();
    struct fake_op *op = NULL;
    if (stream_live(stream) && reserve_stall_slot() && (op = new_op(OP_STALL, stream_of(stream)))) {
        id = next_stall_id++;
        active_stalls[active_count++] = id;
        op->stall_id = id;
        push(stream_of(stream), op);
    }
    fake_unlock();
    return id;
}

void fake_cuda_stream_release(unsigned long id)
{
    fake_lock();
    for (size_t i = 0; i < active_count; i++) {
        if (active_stalls[i] == id) {
            active_stalls[i] = active_stalls[--active_count];
            progress();
            break;
        }
    }
    fake_unlock();
}

int fake_cuda_stream_flush(CUstream stream)
{
    fake_lock();
    int r = stream_live(stream) ? drive(tail_of(stream_of(stream)), 0) : -1;
    fake_unlock();
    return r;
}

int fake_cuda_stream_enqueue(CUstream stream, void (*fn)(void *arg), void *arg)
{
    return fake_enqueue(stream, fn, arg, 0) == CUDA_SUCCESS ? 0 : -1;
}

/* ------------------------------------------------------------------------- */
/* Streams. */

CUresult fake_cuStreamCreate(CUstream *stream, unsigned int flags)
{
    FAKE_ENTER(cuStreamCreate);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!stream || flags > CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = calloc(1, sizeof(*s));
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = FAKE_LIVE_MAGIC;
    s->device = fake_current_device();
    s->nonblocking = flags == CU_STREAM_NON_BLOCKING;
    fake_lock();
    s->id = next_stream_id++;
    s->next = streams;
    streams = s;
    fake.stats.live_streams++;
    fake_unlock();
    *stream = s;
    return CUDA_SUCCESS;
}

/* Drops what is left in a queue (work behind a stall that was never released). */
static void drop_queue(struct CUstream_st *s)
{
    while (s->head) {
        struct fake_op *op = s->head;
        s->head = op->next;
        free_op(op);
    }
    s->tail = NULL;
    s->done = s->enqueued;
}

/* Like the driver, destroying a stream lets its queued work finish (here, at
 * once); work stuck behind a stall is dropped. */
CUresult fake_cuStreamDestroy(CUstream stream)
{
    FAKE_ENTER(cuStreamDestroy);
    fake_lock();
    struct CUstream_st *found = stream && stream_live(stream) ? stream : NULL;
    if (found) {
        drive(tail_of(found), 0);
        while (found->busy)
            pthread_cond_wait(&fake.stall_changed, &fake.lock);
        drop_queue(found);
        for (struct CUstream_st **ps = &streams; *ps; ps = &(*ps)->next) {
            if (*ps == found) {
                *ps = found->next;
                break;
            }
        }
        fake.stats.live_streams--;
        progress();
    }
    fake_unlock();
    if (!found)
        return CUDA_ERROR_INVALID_HANDLE;
    found->magic = 0;
    free(found);
    return CUDA_SUCCESS;
}

static int event_live(CUevent e)
{
    for (struct CUevent_st *p = events; p; p = p->next)
        if (p == e)
            return 1;
    return 0;
}

/*
 * Waits for (block = 1) or polls the work a live stream has queued, or the work
 * before a live event's last record; CUDA_ERROR_NOT_READY when polling stops at
 * a stall.
 */
static CUresult await_work(CUstream stream, CUevent event, int block)
{
    fake_lock();
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    if (event ? event_live(event) : stream_live(stream)) {
        const struct fake_point p = event ? event->at : tail_of(stream_of(stream));
        r = drive(p, block) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    }
    fake_unlock();
    return r;
}

CUresult fake_cuStreamSynchronize(CUstream stream)
{
    FAKE_ENTER(cuStreamSynchronize);
    return await_work(stream, NULL, 1);
}

CUresult fake_cuStreamQuery(CUstream stream)
{
    FAKE_ENTER(cuStreamQuery);
    return await_work(stream, NULL, 0);
}

CUresult fake_cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
    FAKE_ENTER(cuStreamWaitEvent);
    CUresult r = CUDA_SUCCESS;
    fake_lock();
    struct fake_op *op = NULL;
    if (flags)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!stream_live(stream) || !event_live(event))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!(op = new_op(OP_WAIT, stream_of(stream))) || add_dep(op, event->at))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        push(stream_of(stream), op);
    if (r != CUDA_SUCCESS && op)
        free_op(op);
    fake_unlock();
    return r;
}

/* ------------------------------------------------------------------------- */
/* Events. */

CUresult fake_cuEventCreate(CUevent *event, unsigned int flags)
{
    FAKE_ENTER(cuEventCreate);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!event || (flags & ~(unsigned int)(CU_EVENT_DISABLE_TIMING | 1u | 4u)))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FAKE_LIVE_MAGIC;
    e->flags = flags;
    fake_lock();
    e->next = events;
    events = e;
    fake.stats.live_events++;
    fake_unlock();
    *event = e;
    return CUDA_SUCCESS;
}

/* Pending records of a destroyed event must not stamp it. */
static void forget_event(const struct CUevent_st *e)
{
    for (int d = 0; d < FAKE_MAX_DEVICES; d++)
        for (struct fake_op *op = legacy[d].head; op; op = op->next)
            if (op->event == e)
                op->event = NULL;
    for (struct CUstream_st *s = streams; s; s = s->next)
        for (struct fake_op *op = s->head; op; op = op->next)
            if (op->event == e)
                op->event = NULL;
}

CUresult fake_cuEventDestroy(CUevent event)
{
    FAKE_ENTER(cuEventDestroy);
    struct CUevent_st *found = NULL;
    fake_lock();
    for (struct CUevent_st **pe = &events; *pe; pe = &(*pe)->next) {
        if (*pe == event) {
            found = *pe;
            *pe = found->next;
            fake.stats.live_events--;
            forget_event(found);
            break;
        }
    }
    fake_unlock();
    if (!found)
        return CUDA_ERROR_INVALID_HANDLE;
    found->magic = 0;
    free(found);
    return CUDA_SUCCESS;
}

CUresult fake_cuEventRecord(CUevent event, CUstream stream)
{
    FAKE_ENTER(cuEventRecord);
    CUresult r = CUDA_SUCCESS;
    fake_lock();
    struct fake_op *op = NULL;
    if (!event_live(event) || !stream_live(stream)) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (!(op = new_op(OP_RECORD, stream_of(stream)))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        event->recorded = 1;
        event->stamped = 0;
        op->event = event;
        op->event_gen = ++event->gen;
        struct CUstream_st *s = stream_of(stream);
        event->at = (struct fake_point){s->id, s->enqueued + 1};
        push(s, op);
    }
    fake_unlock();
    return r;
}

CUresult fake_cuEventSynchronize(CUevent event)
{
    FAKE_ENTER(cuEventSynchronize);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    return await_work(NULL, event, 1);
}

CUresult fake_cuEventQuery(CUevent event)
{
    FAKE_ENTER(cuEventQuery);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    return await_work(NULL, event, 0);
}

CUresult fake_cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    FAKE_ENTER(cuEventElapsedTime);
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    fake_lock();
    if (!event_live(start) || !event_live(end) || !start->recorded || !end->recorded ||
        ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (drive(start->at, 0) || drive(end->at, 0) || !start->stamped || !end->stamped)
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(end->time_ms - start->time_ms);
    fake_unlock();
    return r;
}

CUresult fake_cuCtxSynchronize(void)
{
    FAKE_ENTER(cuCtxSynchronize);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    fake_lock();
    drive_device(fake_current_device(), 1);
    fake_unlock();
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */

void fake_stream_cleanup(void)
{
    for (int d = 0; d < FAKE_MAX_DEVICES; d++)
        drop_queue(&legacy[d]);
    memset(legacy, 0, sizeof(legacy));
    while (streams) {
        struct CUstream_st *s = streams;
        streams = s->next;
        drop_queue(s);
        free(s);
    }
    while (events) {
        struct CUevent_st *e = events;
        events = e->next;
        free(e);
    }
    free(active_stalls);
    active_stalls = NULL;
    active_count = active_capacity = 0;
}
