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
 *
 * Stream capture, as the driver does it: cuStreamBeginCapture puts a stream in
 * capture mode; work enqueued on it becomes a node of the capture (nothing runs)
 * depending on the stream's current nodes; cuEventRecord on a capturing stream
 * remembers those nodes in the event, and a stream that waits for such an event
 * joins the capture (cross-stream fork/join). cuStreamEndCapture on the origin
 * stream returns the graph once every joined stream has rejoined it
 * (CUDA_ERROR_STREAM_CAPTURE_UNJOINED otherwise). What a capture cannot hold is
 * refused and invalidates it: a synchronize or query of a capturing stream, a
 * synchronous call, waiting for an event recorded outside the capture (ISOLATION),
 * merging two captures, pageable copies, the legacy stream while a blocking stream
 * captures (IMPLICIT), and the "potentially unsafe" calls (synchronize, query) from
 * the capturing thread (global and thread-local modes) or from any thread while a
 * global-mode capture runs. cuGraphLaunch enqueues a copy of every node on the
 * launch stream in an order the graph allows that differs from the capture order
 * where it can (last ready node first), so a dependency the capture missed shows.
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

/** The nodes a capture depends on next (indices into its nodes). */
struct dep_set {
    size_t *v;
    size_t n;
};

/** A captured operation: work run on a copy of arg each time the graph runs. */
struct fake_node {
    fake_work_fn run;
    void *arg;
    size_t arg_bytes;
    struct dep_set deps;
};

struct fake_capture {
    int mode;                    /* CU_STREAM_CAPTURE_MODE_* */
    int invalidated;
    pthread_t thread;            /* that began it */
    int device;
    struct CUstream_st *origin;
    struct fake_node *nodes;
    size_t count, capacity;
    struct fake_capture *next;
};

struct CUgraph_st {
    unsigned int magic;
    struct fake_node *nodes;
    size_t count;
};

struct CUgraphExec_st {
    unsigned int magic;
    struct fake_node *nodes;     /* in replay order; args owned */
    size_t count;
};

struct CUstream_st {
    unsigned int magic;
    struct fake_capture *cap;     /* capture mode: the capture it belongs to */
    struct dep_set cdeps;         /* capture mode: nodes the next one depends on */
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
    struct fake_capture *cap;     /* last recorded on a capturing stream: that capture */
    struct dep_set cdeps;         /* and the nodes the record followed */
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
static struct fake_capture *captures;               /* active ones */

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
/* Capture state (lock held). */

static int set_assign(struct dep_set *d, const size_t *v, size_t n)
{
    size_t *grown = n ? malloc(n * sizeof(*grown)) : NULL;
    if (n && !grown)
        return -1;
    if (n)
        memcpy(grown, v, n * sizeof(*grown));
    free(d->v);
    d->v = grown;
    d->n = n;
    return 0;
}

static int set_union(struct dep_set *d, const struct dep_set *add)
{
    for (size_t i = 0; i < add->n; i++) {
        int have = 0;
        for (size_t j = 0; j < d->n && !have; j++)
            have = d->v[j] == add->v[i];
        if (have)
            continue;
        size_t *grown = realloc(d->v, (d->n + 1) * sizeof(*grown));
        if (!grown)
            return -1;
        d->v = grown;
        d->v[d->n++] = add->v[i];
    }
    return 0;
}

static void set_free(struct dep_set *d)
{
    free(d->v);
    d->v = NULL;
    d->n = 0;
}

static void free_nodes(struct fake_node *nodes, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(nodes[i].arg);
        set_free(&nodes[i].deps);
    }
    free(nodes);
}

/* Work on a capturing stream becomes a node after the stream's current nodes. */
static CUresult capture_node(struct CUstream_st *s, fake_work_fn run, void *arg, size_t bytes)
{
    struct fake_capture *c = s->cap;
    if (c->count == c->capacity) {
        size_t cap = c->capacity ? c->capacity * 2 : 64;
        struct fake_node *grown = realloc(c->nodes, cap * sizeof(*grown));
        if (!grown)
            return CUDA_ERROR_OUT_OF_MEMORY;
        c->nodes = grown;
        c->capacity = cap;
    }
    struct fake_node *n = &c->nodes[c->count];
    *n = (struct fake_node){run, arg, bytes, {NULL, 0}};
    if (set_assign(&n->deps, s->cdeps.v, s->cdeps.n))
        return CUDA_ERROR_OUT_OF_MEMORY;
    const size_t idx = c->count++;
    if (set_assign(&s->cdeps, &idx, 1))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

/* Ends a capture: its streams leave capture mode, its events forget it. */
static void capture_finish(struct fake_capture *c)
{
    for (int d = 0; d < FAKE_MAX_DEVICES; d++)
        if (legacy[d].cap == c) {
            legacy[d].cap = NULL;
            set_free(&legacy[d].cdeps);
        }
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s->cap == c) {
            s->cap = NULL;
            set_free(&s->cdeps);
        }
    for (struct CUevent_st *e = events; e; e = e->next)
        if (e->cap == c) {
            e->cap = NULL;
            set_free(&e->cdeps);
        }
    for (struct fake_capture **pc = &captures; *pc; pc = &(*pc)->next)
        if (*pc == c) {
            *pc = c->next;
            break;
        }
}

