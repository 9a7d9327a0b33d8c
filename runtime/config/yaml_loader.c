/*
 * yaml_loader.c: YAML text -> struct dcp_config, driven by the schema table.
 *
 * It knows nothing of deployments: deployment.c makes one from the config it
 * fills (one-way: deployment -> loader -> struct dcp_config).
 *
 * libyaml composes the document. Aliases are not supported (a shared node would
 * make positions in messages point at the anchor, and can form cycles): a scan of
 * the events reports each at its own position, and the walker skips the keys and
 * entries that are aliases while checking everything else. The walker matches each mapping key against the schema rows under
 * the current section and parses the value by the row's kind; it reports every
 * problem with the position of the node to blame and keeps going. libyaml accepts
 * duplicate keys silently, so the walker remembers where each key was seen.
 */
#include <ctype.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config/config_internal.h"

struct yaml_loader {
    struct config_report *report;
    struct dcp_config cfg;
    yaml_document_t doc;
    bool have_doc;
    const yaml_node_t *root;
    const char *base_dir;                         ///< Relative paths are resolved here (NULL: cwd).
    locale_t c_locale;                            ///< Numbers are parsed in the C locale.
    const yaml_node_t *key_node[CONFIG_KEY_MAX];  ///< Where each key was written (NULL: absent).
    const yaml_node_t *value_node[CONFIG_KEY_MAX];
    unsigned char state[CONFIG_KEY_MAX];          ///< enum config_key_state per key.
    char *resolved[CONFIG_KEY_MAX];               ///< Owned resolved paths of CONFIG_PATH keys.
    struct node_def *defs;                        ///< Per node index: where it was written.
    bool out_of_memory;
};

/*
 * Where a node of the composed document was written: the node that holds it and
 * the slot there (2 * pair for a key, 2 * pair + 1 for a value, the item index in
 * a list). Every other reference to the node is an alias (*name).
 */
struct node_def {
    int parent; ///< Index of the holding node; 0 for the root; -1 before it is found.
    size_t slot;
};

/* Shown text of a scalar is cut after this many bytes. */
enum { SHOW_MAX = 40, SHOW_BUF = 4 * SHOW_MAX + 8 };

static struct config_pos pos_of_mark(yaml_mark_t m)
{
    return (struct config_pos){(unsigned)m.line + 1, (unsigned)m.column + 1};
}

static struct config_pos pos_of(const yaml_node_t *node) { return pos_of_mark(node->start_mark); }

static const yaml_node_t *node_at(struct yaml_loader *L, int index)
{
    return yaml_document_get_node(&L->doc, index);
}

