/* Rendezvous: spec parsing, file and TCP transports with forked ranks, timeouts,
 * stale files, foreign job tags and mismatched sizes, and the attacks of issue 7:
 * strangers, rank squatters and port squatters on TCP (loopback only), planted,
 * stale, foreign and FIFO files. Children report through their exit status
 * (0 = as expected) and print what went wrong to stderr. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/rendezvous.h"
#include "test_util.h"
#include "util/util.h"

#define BLOB_BYTES 128 /* NCCL's unique id */
#define LONG_TIMEOUT_S 30.0 /* for waits that must succeed: never reached unless broken */
#define SHORT_TIMEOUT_S 0.3
#define SECRET "0123456789abcdef-test-secret" /* what every rank of the tests' jobs shares */
#define SECRET_LEN (sizeof(SECRET) - 1)

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
        {"file:/shared/job/", "names a directory"},
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
    p.spec = "file:/tmp/x";
    p.secret = "short";
    p.secret_len = 5;
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "rendezvous: job secret of 5 bytes"));
    assert_null(r);

    /* A job of one has nothing to exchange and listens on nothing. */
    p = (struct dcp_rendezvous_params){.spec = "tcp:127.0.0.1:0", .world_size = 1, .timeout_s = 1, .tag = "one",
                                       .secret = SECRET, .secret_len = SECRET_LEN};
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
    const char *secret;    /* NULL: SECRET; "" : none */
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
    const char *secret = job->secret ? job->secret : SECRET;
    const struct dcp_rendezvous_params p = {
        .spec = job->spec ? job->spec : spec, .rank = job->rank, .world_size = job->world_size,
        .tag = job->tag, .secret = secret, .secret_len = strlen(secret), .timeout_s = job->timeout_s,
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

static void run_root_keyed(const char *spec, uint32_t world, const char *tag, const char *secret, double timeout_s,
                           uint8_t seed, int expect)
{
    uint8_t blob[BLOB_BYTES];
    fill_blob(blob, seed);
    const struct dcp_rendezvous_params p = {
        .spec = spec, .rank = 0, .world_size = world, .tag = tag, .secret = secret, .secret_len = strlen(secret),
        .timeout_s = timeout_s,
    };
    int st = dcp_rendezvous_broadcast(&p, blob, sizeof(blob));
    if (st != expect)
        fail_msg("rank 0: status %d, expected %d: %s", st, expect, dcp_last_error());
}

static void run_root(const char *spec, uint32_t world, const char *tag, double timeout_s, uint8_t seed,
                     int expect)
{
    run_root_keyed(spec, world, tag, SECRET, timeout_s, seed, expect);
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
                                            .secret = SECRET, .secret_len = SECRET_LEN,
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
    assert_int_equal(chmod(s.path, 0600), 0);
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
    const struct dcp_rendezvous_params p = {.spec = spec, .world_size = world, .tag = tag, .secret = SECRET,
                                            .secret_len = SECRET_LEN, .timeout_s = timeout_s};
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
    /* "localhost" may resolve to ::1 first, where rank 0 does not listen: the peer
     * tries the next address. */
    const char *hosts[] = {"127.0.0.1", "localhost", "127.0.0.1"};
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

/* Rank 0 on the IPv6 loopback, where the machine has one. */
static void test_tcp_ipv6(void **state)
{
    (void)state;
    if (!have_ipv6_loopback())
        skip();
    const struct dcp_rendezvous_params p = {.spec = "tcp:[::1]:0", .world_size = 2, .tag = "v6", .secret = SECRET,
                                            .secret_len = SECRET_LEN, .timeout_s = LONG_TIMEOUT_S};
    struct dcp_rendezvous *r = NULL;
    if (dcp_rendezvous_open(&p, &r))
        fail_msg("rank 0 open: %s", dcp_last_error());
    char spec[64];
    snprintf(spec, sizeof(spec), "tcp:[::1]:%u", dcp_rendezvous_port(r));
    const struct peer_job job = {.spec = spec, .rank = 1, .world_size = 2, .tag = "v6", .timeout_s = LONG_TIMEOUT_S,
                                 .expect = DCP_OK, .seed = 98};
    pid_t pid = spawn_peer(&job);
    uint8_t blob[BLOB_BYTES];
    fill_blob(blob, 98);
    if (dcp_rendezvous_exchange(r, blob, sizeof(blob)))
        fail_msg("rank 0: %s", dcp_last_error());
    dcp_rendezvous_close(&r);
    expect_peer_ok(pid);
}

/* A port that was free a moment ago (nothing listens on it now). */
static uint16_t unused_port(void)
{
    struct dcp_rendezvous *r = open_tcp_root(2, "probe", 1, 0);
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

/* Rank 0 of a TCP rendezvous in a child process, so that the test can play peers
 * (and attackers) one after the other. */
struct root_child {
    pid_t pid;
    uint16_t port;
};

static struct root_child start_root(uint32_t world, const char *tag, double timeout_s, uint8_t seed, int expect)
{
    int from_root[2];
    assert_int_equal(pipe(from_root), 0);
    fflush(stdout);
    fflush(stderr);
    struct root_child rc = {.pid = fork()};
    assert_true(rc.pid >= 0);
    if (rc.pid == 0) {
        const struct dcp_rendezvous_params p = {.spec = "tcp:127.0.0.1:0", .world_size = world, .tag = tag,
                                                .secret = SECRET, .secret_len = SECRET_LEN, .timeout_s = timeout_s};
        struct dcp_rendezvous *r = NULL;
        uint8_t blob[BLOB_BYTES];
        fill_blob(blob, seed);
        if (dcp_rendezvous_open(&p, &r))
            _exit(20);
        uint16_t port = dcp_rendezvous_port(r);
        if (write(from_root[1], &port, sizeof(port)) != (ssize_t)sizeof(port))
            _exit(21);
        int st = dcp_rendezvous_exchange(r, blob, sizeof(blob));
        if (st != expect)
            fprintf(stderr, "rank 0: status %d, expected %d: %s\n", st, expect, dcp_last_error());
        dcp_rendezvous_close(&r);
        _exit(st != expect ? 22 : 0);
    }
    assert_int_equal(read(from_root[0], &rc.port, sizeof(rc.port)), (ssize_t)sizeof(rc.port));
    close(from_root[0]);
    close(from_root[1]);
    return rc;
}

static char *tcp_spec(uint16_t port, char *buf, size_t cap)
{
    snprintf(buf, cap, "tcp:127.0.0.1:%u", port);
    return buf;
}

/* A peer of another job (another tag, or another secret) is turned away without
 * the blob and not counted; rank 0 keeps waiting for its own peer. */
static void test_tcp_foreign_tag(void **state)
{
    (void)state;
    const struct root_child root = start_root(2, "ours", LONG_TIMEOUT_S, 21, DCP_OK);
    char spec[64];
    const struct peer_job stranger = {.spec = tcp_spec(root.port, spec, sizeof(spec)), .rank = 1, .world_size = 2,
                                      .tag = "theirs", .timeout_s = SHORT_TIMEOUT_S, .expect = DCP_ETIMEOUT,
                                      .mention = "refused this rank's proof"};
    expect_peer_ok(spawn_peer(&stranger));
    struct peer_job other_secret = stranger;
    other_secret.tag = "ours";
    other_secret.secret = "another secret of this job's size";
    expect_peer_ok(spawn_peer(&other_secret));
    const struct peer_job member = {.spec = spec, .rank = 1, .world_size = 2, .tag = "ours",
                                    .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 21};
    expect_peer_ok(spawn_peer(&member));
    expect_peer_ok(root.pid);
}

/* --- attackers on the wire ---------------------------------------------------------- */

/* The hello of the first protocol (88 bytes: magic, version 1, rank, world, blob
 * length, tag[64]), which handed the blob to anyone who repeated the tag. */
static size_t v1_hello(uint8_t *buf, uint32_t rank, uint32_t world, const char *tag)
{
    memset(buf, 0, 88);
    memcpy(buf, "DCP-RDZV", 8);
    const uint32_t fields[4] = {htonl(1), htonl(rank), htonl(world), 0};
    memcpy(buf + 8, fields, sizeof(fields));
    snprintf((char *)buf + 24, 64, "%s", tag);
    return 88;
}

/* The hello of the current protocol (docs/rendezvous.md): magic, version 3, rank,
 * world, blob length, a 32-byte nonce. */
static size_t v3_hello(uint8_t *buf, uint32_t rank, uint32_t world, uint32_t length)
{
    memcpy(buf, "DCP-RDZV", 8);
    const uint32_t fields[4] = {htonl(3), htonl(rank), htonl(world), htonl(length)};
    memcpy(buf + 8, fields, sizeof(fields));
    memset(buf + 24, 0x5a, 32);
    return 56;
}

/* Connects to 127.0.0.1:port, sends n bytes and collects what comes back until the
 * server closes the connection or stays silent for half a second. */
static size_t raw_exchange(uint16_t port, const uint8_t *msg, size_t n, uint8_t *reply, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    const struct timeval tv = {0, 500000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    assert_int_equal(send(fd, msg, n, MSG_NOSIGNAL), (ssize_t)n);
    size_t got = 0;
    for (ssize_t k; got < cap && (k = recv(fd, reply + got, cap - got, 0)) > 0;)
        got += (size_t)k;
    close(fd);
    return got;
}

static bool contains(const uint8_t *hay, size_t n, const void *needle, size_t len)
{
    return memmem(hay, n, needle, len) != NULL;
}

/* A client that knows the job tag (or guesses none) but not the secret gets
 * neither the tag nor the blob, and is not counted as a rank. */
static void test_tcp_stranger_learns_nothing(void **state)
{
    (void)state;
    const char *tag = "job-4242";
    const struct root_child root = start_root(2, tag, LONG_TIMEOUT_S, 33, DCP_OK);
    uint8_t msg[128], reply[4096], blob[BLOB_BYTES];
    fill_blob(blob, 33);
    const char *guesses[] = {"", tag};
    for (size_t g = 0; g < DCP_ARRAY_SIZE(guesses); g++) {
        const size_t n = raw_exchange(root.port, msg, v1_hello(msg, 1, 2, guesses[g]), reply, sizeof(reply));
        if (contains(reply, n, tag, strlen(tag)))
            fail_msg("rank 0 told a stranger (guess '%s') its job tag", guesses[g]);
        if (contains(reply, n, blob, 16))
            fail_msg("rank 0 handed a stranger (guess '%s') the blob", guesses[g]);
    }
    /* The current protocol: the challenge is a bare nonce (nothing keyed with the secret
     * that a stranger could test guesses of a weak secret against offline)... */
    size_t n = v3_hello(msg, 1, 2, BLOB_BYTES);
    assert_int_equal(raw_exchange(root.port, msg, n, reply, sizeof(reply)), 12 + 32);
    /* ...and a made-up proof gets only the refusal (magic, version, status 1). */
    memset(msg + n, 0, 32);
    n = raw_exchange(root.port, msg, n + 32, reply, sizeof(reply));
    assert_false(contains(reply, n, tag, strlen(tag)));
    assert_false(contains(reply, n, blob, 16));
    assert_int_equal(n, 12 + 32 + 16);
    assert_memory_equal(reply + 44, "DCP-RDZV\0\0\0\3\0\0\0\1", 16);
    char spec[64];
    const struct peer_job member = {.spec = tcp_spec(root.port, spec, sizeof(spec)), .rank = 1, .world_size = 2,
                                    .tag = tag, .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 33};
    expect_peer_ok(spawn_peer(&member));
    expect_peer_ok(root.pid);
}

/* Clients claiming every rank (the old protocol with the right tag, or the current
 * one with a wrong secret) do not stand in for the real peers: rank 0 serves all
 * three real peers and only then returns. */
static void test_tcp_fake_ranks_do_not_block_peers(void **state)
{
    (void)state;
    const char *tag = "job-77";
    const struct root_child root = start_root(4, tag, LONG_TIMEOUT_S, 44, DCP_OK);
    uint8_t msg[128], reply[4096];
    for (uint32_t k = 1; k < 4; k++)
        raw_exchange(root.port, msg, v1_hello(msg, k, 4, tag), reply, sizeof(reply));
    char spec[64];
    tcp_spec(root.port, spec, sizeof(spec));
    for (uint32_t k = 1; k < 4; k++) {
        const struct peer_job impostor = {.spec = spec, .rank = k, .world_size = 4, .tag = tag,
                                          .secret = "guessed-secret-of-16+", .timeout_s = SHORT_TIMEOUT_S,
                                          .expect = DCP_ETIMEOUT, .mention = "refused this rank's proof"};
        expect_peer_ok(spawn_peer(&impostor));
    }
    pid_t pids[3];
    for (uint32_t k = 1; k < 4; k++) {
        const struct peer_job job = {.spec = spec, .rank = k, .world_size = 4, .tag = tag,
                                     .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 44};
        pids[k - 1] = spawn_peer(&job);
    }
    for (int k = 0; k < 3; k++)
        expect_peer_ok(pids[k]);
    expect_peer_ok(root.pid);
}

/* A connection that stalls (no hello, or half of one) does not hold up the real peers:
 * rank 0 handshakes with every connection at once (it served one at a time, so each
 * stalled client cost every peer 5 s). */
static void test_tcp_stalled_client_does_not_block(void **state)
{
    (void)state;
    const struct root_child root = start_root(3, "job-s", LONG_TIMEOUT_S, 66, DCP_OK);
    int stalled[2];
    for (int i = 0; i < 2; i++) {
        stalled[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(root.port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(stalled[i], (struct sockaddr *)&a, sizeof(a)), 0);
    }
    uint8_t msg[64];
    assert_int_equal(send(stalled[1], msg, v3_hello(msg, 1, 3, BLOB_BYTES) / 2, MSG_NOSIGNAL), 28);
    sleep_ms(50); /* both accepted before the peers come */
    char spec[64];
    tcp_spec(root.port, spec, sizeof(spec));
    const double t0 = dcp_now_seconds();
    pid_t pids[2];
    for (uint32_t k = 1; k <= 2; k++) {
        const struct peer_job job = {.spec = spec, .rank = k, .world_size = 3, .tag = "job-s",
                                     .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 66};
        pids[k - 1] = spawn_peer(&job);
    }
    for (int k = 0; k < 2; k++)
        expect_peer_ok(pids[k]);
    expect_peer_ok(root.pid);
    const double took = dcp_now_seconds() - t0;
    if (took > 2.5)
        fail_msg("the peers waited %.1f s behind stalled connections", took);
    close(stalled[0]);
    close(stalled[1]);
}

/* A peer with the wrong secret learns why: rank 0 refuses its proof, and the timeout
 * message keeps that cause even after rank 0 is gone and later connects are refused. */
static void test_tcp_wrong_secret_keeps_cause(void **state)
{
    (void)state;
    const struct root_child root = start_root(2, "job-w", LONG_TIMEOUT_S, 77, DCP_OK);
    char spec[64];
    tcp_spec(root.port, spec, sizeof(spec));
    const struct peer_job wrong = {.spec = spec, .rank = 1, .world_size = 2, .tag = "job-w",
                                   .secret = "not the job's secret, 16+ bytes", .timeout_s = 1.0,
                                   .expect = DCP_ETIMEOUT, .mention = "refused this rank's proof: the job secret"};
    const pid_t impostor = spawn_peer(&wrong);
    sleep_ms(200);
    const struct peer_job member = {.spec = spec, .rank = 1, .world_size = 2, .tag = "job-w",
                                    .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 77};
    expect_peer_ok(spawn_peer(&member));
    expect_peer_ok(root.pid); /* gone: the impostor's later connects are refused */
    expect_peer_ok(impostor);
}

/* Rank 0 checks the claimed rank and sizes before it sends a byte: out of range,
 * another world size, another blob size, or a rank already served get nothing. */
static void test_tcp_rank_checked_before_reply(void **state)
{
    (void)state;
    const char *tag = "job-5";
    const struct root_child root = start_root(3, tag, LONG_TIMEOUT_S, 55, DCP_OK);
    uint8_t msg[128], reply[4096];
    assert_int_equal(raw_exchange(root.port, msg, v1_hello(msg, 7, 3, tag), reply, sizeof(reply)), 0);
    assert_int_equal(raw_exchange(root.port, msg, v3_hello(msg, 7, 3, BLOB_BYTES), reply, sizeof(reply)), 0);
    assert_int_equal(raw_exchange(root.port, msg, v3_hello(msg, 0, 3, BLOB_BYTES), reply, sizeof(reply)), 0);
    assert_int_equal(raw_exchange(root.port, msg, v3_hello(msg, 1, 5, BLOB_BYTES), reply, sizeof(reply)), 0);
    assert_int_equal(raw_exchange(root.port, msg, v3_hello(msg, 1, 3, 64), reply, sizeof(reply)), 0);
    /* A well-formed hello does get the challenge (so the checks above are the cause). */
    assert_int_equal(raw_exchange(root.port, msg, v3_hello(msg, 1, 3, BLOB_BYTES), reply, sizeof(reply)), 44);
    char spec[64];
    const struct peer_job one = {.spec = tcp_spec(root.port, spec, sizeof(spec)), .rank = 1, .world_size = 3,
                                 .tag = tag, .timeout_s = LONG_TIMEOUT_S, .expect = DCP_OK, .seed = 55};
    expect_peer_ok(spawn_peer(&one));
    /* Rank 1 is taken now. */
    assert_int_equal(raw_exchange(root.port, msg, v3_hello(msg, 1, 3, BLOB_BYTES), reply, sizeof(reply)), 0);
    struct peer_job again = one;
    again.timeout_s = SHORT_TIMEOUT_S;
    again.expect = DCP_ETIMEOUT;
    again.mention = "closed the connection";
    expect_peer_ok(spawn_peer(&again));
    struct peer_job two = one;
    two.rank = 2;
    expect_peer_ok(spawn_peer(&two));
    expect_peer_ok(root.pid);
}

/* A process that holds the port first and answers every hello with a forged blob
 * (repeating the tag of the old protocol, or a made-up proof) is not believed. */
static void test_tcp_port_squatter_rejected(void **state)
{
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(lfd, 16), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    const uint16_t port = ntohs(a.sin_port);
    fflush(stdout);
    fflush(stderr);
    pid_t squatter = fork();
    assert_true(squatter >= 0);
    if (squatter == 0) {
        alarm(60); /* never outlives a failed test */
        for (;;) {
            int fd = accept(lfd, NULL, NULL);
            if (fd < 0)
                _exit(0);
            uint8_t hello[88] = {0}, out[512] = {0};
            ssize_t n = recv(fd, hello, sizeof(hello), 0);
            size_t len_out;
            if (n >= 12 && hello[11] == 1) { /* old protocol: echo the header with a forged blob */
                memcpy(out, hello, 88);
                const uint32_t length = htonl(BLOB_BYTES);
                memset(out + 12, 0, 4);
                memcpy(out + 20, &length, 4);
                memset(out + 88, 0xee, BLOB_BYTES);
                len_out = 88 + BLOB_BYTES;
            } else { /* current protocol: a challenge, an accepting verdict with a made-up
                      * proof of rank 0, and a forged blob */
                memcpy(out, "DCP-RDZV\0\0\0\3", 12);
                memset(out + 12, 0x11, 32);
                memcpy(out + 44, "DCP-RDZV\0\0\0\3\0\0\0\0", 16);
                memset(out + 60, 0xee, 32 + BLOB_BYTES + 32);
                len_out = 60 + 32 + BLOB_BYTES + 32;
            }
            if (send(fd, out, len_out, MSG_NOSIGNAL) < 0) {
                close(fd);
                continue;
            }
            recv(fd, out, sizeof(out), 0); /* wait for the peer to hang up */
            close(fd);
        }
    }
    char spec[64];
    tcp_spec(port, spec, sizeof(spec));
    /* Rank 0 cannot take the port... */
    const struct dcp_rendezvous_params p = {.spec = spec, .world_size = 2, .tag = "job", .secret = SECRET,
                                            .secret_len = SECRET_LEN, .timeout_s = 1};
    struct dcp_rendezvous *r = NULL;
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EIO);
    assert_non_null(strstr(dcp_last_error(), "rendezvous"));
    /* ...and a peer does not take the squatter's blob. */
    const struct peer_job peer = {.spec = spec, .rank = 1, .world_size = 2, .tag = "job", .timeout_s = 1.0,
                                  .expect = DCP_ETIMEOUT, .mention = "did not authenticate"};
    expect_peer_ok(spawn_peer(&peer));
    kill(squatter, SIGKILL);
    waitpid(squatter, NULL, 0);
    close(lfd);
}

/* Rank 0 listens on the spec's host, not on every interface: another loopback
 * address's same port stays free. */
static void test_tcp_listens_on_given_host_only(void **state)
{
    (void)state;
    struct dcp_rendezvous *r = open_tcp_root(2, "job", 1, 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(dcp_rendezvous_port(r))};
    a.sin_addr.s_addr = htonl(0x7f000002); /* 127.0.0.2 */
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)))
        fail_msg("port %u of 127.0.0.2 is taken (%s): rank 0 listens beyond 127.0.0.1", dcp_rendezvous_port(r),
                 strerror(errno));
    close(fd);
    dcp_rendezvous_close(&r);
}

/* TCP without a secret, or with one too short to resist guessing, is refused. */
static void test_tcp_requires_secret(void **state)
{
    (void)state;
    struct dcp_rendezvous *r = NULL;
    struct dcp_rendezvous_params p = {.spec = "tcp:127.0.0.1:0", .world_size = 2, .tag = "job", .timeout_s = 1};
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "DCP_RENDEZVOUS_SECRET"));
    assert_null(r);
    p.rank = 1;
    p.spec = "tcp:127.0.0.1:9";
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    p.secret = "0123456789abcde"; /* 15 bytes */
    p.secret_len = 15;
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    assert_null(r);
}

