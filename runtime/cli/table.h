/*
 * table.h: aligned text tables for dcp-run's human-readable output.
 *
 *   struct cli_table t;
 *   cli_table_init(&t, 3);                 // column 0 left-aligned, the rest right
 *   cli_table_span(&t, 1, 2, "requests");  // optional label over columns 1..2
 *   cli_table_row(&t); cli_table_cell(&t, "context"); ...   // first row: header
 *   cli_table_row(&t); cli_table_cell(&t, "%s", cli_fmt_count(buf, n)); ...
 *   cli_table_print(&t, stdout, 2);
 *
 * Fixed capacity, no allocation: rows and cells past the limits are dropped and
 * cell text is cut to CLI_TABLE_CELL - 1 bytes.
 */
#ifndef DCP_CLI_TABLE_H
#define DCP_CLI_TABLE_H

#include <stdbool.h>
#include <stdio.h>

#define CLI_TABLE_MAX_COLS 8  ///< Columns per table.
#define CLI_TABLE_MAX_ROWS 96 ///< Rows per table, header included.
#define CLI_TABLE_MAX_SPANS 4 ///< Labels over groups of columns.
#define CLI_TABLE_CELL 64     ///< Bytes per cell, NUL included.

/** Horizontal alignment of a column. */
enum cli_align {
    CLI_ALIGN_LEFT,
    CLI_ALIGN_RIGHT,
};

/** A label printed right-aligned above columns first..last. */
struct cli_table_span {
    unsigned first;
    unsigned last;
    char text[CLI_TABLE_CELL];
};

/** A table being filled. */
struct cli_table {
    unsigned ncols;
    unsigned nrows;
    unsigned nspans;
    unsigned next_col; ///< Column the next cli_table_cell() fills in the last row.
    bool full;         ///< A row past CLI_TABLE_MAX_ROWS was started: later cells are dropped.
    enum cli_align align[CLI_TABLE_MAX_COLS];
    struct cli_table_span spans[CLI_TABLE_MAX_SPANS];
    char cell[CLI_TABLE_MAX_ROWS][CLI_TABLE_MAX_COLS][CLI_TABLE_CELL];
};

/** Empties t for ncols columns: the first left-aligned, the others right-aligned. */
void cli_table_init(struct cli_table *t, unsigned ncols);

/** Sets the alignment of column col. */
void cli_table_align(struct cli_table *t, unsigned col, enum cli_align align);

/** Adds a label over columns first..last, printed on its own line above the rows. */
void cli_table_span(struct cli_table *t, unsigned first, unsigned last, const char *text);

/** Starts a new row; its cells start empty. */
void cli_table_row(struct cli_table *t);

/** Fills the next cell of the current row, printf-style. */
void cli_table_cell(struct cli_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Prints the spans and the rows, columns two spaces apart, each line indented. */
void cli_table_print(const struct cli_table *t, FILE *out, unsigned indent);

#endif /* DCP_CLI_TABLE_H */
