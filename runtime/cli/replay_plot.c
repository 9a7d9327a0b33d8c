/* replay_plot.c: the SVG of `dcp-run replay --plot`: concurrency and KV use over
 * time for each layout, and bars comparing throughput and latency. Plain SVG 1.1
 * written by hand (no dependency). Series carry ids and data-* attributes so tests
 * can read them back: polyline#concurrency-<layout>, polyline#kv-<layout>,
 * rect#bar-<metric>-<layout> with data-value. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "replay.h"
#include "run_common.h"

#define W 960
#define PANEL_H 200
#define LEFT 70
#define RIGHT 20
#define MAX_POINTS 800

static const char *const colors[2] = {"#d62728", "#1f77b4"};

static const char *layout_id(const struct replay_result *r) { return r->dcp == 1 ? "tp" : "dcp"; }

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

/* A "nice" axis maximum >= v. */
static double nice_max(double v)
{
    if (!(v > 0))
        return 1;
    const double p = pow(10, floor(log10(v)));
    const double steps[] = {1, 2, 2.5, 5, 10};
    for (int i = 0; i < 5; i++)
        if (steps[i] * p >= v)
            return steps[i] * p;
    return 10 * p;
}

/* One time-series panel: for each layout the maximum of the value per column. */
static void panel(FILE *f, int y0, const char *title, const char *unit, const char *id, const struct replay_result *r,
                  int n, double t_max, bool kv)
{
    double v_max = 0;
    for (int i = 0; i < n; i++)
        v_max = DCP_CLI_MAX(v_max, kv ? r[i].kv_max * 100 : (double)r[i].conc_max);
    v_max = kv ? 100 : nice_max(v_max);
    const int pw = W - LEFT - RIGHT, ph = PANEL_H - 40;
    fprintf(f, "<g class=\"panel\" id=\"panel-%s\">\n", id);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", LEFT, y0 + 14, title);
    const int top = y0 + 24;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", LEFT, top, pw, ph);
    for (int k = 0; k <= 4; k++) {
        const double v = v_max * k / 4;
        const double y = top + ph - ph * k / 4.0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, y, LEFT + pw, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g%s</text>\n", LEFT - 4, y + 4, v,
                unit);
    }
    for (int k = 0; k <= 5; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%.0f s</text>\n",
                LEFT + pw * k / 5.0, top + ph + 14, t_max * k / 5);
    for (int i = 0; i < n; i++) {
        fprintf(f, "<polyline id=\"%s-%s\" data-layout=\"%s\" data-max=\"%g\" fill=\"none\" stroke=\"%s\" "
                "stroke-width=\"1.5\" points=\"", id, layout_id(&r[i]), layout_id(&r[i]),
                kv ? r[i].kv_max : (double)r[i].conc_max, colors[i % 2]);
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

/* One group of bars (a metric, one bar per layout). */
static void bars(FILE *f, int x0, int y0, const char *metric, const char *label, const double *v,
                 const struct replay_result *r, int n, const char *fmt)
{
    const int bh = 140, bw = 60;
    double m = 0;
    for (int i = 0; i < n; i++)
        m = DCP_CLI_MAX(m, v[i]);
    m = nice_max(m);
    fprintf(f, "<g class=\"bars\" id=\"bars-%s\">\n", metric);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" font-weight=\"bold\">", x0, y0);
    xml_text(f, label);
    fprintf(f, "</text>\n");
    for (int i = 0; i < n; i++) {
        const double h = bh * DCP_CLI_MIN(v[i] / m, 1.0);
        const int x = x0 + i * (bw + 20);
        fprintf(f, "<rect id=\"bar-%s-%s\" data-layout=\"%s\" data-value=\"%.6g\" x=\"%d\" y=\"%.1f\" width=\"%d\" "
                "height=\"%.1f\" fill=\"%s\"/>\n", metric, layout_id(&r[i]), layout_id(&r[i]), v[i], x,
                y0 + 24 + bh - h, bw, h, colors[i % 2]);
        char val[64];
        snprintf(val, sizeof(val), fmt, v[i]);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x + bw / 2,
                y0 + 20 + bh - h, val);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x + bw / 2,
                y0 + 40 + bh, r[i].dcp == 1 ? "TP" : "DCP");
    }
    fprintf(f, "</g>\n");
}

int replay_plot_svg(const char *path, const char *title, const struct replay_result *r, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return DCP_EIO;
    const int H = 40 + 2 * PANEL_H + 240;
    double t_max = 0;
    for (int i = 0; i < n; i++)
        if (r[i].num_samples)
            t_max = DCP_CLI_MAX(t_max, r[i].samples[r[i].num_samples - 1].t);
    t_max = t_max > 0 ? t_max : 1;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text id=\"title\" x=\"%d\" y=\"22\" font-size=\"15\">", LEFT);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    /* Legend. */
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof(name), r[i].dcp == 1 ? "TP baseline (dcp=1)" : "DCP (dcp=%u)", r[i].dcp);
        fprintf(f, "<rect x=\"%d\" y=\"30\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"36\" "
                "font-size=\"12\">%s</text>\n", W - 360 + i * 180, colors[i % 2], W - 342 + i * 180, name);
    }
    panel(f, 40, "Concurrency (requests running; max per column)", "", "concurrency", r, n, t_max, false);
    panel(f, 40 + PANEL_H, "KV use (share of blocks held; max per column)", "%", "kv", r, n, t_max, true);
    const int y = 40 + 2 * PANEL_H + 20;
    double v[2] = {0, 0};
    for (int i = 0; i < n; i++)
        v[i] = r[i].tok_s_gpu;
    bars(f, LEFT, y, "throughput", "output tok/s per GPU", v, r, n, "%.0f");
    for (int i = 0; i < n; i++)
        v[i] = r[i].ttft[0];
    bars(f, LEFT + 240, y, "ttft", "TTFT p50 (s)", v, r, n, "%.2f");
    for (int i = 0; i < n; i++)
        v[i] = r[i].tpot[0] * 1e3;
    bars(f, LEFT + 480, y, "tpot", "TPOT p50 (ms)", v, r, n, "%.1f");
    for (int i = 0; i < n; i++)
        v[i] = r[i].conc_mean;
    bars(f, LEFT + 720, y, "concurrency", "mean concurrency", v, r, n, "%.1f");
    fprintf(f, "</svg>\n");
    const bool bad = ferror(f);
    return fclose(f) || bad ? DCP_EIO : DCP_OK;
}