/* --- files: who wrote it, when, and how --------------------------------------------- */

static int file_mode(const char *path)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    return (int)(st.st_mode & 07777);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Rank 0's file is 0600, created exclusively: a symbolic link planted at the old
 * predictable temporary name or at the path itself redirects nothing. */
static void test_file_private_and_exclusive(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    char victim[128], tmp[256], host[64] = "host";
    snprintf(victim, sizeof(victim), "%s/victim", s.dir);
    write_text(victim, "precious");
    gethostname(host, sizeof(host) - 1);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%s.%ld", s.path, host, (long)getpid());
    assert_int_equal(symlink(victim, tmp), 0);
    assert_int_equal(symlink(victim, s.path), 0);
    run_root(s.spec, 2, "job", 1, 9, DCP_OK);
    FILE *f = fopen(victim, "r");
    char text[32] = "";
    assert_non_null(fgets(text, sizeof(text), f));
    fclose(f);
    assert_string_equal(text, "precious");
    assert_int_equal(file_mode(s.path), 0600);
    const struct peer_job peer = {.spec = s.spec, .rank = 1, .world_size = 2, .tag = "job", .timeout_s = 0,
                                  .expect = DCP_OK, .seed = 9};
    assert_int_equal(run_peer(&peer), 0);
    unlink(tmp);
    unlink(victim);
    scratch_remove(&s);
}

