/*
 * The fake libnccl across processes: one unique id, one rank per forked process,
 * host buffers (no fake driver loaded: results land at once). Staging areas of a
 * few KiB force every collective and send through many rounds; the results must
 * be exact (reductions in rank order, bit for bit), sends of uneven sizes larger
 * than the staging must not deadlock, an abort in one process must end the
 * others' waits (timeouts far away), a rank that never comes must fail the
 * others' init within the timeout, and no segment may be left in /dev/shm.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_test_util.h"
#include "nccl_api.h"

#define NPROC 3
#define CHILD_TIMEOUT_S 120

/* The segment an id names ("fake-nccl shm /NAME"). */
static const char *segment_name(const ncclUniqueId *id)
{
    const char *slash = strchr(id->internal, '/');
    assert_non_null(slash);
    return slash;
}

static int segment_exists(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

typedef int (*child_fn)(const struct dcp_nccl_api *api, ncclComm_t *comm, int rank, int n);

/* Forks n ranks that join id and run fn; waits (killing them after the timeout);
 * status[r] is the exit status (-1: killed). A rank with join = 0 never joins. */
static void run_ranks(struct dcp_nccl *nccl, const ncclUniqueId *id, int n, const int *join, child_fn fn,
                      int *status)
{
    pid_t pids[NPROC];
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            if (join && !join[r])
                _exit(0);
            ncclComm_t comm = NULL;
            int res = nccl->api.ncclCommInitRankConfig(&comm, n, *id, r, NULL);
            if (res != ncclSuccess) {
                fprintf(stderr, "rank %d: init: %s: %s\n", r, nccl->api.ncclGetErrorString(res),
                        nccl->api.ncclGetLastError(comm));
                _exit(10);
            }
            int rc = fn(&nccl->api, &comm, r, n);
            if (comm)
                nccl->api.ncclCommDestroy(comm);
            _exit(rc);
        }
    }
    const time_t t0 = time(NULL);
    for (int left = n; left;) {
        for (int r = 0; r < n; r++) {
            int st;
            if (pids[r] && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
                status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                pids[r] = 0;
                left--;
            }
        }
        if (left && time(NULL) - t0 > CHILD_TIMEOUT_S) {
            for (int r = 0; r < n; r++)
                if (pids[r])
                    kill(pids[r], SIGKILL);
        }
        if (left)
            nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
}

/* ------------------------------------------------------------------------- */
/* Collectives and sends in rounds. */

/* What rank r contributes at element i: a large term on rank 0 and small ones
 * elsewhere, each below half an ulp of the large one but not their sum, so a sum in
 * any order other than the ranks' shows in its bits. */
static float value(int r, size_t i)
{
    return r == 0 ? 1e8f + 8.0f * (float)(i % 13) : 2.0f + 0.5f * (float)((i + (size_t)r) % 4);
}

static int check(int ok, int rank, const char *what, size_t i)
{
    if (!ok)
        fprintf(stderr, "rank %d: %s wrong at %zu\n", rank, what, i);
    return ok;
}

