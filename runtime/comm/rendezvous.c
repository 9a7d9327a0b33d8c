/* rendezvous.c: rank 0 hands a small blob to every rank, through a shared file or an
 * authenticated TCP handshake (docs/rendezvous.md). */
#include "comm/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/file.h"
#include "util/sha256.h"
#include "util/util.h"

/* --- wire formats (docs/rendezvous.md) ------------------------------------------- */

#define RENDEZVOUS_VERSION 3u
#define MAC_BYTES DCP_SHA256_BYTES
#define NONCE_BYTES 32
static const char magic[8] = {'D', 'C', 'P', '-', 'R', 'D', 'Z', 'V'};

/* TCP: hello (peer -> rank 0): magic version rank world length nonce[32];
 * challenge (rank 0 -> peer): magic version nonce[32]; the peer's proof[32];
 * verdict (rank 0 -> peer): magic version status, and when it accepts, rank 0's
 * proof[32], the blob (encrypted) and its MAC[32]. The peer proves first: nothing
 * keyed with the secret goes to a client that has not proved it knows it. */
#define HELLO_BYTES (8 + 16 + NONCE_BYTES)
#define CHALLENGE_BYTES (8 + 4 + NONCE_BYTES)
#define VERDICT_BYTES (8 + 4 + 4)
enum verdict { VERDICT_ACCEPTED = 0, VERDICT_REFUSED = 1, VERDICT_SERVED = 2 };

/* File: magic version world length pid origin[64] tag[64], the blob, MAC[32] over both. */
#define ORIGIN_BYTES 64
#define TAG_BYTES 64
#define FILE_HEADER_BYTES (8 + 4 + 12 + ORIGIN_BYTES + TAG_BYTES)

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Writes magic and version; returns the position after them. */
static uint8_t *put_magic(uint8_t *p)
{
    memcpy(p, magic, sizeof(magic));
    put_u32(p + 8, RENDEZVOUS_VERSION);
    return p + 12;
}

/* Whether p starts with our magic and version. */
static bool has_magic(const uint8_t *p) { return !memcmp(p, magic, sizeof(magic)) && get_u32(p + 8) == RENDEZVOUS_VERSION; }

/* --- spec strings ------------------------------------------------------------------ */

static int spec_error(const char *text, const char *what)
{
    return dcp_error(DCP_EINVAL, "rendezvous spec '%s': %s (expected file:PATH or tcp:HOST:PORT)", text, what);
}

static int copy_field(char *dst, size_t cap, const char *src, size_t len, const char *text, const char *what)
{
    if (!len)
        return spec_error(text, what);
    if (len >= cap)
        return dcp_error(DCP_EINVAL, "rendezvous spec '%.60s...': longer than %zu bytes", text, cap - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
    return DCP_OK;
}

static int parse_port(const char *s, const char *text, uint16_t *port)
{
    unsigned long v = 0;
    if (!*s)
        return spec_error(text, "missing port");
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || (v = v * 10 + (unsigned long)(*p - '0')) > 65535)
            return spec_error(text, "port must be a decimal number 0..65535");
    }
    *port = (uint16_t)v;
    return DCP_OK;
}

static int parse_tcp(const char *text, const char *rest, struct dcp_rendezvous_spec *out)
{
    const char *host = rest, *host_end, *colon;
    if (*rest == '[') {
        host = rest + 1;
        host_end = strchr(host, ']');
        if (!host_end)
            return spec_error(text, "missing ']' after an IPv6 address");
        colon = host_end + 1;
        if (*colon != ':')
            return spec_error(text, "missing ':PORT' after ']'");
    } else {
        colon = strrchr(rest, ':');
        if (!colon)
            return spec_error(text, "missing ':PORT'");
        host_end = colon;
        if (memchr(rest, ':', (size_t)(colon - rest)))
            return spec_error(text, "an IPv6 address needs brackets: tcp:[ADDR]:PORT");
    }
    int st = copy_field(out->host, sizeof(out->host), host, (size_t)(host_end - host), text, "empty host");
    return st ? st : parse_port(colon + 1, text, &out->port);
}

int dcp_rendezvous_parse_spec(const char *text, struct dcp_rendezvous_spec *out)
{
    memset(out, 0, sizeof(*out));
    if (!text || !*text)
        return spec_error(text ? text : "(null)", "empty");
    if (!strncmp(text, "file:", 5)) {
        out->kind = DCP_RENDEZVOUS_FILE;
        const size_t n = strlen(text + 5);
        if (n && text[5 + n - 1] == '/')
            return spec_error(text, "the path names a directory, not a file in it");
        return copy_field(out->path, sizeof(out->path), text + 5, n, text, "empty path");
    }
    if (!strncmp(text, "tcp:", 4)) {
        out->kind = DCP_RENDEZVOUS_TCP;
        return parse_tcp(text, text + 4, out);
    }
    return spec_error(text, "unknown scheme");
}

/* --- handle ------------------------------------------------------------------------ */

#define MAX_LISTEN 4 /* addresses of HOST rank 0 listens on */

struct dcp_rendezvous {
    struct dcp_rendezvous_spec spec;
    char *text;              /* the spec string, for messages */
    uint32_t rank, world_size;
    char tag[TAG_BYTES];
    uint8_t secret[DCP_RENDEZVOUS_MAX_SECRET];
    size_t secret_len;
    double timeout_s;
    int listen_fd[MAX_LISTEN]; /* TCP rank 0; -1 otherwise */
    size_t num_listen;
    uint16_t port;           /* port the listening sockets are bound to */
    bool note_weak;          /* the waiting rank's note says little (a refused connect, a timeout) */
};

/* An attempt that may succeed later: the caller waits and tries again. */
#define RETRY 1

/* Rank 0 handshakes with many peers at once; one that connects and then stalls is
 * dropped after this long. */
#define PEER_IO_LIMIT_S 5.0

/* A rendezvous file older than the timeout plus this is stale: rank 0 waits at most
 * the timeout for its peers (in NCCL's bootstrap), and clocks of a cluster differ by
 * less than this. */
#define STALE_SLACK_S 60.0

static int ms_until(double deadline)
{
    const double left = deadline - dcp_now_seconds();
    return left <= 0 ? 0 : (int)DCP_MIN(ceil(left * 1000.0), (double)INT_MAX);
}

