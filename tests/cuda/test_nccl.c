/*
 * NCCL loading and the polling helper, against the fake libnccl (ranks are
 * threads): version checks, non-blocking initialisation, all-gather,
 * reduce-scatter, all-reduce and an all-to-all of sends and receives, and the
 * failure paths a runtime must survive: asynchronous errors, a hung collective
 * (detected by dcp_nccl_wait's timeout), a peer that aborts while others wait.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "nccl_api.h"

#define MAX_RANKS 4
#define WAIT_S 30.0 /* generous: only a broken fake would need it */

static void close_nccl(struct dcp_nccl **nccl)
{
    dcp_nccl_close(nccl);
    assert_null(*nccl);
    void *still = dlopen(fake_nccl_path(), RTLD_NOW | RTLD_NOLOAD);
    if (still) {
        dlclose(still);
        fail_msg("the fake libnccl stayed loaded after dcp_nccl_close");
    }
}

static struct fake_nccl_stats nccl_stats(const struct dcp_nccl *nccl)
{
    fake_nccl_get_stats_fn get = (fake_nccl_get_stats_fn)(uintptr_t)dlsym(nccl->dl, "fake_nccl_get_stats");
    assert_non_null(get);
    struct fake_nccl_stats s;
    get(&s);
    return s;
}

/* ------------------------------------------------------------------------- */
/* Loading. */

static void test_open(void **state)
{
    (void)state;
    struct dcp_nccl *nccl = fake_nccl_open();
    assert_int_equal(nccl->version, 22809);
    assert_non_null(strstr(nccl->path, "libnccl.so.2"));
    assert_non_null(nccl->api.ncclGetLastError);
    char line[4096], want[4096];
    snprintf(want, sizeof(want), "NCCL 2.28.9 (%s)", nccl->path);
    dcp_nccl_describe(nccl, line, sizeof(line));
    assert_string_equal(line, want);
    close_nccl(&nccl);
    dcp_nccl_close(&nccl);
    dcp_nccl_close(NULL);
}

static void test_too_old(void **state)
{
    (void)state;
    fake_env_set("FAKE_NCCL_VERSION", "21703");
    struct dcp_nccl *nccl = NULL;
    assert_int_equal(dcp_nccl_open(NULL, &nccl), DCP_ENCCL);
    assert_null(nccl);
    assert_contains(dcp_last_error(), "NCCL 2.17.3 (");
    assert_contains(dcp_last_error(), "older than 2.18.0");
    fake_env_set("FAKE_NCCL_VERSION", "2804"); /* the encoding before 2.9 */
    assert_int_equal(dcp_nccl_open(NULL, &nccl), DCP_ENCCL);
    assert_contains(dcp_last_error(), "NCCL 2.8.4 (");
}

static void test_not_loadable(void **state)
{
    (void)state;
    struct dcp_nccl *nccl = NULL;
    struct dcp_nccl_open_params p = {.library = "/nonexistent/libnccl.so.2"};
    assert_int_equal(dcp_nccl_open(&p, &nccl), DCP_ENCCL);
    assert_contains(dcp_last_error(), "cannot load NCCL /nonexistent/libnccl.so.2");
    assert_contains(dcp_last_error(), "DCP_NCCL_LIBRARY");
    p.library = fake_cuda_path(); /* loads, but is no NCCL */
    assert_int_equal(dcp_nccl_open(&p, &nccl), DCP_ENCCL);
    assert_contains(dcp_last_error(), "lacks ncclGetVersion");
}

