/*
 * fake_nccl_ops.c: collectives, groups and point-to-point of the libnccl.so.2
 * double, with fault injection.
 *
 * An operation first runs the work queued before it on its stream (it is ordered
 * after that work, and reads buffers that work writes). A collective publishes
 * its arguments, meets the other ranks at a barrier, computes its result into a
 * private buffer (so in-place calls are safe), meets them again and queues the
 * result's write on its stream, so the result lands in stream order: a consumer
 * on another stream sees it only if it waits for this stream. Reductions run in rank order, rounding to
 * the element type after each step (as a 16-bit ring sum does), so results are
 * deterministic. ncclSend/ncclRecv are queued between ncclGroupStart/End and run
 * at ncclGroupEnd: sends are posted to mailboxes, receives take them in order,
 * and the group ends when the peers have taken this rank's sends.
 */
#include <math.h>
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

/* out[i] = reduction over ranks r (in order) of src[r][first + i]. */
static void reduce(const struct fake_slot *slots, int n, size_t first, size_t count,
                   ncclDataType_t t, ncclRedOp_t op, unsigned char *out)
{
    size_t size = type_size(t);
    for (size_t i = 0; i < count; i++) {
        size_t at = (first + i) * size;
        union wide acc = load(t, (const unsigned char *)slots[0].send + at);
        for (int r = 1; r < n; r++)
            acc = combine(t, op, acc, load(t, (const unsigned char *)slots[r].send + at));
        if (op == ncclAvg)
            acc = average(t, acc, n);
        store(t, out + i * size, acc);
    }
}

/* ------------------------------------------------------------------------- */
/* Collectives (lock held). */

static int barrier(struct fake_clique *c)
{
    struct timespec deadline;
    fake_nccl_deadline(&deadline);
    unsigned long generation = c->generation;
    if (++c->arrived == (unsigned long)c->nranks) {
        c->arrived = 0;
        c->generation++;
        pthread_cond_broadcast(&c->changed);
        return 0;
    }
    while (c->generation == generation) {
        if (fake_nccl_wait(c, &deadline) && c->generation == generation) {
            c->broken = 1; /* a peer is gone: nobody may wait for it again */
            pthread_cond_broadcast(&c->changed);
            return -1;
        }
    }
    return 0;
}

static int slots_agree(const struct fake_clique *c)
{
    for (int r = 1; r < c->nranks; r++)
        if (c->slots[r].kind != c->slots[0].kind || c->slots[r].count != c->slots[0].count ||
            c->slots[r].type != c->slots[0].type || c->slots[r].op != c->slots[0].op)
            return 0;
    return 1;
}

/* This rank's result of the collective everybody published, for recv. */
static struct fake_landing *compute(const struct fake_clique *c, int rank, void *recv)
{
    const struct fake_slot *s = &c->slots[rank];
    size_t chunk = s->count * type_size(s->type);
    struct fake_landing *l =
        fake_nccl_landing(recv, s->kind == OP_ALLGATHER ? chunk * (size_t)c->nranks : chunk);
    if (!l)
        return NULL;
    unsigned char *out = l->data;
    if (s->kind == OP_ALLGATHER)
        for (int r = 0; r < c->nranks; r++)
            memcpy(out + (size_t)r * chunk, c->slots[r].send, chunk);
    else if (s->kind == OP_REDUCESCATTER)
        reduce(c->slots, c->nranks, (size_t)rank * s->count, s->count, s->type, s->op, out);
    else
        reduce(c->slots, c->nranks, 0, s->count, s->type, s->op, out);
    return l;
}

static ncclResult_t peers_gone(struct ncclComm *comm)
{
    return fake_nccl_fail(comm, ncclRemoteError,
                          "fake NCCL: a peer aborted or did not arrive within %g s",
                          fake_nccl_cfg.rendezvous_timeout);
}

static ncclResult_t collective(struct ncclComm *comm, const struct fake_op *op)
{
    struct fake_clique *c = comm->clique;
    c->slots[comm->rank] = (struct fake_slot){op->kind, op->send, op->count, op->type, op->op};
    if (barrier(c))
        return peers_gone(comm);
    ncclResult_t r = ncclSuccess;
    struct fake_landing *result = NULL;
    if (!slots_agree(c))
        r = fake_nccl_fail(comm, ncclInvalidUsage, "fake NCCL: ranks called different "
                           "collectives (kind, count, type or op differ)");
    else if (!(result = compute(c, comm->rank, op->recv)))
        r = fake_nccl_fail(comm, ncclSystemError, "fake NCCL: out of memory");
    if (barrier(c)) {
        free(result);
        return peers_gone(comm);
    }
    if (result)
        fake_nccl_land(op->stream, result);
    return r;
}

/* ------------------------------------------------------------------------- */
/* Point-to-point (lock held). */