static void sleep_seconds(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Fills buf with n bytes from the kernel's random number generator. */
static int random_bytes(void *buf, size_t n)
{
    for (uint8_t *p = buf; n;) {
        ssize_t k = getrandom(p, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return dcp_error(DCP_EIO, "rendezvous: no random numbers (getrandom: %s)", strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return DCP_OK;
}

static int check_params(const struct dcp_rendezvous_params *p)
{
    if (!p->world_size || p->rank >= p->world_size)
        return dcp_error(DCP_EINVAL, "rendezvous: rank %u of world size %u", p->rank, p->world_size);
    if (!p->tag || !*p->tag)
        return dcp_error(DCP_EINVAL, "rendezvous: no job tag; every run needs its own (DCP_JOB_TAG, or the launcher's"
                         " job id such as SLURM_JOB_ID), so that a file or server of another run is never taken");
    if (strlen(p->tag) > DCP_RENDEZVOUS_MAX_TAG)
        return dcp_error(DCP_EINVAL, "rendezvous: job tag longer than %d bytes", DCP_RENDEZVOUS_MAX_TAG);
    if (p->secret_len && (!p->secret || p->secret_len < DCP_RENDEZVOUS_MIN_SECRET ||
                          p->secret_len > DCP_RENDEZVOUS_MAX_SECRET))
        return dcp_error(DCP_EINVAL, "rendezvous: job secret of %zu bytes (must be %d..%d bytes)", p->secret_len,
                         DCP_RENDEZVOUS_MIN_SECRET, DCP_RENDEZVOUS_MAX_SECRET);
    if (!(p->timeout_s >= 0) || !isfinite(p->timeout_s))
        return dcp_error(DCP_EINVAL, "rendezvous: timeout %g s (must be finite and >= 0)", p->timeout_s);
    return DCP_OK;
}

/* A listening socket on one address; -1 with errno set on failure. */
static int listen_on(const struct addrinfo *ai, uint16_t port)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -1;
    struct sockaddr_storage addr;
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    if (addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&addr)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)&addr)->sin_port = htons(port);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) /* this address only, not IPv4 through mapped addresses */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (!bind(fd, (struct sockaddr *)&addr, ai->ai_addrlen) && !listen(fd, SOMAXCONN))
        return fd;
    int err = errno;
    close(fd);
    errno = err;
    return -1;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    if (getsockname(fd, (struct sockaddr *)&addr, &len))
        return 0;
    return ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                                            : ((struct sockaddr_in *)&addr)->sin_port);
}

/* Rank 0 of a TCP rendezvous listens on the spec's port at the addresses its host
 * resolves to (several for a name such as localhost), never on every interface.
 * With port 0 it takes one ephemeral port on the first address. An address the
 * machine does not have is skipped; one in use by another process is an error
 * (it could feed peers a forged blob: they would refuse it, but not reach us). */
static int tcp_listen(struct dcp_rendezvous *r)
{
    const struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_family = AF_UNSPEC,
                                   .ai_socktype = SOCK_STREAM};
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(r->spec.host, "0", &hints, &list);
    if (gai)
        return dcp_error(DCP_EINVAL, "rendezvous %s: rank 0 cannot resolve its host '%s' to listen on: %s", r->text,
                         r->spec.host, gai_strerror(gai));
    int st = DCP_OK, err = EADDRNOTAVAIL;
    r->port = r->spec.port;
    for (const struct addrinfo *ai = list; ai && !st && r->num_listen < MAX_LISTEN; ai = ai->ai_next) {
        int fd = listen_on(ai, r->port);
        if (fd < 0 && errno == EADDRINUSE)
            st = dcp_error(DCP_EIO, "rendezvous %s: cannot listen on port %u: %s (another process holds it)",
                           r->text, r->port, strerror(errno));
        if (fd < 0) {
            err = errno;
            continue;
        }
        r->listen_fd[r->num_listen++] = fd;
        if (!r->port)
            r->port = bound_port(fd);
        if (!r->spec.port) /* one ephemeral port, on one address */
            break;
    }
    freeaddrinfo(list);
    if (!st && (!r->num_listen || !r->port))
        st = dcp_error(DCP_EIO, "rendezvous %s: cannot listen on %s port %u: %s", r->text, r->spec.host,
                       r->spec.port, strerror(err));
    return st;
}

int dcp_rendezvous_open(const struct dcp_rendezvous_params *params, struct dcp_rendezvous **out)
{
    *out = NULL;
    int st = check_params(params);
    if (st)
        return st;
    struct dcp_rendezvous *r = calloc(1, sizeof(*r));
    if (!r)
        return dcp_error(DCP_ENOMEM, "rendezvous");
    for (size_t i = 0; i < MAX_LISTEN; i++)
        r->listen_fd[i] = -1;
    r->rank = params->rank;
    r->world_size = params->world_size;
    r->timeout_s = params->timeout_s;
    snprintf(r->tag, sizeof(r->tag), "%s", params->tag);
    if (params->secret_len)
        memcpy(r->secret, params->secret, params->secret_len);
    r->secret_len = params->secret_len;
    st = dcp_rendezvous_parse_spec(params->spec, &r->spec);
    if (!st && !(r->text = dcp_strdup(params->spec)))
        st = dcp_error(DCP_ENOMEM, "rendezvous");
    if (!st && r->spec.kind == DCP_RENDEZVOUS_TCP) {
        if (!r->secret_len)
            st = dcp_error(DCP_EINVAL, "rendezvous %s: TCP needs a job secret known to every rank and nobody else:"
                           " set DCP_RENDEZVOUS_SECRET or DCP_RENDEZVOUS_SECRET_FILE (see docs/rendezvous.md)",
                           r->text);
        else if (r->rank && !r->spec.port)
            st = dcp_error(DCP_EINVAL, "rendezvous %s: rank %u needs rank 0's real port, not 0", r->text, r->rank);
        else if (!r->rank && r->world_size > 1)
            st = tcp_listen(r);
    }
    if (st) {
        dcp_rendezvous_close(&r);
        return st;
    }
    *out = r;
    return DCP_OK;
}

uint16_t dcp_rendezvous_port(const struct dcp_rendezvous *r) { return r->num_listen ? r->port : 0; }

