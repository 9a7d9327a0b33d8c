/* Trace loader: Mooncake JSONL and lengths files, scaling, every kind of bad trace
 * (with its line), non-regular and oversized files, the shipped excerpt, and the
 * synthetic agentic trace. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcp/serve.h"
#include "dcp/tools.h"
#include "test_util.h"

static struct dcp_trace *parse_ok(const char *text, const struct dcp_trace_options *o)
{
    struct dcp_trace *t = NULL;
    const int st = dcp_trace_parse("t.jsonl", text, strlen(text), o, &t);
    if (st)
        fail_msg("parse failed: %s", dcp_last_error());
    assert_non_null(t);
    return t;
}

/* Parsing fails with DCP_ECONFIG and a message holding each of the given fragments. */
static void parse_bad(const char *text, const char *frag1, const char *frag2)
{
    struct dcp_trace *t = (struct dcp_trace *)1;
    assert_int_equal(dcp_trace_parse("t.jsonl", text, strlen(text), NULL, &t), DCP_ECONFIG);
    assert_null(t);
    const char *e = dcp_last_error();
    if (!strstr(e, frag1) || (frag2 && !strstr(e, frag2)))
        fail_msg("error \"%s\" lacks \"%s\" / \"%s\"", e, frag1, frag2 ? frag2 : "");
}

static void test_mooncake_records(void **state)
{
    (void)state;
    struct dcp_trace *t = parse_ok(
        "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
        "\n"
        "{\"hash_ids\": [], \"output_length\": 7, \"extra\": \"x\\\"y\", \"input_length\": 3, \"timestamp\": 1500.5}\n"
        "  {\"timestamp\": 1500.5, \"input_length\": 513, \"output_length\": 1, \"flag\": true, \"v\": [1, \"a\", null]}\r\n",
        NULL);
    assert_string_equal(t->format, "mooncake");
    assert_int_equal(t->count, 3);
    assert_int_equal(t->hash_block_tokens, 512);
    assert_true(t->requests[0].arrival == 0);
    assert_int_equal(t->requests[0].prompt_tokens, 1000);
    assert_int_equal(t->requests[0].output_tokens, 5);
    assert_int_equal(t->requests[0].num_hashes, 2);
    assert_int_equal(t->requests[0].hashes[1], 1);
    assert_int_equal(t->requests[0].hash_block_tokens, 512);
    assert_true(fabs(t->requests[1].arrival - 1.5005) < 1e-12);
    assert_int_equal(t->requests[1].num_hashes, 0);
    assert_int_equal(t->requests[2].prompt_tokens, 513);
    dcp_trace_destroy(&t);
    assert_null(t);
}

static void test_scaling_and_limit(void **state)
{
    (void)state;
    const char *text = "{\"timestamp\": 1000, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [9]}\n"
                       "{\"timestamp\": 3000, \"input_length\": 200, \"output_length\": 6}\n"
                       "{\"timestamp\": 5000, \"input_length\": 300, \"output_length\": 7}\n";
    const struct dcp_trace_options o = {.length_scale = 8, .time_scale = 0.5, .limit = 2};
    struct dcp_trace *t = parse_ok(text, &o);
    assert_int_equal(t->count, 2);
    assert_int_equal(t->hash_block_tokens, 4096);
    assert_int_equal(t->requests[0].hash_block_tokens, 4096);
    assert_int_equal(t->requests[0].prompt_tokens, 800);
    assert_int_equal(t->requests[0].output_tokens, 5); /* outputs are not scaled */
    assert_true(fabs(t->requests[1].arrival - 1.5) < 1e-12);
    dcp_trace_destroy(&t);
}

