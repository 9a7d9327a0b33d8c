/* replay_plot.c: the SVG of `dcp-run replay --plot`: concurrency and KV use over
 * time for each layout, and bars comparing throughput and latency. Plain SVG 1.1
 * written by hand (no dependency). Series carry ids and data-* attributes so tests
 * can read them back: polyline#concurrency-<layout>, polyline#kv-<layout>,
 * rect#bar-<metric>-<layout> with data-value, text#label-<metric>-<layout> its value.
 *
 * Text is laid out from an estimate of its width (CHAR_EM font sizes a character,
 * at least a sans-serif digit's advance), and every label is kept inside the
 * viewBox: a label that would cross an edge moves inwards. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format.h"
#include "replay.h"
#include "run_common.h"

#define W 960
#define LEFT 70
#define RIGHT 30
#define TOP 60         /* title (baseline 24) and legend (baseline 46) above the panels */
#define PANEL_H 210    /* a panel: title, plot, x labels */
#define PLOT_H 150
#define BARS_H 220    /* the bar groups and their labels */
#define H (TOP + 2 * PANEL_H + BARS_H)
#define EDGE 2         /* labels stay this far inside the viewBox */
#define CHAR_EM 0.65   /* estimated advance of a character, in font sizes */
#define MAX_POINTS 800
#define MAX_X_TICKS 7

#define NUM_COLORS 8
static const char *const colors[NUM_COLORS] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e",
                                               "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/* Most layouts one plot draws (TP and every DCP size). */
#define MAX_LAYOUTS (DCP_PLAN_MAX_DCP_SIZES + 1)

/* "tp", or "dcp<N>": the id suffix of a layout's series. */
static const char *layout_id(const struct replay_result *r)
{
    static _Thread_local char buf[16];
    if (r->dcp == 1)
        return "tp";
    snprintf(buf, sizeof(buf), "dcp%u", r->dcp);
    return buf;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* Characters (UTF-8 code points) of s. */
static size_t text_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static double text_width(const char *s, int font_size) { return (double)text_chars(s) * font_size * CHAR_EM; }

/* A <text> at (x, y) anchored "start", "middle" or "end", moved inwards where its
 * estimated extent would leave the viewBox. attrs (may be "") goes into the tag. */
static void text(FILE *f, double x, double y, int font_size, const char *anchor, const char *attrs, const char *s)
{
    const double w = text_width(s, font_size);
    const double lead = !strcmp(anchor, "middle") ? w / 2 : !strcmp(anchor, "end") ? w : 0;
    x = DCP_CLI_MIN(x, W - EDGE - (w - lead));
    x = DCP_CLI_MAX(x, EDGE + lead);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\"%s%s>", x, y, font_size, anchor,
            *attrs ? " " : "", attrs);
    xml_text(f, s);
    fputs("</text>\n", f);
}

/* s cut to at most max_chars characters by replacing its middle with "...": the
 * start (model, GPUs) and the end (the trace's file name) stay readable. */
static const char *elide(char *buf, size_t size, const char *s, size_t max_chars)
{
    const size_t n = text_chars(s);
    if (n <= max_chars || max_chars < 8) {
        snprintf(buf, size, "%s", s);
        return buf;
    }
    const size_t head = (max_chars - 3) * 2 / 5, tail = max_chars - 3 - head;
    size_t cut = 0, seen = 0; /* cut: where the character after the first head ones starts */
    for (; s[cut]; cut++)
        if (((unsigned char)s[cut] & 0xC0) != 0x80 && seen++ == head)
            break;
    size_t resume = strlen(s); /* where the last tail characters start */
    for (seen = 0; resume > cut && seen < tail;)
        seen += ((unsigned char)s[--resume] & 0xC0) != 0x80;
    snprintf(buf, size, "%.*s...%s", (int)cut, s, s + resume);
    return buf;
}

/* A value in 3 significant digits without an exponent ("8.56", "97.5", "398",
 * "0.0123"); from 1,000 on the whole number with separators. */
static const char *fmt_sig3(char *buf, double v)
{
    const double a = fabs(v);
    if (!isfinite(v))
        snprintf(buf, CLI_FMT_LEN, "%g", v);
    else if (a >= 999.5 && v > 0 && v < 1e18)
        cli_fmt_count(buf, (uint64_t)llround(v));
    else
        snprintf(buf, CLI_FMT_LEN, "%.*f", a > 0 && a < 99.95 ? DCP_CLI_MIN(2 - (int)floor(log10(a)), 6) : 0, v);
    return buf;
}

