/* rendezvous.c: rank 0 hands a small blob to every rank, through a shared file or TCP. */
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

/* --- wire format: the same header in the file, in a peer's hello and in rank 0's reply --- */

#define HEADER_BYTES 88
#define TAG_BYTES 64
#define RENDEZVOUS_VERSION 1u
static const char header_magic[8] = {'D', 'C', 'P', '-', 'R', 'D', 'Z', 'V'};

/* magic[8] version rank world length (big-endian u32) tag[64] */
struct header {
    uint32_t rank;   /* hello: the peer's rank; file and reply: 0 */
    uint32_t world;  /* sender's world size */
    uint32_t length; /* blob bytes that follow (0 in a hello) */
    char tag[TAG_BYTES];
};

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

static void header_encode(const struct header *h, uint8_t out[HEADER_BYTES])
{
    memcpy(out, header_magic, sizeof(header_magic));
    put_u32(out + 8, RENDEZVOUS_VERSION);
    put_u32(out + 12, h->rank);
    put_u32(out + 16, h->world);
    put_u32(out + 20, h->length);
    memcpy(out + 24, h->tag, TAG_BYTES);
}

/* Decodes a header; false when it is not one of ours (magic or version). */
static bool header_decode(const uint8_t in[HEADER_BYTES], struct header *h)
{
    if (memcmp(in, header_magic, sizeof(header_magic)) || get_u32(in + 8) != RENDEZVOUS_VERSION)
        return false;
    h->rank = get_u32(in + 12);
    h->world = get_u32(in + 16);
    h->length = get_u32(in + 20);
    memcpy(h->tag, in + 24, TAG_BYTES);
    h->tag[TAG_BYTES - 1] = '\0';
    return true;
}

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
        return copy_field(out->path, sizeof(out->path), text + 5, strlen(text + 5), text, "empty path");
    }
    if (!strncmp(text, "tcp:", 4)) {
        out->kind = DCP_RENDEZVOUS_TCP;
        return parse_tcp(text, text + 4, out);
    }
    return spec_error(text, "unknown scheme");
}

/* --- handle ------------------------------------------------------------------------ */

struct dcp_rendezvous {
    struct dcp_rendezvous_spec spec;
    char *text;              /* the spec string, for messages */
    uint32_t rank, world_size;
    char tag[TAG_BYTES];
    double timeout_s;
    int listen_fd;           /* TCP rank 0; -1 otherwise */
    uint16_t port;           /* port listen_fd is bound to */
};

/* An attempt that may succeed later: the caller waits and tries again. */
#define RETRY 1

/* Rank 0 serves peers one at a time, so one that connects and then stalls may hold
 * it up for at most this long. */
#define PEER_IO_LIMIT_S 5.0

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

static int check_params(const struct dcp_rendezvous_params *p)
{
    if (!p->world_size || p->rank >= p->world_size)
        return dcp_error(DCP_EINVAL, "rendezvous: rank %u of world size %u", p->rank, p->world_size);
    if (p->tag && strlen(p->tag) > DCP_RENDEZVOUS_MAX_TAG)
        return dcp_error(DCP_EINVAL, "rendezvous: job tag longer than %d bytes", DCP_RENDEZVOUS_MAX_TAG);
    if (!(p->timeout_s >= 0) || !isfinite(p->timeout_s))
        return dcp_error(DCP_EINVAL, "rendezvous: timeout %g s (must be finite and >= 0)", p->timeout_s);
    return DCP_OK;
}

/* A listening socket on one wildcard address; -1 with errno set on failure. */
static int listen_on(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -1;
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) /* dual stack: IPv4 peers arrive as mapped addresses */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, SOMAXCONN))
        return fd;
    int err = errno;
    close(fd);
    errno = err;
    return -1;
}

/* Rank 0 of a TCP rendezvous listens on the spec's port on every interface: on the
 * IPv6 wildcard if the host has IPv6 (it also takes IPv4), else on the IPv4 one. */