/* Reads path's first line into text ("" when it cannot). */
static void read_text(const char *path, char *text, size_t n)
{
    text[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(text, (int)n, f))
            text[0] = '\0';
        fclose(f);
    }
}

/* In a shared sticky directory another user plants job -> the victim's directory:
 * rank 0 publishing file:DIR/job/nccl.id used to replace the victim's own file of
 * that name. A link in a directory others may write is not followed, a directory
 * others may write without the sticky bit is not trusted, and a link no one else
 * can have planted (ours, in our own directory) still works. */
static void test_file_directory_links(void **state)
{
    (void)state;
    struct scratch s, victim;
    scratch_make(&s);
    scratch_make(&victim);
    write_text(victim.path, "precious");
    assert_int_equal(chmod(victim.path, 0600), 0);
    char job[160], spec[200];
    snprintf(job, sizeof(job), "%s/job", s.dir);
    snprintf(spec, sizeof(spec), "file:%s/nccl.id", job);
    assert_int_equal(symlink(victim.dir, job), 0);

    /* The shared directory (1777): the planted link is refused by rank 0 and its peers. */
    assert_int_equal(chmod(s.dir, 01777), 0);
    run_root(spec, 2, "job", 1, 5, DCP_EIO);
    assert_non_null(strstr(dcp_last_error(), "component 'job' is a symbolic link in a directory others may write"));
    char text[32];
    read_text(victim.path, text, sizeof(text));
    assert_string_equal(text, "precious");
    const struct peer_job peer = {.spec = spec, .rank = 1, .world_size = 2, .tag = "job",
                                  .timeout_s = SHORT_TIMEOUT_S, .expect = DCP_ETIMEOUT,
                                  .mention = "symbolic link in a directory others may write"};
    assert_int_equal(run_peer(&peer), 0);

    /* Writable by others without the sticky bit: anyone may swap what it holds. */
    assert_int_equal(unlink(job), 0);
    assert_int_equal(mkdir(job, 0700), 0);
    assert_int_equal(chmod(s.dir, 0777), 0);
    run_root(spec, 2, "job", 1, 5, DCP_EIO);
    assert_non_null(strstr(dcp_last_error(), "writable by others without the sticky bit"));
    assert_int_equal(rmdir(job), 0);

    /* Our own link in our own directory is followed. */
    assert_int_equal(chmod(s.dir, 0700), 0);
    assert_int_equal(symlink(victim.dir, job), 0);
    run_root(spec, 2, "job", 1, 5, DCP_OK);
    const struct peer_job ok = {.spec = spec, .rank = 1, .world_size = 2, .tag = "job", .timeout_s = 0,
                                .expect = DCP_OK, .seed = 5};
    assert_int_equal(run_peer(&ok), 0);
    assert_int_equal(unlink(job), 0);
    scratch_remove(&victim);
    scratch_remove(&s);
}