static void test_names_and_check(void **state)
{
    (void)state;
    char buf[24];
    assert_string_equal(dcp_nccl_version_string(22809, buf, sizeof(buf)), "2.28.9");
    assert_string_equal(dcp_nccl_version_string(21800, buf, sizeof(buf)), "2.18.0");
    assert_string_equal(dcp_nccl_result_name(ncclSystemError), "ncclSystemError");
    assert_string_equal(dcp_nccl_result_name(ncclInProgress), "ncclInProgress");
    assert_string_equal(dcp_nccl_result_name(99), "ncclUnknownResult");
    assert_int_equal(dcp_nccl_check(NULL, ncclSuccess, "x", NULL), DCP_OK);
    assert_int_equal(dcp_nccl_check(NULL, ncclInProgress, "x", NULL), DCP_OK);
    assert_int_equal(dcp_nccl_check(NULL, ncclRemoteError, "ncclAllGather", NULL), DCP_ENCCL);
    assert_string_equal(dcp_last_error(), "ncclAllGather: ncclRemoteError (6)");

    struct dcp_nccl *nccl = fake_nccl_open();
    /* NCCL's own last-error text is appended. */
    int r = nccl->api.ncclSend(NULL, 1, ncclFloat32, 0, NULL, NULL);
    assert_int_equal(dcp_nccl_check(nccl, r, "ncclSend", NULL), DCP_ENCCL);
    assert_string_equal(dcp_last_error(), "ncclSend: ncclInvalidArgument (4): NULL communicator");
    close_nccl(&nccl);
}

static void test_config(void **state)
{
    (void)state;
    ncclConfig_t c;
    memset(&c, 0x55, sizeof(c));
    dcp_nccl_config_nonblocking(&c);
    assert_int_equal(c.size, sizeof(ncclConfig_t));
    assert_int_equal(c.magic, 0xcafebeefu);
    assert_int_equal(c.version, 21800);
    assert_int_equal(c.blocking, 0);
    assert_int_equal(c.cgaClusterSize, DCP_NCCL_CONFIG_UNDEF_INT);
    assert_int_equal(c.maxCTAs, DCP_NCCL_CONFIG_UNDEF_INT);
    assert_null(c.netName);
    assert_int_equal(c.splitShare, DCP_NCCL_CONFIG_UNDEF_INT);
    /* NCCL 2.18's layout: the prefix of every later ncclConfig_t. */
    assert_int_equal(offsetof(ncclConfig_t, blocking), 16);
    assert_int_equal(offsetof(ncclConfig_t, netName), 32);
    assert_int_equal(sizeof(ncclConfig_t), 48);
}

/* ------------------------------------------------------------------------- */
/* A world of ranks: one fake device per rank, one thread per rank. */

struct world;

struct rank {
    struct world *w;
    int rank;
    ncclComm_t comm;
    CUstream stream;
    CUevent done;
    int status;
    char error[512];
};

typedef int (*rank_work)(struct rank *r);

struct world {
    int n;
    struct dcp_cuda *cu;
    struct dcp_nccl *nccl;
    ncclUniqueId id;
    struct rank ranks[MAX_RANKS];
    pthread_barrier_t enqueued; /* lets a test order enqueues before waits */
};

static void world_open(struct world *w, int n)
{
    char devices[8];
    snprintf(devices, sizeof(devices), "%d", n);
    fake_env_set("FAKE_CUDA_DEVICES", devices);
    memset(w, 0, sizeof(*w));
    w->n = n;
    w->cu = fake_open();
    w->nccl = fake_nccl_open();
    assert_int_equal(w->nccl->api.ncclGetUniqueId(&w->id), ncclSuccess);
    for (int r = 0; r < n; r++)
        w->ranks[r] = (struct rank){.w = w, .rank = r};
    assert_int_equal(pthread_barrier_init(&w->enqueued, NULL, (unsigned)n), 0);
}

/* Non-blocking initialisation, all from this thread: every rank but the last is
 * "in progress" until the last one joins. */
static void world_init(struct world *w)
{
    const struct dcp_nccl_api *api = &w->nccl->api;
    ncclConfig_t config;
    dcp_nccl_config_nonblocking(&config);
    for (int r = 0; r < w->n; r++) {
        int result = api->ncclCommInitRankConfig(&w->ranks[r].comm, w->n, w->id, r, &config);
        assert_int_equal(result, r < w->n - 1 ? ncclInProgress : ncclSuccess);
        ncclResult_t async;
        assert_int_equal(api->ncclCommGetAsyncError(w->ranks[0].comm, &async), ncclSuccess);
        assert_int_equal(async, r < w->n - 1 ? ncclInProgress : ncclSuccess);
    }
    for (int r = 0; r < w->n; r++) {
        assert_int_equal(dcp_nccl_wait(w->nccl, &w->ranks[r].comm, NULL, NULL, WAIT_S, "init"), DCP_OK);
        int count = 0, rank = -1;
        assert_int_equal(api->ncclCommCount(w->ranks[r].comm, &count), ncclSuccess);
        assert_int_equal(api->ncclCommUserRank(w->ranks[r].comm, &rank), ncclSuccess);
        assert_int_equal(count, w->n);
        assert_int_equal(rank, r);
    }
}