static const char *scalar_text(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static size_t scalar_len(const yaml_node_t *n) { return n->data.scalar.length; }

static bool is_plain(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/*
 * Text for a message: control characters escaped, cut after SHOW_MAX bytes (at a
 * UTF-8 character boundary) with "...", wrapped in quote unless quote is 0.
 */
static void show_text(const char *s, size_t len, char quote, char out[SHOW_BUF])
{
    size_t cut = len;
    if (cut > SHOW_MAX) {
        cut = SHOW_MAX;
        while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
            cut--;
    }
    size_t o = 0;
    if (quote)
        out[o++] = quote;
    for (size_t i = 0; i < cut; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || c == '\\' || c == (unsigned char)quote)
            o += (size_t)snprintf(out + o, SHOW_BUF - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    if (cut < len) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    if (quote)
        out[o++] = quote;
    out[o] = '\0';
}

/* What a node is, for "got ...": "\"x\"", "an empty value", "a list", "a mapping". */
static void describe_node(const yaml_node_t *n, bool want_scalar_type, char out[SHOW_BUF + 32])
{
    if (n->type == YAML_MAPPING_NODE) {
        strcpy(out, "a mapping");
    } else if (n->type == YAML_SEQUENCE_NODE) {
        strcpy(out, "a list");
    } else if (is_plain(n) && scalar_len(n) == 0) {
        strcpy(out, "an empty value");
    } else {
        show_text(scalar_text(n), scalar_len(n), '"', out);
        /* tp: "8" is a string in YAML; say so, or the message looks absurd. */
        if (want_scalar_type && !is_plain(n))
            strcat(out, " (quoted, so a string)");
    }
}

/* "an integer", "one of mla, gqa, mha", ... */
static void describe_expected(const struct config_key *k, struct config_text *t)
{
    switch (k->kind) {
    case CONFIG_SECTION: config_text_add(t, "a mapping"); return;
    case CONFIG_STRING:
    case CONFIG_PATH: config_text_add(t, "a string"); return;
    case CONFIG_INT: config_text_add(t, "an integer"); return;
    case CONFIG_NUMBER: config_text_add(t, "a number"); return;
    case CONFIG_PARAM_COUNT: config_text_add(t, "a parameter count such as 671B or 1.04T"); return;
    case CONFIG_BOOL: config_text_add(t, "true or false"); return;
    case CONFIG_TOKEN_LIST: config_text_add(t, "a list of token counts such as [32k, 128k]"); return;
    case CONFIG_LAYERS:
        config_text_add(t, "a layer count, a list of layer kinds such as [{sliding_window: 128}, full], or "
                           "{count: N, pattern: [...]}");
        return;
    case CONFIG_ENUM:
        config_text_add(t, "one of ");
        for (unsigned i = 0; i < k->num_choices; i++)
            config_text_add(t, "%s%s", i ? ", " : "", k->choices[i]);
        return;
    }
}

static void type_error_as(struct yaml_loader *L, const char *path, const char *expected,
                          const yaml_node_t *n, bool want_scalar_type)
{
    char got[SHOW_BUF + 32];
    describe_node(n, want_scalar_type, got);
    config_report_add(L->report, DCP_DIAG_ERROR, pos_of(n), path, "expected %s, got %s", expected, got);
}

static void type_error(struct yaml_loader *L, const struct config_key *k, const yaml_node_t *n)
{
    struct config_text expected = {0};
    describe_expected(k, &expected);
    const bool wants_text = k->kind == CONFIG_STRING || k->kind == CONFIG_PATH || k->kind == CONFIG_ENUM;
    type_error_as(L, k->path, expected.buf, n, !wants_text);
}

/* ---- Aliases ------------------------------------------------------------ */

/* Records where node index was written and, the first time only, its children (document order). */
static void find_definitions(struct yaml_loader *L, int parent, size_t slot, int index)
{
    const yaml_node_t *n = node_at(L, index);
    if (!n || L->defs[index].parent >= 0)
        return; /* a later reference: an alias, which the event scan reported */
    L->defs[index] = (struct node_def){parent, slot};
    /* Depth is bounded: scan_events refused documents nested past CONFIG_MAX_DEPTH. */
    if (n->type == YAML_MAPPING_NODE) {
        const yaml_node_pair_t *pairs = n->data.mapping.pairs.start;
        for (const yaml_node_pair_t *p = pairs; p < n->data.mapping.pairs.top; p++) {
            find_definitions(L, index, 2 * (size_t)(p - pairs), p->key);
            find_definitions(L, index, 2 * (size_t)(p - pairs) + 1, p->value);
        }
    } else if (n->type == YAML_SEQUENCE_NODE) {
        const yaml_node_item_t *items = n->data.sequence.items.start;
        for (const yaml_node_item_t *it = items; it < n->data.sequence.items.top; it++)
            find_definitions(L, index, (size_t)(it - items), *it);
    }
}

/* Whether the reference in slot of node holder to node index is an alias. */
static bool is_alias(const struct yaml_loader *L, const yaml_node_t *holder, size_t slot, int index)
{
    const int parent = (int)(holder - L->doc.nodes.start) + 1;
    const ptrdiff_t count = L->doc.nodes.top - L->doc.nodes.start;
    if (index < 1 || index > count)
        return false;
    return L->defs[index].parent != parent || L->defs[index].slot != slot;
}

/* The value of an alias event for messages: "*name". */
static void report_alias(struct yaml_loader *L, const yaml_event_t *ev)
{
    const char *anchor = (const char *)ev->data.alias.anchor;
    char shown[SHOW_BUF];
    show_text(anchor ? anchor : "", anchor ? strlen(anchor) : 0, 0, shown);
    config_report_add(L->report, DCP_DIAG_ERROR, pos_of_mark(ev->start_mark), "",
                      "YAML alias *%s is not supported; write the value out", shown);
}

/* ---- Scalar syntax ------------------------------------------------------- */

static size_t skip_digits(const char *s, size_t len, size_t i)
{
    while (i < len && s[i] >= '0' && s[i] <= '9')
        i++;
    return i;
}

/* YAML 1.2 core schema decimal: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static bool is_decimal(const char *s, size_t len)
{
    size_t i = 0;
    if (i < len && (s[i] == '+' || s[i] == '-'))
        i++;
    const size_t int_start = i;
    i = skip_digits(s, len, i);
    const bool int_digits = i > int_start;
    bool frac_digits = false;
    if (i < len && s[i] == '.') {
        const size_t frac_start = ++i;
        i = skip_digits(s, len, i);
        frac_digits = i > frac_start;
    }
    if (!int_digits && !frac_digits)
        return false;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            i++;
        const size_t exp_start = i;
        i = skip_digits(s, len, i);
        if (i == exp_start)
            return false;
    }
    return i == len;
}

/* A finite decimal number, parsed in the C locale whatever the application set. */
static bool parse_number(const struct yaml_loader *L, const char *s, size_t len, double *out)
{
    char buf[64];
    if (len >= sizeof(buf) || !is_decimal(s, len))
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    const double v = strtod_l(buf, NULL, L->c_locale);
    if (!isfinite(v))
        return false;
    *out = v;
    return true;
}

/* A number with an optional decimal suffix M (1e6), B (1e9) or T (1e12): 671B, 1.04T. */
static bool parse_param_count(const struct yaml_loader *L, const char *s, size_t len, double *out)
{
    static const struct {
        char suffix;
        double mult;
    } suffixes[] = {{'M', 1e6}, {'B', 1e9}, {'T', 1e12}};
    double mult = 1.0;
    for (size_t i = 0; i < DCP_ARRAY_SIZE(suffixes) && len > 0; i++) {
        if (s[len - 1] == suffixes[i].suffix) {
            mult = suffixes[i].mult;
            len--;
            break;
        }
    }
    if (!parse_number(L, s, len, out))
        return false;
    *out *= mult;
    return true;
}

static bool parse_bool(const char *s, size_t len, bool *out)
{
    static const struct {
        const char *text;
        bool value;
    } words[] = {{"true", true}, {"false", false}, {"yes", true}, {"no", false}};
    for (size_t i = 0; i < DCP_ARRAY_SIZE(words); i++) {
        if (strlen(words[i].text) == len && strncasecmp(s, words[i].text, len) == 0) {
            *out = words[i].value;
            return true;
        }
    }
    return false;
}

/* ---- Near misses ---------------------------------------------------------- */

/* Optimal string alignment distance (edits incl. adjacent swaps), case-insensitive. */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    enum { N = 40 };
    size_t d[N][N];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            const int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            size_t best = d[i - 1][j - 1] + (ca != cb);
            best = DCP_MIN(best, d[i - 1][j] + 1);
            best = DCP_MIN(best, d[i][j - 1] + 1);
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb)
                best = DCP_MIN(best, d[i - 2][j - 2] + 1);
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

/* Whether one of a, b starts with the other, sharing at least 3 characters. */
static bool prefix_match(const char *a, size_t la, const char *b, size_t lb)
{
    const size_t n = DCP_MIN(la, lb);
    return n >= 3 && strncasecmp(a, b, n) == 0;
}

/*
 * The index of the name in names[0..count) closest to name (len bytes), or count
 * when none is close: within 2 edits (and fewer edits than name has characters),
 * else sharing a prefix of 3 or more characters. With prefer_prefix a name that
 * starts the candidate wins over edits ("fp8" is a short "fp8_e4m3", not a typo
 * of "fp32").
 */
static size_t closest_name(const char *name, size_t len, const char *const *names, size_t count,
                           bool prefer_prefix)
{
    size_t best = count, prefix = count;
    size_t best_distance = 3; /* suggestions need distance <= 2 */
    for (size_t i = 0; i < count; i++) {
        const size_t ll = strlen(names[i]);
        if (prefix == count && prefix_match(name, len, names[i], ll))
            prefix = i;
        /* Lengths that differ by more than 2 cannot be within distance 2. */
        if (len + 2 < ll || ll + 2 < len || len >= 38 || ll >= 38)
            continue;
        const size_t d = edit_distance(name, len, names[i], ll);
        /* A distance as long as the name itself ("ab" vs "tp") is no resemblance. */
        if (d < best_distance && d < len) {
            best = i;
            best_distance = d;
        }
    }
    if (prefer_prefix && prefix < count && len < strlen(names[prefix]))
        return prefix;
    return best < count ? best : prefix;
}

/* ---- Values -------------------------------------------------------------- */

/* Integers, and the entries of token lists (name/path carry the index). */
static bool load_int_node(struct yaml_loader *L, const struct config_key *k, const yaml_node_t *n,
                          const char *name, const char *path, uint64_t *out)
{
    const bool token = k->kind == CONFIG_TOKEN_LIST;
    enum config_int_parse p = INT_SYNTAX;
    if (is_plain(n))
        p = token ? config_parse_token_count(scalar_text(n), scalar_len(n), out)
                  : config_parse_uint(scalar_text(n), scalar_len(n), out);
    if (p == INT_SYNTAX) {
        type_error_as(L, path, token ? "a token count such as 4096, 128k or 1M" : "an integer", n, true);
        return false;
    }
    char shown[SHOW_BUF];
    show_text(scalar_text(n), scalar_len(n), 0, shown);
    if (p == INT_RANGE) {
        config_report_range(L->report, k, name, path, pos_of(n), shown);
        return false;
    }
    return config_check_int(L->report, k, name, path, pos_of(n), *out, shown);
}

static bool load_token_list(struct yaml_loader *L, const struct config_key *k, const yaml_node_t *n)
{
    if (n->type != YAML_SEQUENCE_NODE) {
        type_error(L, k, n);
        return false;
    }
    const yaml_node_item_t *items = n->data.sequence.items.start;
    const size_t count = (size_t)(n->data.sequence.items.top - items);
    if (count == 0) {
        config_report_add(L->report, DCP_DIAG_ERROR, pos_of(n), k->path,
                          "empty list; give at least one token count");
        return false;
    }
    uint64_t *values = (uint64_t *)((char *)&L->cfg + k->offset);
    uint32_t stored = 0;
    bool ok = true;
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = node_at(L, items[i]);
        char name[64], path[96];
        snprintf(name, sizeof(name), "%s[%zu]", config_key_name(k), i);
        snprintf(path, sizeof(path), "%s[%zu]", k->path, i);
        if (i == k->max_count) {
            config_report_too_many(L->report, k, path, pos_of(item), count);
            ok = false;
            break;
        }
        if (is_alias(L, n, i, items[i])) {
            ok = false; /* reported where it was written */
            continue;
        }
        if (load_int_node(L, k, item, name, path, &values[stored]))
            stored++;
        else
            ok = false;
    }
    memcpy((char *)&L->cfg + k->count_offset, &stored, sizeof(stored));
    return ok;
}

/* ---- model.layers -------------------------------------------------------- */

/* The value of key name (len bytes) in mapping map, or NULL; duplicates and aliases are reported. */
static const yaml_node_t *mapping_value(struct yaml_loader *L, const yaml_node_t *map, const char *path,
                                        const char *name)
{
    const yaml_node_t *found = NULL;
    const yaml_node_pair_t *pairs = map->data.mapping.pairs.start;
    for (const yaml_node_pair_t *p = pairs; p < map->data.mapping.pairs.top; p++) {
        const yaml_node_t *key = node_at(L, p->key), *value = node_at(L, p->value);
        if (!key || !value || key->type != YAML_SCALAR_NODE || strlen(name) != scalar_len(key) ||
            strncmp(name, scalar_text(key), scalar_len(key)) != 0)
            continue;
        if (found)
            config_report_add(L->report, DCP_DIAG_ERROR, pos_of(key), path, "duplicate key '%s'", name);
        found = is_alias(L, map, 2 * (size_t)(p - pairs) + 1, p->value) ? NULL : value;
    }
    return found;
}

/* Reports keys of map not among names (count of them). */
static bool only_keys(struct yaml_loader *L, const yaml_node_t *map, const char *path, const char *const *names,
                      size_t count)
{
    bool ok = true;
    for (const yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const yaml_node_t *key = node_at(L, p->key);
        if (!key || key->type != YAML_SCALAR_NODE) {
            if (key)
                type_error_as(L, path, "a key name", key, false);
            ok = false;
            continue;
        }
        bool known = false;
        for (size_t i = 0; i < count && !known; i++)
            known = strlen(names[i]) == scalar_len(key) && strncmp(names[i], scalar_text(key), scalar_len(key)) == 0;
        if (!known) {
            struct config_text allowed = {0};
            for (size_t i = 0; i < count; i++)
                config_text_add(&allowed, "%s%s", i ? ", " : "", names[i]);
            char shown[SHOW_BUF];
            show_text(scalar_text(key), scalar_len(key), 0, shown);
            config_report_add(L->report, DCP_DIAG_ERROR, pos_of(key), path, "unknown key '%s'; allowed: %s", shown,
                              allowed.buf);
            ok = false;
        }
    }
    return ok;
}

/* An integer of a layer entry (range from its pseudo key) into *out. */
static bool layer_int(struct yaml_loader *L, const struct config_key *k, const yaml_node_t *n, const char *path,
                      uint32_t *out)
{
    uint64_t u = 0;
    char sub[128];
    snprintf(sub, sizeof(sub), "%s.%s", path, config_key_name(k));
    if (n->type != YAML_SCALAR_NODE) {
        type_error_as(L, sub, "an integer", n, true);
        return false;
    }
    if (!load_int_node(L, k, n, config_key_name(k), sub, &u))
        return false;
    *out = (uint32_t)u;
    return true;
}

/* A boolean of a layer entry into *out. */
static bool layer_bool(struct yaml_loader *L, const yaml_node_t *n, const char *path, const char *name, bool *out)
{
    char sub[128];
    snprintf(sub, sizeof(sub), "%s.%s", path, name);
    if (is_plain(n) && parse_bool(scalar_text(n), scalar_len(n), out))
        return true;
    type_error_as(L, sub, "true or false", n, true);
    return false;
}

/*
 * One entry of a layer list: a scalar kind without parameters (full, none), or a
 * mapping {sliding_window: W | sparse_topk: K | full: true | none: true, sink: bool,
 * repeat: n} (no kind key: full).
 */
static bool load_layer_entry(struct yaml_loader *L, const yaml_node_t *n, const char *path, struct dcp_layer_kind *out)
{
    memset(out, 0, sizeof(*out));
    out->repeat = 1;
    if (n->type == YAML_SCALAR_NODE) {
        const char *s = scalar_text(n);
        const size_t len = scalar_len(n);
        for (int t = 0; t < (int)DCP_ARRAY_SIZE(config_layer_type_names); t++)
            if (strlen(config_layer_type_names[t]) == len && strncasecmp(s, config_layer_type_names[t], len) == 0) {
                if (t == DCP_LAYER_SLIDING_WINDOW || t == DCP_LAYER_SPARSE_TOPK) {
                    config_report_add(L->report, DCP_DIAG_ERROR, pos_of(n), path, "%s needs its size: write "
                                      "{%s: %s}", config_layer_type_names[t], config_layer_type_names[t],
                                      t == DCP_LAYER_SLIDING_WINDOW ? "128" : "2048");
                    return false;
                }
                out->type = (enum dcp_layer_type)t;
                return true;
            }
        char shown[SHOW_BUF];
        show_text(s, len, '"', shown);
        config_report_add(L->report, DCP_DIAG_ERROR, pos_of(n), path, "unknown layer kind %s; valid: full, none, "
                          "{sliding_window: W}, {sparse_topk: K} (each mapping may add sink: true and repeat: n)",
                          shown);
        return false;
    }
    if (n->type != YAML_MAPPING_NODE) {
        type_error_as(L, path, "a layer kind (full, none, or a mapping such as {sliding_window: 128})", n, false);
        return false;
    }
    static const char *const keys[] = {"full", "none", "sliding_window", "sparse_topk", "sink", "repeat"};
    bool ok = only_keys(L, n, path, keys, DCP_ARRAY_SIZE(keys));
    const yaml_node_t *full = mapping_value(L, n, path, "full"), *none = mapping_value(L, n, path, "none");
    const yaml_node_t *window = mapping_value(L, n, path, "sliding_window");
    const yaml_node_t *topk = mapping_value(L, n, path, "sparse_topk");
    const yaml_node_t *sink = mapping_value(L, n, path, "sink"), *repeat = mapping_value(L, n, path, "repeat");
    const int kinds = (full != NULL) + (none != NULL) + (window != NULL) + (topk != NULL);
    if (kinds > 1) {
        config_report_add(L->report, DCP_DIAG_ERROR, pos_of(n), path, "one layer kind per entry: give one of full, "
                          "none, sliding_window, sparse_topk");
        return false;
    }
    bool flag = true;
    if (full && (ok &= layer_bool(L, full, path, "full", &flag)) && !flag) {
        config_report_add(L->report, DCP_DIAG_ERROR, pos_of(full), path, "full: false names no kind; write the "
                          "layer's kind instead");
        ok = false;
    }
    if (none && (ok &= layer_bool(L, none, path, "none", &flag))) {
        if (!flag) {
            config_report_add(L->report, DCP_DIAG_ERROR, pos_of(none), path, "none: false names no kind; write the "
                              "layer's kind instead");
            ok = false;
        }
        out->type = DCP_LAYER_NONE;
    }
    if (window) {
        out->type = DCP_LAYER_SLIDING_WINDOW;
        ok &= layer_int(L, &config_layer_window_key, window, path, &out->window);
    }
    if (topk) {
        out->type = DCP_LAYER_SPARSE_TOPK;
        ok &= layer_int(L, &config_layer_topk_key, topk, path, &out->topk);
    }
    if (sink)
        ok &= layer_bool(L, sink, path, "sink", &out->sink);
    if (repeat)
        ok &= layer_int(L, &config_layer_repeat_key, repeat, path, &out->repeat);
    return ok && config_check_layer_kind(L->report, path, pos_of(n), out);
}

/*
 * model.layers: a count (every layer full); a list of entries, one per layer or
 * per run of `repeat` layers; or {count: N, pattern: [entries]}, the pattern
 * repeated from layer 0 until N layers.
 */
static bool load_layers(struct yaml_loader *L, const struct config_key *k, const yaml_node_t *n)
{
    struct dcp_model_config *m = &L->cfg.model;
    m->num_layer_kinds = 0;
    if (n->type == YAML_SCALAR_NODE) {
        uint64_t u;
        if (!is_plain(n)) {
            type_error(L, k, n);
            return false;
        }
        if (!load_int_node(L, k, n, config_key_name(k), k->path, &u))
            return false;
        m->num_layers = (uint32_t)u;
        return true;
    }
    const yaml_node_t *list = n, *count = NULL;
    char path[96];
    snprintf(path, sizeof(path), "%s", k->path);
    if (n->type == YAML_MAPPING_NODE) {
        static const char *const keys[] = {"count", "pattern"};
        if (!only_keys(L, n, k->path, keys, DCP_ARRAY_SIZE(keys)))
            return false;
        count = mapping_value(L, n, k->path, "count");
        list = mapping_value(L, n, k->path, "pattern");
        if (!list) {
            config_report_add(L->report, DCP_DIAG_ERROR, pos_of(n), k->path, "missing 'pattern': the list of layer "
                              "kinds the count repeats");
            return false;
        }
        snprintf(path, sizeof(path), "%s.pattern", k->path);
    }
    if (list->type != YAML_SEQUENCE_NODE) {
        type_error(L, k, list);
        return false;
    }
    const yaml_node_item_t *items = list->data.sequence.items.start;
    const size_t entries = (size_t)(list->data.sequence.items.top - items);
    if (entries == 0) {
        config_report_add(L->report, DCP_DIAG_ERROR, pos_of(list), path, "empty list; give at least one layer kind");
        return false;
    }
    if (entries > DCP_MAX_LAYER_PATTERN) {
        config_report_too_many(L->report, k, path, pos_of(list), entries);
        return false;
    }
    bool ok = true;
    uint64_t layers = 0;
    for (size_t i = 0; i < entries; i++) {
        char entry_path[160];
        snprintf(entry_path, sizeof(entry_path), "%s[%zu]", path, i);
        const yaml_node_t *item = node_at(L, items[i]);
        if (is_alias(L, list, i, items[i]) || !item) {
            ok = false;
            continue;
        }
        ok &= load_layer_entry(L, item, entry_path, &m->layer_pattern[i]);
        layers += m->layer_pattern[i].repeat;
    }
    m->num_layer_kinds = (uint32_t)entries;
    if (count) {
        uint64_t u;
        if (count->type != YAML_SCALAR_NODE || !is_plain(count)) {
            type_error_as(L, k->path, "an integer count", count, true);
            return false;
        }
        if (!load_int_node(L, k, count, "count", k->path, &u))
            return false;
        layers = u;
    } else {
        char shown[24];
        snprintf(shown, sizeof(shown), "%llu", (unsigned long long)layers);
        ok = ok && config_check_int(L->report, k, "layers (the entries' repeats)", k->path, pos_of(list), layers, shown);
    }
    m->num_layers = (uint32_t)layers;
    return ok;
}

/* A relative path names a file next to the deployment file. */
static bool load_path(struct yaml_loader *L, const struct config_key *k, const char *s)
{
    const size_t i = config_key_index(k);
    if (s[0] == '/' || !L->base_dir) {
        config_store_string(&L->cfg, k, s);
        return true;
    }
    L->resolved[i] = dcp_asprintf("%s/%s", L->base_dir, s);
    if (!L->resolved[i]) {
        L->out_of_memory = true;
        return false;
    }
    config_store_string(&L->cfg, k, L->resolved[i]);
    return true;
}

static bool load_enum(struct yaml_loader *L, const struct config_key *k, const yaml_node_t *n)
{
    const char *s = scalar_text(n);
    const size_t len = scalar_len(n);
    for (unsigned i = 0; i < k->num_choices; i++) {
        if (strlen(k->choices[i]) == len && strncasecmp(s, k->choices[i], len) == 0) {
            config_store_int(&L->cfg, k, i);
            return true;
        }
    }
    char shown[SHOW_BUF];
    show_text(s, len, '"', shown);
    const size_t near = closest_name(s, len, k->choices, k->num_choices, true);
    config_report_choice(L->report, k, k->path, pos_of(n), shown,
                         near < k->num_choices ? k->choices[near] : NULL);
    return false;
}

static bool load_number(struct yaml_loader *L, const struct config_key *k, const yaml_node_t *n)
{
    double v;
    const bool parsed = k->kind == CONFIG_PARAM_COUNT
                            ? parse_param_count(L, scalar_text(n), scalar_len(n), &v)
                            : parse_number(L, scalar_text(n), scalar_len(n), &v);
    if (!parsed) {
        type_error(L, k, n);
        return false;
    }
    char shown[SHOW_BUF];
    show_text(scalar_text(n), scalar_len(n), 0, shown);
    if (!config_check_number(L->report, k, k->path, pos_of(n), v, shown))
        return false;
    config_store_number(&L->cfg, k, v);
    return true;
}

/* Parses the value of key k (not a section) and stores it; false if it is wrong. */
static bool load_value(struct yaml_loader *L, const struct config_key *k, const yaml_node_t *n)
{
    if (k->kind == CONFIG_TOKEN_LIST)
        return load_token_list(L, k, n);
    if (k->kind == CONFIG_LAYERS)
        return load_layers(L, k, n);
    const bool text = k->kind == CONFIG_STRING || k->kind == CONFIG_PATH || k->kind == CONFIG_ENUM;
    /* Numbers and booleans must be plain scalars: a quoted one is a string in YAML. */
    if (n->type != YAML_SCALAR_NODE || (!text && !is_plain(n))) {
        type_error(L, k, n);
        return false;
    }
    switch (k->kind) {
    case CONFIG_STRING:
    case CONFIG_PATH:
        if (scalar_len(n) == 0 || scalar_text(n)[0] == '\0') {
            config_report_add(L->report, DCP_DIAG_ERROR, pos_of(n), k->path, "must not be empty");
            return false;
        }
        if (memchr(scalar_text(n), '\0', scalar_len(n))) { /* a "\0" escape: C strings would end there */
            config_report_add(L->report, DCP_DIAG_ERROR, pos_of(n), k->path,
                              "holds a NUL byte (\\0), which a name or path cannot");
            return false;
        }
        if (k->kind == CONFIG_PATH)
            return load_path(L, k, scalar_text(n));
        config_store_string(&L->cfg, k, scalar_text(n));
        return true;
    case CONFIG_ENUM: return load_enum(L, k, n);
    case CONFIG_INT: {
        uint64_t u;
        if (!load_int_node(L, k, n, config_key_name(k), k->path, &u))
            return false;
        config_store_int(&L->cfg, k, u);
        return true;
    }
    case CONFIG_NUMBER:
    case CONFIG_PARAM_COUNT: return load_number(L, k, n);
    case CONFIG_BOOL: {
        bool b;
        if (!parse_bool(scalar_text(n), scalar_len(n), &b)) {
            type_error(L, k, n);
            return false;
        }
        config_store_int(&L->cfg, k, b);
        return true;
    }
    case CONFIG_SECTION:
    case CONFIG_TOKEN_LIST:
    case CONFIG_LAYERS: break;
    }
    return false;
}

/* ---- Keys ---------------------------------------------------------------- */

/* The allowed key under parent closest to an unknown name, or NULL if none is close. */
static const struct config_key *closest_key(const char *parent, const char *name, size_t len)
{
    const char *names[CONFIG_KEY_MAX];
    const struct config_key *keys[CONFIG_KEY_MAX];
    size_t n = 0;
    for (size_t i = 0; i < config_key_count; i++) {
        if (config_key_is_under(&config_keys[i], parent)) {
            keys[n] = &config_keys[i];
            names[n++] = config_key_name(&config_keys[i]);
        }
    }
    const size_t near = closest_name(name, len, names, n, false);
    return near < n ? keys[near] : NULL;
}

/* A key of that exact name in another section (interleave under memory:), or NULL. */
static const struct config_key *key_in_other_section(const char *parent, const char *name, size_t len)
{
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        const char *leaf = config_key_name(k);
        if (strlen(leaf) == len && memcmp(leaf, name, len) == 0 && !config_key_is_under(k, parent))
            return k;
    }
    return NULL;
}