static ncclResult_t post_send(struct ncclComm *comm, const struct fake_op *op)
{
    struct fake_clique *c = comm->clique;
    struct fake_message *m = calloc(1, sizeof(*m));
    if (!m)
        return fake_nccl_fail(comm, ncclSystemError, "fake NCCL: out of memory");
    m->src = comm->rank;
    m->dst = op->peer;
    m->seq = c->send_seq[(size_t)m->src * (size_t)c->nranks + (size_t)m->dst]++;
    m->buf = op->send;
    m->bytes = op->count * type_size(op->type);
    m->next = c->messages;
    c->messages = m;
    pthread_cond_broadcast(&c->changed);
    return ncclSuccess;
}

static struct fake_message *find_message(const struct fake_clique *c, int src, int dst,
                                         unsigned long seq)
{
    for (struct fake_message *m = c->messages; m; m = m->next)
        if (m->src == src && m->dst == dst && m->seq == seq)
            return m;
    return NULL;
}

static ncclResult_t receive(struct ncclComm *comm, const struct fake_op *op)
{
    struct fake_clique *c = comm->clique;
    unsigned long seq = c->recv_seq[(size_t)op->peer * (size_t)c->nranks + (size_t)comm->rank]++;
    struct timespec deadline;
    fake_nccl_deadline(&deadline);
    struct fake_message *m;
    while (!(m = find_message(c, op->peer, comm->rank, seq)))
        if (fake_nccl_wait(c, &deadline) && !find_message(c, op->peer, comm->rank, seq))
            return peers_gone(comm);
    size_t bytes = op->count * type_size(op->type);
    ncclResult_t r = ncclSuccess;
    struct fake_landing *l = NULL;
    if (m->bytes != bytes)
        r = fake_nccl_fail(comm, ncclInvalidUsage, "fake NCCL: rank %d receives %zu bytes from "
                           "rank %d, which sends %zu", comm->rank, bytes, op->peer, m->bytes);
    else if (!(l = fake_nccl_landing(op->recv, bytes)))
        r = fake_nccl_fail(comm, ncclSystemError, "fake NCCL: out of memory");
    else {
        memcpy(l->data, m->buf, bytes);
        fake_nccl_land(op->stream, l);
    }
    m->consumed = 1;
    pthread_cond_broadcast(&c->changed);
    return r;
}

static int sends_pending(const struct fake_clique *c, int rank)
{
    for (const struct fake_message *m = c->messages; m; m = m->next)
        if (m->src == rank && !m->consumed)
            return 1;
    return 0;
}

/* Waits until the peers took this rank's sends (their buffers stay in use until
 * then), and drops those messages. */
static ncclResult_t finish_sends(struct ncclComm *comm)
{
    struct fake_clique *c = comm->clique;
    struct timespec deadline;
    fake_nccl_deadline(&deadline);
    while (sends_pending(c, comm->rank))
        if (fake_nccl_wait(c, &deadline) && sends_pending(c, comm->rank))
            return peers_gone(comm);
    for (struct fake_message **pm = &c->messages; *pm;) {
        struct fake_message *m = *pm;
        if (m->src == comm->rank) {
            *pm = m->next;
            free(m);
        } else {
            pm = &m->next;
        }
    }
    return ncclSuccess;
}

static ncclResult_t exchange(struct ncclComm *comm, const struct fake_op *ops, size_t n)
{
    ncclResult_t r = ncclSuccess;
    int any = 0;
    for (size_t i = 0; i < n && r == ncclSuccess; i++)
        if (ops[i].kind == OP_SEND && (any = 1))
            r = post_send(comm, &ops[i]);
    for (size_t i = 0; i < n && r == ncclSuccess; i++)
        if (ops[i].kind == OP_RECV && (any = 1))
            r = receive(comm, &ops[i]);
    if (any && r == ncclSuccess)
        r = finish_sends(comm);
    return r;
}

/* ------------------------------------------------------------------------- */
/* Running an operation (one collective, or a group) with fault injection. */

static ncclResult_t check_ready(struct ncclComm *comm)
{
    if (comm->aborted)
        return fake_nccl_fail(comm, ncclInvalidUsage, "communicator was aborted");
    if (comm->clique->joined < comm->clique->nranks)
        return fake_nccl_fail(comm, ncclInvalidUsage, "communicator not ready (wait until "
                              "ncclCommGetAsyncError stops saying ncclInProgress)");
    if (comm->clique->broken) {
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
    fake_nccl_counters.stalled++;
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

static ncclResult_t run(const struct fake_op *ops, size_t n)
{
    struct ncclComm *comm = ops[0].comm;
    for (size_t i = 1; i < n; i++)
        if (ops[i].comm != comm)
            return fake_nccl_fail(comm, ncclInvalidUsage,
                                  "fake NCCL: a group may use only one communicator");
    const int behind_stall = flush_streams(ops, n);
    pthread_mutex_lock(&fake_nccl_lock);
    ncclResult_t r = check_ready(comm);
    if (r != ncclSuccess) {
        pthread_mutex_unlock(&fake_nccl_lock);
        return r;
    }
    unsigned long k = ++comm->operations;
    fake_nccl_counters.operations++;
    if (fake_nccl_cfg.hang == k) {
        r = hang(comm, ops[0].stream);
    } else if (behind_stall) {
        r = ncclSuccess; /* queued behind a hung operation: it never runs */
    } else {
        fake_nccl_enter(comm);
        r = execute(comm, ops, n);
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