/*
 * The capture a "potentially unsafe" call (a synchronize or query) of the calling
 * thread would break, or NULL: the thread's own capture unless it is relaxed,
 * or any other thread's global-mode capture.
 */
static struct fake_capture *unsafe_for_thread(void)
{
    for (struct fake_capture *c = captures; c; c = c->next) {
        const int own = pthread_equal(c->thread, pthread_self());
        if ((own && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!own && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL))
            return c;
    }
    return NULL;
}

/* The legacy stream of a device where a blocking stream captures (its implicit
 * ordering would cross the capture), or a synchronous call while a global-mode
 * capture runs: the capture it breaks, else NULL. */
static struct fake_capture *legacy_conflict(const struct CUstream_st *s, int sync, CUresult *why)
{
    if (s != &legacy[s->device])
        return NULL;
    *why = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    for (struct CUstream_st *b = streams; b; b = b->next)
        if (b->cap && b->device == s->device && !b->nonblocking)
            return b->cap;
    *why = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return sync ? unsafe_for_thread() : NULL;
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

CUresult fake_enqueue(CUstream stream, fake_work_fn run, void *arg, size_t arg_bytes, int sync)
{
    fake_lock();
    struct CUstream_st *s = stream_live(stream) ? stream_of(stream) : NULL;
    CUresult why = CUDA_SUCCESS;
    struct fake_capture *conflict = s ? legacy_conflict(s, sync, &why) : NULL;
    if (s && (s->cap || conflict)) {
        CUresult r = CUDA_SUCCESS;
        if (conflict) {
            conflict->invalidated = 1;
            r = why;
        } else if (s->cap->invalidated) {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (sync || !arg_bytes) {
            s->cap->invalidated = 1;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            r = capture_node(s, run, arg, arg_bytes);
        }
        if (r != CUDA_SUCCESS)
            free(arg);
        fake_unlock();
        return r;
    }
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

int fake_stream_capturing(CUstream stream)
{
    fake_lock();
    const int r = stream_live(stream) && stream_of(stream)->cap != NULL;
    fake_unlock();
    return r;
}

CUresult fake_capture_refuse(CUstream stream, CUresult r)
{
    fake_lock();
    if (stream_live(stream) && stream_of(stream)->cap)
        stream_of(stream)->cap->invalidated = 1;
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
    if (stream_live(stream) && !stream_of(stream)->cap && reserve_stall_slot() &&
        (op = new_op(OP_STALL, stream_of(stream)))) {
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
    return fake_enqueue(stream, fn, arg, 0, 0) == CUDA_SUCCESS ? 0 : -1;
}

int fake_cuda_stream_enqueue_sized(CUstream stream, void (*fn)(void *arg), void *arg, size_t bytes)
{
    return fake_enqueue(stream, fn, arg, bytes, 0) == CUDA_SUCCESS ? 0 : -1;
}

int fake_cuda_stream_capturing(CUstream stream) { return fake_stream_capturing(stream); }

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
        if (found->cap) {
            found->cap->invalidated = 1;
            struct fake_capture *c = found->cap;
            if (c->origin == found) { /* nothing can end it now */
                capture_finish(c);
                free_nodes(c->nodes, c->count);
                free(c);
            }
            found->cap = NULL;
            set_free(&found->cdeps);
        }
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
    struct fake_capture *unsafe = unsafe_for_thread();
    if (!event && stream_live(stream) && stream_of(stream)->cap) {
        stream_of(stream)->cap->invalidated = 1; /* waiting for work that does not run */
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (event && event_live(event) && event->cap) {
        r = CUDA_ERROR_CAPTURED_EVENT;
    } else if (unsafe && (event ? event_live(event) : stream_live(stream))) {
        unsafe->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (event ? event_live(event) : stream_live(stream)) {
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
    struct CUstream_st *s = stream_live(stream) ? stream_of(stream) : NULL;
    if (flags)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!s || !event_live(event))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (s->cap && s->cap->invalidated)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (event->cap && s->cap && s->cap != event->cap) {
        s->cap->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_MERGE;
    } else if (event->cap && s->cap) {
        r = set_union(&s->cdeps, &event->cdeps) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    } else if (event->cap) { /* s joins the capture after the record's nodes */
        if (set_assign(&s->cdeps, event->cdeps.v, event->cdeps.n))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            s->cap = event->cap;
    } else if (s->cap) { /* work outside the capture cannot be a node's dependency */
        s->cap->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    } else if (!(op = new_op(OP_WAIT, s)) || add_dep(op, event->at))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        push(s, op);
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
            set_free(&found->cdeps);
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
    } else if (stream_of(stream)->cap) { /* no node: the event stands for the stream's nodes */
        struct CUstream_st *s = stream_of(stream);
        if (s->cap->invalidated)
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (set_assign(&event->cdeps, s->cdeps.v, s->cdeps.n))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            event->cap = s->cap;
    } else if (!(op = new_op(OP_RECORD, stream_of(stream)))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        event->recorded = 1;
        event->stamped = 0;
        event->cap = NULL;
        set_free(&event->cdeps);
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
    struct fake_capture *busy = NULL;
    for (struct fake_capture *c = captures; c && !busy; c = c->next)
        busy = c->device == fake_current_device() ? c : NULL;
    if (!busy)
        busy = unsafe_for_thread();
    if (busy) { /* the device has work that will not run: never allowed during a capture */
        busy->invalidated = 1;
        fake_unlock();
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    drive_device(fake_current_device(), 1);
    fake_unlock();
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Stream capture and graphs. */

#define FAKE_CUDA_ERROR_ILLEGAL_STATE 401
#define FAKE_CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD 908

CUresult fake_cuStreamBeginCapture(CUstream stream, int mode)
{
    FAKE_ENTER(cuStreamBeginCapture);
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    CUresult r = CUDA_SUCCESS;
    struct fake_capture *c = NULL;
    if (!stream) /* the legacy stream cannot be captured */
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (!stream_live(stream))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (stream->cap)
        r = FAKE_CUDA_ERROR_ILLEGAL_STATE;
    else if (!(c = calloc(1, sizeof(*c))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        c->mode = mode;
        c->thread = pthread_self();
        c->device = stream->device;
        c->origin = stream;
        c->next = captures;
        captures = c;
        stream->cap = c;
        set_free(&stream->cdeps);
    }
    fake_unlock();
    return r;
}

/* Marks node i and every node it depends on (lock held). */
static void mark_ancestors(const struct fake_capture *c, size_t i, unsigned char *seen)
{
    if (seen[i])
        return;
    seen[i] = 1;
    for (size_t k = 0; k < c->nodes[i].deps.n; k++)
        mark_ancestors(c, c->nodes[i].deps.v[k], seen);
}

/* Every stream that joined c has rejoined its origin: the origin's current nodes
 * follow each joined stream's (lock held). -1: out of memory. */
static int capture_joined(const struct fake_capture *c)
{
    unsigned char *seen = calloc(c->count ? c->count : 1, 1);
    if (!seen)
        return -1;
    for (size_t k = 0; k < c->origin->cdeps.n; k++)
        mark_ancestors(c, c->origin->cdeps.v[k], seen);
    int joined = 1;
    for (struct CUstream_st *s = streams; s && joined; s = s->next)
        for (size_t k = 0; s->cap == c && s != c->origin && k < s->cdeps.n && joined; k++)
            joined = seen[s->cdeps.v[k]];
    free(seen);
    return joined;
}

CUresult fake_cuStreamEndCapture(CUstream stream, CUgraph *graph)
{
    FAKE_ENTER(cuStreamEndCapture);
    if (!graph)
        return CUDA_ERROR_INVALID_VALUE;
    *graph = NULL;
    fake_lock();
    struct fake_capture *c = stream && stream_live(stream) ? stream->cap : NULL;
    CUresult r = CUDA_SUCCESS;
    if (!stream || !stream_live(stream))
        r = stream ? CUDA_ERROR_INVALID_HANDLE : FAKE_CUDA_ERROR_ILLEGAL_STATE;
    else if (!c)
        r = FAKE_CUDA_ERROR_ILLEGAL_STATE;
    else if (c->origin != stream)
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED; /* a joined stream, not the one that began it */
    else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
        r = FAKE_CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (r != CUDA_SUCCESS) {
        fake_unlock();
        return r;
    }
    const int joined = c->invalidated ? 1 : capture_joined(c);
    struct CUgraph_st *g = NULL;
    if (c->invalidated)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (joined < 0 || !(g = calloc(1, sizeof(*g))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!joined)
        r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    capture_finish(c); /* the capture ends either way */
    if (r == CUDA_SUCCESS) {
        g->magic = FAKE_LIVE_MAGIC;
        g->nodes = c->nodes;
        g->count = c->count;
        *graph = g;
    } else {
        free(g);
        free_nodes(c->nodes, c->count);
    }
    free(c);
    fake_unlock();
    return r;
}

CUresult fake_cuStreamIsCapturing(CUstream stream, int *status)
{
    FAKE_ENTER(cuStreamIsCapturing);
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    CUresult r = stream_live(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS) {
        const struct fake_capture *c = stream_of(stream)->cap;
        *status = !c ? CU_STREAM_CAPTURE_STATUS_NONE
                     : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    }
    fake_unlock();
    return r;
}

/* A copy of node n with its own arg. */
static int copy_node(struct fake_node *dst, const struct fake_node *n)
{
    *dst = (struct fake_node){n->run, malloc(n->arg_bytes), n->arg_bytes, {NULL, 0}};
    if (!dst->arg)
        return -1;
    memcpy(dst->arg, n->arg, n->arg_bytes);
    return 0;
}

/*
 * Replay order: a topological order of the nodes that takes the most recently
 * readied node first (a stack), so independent branches run in another order
 * than they were captured, as a GPU may run them.
 */
CUresult fake_cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    FAKE_ENTER(cuGraphInstantiateWithFlags);
    if (!exec || !graph || graph->magic != FAKE_LIVE_MAGIC || flags)
        return !exec || flags ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    const size_t n = graph->count;
    struct CUgraphExec_st *x = calloc(1, sizeof(*x));
    size_t *pending = calloc(n ? n : 1, sizeof(*pending)), *stack = calloc(n ? n : 1, sizeof(*stack));
    struct fake_node *out = calloc(n ? n : 1, sizeof(*out));
    int failed = !x || !pending || !stack || !out;
    size_t top = 0, done = 0;
    for (size_t i = 0; i < n && !failed; i++)
        if ((pending[i] = graph->nodes[i].deps.n) == 0)
            stack[top++] = i;
    while (top && !failed) {
        const size_t i = stack[--top];
        failed = copy_node(&out[done++], &graph->nodes[i]);
        for (size_t j = i + 1; j < n; j++) /* dependents come later in capture order */
            for (size_t k = 0; k < graph->nodes[j].deps.n; k++)
                if (graph->nodes[j].deps.v[k] == i && --pending[j] == 0)
                    stack[top++] = j;
    }
    free(pending);
    free(stack);
    if (failed || done != n) {
        free_nodes(out, done);
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->magic = FAKE_LIVE_MAGIC;
    x->nodes = out;
    x->count = n;
    *exec = x;
    return CUDA_SUCCESS;
}

/* Every node, in replay order, as work on the stream (after what it has queued).
 * FAKE_CUDA_BREAK_REPLAY=1: all but the last (a broken replay, for tests that must
 * see a graph's results differ from the eager run's). */
CUresult fake_cuGraphLaunch(CUgraphExec exec, CUstream stream)
{
    FAKE_ENTER(cuGraphLaunch);
    if (!exec || exec->magic != FAKE_LIVE_MAGIC || !fake_stream_ok(stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (fake_stream_capturing(stream))
        return fake_capture_refuse(stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    const size_t count = fake.cfg.break_replay && exec->count ? exec->count - 1 : exec->count;
    for (size_t i = 0; i < count; i++) {
        struct fake_node copy;
        if (copy_node(&copy, &exec->nodes[i]))
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = fake_enqueue(stream, copy.run, copy.arg, copy.arg_bytes, 0);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

CUresult fake_cuGraphExecDestroy(CUgraphExec exec)
{
    FAKE_ENTER(cuGraphExecDestroy);
    if (!exec || exec->magic != FAKE_LIVE_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    exec->magic = 0;
    free_nodes(exec->nodes, exec->count);
    free(exec);
    return CUDA_SUCCESS;
}

CUresult fake_cuGraphDestroy(CUgraph graph)
{
    FAKE_ENTER(cuGraphDestroy);
    if (!graph || graph->magic != FAKE_LIVE_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    graph->magic = 0;
    free_nodes(graph->nodes, graph->count);
    free(graph);
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
        set_free(&s->cdeps);
        drop_queue(s);
        free(s);
    }
    while (events) {
        struct CUevent_st *e = events;
        events = e->next;
        set_free(&e->cdeps);
        free(e);
    }
    while (captures) {
        struct fake_capture *c = captures;
        captures = c->next;
        free_nodes(c->nodes, c->count);
        free(c);
    }
    free(active_stalls);
    active_stalls = NULL;
    active_count = active_capacity = 0;
}