/* Two jobs with one tag and no secret: the second rank 0 refuses to replace the file of
 * the first while its writer runs (their peers could not tell the files apart), and
 * replaces it once that writer has exited. */
static void test_file_tag_collision_without_secret(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    fflush(stdout);
    fflush(stderr);
    const pid_t first = fork();
    assert_true(first >= 0);
    if (first == 0) {
        alarm(30);
        run_root_keyed(s.spec, 2, "shared-tag", "", 10, 1, DCP_OK);
        char c = 1;
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(1);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    run_root_keyed(s.spec, 2, "shared-tag", "", 10, 2, DCP_EIO);
    if (!strstr(dcp_last_error(), "holds a file of job tag 'shared-tag'") ||
        !strstr(dcp_last_error(), "DCP_RENDEZVOUS_SECRET"))
        fail_msg("unexpected message: %s", dcp_last_error());
    assert_int_equal(write(go[1], &c, 1), 1);
    expect_peer_ok(first);
    run_root_keyed(s.spec, 2, "shared-tag", "", 10, 3, DCP_OK); /* its writer has exited */
    /* Another process, while this one (the file's writer) runs: refused without a secret;
     * with one, the jobs' files tell themselves apart (a MAC each) and nothing is refused. */
    fflush(stdout);
    fflush(stderr);
    const pid_t second = fork();
    assert_true(second >= 0);
    if (second == 0) {
        uint8_t blob[BLOB_BYTES];
        fill_blob(blob, 4);
        struct dcp_rendezvous_params p = {.spec = s.spec, .world_size = 2, .tag = "shared-tag", .timeout_s = 10};
        if (dcp_rendezvous_broadcast(&p, blob, sizeof(blob)) != DCP_EIO)
            _exit(1);
        p.secret = SECRET;
        p.secret_len = SECRET_LEN;
        _exit(dcp_rendezvous_broadcast(&p, blob, sizeof(blob)) == DCP_OK ? 0 : 2);
    }
    expect_peer_ok(second);
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(go[i]);
    }
    scratch_remove(&s);
}

