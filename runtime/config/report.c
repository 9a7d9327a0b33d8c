/* report.c: collecting load problems, and building message text. */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

void config_report_add(struct config_report *r, enum dcp_diag_severity severity,
                       struct config_pos pos, const char *path, const char *fmt, ...)
{
    if (severity == DCP_DIAG_ERROR) {
        /* A garbage file could yield thousands of errors; the first hundred say enough.
         * The rest are counted; config_report_finish() says how many there were. */
        if (r->errors++ >= CONFIG_MAX_ERRORS)
            return;
    }
    if (!r->diag)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (dcp_diag_add(r->diag, severity, r->file, pos.line, pos.column, path, "%s", msg))
        r->out_of_memory = true;
}

void config_report_finish(struct config_report *r)
{
    /* A note, not an error: the error count of the list stays the number listed. */
    if (r->errors > CONFIG_MAX_ERRORS &&
        dcp_diag_add(r->diag, DCP_DIAG_NOTE, r->file, 0, 0, "",
                     "too many errors: %u in all, only the first %d are listed", r->errors,
                     CONFIG_MAX_ERRORS))
        r->out_of_memory = true;
}

void config_text_add(struct config_text *t, const char *fmt, ...)
{
    const size_t room = sizeof(t->buf) - t->len;
    if (room <= 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < room) {
        t->len += (size_t)n;
        return;
    }
    /* Truncated: end the text visibly rather than mid-word. */
    memcpy(t->buf + sizeof(t->buf) - 4, "...", 4);
    t->len = sizeof(t->buf) - 1;
}

void config_text_add_values(struct config_text *t, const uint64_t *values, size_t count)
{
    /* Long lists keep their head and their last value: "1, 2, 3, ..., 4096". */
    enum { shown = 16 };
    for (size_t i = 0; i < count; i++) {
        if (count > shown && i == shown - 1) {
            config_text_add(t, ", ...");
            i = count - 1;
        }
        config_text_add(t, "%s%llu", i ? ", " : "", (unsigned long long)values[i]);
    }
}
