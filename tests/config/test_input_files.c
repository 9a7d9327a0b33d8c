/*
 * Input files: deployments and traces are read only from regular files of sane
 * size (util/file.h), so a FIFO, /dev/zero, a directory or a huge file gives a
 * clear error at once instead of a hang, an endless read or a wrapped size; and
 * trace lines are bounded.
 *
 * An alarm turns a hang (the defect this guards against) into a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "config_test.h"
#include "dcp/serve.h"
#include "util/file.h"

static int setup(void **state)
{
    (void)state;
    alarm(30); /* every test here finishes in milliseconds unless something blocks */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    alarm(0);
    return 0;
}

static void test_reads_a_regular_file(void **state)
{
    (void)state;
    char dir[64], path[256];
    temp_dir_make(dir);
    temp_file_write(dir, "f.txt", "hello\n", path);
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(dcp_file_read(path, "test file", 1024, 0, &data, &len), DCP_OK);
    assert_int_equal(len, 6);
    assert_string_equal(data, "hello\n");
    free(data);
    /* Exactly at the cap is fine; one byte over is refused with the cap named. */
    assert_int_equal(dcp_file_read(path, "test file", 6, 0, &data, &len), DCP_OK);
    free(data);
    errno = 0;
    assert_int_equal(dcp_file_read(path, "test file", 5, 0, &data, &len), DCP_EIO);
    assert_int_equal(errno, EFBIG);
    assert_null(data);
    char expected[512];
    snprintf(expected, sizeof(expected), "test file %s: larger than the 5 bytes limit for a test file", path);
    assert_string_equal(dcp_last_error(), expected);
    /* An empty file reads as empty text. */
    temp_file_write(dir, "empty.txt", "", path);
    assert_int_equal(dcp_file_read(path, "test file", 5, 0, &data, &len), DCP_OK);
    assert_int_equal(len, 0);
    assert_string_equal(data, "");
    free(data);
    const char *names[] = {"f.txt", "empty.txt"};
    temp_dir_remove(dir, names, 2);
}

static void test_refuses_fifo_device_directory_link(void **state)
{
    (void)state;
    char dir[64], path[256], fifo[256], link_path[256];
    temp_dir_make(dir);
    temp_file_write(dir, "f.txt", "x", path);
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    char *data = (char *)dir;
    size_t len = 1;
    errno = 0;
    assert_int_equal(dcp_file_read(fifo, "trace", 1024, 0, &data, &len), DCP_EIO); /* no hang */
    assert_int_equal(errno, EINVAL);
    assert_null(data);
    assert_int_equal(len, 0);
    char expected[512];
    snprintf(expected, sizeof(expected), "trace %s: not a regular file (a FIFO); give a regular file", fifo);
    assert_string_equal(dcp_last_error(), expected);

    assert_int_equal(dcp_file_read("/dev/zero", "trace", 1024, 0, &data, &len), DCP_EIO); /* no endless read */
    assert_string_equal(dcp_last_error(),
                        "trace /dev/zero: not a regular file (a character device); give a regular file");
    assert_int_equal(dcp_file_read(dir, "trace", 1024, 0, &data, &len), DCP_EIO);
    assert_int_equal(dcp_file_open("/nonexistent/x", "trace", 1024, 0), -1);
    assert_int_equal(errno, ENOENT);

    /* A symbolic link is followed unless DCP_FILE_NOFOLLOW says not to. */
    snprintf(link_path, sizeof(link_path), "%s/link", dir);
    assert_int_equal(symlink(path, link_path), 0);
    assert_int_equal(dcp_file_read(link_path, "rendezvous file", 1024, 0, &data, &len), DCP_OK);
    free(data);
    assert_int_equal(dcp_file_read(link_path, "rendezvous file", 1024, DCP_FILE_NOFOLLOW, &data, &len), DCP_EIO);
    snprintf(expected, sizeof(expected), "rendezvous file %s: is a symbolic link; give the file itself", link_path);
    assert_string_equal(dcp_last_error(), expected);
    const int fd = dcp_file_open(path, "x", 1024, DCP_FILE_NOFOLLOW);
    assert_true(fd >= 0);
    assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    const char *names[] = {"f.txt", "fifo", "link"};
    temp_dir_remove(dir, names, 3);
}

/* A deployment file or a trace that is a FIFO or /dev/zero: an error, not a hang. */
static void test_deployment_and_trace_not_regular(void **state)
{
    (void)state;
    char dir[64], fifo[256], dep_path[256];
    temp_dir_make(dir);
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    dcp_diag *d = NULL;
    assert_int_equal(dcp_diag_create(&d), DCP_OK);
    dcp_deployment *dep = NULL;
    assert_int_equal(dcp_deployment_load_file(fifo, d, &dep), DCP_EIO);
    char expected[512];
    snprintf(expected, sizeof(expected), "deployment file %s: not a regular file (a FIFO); give a regular file", fifo);
    assert_string_equal(diag_text(d, 0), expected);
    dcp_diag_clear(d);
    assert_int_equal(dcp_deployment_load_file("/dev/zero", d, &dep), DCP_EIO);
    assert_string_equal(diag_text(d, 0),
                        "deployment file /dev/zero: not a regular file (a character device); give a regular file");

    /* workload.trace pointing at a FIFO or /dev/zero fails the load. */
    const char *traces[] = {fifo, "/dev/zero"};
    for (size_t i = 0; i < 2; i++) {
        char text[1024];
        snprintf(text, sizeof(text),
                 "model:\n  name: m\n  attention: mha\n  layers: 2\n  query_heads: 4\n  head_dim: 64\n"
                 "hardware:\n  gpu: cpu\n  memory_gb: 8\n  hbm_gbps: 50\n  link_gbps: 10\n"
                 "parallel:\n  tp: 1\n"
                 "memory:\n  reserve_gb: 0\n"
                 "workload:\n  context_lengths: [4k]\n  trace: %s\n", traces[i]);
        temp_file_write(dir, "dep.yaml", text, dep_path);
        dcp_diag_clear(d);
        assert_int_equal(dcp_deployment_load_file(dep_path, d, &dep), DCP_ECONFIG);
        assert_int_equal(dcp_diag_error_count(d), 1);
        assert_non_null(strstr(diag_text(d, 0), "not a regular file"));
        /* ... and reading the trace directly too. */
        struct dcp_trace *t = NULL;
        assert_int_equal(dcp_trace_load(traces[i], NULL, &t), DCP_EIO);
        assert_null(t);
    }
    dcp_diag_destroy(&d);
    const char *names[] = {"fifo", "dep.yaml"};
    temp_dir_remove(dir, names, 2);
}

/* A trace line that would wrap sizes derived from it is refused with its line (issue 7). */
static void test_trace_line_bounded(void **state)
{
    (void)state;
    const char *text = "4096\n18446744073709551607\n";
    struct dcp_trace *t = NULL;
    assert_int_equal(dcp_trace_parse("t.txt", text, strlen(text), NULL, &t), DCP_ECONFIG);
    assert_null(t);
    print_message("%s\n", dcp_last_error());
    assert_non_null(strstr(dcp_last_error(), "t.txt:2"));
    text = "4096\n4294967296\n";
    assert_int_equal(dcp_trace_parse("t.txt", text, strlen(text), NULL, &t), DCP_OK);
    assert_int_equal(t->count, 2);
    assert_int_equal(t->requests[1].prompt_tokens, DCP_MAX_CONTEXT_TOKENS);
    dcp_trace_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reads_a_regular_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refuses_fifo_device_directory_link, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deployment_and_trace_not_regular, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trace_line_bounded, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