/* No tag (so every run would share "dcp"): refused, naming the variables. */
static void test_file_requires_tag(void **state)
{
    (void)state;
    struct dcp_rendezvous *r = NULL;
    struct dcp_rendezvous_params p = {.spec = "file:/tmp/dcp-no-such-dir/x", .rank = 1, .world_size = 2,
                                      .timeout_s = 1};
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "rendezvous"));
    assert_non_null(strstr(dcp_last_error(), "DCP_JOB_TAG"));
    p.tag = "";
    assert_int_equal(dcp_rendezvous_open(&p, &r), DCP_EINVAL);
    assert_null(r);
}

/* A rendezvous file with group/other access, of another owner, or reached through a
 * symbolic link is not trusted: the peer waits past it and says why. */
static void test_file_untrusted_waited_past(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    run_root(s.spec, 2, "job", 1, 4, DCP_OK);
    struct peer_job peer = {.spec = s.spec, .rank = 1, .world_size = 2, .tag = "job", .timeout_s = SHORT_TIMEOUT_S,
                            .expect = DCP_ETIMEOUT, .mention = "mode 0644"};
    assert_int_equal(chmod(s.path, 0644), 0);
    assert_int_equal(run_peer(&peer), 0);
    assert_int_equal(chmod(s.path, 0600), 0);
    if (geteuid() == 0 && chown(s.path, 65534, 65534) == 0) { /* only root can give a file away */
        peer.mention = "owned by uid 65534";
        assert_int_equal(run_peer(&peer), 0);
        assert_int_equal(chown(s.path, 0, 0), 0);
    }
    char real[160];
    snprintf(real, sizeof(real), "%s.real", s.path);
    assert_int_equal(rename(s.path, real), 0);
    assert_int_equal(symlink(real, s.path), 0);
    peer.mention = "symbolic link";
    assert_int_equal(run_peer(&peer), 0);
    unlink(real);
    scratch_remove(&s);
}