static void world_close(struct world *w)
{
    for (int r = 0; r < w->n; r++) {
        if (!w->ranks[r].comm)
            continue;
        assert_int_equal(w->nccl->api.ncclCommFinalize(w->ranks[r].comm), ncclSuccess);
        assert_int_equal(dcp_nccl_wait(w->nccl, &w->ranks[r].comm, NULL, NULL, WAIT_S, "finalize"),
                         DCP_OK);
        assert_int_equal(w->nccl->api.ncclCommDestroy(w->ranks[r].comm), ncclSuccess);
    }
    assert_int_equal(nccl_stats(w->nccl).live_comms, 0);
    pthread_barrier_destroy(&w->enqueued);
    close_nccl(&w->nccl);
    fake_close(&w->cu);
}

static int rank_fail(struct rank *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof(r->error), fmt, ap);
    va_end(ap);
    return -1000;
}

struct rank_job {
    struct rank *r;
    rank_work work;
};

/* One rank's thread: its device's context, a stream and an event, the work. */
static void *rank_main(void *arg)
{
    struct rank_job *job = arg;
    struct rank *r = job->r;
    const struct dcp_cuda_api *api = &r->w->cu->api;
    CUcontext ctx = NULL;
    if (api->cuDevicePrimaryCtxRetain(&ctx, r->rank) || api->cuCtxSetCurrent(ctx) ||
        api->cuStreamCreate(&r->stream, CU_STREAM_NON_BLOCKING) ||
        api->cuEventCreate(&r->done, CU_EVENT_DISABLE_TIMING)) {
        r->status = rank_fail(r, "rank %d: CUDA setup failed", r->rank);
        return NULL;
    }
    r->status = job->work(r);
    if (r->status && !r->error[0])
        snprintf(r->error, sizeof(r->error), "%s", dcp_last_error());
    api->cuEventDestroy(r->done);
    api->cuStreamDestroy(r->stream);
    api->cuCtxSetCurrent(NULL);
    api->cuDevicePrimaryCtxRelease(r->rank);
    return NULL;
}

static void world_run(struct world *w, rank_work work, int first_rank)
{
    pthread_t threads[MAX_RANKS];
    struct rank_job jobs[MAX_RANKS];
    for (int r = first_rank; r < w->n; r++) {
        jobs[r] = (struct rank_job){&w->ranks[r], work};
        w->ranks[r].error[0] = '\0';
        assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = first_rank; r < w->n; r++)
        pthread_join(threads[r], NULL);
}

static void assert_all_ok(const struct world *w)
{
    for (int r = 0; r < w->n; r++)
        if (w->ranks[r].status != DCP_OK)
            fail_msg("rank %d: %d: %s", r, w->ranks[r].status, w->ranks[r].error);
}

/* Enqueue, record the event, wait for both like the runtime does. */
static int finish(struct rank *r, int result, const char *call)
{
    const struct dcp_nccl *nccl = r->w->nccl;
    int status = dcp_nccl_check(nccl, result, call, r->comm);
    if (!status)
        status = dcp_cuda_check(r->w->cu->api.cuEventRecord(r->done, r->stream), "cuEventRecord");
    if (!status)
        status = dcp_nccl_wait(nccl, &r->comm, r->w->cu, r->done, WAIT_S, call);
    return status;
}

/* Uploads go on the rank's stream, which the collective follows: a cuMemcpyHtoD
 * would land on the legacy stream, which a non-blocking stream does not wait for. */
