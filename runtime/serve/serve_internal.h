/* serve_internal.h: helpers shared by the serving sources. */
#ifndef DCP_SERVE_INTERNAL_H
#define DCP_SERVE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/**
 * Reads a whole regular file of at most max_bytes into a malloc'd NUL-terminated
 * buffer. FIFOs, devices and directories are refused without blocking.
 * DCP_EIO (with the reason) or DCP_ENOMEM.
 */
int dcp_serve_read_file(const char *path, uint64_t max_bytes, char **text, size_t *len);

#endif /* DCP_SERVE_INTERNAL_H */
