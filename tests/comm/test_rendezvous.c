/* Rendezvous: spec parsing, file and TCP transports with forked ranks, timeouts,
 * stale files, foreign job tags and mismatched sizes. Children report through their
 * exit status (0 = as expected) and print what went wrong to stderr. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/rendezvous.h"
#include "test_util.h"
#include "util/util.h"

#define BLOB_BYTES 128 /* NCCL's unique id */
#define LONG_TIMEOUT_S 30.0 /* for waits that must succeed: never reached unless broken */
#define SHORT_TIMEOUT_S 0.3

static void fill_blob(uint8_t *blob, uint8_t seed)
{
    for (int i = 0; i < BLOB_BYTES; i++)
        blob[i] = (uint8_t)(i * 7 + seed);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* --- spec parsing -------------------------------------------------------------------- */

static void test_parse_specs(void **state)
{
    (void)state;
    struct dcp_rendezvous_spec s;
    assert_int_equal(dcp_rendezvous_parse_spec("file:/shared/job/nccl.id", &s), DCP_OK);
    assert_int_equal(s.kind, DCP_RENDEZVOUS_FILE);
    assert_string_equal(s.path, "/shared/job/nccl.id");
    assert_int_equal(dcp_rendezvous_parse_spec("tcp:node-17.cluster:29500", &s), DCP_OK);
    assert_int_equal(s.kind, DCP_RENDEZVOUS_TCP);
    assert_string_equal(s.host, "node-17.cluster");
    assert_int_equal(s.port, 29500);
    assert_int_equal(dcp_rendezvous_parse_spec("tcp:127.0.0.1:0", &s), DCP_OK);
    assert_string_equal(s.host, "127.0.0.1");
    assert_int_equal(s.port, 0);
    assert_int_equal(dcp_rendezvous_parse_spec("tcp:[::1]:65535", &s), DCP_OK);
    assert_string_equal(s.host, "::1");
    assert_int_equal(s.port, 65535);

    char long_host[400];
    memset(long_host, 'h', sizeof(long_host));
    memcpy(long_host, "tcp:", 4);
    snprintf(long_host + sizeof(long_host) - 8, 8, ":1234");
    static const struct {
        const char *spec, *mention;
    } bad[] = {
        {"", "empty"},
        {"nfs:/x", "unknown scheme"},
        {"/shared/id", "unknown scheme"},
        {"file:", "empty path"},
        {"tcp:", "missing ':PORT'"},
        {"tcp:host", "missing ':PORT'"},
        {"tcp::80", "empty host"},
        {"tcp:host:", "missing port"},
        {"tcp:host:65536", "0..65535"},
        {"tcp:host:12a", "0..65535"},
        {"tcp:host:-1", "0..65535"},
        {"tcp:::1:80", "needs brackets"},
        {"tcp:[::1]80", "missing ':PORT' after ']'"},
        {"tcp:[::1:80", "missing ']'"},
        {"tcp:[]:80", "empty host"},
    };
    for (size_t i = 0; i < DCP_ARRAY_SIZE(bad); i++) {
        assert_int_equal(dcp_rendezvous_parse_spec(bad[i].spec, &s), DCP_EINVAL);
        if (!strstr(dcp_last_error(), bad[i].mention))
            fail_msg("'%s': error \"%s\" lacks \"%s\"", bad[i].spec, dcp_last_error(), bad[i].mention);
    }
    assert_int_equal(dcp_rendezvous_parse_spec(NULL, &s), DCP_EINVAL);
    assert_int_equal(dcp_rendezvous_parse_spec(long_host, &s), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "longer than 255 bytes"));
}