/* A FIFO at the path does not block a peer: it times out on time and says why. */
static void test_file_fifo_bounded(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    assert_int_equal(mkfifo(s.path, 0600), 0);
    const struct peer_job peer = {.spec = s.spec, .rank = 1, .world_size = 2, .tag = "job",
                                  .timeout_s = SHORT_TIMEOUT_S, .expect = DCP_ETIMEOUT,
                                  .mention = "not a regular file"};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10); /* a hang fails the test instead of stalling it */
        _exit(run_peer(&peer));
    }
    int status = 0;
    const double t0 = dcp_now_seconds();
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status))
        fail_msg("the peer hung on a FIFO (killed by signal %d)", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(dcp_now_seconds() - t0 < 5);
    scratch_remove(&s);
}

/* A file of this job's tag left by a rank 0 that has exited (on this host), or
 * written longer ago than the timeout allows, is stale: waited past. */
static void test_file_stale(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        run_root(s.spec, 2, "job", 1, 6, DCP_OK);
        _exit(0);
    }
    expect_peer_ok(pid);
    struct peer_job peer = {.spec = s.spec, .rank = 1, .world_size = 2, .tag = "job", .timeout_s = SHORT_TIMEOUT_S,
                            .expect = DCP_ETIMEOUT, .mention = "which has exited"};
    assert_int_equal(run_peer(&peer), 0);

    run_root(s.spec, 2, "job", 1, 6, DCP_OK); /* rank 0 alive (this process), but the file is old */
    const struct timeval old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    assert_int_equal(utimes(s.path, old), 0);
    peer.mention = "stale";
    assert_int_equal(run_peer(&peer), 0);
    scratch_remove(&s);
}