/* An axis tick: a whole number with separators, else %g ("0.25"). */
static const char *fmt_tick(char *buf, double v)
{
    if (v >= 1000 && v < 1e18 && v == floor(v))
        return cli_fmt_count(buf, (uint64_t)v);
    snprintf(buf, CLI_FMT_LEN, "%g", v);
    return buf;
}

/* The smallest step of 1, 2, 2.5 or 5 x 10^k (and >= min_step) that divides
 * [0, span] into at most max_ticks intervals. */
static double nice_step(double span, int max_ticks, double min_step)
{
    if (!(span > 0))
        return DCP_CLI_MAX(min_step, 1.0);
    const double raw = span / max_ticks;
    const double p = pow(10, floor(log10(raw)));
    static const double steps[] = {1, 2, 2.5, 5, 10};
    double step = 10 * p;
    for (int i = 0; i < 5; i++)
        if (steps[i] * p >= raw * (1 - 1e-12)) {
            step = steps[i] * p;
            break;
        }
    return DCP_CLI_MAX(step, min_step);
}

/* A "nice" maximum >= v for the bars' scale. */
static double nice_max(double v)
{
    if (!(v > 0))
        return 1;
    return ceil(v / nice_step(v, 5, 0) - 1e-9) * nice_step(v, 5, 0);
}

/* One time-series panel: for each layout the maximum of the value per column. */
static void panel(FILE *f, int y0, const char *title, const char *unit, const char *id, const struct replay_result *r,
                  int n, double t_max, bool kv)
{
    double v_max = 0;
    for (int i = 0; i < n; i++)
        v_max = DCP_CLI_MAX(v_max, kv ? r[i].kv_max * 100 : (double)r[i].conc_max);
    /* y: KV in quarters of 100%; concurrency (a count) in whole steps up to a multiple. */
    const double y_step = kv ? 25 : nice_step(v_max, 5, 1);
    v_max = kv ? 100 : DCP_CLI_MAX(1.0, ceil(v_max / y_step - 1e-9)) * y_step;
    const int pw = W - LEFT - RIGHT, ph = PLOT_H;
    char buf[CLI_FMT_LEN + 8], num[CLI_FMT_LEN];
    fprintf(f, "<g class=\"panel\" id=\"panel-%s\">\n", id);
    text(f, LEFT, y0 + 14, 14, "start", "font-weight=\"bold\"", title);
    const int top = y0 + 24;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", LEFT, top, pw, ph);
    for (int k = 0; k * y_step <= v_max * (1 + 1e-9); k++) {
        const double v = k * y_step;
        const double y = top + ph - ph * v / v_max;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, y, LEFT + pw, y);
        snprintf(buf, sizeof(buf), "%s%s", fmt_tick(num, v), unit);
        text(f, LEFT - 4, y + 4, 11, "end", "", buf);
    }
    /* x: round times, the last at most t_max. */
    const double x_step = nice_step(t_max, MAX_X_TICKS, 0);
    for (int k = 0; k * x_step <= t_max * (1 + 1e-9); k++) {
        const double x = LEFT + pw * (k * x_step) / t_max;
        if (k)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>\n", x, top, x, top + ph);
        snprintf(buf, sizeof(buf), "%s s", fmt_tick(num, k * x_step));
        text(f, x, top + ph + 16, 11, "middle", "", buf);
    }
    for (int i = 0; i < n; i++) {
        fprintf(f, "<polyline id=\"%s-%s\" data-layout=\"%s\" data-max=\"%g\" fill=\"none\" stroke=\"%s\" "
                "stroke-width=\"1.5\" points=\"", id, layout_id(&r[i]), layout_id(&r[i]),
                kv ? r[i].kv_max : (double)r[i].conc_max, colors[i % NUM_COLORS]);
        /* Column c holds the largest value of the samples that fall in it; a column
         * without a step keeps the last sample's value; the line ends with the layout's
         * last sample. */
        uint64_t s = 0;
        double last = 0;
        const double t_last = r[i].num_samples ? r[i].samples[r[i].num_samples - 1].t : 0;
        for (int c = 0; c < MAX_POINTS && (c == 0 || t_max * c / MAX_POINTS < t_last); c++) {
            const double t_end = t_max * (c + 1) / MAX_POINTS;
            double m = -1;
            for (; s < r[i].num_samples && r[i].samples[s].t <= t_end; s++) {
                const double v = kv ? r[i].samples[s].kv_used * 100.0 : r[i].samples[s].running;
                m = DCP_CLI_MAX(m, v);
                last = v;
            }
            if (m < 0)
                m = last;
            fprintf(f, "%s%.1f,%.1f", c ? " " : "", LEFT + pw * (c + 0.5) / MAX_POINTS,
                    top + ph - ph * DCP_CLI_MIN(m / v_max, 1.0));
        }
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "</g>\n");
}

