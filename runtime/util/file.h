/*
 * file.h: opening and reading input files safely (deployments, traces,
 * rendezvous files).
 *
 * Every file the library reads goes through here, so a FIFO, a device such as
 * /dev/zero, a directory or a huge file gets a clear error at once instead of a
 * hang, an endless read or an allocation the size of the disk. The file is
 * opened with O_NONBLOCK (opening a FIFO with no writer returns at once instead
 * of blocking), checked with fstat to be a regular file of at most max_bytes,
 * and only then read.
 */
#ifndef DCP_UTIL_FILE_H
#define DCP_UTIL_FILE_H

#include <stddef.h>

/** Flags of dcp_file_open() / dcp_file_read(). */
enum dcp_file_flags {
    DCP_FILE_NOFOLLOW = 1u << 0, ///< Refuse a symbolic link as the last path component (O_NOFOLLOW).
};

/**
 * Opens path for reading if it is a regular file of at most max_bytes.
 * what names the file in messages ("deployment file", "trace", "rendezvous file").
 * Returns a file descriptor (O_CLOEXEC, blocking mode restored), or -1 with
 * errno set and the reason in dcp_last_error() ("trace /tmp/f: not a regular
 * file (a FIFO); give a regular file"). errno is the open() error (ENOENT,
 * EACCES, ELOOP for a refused link, ...), EINVAL for a file that is not a
 * regular file, EFBIG for one larger than max_bytes.
 */
int dcp_file_open(const char *path, const char *what, size_t max_bytes, unsigned flags);

/** dcp_file_open() of name relative to the directory dirfd (AT_FDCWD: the working
 *  directory); path names the file in messages. */
int dcp_file_openat(int dirfd, const char *name, const char *path, const char *what, size_t max_bytes,
                    unsigned flags);

/**
 * Opens directory path (O_RDONLY | O_DIRECTORY) so that no other user can redirect
 * it: each component is opened relative to its parent with O_NOFOLLOW; a component
 * that is a symbolic link is followed only when root or this user owns it and its
 * directory is not writable by others (where another user could plant or hard-link
 * one); a directory writable by others without the sticky bit is refused (anyone
 * could replace what it holds), "/" and "." included. Returns the descriptor, or -1
 * with errno (ELOOP: a link not followed; EPERM: a directory open to others; ENOENT,
 * EACCES, ENOTDIR, ... from openat) and the reason in dcp_last_error(), naming what
 * ("rendezvous directory"), the path and the component.
 */
int dcp_dir_open_safely(const char *path, const char *what);

/**
 * Reads the whole regular file path (at most max_bytes) into a new buffer with a
 * '\0' after the last byte; *len excludes it. Never blocks on a FIFO or device
 * and reads at most max_bytes + 1 bytes (a file that grows past the cap while it
 * is read is refused too). Returns DCP_OK, DCP_ENOMEM, or DCP_EIO with errno set
 * as for dcp_file_open() (EIO for a read error) and the reason, naming the file
 * and the cap, in dcp_last_error(). *data is to be freed with free().
 */
int dcp_file_read(const char *path, const char *what, size_t max_bytes, unsigned flags,
                  char **data, size_t *len);

#endif /* DCP_UTIL_FILE_H */
