/*
 * fake_nccl_ops.c: collectives, groups and point-to-point of the libnccl.so.2
 * double, with fault injection.
 *
 * An operation first runs the work queued before it on its stream (it is ordered
 * after that work, and reads buffers that work writes). A collective publishes
 * its arguments in the clique's segment, then in rounds that fit the staging
 * areas: each rank copies its part of the send buffer into its own staging area,
 * the ranks meet at a barrier, each computes its part of the result from all
 * staging areas into a private buffer (so in-place calls are safe), and they
 * meet again. At the end each queues the result's write on its stream, so the
 * result lands in stream order: a consumer on another stream sees it only if it
 * waits for this stream. Reductions run in rank order, rounding to the element
 * type after each step (as a 16-bit ring sum does), so results are
 * deterministic, and the same whether the ranks are threads or processes.
 * ncclSend/ncclRecv are queued between ncclGroupStart/End and run at
 * ncclGroupEnd: sends are copied in pieces into the sender's staging area and
 * posted, receives take each peer's pieces in order (any peer's first), and the
 * group ends when the peers have taken this rank's sends.
 *
 * On a stream that the fake libcuda is capturing, an operation is not run but
 * enqueued as stream work (a node of the capture): it runs, rendezvous included,
 * each time the graph does, in stream order, and writes its results directly.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_nccl.h"

enum fake_op_kind { OP_ALLGATHER = 1, OP_REDUCESCATTER, OP_ALLREDUCE, OP_SEND, OP_RECV };

struct fake_op {
    int kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    int peer;
    struct ncclComm *comm;
    cudaStream_t stream;
};

static _Thread_local int group_depth;
static _Thread_local int in_stream; /* running as captured stream work: stream order is here already */
static _Thread_local struct fake_op *group_ops;
static _Thread_local size_t group_count, group_capacity;

/* ------------------------------------------------------------------------- */
/* Element types. */

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

static int type_is_float(ncclDataType_t t)
{
    return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64;
}

static int type_is_signed(ncclDataType_t t)
{
    return t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | (mant << 13);
    else if (exp)
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    else
        return (sign ? -1.0f : 1.0f) * ldexpf((float)mant, -24);
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) { /* subnormal half: round mant * 2^(exp - 126) to an integer */
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        unsigned shift = (unsigned)(14 - e);
        uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* a carry into the exponent is the right rounding, up to infinity */
    return (uint16_t)h;
}

