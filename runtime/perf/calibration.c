/*
 * calibration.c: the calibration file of the performance model (include/dcp/perf.h,
 * docs/plan.md "Calibration"): written by dcp_calibration_write(), read by
 * dcp_perf_params_load(). A small YAML document:
 *
 *   calibration:
 *     version: 1
 *     backend: host (4 ranks)
 *     deployment: configs/default.yaml
 *     hbm_gbps: 20
 *     collectives:
 *       - {kind: all_gather, ranks: 4, link: nvlink, alpha_us: 11.2, beta_gbps: 3.1}
 *     kv_efficiency: 0.42
 *     attention_call_us: 3.5
 *     kernel_gap_eager_us: 4.1
 *     samples: {...}          # the raw measurements, for people; not read back
 *
 * The reader is strict: an unknown key, a duplicate, a value out of range or of the
 * wrong type is an error with its position; nothing is applied unless all is well.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "dcp/perf.h"
#include "util/diag_internal.h"
#include "util/file.h"
#include "util/util.h"

/* ---- reading ----------------------------------------------------------------------------- */

struct reader {
    const char *path;
    dcp_diag *diag;
    yaml_document_t doc;
    unsigned errors;
    bool oom;
    struct dcp_perf_params p; /* what is being filled */
};

static void DCP_PRINTF(4, 5) report(struct reader *r, const yaml_node_t *at, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r->errors++;
    if (dcp_diag_add(r->diag, DCP_DIAG_ERROR, r->path, at ? (unsigned)at->start_mark.line + 1 : 0,
                     at ? (unsigned)at->start_mark.column + 1 : 0, key, "%s", msg))
        r->oom = true;
}

static const char *text(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static bool scalar(struct reader *r, const yaml_node_t *n, const char *key)
{
    if (n && n->type == YAML_SCALAR_NODE)
        return true;
    report(r, n, key, "expected a value, got a %s", n && n->type == YAML_MAPPING_NODE ? "mapping" : "list");
    return false;
}

/* A finite number in [lo, hi] (lo excluded when open). */
static bool number(struct reader *r, const yaml_node_t *n, const char *key, double lo, double hi, bool open,
                   double *out)
{
    if (!scalar(r, n, key))
        return false;
    char *end;
    errno = 0;
    const double v = strtod(text(n), &end);
    if (end == text(n) || *end || errno || !isfinite(v)) {
        report(r, n, key, "expected a number, got \"%s\"", text(n));
        return false;
    }
    if (v < lo || v > hi || (open && v == lo)) {
        report(r, n, key, "%g is out of range; valid: %s%g..%g", v, open ? "above " : "", lo, hi);
        return false;
    }
    *out = v;
    return true;
}

static enum dcp_plan_comm_kind kind_of(const char *s, bool *ok)
{
    for (int k = 0; k < DCP_PERF_COLL_KINDS; k++)
        if (!strcmp(s, dcp_plan_comm_kind_name((enum dcp_plan_comm_kind)k))) {
            *ok = true;
            return (enum dcp_plan_comm_kind)k;
        }
    *ok = false;
    return DCP_PLAN_COMM_ALL_GATHER;
}

/* Calls fn for each pair of mapping node m, refusing duplicates and keys not in allowed. */
typedef void (*pair_fn)(struct reader *r, const char *key, const yaml_node_t *k, const yaml_node_t *v, void *arg);

static void walk(struct reader *r, const yaml_node_t *m, const char *where, const char *const *allowed, pair_fn fn,
                 void *arg)
{
    if (!m || m->type != YAML_MAPPING_NODE) {
        report(r, m, where, "expected a mapping");
        return;
    }
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(&r->doc, p->key), *v = yaml_document_get_node(&r->doc, p->value);
        if (!k || k->type != YAML_SCALAR_NODE) {
            report(r, k, where, "expected a key name");
            continue;
        }
        char key[128];
        snprintf(key, sizeof(key), "%s.%s", where, text(k));
        bool known = false;
        for (const char *const *a = allowed; *a; a++)
            known |= !strcmp(*a, text(k));
        if (!known) {
            char list[256] = "";
            for (const char *const *a = allowed; *a; a++)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", a == allowed ? "" : ", ", *a);
            report(r, k, key, "unknown key '%s'; allowed: %s", text(k), list);
            continue;
        }
        bool dup = false;
        for (yaml_node_pair_t *q = m->data.mapping.pairs.start; q < p && !dup; q++) {
            const yaml_node_t *qk = yaml_document_get_node(&r->doc, q->key);
            dup = qk && qk->type == YAML_SCALAR_NODE && !strcmp(text(qk), text(k));
        }
        if (dup) {
            report(r, k, key, "duplicate key '%s'", text(k));
            continue;
        }
        fn(r, key, k, v, arg);
    }
}