static void test_lengths_format(void **state)
{
    (void)state;
    const struct dcp_trace_options o = {.output_tokens = 9, .interval = 0.25};
    struct dcp_trace *t = parse_ok("# comment\n4096\n  8192  # eight k\n\n16\n", &o);
    assert_string_equal(t->format, "lengths");
    assert_int_equal(t->count, 3);
    assert_int_equal(t->requests[1].prompt_tokens, 8192);
    assert_int_equal(t->requests[2].output_tokens, 9);
    assert_true(fabs(t->requests[2].arrival - 0.5) < 1e-12);
    dcp_trace_destroy(&t);
    struct dcp_trace *bad = NULL;
    assert_int_equal(dcp_trace_parse("l.txt", "10\n20 30\n", 9, NULL, &bad), DCP_ECONFIG);
    assert_non_null(strstr(dcp_last_error(), "l.txt:2:"));
    assert_int_equal(dcp_trace_parse("l.txt", "10\n-5\n", 6, NULL, &bad), DCP_ECONFIG);
    assert_non_null(strstr(dcp_last_error(), "l.txt:2: negative"));
    assert_int_equal(dcp_trace_parse("l.txt", "0\n", 2, NULL, &bad), DCP_ECONFIG);
    assert_non_null(strstr(dcp_last_error(), ">= 1"));
}

#define OK_FIELDS "\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2"

static void test_bad_records(void **state)
{
    (void)state;
    parse_bad("{" OK_FIELDS "}\n{\"timestamp\": 5, \"input_length\": 10}\n", "t.jsonl:2:", "missing field output_length");
    parse_bad("{\"input_length\": 10, \"output_length\": 2}\n", "t.jsonl:1:", "missing field timestamp");
    parse_bad("{\"timestamp\": 0, \"input_length\": -10, \"output_length\": 2}\n", ":1:", "negative value for input_length");
    parse_bad("{\"timestamp\": -3, \"input_length\": 10, \"output_length\": 2}\n", ":1:", "negative value for timestamp");
    parse_bad("{\"timestamp\": 0, \"input_length\": 10.5, \"output_length\": 2}\n", ":1:", "whole number");
    parse_bad("{\"timestamp\": 0, \"input_length\": 1e3, \"output_length\": 2}\n", ":1:", "whole number");
    parse_bad("{\"timestamp\": 0, \"input_length\": 99999999999999999999, \"output_length\": 2}\n", ":1:", "too large");
    parse_bad("{\"timestamp\": 0, \"input_length\": 10000000000000, \"output_length\": 2}\n", ":1:", "too large");
    parse_bad("{\"timestamp\": 1e400, \"input_length\": 10, \"output_length\": 2}\n", ":1:", "out of range");
    parse_bad("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1, -2]}\n", ":1:",
              "negative value for hash_ids");
    parse_bad("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1, 2]}\n", ":1:",
              "more hash_ids than prompt blocks");
    parse_bad("{\"timestamp\": 9, \"input_length\": 10, \"output_length\": 2}\n"
              "{\"timestamp\": 8, \"input_length\": 10, \"output_length\": 2}\n", ":2:", "backwards");
    parse_bad("{" OK_FIELDS ", \"timestamp\": 1}\n", ":1:", "duplicate key timestamp");
    parse_bad("{" OK_FIELDS "} x\n", ":1:", "unexpected text");
    parse_bad("{" OK_FIELDS ", \"meta\": {\"a\": 1}}\n", ":1:", "nested");
    parse_bad("{" OK_FIELDS "\n", ":1:", "expected ',' or '}'");
    parse_bad("{" OK_FIELDS "}\n[1]\n", ":2:", "expected a JSON object");
    parse_bad("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 0}\n", ":1:", "output_length must be >= 1");
    parse_bad("{\"timestamp\": 0, \"input_length\": 010, \"output_length\": 2}\n", ":1:", "expected a number");
    parse_bad("{\"timestamp\": \"0\", \"input_length\": 10, \"output_length\": 2}\n", ":1:", "expected a number");
    parse_bad("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"s\": \"abc}\n", ":1:", "unterminated");
    parse_bad("   \n\n", "no requests", NULL);
    const char nul[] = "{" OK_FIELDS "}\n{\0}\n";
    struct dcp_trace *t = NULL;
    assert_int_equal(dcp_trace_parse("t.jsonl", nul, sizeof(nul) - 1, NULL, &t), DCP_ECONFIG);
    assert_non_null(strstr(dcp_last_error(), ":2: NUL"));
}