/* One group of bars (a metric, one bar per layout), each labelled with its value. */
static void bars(FILE *f, int x0, int y0, const char *metric, const char *label, const double *v,
                 const struct replay_result *r, int n)
{
    const int bh = 140, bw = n > 1 ? DCP_CLI_MIN(60, (200 - 10 * (n - 1)) / n) : 60;
    double m = 0;
    for (int i = 0; i < n; i++)
        m = DCP_CLI_MAX(m, v[i]);
    m = nice_max(m);
    fprintf(f, "<g class=\"bars\" id=\"bars-%s\">\n", metric);
    text(f, x0, y0, 12, "start", "font-weight=\"bold\"", label);
    for (int i = 0; i < n; i++) {
        const double h = bh * DCP_CLI_MIN(v[i] / m, 1.0);
        const int x = x0 + i * (bw + (n > 2 ? 10 : 20));
        fprintf(f, "<rect id=\"bar-%s-%s\" data-layout=\"%s\" data-value=\"%.6g\" x=\"%d\" y=\"%.1f\" width=\"%d\" "
                "height=\"%.1f\" fill=\"%s\"/>\n", metric, layout_id(&r[i]), layout_id(&r[i]), v[i], x,
                y0 + 24 + bh - h, bw, h, colors[i % NUM_COLORS]);
        char val[CLI_FMT_LEN], attrs[64];
        snprintf(attrs, sizeof(attrs), "id=\"label-%s-%s\"", metric, layout_id(&r[i]));
        text(f, x + bw / 2.0, y0 + 20 + bh - h, 11, "middle", attrs, fmt_sig3(val, v[i]));
        char name[16];
        snprintf(name, sizeof(name), r[i].dcp == 1 ? "TP" : n > 2 ? "%u" : "DCP", r[i].dcp);
        text(f, x + bw / 2.0, y0 + 40 + bh, 11, "middle", "", name);
    }
    fprintf(f, "</g>\n");
}

/* The legend: a line under the title, one entry per layout (narrower when many). */
static void legend(FILE *f, const struct replay_result *r, int n)
{
    const int step = n > 4 ? (W - LEFT - RIGHT) / n : 200;
    for (int i = 0; i < n; i++) {
        char name[64];
        if (n > 4)
            snprintf(name, sizeof(name), r[i].dcp == 1 ? "TP" : "dcp %u", r[i].dcp);
        else
            snprintf(name, sizeof(name), r[i].dcp == 1 ? "TP baseline (dcp=1)" : "DCP (dcp=%u)", r[i].dcp);
        const int x = LEFT + i * step;
        fprintf(f, "<rect x=\"%d\" y=\"40\" width=\"14\" height=\"4\" fill=\"%s\"/>\n", x, colors[i % NUM_COLORS]);
        text(f, x + 18, 46, 12, "start", "", name);
    }
}

int replay_plot_svg(const char *path, const char *title, const struct replay_result *r, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return DCP_EIO;
    double t_max = 0;
    for (int i = 0; i < n; i++)
        if (r[i].num_samples)
            t_max = DCP_CLI_MAX(t_max, r[i].samples[r[i].num_samples - 1].t);
    t_max = t_max > 0 ? t_max : 1;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    char t[512];
    text(f, LEFT, 24, 15, "start", "id=\"title\"",
         elide(t, sizeof(t), title, (size_t)((W - LEFT - RIGHT) / (15 * CHAR_EM))));
    /* Legend: its own line under the title. */
    legend(f, r, n);
    panel(f, TOP, "Concurrency (requests running; max per column)", "", "concurrency", r, n, t_max, false);
    panel(f, TOP + PANEL_H, "KV use (share of blocks held; max per column)", "%", "kv", r, n, t_max, true);
    const int y = TOP + 2 * PANEL_H + 20;
    n = DCP_CLI_MIN(n, MAX_LAYOUTS);
    double v[MAX_LAYOUTS] = {0};
    for (int i = 0; i < n; i++)
        v[i] = r[i].tok_s_gpu;
    bars(f, LEFT, y, "throughput", "output tok/s per GPU", v, r, n);
    for (int i = 0; i < n; i++)
        v[i] = r[i].ttft[0];
    bars(f, LEFT + 240, y, "ttft", "TTFT p50 (s)", v, r, n);
    for (int i = 0; i < n; i++)
        v[i] = r[i].tpot[0] * 1e3;
    bars(f, LEFT + 480, y, "tpot", "TPOT p50 (ms)", v, r, n);
    for (int i = 0; i < n; i++)
        v[i] = r[i].conc_mean;
    bars(f, LEFT + 720, y, "concurrency", "mean concurrency", v, r, n);
    fprintf(f, "</svg>\n");
    const bool bad = ferror(f);
    return fclose(f) || bad ? DCP_EIO : DCP_OK;
}