static void report_unknown_key(struct yaml_loader *L, const char *parent, const yaml_node_t *key)
{
    const char *what = parent[0] ? "key" : "section";
    char shown[SHOW_BUF], path[SHOW_BUF + 32];
    show_text(scalar_text(key), scalar_len(key), 0, shown);
    snprintf(path, sizeof(path), "%s%s%s", parent, parent[0] ? "." : "", shown);
    const char *outside = config_key_outside_model(path);
    if (outside) {
        config_report_add(L->report, DCP_DIAG_ERROR, pos_of(key), path, "%s", outside);
        return;
    }
    const struct config_key *elsewhere = key_in_other_section(parent, scalar_text(key), scalar_len(key));
    if (elsewhere) {
        config_report_add(L->report, DCP_DIAG_ERROR, pos_of(key), path,
                          "unknown %s '%s' here; it belongs in '%s'", what, shown,
                          config_key_parent(elsewhere) ? config_key_parent(elsewhere)->path : "the top level");
        return;
    }
    const struct config_key *near = closest_key(parent, scalar_text(key), scalar_len(key));
    if (near) {
        config_report_add(L->report, DCP_DIAG_ERROR, pos_of(key), path,
                          "unknown %s '%s'; did you mean '%s'?", what, shown, config_key_name(near));
        return;
    }
    struct config_text allowed = {0};
    for (size_t i = 0; i < config_key_count; i++)
        if (config_key_is_under(&config_keys[i], parent))
            config_text_add(&allowed, "%s%s", allowed.len ? ", " : "", config_key_name(&config_keys[i]));
    config_report_add(L->report, DCP_DIAG_ERROR, pos_of(key), path, "unknown %s '%s'; allowed %ss: %s",
                      what, shown, what, allowed.buf);
}

