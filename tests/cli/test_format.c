/* dcp-run's number formatting, text tables and JSON strings (runtime/cli/format.c, table.c, json.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/format.h"
#include "cli/json.h"
#include "cli/table.h"
#include "test_util.h"

static void test_count(void **state)
{
    (void)state;
    char b[CLI_FMT_LEN];
    assert_string_equal(cli_fmt_count(b, 0), "0");
    assert_string_equal(cli_fmt_count(b, 999), "999");
    assert_string_equal(cli_fmt_count(b, 1000), "1,000");
    assert_string_equal(cli_fmt_count(b, 1048576), "1,048,576");
    assert_string_equal(cli_fmt_count(b, UINT64_MAX), "18,446,744,073,709,551,615");
}

static void test_approx(void **state)
{
    (void)state;
    char b[CLI_FMT_LEN];
    assert_string_equal(cli_fmt_approx(b, 193059.89), "~193,000");
    assert_string_equal(cli_fmt_approx(b, 5559.89), "~5,560");
    assert_string_equal(cli_fmt_approx(b, 291.6), "~292");
    assert_string_equal(cli_fmt_approx(b, 1999.6), "~2,000");
    assert_string_equal(cli_fmt_approx(b, INFINITY), "never");
}

static void test_bytes(void **state)
{
    (void)state;
    char b[CLI_FMT_LEN];
    assert_string_equal(cli_fmt_bytes(b, 0), "0 B");
    assert_string_equal(cli_fmt_bytes(b, 512), "512 B");
    assert_string_equal(cli_fmt_bytes(b, 3584), "3.58 KB");
    assert_string_equal(cli_fmt_bytes(b, 4497408), "4.50 MB");
    assert_string_equal(cli_fmt_bytes(b, 126.9e9), "126.9 GB");
    assert_string_equal(cli_fmt_bytes(b, -7.1e9), "-7.10 GB");
    assert_string_equal(cli_fmt_bytes(b, 1.5e15), "1500.0 TB");
    assert_string_equal(cli_fmt_bytes_exact(b, 70272), "70,272 B");
    assert_string_equal(cli_fmt_bytes_exact(b, 144), "144 B");
    assert_string_equal(cli_fmt_bytes_exact(b, 1152.0 / 3), "384 B");
    assert_string_equal(cli_fmt_bytes_exact(b, 2304.0 / 5), "460.8 B");
    assert_string_equal(cli_fmt_bytes_exact(b, 99.96), "100 B");
    assert_string_equal(cli_fmt_rate(b, 4.8e12), "4.80 TB/s");
    assert_string_equal(cli_fmt_rate(b, 450e9), "450.0 GB/s");
}

static void test_params_seconds_ratio(void **state)
{
    (void)state;
    char b[CLI_FMT_LEN];
    assert_string_equal(cli_fmt_params(b, 671e9), "671B");
    assert_string_equal(cli_fmt_params(b, 1.04e12), "1.04T");
    assert_string_equal(cli_fmt_params(b, 70553706496.0), "70.6B");
    assert_string_equal(cli_fmt_params(b, 0), "0");
    assert_string_equal(cli_fmt_seconds(b, 246e-9), "246 ns");
    assert_string_equal(cli_fmt_seconds(b, 40.54e-6), "40.5 us");
    assert_string_equal(cli_fmt_seconds(b, 2.83e-3), "2.83 ms");
    assert_string_equal(cli_fmt_seconds(b, 2.0), "2.00 s");
    assert_string_equal(cli_fmt_ratio(b, 8.0), "8.00x");
}

/* Prints t into a string (caller frees). */
static char *table_text(const struct cli_table *t, unsigned indent)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    cli_table_print(t, f, indent);
    fclose(f);
    return text;
}