void dcp_rendezvous_close(struct dcp_rendezvous **pr)
{
    struct dcp_rendezvous *r = pr ? *pr : NULL;
    if (!r)
        return;
    for (size_t i = 0; i < r->num_listen; i++)
        close(r->listen_fd[i]);
    free(r->text);
    dcp_wipe(r, sizeof(*r));
    free(r);
    *pr = NULL;
}

/* Records why a TCP attempt failed. A weak note (a refused connect, a transfer cut off
 * by the deadline) says less than what an earlier attempt saw (rank 0 refusing this
 * rank's proof, a server that did not authenticate), so it replaces only an empty or
 * another weak note: the timeout message keeps the cause. */
static void note_failure(struct dcp_rendezvous *r, char *note, size_t ns, bool weak, const char *fmt, ...)
    DCP_PRINTF(5, 6);
static void note_failure(struct dcp_rendezvous *r, char *note, size_t ns, bool weak, const char *fmt, ...)
{
    if (weak && note[0] && !r->note_weak)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note, ns, fmt, ap);
    va_end(ap);
    r->note_weak = weak;
}

/* One try of a waiting rank: DCP_OK (blob filled), RETRY (note says why) or an error. */
typedef int (*attempt_fn)(struct dcp_rendezvous *r, void *blob, size_t size, double deadline, char *note,
                          size_t note_size);

/* Tries until success, an error, or the deadline, sleeping with exponential backoff. */
static int retry_until_deadline(struct dcp_rendezvous *r, attempt_fn attempt, void *blob, size_t size,
                                double max_backoff_s)
{
    const double deadline = dcp_now_seconds() + r->timeout_s;
    char note[400] = "";
    r->note_weak = true;
    for (double backoff = 0.001;; backoff = DCP_MIN(backoff * 2, max_backoff_s)) {
        int st = attempt(r, blob, size, deadline, note, sizeof(note));
        if (st != RETRY)
            return st;
        const double left = deadline - dcp_now_seconds();
        if (left <= 0)
            return dcp_error(DCP_ETIMEOUT, "rendezvous %s: rank %u of %u got no blob with job tag '%s' from rank 0"
                             " within %.2f s; last: %s", r->text, r->rank, r->world_size, r->tag, r->timeout_s,
                             note[0] ? note : "no attempt finished");
        sleep_seconds(DCP_MIN(backoff, left));
    }
}

/* A trusted offer of rank 0 (file or TCP) with our tag: rejects a world size or blob
 * size that differs from ours. */
static int check_offer(const struct dcp_rendezvous *r, uint32_t world, uint32_t length, size_t size)
{
    if (world != r->world_size)
        return dcp_error(DCP_EINVAL, "rendezvous %s: rank 0 runs with world size %u, rank %u with %u",
                         r->text, world, r->rank, r->world_size);
    if (length != size)
        return dcp_error(DCP_EINVAL, "rendezvous %s: rank 0 offers %u bytes, rank %u expects %zu",
                         r->text, length, r->rank, size);
    return DCP_OK;
}

/* --- file transport ---------------------------------------------------------------- */

const char *dcp_rendezvous_private_file_problem(const struct stat *st, char *why, size_t n)
{
    const mode_t type = st->st_mode & S_IFMT;
    if (type != S_IFREG)
        snprintf(why, n, "is not a regular file (%s)", type == S_IFIFO ? "a FIFO" : type == S_IFDIR ? "a directory"
                 : type == S_IFCHR || type == S_IFBLK ? "a device" : type == S_IFSOCK ? "a socket" : "of another type");
    else if (st->st_uid != geteuid())
        snprintf(why, n, "is owned by uid %lu, not by this user (uid %lu)", (unsigned long)st->st_uid,
                 (unsigned long)geteuid());
    else if (st->st_mode & 077)
        snprintf(why, n, "has mode 0%03o, not 0600 (others may read or write it)", (unsigned)(st->st_mode & 0777));
    else
        return NULL;
    return why;
}

static int write_all(int fd, const void *buf, size_t n)
{
    for (const uint8_t *p = buf; n;) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads exactly n bytes; false on a short read or an error. */
static bool read_exact(int fd, void *buf, size_t n)
{
    for (uint8_t *p = buf; n;) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Where a file was written: the host name and the PID namespace, so that a reader
 * can tell whether the writer's pid means anything here. */
static void this_origin(char out[ORIGIN_BYTES])
{
    char host[48] = "?", ns[64] = "";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
    ns[n > 0 ? n : 0] = '\0';
    memset(out, 0, ORIGIN_BYTES);
    snprintf(out, ORIGIN_BYTES, "%s %s", host, ns);
}

/* The MAC of a file: keyed with the job secret (an empty key without one). */
static void file_mac(const struct dcp_rendezvous *r, const uint8_t *hdr, const void *blob, size_t size,
                     uint8_t mac[MAC_BYTES])
{
    struct dcp_hmac m;
    dcp_hmac_init(&m, r->secret, r->secret_len);
    dcp_hmac_update(&m, hdr, FILE_HEADER_BYTES);
    dcp_hmac_update(&m, blob, size);
    dcp_hmac_final(&m, mac);
}

/* The directory of the rendezvous file, opened so that no other user can redirect
 * it (dcp_dir_open_safely: a symbolic link planted in a shared directory would make
 * rank 0 replace a file of the link's choosing), and the file's name in it. Returns
 * the descriptor, or -1 with errno and the reason in dcp_last_error(). */
static int open_file_dir(const struct dcp_rendezvous *r, const char **base)
{
    const char *path = r->spec.path, *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    char dir[sizeof(r->spec.path)];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)DCP_MAX(slash - path, 1) : 1, slash ? path : ".");
    return dcp_dir_open_safely(dir, "rendezvous directory");
}

/* Creates a new file beside the target in directory dirfd, exclusively (never through
 * a link) and readable by this user only: its descriptor in *fd, its name in the
 * directory in *name. */
