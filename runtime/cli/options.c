/* options.c: the option-table parser and help printer shared by every subcommand. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"

/* Column where option help text starts. */
#define HELP_COLUMN 22

bool cli_parse_u64(const char *s, unsigned long long *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    unsigned long long mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1ull << 10;
    else if (*end == 'M')
        mul = 1ull << 20;
    else if (*end == 'G')
        mul = 1ull << 30;
    if (mul != 1)
        end++;
    if (*end != '\0' || (v && mul > ~0ull / v))
        return false;
    *out = v * mul;
    return true;
}

bool cli_parse_backend_opt(const char *value, void *dest, char *why, size_t why_size)
{
    static const enum dcp_backend_kind kinds[] = {DCP_BACKEND_AUTO, DCP_BACKEND_HOST, DCP_BACKEND_CUDA};
    struct cli_backend_opt *b = dest;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (!strcmp(value, dcp_backend_kind_name(kinds[i]))) {
            b->given = true;
            b->kind = kinds[i];
            return true;
        }
    snprintf(why, why_size, "one of auto, host, cuda");
    return false;
}

bool cli_parse_list(const char *value, void *dest, char *why, size_t why_size)
{
    struct cli_u32_list *l = dest;
    memset(l, 0, sizeof(*l));
    const char *p = value;
    for (;;) {
        char *end;
        unsigned long long x;
        char item[32];
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof(item))
            break;
        memcpy(item, p, len);
        item[len] = '\0';
        x = strtoull(item, &end, 10);
        if (*end || item[0] < '0' || item[0] > '9' || x < 1 || x > 1000000 || l->n == CLI_LIST_MAX ||
            (l->n && x <= l->v[l->n - 1]))
            break;
        l->v[l->n++] = (uint32_t)x;
        if (!p[len])
            return true;
        p += len + 1;
    }
    memset(l, 0, sizeof(*l));
    snprintf(why, why_size, "a comma-separated ascending list of 1 to %d integers in 1..1000000 (1,2,4)",
             CLI_LIST_MAX);
    return false;
}

bool cli_parse_list_or_all(const char *value, void *dest, char *why, size_t why_size)
{
    struct cli_u32_list *l = dest;
    if (!strcmp(value, "all")) {
        memset(l, 0, sizeof(*l));
        l->all = true;
        return true;
    }
    if (cli_parse_list(value, dest, why, why_size))
        return true;
    snprintf(why, why_size, "all, or a comma-separated ascending list of integers (2,4,8)");
    return false;
}

/* Upper bound of an integer option as an integer (a double bound past 2^64 means none). */
static unsigned long long int_max(const struct cli_option *o)
{
    const double cap = o->kind == CLI_ARG_U32 ? (double)UINT32_MAX : 18446744073709551615.0;
    const double m = o->max > 0 && o->max < cap ? o->max : cap;
    return m >= 18446744073709551615.0 ? ~0ull : (unsigned long long)m;
}

/* The accepted range as text: "1..1000", "0..0.5". */
static void range_text(const struct cli_option *o, char *buf, size_t size)
{
    if (o->kind == CLI_ARG_U32 || o->kind == CLI_ARG_U64)
        snprintf(buf, size, "%llu..%llu", (unsigned long long)o->min, int_max(o));
    else
        snprintf(buf, size, "%g..%g", o->min, o->max);
}

/* Stores value into the option's destination; false (why filled) if it is not accepted. */
static bool store(const struct cli_option *o, const char *value, void *opts, char *why, size_t why_size)
{
    void *dest = (char *)opts + o->offset;
    char range[64];
    range_text(o, range, sizeof(range));
    switch (o->kind) {
    case CLI_ARG_U32:
    case CLI_ARG_U64: {
        unsigned long long v = 0;
        if (!cli_parse_u64(value, &v) || v < (unsigned long long)o->min || v > int_max(o)) {
            snprintf(why, why_size, "an integer in %s (k, M, G suffixes allowed)", range);
            return false;
        }
        if (o->kind == CLI_ARG_U32)
            *(uint32_t *)dest = (uint32_t)v;
        else
            *(uint64_t *)dest = v;
        return true;
    }
    case CLI_ARG_REAL: {
        char *end = NULL;
        errno = 0;
        const double v = strtod(value, &end);
        if (end == value || *end || !isfinite(v) || v < o->min || v > o->max) {
            snprintf(why, why_size, "a number in %s", range);
            return false;
        }
        *(double *)dest = v * (o->scale ? o->scale : 1.0);
        return true;
    }
    case CLI_ARG_STRING:
        if (!*value) {
            snprintf(why, why_size, "a non-empty %s", o->metavar ? o->metavar : "value");
            return false;
        }
        *(const char **)dest = value;
        return true;
    case CLI_ARG_CUSTOM:
        return o->parse(value, dest, why, why_size);
    case CLI_ARG_FLAG:
    case CLI_ARG_FLAG_OFF:
        *(bool *)dest = o->kind == CLI_ARG_FLAG;
        return true;
    }
    return false;
}