/* A file written with another secret fails its check and is waited past. */
static void test_file_secret_checked(void **state)
{
    (void)state;
    struct scratch s;
    scratch_make(&s);
    run_root_keyed(s.spec, 2, "job", "someone else's secret", 1, 2, DCP_OK);
    struct peer_job peer = {.spec = s.spec, .rank = 1, .world_size = 2, .tag = "job", .timeout_s = SHORT_TIMEOUT_S,
                            .expect = DCP_ETIMEOUT, .mention = "integrity check"};
    assert_int_equal(run_peer(&peer), 0);
    run_root(s.spec, 2, "job", 1, 2, DCP_OK);
    peer.expect = DCP_OK;
    peer.mention = NULL;
    peer.seed = 2;
    assert_int_equal(run_peer(&peer), 0);
    scratch_remove(&s);
}

/* --- the environment ---------------------------------------------------------------- */

static const char *const env_vars[] = {
    "DCP_RENDEZVOUS", "DCP_JOB_TAG", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT", "PMIX_NAMESPACE",
    "TORCHELASTIC_RUN_ID", "DCP_RENDEZVOUS_SECRET", "DCP_RENDEZVOUS_SECRET_FILE",
};

static void clear_env(void)
{
    for (size_t i = 0; i < DCP_ARRAY_SIZE(env_vars); i++)
        unsetenv(env_vars[i]);
}

static int env_read(struct dcp_rendezvous_env *e)
{
    int st = dcp_rendezvous_env_read(e);
    return st;
}

static void expect_env_error(const char *mention)
{
    struct dcp_rendezvous_env e;
    assert_int_equal(env_read(&e), DCP_EINVAL);
    dcp_rendezvous_env_clear(&e);
    if (!strstr(dcp_last_error(), mention))
        fail_msg("error \"%s\" lacks \"%s\"", dcp_last_error(), mention);
    assert_non_null(strstr(dcp_last_error(), "rendezvous"));
}