static void make_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/dcp-test-trace-%ld-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid(), name);
}

static void test_fifo_is_refused(void **state)
{
    (void)state;
    char path[512];
    make_path(path, sizeof(path), "fifo");
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    struct dcp_trace *t = NULL;
    /* Returns at once: the FIFO has no writer, and opening it must not wait for one. */
    assert_int_equal(dcp_trace_load(path, NULL, &t), DCP_EIO);
    assert_non_null(strstr(dcp_last_error(), "not a regular file"));
    unlink(path);
    assert_int_equal(dcp_trace_load("/", NULL, &t), DCP_EIO);
    assert_int_equal(dcp_trace_load("/nonexistent/trace", NULL, &t), DCP_EIO);
    assert_non_null(strstr(dcp_last_error(), "cannot open"));
}

static void test_huge_file_is_refused(void **state)
{
    (void)state;
    char path[512];
    make_path(path, sizeof(path), "huge");
    const int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(fd >= 0);
    /* A sparse 10 GB file: refused by its size before anything is read. */
    assert_int_equal(ftruncate(fd, (off_t)10 * 1000 * 1000 * 1000), 0);
    close(fd);
    struct dcp_trace *t = NULL;
    assert_int_equal(dcp_trace_load(path, NULL, &t), DCP_EIO);
    assert_non_null(strstr(dcp_last_error(), "larger than the"));
    assert_null(t);
    unlink(path);
}

static void test_shipped_excerpt(void **state)
{
    (void)state;
    const char *root = getenv("DCP_SOURCE_ROOT");
    if (!root)
        skip();
    char path[512];
    snprintf(path, sizeof(path), "%s/tests/serve/mooncake-excerpt.jsonl", root);
    struct dcp_trace *t = NULL;
    if (dcp_trace_load(path, NULL, &t))
        fail_msg("%s", dcp_last_error());
    assert_int_equal(t->count, 200);
    assert_string_equal(t->format, "mooncake");
    for (uint32_t i = 1; i < t->count; i++)
        assert_true(t->requests[i].arrival >= t->requests[i - 1].arrival);
    dcp_trace_destroy(&t);
}

/* Random byte edits of a valid trace either parse or fail with DCP_ECONFIG and a
 * message naming a line: never a crash, a hang or another status. */