static void print_usage_lines(const struct cli_spec *spec, FILE *out)
{
    const char *u = spec->usage;
    for (bool first = true; u && *u; first = false) {
        const size_t n = strcspn(u, "\n");
        fprintf(out, "%s dcp-run %s %.*s\n", first ? "usage:" : "      ", spec->command, (int)n, u);
        u += n + (u[n] == '\n');
    }
}

/* A usage error: the reason, the usage line and where the help is, on stderr. */
static int usage_error(const struct cli_spec *spec)
{
    print_usage_lines(spec, stderr);
    fprintf(stderr, "(dcp-run %s --help lists every option)\n", spec->command);
    return CLI_EXIT_USAGE;
}

static const struct cli_option *find(const struct cli_spec *spec, const char *arg, size_t len)
{
    for (size_t i = 0; i < spec->num_options; i++) {
        const char *name = spec->options[i].name;
        if (strlen(name) == len && !strncmp(name, arg, len))
            return &spec->options[i];
    }
    return NULL;
}

int cli_parse(const struct cli_spec *spec, int argc, char **argv, void *opts)
{
    const char *cmd = spec->command;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (options_done || a[0] != '-' || a[1] == '\0') {
            const char **pos = spec->positional ? (const char **)((char *)opts + spec->positional_offset) : NULL;
            if (!pos) {
                fprintf(stderr, "dcp-run %s: unexpected argument '%s' (the command takes options only)\n", cmd, a);
                return usage_error(spec);
            }
            if (*pos) {
                fprintf(stderr, "dcp-run %s: unexpected argument '%s': %s is already '%s'\n", cmd, a,
                        spec->positional, *pos);
                return usage_error(spec);
            }
            *pos = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            options_done = true;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_help(spec, stdout);
            return CLI_PARSE_HELP;
        }
        const char *eq = strchr(a, '=');
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const struct cli_option *o = find(spec, a, len);
        if (!o) {
            fprintf(stderr, "dcp-run %s: unknown option '%.*s'\n", cmd, (int)len, a);
            return usage_error(spec);
        }
        const bool flag = o->kind == CLI_ARG_FLAG || o->kind == CLI_ARG_FLAG_OFF;
        const char *value = NULL;
        if (flag && eq) {
            fprintf(stderr, "dcp-run %s: option %s takes no value (got '%s')\n", cmd, o->name, eq + 1);
            return usage_error(spec);
        }
        if (!flag) {
            if (eq) {
                value = eq + 1;
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                fprintf(stderr, "dcp-run %s: option %s needs a value (%s %s)\n", cmd, o->name, o->name,
                        o->metavar ? o->metavar : "VALUE");
                return usage_error(spec);
            }
        }
        char why[160] = "";
        if (!store(o, value ? value : "", opts, why, sizeof(why))) {
            fprintf(stderr, "dcp-run %s: bad value '%s' for %s: give %s\n", cmd, value, o->name, why);
            return usage_error(spec);
        }
    }
    return 0;
}

/* Prints text with every line after the first indented to column `indent`. */
static void print_wrapped(FILE *out, const char *text, int indent, const char *suffix)
{
    for (bool first = true; first || *text; first = false) {
        const size_t n = strcspn(text, "\n");
        const bool last = text[n] == '\0';
        fprintf(out, "%*s%.*s%s\n", first ? 0 : indent, "", (int)n, text, last ? suffix : "");
        text += n + !last;
    }
}

void cli_help(const struct cli_spec *spec, FILE *out)
{
    print_usage_lines(spec, out);
    if (spec->description)
        fprintf(out, "\n%s", spec->description);
    if (spec->default_deployment && spec->positional)
        fprintf(out, "%s defaults to\n  %s\n", spec->positional, cli_default_deployment());
    fprintf(out, "\noptions:\n");
    for (size_t i = 0; i < spec->num_options; i++) {
        const struct cli_option *o = &spec->options[i];
        char left[64];
        snprintf(left, sizeof(left), "%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(out, "  %-*s", HELP_COLUMN - 3, left);
        /* A name longer than the column starts its help on the next line. */
        if ((int)strlen(left) > HELP_COLUMN - 3)
            fprintf(out, "\n  %-*s", HELP_COLUMN - 3, "");
        fputc(' ', out);
        char suffix[80] = "";
        if (o->kind == CLI_ARG_U32 || o->kind == CLI_ARG_U64 || o->kind == CLI_ARG_REAL) {
            char range[64];
            range_text(o, range, sizeof(range));
            snprintf(suffix, sizeof(suffix), " [%s]", range);
        }
        print_wrapped(out, o->help, HELP_COLUMN, suffix);
    }
    fprintf(out, "  %-*s %s\n", HELP_COLUMN - 3, "--help, -h", "this text");
    if (spec->epilogue)
        fprintf(out, "\n%s", spec->epilogue);
}