struct fit_seen {
    struct dcp_perf_collective_fit f;
    unsigned seen; /* bit per field */
};

static void fit_pair(struct reader *r, const char *key, const yaml_node_t *k, const yaml_node_t *v, void *arg)
{
    struct fit_seen *s = arg;
    const char *name = text(k);
    double x;
    if (!strcmp(name, "kind")) {
        bool ok = false;
        if (scalar(r, v, key))
            s->f.kind = kind_of(text(v), &ok);
        if (ok)
            s->seen |= 1;
        else if (v && v->type == YAML_SCALAR_NODE)
            report(r, v, key, "unknown collective \"%s\"; valid: all_gather, reduce_scatter, all_to_all, all_reduce, "
                              "peer_write", text(v));
    } else if (!strcmp(name, "ranks")) {
        if (number(r, v, key, 2, 65536, false, &x)) {
            if (x == floor(x)) {
                s->f.ranks = (uint32_t)x;
                s->seen |= 2;
            } else {
                report(r, v, key, "expected a whole number of ranks, got %g", x);
            }
        }
    } else if (!strcmp(name, "link")) {
        if (scalar(r, v, key) && (!strcmp(text(v), "nvlink") || !strcmp(text(v), "network"))) {
            s->f.link = !strcmp(text(v), "network") ? DCP_PERF_LINK_NETWORK : DCP_PERF_LINK_NVLINK;
            s->seen |= 4;
        } else if (v && v->type == YAML_SCALAR_NODE) {
            report(r, v, key, "unknown link \"%s\"; valid: nvlink, network", text(v));
        }
    } else if (!strcmp(name, "alpha_us")) {
        if (number(r, v, key, 0, 1e7, false, &x)) {
            s->f.alpha = x * 1e-6;
            s->seen |= 8;
        }
    } else if (number(r, v, key, 0, 1e7, true, &x)) { /* beta_gbps */
        s->f.beta = x * 1e9;
        s->seen |= 16;
    }
}

static const char *const fit_keys[] = {"kind", "ranks", "link", "alpha_us", "beta_gbps", NULL};

static void read_collectives(struct reader *r, const char *key, const yaml_node_t *v)
{
    if (!v || v->type != YAML_SEQUENCE_NODE) {
        report(r, v, key, "expected a list of collectives");
        return;
    }
    uint32_t i = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++, i++) {
        char where[128];
        snprintf(where, sizeof(where), "%s[%u]", key, i);
        const yaml_node_t *item = yaml_document_get_node(&r->doc, *it);
        struct fit_seen s = {0};
        walk(r, item, where, fit_keys, fit_pair, &s);
        if (item && item->type == YAML_MAPPING_NODE && s.seen != 31) {
            report(r, item, where, "a collective gives kind, ranks, link, alpha_us and beta_gbps");
            continue;
        }
        if (r->p.num_collective_fits == DCP_PERF_MAX_FITS) {
            report(r, item, where, "more than %d collectives", DCP_PERF_MAX_FITS);
            return;
        }
        r->p.collective_fits[r->p.num_collective_fits++] = s.f;
    }
    r->p.calibrated |= DCP_PERF_CAL_COLLECTIVES;
}