static void test_params_checked(void **state)
{
    (void)state;
    struct dcp_rendezvous *r = NULL;
    struct dcp_rendezvous_params p = {.spec = "file:/tmp/x", .rank = 2, .world_size = 2, .timeout_s = 1};
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    assert_null(r);
    p.rank = 1;
    p.tag = "0123456789012345678901234567890123456789012345678901234567890123"; /* 64 bytes */
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    p.tag = "job";
    p.timeout_s = -1;
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    p.timeout_s = NAN;
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    p.timeout_s = 1;
    p.spec = "tcp:127.0.0.1:0"; /* a peer needs rank 0's real port */
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    p.spec = "carrier-pigeon:coop";
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    assert_null(r);

    /* A job of one has nothing to exchange and listens on nothing. */
    p = (struct dcp_rendezvous_params){.spec = "tcp:127.0.0.1:0", .world_size = 1, .timeout_s = 1};
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_OK);
    assert_int_equal(dcp_rendezvous_port(r), 0);
    uint8_t blob[BLOB_BYTES];
    fill_blob(blob, 1);
    assert_int_equal(dcp_rendezvous_exchange(r, blob, sizeof(blob)), DCP_OK);
    assert_int_equal(dcp_rendezvous_exchange(r, blob, DCP_RENDEZVOUS_MAX_BLOB + 1), DCP_EINVAL);
    dcp_rendezvous_close(&r);
    assert_null(r);
    dcp_rendezvous_close(&r);
}

/* --- forked peers -------------------------------------------------------------------- */

/* What a forked rank does and what it expects. */
struct peer_job {
    const char *spec;      /* NULL: "tcp:HOST:PORT" with PORT read from port_fd */
    const char *host;      /* for that spec; NULL = 127.0.0.1 */
    int port_fd;
    uint32_t rank, world_size;
    const char *tag;
    double timeout_s;
    int expect;            /* status */
    const char *mention;   /* text the error must contain, or NULL */
    uint8_t seed;          /* blob expected on success */
};

static int run_peer(const struct peer_job *job)
{
    char spec[64];
    if (!job->spec) {
        uint16_t port;
        if (read(job->port_fd, &port, sizeof(port)) != (ssize_t)sizeof(port))
            return 10;
        snprintf(spec, sizeof(spec), "tcp:%s:%u", job->host ? job->host : "127.0.0.1", port);
    }
    const struct dcp_rendezvous_params p = {
        .spec = job->spec ? job->spec : spec, .rank = job->rank, .world_size = job->world_size,
        .tag = job->tag, .timeout_s = job->timeout_s,
    };
    uint8_t blob[BLOB_BYTES] = {0}, want[BLOB_BYTES];
    int st = dcp_rendezvous_broadcast(&p, blob, sizeof(blob));
    if (st != job->expect) {
        fprintf(stderr, "rank %u: status %d, expected %d: %s\n", job->rank, st, job->expect, dcp_last_error());
        return 11;
    }
    if (job->mention && !strstr(dcp_last_error(), job->mention)) {
        fprintf(stderr, "rank %u: error \"%s\" lacks \"%s\"\n", job->rank, dcp_last_error(), job->mention);
        return 12;
    }
    fill_blob(want, job->seed);
    if (st == DCP_OK && memcmp(blob, want, sizeof(blob))) {
        fprintf(stderr, "rank %u: wrong blob\n", job->rank);
        return 13;
    }
    return 0;
}

static pid_t spawn_peer(const struct peer_job *job)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(run_peer(job));
    return pid;
}

