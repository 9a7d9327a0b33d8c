/* progress.c: terminal progress line. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_init(struct progress *p, bool quiet)
{
    memset(p, 0, sizeof(*p));
    p->enabled = !quiet && isatty(STDERR_FILENO);
}

void progress_begin(struct progress *p, const char *label)
{
    progress_end(p);
    snprintf(p->label, sizeof(p->label), "%s", label);
    p->start = cli_now();
    p->last_draw = 0;
}

void progress_update(struct progress *p, uint64_t done, uint64_t total)
{
    if (!p->enabled)
        return;
    const double now = cli_now();
    if (now - p->start < 0.5 || now - p->last_draw < 0.1)
        return;
    p->last_draw = now;
    const double frac = total ? (double)done / (double)total : 0.0;
    const double eta = frac > 0.0 ? (now - p->start) * (1.0 - frac) / frac : 0.0;
    fprintf(stderr, "\r\033[K%s: %llu/%llu (%.0f%%, %.0fs left)", p->label,
            (unsigned long long)done, (unsigned long long)total, 100.0 * frac, eta);
    fflush(stderr);
    p->shown = true;
}

void progress_end(struct progress *p)
{
    if (p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->shown = false;
}