static void walk_mapping(struct yaml_loader *L, const yaml_node_t *map, const char *parent)
{
    const yaml_node_pair_t *pairs = map->data.mapping.pairs.start;
    for (const yaml_node_pair_t *p = pairs; p < map->data.mapping.pairs.top; p++) {
        const yaml_node_t *key = node_at(L, p->key), *value = node_at(L, p->value);
        const size_t slot = 2 * (size_t)(p - pairs);
        /* An alias was reported where it was written; the rest is still checked. */
        if (!key || !value || is_alias(L, map, slot, p->key))
            continue;
        if (key->type != YAML_SCALAR_NODE) {
            type_error_as(L, parent, "a key name", key, false);
            continue;
        }
        const struct config_key *k = config_key_child(parent, scalar_text(key), scalar_len(key));
        if (!k) {
            report_unknown_key(L, parent, key);
            continue;
        }
        const size_t i = config_key_index(k);
        if (L->key_node[i]) {
            config_report_add(L->report, DCP_DIAG_ERROR, pos_of(key), k->path,
                              "duplicate %s '%s' (first defined at line %u)", config_key_word(k),
                              config_key_name(k), pos_of(L->key_node[i]).line);
            continue;
        }
        L->key_node[i] = key;
        if (is_alias(L, map, slot + 1, p->value)) {
            L->state[i] = CONFIG_BAD; /* not "missing": it was given, as an alias */
            continue;
        }
        L->value_node[i] = value;
        if (k->kind != CONFIG_SECTION) {
            L->state[i] = load_value(L, k, value) ? CONFIG_SET : CONFIG_BAD;
        } else if (value->type != YAML_MAPPING_NODE) {
            type_error(L, k, value);
            L->state[i] = CONFIG_BAD;
        } else {
            L->state[i] = CONFIG_SET;
            walk_mapping(L, value, k->path);
        }
    }
}

