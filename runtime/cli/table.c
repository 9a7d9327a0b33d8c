/* table.c: aligned text tables. */
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

#include "table.h"

/* Spaces between columns. */
#define COLUMN_GAP 2

void cli_table_init(struct cli_table *t, unsigned ncols)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols < CLI_TABLE_MAX_COLS ? ncols : CLI_TABLE_MAX_COLS;
    for (unsigned c = 1; c < t->ncols; c++)
        t->align[c] = CLI_ALIGN_RIGHT;
}

void cli_table_align(struct cli_table *t, unsigned col, enum cli_align align)
{
    if (col < t->ncols)
        t->align[col] = align;
}

void cli_table_span(struct cli_table *t, unsigned first, unsigned last, const char *text)
{
    if (t->nspans == CLI_TABLE_MAX_SPANS || first > last || last >= t->ncols)
        return;
    struct cli_table_span *s = &t->spans[t->nspans++];
    s->first = first;
    s->last = last;
    snprintf(s->text, sizeof(s->text), "%s", text);
}

void cli_table_row(struct cli_table *t)
{
    if (t->nrows == CLI_TABLE_MAX_ROWS) {
        t->full = true;
        return;
    }
    t->nrows++;
    t->next_col = 0;
}

void cli_table_cell(struct cli_table *t, const char *fmt, ...)
{
    if (t->full || t->nrows == 0 || t->next_col >= t->ncols)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->cell[t->nrows - 1][t->next_col++], CLI_TABLE_CELL, fmt, ap);
    va_end(ap);
}

static void column_widths(const struct cli_table *t, size_t width[CLI_TABLE_MAX_COLS])
{
    for (unsigned c = 0; c < t->ncols; c++) {
        width[c] = 0;
        for (unsigned r = 0; r < t->nrows; r++) {
            size_t n = strlen(t->cell[r][c]);
            width[c] = n > width[c] ? n : width[c];
        }
    }
    /* A span wider than its columns widens them evenly. */
    for (unsigned i = 0; i < t->nspans; i++) {
        const struct cli_table_span *s = &t->spans[i];
        const unsigned n = s->last - s->first + 1;
        size_t covered = 0;
        for (unsigned c = s->first; c <= s->last; c++)
            covered += width[c] + (c > s->first ? COLUMN_GAP : 0);
        size_t need = strlen(s->text);
        for (unsigned c = s->first; need > covered && c <= s->last; c++)
            width[c] += (need - covered + n - 1) / n;
    }
}

/* Longest line a table can print: every column at full cell width, gaps, indent. */
#define LINE_MAX_LEN (CLI_TABLE_MAX_COLS * (CLI_TABLE_CELL + COLUMN_GAP) + 64)

/* A line under construction; trailing blanks are dropped when it is printed. */
struct line {
    char text[LINE_MAX_LEN + 1];
    size_t len;
};

static void line_pad_to(struct line *l, size_t column)
{
    while (l->len < column && l->len < LINE_MAX_LEN)
        l->text[l->len++] = ' ';
}

static void line_put(struct line *l, const char *s)
{
    size_t n = strlen(s);
    if (n > LINE_MAX_LEN - l->len)
        n = LINE_MAX_LEN - l->len;
    memcpy(l->text + l->len, s, n);
    l->len += n;
}

static void line_print(struct line *l, FILE *out)
{
    while (l->len > 0 && l->text[l->len - 1] == ' ')
        l->len--;
    l->text[l->len] = '\0';
    fprintf(out, "%s\n", l->text);
    l->len = 0;
}

/* Where each column starts, after the indent. */
static void column_starts(const struct cli_table *t, const size_t *width, unsigned indent,
                          size_t *start)
{
    size_t at = indent;
    for (unsigned c = 0; c < t->ncols; c++) {
        start[c] = at;
        at += width[c] + COLUMN_GAP;
    }
}

/* The span labels, right-aligned over their columns, on one line. */
static void print_spans(const struct cli_table *t, const size_t *width, const size_t *start,
                        FILE *out)
{
    if (t->nspans == 0)
        return;
    struct line l = {.len = 0};
    for (unsigned i = 0; i < t->nspans; i++) {
        const struct cli_table_span *s = &t->spans[i];
        size_t end = start[s->last] + width[s->last];
        size_t len = strlen(s->text);
        if (end - len < l.len) /* would overlap the previous label */
            continue;
        line_pad_to(&l, end - len);
        line_put(&l, s->text);
    }
    line_print(&l, out);
}

void cli_table_print(const struct cli_table *t, FILE *out, unsigned indent)
{
    size_t width[CLI_TABLE_MAX_COLS], start[CLI_TABLE_MAX_COLS];
    column_widths(t, width);
    column_starts(t, width, indent, start);
    print_spans(t, width, start, out);
    struct line l = {.len = 0};
    for (unsigned r = 0; r < t->nrows; r++) {
        for (unsigned c = 0; c < t->ncols; c++) {
            const char *text = t->cell[r][c];
            size_t fill = t->align[c] == CLI_ALIGN_RIGHT ? width[c] - strlen(text) : 0;
            line_pad_to(&l, start[c] + fill);
            line_put(&l, text);
        }
        line_print(&l, out);
    }
}