static int create_temporary(const struct dcp_rendezvous *r, int dirfd, const char *base, char **name, int *fd)
{
    for (int tries = 0; tries < 16; tries++) {
        uint8_t rnd[8];
        int st = random_bytes(rnd, sizeof(rnd));
        if (st)
            return st;
        *name = dcp_asprintf("%s.tmp-%02x%02x%02x%02x%02x%02x%02x%02x", base, rnd[0], rnd[1], rnd[2], rnd[3],
                             rnd[4], rnd[5], rnd[6], rnd[7]);
        if (!*name)
            return dcp_error(DCP_ENOMEM, "rendezvous");
        *fd = openat(dirfd, *name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (*fd >= 0 && fchmod(*fd, 0600) == 0) /* whatever the umask */
            return DCP_OK;
        const int err = errno;
        if (*fd >= 0) {
            close(*fd);
            unlinkat(dirfd, *name, 0);
        }
        if (*fd >= 0 || err != EEXIST)
            st = dcp_error(DCP_EIO, "rendezvous %s: cannot write %s beside %s: %s", r->text, *name, r->spec.path,
                           strerror(err));
        free(*name);
        *name = NULL;
        if (st)
            return st;
    }
    return dcp_error(DCP_EIO, "rendezvous %s: cannot create a temporary file beside it", r->text);
}

static int file_collision(struct dcp_rendezvous *r, int dirfd, const char *base);

/* Rank 0: header, blob and MAC to a new temporary file beside the target, then
 * rename, so readers see either no file, an older file, or the whole new one. */
static int file_publish(struct dcp_rendezvous *r, const void *blob, size_t size)
{
    uint8_t hdr[FILE_HEADER_BYTES] = {0}, mac[MAC_BYTES];
    uint8_t *p = put_magic(hdr);
    put_u32(p, r->world_size);
    put_u32(p + 4, (uint32_t)size);
    put_u32(p + 8, (uint32_t)getpid());
    this_origin((char *)p + 12);
    memcpy(p + 12 + ORIGIN_BYTES, r->tag, TAG_BYTES);
    file_mac(r, hdr, blob, size, mac);
    const char *base;
    const int dirfd = open_file_dir(r, &base);
    if (dirfd < 0)
        return dcp_error(DCP_EIO, "rendezvous %s: cannot write %s: %s", r->text, r->spec.path, dcp_last_error());
    char *tmp = NULL;
    int fd = -1;
    int st = r->secret_len ? DCP_OK : file_collision(r, dirfd, base);
    if (!st)
        st = create_temporary(r, dirfd, base, &tmp, &fd);
    if (st) {
        close(dirfd);
        return st;
    }
    if (write_all(fd, hdr, sizeof(hdr)) || write_all(fd, blob, size) || write_all(fd, mac, sizeof(mac)) || fsync(fd))
        st = dcp_error(DCP_EIO, "rendezvous %s: cannot write %s: %s", r->text, tmp, strerror(errno));
    if (close(fd) && !st)
        st = dcp_error(DCP_EIO, "rendezvous %s: cannot write %s: %s", r->text, tmp, strerror(errno));
    if (!st && renameat(dirfd, tmp, dirfd, base))
        st = dcp_error(DCP_EIO, "rendezvous %s: cannot rename %s: %s", r->text, tmp, strerror(errno));
    if (st)
        unlinkat(dirfd, tmp, 0);
    free(tmp);
    close(dirfd);
    return st;
}

/* Whether the writer of a file is known to be gone: same host and PID namespace,
 * and no such process. */
static bool writer_exited(const uint8_t *origin, uint32_t pid)
{
    char here[ORIGIN_BYTES];
    this_origin(here);
    return !memcmp(here, origin, ORIGIN_BYTES) && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Checks an opened file the way a reader must before believing it: owner, mode,
 * size, age. RETRY with a note when it is not to be trusted (yet). */
static int file_check_stat(struct dcp_rendezvous *r, const struct stat *st, char *note, size_t ns)
{
    const char *path = r->spec.path;
    char why[160];
    if (dcp_rendezvous_private_file_problem(st, why, sizeof(why))) {
        snprintf(note, ns, "%s %s: not trusted", path, why);
        return RETRY;
    }
    if (st->st_size < FILE_HEADER_BYTES + MAC_BYTES ||
        st->st_size > FILE_HEADER_BYTES + DCP_RENDEZVOUS_MAX_BLOB + MAC_BYTES) {
        snprintf(note, ns, "%s is not a rendezvous file (%lld bytes)", path, (long long)st->st_size);
        return RETRY;
    }
    const double age = difftime(time(NULL), st->st_mtime);
    if (age > r->timeout_s + STALE_SLACK_S) {
        snprintf(note, ns, "%s was written %.0f s ago, longer than the timeout allows: stale, ignored", path, age);
        return RETRY;
    }
    return DCP_OK;
}

/* Without a job secret nothing tells two jobs of one tag apart: their peers would take
 * either rank 0's file. Rank 0 refuses to replace a fresh file of its tag whose writer
 * may still run (another process on this host that is alive, or one on another host)
 * instead of letting the jobs mix silently. */
static int file_collision(struct dcp_rendezvous *r, int dirfd, const char *base)
{
    const int fd = dcp_file_openat(dirfd, base, r->spec.path, "rendezvous file",
                                   FILE_HEADER_BYTES + DCP_RENDEZVOUS_MAX_BLOB + MAC_BYTES, DCP_FILE_NOFOLLOW);
    if (fd < 0) {
        dcp_clear_error(); /* no file, or one no peer trusts: nothing to collide with */
        return DCP_OK;
    }
    struct stat st;
    uint8_t hdr[FILE_HEADER_BYTES];
    char note[256], here[ORIGIN_BYTES];
    const bool ours = !fstat(fd, &st) && !file_check_stat(r, &st, note, sizeof(note)) &&
                      read_exact(fd, hdr, sizeof(hdr)) && has_magic(hdr) &&
                      !memcmp(hdr + 12 + 12 + ORIGIN_BYTES, r->tag, TAG_BYTES);
    close(fd);
    if (!ours)
        return DCP_OK;
    const uint8_t *origin = hdr + 24;
    const uint32_t pid = get_u32(hdr + 20);
    this_origin(here);
    if (writer_exited(origin, pid) || (!memcmp(here, origin, ORIGIN_BYTES) && pid == (uint32_t)getpid()))
        return DCP_OK;
    return dcp_error(DCP_EIO, "rendezvous %s: %s holds a file of job tag '%s' written %.0f s ago by pid %u on %.*s,"
                     " which may still run: two jobs with one tag and no job secret would take each other's ids."
                     " Give each job its own DCP_JOB_TAG and a DCP_RENDEZVOUS_SECRET, or remove the file if that job"
                     " has ended", r->text, r->spec.path, r->tag, difftime(time(NULL), st.st_mtime), pid,
                     (int)strcspn((const char *)origin, " "), (const char *)origin);
}

/* Reads a file that passed file_check_stat(): header, tag, writer, sizes, then the
 * blob and its MAC. */
static int file_read_open(int fd, const struct stat *st, struct dcp_rendezvous *r, void *blob, size_t size,
                          char *note, size_t ns)
{
    uint8_t hdr[FILE_HEADER_BYTES], mac[MAC_BYTES], want[MAC_BYTES];
    const char *path = r->spec.path;
    if (!read_exact(fd, hdr, sizeof(hdr)) || !has_magic(hdr)) {
        snprintf(note, ns, "%s is not a rendezvous file of this version", path);
        return RETRY;
    }
    const uint8_t *p = hdr + 12, *origin = p + 12, *tag = origin + ORIGIN_BYTES;
    const uint32_t pid = get_u32(p + 8);
    if (memcmp(tag, r->tag, TAG_BYTES)) {
        snprintf(note, ns, "%s has job tag '%.*s' (an earlier run?): ignored", path, DCP_RENDEZVOUS_MAX_TAG,
                 (const char *)tag);
        return RETRY;
    }
    if (writer_exited(origin, pid)) {
        snprintf(note, ns, "%s was written by pid %u of this host, which has exited: stale, ignored", path, pid);
        return RETRY;
    }
    int status = check_offer(r, get_u32(p), get_u32(p + 4), size);
    if (status)
        return status;
    if (st->st_size != (off_t)(FILE_HEADER_BYTES + size + MAC_BYTES) || !read_exact(fd, blob, size) ||
        !read_exact(fd, mac, sizeof(mac))) {
        snprintf(note, ns, "%s is %lld bytes, not the %zu its header announces", path, (long long)st->st_size,
                 FILE_HEADER_BYTES + size + MAC_BYTES);
        return RETRY;
    }
    file_mac(r, hdr, blob, size, want);
    if (!dcp_mac_equal(mac, want, MAC_BYTES)) {
        snprintf(note, ns, "%s failed its integrity check (written with another job secret, or damaged): not"
                 " trusted", path);
        memset(blob, 0, size);
        return RETRY;
    }
    return DCP_OK;
}

static int file_try_read(struct dcp_rendezvous *r, void *blob, size_t size, double deadline, char *note, size_t ns)
{
    (void)deadline; /* a regular local or shared file does not block for long; a FIFO is refused unopened */
    const char *base;
    const int dirfd = open_file_dir(r, &base);
    if (dirfd < 0) {
        const int err = errno;
        if (err == ENOENT || err == ELOOP || err == EPERM) { /* may appear, or be put right, in time */
            snprintf(note, ns, "%s", dcp_last_error());
            return RETRY;
        }
        return dcp_error(DCP_EIO, "rendezvous %s: %s", r->text, dcp_last_error());
    }
    int fd = dcp_file_openat(dirfd, base, r->spec.path, "rendezvous file",
                             FILE_HEADER_BYTES + DCP_RENDEZVOUS_MAX_BLOB + MAC_BYTES, DCP_FILE_NOFOLLOW);
    const int err = errno;
    close(dirfd);
    if (fd < 0 && err == ENOENT) {
        snprintf(note, ns, "no file %s", r->spec.path);
        return RETRY;
    }
    if (fd < 0 && err == ELOOP) {
        snprintf(note, ns, "%s is a symbolic link: not trusted", r->spec.path);
        return RETRY;
    }
    if (fd < 0 && (err == EINVAL || err == EFBIG)) { /* not a regular file, or far too large */
        snprintf(note, ns, "%s: not trusted", dcp_last_error());
        return RETRY;
    }
    if (fd < 0)
        return dcp_error(DCP_EIO, "rendezvous %s: cannot open: %s", r->text, strerror(err));
    struct stat st;
    int rc = fstat(fd, &st) ? dcp_error(DCP_EIO, "rendezvous %s: cannot stat: %s", r->text, strerror(errno))
                            : file_check_stat(r, &st, note, ns);
    if (!rc)
        rc = file_read_open(fd, &st, r, blob, size, note, ns);
    close(fd);
    return rc;
}

/* --- TCP transport ----------------------------------------------------------------- */

static const char reason_timed_out[] = "timed out";

/* Sends (or receives) exactly n bytes on a non-blocking socket before deadline.
 * Returns NULL or a short reason (reason_timed_out when the deadline passed). */
static const char *transfer_all(int fd, void *buf, size_t n, bool sending, double deadline)
{
    for (uint8_t *p = buf; n;) {
        ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0)
            return "connection closed";
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return strerror(errno);
        struct pollfd pfd = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
        if (poll(&pfd, 1, ms_until(deadline)) == 0)
            return reason_timed_out;
    }
    return NULL;
}

/* The session key of one connection: both nonces, the hello's claims and the job
 * tag, keyed with the job secret. Everything after the hello is derived from it. */
static void session_key(const struct dcp_rendezvous *r, const uint8_t hello[HELLO_BYTES],
                        const uint8_t server_nonce[NONCE_BYTES], uint8_t key[MAC_BYTES])
{
    static const char label[] = "dcp-rendezvous v2 session";
    uint8_t tag_len[4];
    put_u32(tag_len, (uint32_t)strlen(r->tag));
    struct dcp_hmac m;
    dcp_hmac_init(&m, r->secret, r->secret_len);
    dcp_hmac_update(&m, label, sizeof(label));
    dcp_hmac_update(&m, tag_len, sizeof(tag_len));
    dcp_hmac_update(&m, r->tag, strlen(r->tag));
    dcp_hmac_update(&m, hello, HELLO_BYTES);
    dcp_hmac_update(&m, server_nonce, NONCE_BYTES);
    dcp_hmac_final(&m, key);
}

/* HMAC(key, label || data): the proofs, the keystream blocks and the blob's MAC. */
static void keyed(const uint8_t key[MAC_BYTES], const char *label, const void *data, size_t n, uint8_t out[MAC_BYTES])
{
    struct dcp_hmac m;
    dcp_hmac_init(&m, key, MAC_BYTES);
    dcp_hmac_update(&m, label, strlen(label) + 1);
    dcp_hmac_update(&m, data, n);
    dcp_hmac_final(&m, out);
}

/* XORs n bytes with the connection's keystream (HMAC in counter mode). */
static void apply_keystream(const uint8_t key[MAC_BYTES], uint8_t *buf, size_t n)
{
    uint8_t block[MAC_BYTES], counter[4];
    for (size_t off = 0, i = 0; off < n; off += MAC_BYTES, i++) {
        put_u32(counter, (uint32_t)i);
        keyed(key, "stream", counter, sizeof(counter), block);
        for (size_t k = 0; k < MAC_BYTES && off + k < n; k++)
            buf[off + k] ^= block[k];
    }
    dcp_wipe(block, sizeof(block));
}

/* Connections rank 0 handshakes with at once; more wait in the listen queue. */
#define MAX_HANDSHAKES 64

enum hs_phase { HS_HELLO, HS_CHALLENGE, HS_PROOF, HS_VERDICT };

/* Rank 0's side of one peer's handshake, advanced as the socket allows, so that a peer
 * that stalls holds up nobody else (docs/rendezvous.md). */
struct handshake {
    int fd;                              /* -1: a free slot */
    enum hs_phase phase;
    size_t done;                         /* bytes of the phase's message moved so far */
    double deadline;                     /* dropped then */
    uint32_t rank;                       /* claimed in the hello */
    bool accepted;                       /* the verdict carries the blob */
    uint8_t hello[HELLO_BYTES];
    uint8_t challenge[CHALLENGE_BYTES];
    uint8_t proof[MAC_BYTES];
    uint8_t key[MAC_BYTES];
    uint8_t *verdict;                    /* verdict [rank 0's proof, blob, MAC] */
    size_t verdict_len;
};

static void hs_close(struct handshake *h)
{
    if (h->fd >= 0)
        close(h->fd);
    free(h->verdict);
    dcp_wipe(h->key, sizeof(h->key));
    memset(h, 0, sizeof(*h));
    h->fd = -1;
}

/* Moves bytes of buf[*done, len) without blocking. NULL (on progress or when the socket
 * would block) or why the connection failed. */
static const char *hs_io(int fd, void *buf, size_t len, size_t *done, bool sending)
{
    while (*done < len) {
        uint8_t *p = (uint8_t *)buf + *done;
        const ssize_t k = sending ? send(fd, p, len - *done, MSG_NOSIGNAL) : recv(fd, p, len - *done, 0);
        if (k > 0)
            *done += (size_t)k;
        else if (k == 0)
            return "connection closed";
        else if (errno == EAGAIN || errno == EWOULDBLOCK)
            return NULL;
        else if (errno != EINTR)
            return strerror(errno);
    }
    return NULL;
}

/* The hello arrived: sends nothing unless its claims fit (rank in range and not served
 * yet, our world and blob size); else prepares the challenge, a fresh nonce. */
static int hs_hello(struct dcp_rendezvous *r, struct handshake *h, size_t size, const bool *served, char *note,
                    size_t ns)
{
    const uint8_t *hello = h->hello;
    const uint32_t rank = get_u32(hello + 12), world = get_u32(hello + 16), length = get_u32(hello + 20);
    if (!has_magic(hello)) {
        snprintf(note, ns, "a connection sent no rendezvous hello of this version");
        return -1;
    }
    if (world != r->world_size || length != size || !rank || rank >= r->world_size || served[rank]) {
        snprintf(note, ns, "refused a peer claiming rank %u of world size %u with a %u-byte blob%s", rank, world,
                 length, rank && rank < r->world_size && served[rank] ? " (that rank is served already)" : "");
        return -1;
    }
    h->rank = rank;
    uint8_t *nonce = put_magic(h->challenge);
    if (random_bytes(nonce, NONCE_BYTES)) {
        snprintf(note, ns, "%s", dcp_last_error());
        return -1;
    }
    session_key(r, hello, nonce, h->key);
    return 0;
}

/* The peer's proof arrived: the verdict refuses a peer that does not know the job secret
 * and tag (or whose rank was served meanwhile) and otherwise carries rank 0's proof and
 * the blob, encrypted and MACed with the session key. */
static int hs_proof(struct handshake *h, const void *blob, size_t size, const bool *served, char *note, size_t ns)
{
    uint8_t want[MAC_BYTES];
    keyed(h->key, "peer", NULL, 0, want);
    const bool proven = dcp_mac_equal(h->proof, want, MAC_BYTES);
    const enum verdict v = !proven ? VERDICT_REFUSED : served[h->rank] ? VERDICT_SERVED : VERDICT_ACCEPTED;
    h->accepted = v == VERDICT_ACCEPTED;
    h->verdict_len = VERDICT_BYTES + (h->accepted ? MAC_BYTES + size + MAC_BYTES : 0);
    h->verdict = malloc(h->verdict_len);
    if (!h->verdict) {
        snprintf(note, ns, "out of memory");
        return -1;
    }
    uint8_t *p = put_magic(h->verdict);
    put_u32(p, v);
    if (h->accepted) {
        uint8_t *msg = p + 4 + MAC_BYTES;
        keyed(h->key, "rank 0", NULL, 0, p + 4);
        memcpy(msg, blob, size);
        apply_keystream(h->key, msg, size);
        keyed(h->key, "blob", msg, size, msg + size);
    } else {
        snprintf(note, ns, "a peer claiming rank %u %s: refused", h->rank,
                 proven ? "came after that rank was served" : "does not know the job secret and tag");
    }
    dcp_wipe(h->key, sizeof(h->key));
    return 0;
}

/* Advances h as far as its socket allows: 1 when the peer got the blob, -1 when the
 * handshake ended otherwise (note says why), 0 to wait for the socket. */
static int hs_step(struct dcp_rendezvous *r, struct handshake *h, const void *blob, size_t size, const bool *served,
                   char *note, size_t ns)
{
    for (;;) {
        uint8_t *const bufs[] = {h->hello, h->challenge, h->proof, h->verdict};
        const size_t lens[] = {HELLO_BYTES, CHALLENGE_BYTES, MAC_BYTES, h->verdict_len};
        const bool sending = h->phase == HS_CHALLENGE || h->phase == HS_VERDICT;
        const char *why = hs_io(h->fd, bufs[h->phase], lens[h->phase], &h->done, sending);
        if (why) {
            if (h->phase == HS_HELLO)
                snprintf(note, ns, "a connection sent no rendezvous hello (%s)", why);
            else
                snprintf(note, ns, "a peer claiming rank %u failed: %s", h->rank, why);
            return -1;
        }
        if (h->done < lens[h->phase])
            return 0;
        h->done = 0;
        int st = 0;
        switch (h->phase) {
        case HS_HELLO: st = hs_hello(r, h, size, served, note, ns); break;
        case HS_CHALLENGE: break;
        case HS_PROOF: st = hs_proof(h, blob, size, served, note, ns); break;
        case HS_VERDICT: return h->accepted ? 1 : -1;
        }
        if (st)
            return st;
        h->phase++;
    }
}

/* Lists up to a few ranks that have not arrived, for the timeout message. */
static void list_missing(const bool *seen, uint32_t world, char *out, size_t cap)
{
    size_t used = 0;
    uint32_t listed = 0;
    out[0] = '\0';
    for (uint32_t k = 1; k < world && used < cap; k++) {
        if (seen[k])
            continue;
        if (listed++ == 8) {
            snprintf(out + used, cap - used, " ...");
            break;
        }
        used += (size_t)snprintf(out + used, cap - used, " %u", k);
    }
}

/* Accepts the waiting connections into free handshake slots. */
static void accept_peers(struct dcp_rendezvous *r, int lfd, struct handshake *hs, double deadline)
{
    for (size_t i = 0; i < MAX_HANDSHAKES; i++) {
        if (hs[i].fd >= 0)
            continue;
        const int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* none left, or the peer gave up before we accepted it */
        hs[i].fd = fd;
        hs[i].deadline = DCP_MIN(deadline, dcp_now_seconds() + PEER_IO_LIMIT_S);
    }
    (void)r;
}

/* Rank 0: handshakes with every connection at once until each of ranks 1..world-1 has
 * the blob. */
static int tcp_serve(struct dcp_rendezvous *r, const void *blob, size_t size)
{
    const double deadline = dcp_now_seconds() + r->timeout_s;
    bool *seen = calloc(r->world_size, sizeof(*seen));
    struct handshake *hs = calloc(MAX_HANDSHAKES, sizeof(*hs));
    if (!seen || !hs) {
        free(seen);
        free(hs);
        return dcp_error(DCP_ENOMEM, "rendezvous");
    }
    for (size_t i = 0; i < MAX_HANDSHAKES; i++)
        hs[i].fd = -1;
    char note[320] = "";
    uint32_t arrived = 0;
    int st = DCP_OK;
    struct pollfd pfd[MAX_LISTEN + MAX_HANDSHAKES];
    struct handshake *polled[MAX_LISTEN + MAX_HANDSHAKES];
    while (arrived < r->world_size - 1) {
        size_t n = 0, active = 0;
        double wake = deadline;
        for (size_t i = 0; i < MAX_HANDSHAKES; i++) {
            if (hs[i].fd < 0)
                continue;
            const bool out = hs[i].phase == HS_CHALLENGE || hs[i].phase == HS_VERDICT;
            polled[n] = &hs[i];
            pfd[n++] = (struct pollfd){hs[i].fd, (short)(out ? POLLOUT : POLLIN), 0};
            wake = DCP_MIN(wake, hs[i].deadline);
            active++;
        }
        const size_t first_listen = n;
        for (size_t i = 0; active < MAX_HANDSHAKES && i < r->num_listen; i++)
            pfd[n++] = (struct pollfd){r->listen_fd[i], POLLIN, 0};
        const int ready = poll(pfd, n, ms_until(wake));
        if (ready < 0 && errno != EINTR) {
            st = dcp_error(DCP_EIO, "rendezvous %s: poll: %s", r->text, strerror(errno));
            break;
        }
        const double now = dcp_now_seconds();
        for (size_t k = 0; k < first_listen; k++) {
            struct handshake *h = polled[k];
            int done = 0;
            if (ready > 0 && pfd[k].revents)
                done = hs_step(r, h, blob, size, seen, note, sizeof(note));
            if (!done && now >= h->deadline) {
                snprintf(note, sizeof(note), "a %s stalled for %.0f s: dropped", h->phase == HS_HELLO ? "connection"
                         : "peer claiming a rank", PEER_IO_LIMIT_S);
                done = -1;
            }
            if (done > 0 && !seen[h->rank]) {
                seen[h->rank] = true;
                arrived++;
            }
            if (done)
                hs_close(h);
        }
        for (size_t k = first_listen; ready > 0 && k < n; k++)
            if (pfd[k].revents & POLLIN)
                accept_peers(r, pfd[k].fd, hs, deadline);
        if (arrived < r->world_size - 1 && now >= deadline) {
            char missing[96];
            list_missing(seen, r->world_size, missing, sizeof(missing));
            st = dcp_error(DCP_ETIMEOUT, "rendezvous %s: %u of %u peers arrived within %.2f s (missing ranks:%s)%s%s",
                           r->text, arrived, r->world_size - 1, r->timeout_s, missing, *note ? "; last: " : "",
                           note);
            break;
        }
    }
    for (size_t i = 0; i < MAX_HANDSHAKES; i++)
        hs_close(&hs[i]);
    free(hs);
    free(seen);
    return st;
}

/* Connects to one address before deadline; -1 with errno set on failure. */
static int connect_before(const struct addrinfo *ai, double deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -1;
    if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
        return fd;
    int err = errno;
    if (err == EINPROGRESS) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        socklen_t len = sizeof(err);
        if (poll(&pfd, 1, ms_until(deadline)) <= 0)
            err = ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
            err = errno;
        if (!err)
            return fd;
    }
    close(fd);
    errno = err;
    return -1;
}