static float bf16_to_float(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* One element, widened: floats to double, integers to 64 bits. */
union wide {
    double f;
    int64_t i;
    uint64_t u;
};

static union wide load(ncclDataType_t t, const unsigned char *p)
{
    union wide w = {0};
    switch (t) {
    case ncclInt8: { int8_t v; memcpy(&v, p, 1); w.i = v; break; }
    case ncclUint8: { uint8_t v; memcpy(&v, p, 1); w.u = v; break; }
    case ncclInt32: { int32_t v; memcpy(&v, p, 4); w.i = v; break; }
    case ncclUint32: { uint32_t v; memcpy(&v, p, 4); w.u = v; break; }
    case ncclInt64: memcpy(&w.i, p, 8); break;
    case ncclUint64: memcpy(&w.u, p, 8); break;
    case ncclFloat16: { uint16_t v; memcpy(&v, p, 2); w.f = half_to_float(v); break; }
    case ncclBfloat16: { uint16_t v; memcpy(&v, p, 2); w.f = bf16_to_float(v); break; }
    case ncclFloat32: { float v; memcpy(&v, p, 4); w.f = v; break; }
    case ncclFloat64: memcpy(&w.f, p, 8); break;
    default: break;
    }
    return w;
}

static void store(ncclDataType_t t, unsigned char *p, union wide w)
{
    switch (t) {
    case ncclInt8: { int8_t v = (int8_t)w.i; memcpy(p, &v, 1); break; }
    case ncclUint8: { uint8_t v = (uint8_t)w.u; memcpy(p, &v, 1); break; }
    case ncclInt32: { int32_t v = (int32_t)w.i; memcpy(p, &v, 4); break; }
    case ncclUint32: { uint32_t v = (uint32_t)w.u; memcpy(p, &v, 4); break; }
    case ncclInt64: memcpy(p, &w.i, 8); break;
    case ncclUint64: memcpy(p, &w.u, 8); break;
    case ncclFloat16: { uint16_t v = float_to_half((float)w.f); memcpy(p, &v, 2); break; }
    case ncclBfloat16: { uint16_t v = float_to_bf16((float)w.f); memcpy(p, &v, 2); break; }
    case ncclFloat32: { float v = (float)w.f; memcpy(p, &v, 4); break; }
    case ncclFloat64: memcpy(p, &w.f, 8); break;
    default: break;
    }
}

/* Rounds a widened value to what the element type can hold. */
static union wide narrow(ncclDataType_t t, union wide w)
{
    unsigned char buf[8];
    store(t, buf, w);
    return load(t, buf);
}

static union wide combine(ncclDataType_t t, ncclRedOp_t op, union wide a, union wide b)
{
    union wide r = a;
    if (type_is_float(t)) {
        switch (op) {
        case ncclProd: r.f = a.f * b.f; break;
        case ncclMax: r.f = fmax(a.f, b.f); break;
        case ncclMin: r.f = fmin(a.f, b.f); break;
        default: r.f = a.f + b.f; break; /* sum, and avg before its division */
        }
    } else if (type_is_signed(t)) {
        switch (op) {
        case ncclProd: r.u = a.u * b.u; break; /* wraps like the hardware */
        case ncclMax: r.i = a.i > b.i ? a.i : b.i; break;
        case ncclMin: r.i = a.i < b.i ? a.i : b.i; break;
        default: r.u = a.u + b.u; break;
        }
    } else {
        switch (op) {
        case ncclProd: r.u = a.u * b.u; break;
        case ncclMax: r.u = a.u > b.u ? a.u : b.u; break;
        case ncclMin: r.u = a.u < b.u ? a.u : b.u; break;
        default: r.u = a.u + b.u; break;
        }
    }
    return narrow(t, r);
}

static union wide average(ncclDataType_t t, union wide sum, int n)
{
    if (type_is_float(t))
        sum.f /= n;
    else if (type_is_signed(t))
        sum.i /= n;
    else
        sum.u /= (uint64_t)n;
    return narrow(t, sum);
}

/* out[i] = reduction over ranks r (in order) of src[r][i]. */
static void reduce(const unsigned char *const *src, int n, size_t count, ncclDataType_t t,
                   ncclRedOp_t op, unsigned char *out)
{
    size_t size = type_size(t);
    for (size_t i = 0; i < count; i++) {
        size_t at = i * size;
        union wide acc = load(t, src[0] + at);
        for (int r = 1; r < n; r++)
            acc = combine(t, op, acc, load(t, src[r] + at));
        if (op == ncclAvg)
            acc = average(t, acc, n);
        store(t, out + at, acc);
    }
}

/* ------------------------------------------------------------------------- */
/* Collectives. */

/* A result lands in stream order: queued on the stream, or at once when the
 * operation runs as stream work (a graph replaying a captured collective). */
static void land(cudaStream_t stream, struct fake_landing *l)
{
    if (!in_stream) {
        fake_nccl_land(stream, l);
        return;
    }
    if (l->bytes)
        memcpy(l->dst, l->data, l->bytes);
    free(l);
}

/* Meets the other ranks (clique lock held). */
static int barrier(struct fake_clique *c)
{
    struct timespec deadline;
    fake_nccl_deadline(&deadline);
    unsigned long generation = c->generation;
    if (c->broken)
        return -1;
    if (++c->arrived == (unsigned long)c->nranks) {
        c->arrived = 0;
        c->generation++;
        pthread_cond_broadcast(&c->changed);
        return 0;
    }
    while (c->generation == generation) {
        if (fake_nccl_wait(c, &deadline) && c->generation == generation) {
            fake_nccl_break(c); /* a peer is gone: nobody may wait for it again */
            return -1;
        }
    }
    return 0;
}

static int meet(struct fake_clique *c)
{
    fake_nccl_lock_clique(c);
    int r = barrier(c);
    fake_nccl_unlock_clique(c);
    return r;
}

static int slots_agree(const struct fake_clique *c)
{
    const struct fake_slot *s0 = &c->member[0].slot;
    for (int r = 1; r < c->nranks; r++) {
        const struct fake_slot *s = &c->member[r].slot;
        if (s->kind != s0->kind || s->count != s0->count || s->type != s0->type || s->op != s0->op)
            return 0;
    }
    return 1;
}

/* Elements of each rank's send buffer, and the range of them this rank's result covers. */
static size_t send_elements(const struct fake_op *op, int nranks, int rank, size_t *first, size_t *count)
{
    *first = op->kind == OP_REDUCESCATTER ? (size_t)rank * op->count : 0;
    *count = op->count;
    return op->kind == OP_REDUCESCATTER ? op->count * (size_t)nranks : op->count;
}

/* This rank's part of the result from everybody's elements [a, b) in staging. */
static void compute_round(struct fake_clique *c, int rank, const struct fake_op *op, size_t a, size_t b,
                          unsigned char *out)
{
    const size_t size = type_size(op->type);
    if (op->kind == OP_ALLGATHER) {
        for (int r = 0; r < c->nranks; r++)
            memcpy(out + ((size_t)r * op->count + a) * size, fake_nccl_staging(c, r), (b - a) * size);
        return;
    }
    size_t first, count;
    send_elements(op, c->nranks, rank, &first, &count);
    const size_t lo = a > first ? a : first, hi = b < first + count ? b : first + count;
    if (lo >= hi)
        return;
    const unsigned char *src[FAKE_NCCL_MAX_RANKS];
    for (int r = 0; r < c->nranks; r++)
        src[r] = fake_nccl_staging(c, r) + (lo - a) * size;
    reduce(src, c->nranks, hi - lo, op->type, op->op, out + (lo - first) * size);
}

static ncclResult_t peers_gone(struct ncclComm *comm)
{
    return fake_nccl_fail(comm, ncclRemoteError,
                          "fake NCCL: a peer aborted, exited or did not arrive within %g s",
                          fake_nccl_cfg.rendezvous_timeout);
}

static ncclResult_t collective(struct ncclComm *comm, const struct fake_op *op)
{
    struct fake_clique *c = comm->clique;
    const size_t size = type_size(op->type), per_round = c->rank_staging / size;
    size_t first, count;
    const size_t elements = send_elements(op, c->nranks, comm->rank, &first, &count);
    struct fake_landing *result = fake_nccl_landing(
        op->recv, op->kind == OP_ALLGATHER ? op->count * size * (size_t)c->nranks : count * size);
    fake_nccl_lock_clique(c);
    c->member[comm->rank].slot = (struct fake_slot){op->kind, op->count, op->type, op->op};
    if (!result) /* the peers must not wait for this rank */
        fake_nccl_break(c);
    fake_nccl_unlock_clique(c);
    if (!result)
        return fake_nccl_fail(comm, ncclSystemError, "fake NCCL: out of memory");
    ncclResult_t r = ncclSuccess;
    unsigned char *mine = fake_nccl_staging(c, comm->rank);
    size_t a = 0;
    do {
        const size_t b = elements - a < per_round ? elements : a + per_round;
        memcpy(mine, (const unsigned char *)op->send + a * size, (b - a) * size);
        if (meet(c)) {
            r = peers_gone(comm);
            break;
        }
        /* Everybody published before the first barrier and nobody changes a slot
         * before the last one: all ranks see the same disagreement and stop. */
        if (a == 0 && !slots_agree(c))
            r = fake_nccl_fail(comm, ncclInvalidUsage, "fake NCCL: ranks called different "
                               "collectives (kind, count, type or op differ)");
        else
            compute_round(c, comm->rank, op, a, b, result->data);
        if (meet(c)) {
            r = peers_gone(comm);
            break;
        }
        a = b;
    } while (r == ncclSuccess && a < elements);
    if (r == ncclSuccess)
        land(op->stream, result);
    else
        free(result);
    return r;
}

/* ------------------------------------------------------------------------- */
/* Point-to-point (one group's sends and receives). */

/* Where a group stands: the next piece to send, each receive's progress. */
struct exchange {
    struct ncclComm *comm;
    const struct fake_op *ops;
    size_t n;
    size_t next_send, sent; /* op index, bytes of it posted */
    size_t used;            /* staging bytes holding posted pieces */
    struct fake_landing **landing; /* [n], receives only */
    size_t *got;            /* [n] */
    unsigned char *done;    /* [n] */
};

static int posts_pending(const struct fake_member *m)
{
    for (int i = 0; i < FAKE_NCCL_MAX_POSTS; i++)
        if (m->posts[i].state == POST_READY)
            return 1;
    return 0;
}

/* Frees this rank's pieces once every one was taken (clique lock held). */
static void reclaim(struct exchange *x, struct fake_member *m)
{
    if (posts_pending(m))
        return;
    for (int i = 0; i < FAKE_NCCL_MAX_POSTS; i++)
        m->posts[i].state = POST_FREE;
    x->used = 0;
}

static struct fake_post *free_post(struct fake_member *m)
{
    for (int i = 0; i < FAKE_NCCL_MAX_POSTS; i++)
        if (m->posts[i].state == POST_FREE)
            return &m->posts[i];
    return NULL;
}

/* Posts what fits of the sends (clique lock held); 1 if it posted anything. */
static int post_sends(struct exchange *x)
{
    struct fake_clique *c = x->comm->clique;
    struct fake_member *m = &c->member[x->comm->rank];
    int progress = 0;
    for (; x->next_send < x->n; x->next_send++, x->sent = 0) {
        const struct fake_op *op = &x->ops[x->next_send];
        if (op->kind != OP_SEND)
            continue;
        const size_t bytes = op->count * type_size(op->type);
        do {
            const size_t room = c->rank_staging - x->used, left = bytes - x->sent;
            const size_t piece = left < room ? left : room;
            struct fake_post *p = free_post(m);
            if ((left && !piece) || !p)
                return progress; /* full until the peers take some */
            memcpy(fake_nccl_staging(c, x->comm->rank) + x->used, (const unsigned char *)op->send + x->sent,
                   piece);
            *p = (struct fake_post){POST_READY, op->peer, x->sent + piece == bytes,
                                    x->comm->send_seq[op->peer]++, x->used, piece, bytes};
            x->used += piece;
            x->sent += piece;
            progress = 1;
        } while (x->sent < bytes);
    }
    return progress;
}

static struct fake_post *find_post(struct fake_member *src, int dst, unsigned long seq)
{
    for (int i = 0; i < FAKE_NCCL_MAX_POSTS; i++)
        if (src->posts[i].state == POST_READY && src->posts[i].dst == dst && src->posts[i].seq == seq)
            return &src->posts[i];
    return NULL;
}

/* Takes the pieces that arrived for this rank's receives, each peer's in order
 * (clique lock held); 1 if it took any, -1 on a size mismatch. */
static int take_pieces(struct exchange *x)
{
    struct ncclComm *comm = x->comm;
    struct fake_clique *c = comm->clique;
    unsigned char waiting_on[FAKE_NCCL_MAX_RANKS] = {0}; /* an earlier receive from this peer is open */
    int progress = 0;
    for (size_t i = 0; i < x->n; i++) {
        const struct fake_op *op = &x->ops[i];
        if (op->kind != OP_RECV || x->done[i] || waiting_on[op->peer])
            continue;
        const size_t bytes = op->count * type_size(op->type);
        struct fake_post *p;
        while (!x->done[i] && (p = find_post(&c->member[op->peer], comm->rank, comm->recv_seq[op->peer]))) {
            if (p->total != bytes || x->got[i] + p->bytes > bytes) {
                fake_nccl_fail(comm, ncclInvalidUsage, "fake NCCL: rank %d receives %zu bytes from "
                               "rank %d, which sends %zu", comm->rank, bytes, op->peer, p->total);
                return -1;
            }
            memcpy(x->landing[i]->data + x->got[i], fake_nccl_staging(c, op->peer) + p->offset, p->bytes);
            x->got[i] += p->bytes;
            x->done[i] = (unsigned char)p->last;
            p->state = POST_TAKEN;
            comm->recv_seq[op->peer]++;
            progress = 1;
        }
        waiting_on[op->peer] = !x->done[i];
    }
    if (progress)
        pthread_cond_broadcast(&c->changed);
    return progress;
}

static int exchange_done(const struct exchange *x, const struct fake_member *m)
{
    if (x->next_send < x->n || posts_pending(m))
        return 0;
    for (size_t i = 0; i < x->n; i++)
        if (x->ops[i].kind == OP_RECV && !x->done[i])
            return 0;
    return 1;
}

/* Runs the sends and receives until all are done (clique lock held). */
static ncclResult_t progress_exchange(struct exchange *x)
{
    struct fake_clique *c = x->comm->clique;
    struct fake_member *m = &c->member[x->comm->rank];
    struct timespec deadline;
    fake_nccl_deadline(&deadline);
    int gave_up = 0;
    while (!exchange_done(x, m)) {
        if (c->broken)
            return peers_gone(x->comm);
        reclaim(x, m);
        const int posted = post_sends(x);
        if (posted)
            pthread_cond_broadcast(&c->changed);
        const int taken = take_pieces(x);
        if (taken < 0) {
            fake_nccl_break(c); /* the pairs disagree: nobody can go on */
            return ncclInvalidUsage;
        }
        if (posted || taken) {
            fake_nccl_deadline(&deadline);
            gave_up = 0;
        } else if (gave_up) {
            return peers_gone(x->comm);
        } else if (!exchange_done(x, m) && fake_nccl_wait(c, &deadline)) {
            gave_up = 1; /* one more look: it may have happened just before */
        }
    }
    for (int i = 0; i < FAKE_NCCL_MAX_POSTS; i++)
        m->posts[i].state = POST_FREE;
    return ncclSuccess;
}

static ncclResult_t exchange(struct ncclComm *comm, const struct fake_op *ops, size_t n)
{
    int any = 0;
    for (size_t i = 0; i < n; i++)
        any |= ops[i].kind == OP_SEND || ops[i].kind == OP_RECV;
    if (!any)
        return ncclSuccess;
    struct exchange x = {.comm = comm, .ops = ops, .n = n};
    x.landing = calloc(n, sizeof(*x.landing));
    x.got = calloc(n, sizeof(*x.got));
    x.done = calloc(n, 1);
    ncclResult_t r = x.landing && x.got && x.done ? ncclSuccess : ncclSystemError;
    for (size_t i = 0; i < n && r == ncclSuccess; i++)
        if (ops[i].kind == OP_RECV &&
            !(x.landing[i] = fake_nccl_landing(ops[i].recv, ops[i].count * type_size(ops[i].type))))
            r = ncclSystemError;
    fake_nccl_lock_clique(comm->clique);
    if (r == ncclSuccess)
        r = progress_exchange(&x);
    else
        fake_nccl_break(comm->clique); /* the peers must not wait for this rank */
    fake_nccl_unlock_clique(comm->clique);
    if (r == ncclSystemError)
        fake_nccl_fail(comm, r, "fake NCCL: out of memory");
    for (size_t i = 0; x.landing && i < n; i++) {
        if (x.landing[i] && r == ncclSuccess)
            land(ops[i].stream, x.landing[i]);
        else
            free(x.landing[i]);
    }
    free(x.landing);
    free(x.got);
    free(x.done);
    return r;
}

/* ------------------------------------------------------------------------- */
/* Running an operation (one collective, or a group) with fault injection. */

/* fake_nccl_lock held. */
static ncclResult_t check_ready(struct ncclComm *comm)
{
    if (comm->aborted)
        return fake_nccl_fail(comm, ncclInvalidUsage, "communicator was aborted");
    struct fake_clique *c = comm->clique;
    fake_nccl_lock_clique(c);
    const int ready = c->joined == c->nranks, broken = c->broken;
    fake_nccl_unlock_clique(c);
    if (!ready)
        return fake_nccl_fail(comm, ncclInvalidUsage, "communicator not ready (wait until "
                              "ncclCommGetAsyncError stops saying ncclInProgress)");
    if (broken) {
        comm->async_error = ncclRemoteError;
        return fake_nccl_fail(comm, ncclRemoteError, "fake NCCL: a peer aborted");
    }
    return ncclSuccess;
}

/* FAKE_NCCL_HANG: the operation is accepted but never done; its stream stalls. */
static ncclResult_t hang(struct ncclComm *comm, cudaStream_t stream)
{
    unsigned long id = fake_nccl_stall_stream(stream);
    if (id && comm->nstalls < FAKE_NCCL_MAX_STALLS)
        comm->stalls[comm->nstalls++] = id;
    fake_nccl_count(&fake_nccl_counters.stalled, 1);
    return ncclSuccess;
}

static ncclResult_t execute(struct ncclComm *comm, const struct fake_op *ops, size_t n)
{
    ncclResult_t r = ncclSuccess;
    for (size_t i = 0; i < n && r == ncclSuccess; i++)
        if (ops[i].kind != OP_SEND && ops[i].kind != OP_RECV)
            r = collective(comm, &ops[i]);
    if (r == ncclSuccess)
        r = exchange(comm, ops, n);
    return r;
}

/* Runs the work queued before the operation on its streams; 1 if some waits
 * behind a stall (the operation then never runs, as on a GPU). */
static int flush_streams(const struct fake_op *ops, size_t n)
{
    int stalled = 0;
    for (size_t i = 0; i < n; i++)
        stalled |= fake_nccl_flush_stream(ops[i].stream);
    return stalled;
}

static ncclResult_t run(const struct fake_op *ops, size_t n);

/* A captured operation (or group), replayed by each launch of the graph. */
struct deferred {
    size_t n;
    struct fake_op ops[];
};

static void run_deferred(void *arg)
{
    const struct deferred *d = arg;
    in_stream = 1;
    run(d->ops, d->n); /* a failure is the communicator's asynchronous error */
    in_stream = 0;
}

typedef int (*capturing_fn)(cudaStream_t stream);
typedef int (*enqueue_sized_fn)(cudaStream_t stream, void (*fn)(void *), void *arg, size_t bytes);

/* On a capturing stream the operation becomes stream work: returns 1 and its
 * enqueue result in *r; else 0 (run it now). */
static int defer_if_capturing(const struct fake_op *ops, size_t n, ncclResult_t *r)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    capturing_fn capturing = h ? (capturing_fn)(uintptr_t)dlsym(h, "fake_cuda_stream_capturing") : NULL;
    enqueue_sized_fn enqueue = h ? (enqueue_sized_fn)(uintptr_t)dlsym(h, "fake_cuda_stream_enqueue_sized") : NULL;
    const int deferred = capturing && enqueue && capturing(ops[0].stream);
    if (deferred) {
        const size_t bytes = sizeof(struct deferred) + n * sizeof(*ops);
        struct deferred *d = malloc(bytes);
        if (!d) {
            *r = fake_nccl_fail(ops[0].comm, ncclSystemError, "fake NCCL: out of memory");
        } else {
            d->n = n;
            memcpy(d->ops, ops, n * sizeof(*ops));
            *r = enqueue(ops[0].stream, run_deferred, d, bytes)
                     ? fake_nccl_fail(ops[0].comm, ncclInvalidUsage, "fake NCCL: the stream capture refused "
                                      "the operation")
                     : ncclSuccess;
        }
    }
    if (h)
        dlclose(h);
    return deferred;
}