/* ---- After the walk: required keys and keys for another attention kind ---- */

static void report_not_applicable(struct yaml_loader *L, const struct config_key *k,
                                  enum dcp_attention_kind attn)
{
    static const char *const uses[] = {
        [DCP_ATTN_MLA] = "mla uses kv_lora_rank and rope_dim",
        [DCP_ATTN_GQA] = "gqa uses head_dim and kv_heads",
        [DCP_ATTN_MHA] = "mha uses head_dim",
    };
    struct config_text kinds = {0};
    for (unsigned a = 0; a < DCP_ARRAY_SIZE(config_attention_names); a++)
        if (k->applies & CONFIG_ATTN(a))
            config_text_add(&kinds, "%s%s", kinds.len ? "/" : "", config_attention_names[a]);
    config_report_add(L->report, DCP_DIAG_ERROR, pos_of(L->key_node[config_key_index(k)]), k->path,
                      "%s applies to %s; %s", config_key_name(k), kinds.buf, uses[attn]);
}

/* The mapping a key belongs in: its section's, or the document's. */
static const yaml_node_t *parent_mapping(const struct yaml_loader *L, const struct config_key *k)
{
    const struct config_key *parent = config_key_parent(k);
    return parent ? L->value_node[config_key_index(parent)] : L->root;
}