static void expect_peer_ok(pid_t pid)
{
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void run_root(const char *spec, uint32_t world, const char *tag, double timeout_s, uint8_t seed,
                     int expect)
{
    uint8_t blob[BLOB_BYTES];
    fill_blob(blob, seed);
    const struct dcp_rendezvous_params p = {
        .spec = spec, .rank = 0, .world_size = world, .tag = tag, .timeout_s = timeout_s,
    };
    int st = dcp_rendezvous_broadcast(&p, blob, sizeof(blob));
    if (st != expect)
        fail_msg("rank 0: status %d, expected %d: %s", st, expect, dcp_last_error());
}

/* A scratch directory with one rendezvous file name in it. */
struct scratch {
    char dir[64];
    char spec[160];
    char path[128];
};

static void scratch_make(struct scratch *s)
{
    snprintf(s->dir, sizeof(s->dir), "/tmp/dcp-rdzv-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    snprintf(s->path, sizeof(s->path), "%s/nccl.id", s->dir);
    snprintf(s->spec, sizeof(s->spec), "file:%s", s->path);
}

/* Removes the file and the directory; the directory must hold nothing else (no
 * temporary file left behind). */
static void scratch_remove(struct scratch *s)
{
    unlink(s->path);
    assert_int_equal(rmdir(s->dir), 0);
}

static void test_file_four_ranks(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    pid_t pids[3];
    for (uint32_t k = 1; k <= 3; k++) {
        const struct peer_job job = {.spec = s.spec, .rank = k, .world_size = 4, .tag = "job-1",
                                     .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 42};
        pids[k - 1] = spawn_peer(&job);
    }
    sleep_ms(50); /* let the peers find no file first */
    run_root(s.spec, 4, "job-1", LONG_TIMEOUT_S, 42, DCP_OK);
    for (int k = 0; k < 3; k++)
        expect_peer_ok(pids[k]);
    /* A rank that comes late still finds the file. */
    const struct peer_job late = {.spec = s.spec, .rank = 2, .world_size = 4, .tag = "job-1",
                                  .timeout_s = 0, .expect = DCP_OK, .seed = 42};
    assert_int_equal(run_peer(&late), 0);
    scratch_remove(&s);
}

static void test_file_stale_tag_ignored(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    run_root(s.spec, 4, "old-job", 1, 7, DCP_OK);
    const struct peer_job waiting = {.spec = s.spec, .rank = 1, .world_size = 4, .tag = "new-job",
                                     .timeout_s = SHORT_TIMEOUT_S, .expect = DCP_ETIMEOUT,
                                     .mention = "has job tag 'old-job' (an earlier run?): ignored"};
    assert_int_equal(run_peer(&waiting), 0);

    /* A peer polling past the stale file takes the new one when it appears. */
    const struct peer_job fresh = {.spec = s.spec, .rank = 3, .world_size = 4, .tag = "new-job",
                                   .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 8};
    pid_t pid = spawn_peer(&fresh);
    sleep_ms(50);
    run_root(s.spec, 4, "new-job", 1, 8, DCP_OK);
    expect_peer_ok(pid);
    scratch_remove(&s);
}

static void test_file_mismatches_fail_fast(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    run_root(s.spec, 4, "job", 1, 3, DCP_OK);
    uint8_t small[64];
    const struct dcp_rendezvous_params p = {.spec = s.spec, .rank = 1, .world_size = 4, .tag = "job",
                                            .timeout_s = LONG_TIMEOUT_S};
    assert_int_equal(dcp_rendezvous_broadcast(&p, small, sizeof(small)), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "rank 0 offers 128 bytes, rank 1 expects 64"));
    const struct peer_job other_world = {.spec = s.spec, .rank = 1, .world_size = 8, .tag = "job",
                                         .timeout_s = LONG_TIMEOUT_S, .expect = DCP_EINVAL,
                                         .mention = "rank 0 runs with world size 4, rank 1 with 8"};
    assert_int_equal(run_peer(&other_world), 0);

    /* A file that is not ours is waited past, not trusted. */
    FILE *f = fopen(s.path, "w");
    assert_non_null(f);
    fputs("not a rendezvous file", f);
    fclose(f);
    const struct peer_job foreign = {.spec = s.spec, .rank = 1, .world_size = 4, .tag = "job",
                                     .timeout_s = SHORT_TIMEOUT_S, .expect = DCP_ETIMEOUT,
                                     .mention = "is not a rendezvous file"};
    assert_int_equal(run_peer(&foreign), 0);
    scratch_remove(&s);
}

static void test_file_timeout(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    const struct peer_job job = {.spec = s.spec, .rank = 3, .world_size = 4, .tag = "t",
                                 .timeout_s = SHORT_TIMEOUT_S, .expect = DCP_ETIMEOUT,
                                 .mention = "rank 3 of 4 got no blob with job tag 't' from rank 0 within 0.30 s; last: no file"};
    assert_int_equal(run_peer(&job), 0);
    /* Rank 0 cannot write into a missing directory. */
    char spec[160];
    snprintf(spec, sizeof(spec), "file:%s/missing/nccl.id", s.dir);
    run_root(spec, 2, "t", 1, 0, DCP_EIO);
    assert_non_null(strstr(dcp_last_error(), "cannot write"));
    scratch_remove(&s);
}

/* Rank 0 of a TCP rendezvous on an ephemeral port; returns its handle and port. */
static struct dcp_rendezvous *open_tcp_root(uint32_t world, const char *tag, double timeout_s, uint16_t port)
{
    char spec[64];
    snprintf(spec, sizeof(spec), "tcp:127.0.0.1:%u", port);
    const struct dcp_rendezvous_params p = {.spec = spec, .world_size = world, .tag = tag, .timeout_s = timeout_s};
    struct dcp_rendezvous *r = NULL;
    if (dcp_rendezvous_open(&p, &r))
        fail_msg("rank 0 open: %s", dcp_last_error());
    assert_int_not_equal(dcp_rendezvous_port(r), 0);
    return r;
}

static void send_port(int fd, uint16_t port, int times)
{
    for (int i = 0; i < times; i++)
        assert_int_equal(write(fd, &port, sizeof(port)), (ssize_t)sizeof(port));
}

/* Whether this machine has an IPv6 loopback address. */
static bool have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void test_tcp_four_ranks(void **state)
{
    (void)state;
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pids[3];
    /* Rank 3 comes over IPv6 where the machine has it. */
    const char *hosts[] = {"127.0.0.1", "localhost", have_ipv6_loopback() ? "[::1]" : "127.0.0.1"};
    for (uint32_t k = 1; k <= 3; k++) {
        const struct peer_job job = {.port_fd = pipefd[0], .host = hosts[k - 1], .rank = k, .world_size = 4,
                                     .tag = "tcp-job", .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 99};
        pids[k - 1] = spawn_peer(&job);
    }
    struct dcp_rendezvous *r = open_tcp_root(4, "tcp-job", LONG_TIMEOUT_S, 0);
    send_port(pipefd[1], dcp_rendezvous_port(r), 3);
    uint8_t blob[BLOB_BYTES];
    fill_blob(blob, 99);
    if (dcp_rendezvous_exchange(r, blob, sizeof(blob)))
        fail_msg("rank 0: %s", dcp_last_error());
    dcp_rendezvous_close(&r);
    for (int k = 0; k < 3; k++)
        expect_peer_ok(pids[k]);
    close(pipefd[0]);
    close(pipefd[1]);
}

/* A port that was free a moment ago (nothing listens on it now). */
static uint16_t unused_port(void)
{
    struct dcp_rendezvous *r = open_tcp_root(2, "", 1, 0);
    uint16_t port = dcp_rendezvous_port(r);
    dcp_rendezvous_close(&r);
    return port;
}

/* Peers that start before rank 0 listens are refused, back off and retry. */
static void test_tcp_peers_retry(void **state)
{
    (void)state;
    const uint16_t port = unused_port();
    char spec[64];
    snprintf(spec, sizeof(spec), "tcp:localhost:%u", port); /* a host name this time */
    pid_t pids[3];
    for (uint32_t k = 1; k <= 3; k++) {
        const struct peer_job job = {.spec = spec, .rank = k, .world_size = 4, .tag = "retry",
                                     .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 5};
        pids[k - 1] = spawn_peer(&job);
    }
    sleep_ms(200);
    run_root(spec, 4, "retry", LONG_TIMEOUT_S, 5, DCP_OK);
    for (int k = 0; k < 3; k++)
        expect_peer_ok(pids[k]);
}

static void test_tcp_timeouts(void **state)
{
    (void)state;
    /* Nobody listens: the peer gives up after its timeout and says what it tried. */
    char spec[64];
    snprintf(spec, sizeof(spec), "tcp:127.0.0.1:%u", unused_port());
    const struct peer_job alone = {.spec = spec, .rank = 1, .world_size = 2, .tag = "t",
                                   .timeout_s = SHORT_TIMEOUT_S, .expect = DCP_ETIMEOUT,
                                   .mention = "Connection refused"};
    assert_int_equal(run_peer(&alone), 0);

    /* Rank 0 of 3 with one peer: says who arrived and who did not. */
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    const struct peer_job one = {.port_fd = pipefd[0], .rank = 1, .world_size = 3, .tag = "t",
                                 .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 11};
    pid_t pid = spawn_peer(&one);
    struct dcp_rendezvous *r = open_tcp_root(3, "t", SHORT_TIMEOUT_S, 0);
    send_port(pipefd[1], dcp_rendezvous_port(r), 1);
    uint8_t blob[BLOB_BYTES];
    fill_blob(blob, 11);
    assert_int_equal(dcp_rendezvous_exchange(r, blob, sizeof(blob)), DCP_ETIMEOUT);
    if (!strstr(dcp_last_error(), "1 of 2 peers arrived within 0.30 s (missing ranks: 2)"))
        fail_msg("unexpected message: %s", dcp_last_error());
    dcp_rendezvous_close(&r);
    expect_peer_ok(pid);
    close(pipefd[0]);
    close(pipefd[1]);
}

/* A peer of another job is turned away without the blob and not counted; rank 0
 * keeps waiting for its own peer. Rank 0 runs in a child so that the test can
 * start the two peers one after the other. */
static void test_tcp_foreign_tag(void **state)
{
    (void)state;
    int to_root[2], from_root[2];
    assert_int_equal(pipe(to_root), 0);
    assert_int_equal(pipe(from_root), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t root = fork();
    assert_true(root >= 0);
    if (root == 0) {
        const struct dcp_rendezvous_params p = {.spec = "tcp:127.0.0.1:0", .world_size = 2, .tag = "ours",
                                                .timeout_s = LONG_TIMEOUT_S};
        struct dcp_rendezvous *r = NULL;
        uint8_t blob[BLOB_BYTES];
        fill_blob(blob, 21);
        if (dcp_rendezvous_open(&p, &r))
            _exit(20);
        uint16_t port = dcp_rendezvous_port(r);
        if (write(from_root[1], &port, sizeof(port)) != (ssize_t)sizeof(port))
            _exit(21);
        int st = dcp_rendezvous_exchange(r, blob, sizeof(blob));
        if (st)
            fprintf(stderr, "rank 0: %s\n", dcp_last_error());
        dcp_rendezvous_close(&r);
        _exit(st ? 22 : 0);
    }
    uint16_t port;
    assert_int_equal(read(from_root[0], &port, sizeof(port)), (ssize_t)sizeof(port));
    send_port(to_root[1], port, 2);
    const struct peer_job stranger = {.port_fd = to_root[0], .rank = 1, .world_size = 2, .tag = "theirs",
                                      .timeout_s = SHORT_TIMEOUT_S, .expect = DCP_ETIMEOUT,
                                      .mention = "has job tag 'ours' (another run?)"};
    expect_peer_ok(spawn_peer(&stranger));
    const struct peer_job member = {.port_fd = to_root[0], .rank = 1, .world_size = 2, .tag = "ours",
                                    .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 21};
    expect_peer_ok(spawn_peer(&member));
    expect_peer_ok(root);
    close(to_root[0]);
    close(to_root[1]);
    close(from_root[0]);
    close(from_root[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_specs),
        cmocka_unit_test(test_params_checked),
        cmocka_unit_test(test_file_four_ranks),
        cmocka_unit_test(test_file_stale_tag_ignored),
        cmocka_unit_test(test_file_mismatches_fail_fast),
        cmocka_unit_test(test_file_timeout),
        cmocka_unit_test(test_tcp_four_ranks),
        cmocka_unit_test(test_tcp_peers_retry),
        cmocka_unit_test(test_tcp_timeouts),
        cmocka_unit_test(test_tcp_foreign_tag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