static ncclResult_t run(const struct fake_op *ops, size_t n)
{
    struct ncclComm *comm = ops[0].comm;
    for (size_t i = 1; i < n; i++)
        if (ops[i].comm != comm)
            return fake_nccl_fail(comm, ncclInvalidUsage,
                                  "fake NCCL: a group may use only one communicator");
    ncclResult_t deferred_result = ncclSuccess;
    if (!in_stream && defer_if_capturing(ops, n, &deferred_result))
        return deferred_result;
    const int behind_stall = in_stream ? 0 : flush_streams(ops, n);
    pthread_mutex_lock(&fake_nccl_lock);
    ncclResult_t r = check_ready(comm);
    if (r != ncclSuccess) {
        pthread_mutex_unlock(&fake_nccl_lock);
        return r;
    }
    unsigned long k = ++comm->operations;
    fake_nccl_count(&fake_nccl_counters.operations, 1);
    if (fake_nccl_cfg.hang == k) {
        r = hang(comm, ops[0].stream);
    } else if (behind_stall) {
        r = ncclSuccess; /* queued behind a hung operation: it never runs */
    } else {
        /* The peers' waits happen without this process's lock: an abort from
         * another thread must get through. */
        fake_nccl_enter(comm);
        pthread_mutex_unlock(&fake_nccl_lock);
        r = execute(comm, ops, n);
        pthread_mutex_lock(&fake_nccl_lock);
        if (r != ncclSuccess)
            comm->async_error = r;
        else if (fake_nccl_cfg.async_error == k)
            comm->async_error = fake_nccl_fail(comm, ncclSystemError, "fake NCCL: injected "
                                               "asynchronous error after operation %lu", k);
        fake_nccl_leave(comm);
    }
    pthread_mutex_unlock(&fake_nccl_lock);
    return r;
}

