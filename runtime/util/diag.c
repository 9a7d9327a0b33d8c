/* diag.c: the diagnostics list. */
#include <stdlib.h>
#include <string.h>

#include "util/diag_internal.h"
#include "util/util.h"

struct dcp_diag {
    struct dcp_diag_entry *entries;
    size_t count;
    size_t cap;
    size_t errors;
};

DCP_API int dcp_diag_create(dcp_diag **out)
{
    dcp_clear_error();
    if (!out)
        return dcp_error(DCP_EINVAL, "dcp_diag_create: out is NULL");
    *out = calloc(1, sizeof(**out));
    return *out ? DCP_OK : dcp_error(DCP_ENOMEM, "dcp_diag_create: out of memory");
}

static void free_entry(struct dcp_diag_entry *e)
{
    free((char *)e->file);
    free((char *)e->path);
    free((char *)e->message);
}

DCP_API void dcp_diag_clear(dcp_diag *diag)
{
    if (!diag)
        return;
    for (size_t i = 0; i < diag->count; i++)
        free_entry(&diag->entries[i]);
    diag->count = 0;
    diag->errors = 0;
}

DCP_API void dcp_diag_destroy(dcp_diag **diag)
{
    if (!diag || !*diag)
        return;
    dcp_diag_clear(*diag);
    free((*diag)->entries);
    free(*diag);
    *diag = NULL;
}

DCP_API size_t dcp_diag_count(const dcp_diag *diag) { return diag ? diag->count : 0; }

DCP_API size_t dcp_diag_error_count(const dcp_diag *diag) { return diag ? diag->errors : 0; }

DCP_API const struct dcp_diag_entry *dcp_diag_get(const dcp_diag *diag, size_t i)
{
    return diag && i < diag->count ? &diag->entries[i] : NULL;
}

int dcp_diag_add(dcp_diag *diag, enum dcp_diag_severity severity, const char *file,
                 unsigned line, unsigned column, const char *path, const char *fmt, ...)
{
    if (!diag)
        return DCP_OK;
    if (dcp_grow_array((void **)&diag->entries, &diag->cap, diag->count + 1,
                       sizeof(*diag->entries)))
        return DCP_ENOMEM;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    char *f = dcp_strdup(file ? file : "");
    char *p = dcp_strdup(path ? path : "");
    if (!msg || !f || !p) {
        free(msg);
        free(f);
        free(p);
        return DCP_ENOMEM;
    }
    va_start(ap, fmt);
    vsnprintf(msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    diag->entries[diag->count++] = (struct dcp_diag_entry){
        .severity = severity, .file = f, .line = line, .column = column, .path = p, .message = msg,
    };
    if (severity == DCP_DIAG_ERROR)
        diag->errors++;
    return DCP_OK;
}

DCP_API int dcp_diag_format(const struct dcp_diag_entry *e, char *buf, size_t size)
{
    if (!e)
        return -1;
    char pos[64] = "";
    if (e->line && e->column)
        snprintf(pos, sizeof(pos), ":%u:%u", e->line, e->column);
    else if (e->line)
        snprintf(pos, sizeof(pos), ":%u", e->line);
    const char *sev = e->severity == DCP_DIAG_WARNING ? "warning: "
                      : e->severity == DCP_DIAG_NOTE  ? "note: "
                                                      : "";
    const int has_file = e->file[0] != '\0';
    const int has_path = e->path[0] != '\0';
    return snprintf(buf, size, "%s%s%s%s%s%s%s", e->file, has_file ? pos : "",
                    has_file ? ": " : "", e->path, has_path ? ": " : "", sev, e->message);
}

DCP_API void dcp_diag_print(const dcp_diag *diag, FILE *out)
{
    if (!diag || !out)
        return;
    char small[512];
    for (size_t i = 0; i < diag->count; i++) {
        const struct dcp_diag_entry *e = &diag->entries[i];
        int n = dcp_diag_format(e, small, sizeof(small));
        if (n < 0)
            continue;
        if ((size_t)n < sizeof(small)) {
            fprintf(out, "%s\n", small);
            continue;
        }
        char *big = malloc((size_t)n + 1);
        if (!big)
            continue;
        dcp_diag_format(e, big, (size_t)n + 1);
        fprintf(out, "%s\n", big);
        free(big);
    }
}
