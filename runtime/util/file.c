/* file.c: opening and reading input files safely (file.h). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"
#include "util/util.h"

/* What a file that is not a regular file is, for the message. */
static const char *file_type_name(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a plain file";
}

/* "64 MiB", "4 KiB", "100 bytes": how big the cap is, for messages. */
static void format_cap(char *buf, size_t size, size_t bytes)
{
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        snprintf(buf, size, "%zu MiB", bytes >> 20);
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(buf, size, "%zu KiB", bytes >> 10);
    else
        snprintf(buf, size, "%zu bytes", bytes);
}

static int too_big(int fd, const char *path, const char *what, size_t max_bytes)
{
    char cap[32];
    format_cap(cap, sizeof(cap), max_bytes);
    if (fd >= 0)
        close(fd);
    dcp_error(DCP_EIO, "%s %s: larger than the %s limit for a %s", what, path, cap, what);
    errno = EFBIG;
    return -1;
}

int dcp_file_open(const char *path, const char *what, size_t max_bytes, unsigned flags)
{
    return dcp_file_openat(AT_FDCWD, path, path, what, max_bytes, flags);
}

int dcp_file_openat(int dirfd, const char *name, const char *path, const char *what, size_t max_bytes,
                    unsigned flags)
{
    int oflags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
    if (flags & DCP_FILE_NOFOLLOW)
        oflags |= O_NOFOLLOW;
    const int fd = openat(dirfd, name, oflags);
    if (fd < 0) {
        const int e = errno;
        if (e == ELOOP && (flags & DCP_FILE_NOFOLLOW))
            dcp_error(DCP_EIO, "%s %s: is a symbolic link; give the file itself", what, path);
        else
            dcp_error(DCP_EIO, "%s %s: cannot open: %s", what, path, strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        dcp_error(DCP_EIO, "%s %s: cannot stat: %s", what, path, strerror(e));
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        dcp_error(DCP_EIO, "%s %s: not a regular file (%s); give a regular file", what, path,
                  file_type_name(st.st_mode));
        errno = EINVAL;
        return -1;
    }
    if (st.st_size < 0 || (unsigned long long)st.st_size > max_bytes)
        return too_big(fd, path, what, max_bytes);
    /* Reads of a regular file never block; restore plain mode for the caller anyway. */
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int dcp_file_read(const char *path, const char *what, size_t max_bytes, unsigned flags,
                  char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    const int fd = dcp_file_open(path, what, max_bytes, flags);
    if (fd < 0)
        return DCP_EIO;
    /* Read up to one byte past the cap: a file that grew since fstat is caught. */
    max_bytes = DCP_MIN(max_bytes, SIZE_MAX / 4);
    struct stat st;
    size_t cap = 4096, n = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0)
        cap = DCP_MAX(cap, (size_t)st.st_size + 2);
    cap = DCP_MIN(cap, max_bytes + 2); /* the cap, one byte past it, and the '\0' */
    char *buf = malloc(cap);
    for (;;) {
        if (buf && n + 1 == cap) {
            if (n > max_bytes)
                break;
            const size_t ncap = DCP_MIN(cap * 2, max_bytes + 2);
            char *p = realloc(buf, ncap);
            if (!p) {
                free(buf);
                buf = NULL;
            }
            buf = p;
            cap = ncap;
        }
        if (!buf) {
            close(fd);
            return dcp_error(DCP_ENOMEM, "%s %s: out of memory reading it", what, path);
        }
        const ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            const int e = errno;
            free(buf);
            close(fd);
            dcp_error(DCP_EIO, "%s %s: cannot read: %s", what, path, strerror(e));
            errno = e;
            return DCP_EIO;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (n > max_bytes) {
        free(buf);
        too_big(-1, path, what, max_bytes);
        return DCP_EIO;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return DCP_OK;
}

/* ---- directories others cannot redirect ---------------------------------------- */

/* Most symbolic links one walk follows (as the kernel's MAXSYMLINKS). */
#define DIR_MAX_LINKS 40

/* Others may replace what the directory holds: writable by others, no sticky bit. */
static bool open_to_others(const struct stat *st)
{
    return (st->st_mode & S_IWOTH) && !(st->st_mode & S_ISVTX);
}

static int walk_fail(int fd, char *work, int e, const char *fmt, ...) DCP_PRINTF(4, 5);
static int walk_fail(int fd, char *work, int e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dcp_verror(DCP_EIO, fmt, ap);
    va_end(ap);
    if (fd >= 0)
        close(fd);
    free(work);
    errno = e;
    return -1;
}

/* Opens "/" or "." and checks it like every later component. */
static int walk_start(bool absolute, const char *path, const char *what, struct stat *st)
{
    const char *start = absolute ? "/" : ".";
    const int fd = open(start, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, st))
        return walk_fail(fd, NULL, errno, "%s %s: cannot open %s: %s", what, path, start, strerror(errno));
    if (open_to_others(st))
        return walk_fail(fd, NULL, EPERM, "%s %s: %s is writable by others without the sticky bit: not trusted",
                         what, path, absolute ? "/" : "the working directory");
    return fd;
}

int dcp_dir_open_safely(const char *path, const char *what)
{
    if (!path[0])
        path = ".";
    char *work = strdup(path);
    if (!work) {
        dcp_error(DCP_ENOMEM, "%s %s: out of memory", what, path);
        errno = ENOMEM;
        return -1;
    }
    struct stat st;
    int fd = walk_start(work[0] == '/', path, what, &st), links = 0;
    if (fd < 0) {
        free(work);
        return -1;
    }
    for (const char *p = work; *p;) {
        while (*p == '/')
            p++;
        const size_t n = strcspn(p, "/");
        if (!n)
            break;
        char comp[NAME_MAX + 1];
        if (n > NAME_MAX)
            return walk_fail(fd, work, ENAMETOOLONG, "%s %s: a path component is longer than %d bytes", what, path,
                             NAME_MAX);
        memcpy(comp, p, n);
        comp[n] = '\0';
        p += n;
        if (!strcmp(comp, "."))
            continue;
        const int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat lst;
        if (next < 0 && (errno == ELOOP || errno == ENOTDIR) && !fstatat(fd, comp, &lst, AT_SYMLINK_NOFOLLOW) &&
            S_ISLNK(lst.st_mode)) {
            /* Followed only when no other user can have planted it: owned by root or this user,
             * in a directory others cannot write (where a link of ours could be hard-linked). */
            if ((lst.st_uid != 0 && lst.st_uid != geteuid()) || (st.st_mode & S_IWOTH))
                return walk_fail(fd, work, ELOOP, "%s %s: component '%s' is a symbolic link %s: not followed",
                                 what, path, comp,
                                 st.st_mode & S_IWOTH ? "in a directory others may write"
                                                      : "owned by another user");
            char target[PATH_MAX];
            const ssize_t tn = readlinkat(fd, comp, target, sizeof(target) - 1);
            if (tn <= 0 || ++links > DIR_MAX_LINKS)
                return walk_fail(fd, work, ELOOP, "%s %s: cannot follow the symbolic link '%s'%s", what, path, comp,
                                 tn > 0 ? ": too many links" : "");
            target[tn] = '\0';
            char *rest = dcp_asprintf("%s/%s", target, p);
            if (!rest)
                return walk_fail(fd, work, ENOMEM, "%s %s: out of memory", what, path);
            free(work);
            work = rest;
            p = work;
            if (target[0] == '/') {
                close(fd);
                if ((fd = walk_start(true, path, what, &st)) < 0) {
                    free(work);
                    return -1;
                }
            }
            continue;
        }
        if (next < 0)
            return walk_fail(fd, work, errno, "%s %s: cannot open the directory '%s': %s", what, path, comp,
                             strerror(errno));
        close(fd);
        fd = next;
        if (fstat(fd, &st))
            return walk_fail(fd, work, errno, "%s %s: cannot stat '%s': %s", what, path, comp, strerror(errno));
        if (open_to_others(&st))
            return walk_fail(fd, work, EPERM, "%s %s: the directory '%s' is writable by others without the sticky "
                             "bit: not trusted", what, path, comp);
    }
    free(work);
    return fd;
}