static ncclResult_t validate(const struct fake_op *op)
{
    if (!op->comm)
        return fake_nccl_fail(NULL, ncclInvalidArgument, "NULL communicator");
    if (!type_size(op->type))
        return fake_nccl_fail(op->comm, ncclInvalidArgument, "data type %d not supported by "
                              "the fake", op->type);
    if (op->op < ncclSum || op->op > ncclAvg)
        return fake_nccl_fail(op->comm, ncclInvalidArgument, "reduction op %d", op->op);
    if ((op->kind == OP_SEND || op->kind == OP_RECV) &&
        (op->peer < 0 || op->peer >= op->comm->clique->nranks))
        return fake_nccl_fail(op->comm, ncclInvalidArgument, "peer %d", op->peer);
    if (op->count && ((op->kind != OP_RECV && !op->send) || (op->kind != OP_SEND && !op->recv)))
        return fake_nccl_fail(op->comm, ncclInvalidArgument, "NULL buffer");
    /* A gather's result and a reduce-scatter's input hold count elements per rank. */
    if (op->count > SIZE_MAX / type_size(op->type) / (size_t)op->comm->clique->nranks)
        return fake_nccl_fail(op->comm, ncclInvalidArgument, "count %zu is too large", op->count);
    return ncclSuccess;
}