static void check_presence(struct yaml_loader *L)
{
    const size_t attn_index = config_key_index(config_key_find("model.attention"));
    const bool attn_known = L->state[attn_index] == CONFIG_SET;
    const enum dcp_attention_kind attn = L->cfg.model.attention;
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        if (L->state[i] == CONFIG_SET && attn_known && !(k->applies & CONFIG_ATTN(attn))) {
            report_not_applicable(L, k, attn);
            L->state[i] = CONFIG_BAD;
        }
        if (L->state[i] != CONFIG_ABSENT || !k->required)
            continue;
        /* A key is only reported missing where it could have been written. */
        const struct config_key *parent = config_key_parent(k);
        const bool parent_ok = !parent || L->state[config_key_index(parent)] == CONFIG_SET;
        const bool required = attn_known ? config_key_required_for(k, attn)
                                         : k->required == CONFIG_ATTN_ALL;
        if (required && parent_ok)
            config_report_missing(L->report, k, pos_of(parent_mapping(L, k)));
        if (required || !attn_known)
            L->state[i] = CONFIG_BAD;
    }
}

/* For rule errors: the key's value, or the closest enclosing mapping that was written. */
static struct config_pos locate_key(const void *user, const struct config_key *k)
{
    const struct yaml_loader *L = user;
    for (; k; k = config_key_parent(k))
        if (L->value_node[config_key_index(k)])
            return pos_of(L->value_node[config_key_index(k)]);
    return pos_of(L->root);
}