static void top_pair(struct reader *r, const char *key, const yaml_node_t *k, const yaml_node_t *v, void *arg)
{
    (void)arg;
    const char *name = text(k);
    double x;
    if (!strcmp(name, "version")) {
        if (number(r, v, key, 1, 1e6, false, &x) && x != 1)
            report(r, v, key, "version %g is not known; this dcp-run reads version 1", x);
    } else if (!strcmp(name, "backend")) {
        if (scalar(r, v, key))
            snprintf(r->p.calibrated_on, sizeof(r->p.calibrated_on), "%s", text(v));
    } else if (!strcmp(name, "deployment")) {
        (void)scalar(r, v, key);
    } else if (!strcmp(name, "hbm_gbps")) {
        (void)number(r, v, key, 0, 1e7, true, &x);
    } else if (!strcmp(name, "collectives")) {
        read_collectives(r, key, v);
    } else if (!strcmp(name, "kv_efficiency")) {
        if (number(r, v, key, 0, 1, true, &x)) {
            r->p.kv_efficiency = x;
            r->p.calibrated |= DCP_PERF_CAL_KV;
        }
    } else if (!strcmp(name, "attention_call_us")) {
        if (number(r, v, key, 0, 1e7, false, &x)) {
            r->p.attention_call = x * 1e-6;
            r->p.calibrated |= DCP_PERF_CAL_KV;
        }
    } else if (!strcmp(name, "kernel_gap_eager_us")) {
        if (number(r, v, key, 0, 1e7, false, &x)) {
            r->p.kernel_gap_eager = x * 1e-6;
            r->p.calibrated |= DCP_PERF_CAL_LAUNCH;
        }
    } else if (!strcmp(name, "kernel_gap_graph_us")) {
        if (number(r, v, key, 0, 1e7, false, &x)) {
            r->p.kernel_gap_graph = x * 1e-6;
            r->p.calibrated |= DCP_PERF_CAL_GRAPH;
        }
    } else if (v && v->type != YAML_MAPPING_NODE) { /* samples: informational */
        report(r, v, key, "expected a mapping");
    }
}

static const char *const top_keys[] = {"version", "backend", "deployment", "hbm_gbps", "collectives", "kv_efficiency",
                                       "attention_call_us", "kernel_gap_eager_us", "kernel_gap_graph_us", "samples",
                                       NULL};

static void root_pair(struct reader *r, const char *key, const yaml_node_t *k, const yaml_node_t *v, void *arg)
{
    (void)k;
    walk(r, v, key + 1, top_keys, top_pair, arg); /* key is ".calibration" */
}

static const char *const root_keys[] = {"calibration", NULL};

DCP_API int dcp_perf_params_load(const char *path, dcp_diag *diag, struct dcp_perf_params *p)
{
    dcp_clear_error();
    if (!path || !p)
        return dcp_error(DCP_EINVAL, "perf_params_load: NULL argument");
    char *data = NULL;
    size_t len = 0;
    int err = dcp_file_read(path, "calibration file", DCP_PERF_CALIBRATION_MAX_BYTES, 0, &data, &len);
    if (err) {
        dcp_diag_add(diag, DCP_DIAG_ERROR, path, 0, 0, NULL, "%s", dcp_last_error());
        return err;
    }
    struct reader r = {.path = path, .diag = diag, .p = *p};
    r.p.num_collective_fits = 0;
    r.p.calibrated = 0;
    r.p.calibrated_on[0] = '\0';
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        free(data);
        return dcp_error(DCP_ENOMEM, "perf_params_load: YAML parser");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &r.doc)) {
        report(&r, NULL, NULL, "malformed YAML at line %zu, column %zu: %s", parser.problem_mark.line + 1,
               parser.problem_mark.column + 1, parser.problem ? parser.problem : "?");
        yaml_parser_delete(&parser);
        free(data);
        return r.oom ? DCP_ENOMEM : dcp_error(DCP_ECONFIG, "%s: malformed YAML", path);
    }
    const yaml_node_t *root = yaml_document_get_root_node(&r.doc);
    if (!root)
        report(&r, NULL, NULL, "empty document; expected a mapping with the section calibration");
    else
        walk(&r, root, "", root_keys, root_pair, NULL);
    if (root && root->type == YAML_MAPPING_NODE && !r.errors && !r.p.calibrated)
        report(&r, root, "calibration", "no measured input (collectives, kv_efficiency, attention_call_us, "
                                        "kernel_gap_eager_us, kernel_gap_graph_us)");
    yaml_document_delete(&r.doc);
    yaml_parser_delete(&parser);
    free(data);
    if (r.oom)
        return dcp_error(DCP_ENOMEM, "perf_params_load: diagnostics");
    if (r.errors)
        return dcp_error(DCP_ECONFIG, "%s: %u problem%s", path, r.errors, r.errors == 1 ? "" : "s");
    *p = r.p;
    return DCP_OK;
}

