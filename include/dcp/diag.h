/*
 * diag.h: diagnostics, a list of messages that point at their source.
 *
 * Loading a deployment reports every problem it finds into a dcp_diag, each with
 * the file position (1-based line and column) and the dotted key path, so a user
 * sees all mistakes at once: "dep.yaml:12:9: parallel.dcp: dcp=3 does not divide ...".
 */
#ifndef DCP_DIAG_H
#define DCP_DIAG_H

#include <stdio.h>

#include "dcp/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How serious a diagnostic is. Only errors make a load fail. */
enum dcp_diag_severity {
    DCP_DIAG_ERROR = 0,   ///< The input is rejected.
    DCP_DIAG_WARNING = 1, ///< Accepted, but probably not what was meant.
    DCP_DIAG_NOTE = 2,    ///< Extra information attached to the previous entry.
};

/** One diagnostic. All strings are owned by the dcp_diag and never NULL. */
struct dcp_diag_entry {
    enum dcp_diag_severity severity; ///< Error, warning or note.
    const char *file;                ///< Source name ("<string>" for in-memory input), "" if none.
    unsigned line;                   ///< 1-based line, 0 if not tied to a position.
    unsigned column;                 ///< 1-based column, 0 if not tied to a position.
    const char *path;                ///< Dotted key path ("parallel.dcp", "workload.context_lengths[2]"), "" if none.
    const char *message;             ///< What is wrong and, where possible, what would be valid.
};

/** Opaque list of diagnostics. */
typedef struct dcp_diag dcp_diag;

/** Creates an empty list. Returns DCP_OK or DCP_ENOMEM / DCP_EINVAL. */
DCP_API int dcp_diag_create(dcp_diag **out);

/** Frees the list and sets *diag to NULL. Accepts NULL and *diag == NULL. */
DCP_API void dcp_diag_destroy(dcp_diag **diag);

/** Removes every entry. */
DCP_API void dcp_diag_clear(dcp_diag *diag);

/** Number of entries of any severity (0 for NULL). */
DCP_API size_t dcp_diag_count(const dcp_diag *diag);

/** Number of entries with severity DCP_DIAG_ERROR (0 for NULL). */
DCP_API size_t dcp_diag_error_count(const dcp_diag *diag);

/** Returns entry i (in the order reported), or NULL if i is out of range. */
DCP_API const struct dcp_diag_entry *dcp_diag_get(const dcp_diag *diag, size_t i);

/**
 * Formats one entry as "file:line:col: path: severity: message" (parts that are
 * empty or 0 are left out; "error: " is implied and omitted for errors) into buf,
 * like snprintf: returns the length the full text needs, writes at most size bytes
 * including the terminating NUL.
 */
DCP_API int dcp_diag_format(const struct dcp_diag_entry *entry, char *buf, size_t size);

/** Writes every entry, one per line, formatted as by dcp_diag_format(). */
DCP_API void dcp_diag_print(const dcp_diag *diag, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* DCP_DIAG_H */