/* ---- The document -------------------------------------------------------- */

/* Line and column of a byte offset (libyaml reader errors give only the offset). */
static struct config_pos pos_of_offset(const char *text, size_t len, size_t offset)
{
    struct config_pos pos = {1, 1};
    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n') {
            pos.line++;
            pos.column = 1;
        } else {
            pos.column++;
        }
    }
    return pos;
}

/*
 * Column (1-based) of the first tab among the blanks that start line (0-based)
 * of text, or 0 when that indentation has none.
 */
static size_t indent_tab_column(const char *text, size_t len, size_t line)
{
    size_t i = 0;
    for (size_t l = 0; l < line; l++) {
        const char *nl = memchr(text + i, '\n', len - i);
        if (!nl)
            return 0;
        i = (size_t)(nl - text) + 1;
    }
    for (size_t col = 1; i < len && (text[i] == ' ' || text[i] == '\t'); i++, col++)
        if (text[i] == '\t')
            return col;
    return 0;
}

/*
 * libyaml reports a tab used for indentation as "found character that cannot
 * start any token" or a wrong indentation: name the tab, on the line of the
 * problem or else of its context.
 */
static void add_tab_hint(struct config_text *t, const yaml_parser_t *parser, const char *text,
                         size_t len)
{
    const size_t lines[2] = {parser->problem_mark.line, parser->context_mark.line};
    for (size_t i = 0; i < (parser->context ? 2u : 1u); i++) {
        const size_t col = indent_tab_column(text, len, lines[i]);
        if (col) {
            config_text_add(t, "; a tab indents line %zu (column %zu): YAML indents with spaces only",
                            lines[i] + 1, col);
            return;
        }
    }
}

