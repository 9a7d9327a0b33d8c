/* diag_internal.h: adding entries to a dcp_diag (the public header only reads). */
#ifndef DCP_DIAG_INTERNAL_H
#define DCP_DIAG_INTERNAL_H

#include "dcp/diag.h"
#include "util/util.h"

/**
 * Appends an entry. file and path may be NULL (stored as ""). Returns DCP_OK or
 * DCP_ENOMEM. A NULL diag is accepted and ignored (callers that do not want
 * messages pass NULL all the way down).
 */
int dcp_diag_add(dcp_diag *diag, enum dcp_diag_severity severity, const char *file,
                 unsigned line, unsigned column, const char *path, const char *fmt, ...)
    DCP_PRINTF(7, 8);

#endif /* DCP_DIAG_INTERNAL_H */