/* ---- writing ----------------------------------------------------------------------------- */

/* A string as a double-quoted YAML scalar. */
static void quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

DCP_API int dcp_calibration_write(const struct dcp_calibration *c, const char *path)
{
    dcp_clear_error();
    if (!c || !path)
        return dcp_error(DCP_EINVAL, "calibration_write: NULL argument");
    FILE *f = fopen(path, "w");
    if (!f)
        return dcp_error(DCP_EIO, "cannot write %s: %s", path, strerror(errno));
    const struct dcp_perf_params *p = &c->fit;
    fprintf(f, "# dcp-run calibrate: the performance model's inputs measured on %s with the shapes of %s.\n"
               "# plan and replay read it with --calibration (docs/plan.md, \"Calibration\").\n",
            c->backend, c->deployment);
    fprintf(f, "calibration:\n  version: 1\n  backend: ");
    quoted(f, c->backend);
    fprintf(f, "\n  deployment: ");
    quoted(f, c->deployment);
    fprintf(f, "\n  hbm_gbps: %.9g\n", c->hbm_bandwidth / 1e9);
    if (p->calibrated & DCP_PERF_CAL_COLLECTIVES) {
        fprintf(f, "  collectives:\n");
        for (uint32_t i = 0; i < p->num_collective_fits; i++) {
            const struct dcp_perf_collective_fit *x = &p->collective_fits[i];
            fprintf(f, "    - {kind: %s, ranks: %u, link: %s, alpha_us: %.6g, beta_gbps: %.6g}\n",
                    dcp_plan_comm_kind_name(x->kind), x->ranks, dcp_perf_link_name(x->link), x->alpha * 1e6,
                    x->beta / 1e9);
        }
    }
    if (p->calibrated & DCP_PERF_CAL_KV)
        fprintf(f, "  kv_efficiency: %.6g\n  attention_call_us: %.6g\n", p->kv_efficiency, p->attention_call * 1e6);
    if (p->calibrated & DCP_PERF_CAL_LAUNCH)
        fprintf(f, "  kernel_gap_eager_us: %.6g\n", p->kernel_gap_eager * 1e6);
    if (p->calibrated & DCP_PERF_CAL_GRAPH)
        fprintf(f, "  kernel_gap_graph_us: %.6g\n", p->kernel_gap_graph * 1e6);
    fprintf(f, "  samples:\n    collectives:\n");
    for (uint32_t i = 0; i < c->num_collectives; i++) {
        const struct dcp_calibration_collective *x = &c->collectives[i];
        fprintf(f, "      - {kind: %s, ranks: %u, bytes: %.0f, seconds: %.6g}\n", dcp_plan_comm_kind_name(x->kind),
                x->ranks, x->bytes, x->seconds);
    }
    fprintf(f, "    attention:\n");
    for (uint32_t i = 0; i < c->num_attention; i++) {
        const struct dcp_calibration_attention *x = &c->attention[i];
        fprintf(f, "      - {context: %llu, batch: %u, bytes: %.0f, seconds: %.6g, gbps: %.6g}\n",
                (unsigned long long)x->context, x->batch, x->bytes, x->seconds,
                x->seconds > 0 ? x->bytes / x->seconds / 1e9 : 0.0);
    }
    const bool bad = ferror(f) != 0;
    if (fclose(f) || bad)
        return dcp_error(DCP_EIO, "cannot write %s", path);
    return DCP_OK;
}