static void test_env_tag(void **state)
{
    (void)state;
    clear_env();
    expect_env_error("DCP_RENDEZVOUS");
    setenv("DCP_RENDEZVOUS", "file:/shared/x", 1);
    expect_env_error("DCP_JOB_TAG, SLURM_JOB_ID, PMIX_NAMESPACE or TORCHELASTIC_RUN_ID");
    setenv("TORCHELASTIC_RUN_ID", "none", 1); /* torchrun's default: not unique */
    expect_env_error("DCP_JOB_TAG");
    struct dcp_rendezvous_env e;
    static const struct {
        const char *var, *value, *tag;
    } steps[] = {
        {"TORCHELASTIC_RUN_ID", "run-9", "run-9"},
        {"PMIX_NAMESPACE", "prterun-n1-123@1", "prterun-n1-123@1"},
        {"SLURM_JOB_ID", "4711", "4711"},
        {"SLURM_STEP_ID", "2", "4711.2"},
        {"SLURM_RESTART_COUNT", "1", "4711.2.r1"},
        {"DCP_JOB_TAG", "mine", "mine"},
    };
    for (size_t i = 0; i < DCP_ARRAY_SIZE(steps); i++) {
        setenv(steps[i].var, steps[i].value, 1);
        assert_int_equal(env_read(&e), DCP_OK);
        assert_string_equal(e.tag, steps[i].tag);
        assert_string_equal(e.spec, "file:/shared/x");
        assert_int_equal(e.secret_len, 0);
        dcp_rendezvous_env_clear(&e);
    }
    char long_tag[100];
    memset(long_tag, 't', sizeof(long_tag) - 1);
    long_tag[sizeof(long_tag) - 1] = '\0';
    setenv("DCP_JOB_TAG", long_tag, 1);
    expect_env_error("longer than 63 bytes");
    clear_env();
}

static void test_env_secret(void **state)
{
    (void)state;
    clear_env();
    setenv("DCP_RENDEZVOUS", "tcp:127.0.0.1:1234", 1);
    setenv("DCP_JOB_TAG", "j", 1);
    struct dcp_rendezvous_env e;
    setenv("DCP_RENDEZVOUS_SECRET", "too short", 1);
    expect_env_error("DCP_RENDEZVOUS_SECRET is 9 bytes");
    setenv("DCP_RENDEZVOUS_SECRET", SECRET, 1);
    assert_int_equal(env_read(&e), DCP_OK);
    assert_int_equal(e.secret_len, SECRET_LEN);
    assert_memory_equal(e.secret, SECRET, SECRET_LEN);
    dcp_rendezvous_env_clear(&e);
    assert_int_equal(e.secret_len, 0);

    struct scratch s;
    scratch_make(&s);
    setenv("DCP_RENDEZVOUS_SECRET_FILE", s.path, 1);
    expect_env_error("set only one");
    unsetenv("DCP_RENDEZVOUS_SECRET");
    expect_env_error("DCP_RENDEZVOUS_SECRET_FILE"); /* missing */
    write_text(s.path, SECRET "\n");
    assert_int_equal(chmod(s.path, 0644), 0);
    expect_env_error("mode 0644");
    assert_int_equal(chmod(s.path, 0600), 0);
    assert_int_equal(env_read(&e), DCP_OK);
    assert_int_equal(e.secret_len, SECRET_LEN); /* the newline dropped */
    assert_memory_equal(e.secret, SECRET, SECRET_LEN);
    dcp_rendezvous_env_clear(&e);
    unlink(s.path);
    assert_int_equal(mkfifo(s.path, 0600), 0);
    expect_env_error("not a regular file"); /* at once, not blocked on the FIFO */
    unlink(s.path);
    scratch_remove(&s);
    clear_env();
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
        cmocka_unit_test(test_tcp_ipv6),
        cmocka_unit_test(test_tcp_peers_retry),
        cmocka_unit_test(test_tcp_timeouts),
        cmocka_unit_test(test_tcp_foreign_tag),
        cmocka_unit_test(test_tcp_stranger_learns_nothing),
        cmocka_unit_test(test_tcp_fake_ranks_do_not_block_peers),
        cmocka_unit_test(test_tcp_rank_checked_before_reply),
        cmocka_unit_test(test_tcp_stalled_client_does_not_block),
        cmocka_unit_test(test_tcp_wrong_secret_keeps_cause),
        cmocka_unit_test(test_tcp_port_squatter_rejected),
        cmocka_unit_test(test_tcp_listens_on_given_host_only),
        cmocka_unit_test(test_tcp_requires_secret),
        cmocka_unit_test(test_file_private_and_exclusive),
        cmocka_unit_test(test_file_directory_links),
        cmocka_unit_test(test_file_tag_collision_without_secret),
        cmocka_unit_test(test_file_requires_tag),
        cmocka_unit_test(test_file_untrusted_waited_past),
        cmocka_unit_test(test_file_fifo_bounded),
        cmocka_unit_test(test_file_stale),
        cmocka_unit_test(test_file_secret_checked),
        cmocka_unit_test(test_env_tag),
        cmocka_unit_test(test_env_secret),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