static void test_mutations(void **state)
{
    (void)state;
    static const char base[] =
        "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
        "{\"timestamp\": 1500.5, \"input_length\": 3, \"output_length\": 7, \"x\": [true, null, \"s\"]}\n"
        "{\"timestamp\": 2000, \"input_length\": 513, \"output_length\": 1, \"hash_ids\": []}\n";
    static const char alphabet[] = "{}[]\":,-.0123456789eE \n\\tnul\0";
    struct test_rng rng;
    test_rng_seed(&rng, 42);
    char buf[sizeof(base) + 8];
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, base, sizeof(base));
        size_t len = sizeof(base) - 1;
        const int edits = 1 + (int)test_rng_range(&rng, 0, 3);
        for (int e = 0; e < edits; e++) {
            const size_t at = test_rng_range(&rng, 0, len - 1);
            if (test_rng_range(&rng, 0, 3) == 0 && len > 1) {
                memmove(buf + at, buf + at + 1, len - at - 1); /* delete */
                len--;
            } else {
                buf[at] = alphabet[test_rng_range(&rng, 0, sizeof(alphabet) - 2)];
            }
        }
        struct dcp_trace *t = NULL;
        const int st = dcp_trace_parse("m.jsonl", buf, len, NULL, &t);
        if (st == DCP_OK) {
            assert_non_null(t);
            assert_true(t->count >= 1 && t->count <= 3);
            for (uint32_t i = 0; i < t->count; i++)
                assert_true(t->requests[i].prompt_tokens >= 1 && t->requests[i].output_tokens >= 1);
            dcp_trace_destroy(&t);
        } else {
            assert_int_equal(st, DCP_ECONFIG);
            assert_null(t);
            assert_non_null(strstr(dcp_last_error(), "m.jsonl"));
        }
    }
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_synthetic_agentic(void **state)
{
    (void)state;
    struct dcp_agentic_trace_params p;
    dcp_agentic_trace_default_params(&p);
    struct dcp_trace *a = NULL, *b = NULL;
    assert_int_equal(dcp_trace_synthesize(&p, &a), DCP_OK);
    assert_int_equal(dcp_trace_synthesize(&p, &b), DCP_OK);
    assert_int_equal(a->count, p.requests);
    uint64_t *in = malloc(a->count * sizeof(*in)), *out = malloc(a->count * sizeof(*out));
    uint64_t blocks = 0, repeated = 0;
    for (uint32_t i = 0; i < a->count; i++) {
        const struct dcp_serve_request *r = &a->requests[i];
        assert_int_equal(r->prompt_tokens, b->requests[i].prompt_tokens); /* deterministic */
        assert_int_equal(r->num_hashes, (r->prompt_tokens + 511) / 512);
        in[i] = r->prompt_tokens;
        out[i] = r->output_tokens;
        /* A block repeats when an earlier request listed the same id at the same place. */
        for (uint32_t j = 0; j < r->num_hashes; j++) {
            blocks++;
            for (uint32_t k = i; k-- > 0 && k + 200 > i;)
                if (a->requests[k].num_hashes > j && a->requests[k].hashes[j] == r->hashes[j]) {
                    repeated++;
                    break;
                }
        }
    }
    qsort(in, a->count, sizeof(*in), cmp_u64);
    qsort(out, a->count, sizeof(*out), cmp_u64);
    const uint64_t med_in = in[a->count / 2], med_out = out[a->count / 2];
    if (med_in < 55000 || med_in > 80000 || med_out < 340 || med_out > 460)
        fail_msg("medians: input %llu output %llu", (unsigned long long)med_in, (unsigned long long)med_out);
    if (repeated * 10 < blocks * 7)
        fail_msg("prefix reuse %.2f below 0.7", (double)repeated / blocks);
    free(in);
    free(out);
    /* Round trip through JSONL. */
    char path[512];
    make_path(path, sizeof(path), "synth.jsonl");
    assert_int_equal(dcp_trace_write_jsonl(a, path), DCP_OK);
    struct dcp_trace *c = NULL;
    assert_int_equal(dcp_trace_load(path, NULL, &c), DCP_OK);
    assert_int_equal(c->count, a->count);
    assert_int_equal(c->requests[7].num_hashes, a->requests[7].num_hashes);
    assert_int_equal(c->requests[7].hashes[3], a->requests[7].hashes[3]);
    unlink(path);
    dcp_trace_destroy(&a);
    dcp_trace_destroy(&b);
    dcp_trace_destroy(&c);
}

/* A UTF-8 byte order mark before the first record is skipped: the JSONL trace was taken
 * for the lengths format and failed with a confusing error on its first line. */
static void test_byte_order_mark(void **state)
{
    (void)state;
    struct dcp_trace *t = parse_ok("\xef\xbb\xbf{\"timestamp\": 0, \"input_length\": 9, \"output_length\": 2}\n", NULL);
    assert_string_equal(t->format, "mooncake");
    assert_int_equal(t->count, 1);
    assert_int_equal(t->requests[0].prompt_tokens, 9);
    dcp_trace_destroy(&t);
    t = parse_ok("\xef\xbb\xbf" "17\n", NULL);
    assert_string_equal(t->format, "lengths");
    assert_int_equal(t->requests[0].prompt_tokens, 17);
    dcp_trace_destroy(&t);
}