static int upload(struct rank *r, CUdeviceptr d, const void *src, size_t bytes)
{
    return dcp_cuda_check(r->w->cu->api.cuMemcpyHtoDAsync(d, src, bytes, r->stream),
                          "cuMemcpyHtoDAsync");
}

static int device_floats(struct rank *r, CUdeviceptr *d, size_t n, float (*value)(int rank, size_t i))
{
    const struct dcp_cuda_api *api = &r->w->cu->api;
    int status = dcp_cuda_check(api->cuMemAlloc(d, n * sizeof(float)), "cuMemAlloc");
    for (size_t i = 0; !status && value && i < n; i++) {
        float v = value(r->rank, i);
        status = upload(r, *d + i * sizeof(float), &v, sizeof(v));
    }
    return status;
}

static float read_float(struct rank *r, CUdeviceptr d, size_t i)
{
    float v = -1;
    r->w->cu->api.cuMemcpyDtoH(&v, d + i * sizeof(float), sizeof(v));
    return v;
}

/* ------------------------------------------------------------------------- */
/* Collectives. */

#define COUNT 5

static float gather_value(int rank, size_t i) { return (float)(rank * 10) + (float)i; }

static int do_allgather(struct rank *r)
{
    CUdeviceptr send, recv;
    int n = r->w->n;
    int status = device_floats(r, &send, COUNT, gather_value);
    if (!status)
        status = device_floats(r, &recv, COUNT * (size_t)n, NULL);
    if (!status)
        status = finish(r, r->w->nccl->api.ncclAllGather((void *)send, (void *)recv, COUNT,
                                                          ncclFloat32, r->comm, r->stream),
                        "ncclAllGather");
    for (int q = 0; !status && q < n; q++)
        for (size_t i = 0; i < COUNT; i++)
            if (read_float(r, recv, (size_t)q * COUNT + i) != gather_value(q, i))
                status = rank_fail(r, "rank %d: gathered[%d][%zu] wrong", r->rank, q, i);
    r->w->cu->api.cuMemFree(send);
    r->w->cu->api.cuMemFree(recv);
    return status;
}

static float scatter_value(int rank, size_t i) { return 0.1f * (float)(rank + 1) * (float)(i + 1); }

static int do_reduce_scatter(struct rank *r)
{
    CUdeviceptr send, recv;
    int n = r->w->n;
    int status = device_floats(r, &send, COUNT * (size_t)n, scatter_value);
    if (!status)
        status = device_floats(r, &recv, COUNT, NULL);
    if (!status)
        status = finish(r, r->w->nccl->api.ncclReduceScatter((void *)send, (void *)recv, COUNT,
                                                              ncclFloat32, ncclSum, r->comm,
                                                              r->stream),
                        "ncclReduceScatter");
    for (size_t i = 0; !status && i < COUNT; i++) {
        size_t at = (size_t)r->rank * COUNT + i;
        float expect = scatter_value(0, at); /* summed in rank order, rounded each step */
        for (int q = 1; q < n; q++)
            expect = expect + scatter_value(q, at);
        if (read_float(r, recv, i) != expect)
            status = rank_fail(r, "rank %d: reduced[%zu] = %g, want %g", r->rank, i,
                               (double)read_float(r, recv, i), (double)expect);
    }
    r->w->cu->api.cuMemFree(send);
    r->w->cu->api.cuMemFree(recv);
    return status;
}

/* 16-bit sums round after every step, like NCCL's ring: 256 + 1 + 1 + 1 in bf16
 * stays 256 (each 257 ties to even), where rounding the fp32 sum once would give
 * 260; likewise 2048 + 1 + 1 + 1 in fp16. */