static int tcp_listen(struct dcp_rendezvous *r)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", r->spec.port);
    const struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(NULL, port, &hints, &list);
    if (gai)
        return dcp_error(DCP_EIO, "rendezvous %s: no address to listen on: %s", r->text, gai_strerror(gai));
    static const int families[] = {AF_INET6, AF_INET};
    int err = EAFNOSUPPORT;
    for (size_t f = 0; f < DCP_ARRAY_SIZE(families) && r->listen_fd < 0; f++)
        for (const struct addrinfo *ai = list; ai && r->listen_fd < 0; ai = ai->ai_next)
            if (ai->ai_family == families[f] && (r->listen_fd = listen_on(ai)) < 0)
                err = errno;
    freeaddrinfo(list);
    if (r->listen_fd < 0)
        return dcp_error(DCP_EIO, "rendezvous %s: cannot listen on port %s: %s", r->text, port, strerror(err));
    struct sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    if (getsockname(r->listen_fd, (struct sockaddr *)&addr, &len))
        return dcp_error(DCP_EIO, "rendezvous %s: getsockname: %s", r->text, strerror(errno));
    r->port = ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                                                : ((struct sockaddr_in *)&addr)->sin_port);
    return DCP_OK;
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
    r->listen_fd = -1;
    r->rank = params->rank;
    r->world_size = params->world_size;
    r->timeout_s = params->timeout_s;
    snprintf(r->tag, sizeof(r->tag), "%s", params->tag ? params->tag : "");
    st = dcp_rendezvous_parse_spec(params->spec, &r->spec);
    if (!st && !(r->text = dcp_strdup(params->spec)))
        st = dcp_error(DCP_ENOMEM, "rendezvous");
    if (!st && r->spec.kind == DCP_RENDEZVOUS_TCP) {
        if (r->rank && !r->spec.port)
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

uint16_t dcp_rendezvous_port(const struct dcp_rendezvous *r) { return r->listen_fd >= 0 ? r->port : 0; }

void dcp_rendezvous_close(struct dcp_rendezvous **pr)
{
    struct dcp_rendezvous *r = pr ? *pr : NULL;
    if (!r)
        return;
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    free(r->text);
    free(r);
    *pr = NULL;
}

/* The header rank 0 sends (file or reply) or a peer sends (hello). */
static struct header my_header(const struct dcp_rendezvous *r, uint32_t length)
{
    struct header h = {.rank = r->rank, .world = r->world_size, .length = length};
    memcpy(h.tag, r->tag, TAG_BYTES);
    return h;
}

/* A header from rank 0 (file or reply) that carries our tag: rejects a world size
 * or blob size that differs from ours. */
static int check_offer(const struct dcp_rendezvous *r, const struct header *h, size_t size)
{
    if (h->world != r->world_size)
        return dcp_error(DCP_EINVAL, "rendezvous %s: rank 0 runs with world size %u, rank %u with %u",
                         r->text, h->world, r->rank, r->world_size);
    if (h->length != size)
        return dcp_error(DCP_EINVAL, "rendezvous %s: rank 0 offers %u bytes, rank %u expects %zu",
                         r->text, h->length, r->rank, size);
    return DCP_OK;
}

/* Records why an attempt failed. An attempt cut off by the deadline says less than
 * what an earlier attempt saw (a foreign tag, a refusal), so it only fills an empty note. */
static void note_failure(char *note, size_t ns, bool cut_off, const char *fmt, ...) DCP_PRINTF(4, 5);
static void note_failure(char *note, size_t ns, bool cut_off, const char *fmt, ...)
{
    if (cut_off && note[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note, ns, fmt, ap);
    va_end(ap);
}

/* One try of a waiting rank: DCP_OK (blob filled), RETRY (note says why) or an error. */
typedef int (*attempt_fn)(struct dcp_rendezvous *r, void *blob, size_t size, double deadline, char *note,
                          size_t note_size);

/* Tries until success, an error, or the deadline, sleeping with exponential backoff. */
static int retry_until_deadline(struct dcp_rendezvous *r, attempt_fn attempt, void *blob, size_t size,
                                double max_backoff_s)
{
    const double deadline = dcp_now_seconds() + r->timeout_s;
    char note[320] = "";
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

/* --- file transport ---------------------------------------------------------------- */

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

/* Rank 0: header and blob to a temporary name beside the target, then rename, so
 * readers see either no file, an older file, or the whole new one. */
static int file_publish(struct dcp_rendezvous *r, const void *blob, size_t size)
{
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    char *tmp = dcp_asprintf("%s.tmp.%s.%ld", r->spec.path, host, (long)getpid());
    if (!tmp)
        return dcp_error(DCP_ENOMEM, "rendezvous");
    uint8_t hdr[HEADER_BYTES];
    const struct header h = my_header(r, (uint32_t)size);
    header_encode(&h, hdr);
    int st = DCP_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write_all(fd, hdr, sizeof(hdr)) || write_all(fd, blob, size) || fsync(fd))
        st = dcp_error(DCP_EIO, "rendezvous %s: cannot write %s: %s", r->text, tmp, strerror(errno));
    if (fd >= 0 && close(fd) && !st)
        st = dcp_error(DCP_EIO, "rendezvous %s: cannot write %s: %s", r->text, tmp, strerror(errno));
    if (!st && rename(tmp, r->spec.path))
        st = dcp_error(DCP_EIO, "rendezvous %s: cannot rename %s: %s", r->text, tmp, strerror(errno));
    if (st)
        unlink(tmp);
    free(tmp);
    return st;
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

static int file_read_open(int fd, struct dcp_rendezvous *r, void *blob, size_t size, char *note, size_t ns)
{
    uint8_t hdr[HEADER_BYTES], extra;
    struct header h;
    if (!read_exact(fd, hdr, sizeof(hdr)) || !header_decode(hdr, &h)) {
        snprintf(note, ns, "%s is not a rendezvous file of this version", r->spec.path);
        return RETRY;
    }
    if (strcmp(h.tag, r->tag)) {
        snprintf(note, ns, "%s has job tag '%s' (an earlier run?): ignored", r->spec.path, h.tag);
        return RETRY;
    }
    int st = check_offer(r, &h, size);
    if (st)
        return st;
    if (!read_exact(fd, blob, size) || read(fd, &extra, 1) != 0) {
        snprintf(note, ns, "%s is not %zu bytes long", r->spec.path, sizeof(hdr) + size);
        return RETRY;
    }
    return DCP_OK;
}

static int file_try_read(struct dcp_rendezvous *r, void *blob, size_t size, double deadline, char *note, size_t ns)
{
    (void)deadline; /* reading a local or shared file does not block for long */
    int fd = open(r->spec.path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        snprintf(note, ns, "no file %s", r->spec.path);
        return RETRY;
    }
    if (fd < 0)
        return dcp_error(DCP_EIO, "rendezvous %s: cannot open: %s", r->text, strerror(errno));
    int st = file_read_open(fd, r, blob, size, note, ns);
    close(fd);
    return st;
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

/* Rank 0: reads one peer's hello and answers it. Counts the peer (sets *served to
 * its rank) only when its tag, world size and rank fit; notes anything odd. */
static void serve_peer(struct dcp_rendezvous *r, int fd, const void *blob, size_t size, double deadline,
                       uint32_t *served, char *note, size_t ns)
{
    const double io_deadline = DCP_MIN(deadline, dcp_now_seconds() + PEER_IO_LIMIT_S);
    uint8_t buf[HEADER_BYTES];
    struct header h;
    const char *why = transfer_all(fd, buf, sizeof(buf), false, io_deadline);
    if (why || !header_decode(buf, &h)) {
        snprintf(note, ns, "a connection sent no rendezvous hello (%s)", why ? why : "bad magic or version");
        return;
    }
    const bool same_tag = !strcmp(h.tag, r->tag);
    const struct header reply = my_header(r, same_tag ? (uint32_t)size : 0);
    header_encode(&reply, buf);
    /* A peer of another job only learns our tag, not the blob. */
    why = transfer_all(fd, buf, sizeof(buf), true, io_deadline);
    if (!why && same_tag)
        why = transfer_all(fd, (void *)blob, size, true, io_deadline);
    if (!same_tag)
        snprintf(note, ns, "turned away a peer with job tag '%s'", h.tag);
    else if (h.world != r->world_size || !h.rank || h.rank >= r->world_size)
        snprintf(note, ns, "a peer claimed rank %u of world size %u", h.rank, h.world);
    else if (why)
        snprintf(note, ns, "sending to rank %u failed: %s", h.rank, why);
    else
        *served = h.rank;
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

/* Rank 0: accepts peers until each of ranks 1..world-1 has the blob. */
static int tcp_serve(struct dcp_rendezvous *r, const void *blob, size_t size)
{
    const double deadline = dcp_now_seconds() + r->timeout_s;
    bool *seen = calloc(r->world_size, sizeof(*seen));
    if (!seen)
        return dcp_error(DCP_ENOMEM, "rendezvous");
    char note[320] = "";
    uint32_t arrived = 0;
    int st = DCP_OK;
    while (arrived < r->world_size - 1) {
        struct pollfd pfd = {r->listen_fd, POLLIN, 0};
        int n = poll(&pfd, 1, ms_until(deadline));
        if (n == 0) {
            char missing[96];
            list_missing(seen, r->world_size, missing, sizeof(missing));
            st = dcp_error(DCP_ETIMEOUT, "rendezvous %s: %u of %u peers arrived within %.2f s (missing ranks:%s)%s%s",
                           r->text, arrived, r->world_size - 1, r->timeout_s, missing, *note ? "; last: " : "",
                           note);
            break;
        }
        if (n < 0 && errno != EINTR) {
            st = dcp_error(DCP_EIO, "rendezvous %s: poll: %s", r->text, strerror(errno));
            break;
        }
        int fd = n > 0 ? accept4(r->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC) : -1;
        if (fd < 0)
            continue; /* interrupted, or the peer gave up before we accepted it */
        uint32_t peer = 0;
        serve_peer(r, fd, blob, size, deadline, &peer, note, sizeof(note));
        close(fd);
        if (peer && !seen[peer]) {
            seen[peer] = true;
            arrived++;
        }
    }
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

/* Connects to rank 0 trying each address of the host; -1 and a note on failure. */
static int tcp_connect(struct dcp_rendezvous *r, double deadline, int *fd, char *note, size_t ns)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", r->spec.port);
    const struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *list = NULL;
    *fd = -1;
    int gai = getaddrinfo(r->spec.host, port, &hints, &list);
    if (gai == EAI_AGAIN) {
        snprintf(note, ns, "resolving %s: %s", r->spec.host, gai_strerror(gai));
        return RETRY;
    }
    if (gai)
        return dcp_error(DCP_EINVAL, "rendezvous %s: cannot resolve host '%s': %s", r->text, r->spec.host,
                         gai_strerror(gai));
    for (const struct addrinfo *ai = list; ai && *fd < 0; ai = ai->ai_next)
        if ((*fd = connect_before(ai, deadline)) < 0)
            note_failure(note, ns, errno == ETIMEDOUT, "connecting to %s:%s: %s", r->spec.host, port,
                         strerror(errno));
    freeaddrinfo(list);
    return *fd < 0 ? RETRY : DCP_OK;
}

/* A peer's exchange over one connection: hello out, header and blob in. */
static int tcp_request(struct dcp_rendezvous *r, int fd, void *blob, size_t size, double deadline, char *note,
                       size_t ns)
{
    uint8_t buf[HEADER_BYTES];
    struct header h = my_header(r, 0);
    header_encode(&h, buf);
    const char *why = transfer_all(fd, buf, sizeof(buf), true, deadline);
    if (!why)
        why = transfer_all(fd, buf, sizeof(buf), false, deadline);
    if (why) {
        note_failure(note, ns, why == reason_timed_out, "exchange with rank 0: %s", why);
        return RETRY;
    }
    if (!header_decode(buf, &h)) {
        snprintf(note, ns, "%s:%u answered, but not as a rendezvous of this version", r->spec.host, r->spec.port);
        return RETRY;
    }
    if (strcmp(h.tag, r->tag)) {
        snprintf(note, ns, "the server at %s:%u has job tag '%s' (another run?)", r->spec.host, r->spec.port, h.tag);
        return RETRY;
    }
    int st = check_offer(r, &h, size);
    if (st)
        return st;
    why = transfer_all(fd, blob, size, false, deadline);
    if (why) {
        note_failure(note, ns, why == reason_timed_out, "receiving the blob: %s", why);
        return RETRY;
    }
    return DCP_OK;
}

static int tcp_try_fetch(struct dcp_rendezvous *r, void *blob, size_t size, double deadline, char *note, size_t ns)
{
    int fd;
    int st = tcp_connect(r, deadline, &fd, note, ns);
    if (st)
        return st;
    st = tcp_request(r, fd, blob, size, deadline, note, ns);
    close(fd);
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