/* A trace cannot take memory without bound: a 20 MB file of one-token lines made 10
 * million requests (2.2 GB), and a synthetic trace of 10 million agentic requests
 * (about 3.5 KB each) was killed by the OOM killer. Requests and hash ids are counted
 * against max_memory_bytes and the request count against DCP_TRACE_MAX_REQUESTS. */
static void test_memory_bounded(void **state)
{
    (void)state;
    /* 100 one-token lines: 4800 bytes of requests; a cap of 2000 stops at the 42nd. */
    char text[256];
    size_t n = 0;
    for (int i = 0; i < 100; i++)
        text[n++] = '1', text[n++] = '\n';
    text[n] = '\0'; /* parse_ok below takes its length with strlen */
    struct dcp_trace_options o = {.max_memory_bytes = 2000};
    struct dcp_trace *t = (struct dcp_trace *)1;
    assert_int_equal(dcp_trace_parse("many.txt", text, n, &o, &t), DCP_ENOMEM);
    assert_null(t);
    assert_non_null(strstr(dcp_last_error(), "many.txt: its first 42 requests"));
    assert_non_null(strstr(dcp_last_error(), "max_memory_bytes"));
    o.limit = 41; /* the limit stops reading first */
    t = parse_ok(text, &o);
    assert_int_equal(t->count, 41);
    dcp_trace_destroy(&t);
    /* Hash ids count too. */
    const char *json = "{\"timestamp\": 0, \"input_length\": 100000, \"output_length\": 1, \"hash_ids\": ["
                       "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]}\n";
    o = (struct dcp_trace_options){.max_memory_bytes = 48 + 8 * 19};
    assert_int_equal(dcp_trace_parse("h.jsonl", json, strlen(json), &o, &t), DCP_ENOMEM);
    assert_non_null(strstr(dcp_last_error(), "20 hash ids"));
    o.max_memory_bytes += 8;
    t = parse_ok(json, &o);
    dcp_trace_destroy(&t);

    /* Synthetic: the cap ends generation with a message; too many requests are refused at once. */
    struct dcp_agentic_trace_params p;
    dcp_agentic_trace_default_params(&p);
    p.max_memory_bytes = 1 << 20;
    assert_int_equal(dcp_trace_synthesize(&p, &t), DCP_ENOMEM);
    assert_null(t);
    assert_non_null(strstr(dcp_last_error(), "synthetic trace: its first"));
    p.max_memory_bytes = 0;
    p.requests = DCP_TRACE_MAX_REQUESTS + 1;
    assert_int_equal(dcp_trace_synthesize(&p, &t), DCP_EINVAL);
    assert_non_null(strstr(dcp_last_error(), "4194304"));

    /* One more line than DCP_TRACE_MAX_REQUESTS (8 MB of text; skipped in quick runs). */
    if (test_quick())
        return;
    const size_t lines = (size_t)DCP_TRACE_MAX_REQUESTS + 1;
    char *big = malloc(2 * lines);
    assert_non_null(big);
    for (size_t i = 0; i < lines; i++)
        big[2 * i] = '1', big[2 * i + 1] = '\n';
    assert_int_equal(dcp_trace_parse("big.txt", big, 2 * lines, NULL, &t), DCP_ECONFIG);
    assert_non_null(strstr(dcp_last_error(), "big.txt: more than 4194304 requests"));
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mooncake_records),
        cmocka_unit_test(test_scaling_and_limit),
        cmocka_unit_test(test_lengths_format),
        cmocka_unit_test(test_bad_records),
        cmocka_unit_test(test_fifo_is_refused),
        cmocka_unit_test(test_huge_file_is_refused),
        cmocka_unit_test(test_shipped_excerpt),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_synthetic_agentic),
        cmocka_unit_test(test_memory_bounded),
        cmocka_unit_test(test_byte_order_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