static int allreduce_16bit(struct rank *r, ncclDataType_t type, uint16_t first, uint16_t one,
                           uint16_t expect)
{
    const struct dcp_cuda_api *api = &r->w->cu->api;
    uint16_t value = r->rank == 0 ? first : one, out = 0;
    CUdeviceptr d;
    int status = dcp_cuda_check(api->cuMemAlloc(&d, sizeof(value)), "cuMemAlloc");
    if (!status)
        status = upload(r, d, &value, sizeof(value));
    if (!status) /* in place */
        status = finish(r, r->w->nccl->api.ncclAllReduce((void *)d, (void *)d, 1, type, ncclSum,
                                                          r->comm, r->stream),
                        "ncclAllReduce");
    if (!status && (api->cuMemcpyDtoH(&out, d, sizeof(out)) || out != expect))
        status = rank_fail(r, "rank %d: 16-bit sum 0x%04x, want 0x%04x", r->rank, out, expect);
    api->cuMemFree(d);
    return status;
}

static int do_allreduce_16bit(struct rank *r)
{
    int status = allreduce_16bit(r, ncclBfloat16, 0x4380 /* 256 */, 0x3f80 /* 1 */, 0x4380);
    if (!status)
        status = allreduce_16bit(r, ncclFloat16, 0x6800 /* 2048 */, 0x3c00 /* 1 */, 0x6800);
    return status;
}

/* All-to-all: rank q sends COUNT floats 1000 * q + p to each p. */
static int do_all_to_all(struct rank *r)
{
    const struct dcp_nccl_api *nccl = &r->w->nccl->api;
    int n = r->w->n;
    CUdeviceptr send, recv;
    int status = device_floats(r, &send, COUNT * (size_t)n, NULL);
    if (!status)
        status = device_floats(r, &recv, COUNT * (size_t)n, NULL);
    for (int p = 0; !status && p < n; p++)
        for (size_t i = 0; !status && i < COUNT; i++) {
            float v = (float)(1000 * r->rank + p);
            status = upload(r, send + ((size_t)p * COUNT + i) * sizeof(float), &v, sizeof(v));
        }
    if (!status) {
        int result = nccl->ncclGroupStart();
        for (int p = 0; p < n && result == ncclSuccess; p++) {
            result = nccl->ncclSend((void *)(send + (size_t)p * COUNT * sizeof(float)), COUNT,
                                    ncclFloat32, p, r->comm, r->stream);
            if (result == ncclSuccess)
                result = nccl->ncclRecv((void *)(recv + (size_t)p * COUNT * sizeof(float)), COUNT,
                                        ncclFloat32, p, r->comm, r->stream);
        }
        int end = nccl->ncclGroupEnd();
        status = finish(r, result != ncclSuccess ? result : end, "all-to-all");
    }
    for (int p = 0; !status && p < n; p++)
        for (size_t i = 0; i < COUNT; i++)
            if (read_float(r, recv, (size_t)p * COUNT + i) != (float)(1000 * p + r->rank))
                status = rank_fail(r, "rank %d: from %d wrong", r->rank, p);
    r->w->cu->api.cuMemFree(send);
    r->w->cu->api.cuMemFree(recv);
    return status;
}

static void test_collectives(void **state)
{
    (void)state;
    struct world w;
    world_open(&w, 4);
    world_init(&w);
    world_run(&w, do_allgather, 0);
    assert_all_ok(&w);
    world_run(&w, do_reduce_scatter, 0);
    assert_all_ok(&w);
    world_run(&w, do_allreduce_16bit, 0);
    assert_all_ok(&w);
    world_run(&w, do_all_to_all, 0);
    assert_all_ok(&w);
    assert_int_equal(nccl_stats(w.nccl).operations, 20);
    assert_int_equal(fake_stats(w.cu).live_device_bytes, 0);
    world_close(&w);
}

/*
 * A collective is ordered on its stream, like any work: it sees what that stream
 * waited for, and its result is there for work that waits for it. Each rank
 * writes its send buffer on a second stream (side) and gathers on its own
 * stream; side then copies the result out. Without events the gather takes the
 * old contents (0) and the copy sees the old result (-1); with them both see
 * 1 + rank. seen: [n] gathered, then [n] copied.
 */