/* ---- the sweep's Pareto view ------------------------------------------------------------------ */

#define PARETO_H 560
#define PARETO_TOP 70
#define PARETO_PH 400

/* tok/s per GPU (y) against TPOT p50 in ms (x): a line per layout through its points
 * in order of concurrency, each point labelled with its number of clients. Points
 * up and to the left are better; the upper-left envelope is the Pareto frontier. */
int replay_plot_pareto(const char *path, const char *title, const struct replay_run *runs, uint32_t num_runs)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return DCP_EIO;
    const int n = DCP_CLI_MIN(runs[0].n, MAX_LAYOUTS);
    double x_max = 0, y_max = 0;
    for (uint32_t j = 0; j < num_runs; j++)
        for (int k = 0; k < n; k++) {
            x_max = DCP_CLI_MAX(x_max, runs[j].r[k].tpot[0] * 1e3);
            y_max = DCP_CLI_MAX(y_max, runs[j].r[k].tok_s_gpu);
        }
    const double x_step = nice_step(x_max > 0 ? x_max : 1, MAX_X_TICKS, 0), y_step = nice_step(y_max > 0 ? y_max : 1, 6, 0);
    x_max = DCP_CLI_MAX(1.0, ceil((x_max > 0 ? x_max : 1) / x_step - 1e-9)) * x_step;
    y_max = DCP_CLI_MAX(1.0, ceil((y_max > 0 ? y_max : 1) / y_step - 1e-9)) * y_step;
    const int pw = W - LEFT - RIGHT, ph = PARETO_PH, top = PARETO_TOP;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n", W, PARETO_H, W, PARETO_H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, PARETO_H);
    char t[512], num[CLI_FMT_LEN];
    text(f, LEFT, 24, 15, "start", "id=\"title\"",
         elide(t, sizeof(t), title, (size_t)((W - LEFT - RIGHT) / (15 * CHAR_EM))));
    legend(f, runs[0].r, n);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", LEFT, top, pw, ph);
    for (int k = 0; k * y_step <= y_max * (1 + 1e-9); k++) {
        const double y = top + ph - ph * k * y_step / y_max;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, y, LEFT + pw, y);
        text(f, LEFT - 4, y + 4, 11, "end", "", fmt_tick(num, k * y_step));
    }
    for (int k = 0; k * x_step <= x_max * (1 + 1e-9); k++) {
        const double x = LEFT + pw * k * x_step / x_max;
        if (k)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>\n", x, top, x, top + ph);
        text(f, x, top + ph + 16, 11, "middle", "", fmt_tick(num, k * x_step));
    }
    text(f, LEFT + pw / 2.0, top + ph + 36, 12, "middle", "", "TPOT p50 (ms): lower is more interactive");
    text(f, LEFT, top - 8, 12, "start", "", "output tok/s per GPU (higher is cheaper); labels: clients");
    for (int k = 0; k < n; k++) {
        const char *id = layout_id(&runs[0].r[k]);
        fprintf(f, "<polyline id=\"pareto-%s\" data-layout=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                "points=\"", id, id, colors[k % NUM_COLORS]);
        for (uint32_t j = 0; j < num_runs; j++) {
            const struct replay_result *r = &runs[j].r[k];
            fprintf(f, "%s%.1f,%.1f", j ? " " : "", LEFT + pw * r->tpot[0] * 1e3 / x_max,
                    top + ph - ph * r->tok_s_gpu / y_max);
        }
        fprintf(f, "\"/>\n");
        for (uint32_t j = 0; j < num_runs; j++) {
            const struct replay_result *r = &runs[j].r[k];
            const double x = LEFT + pw * r->tpot[0] * 1e3 / x_max, y = top + ph - ph * r->tok_s_gpu / y_max;
            fprintf(f, "<circle id=\"point-%s-%u\" data-clients=\"%u\" data-tpot=\"%.6g\" data-value=\"%.6g\" "
                    "cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", id, runs[j].clients, runs[j].clients,
                    r->tpot[0], r->tok_s_gpu, x, y, colors[k % NUM_COLORS]);
            snprintf(num, sizeof(num), "%u", runs[j].clients);
            text(f, x + 5, y - 5, 10, "start", "", num);
        }
    }
    fprintf(f, "</svg>\n");
    const bool bad = ferror(f);
    return fclose(f) || bad ? DCP_EIO : DCP_OK;
}