static int do_all(const struct dcp_nccl_api *api, ncclComm_t *commp, int rank, int n)
{
    ncclComm_t comm = *commp;
    enum { GATHER = 1000, SCATTER = 700 };
    float *send = malloc(SCATTER * (size_t)n * sizeof(float)), *recv = malloc(GATHER * (size_t)n * sizeof(float));
    if (!send || !recv)
        return 20;
    int ok = 1;
    /* AllGather: 4000 bytes per rank through ~1.3 KiB of staging. */
    for (size_t i = 0; i < GATHER; i++)
        send[i] = value(rank, i);
    ok &= api->ncclAllGather(send, recv, GATHER, ncclFloat32, comm, NULL) == ncclSuccess;
    for (int r = 0; ok && r < n; r++)
        for (size_t i = 0; ok && i < GATHER; i++)
            ok = check(recv[(size_t)r * GATHER + i] == value(r, i), rank, "all-gather", i);
    /* ReduceScatter, fp32 sum in rank order, in place. */
    for (size_t i = 0; i < SCATTER * (size_t)n; i++)
        send[i] = value(rank, i);
    ok &= api->ncclReduceScatter(send, send, SCATTER, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess;
    for (size_t i = 0; ok && i < SCATTER; i++) {
        const size_t at = (size_t)rank * SCATTER + i;
        float sum = value(0, at);
        for (int r = 1; r < n; r++)
            sum += value(r, at);
        ok = check(memcmp(&sum, &send[i], sizeof(sum)) == 0, rank, "reduce-scatter", i);
    }
    /* All-to-all of uneven sizes, each bigger than the whole staging area of a rank. */
    unsigned char *out[NPROC] = {0}, *in[NPROC] = {0};
    size_t bytes[NPROC][NPROC]; /* [src][dst] */
    for (int s = 0; s < n; s++)
        for (int d = 0; d < n; d++)
            bytes[s][d] = (size_t)(s + 1) * 1500 + (size_t)d * 700 + (s == d ? 0 : 3);
    for (int p = 0; p < n; p++) {
        out[p] = malloc(bytes[rank][p]);
        in[p] = malloc(bytes[p][rank]);
        if (!out[p] || !in[p])
            return 20;
        for (size_t i = 0; i < bytes[rank][p]; i++)
            out[p][i] = (unsigned char)(rank * 31 + p * 7 + i);
    }
    ok &= api->ncclGroupStart() == ncclSuccess;
    for (int p = 0; p < n; p++) {
        ok &= api->ncclSend(out[p], bytes[rank][p], ncclUint8, p, comm, NULL) == ncclSuccess;
        ok &= api->ncclRecv(in[p], bytes[p][rank], ncclUint8, p, comm, NULL) == ncclSuccess;
    }
    ok &= api->ncclGroupEnd() == ncclSuccess;
    for (int p = 0; ok && p < n; p++)
        for (size_t i = 0; ok && i < bytes[p][rank]; i++)
            ok = check(in[p][i] == (unsigned char)(p * 31 + rank * 7 + i), rank, "all-to-all", i);
    for (int p = 0; p < n; p++) {
        free(out[p]);
        free(in[p]);
    }
    free(send);
    free(recv);
    return ok ? 0 : 1;
}

static void test_collectives_across_processes(void **state)
{
    (void)state;
    fake_env_set("FAKE_NCCL_SHM_BYTES", "4096"); /* 1344 bytes per rank */
    struct dcp_nccl *nccl = fake_nccl_open();
    ncclUniqueId id;
    assert_int_equal(nccl->api.ncclGetUniqueId(&id), ncclSuccess);
    const char *name = segment_name(&id);
    assert_true(segment_exists(name));
    int status[NPROC];
    run_ranks(nccl, &id, NPROC, NULL, do_all, status);
    for (int r = 0; r < NPROC; r++)
        if (status[r] != 0)
            fail_msg("rank %d exited with %d", r, status[r]);
    /* Unlinked once everybody joined. */
    assert_false(segment_exists(name));
    dcp_nccl_close(&nccl);
}

/* ------------------------------------------------------------------------- */
/* Failures. */

/* Rank 0 aborts instead of gathering; the others must get ncclRemoteError. */
static int do_gather_or_abort(const struct dcp_nccl_api *api, ncclComm_t *comm, int rank, int n)
{
    (void)n;
    if (rank == 0) {
        usleep(100000); /* let the others wait first (either order must work) */
        const int res = api->ncclCommAbort(*comm);
        *comm = NULL;
        return res == ncclSuccess ? 0 : 1;
    }
    float x[NPROC] = {0};
    const int res = api->ncclAllGather(x, x, 1, ncclFloat32, *comm, NULL);
    if (res != ncclRemoteError)
        fprintf(stderr, "rank %d: all-gather said %d\n", rank, res);
    return res == ncclRemoteError ? 0 : 1;
}

static void test_abort_in_another_process(void **state)
{
    (void)state;
    fake_env_set("FAKE_NCCL_TIMEOUT", "1000"); /* only the abort can end the wait */
    struct dcp_nccl *nccl = fake_nccl_open();
    ncclUniqueId id;
    assert_int_equal(nccl->api.ncclGetUniqueId(&id), ncclSuccess);
    int status[NPROC];
    run_ranks(nccl, &id, NPROC, NULL, do_gather_or_abort, status);
    for (int r = 0; r < NPROC; r++)
        if (status[r] != 0)
            fail_msg("rank %d exited with %d", r, status[r]);
    dcp_nccl_close(&nccl);
}

static int do_nothing(const struct dcp_nccl_api *api, ncclComm_t *comm, int rank, int n)
{
    (void)api, (void)comm, (void)rank, (void)n;
    return 0;
}

/* Rank 2 never comes: the others' blocking init fails at the timeout; the
 * creator unlinks the segment when it unloads the double. */
static void test_rank_that_never_comes(void **state)
{
    (void)state;
    fake_env_set("FAKE_NCCL_TIMEOUT", "0.3");
    struct dcp_nccl *nccl = fake_nccl_open();
    ncclUniqueId id;
    assert_int_equal(nccl->api.ncclGetUniqueId(&id), ncclSuccess);
    char name[128];
    snprintf(name, sizeof(name), "%s", segment_name(&id));
    int status[NPROC];
    const int join[NPROC] = {1, 1, 0};
    run_ranks(nccl, &id, NPROC, join, do_nothing, status);
    assert_int_equal(status[0], 10);
    assert_int_equal(status[1], 10);
    assert_int_equal(status[2], 0);
    assert_true(segment_exists(name)); /* nobody unlinked it: not every rank came */
    dcp_nccl_close(&nccl);
    assert_false(segment_exists(name));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_collectives_across_processes, fake_test_setup),
        cmocka_unit_test_setup(test_abort_in_another_process, fake_test_setup),
        cmocka_unit_test_setup(test_rank_that_never_comes, fake_test_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
