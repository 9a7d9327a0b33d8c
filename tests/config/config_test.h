/*
 * config_test.h: helpers shared by the deployment loader suites (header only):
 * load YAML text, look at diagnostics as the user sees them, write temp files.
 */
#ifndef DCP_CONFIG_TEST_H
#define DCP_CONFIG_TEST_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dcp/deployment.h"
#include "test_util.h"
#include "util/util.h"

/** A deployment load: its status, deployment (or NULL) and diagnostics. */
struct load_result {
    int status;
    dcp_deployment *dep;
    dcp_diag *diag;
};

/** Loads YAML text named "t.yaml" in diagnostics. */
static inline struct load_result load_yaml(const char *yaml)
{
    struct load_result r = {0};
    assert_int_equal(dcp_diag_create(&r.diag), DCP_OK);
    r.status = dcp_deployment_load_string("t.yaml", yaml, strlen(yaml), r.diag, &r.dep);
    if (r.status)
        assert_null(r.dep);
    return r;
}

static inline void load_result_free(struct load_result *r)
{
    dcp_deployment_destroy(&r->dep);
    dcp_diag_destroy(&r->diag);
}

/** Entry i formatted as printed ("t.yaml:3:5: parallel.tp: ..."), in a static buffer. */
static inline const char *diag_text(const dcp_diag *d, size_t i)
{
    static char buf[2048];
    const struct dcp_diag_entry *e = dcp_diag_get(d, i);
    if (!e)
        return "(no such entry)";
    dcp_diag_format(e, buf, sizeof(buf));
    return buf;
}

/** Prints every entry (shown by cmocka when an assertion after it fails). */
static inline void diag_dump(const dcp_diag *d)
{
    for (size_t i = 0; i < dcp_diag_count(d); i++)
        print_message("  diag[%zu] %s\n", i, diag_text(d, i));
}

/** Asserts that loading yaml fails with exactly one diagnostic, printed as expected. */
static inline void expect_one_error(const char *yaml, const char *expected)
{
    struct load_result r = load_yaml(yaml);
    diag_dump(r.diag);
    assert_int_equal(r.status, DCP_ECONFIG);
    assert_int_equal(dcp_diag_count(r.diag), 1);
    assert_string_equal(diag_text(r.diag, 0), expected);
    load_result_free(&r);
}

/** Asserts that yaml loads without errors and returns the deployment. */
static inline dcp_deployment *expect_load(const char *yaml)
{
    struct load_result r = load_yaml(yaml);
    diag_dump(r.diag);
    assert_int_equal(r.status, DCP_OK);
    assert_int_equal(dcp_diag_error_count(r.diag), 0);
    assert_non_null(r.dep);
    dcp_deployment *dep = r.dep;
    r.dep = NULL;
    load_result_free(&r);
    return dep;
}

/** A fresh temporary directory (removed by temp_dir_remove with its files). */
static inline void temp_dir_make(char dir[64])
{
    const char *base = getenv("TMPDIR");
    snprintf(dir, 64, "%s/dcp-config-XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(dir));
}

/** Writes text to dir/name and returns the full path in path. */
static inline void temp_file_write(const char *dir, const char *name, const char *text,
                                   char path[256])
{
    snprintf(path, 256, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static inline void temp_dir_remove(const char *dir, const char *const *names, size_t count)
{
    char path[256];
    for (size_t i = 0; i < count; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

#endif /* DCP_CONFIG_TEST_H */