/* A peer's handshake over one connection: hello out; challenge in; proof out; the
 * verdict in, then rank 0's proof checked and the blob checked and decrypted. */
static int tcp_request(struct dcp_rendezvous *r, int fd, void *blob, size_t size, double deadline, char *note,
                       size_t ns)
{
    uint8_t hello[HELLO_BYTES], challenge[CHALLENGE_BYTES], verdict[VERDICT_BYTES], key[MAC_BYTES],
        want[MAC_BYTES];
    uint8_t *p = put_magic(hello);
    put_u32(p, r->rank);
    put_u32(p + 4, r->world_size);
    put_u32(p + 8, (uint32_t)size);
    int st = random_bytes(p + 12, NONCE_BYTES);
    if (st)
        return st;
    const char *why = transfer_all(fd, hello, sizeof(hello), true, deadline);
    if (!why)
        why = transfer_all(fd, challenge, sizeof(challenge), false, deadline);
    if (why && !strcmp(why, "connection closed")) {
        note_failure(r, note, ns, false, "rank 0 at %s:%u closed the connection without a challenge: it refuses "
                     "rank %u of world size %u with a %zu-byte blob (another process took that rank, or the sizes "
                     "differ)", r->spec.host, r->spec.port, r->rank, r->world_size, size);
        return RETRY;
    }
    if (why) {
        note_failure(r, note, ns, why == reason_timed_out, "exchange with rank 0: %s", why);
        return RETRY;
    }
    if (!has_magic(challenge)) {
        note_failure(r, note, ns, false, "the server at %s:%u is not a rendezvous rank 0 of this version: ignored",
                     r->spec.host, r->spec.port);
        return RETRY;
    }
    session_key(r, hello, challenge + 12, key);
    keyed(key, "peer", NULL, 0, want);
    why = transfer_all(fd, want, sizeof(want), true, deadline);
    if (!why)
        why = transfer_all(fd, verdict, sizeof(verdict), false, deadline);
    const enum verdict v = why ? VERDICT_REFUSED : (enum verdict)get_u32(verdict + 12);
    if (!why && (!has_magic(verdict) || v != VERDICT_ACCEPTED)) {
        dcp_wipe(key, sizeof(key));
        if (has_magic(verdict) && v == VERDICT_REFUSED)
            note_failure(r, note, ns, false, "rank 0 at %s:%u refused this rank's proof: the job secret or tag "
                         "('%s') of rank %u differs from rank 0's", r->spec.host, r->spec.port, r->tag, r->rank);
        else if (has_magic(verdict) && v == VERDICT_SERVED)
            note_failure(r, note, ns, false, "rank 0 at %s:%u served rank %u already (another process took that "
                         "rank)", r->spec.host, r->spec.port, r->rank);
        else
            note_failure(r, note, ns, false, "the server at %s:%u sent no verdict of this version: ignored",
                         r->spec.host, r->spec.port);
        return RETRY;
    }
    if (!why)
        why = transfer_all(fd, want, sizeof(want), false, deadline);
    uint8_t proof[MAC_BYTES];
    keyed(key, "rank 0", NULL, 0, proof);
    if (!why && !dcp_mac_equal(want, proof, MAC_BYTES)) {
        note_failure(r, note, ns, false, "the server at %s:%u did not authenticate as rank 0 of this job (a process "
                     "squatting on the port, or rank 0 of another job): ignored", r->spec.host, r->spec.port);
        dcp_wipe(key, sizeof(key));
        return RETRY;
    }
    if (!why)
        why = transfer_all(fd, blob, size, false, deadline);
    if (!why)
        why = transfer_all(fd, want, sizeof(want), false, deadline);
    if (why) {
        dcp_wipe(key, sizeof(key));
        note_failure(r, note, ns, why == reason_timed_out, "exchange with rank 0: %s", why);
        return RETRY;
    }
    uint8_t mac[MAC_BYTES];
    keyed(key, "blob", blob, size, mac);
    st = dcp_mac_equal(mac, want, MAC_BYTES) ? DCP_OK : RETRY;
    if (!st)
        apply_keystream(key, blob, size);
    else
        note_failure(r, note, ns, false, "the blob from %s:%u failed its integrity check", r->spec.host,
                     r->spec.port);
    dcp_wipe(key, sizeof(key));
    return st;
}