static int gather_across_streams(struct rank *r, bool ordered, float *seen)
{
    const struct dcp_cuda_api *api = &r->w->cu->api;
    const int n = r->w->n;
    CUstream side = NULL;
    CUevent ev = NULL;
    CUdeviceptr send = 0, recv = 0, copy = 0;
    const float one_plus_rank = 1.0f + (float)r->rank, old = -1.0f;
    unsigned int bits;
    memcpy(&bits, &one_plus_rank, sizeof(bits));
    unsigned int old_bits;
    memcpy(&old_bits, &old, sizeof(old_bits));
    int status = dcp_cuda_check(api->cuStreamCreate(&side, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    if (!status)
        status = dcp_cuda_check(api->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    if (!status)
        status = dcp_cuda_check(api->cuMemAlloc(&send, sizeof(float)), "cuMemAlloc");
    if (!status)
        status = dcp_cuda_check(api->cuMemAlloc(&recv, (size_t)n * sizeof(float)), "cuMemAlloc");
    if (!status)
        status = dcp_cuda_check(api->cuMemAlloc(&copy, (size_t)n * sizeof(float)), "cuMemAlloc");
    if (!status) /* the old contents, settled */
        status = dcp_cuda_check(api->cuMemsetD32Async(send, 0, 1, r->stream) ||
                                    api->cuMemsetD32Async(recv, old_bits, (size_t)n, r->stream) ||
                                    api->cuStreamSynchronize(r->stream),
                                "setup");
    if (!status) /* the producer, on the other stream */
        status = dcp_cuda_check(api->cuMemsetD32Async(send, bits, 1, side), "cuMemsetD32Async");
    if (!status && ordered)
        status = dcp_cuda_check(api->cuEventRecord(ev, side) || api->cuStreamWaitEvent(r->stream, ev, 0),
                                "producer event");
    if (!status)
        status = dcp_nccl_check(r->w->nccl, r->w->nccl->api.ncclAllGather((void *)send, (void *)recv, 1, ncclFloat32,
                                                                          r->comm, r->stream),
                                "ncclAllGather", r->comm);
    /* The consumer, on the other stream. */
    if (!status && ordered)
        status = dcp_cuda_check(api->cuEventRecord(ev, r->stream) || api->cuStreamWaitEvent(side, ev, 0),
                                "consumer event");
    if (!status)
        status = dcp_cuda_check(api->cuMemcpyDtoDAsync(copy, recv, (size_t)n * sizeof(float), side) ||
                                    api->cuStreamSynchronize(side) || api->cuStreamSynchronize(r->stream),
                                "copy out");
    if (!status)
        status = dcp_cuda_check(api->cuMemcpyDtoH(seen, recv, (size_t)n * sizeof(float)) ||
                                    api->cuMemcpyDtoH(seen + n, copy, (size_t)n * sizeof(float)),
                                "read back");
    api->cuMemFree(send);
    api->cuMemFree(recv);
    api->cuMemFree(copy);
    if (ev)
        api->cuEventDestroy(ev);
    if (side)
        api->cuStreamDestroy(side);
    return status;
}

static bool ordered_gather;
static float gathered[MAX_RANKS][2 * MAX_RANKS];

static int do_gather_across_streams(struct rank *r)
{
    return gather_across_streams(r, ordered_gather, gathered[r->rank]);
}

static void test_collective_in_stream_order(void **state)
{
    (void)state;
    struct world w;
    world_open(&w, 3);
    world_init(&w);
    for (int ordered = 0; ordered < 2; ordered++) {
        ordered_gather = ordered;
        world_run(&w, do_gather_across_streams, 0);
        assert_all_ok(&w);
        for (int r = 0; r < w.n; r++)
            for (int q = 0; q < w.n; q++) {
                assert_true(gathered[r][q] == (ordered ? 1.0f + (float)q : 0.0f));
                if (gathered[r][w.n + q] != (ordered ? 1.0f + (float)q : -1.0f))
                    fail_msg("ordered %d rank %d: copied[%d] = %g", ordered, r, q, (double)gathered[r][w.n + q]);
            }
    }
    world_close(&w);
}

/* The default (NULL) config is blocking: init returns once all ranks joined. */
static int do_blocking_init(struct rank *r)
{
    return dcp_nccl_check(r->w->nccl, r->w->nccl->api.ncclCommInitRankConfig(
                                          &r->comm, r->w->n, r->w->id, r->rank, NULL),
                          "ncclCommInitRankConfig", NULL);
}

static void test_blocking_init(void **state)
{
    (void)state;
    struct world w;
    world_open(&w, 3);
    world_run(&w, do_blocking_init, 0);
    assert_all_ok(&w);
    world_run(&w, do_allgather, 0);
    assert_all_ok(&w);
    world_close(&w);
}

/* ------------------------------------------------------------------------- */
/* Failures. */

static int do_two_allreduces(struct rank *r)
{
    const struct dcp_cuda_api *api = &r->w->cu->api;
    CUdeviceptr d;
    int status = dcp_cuda_check(api->cuMemAlloc(&d, 64), "cuMemAlloc");
    for (int k = 0; k < 2 && !status; k++)
        status = finish(r, r->w->nccl->api.ncclAllReduce((void *)d, (void *)d, 16, ncclFloat32,
                                                          ncclMax, r->comm, r->stream),
                        k == 0 ? "AllReduce 1" : "AllReduce 2");
    api->cuMemFree(d);
    return status;
}

static void test_async_error(void **state)
{
    (void)state;
    fake_env_set("FAKE_NCCL_ASYNC_ERROR", "2");
    struct world w;
    world_open(&w, 4);
    world_init(&w);
    world_run(&w, do_two_allreduces, 0);
    for (int r = 0; r < w.n; r++) {
        assert_int_equal(w.ranks[r].status, DCP_ENCCL);
        assert_null(w.ranks[r].comm); /* aborted by dcp_nccl_wait */
        assert_contains(w.ranks[r].error, "AllReduce 2: NCCL reported ncclSystemError (2): "
                                          "fake NCCL: injected asynchronous error after operation 2");
        assert_contains(w.ranks[r].error, "; NCCL communicator aborted");
    }
    assert_int_equal(nccl_stats(w.nccl).aborts, 4);
    world_close(&w);
}

/* The collective is accepted but never finishes: only a timeout can tell. */
static int do_hung_allgather(struct rank *r)
{
    const struct dcp_cuda_api *api = &r->w->cu->api;
    CUdeviceptr d;
    int status = dcp_cuda_check(api->cuMemAlloc(&d, 64 * (size_t)r->w->n), "cuMemAlloc");
    if (!status) {
        int result = r->w->nccl->api.ncclAllGather((void *)d, (void *)d, 16, ncclFloat32,
                                                   r->comm, r->stream);
        status = dcp_nccl_check(r->w->nccl, result, "ncclAllGather", r->comm);
    }
    if (!status)
        status = dcp_cuda_check(api->cuEventRecord(r->done, r->stream), "cuEventRecord");
    /* Every rank enqueues before any times out and aborts (a later enqueue
     * would see the abort instead of hanging). */
    pthread_barrier_wait(&r->w->enqueued);
    if (!status)
        status = dcp_nccl_wait(r->w->nccl, &r->comm, r->w->cu, r->done, 0.2, "AllGather of layer 3");
    /* The abort ended the stall: the stream is usable again. */
    if (status == DCP_ETIMEOUT && api->cuEventQuery(r->done) != CUDA_SUCCESS)
        status = rank_fail(r, "rank %d: event still pending after abort", r->rank);
    else if (status == DCP_ETIMEOUT)
        snprintf(r->error, sizeof(r->error), "%s", dcp_last_error());
    api->cuMemFree(d);
    return status;
}

static void test_hang_detected(void **state)
{
    (void)state;
    fake_env_set("FAKE_NCCL_HANG", "1");
    struct world w;
    world_open(&w, 4);
    world_init(&w);
    world_run(&w, do_hung_allgather, 0);
    for (int r = 0; r < w.n; r++) {
        if (w.ranks[r].status != DCP_ETIMEOUT)
            fail_msg("rank %d: %d: %s", r, w.ranks[r].status, w.ranks[r].error);
        assert_null(w.ranks[r].comm);
        assert_contains(w.ranks[r].error, "AllGather of layer 3 did not complete within 0.2 s "
                                          "(stream work not finished");
        assert_contains(w.ranks[r].error, "NCCL communicator aborted");
    }
    struct fake_nccl_stats s = nccl_stats(w.nccl);
    assert_int_equal(s.stalled, 4);
    assert_int_equal(s.aborts, 4);
    world_close(&w);
}

static int do_allgather_expecting_abort(struct rank *r)
{
    CUdeviceptr d;
    const struct dcp_cuda_api *api = &r->w->cu->api;
    int status = dcp_cuda_check(api->cuMemAlloc(&d, 64 * (size_t)r->w->n), "cuMemAlloc");
    if (!status) {
        int result = r->w->nccl->api.ncclAllGather((void *)d, (void *)d, 16, ncclFloat32,
                                                   r->comm, r->stream);
        status = dcp_nccl_check(r->w->nccl, result, "ncclAllGather", r->comm);
    }
    if (status == DCP_ENCCL) { /* what the runtime does: give the communicator up */
        r->w->nccl->api.ncclCommAbort(r->comm);
        r->comm = NULL;
    }
    api->cuMemFree(d);
    return status;
}

static void *run_ranks_1_to_n(void *arg)
{
    struct world *w = arg;
    world_run(w, do_allgather_expecting_abort, 1);
    return NULL;
}

/* Ranks 1..3 wait in a collective for rank 0, which aborts instead. */
static void test_peer_abort_unblocks(void **state)
{
    (void)state;
    struct world w;
    world_open(&w, 4);
    world_init(&w);
    pthread_t runner;
    assert_int_equal(pthread_create(&runner, NULL, run_ranks_1_to_n, &w), 0);
    while (nccl_stats(w.nccl).waiting < 3)
        sched_yield();
    assert_int_equal(w.nccl->api.ncclCommAbort(w.ranks[0].comm), ncclSuccess);
    w.ranks[0].comm = NULL;
    pthread_join(runner, NULL);
    for (int r = 1; r < w.n; r++) {
        assert_int_equal(w.ranks[r].status, DCP_ENCCL);
        assert_contains(w.ranks[r].error, "ncclAllGather: ncclRemoteError (6): fake NCCL: a peer aborted");
        assert_null(w.ranks[r].comm);
    }
    world_close(&w);
}

/* Two of four ranks never come: initialisation times out and is aborted. */
static void test_init_timeout(void **state)
{
    (void)state;
    struct world w;
    world_open(&w, 4);
    ncclConfig_t config;
    dcp_nccl_config_nonblocking(&config);
    for (int r = 0; r < 2; r++)
        assert_int_equal(w.nccl->api.ncclCommInitRankConfig(&w.ranks[r].comm, 4, w.id, r, &config),
                         ncclInProgress);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(dcp_nccl_wait(w.nccl, &w.ranks[r].comm, NULL, NULL, 0.05, "NCCL init"),
                         DCP_ETIMEOUT);
        assert_null(w.ranks[r].comm);
        assert_contains(dcp_last_error(), "NCCL init did not complete within 0.05 s (NCCL still "
                                          "in progress); NCCL communicator aborted");
    }
    assert_int_equal(dcp_nccl_wait(w.nccl, &w.ranks[0].comm, NULL, NULL, 1, "x"), DCP_EINVAL);
    world_close(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_open, fake_test_setup),
        cmocka_unit_test_setup(test_too_old, fake_test_setup),
        cmocka_unit_test_setup(test_not_loadable, fake_test_setup),
        cmocka_unit_test_setup(test_names_and_check, fake_test_setup),
        cmocka_unit_test_setup(test_config, fake_test_setup),
        cmocka_unit_test_setup(test_collectives, fake_test_setup),
        cmocka_unit_test_setup(test_collective_in_stream_order, fake_test_setup),
        cmocka_unit_test_setup(test_blocking_init, fake_test_setup),
        cmocka_unit_test_setup(test_async_error, fake_test_setup),
        cmocka_unit_test_setup(test_hang_detected, fake_test_setup),
        cmocka_unit_test_setup(test_peer_abort_unblocks, fake_test_setup),
        cmocka_unit_test_setup(test_init_timeout, fake_test_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