static void test_table_alignment(void **state)
{
    (void)state;
    static struct cli_table t; /* large: keep it off the stack */
    cli_table_init(&t, 3);
    cli_table_row(&t);
    cli_table_cell(&t, "%s", "");
    cli_table_cell(&t, "tp only");
    cli_table_cell(&t, "dcp %d", 8);
    cli_table_row(&t);
    cli_table_cell(&t, "pages");
    cli_table_cell(&t, "8,677");
    cli_table_cell(&t, "8,677");
    cli_table_row(&t);
    cli_table_cell(&t, "context tokens");
    cli_table_cell(&t, "555,328");
    cli_table_cell(&t, "4,442,624");
    char *text = table_text(&t, 2);
    assert_string_equal(text,
                        "                  tp only      dcp 8\n"
                        "  pages             8,677      8,677\n"
                        "  context tokens  555,328  4,442,624\n");
    free(text);
}

static void test_table_spans_and_left_columns(void **state)
{
    (void)state;
    static struct cli_table t;
    cli_table_init(&t, 3);
    cli_table_align(&t, 2, CLI_ALIGN_LEFT);
    cli_table_span(&t, 1, 2, "a label wider than both");
    cli_table_row(&t);
    cli_table_cell(&t, "x");
    cli_table_cell(&t, "1");
    cli_table_cell(&t, "left");
    cli_table_row(&t);
    cli_table_cell(&t, "yy");
    cli_table_cell(&t, "22"); /* third cell left empty: no trailing blanks */
    char *text = table_text(&t, 0);
    /* The span (23 chars) over columns 1..2 (2 + gap 2 + 4 = 8) widens each by
     * ceil(15 / 2) = 8: they end at column 4 + 10 + 2 + 12 = 28, the label starts at 5. */
    assert_string_equal(text,
                        "     a label wider than both\n"
                        "x            1  left\n"
                        "yy          22\n");
    free(text);
}

static void test_table_drops_rows_past_capacity(void **state)
{
    (void)state;
    static struct cli_table t;
    cli_table_init(&t, 1);
    for (int i = 0; i < CLI_TABLE_MAX_ROWS + 5; i++) {
        cli_table_row(&t);
        cli_table_cell(&t, "%d", i);
    }
    assert_int_equal(t.nrows, CLI_TABLE_MAX_ROWS);
    char last[16];
    snprintf(last, sizeof(last), "%d", CLI_TABLE_MAX_ROWS - 1);
    assert_string_equal(t.cell[CLI_TABLE_MAX_ROWS - 1][0], last);
}

/* The JSON text json_string() writes for s (malloc'd). */
static char *json_of(const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    struct json_writer w;
    json_init(&w, f);
    json_string(&w, s);
    fclose(f);
    return buf;
}

static void expect_json(const char *in, const char *want)
{
    char *got = json_of(in);
    assert_string_equal(got, want);
    free(got);
}

/* Bytes that are not well-formed UTF-8 (a Latin-1 file name, a truncated or overlong
 * sequence, a surrogate) become U+FFFD: the output stays valid JSON. Valid UTF-8 and
 * escapes are kept. */
static void test_json_strings(void **state)
{
    (void)state;
    expect_json("plain", "\"plain\"");
    expect_json("a\"b\\c\n\t\x01", "\"a\\\"b\\\\c\\n\\t\\u0001\"");
    expect_json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    expect_json("x\xffy.yaml", "\"x\\ufffdy.yaml\"");            /* the byte 0xff */
    expect_json("caf\xe9", "\"caf\\ufffd\"");                    /* Latin-1 e-acute */
    expect_json("\xc3", "\"\\ufffd\"");                          /* truncated at the end */
    expect_json("\xe2\x82", "\"\\ufffd\\ufffd\"");               /* truncated 3-byte */
    expect_json("\xc0\xaf", "\"\\ufffd\\ufffd\"");               /* overlong '/' */
    expect_json("\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\"");    /* overlong, 3 bytes */
    expect_json("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");    /* a UTF-16 surrogate */
    expect_json("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* past U+10FFFF */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count),
        cmocka_unit_test(test_approx),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_json_strings),
        cmocka_unit_test(test_params_seconds_ratio),
        cmocka_unit_test(test_table_alignment),
        cmocka_unit_test(test_table_spans_and_left_columns),
        cmocka_unit_test(test_table_drops_rows_past_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
