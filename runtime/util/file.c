/* file.c: opening and reading input files safely (file.h). */
#include <errno.h>
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
    int oflags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
    if (flags & DCP_FILE_NOFOLLOW)
        oflags |= O_NOFOLLOW;
    const int fd = open(path, oflags);
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
