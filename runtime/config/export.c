/*
 * export.c: a deployment's settings as JSON, in the vocabulary of the schema.
 *
 * Names, nesting, units and choices all come from the schema table (schema.c),
 * the same one the YAML loader reads, so what is written here loads back to the
 * same struct dcp_config: JSON is YAML flow syntax. This is what `dcp-run plan
 * --json` prints as "config".
 */
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

/* A growing NUL-terminated string; failed stays set after an allocation fails. */
struct text_buf {
    char *s;
    size_t len, cap;
    bool failed;
};

static void buf_add(struct text_buf *b, const char *fmt, ...) DCP_PRINTF(2, 3);

static void buf_add(struct text_buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->s && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        const size_t need = b->len + (size_t)n + 1;
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < need)
            cap *= 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
}

static void buf_indent(struct text_buf *b, unsigned depth)
{
    buf_add(b, "\n%*s", (int)(2 * depth), "");
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void buf_string(struct text_buf *b, const char *s)
{
    buf_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            buf_add(b, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            buf_add(b, "\\u%04x", *p);
        else
            buf_add(b, "%c", *p);
    }
    buf_add(b, "\"");
}

/*
 * A number field in YAML units, in the fewest digits that load back to the very
 * same stored value (memory_gb: 141, not 141.00000000000001). Formatted and
 * parsed in the C locale.
 */
static void buf_number(struct text_buf *b, const struct config_key *k, const struct dcp_config *cfg,
                       locale_t c_locale)
{
    double stored;
    memcpy(&stored, (const char *)cfg + k->offset, sizeof(stored));
    const double scale = k->scale != 0 ? k->scale : 1.0;
    const double v = config_load_number(cfg, k);
    char text[40];
    const locale_t old = uselocale(c_locale);
    /* Whole numbers as such (20, not 2e+01); others in the fewest significant digits. */
    snprintf(text, sizeof(text), "%.0f", v);
    const bool whole = v == (double)(long long)v && v < 1e15 && v > -1e15 &&
                       strtod_l(text, NULL, c_locale) * scale == stored;
    for (int digits = 1; !whole && digits <= 17; digits++) {
        snprintf(text, sizeof(text), "%.*g", digits, v);
        if (strtod_l(text, NULL, c_locale) * scale == stored)
            break;
    }
    uselocale(old);
    buf_add(b, "%s", text);
}

/* model.layers as the loader reads it: the count, or {count, pattern} with each entry a
 * name (full, none) or a mapping of its kind, sink and repeat. */
static void buf_layers(struct text_buf *b, const struct dcp_model_config *m)
{
    if (m->num_layer_kinds == 0) {
        buf_add(b, "%u", m->num_layers);
        return;
    }
    buf_add(b, "{\"count\": %u, \"pattern\": [", m->num_layers);
    for (uint32_t i = 0; i < m->num_layer_kinds && i < DCP_MAX_LAYER_PATTERN; i++) {
        const struct dcp_layer_kind *k = &m->layer_pattern[i];
        const char *name = dcp_layer_type_name(k->type);
        buf_add(b, "%s", i ? ", " : "");
        if (!k->sink && k->repeat <= 1 && (k->type == DCP_LAYER_FULL || k->type == DCP_LAYER_NONE)) {
            buf_string(b, name);
            continue;
        }
        if (k->type == DCP_LAYER_SLIDING_WINDOW || k->type == DCP_LAYER_SPARSE_TOPK)
            buf_add(b, "{\"%s\": %u", name, k->type == DCP_LAYER_SLIDING_WINDOW ? k->window : k->topk);
        else
            buf_add(b, "{\"%s\": true", name);
        if (k->sink)
            buf_add(b, ", \"sink\": true");
        if (k->repeat > 1)
            buf_add(b, ", \"repeat\": %u", k->repeat);
        buf_add(b, "}");
    }
    buf_add(b, "]}");
}

/* Writes the value of key k (not a section). */
static void buf_value(struct text_buf *b, const struct config_key *k, const struct dcp_config *cfg,
                      locale_t c_locale)
{
    switch (k->kind) {
    case CONFIG_STRING:
    case CONFIG_PATH: buf_string(b, config_load_string(cfg, k)); return;
    case CONFIG_INT: {
        const uint64_t u = config_load_uint(cfg, k);
        if (k->flags & CONFIG_SIGNED)
            buf_add(b, "%d", (int)(int32_t)u);
        else
            buf_add(b, "%llu", (unsigned long long)u);
        return;
    }
    case CONFIG_NUMBER:
    case CONFIG_PARAM_COUNT: buf_number(b, k, cfg, c_locale); return;
    case CONFIG_BOOL: {
        bool v;
        memcpy(&v, (const char *)cfg + k->offset, sizeof(v));
        buf_add(b, "%s", v ? "true" : "false");
        return;
    }
    case CONFIG_ENUM: {
        const int e = config_load_enum(cfg, k);
        buf_string(b, e >= 0 && (unsigned)e < k->num_choices ? k->choices[e] : "?");
        return;
    }
    case CONFIG_TOKEN_LIST: {
        uint32_t n;
        memcpy(&n, (const char *)cfg + k->count_offset, sizeof(n));
        const uint64_t *values = (const uint64_t *)(const void *)((const char *)cfg + k->offset);
        buf_add(b, "[");
        for (uint32_t i = 0; i < n && i < k->max_count; i++)
            buf_add(b, "%s%llu", i ? ", " : "", (unsigned long long)values[i]);
        buf_add(b, "]");
        return;
    }
    case CONFIG_LAYERS: buf_layers(b, &cfg->model); return;
    case CONFIG_SECTION: return;
    }
}

/* Whether key k is written: it applies to the model's attention kind and is set. */
static bool key_written(const struct config_key *k, const struct dcp_config *cfg)
{
    const enum dcp_attention_kind attn = cfg->model.attention;
    if (config_attention_valid(attn) && !(k->applies & CONFIG_ATTN(attn)))
        return false;
    return k->kind != CONFIG_PATH || config_load_string(cfg, k) != NULL;
}

DCP_API int dcp_deployment_to_json(const dcp_deployment *dep, char **out)
{
    dcp_clear_error();
    if (!out)
        return dcp_error(DCP_EINVAL, "dcp_deployment_to_json: out is NULL");
    *out = NULL;
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    if (!cfg)
        return dcp_error(DCP_EINVAL, "dcp_deployment_to_json: dep is NULL");
    const locale_t c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!c_locale)
        return dcp_error(DCP_ENOMEM, "dcp_deployment_to_json: out of memory");
    struct text_buf b = {0};
    /* The schema lists each section before its keys, so a stack of open sections is enough. */
    const struct config_key *open[8];
    unsigned depth = 0;
    bool first = true; /* no item yet in the innermost open object */
    buf_add(&b, "{");
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        const struct config_key *parent = config_key_parent(k);
        while (depth > 0 && open[depth - 1] != parent) {
            buf_indent(&b, depth--);
            buf_add(&b, "}");
            first = false;
        }
        if (k->kind != CONFIG_SECTION && !key_written(k, cfg))
            continue;
        buf_add(&b, "%s", first ? "" : ",");
        buf_indent(&b, depth + 1);
        buf_add(&b, "\"%s\": ", config_key_name(k));
        if (k->kind == CONFIG_SECTION && depth < DCP_ARRAY_SIZE(open)) {
            buf_add(&b, "{");
            open[depth++] = k;
            first = true;
            continue;
        }
        buf_value(&b, k, cfg, c_locale);
        first = false;
    }
    while (depth > 0) {
        buf_indent(&b, depth--);
        buf_add(&b, "}");
    }
    buf_add(&b, "\n}");
    freelocale(c_locale);
    if (b.failed) {
        free(b.s);
        return dcp_error(DCP_ENOMEM, "dcp_deployment_to_json: out of memory");
    }
    *out = b.s;
    return DCP_OK;
}