static void report_parse_error(struct yaml_loader *L, const yaml_parser_t *parser, const char *text,
                               size_t len)
{
    if (parser->error == YAML_MEMORY_ERROR) {
        L->out_of_memory = true;
        return;
    }
    struct config_text t = {0};
    config_text_add(&t, "malformed YAML: %s", parser->problem ? parser->problem : "unknown error");
    struct config_pos pos = pos_of_mark(parser->problem_mark);
    if (parser->error == YAML_READER_ERROR) {
        pos = pos_of_offset(text, len, parser->problem_offset);
        if (parser->problem_value >= 0)
            config_text_add(&t, " (byte 0x%02x)", (unsigned)parser->problem_value);
    }
    if (parser->context)
        config_text_add(&t, " (%s at line %zu, column %zu)", parser->context,
                        parser->context_mark.line + 1, parser->context_mark.column + 1);
    if (parser->error == YAML_SCANNER_ERROR || parser->error == YAML_PARSER_ERROR)
        add_tab_hint(&t, parser, text, len);
    config_report_add(L->report, DCP_DIAG_ERROR, pos, "", "%s", t.buf);
}

/*
 * Reads the events of the first document before it is composed: reports every
 * alias (*name) at its own position, since the composed document only keeps a
 * second reference to the anchored node, and checks that no list or mapping nests
 * deeper than CONFIG_MAX_DEPTH, reading events only as far as needed. libyaml's scanner does work proportional to the
 * nesting depth for every token, so composing a document nested 100,000 levels
 * takes quadratic time (24 s for 200 KB); this pass stops at the cap, keeping a
 * load linear in the size of its input. Syntax errors are left to the loader,
 * which reports them with their position. Returns false after reporting.
 */
static bool scan_events(struct yaml_loader *L, const char *text, size_t len)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        L->out_of_memory = true;
        return false;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    unsigned depth = 0;
    bool ok = true;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev))
            break; /* the loader reports it */
        const yaml_event_type_t type = ev.type;
        if (type == YAML_ALIAS_EVENT)
            report_alias(L, &ev);
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > CONFIG_MAX_DEPTH) {
                config_report_add(L->report, DCP_DIAG_ERROR, pos_of_mark(ev.start_mark), "",
                                  "lists and mappings nest deeper than %d levels here; a deployment "
                                  "needs 3",
                                  CONFIG_MAX_DEPTH);
                ok = false;
            }
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        yaml_event_delete(&ev);
        /* A second document is reported (and not scanned) by load_document(). */
        if (!ok || type == YAML_DOCUMENT_END_EVENT || type == YAML_STREAM_END_EVENT)
            break;
    }
    yaml_parser_delete(&parser);
    return ok;
}

/*
 * Loads the single document and checks its shape. Returns false when nothing
 * more can be checked (malformed, empty, or not a mapping).
 */
static bool load_document(struct yaml_loader *L, yaml_parser_t *parser, const char *text, size_t len)
{
    if (!scan_events(L, text, len))
        return false;
    if (!yaml_parser_load(parser, &L->doc)) {
        report_parse_error(L, parser, text, len);
        return false;
    }
    L->have_doc = true;
    L->root = yaml_document_get_root_node(&L->doc);
    const char *sections = "sections model, hardware, parallel, workload";
    if (!L->root) {
        config_report_add(L->report, DCP_DIAG_ERROR, (struct config_pos){1, 1}, "",
                          "empty document; expected a mapping with %s", sections);
        return false;
    }
    yaml_document_t next;
    if (!yaml_parser_load(parser, &next)) {
        report_parse_error(L, parser, text, len);
        return false;
    }
    const bool more = yaml_document_get_root_node(&next) != NULL;
    const struct config_pos next_pos = pos_of_mark(next.start_mark);
    yaml_document_delete(&next);
    if (more)
        config_report_add(L->report, DCP_DIAG_ERROR, next_pos, "",
                          "a second YAML document starts here; a deployment file holds one");
    if (L->root->type != YAML_MAPPING_NODE) {
        type_error_as(L, "", "a mapping with sections model, hardware, parallel, workload", L->root, false);
        return false;
    }
    const ptrdiff_t count = L->doc.nodes.top - L->doc.nodes.start;
    L->defs = malloc(((size_t)count + 1) * sizeof(*L->defs));
    if (!L->defs) {
        L->out_of_memory = true;
        return false;
    }
    for (ptrdiff_t i = 0; i <= count; i++)
        L->defs[i].parent = -1;
    find_definitions(L, 0, 0, (int)(L->root - L->doc.nodes.start) + 1);
    return true;
}

void config_yaml_free(struct yaml_loader **loader)
{
    struct yaml_loader *L = *loader;
    if (!L)
        return;
    *loader = NULL;
    if (L->have_doc)
        yaml_document_delete(&L->doc);
    for (size_t i = 0; i < CONFIG_KEY_MAX; i++)
        free(L->resolved[i]);
    free(L->defs);
    if (L->c_locale)
        freelocale(L->c_locale);
    free(L);
}

int config_yaml_load(struct config_report *r, const char *text, size_t len, const char *base_dir,
                     struct yaml_loader **out)
{
    *out = NULL;
    struct yaml_loader *L = calloc(1, sizeof(*L));
    if (!L)
        return DCP_ENOMEM;
    L->report = r;
    L->base_dir = base_dir;
    L->c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    yaml_parser_t parser;
    if (!L->c_locale || !yaml_parser_initialize(&parser)) {
        config_yaml_free(&L);
        return DCP_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    dcp_config_defaults(&L->cfg);
    const unsigned errors_before = r->errors;
    if (load_document(L, &parser, text, len)) {
        walk_mapping(L, L->root, "");
        check_presence(L);
        config_resolve_and_check(r, &L->cfg, L->state, locate_key, L);
    }
    yaml_parser_delete(&parser);
    const bool out_of_memory = L->out_of_memory;
    if (!out_of_memory && r->errors == errors_before)
        *out = L;
    else
        config_yaml_free(&L);
    return out_of_memory ? DCP_ENOMEM : DCP_OK;
}

const struct dcp_config *config_yaml_config(const struct yaml_loader *L) { return &L->cfg; }
