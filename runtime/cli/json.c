/* json.c: streaming JSON writer with two-space indentation. */
#include <inttypes.h>
#include <math.h>

#include "json.h"

void json_init(struct json_writer *w, FILE *out)
{
    w->out = out;
    w->depth = 0;
    w->first[0] = true;
    w->after_key = false;
}

static void indent(struct json_writer *w)
{
    fputc('\n', w->out);
    for (int i = 0; i < w->depth; i++)
        fputs("  ", w->out);
}

/* Separator before a value or key at the current depth. */
static void before_item(struct json_writer *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth == 0)
        return;
    if (!w->first[w->depth])
        fputc(',', w->out);
    w->first[w->depth] = false;
    indent(w);
}

static void open_container(struct json_writer *w, char c)
{
    before_item(w);
    fputc(c, w->out);
    if (w->depth + 1 < JSON_MAX_DEPTH)
        w->depth++;
    w->first[w->depth] = true;
}

static void close_container(struct json_writer *w, char c)
{
    bool empty = w->first[w->depth];
    if (w->depth > 0)
        w->depth--;
    if (!empty)
        indent(w);
    fputc(c, w->out);
}

void json_begin_object(struct json_writer *w) { open_container(w, '{'); }
void json_end_object(struct json_writer *w) { close_container(w, '}'); }
void json_begin_array(struct json_writer *w) { open_container(w, '['); }
void json_end_array(struct json_writer *w) { close_container(w, ']'); }

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF), or 0 if the bytes there are not one. */
static size_t utf8_sequence(const unsigned char *p)
{
    unsigned n;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        if (p[0] == 0xe0)
            lo = 0xa0; /* overlong */
        else if (p[0] == 0xed)
            hi = 0x9f; /* UTF-16 surrogates */
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        if (p[0] == 0xf0)
            lo = 0x90; /* overlong */
        else if (p[0] == 0xf4)
            hi = 0x8f; /* past U+10FFFF */
    } else
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (unsigned i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}

/* A JSON string: escapes what JSON requires, and replaces each byte that is not part
 * of well-formed UTF-8 (a file name in another encoding) by U+FFFD, so the output is
 * always valid JSON. */
static void write_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (*p < 0x20) {
                fprintf(out, "\\u%04x", *p);
            } else {
                const size_t n = utf8_sequence(p);
                if (n == 0) {
                    fputs("\\ufffd", out);
                } else {
                    fwrite(p, 1, n, out);
                    p += n;
                    continue;
                }
            }
        }
        p++;
    }
    fputc('"', out);
}

void json_key(struct json_writer *w, const char *key)
{
    before_item(w);
    write_string(w->out, key);
    fputs(": ", w->out);
    w->after_key = true;
}

void json_string(struct json_writer *w, const char *s)
{
    before_item(w);
    if (s)
        write_string(w->out, s);
    else
        fputs("null", w->out);
}

void json_number(struct json_writer *w, double v)
{
    before_item(w);
    if (!isfinite(v))
        fputs("null", w->out);
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        fprintf(w->out, "%.0f", v);
    else
        fprintf(w->out, "%.17g", v);
}

void json_uint(struct json_writer *w, uint64_t v)
{
    before_item(w);
    fprintf(w->out, "%" PRIu64, v);
}

void json_int(struct json_writer *w, int64_t v)
{
    before_item(w);
    fprintf(w->out, "%" PRId64, v);
}

void json_bool(struct json_writer *w, bool v)
{
    before_item(w);
    fputs(v ? "true" : "false", w->out);
}

void json_null(struct json_writer *w)
{
    before_item(w);
    fputs("null", w->out);
}

void json_raw(struct json_writer *w, const char *text)
{
    before_item(w);
    for (const char *p = text; *p; p++) {
        fputc(*p, w->out);
        if (*p == '\n')
            for (int i = 0; i < w->depth; i++)
                fputs("  ", w->out);
    }
}

void json_finish(struct json_writer *w) { fputc('\n', w->out); }

void json_kv_string(struct json_writer *w, const char *key, const char *s)
{
    json_key(w, key);
    json_string(w, s);
}

void json_kv_number(struct json_writer *w, const char *key, double v)
{
    json_key(w, key);
    json_number(w, v);
}

void json_kv_uint(struct json_writer *w, const char *key, uint64_t v)
{
    json_key(w, key);
    json_uint(w, v);
}

void json_kv_int(struct json_writer *w, const char *key, int64_t v)
{
    json_key(w, key);
    json_int(w, v);
}

void json_kv_bool(struct json_writer *w, const char *key, bool v)
{
    json_key(w, key);
    json_bool(w, v);
}