/* Wire bytes of an operation: what op->comm's rank sends to the others (fake_hooks.h). */
static void count_sent(const struct fake_op *op)
{
    const unsigned long long n = (unsigned long long)op->comm->clique->nranks;
    const unsigned long long size = op->count * type_size(op->type);
    const unsigned long long bytes = op->kind == OP_ALLGATHER || op->kind == OP_REDUCESCATTER ? (n - 1) * size
                                     : op->kind == OP_SEND && op->peer != op->comm->rank  ? size
                                                                                          : 0;
    pthread_mutex_lock(&fake_nccl_lock);
    fake_nccl_counters.sent_bytes += bytes;
    if (op->comm->rank < FAKE_NCCL_STATS_RANKS)
        fake_nccl_counters.sent_bytes_by_rank[op->comm->rank] += bytes;
    pthread_mutex_unlock(&fake_nccl_lock);
}

static ncclResult_t submit(const struct fake_op *op)
{
    fake_nccl_configure_once();
    ncclResult_t r = validate(op);
    if (r != ncclSuccess)
        return r;
    count_sent(op);
    if ((op->kind == OP_SEND || op->kind == OP_RECV) && group_depth == 0)
        return fake_nccl_fail(op->comm, ncclInvalidUsage,
                              "fake NCCL: ncclSend/ncclRecv only inside ncclGroupStart/End");
    if (group_depth == 0)
        return run(op, 1);
    if (group_count == group_capacity) {
        size_t cap = group_capacity ? group_capacity * 2 : 16;
        struct fake_op *grown = realloc(group_ops, cap * sizeof(*grown));
        if (!grown)
            return fake_nccl_fail(op->comm, ncclSystemError, "out of memory");
        group_ops = grown;
        group_capacity = cap;
    }
    group_ops[group_count++] = *op;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0)
        return fake_nccl_fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0)
        return ncclSuccess;
    ncclResult_t r = group_count ? run(group_ops, group_count) : ncclSuccess;
    free(group_ops);
    group_ops = NULL;
    group_count = group_capacity = 0;
    return r;
}

