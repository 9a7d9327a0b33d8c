/*
 * trace.c: request traces (workload.trace), one context length per line.
 *
 * The file is read whole through dcp_file_read() (a regular file of at most
 * DCP_TRACE_MAX_BYTES), then parsed line by line; every length is checked
 * against DCP_MAX_CONTEXT_TOKENS so no size derived from it can wrap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "util/file.h"

_Static_assert(DCP_MAX_CONTEXT_TOKENS == 1099511627776ull && DCP_MAX_REQUESTS == 1048576u,
               "the messages below name these limits");

/* Shown text of a bad line is cut after this many bytes. */
enum { TRACE_SHOW_MAX = 40 };

/* Reports "NAME:LINE: <before>'<text>'<after>" into diag and dcp_last_error(). */
static int trace_error(dcp_diag *diag, const char *name, unsigned line, const char *before,
                       const char *text, size_t len, const char *after)
{
    char shown[4 * TRACE_SHOW_MAX + 8];
    size_t o = 0;
    for (size_t i = 0; i < len && i < TRACE_SHOW_MAX; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c >= 0x7f || c == '\\' || c == '\'')
            o += (size_t)snprintf(shown + o, sizeof(shown) - o, "\\x%02x", c);
        else
            shown[o++] = (char)c;
    }
    if (len > TRACE_SHOW_MAX)
        o += (size_t)snprintf(shown + o, sizeof(shown) - o, "...");
    shown[o] = '\0';
    if (dcp_diag_add(diag, DCP_DIAG_ERROR, name, line, 0, "", "%s'%s'%s", before, shown, after))
        return dcp_error(DCP_ENOMEM, "%s: out of memory", name);
    return dcp_error(DCP_ECONFIG, "%s:%u: %s'%s'%s", name, line, before, shown, after);
}

DCP_API int dcp_trace_parse(const char *name, const char *text, size_t len, uint32_t limit,
                            dcp_diag *diag, uint64_t **lengths, uint32_t *count)
{
    if (!lengths || !count)
        return dcp_error(DCP_EINVAL, "dcp_trace_parse: %s is NULL", lengths ? "count" : "lengths");
    *lengths = NULL;
    *count = 0;
    if (!text && len)
        return dcp_error(DCP_EINVAL, "dcp_trace_parse: text is NULL");
    if (!name)
        name = "<trace>";
    uint64_t *out = NULL;
    size_t cap = 0;
    uint32_t n = 0;
    unsigned line = 0;
    int status = DCP_OK;
    for (size_t pos = 0; pos < len && (!limit || n < limit) && !status;) {
        const char *eol = memchr(text + pos, '\n', len - pos);
        const size_t end = eol ? (size_t)(eol - text) : len;
        const char *s = text + pos;
        size_t l = end - pos;
        pos = end + 1;
        line++;
        const char *hash = memchr(s, '#', l);
        if (hash)
            l = (size_t)(hash - s);
        while (l && (s[0] == ' ' || s[0] == '\t'))
            s++, l--;
        while (l && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\r'))
            l--;
        if (l == 0)
            continue;
        uint64_t v = 0;
        const enum config_int_parse p = config_parse_token_count(s, l, &v);
        if (p == INT_SYNTAX) {
            status = trace_error(diag, name, line,
                                 "expected a context length in tokens (such as 4096, 128k or 1M), got ", s, l, "");
        } else if (p == INT_RANGE || v == 0 || v > DCP_MAX_CONTEXT_TOKENS) {
            status = trace_error(diag, name, line, "context length ", s, l,
                                 " is out of range; valid: 1..1099511627776 (2^40) tokens");
        } else if (n == DCP_MAX_REQUESTS) {
            status = trace_error(diag, name, line, "too many requests: ", s, l,
                                 " is past the limit of 1048576 per trace");
        } else if (dcp_grow_array((void **)&out, &cap, (size_t)n + 1, sizeof(*out))) {
            status = dcp_error(DCP_ENOMEM, "%s: out of memory", name);
        } else {
            out[n++] = v;
        }
    }
    if (!status && n == 0) {
        status = DCP_ECONFIG;
        if (dcp_diag_add(diag, DCP_DIAG_ERROR, name, 0, 0, "", "the trace holds no requests"))
            status = DCP_ENOMEM;
        dcp_error(status, "%s: the trace holds no requests", name);
    }
    if (status) {
        free(out);
        return status;
    }
    *lengths = out;
    *count = n;
    return DCP_OK;
}

DCP_API int dcp_trace_load(const char *path, uint32_t limit, dcp_diag *diag, uint64_t **lengths,
                           uint32_t *count)
{
    if (!lengths || !count)
        return dcp_error(DCP_EINVAL, "dcp_trace_load: %s is NULL", lengths ? "count" : "lengths");
    *lengths = NULL;
    *count = 0;
    if (!path)
        return dcp_error(DCP_EINVAL, "dcp_trace_load: path is NULL");
    char *text = NULL;
    size_t len = 0;
    int status = dcp_file_read(path, "trace", DCP_TRACE_MAX_BYTES, 0, &text, &len);
    if (status == DCP_EIO && dcp_diag_add(diag, DCP_DIAG_ERROR, "", 0, 0, "", "%s", dcp_last_error()))
        status = DCP_ENOMEM;
    if (!status)
        status = dcp_trace_parse(path, text, len, limit, diag, lengths, count);
    free(text);
    return status;
}