/* One attempt: each address of the host in turn, until one serves us. */
static int tcp_try_fetch(struct dcp_rendezvous *r, void *blob, size_t size, double deadline, char *note, size_t ns)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", r->spec.port);
    const struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(r->spec.host, port, &hints, &list);
    if (gai == EAI_AGAIN) {
        note_failure(r, note, ns, true, "resolving %s: %s", r->spec.host, gai_strerror(gai));
        return RETRY;
    }
    if (gai)
        return dcp_error(DCP_EINVAL, "rendezvous %s: cannot resolve host '%s': %s", r->text, r->spec.host,
                         gai_strerror(gai));
    int st = RETRY;
    for (const struct addrinfo *ai = list; ai && st == RETRY; ai = ai->ai_next) {
        int fd = connect_before(ai, deadline);
        if (fd < 0) {
            note_failure(r, note, ns, true, "connecting to %s:%s: %s", r->spec.host, port,
                         strerror(errno));
            continue;
        }
        st = tcp_request(r, fd, blob, size, deadline, note, ns);
        close(fd);
    }
    freeaddrinfo(list);
    return st;
}

/* --- exchange ---------------------------------------------------------------------- */

/* Backoff caps: a shared file system is cheap to poll; a refused connect is cheaper still
 * but keeps rank 0's accept queue free of churn. */