ncclResult_t ncclAllGather(const void *sendbuf, void *recvbuf, size_t sendcount,
                           ncclDataType_t type, ncclComm_t comm, cudaStream_t stream)
{
    struct fake_op op = {OP_ALLGATHER, sendbuf, recvbuf, sendcount, type, ncclSum, 0, comm, stream};
    return submit(&op);
}

ncclResult_t ncclReduceScatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                               ncclDataType_t type, ncclRedOp_t red, ncclComm_t comm,
                               cudaStream_t stream)
{
    struct fake_op op = {OP_REDUCESCATTER, sendbuf, recvbuf, recvcount, type, red, 0, comm, stream};
    return submit(&op);
}

ncclResult_t ncclAllReduce(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t type,
                           ncclRedOp_t red, ncclComm_t comm, cudaStream_t stream)
{
    struct fake_op op = {OP_ALLREDUCE, sendbuf, recvbuf, count, type, red, 0, comm, stream};
    return submit(&op);
}

ncclResult_t ncclSend(const void *sendbuf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    struct fake_op op = {OP_SEND, sendbuf, NULL, count, type, ncclSum, peer, comm, stream};
    return submit(&op);
}

ncclResult_t ncclRecv(void *recvbuf, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    struct fake_op op = {OP_RECV, NULL, recvbuf, count, type, ncclSum, peer, comm, stream};
    return submit(&op);
}