#define FILE_MAX_BACKOFF_S 0.1
#define TCP_MAX_BACKOFF_S 0.5

int dcp_rendezvous_exchange(struct dcp_rendezvous *r, void *blob, size_t size)
{
    if (size > DCP_RENDEZVOUS_MAX_BLOB || (size && !blob))
        return dcp_error(DCP_EINVAL, "rendezvous %s: blob of %zu bytes (at most %u, non-NULL)", r->text, size,
                         DCP_RENDEZVOUS_MAX_BLOB);
    const bool file = r->spec.kind == DCP_RENDEZVOUS_FILE;
    if (r->rank == 0) {
        if (file)
            return file_publish(r, blob, size);
        return r->world_size > 1 ? tcp_serve(r, blob, size) : DCP_OK;
    }
    return file ? retry_until_deadline(r, file_try_read, blob, size, FILE_MAX_BACKOFF_S)
                : retry_until_deadline(r, tcp_try_fetch, blob, size, TCP_MAX_BACKOFF_S);
}

int dcp_rendezvous_broadcast(const struct dcp_rendezvous_params *params, void *blob, size_t size)
{
    struct dcp_rendezvous *r = NULL;
    int st = dcp_rendezvous_open(params, &r);
    if (!st)
        st = dcp_rendezvous_exchange(r, blob, size);
    dcp_rendezvous_close(&r);
    return st;
}
