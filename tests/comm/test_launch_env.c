/* Launcher environment detection: each launcher, precedence, overrides, errors. */
#include <stdbool.h>
#include <string.h>

#include "comm/launch_env.h"
#include "test_util.h"
#include "util/util.h"

static const char *const all_vars[] = {
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "DCP_RANK", "DCP_WORLD_SIZE", "DCP_LOCAL_RANK", "DCP_LOCAL_SIZE",
};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < DCP_ARRAY_SIZE(all_vars); i++)
        unsetenv(all_vars[i]);
    return 0;
}

/* Sets pairs of name, value from a NULL-terminated list. */
static void set_env(const char *const *pairs)
{
    for (; pairs[0]; pairs += 2)
        assert_int_equal(setenv(pairs[0], pairs[1], 1), 0);
}

static struct dcp_launch_env detect_ok(const char *const *pairs)
{
    set_env(pairs);
    struct dcp_launch_env env;
    memset(&env, 0xff, sizeof(env));
    int st = dcp_launch_env_detect(&env);
    if (st)
        fail_msg("detect failed: %s", dcp_last_error());
    return env;
}

static void expect_env(const struct dcp_launch_env *e, const char *launcher, uint32_t rank, uint32_t size,
                       uint32_t local_rank, uint32_t local_size, bool local_known)
{
    assert_string_equal(e->launcher, launcher);
    assert_int_equal(e->rank, rank);
    assert_int_equal(e->world_size, size);
    assert_int_equal(e->local_rank, local_rank);
    assert_int_equal(e->local_size, local_size);
    assert_int_equal(e->local_known, local_known);
}

static void detect_fails(const char *const *pairs, const char *mention)
{
    set_env(pairs);
    struct dcp_launch_env env;
    assert_int_equal(dcp_launch_env_detect(&env), DCP_EINVAL);
    if (!strstr(dcp_last_error(), mention))
        fail_msg("error \"%s\" does not mention \"%s\"", dcp_last_error(), mention);
    clear_env(NULL);
}

static void test_no_launcher(void **state)
{
    (void)state;
    const char *const none[] = {NULL};
    struct dcp_launch_env e = detect_ok(none);
    expect_env(&e, "none", 0, 1, 0, 1, false);
    assert_false(e.overridden);
}

static void test_slurm(void **state)
{
    (void)state;
    const char *const vars[] = {"SLURM_PROCID", "5", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1",
                                "SLURM_NTASKS_PER_NODE", "4", NULL};
    struct dcp_launch_env e = detect_ok(vars);
    expect_env(&e, "slurm", 5, 8, 1, 4, true);
}

static void test_slurm_tasks_per_node(void **state)
{
    (void)state;
    /* Nodes 0-2 run 3 tasks, node 3 runs 1: 10 tasks. */
    const char *const base[] = {"SLURM_PROCID", "9", "SLURM_NTASKS", "10", "SLURM_LOCALID", "0",
                                "SLURM_TASKS_PER_NODE", "3(x3),1", "SLURM_NODEID", "3", NULL};
    struct dcp_launch_env e = detect_ok(base);
    expect_env(&e, "slurm", 9, 10, 0, 1, true);

    const char *const node1[] = {"SLURM_PROCID", "4", "SLURM_LOCALID", "1", "SLURM_NODEID", "1", NULL};
    e = detect_ok(node1);
    expect_env(&e, "slurm", 4, 10, 1, 3, true);

    /* The step's own list wins over the allocation's. */
    const char *const step[] = {"SLURM_STEP_TASKS_PER_NODE", "2,2,2,4", NULL};
    e = detect_ok(step);
    assert_int_equal(e.local_size, 2);

    /* An explicit per-node count wins over both lists. */
    const char *const explicit_count[] = {"SLURM_NTASKS_PER_NODE", "5", NULL};
    e = detect_ok(explicit_count);
    assert_int_equal(e.local_size, 5);

    /* Without SLURM_NODEID the list cannot be read: one node assumed. */
    clear_env(NULL);
    const char *const no_node[] = {"SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_TASKS_PER_NODE", "2", NULL};
    e = detect_ok(no_node);
    expect_env(&e, "slurm", 1, 2, 1, 2, false);
    clear_env(NULL);

    const char *const bad_list[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_NODEID", "0",
                                    "SLURM_TASKS_PER_NODE", "2(3),2", NULL};
    detect_fails(bad_list, "cannot parse SLURM_TASKS_PER_NODE='2(3),2'");
    const char *const short_list[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_NODEID", "2",
                                      "SLURM_TASKS_PER_NODE", "2(x2)", NULL};
    detect_fails(short_list, "lists fewer nodes");
    const char *const trailing[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_NODEID", "0",
                                    "SLURM_TASKS_PER_NODE", "4,", NULL};
    detect_fails(trailing, "cannot parse SLURM_TASKS_PER_NODE='4,'");
    const char *const junk_first[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_NODEID", "1",
                                      "SLURM_TASKS_PER_NODE", "2;2", NULL};
    detect_fails(junk_first, "cannot parse");
}

static void test_openmpi(void **state)
{
    (void)state;
    const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "6", "OMPI_COMM_WORLD_SIZE", "16",
                                "OMPI_COMM_WORLD_LOCAL_RANK", "6", "OMPI_COMM_WORLD_LOCAL_SIZE", "8", NULL};
    struct dcp_launch_env e = detect_ok(vars);
    expect_env(&e, "openmpi", 6, 16, 6, 8, true);
}

static void test_pmi(void **state)
{
    (void)state;
    const char *const vars[] = {"PMI_RANK", "3", "PMI_SIZE", "4", "MPI_LOCALRANKID", "1", NULL};
    struct dcp_launch_env e = detect_ok(vars);
    expect_env(&e, "pmi", 3, 4, 1, 4, true);
    const char *const nranks[] = {"MPI_LOCALNRANKS", "2", NULL};
    e = detect_ok(nranks);
    expect_env(&e, "pmi", 3, 4, 1, 2, true);
}

static void test_torchrun(void **state)
{
    (void)state;
    const char *const vars[] = {"RANK", "10", "WORLD_SIZE", "16", "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "8", NULL};
    struct dcp_launch_env e = detect_ok(vars);
    expect_env(&e, "torchrun", 10, 16, 2, 8, true);
}

/* A launcher started inside a Slurm allocation sees the batch step's SLURM_PROCID. */
static void test_inner_launcher_wins(void **state)
{
    (void)state;
    const char *const slurm[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_LOCALID", "0", NULL};
    const char *const torch[] = {"RANK", "1", "WORLD_SIZE", "2", NULL};
    set_env(slurm);
    struct dcp_launch_env e = detect_ok(torch);
    expect_env(&e, "torchrun", 1, 2, 1, 2, false);
    const char *const pmi[] = {"PMI_RANK", "0", "PMI_SIZE", "2", NULL};
    e = detect_ok(pmi);
    assert_string_equal(e.launcher, "pmi");
    const char *const ompi[] = {"OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", NULL};
    e = detect_ok(ompi);
    expect_env(&e, "openmpi", 1, 2, 1, 2, false);
}

static void test_overrides(void **state)
{
    (void)state;
    const char *const torch[] = {"RANK", "1", "WORLD_SIZE", "4", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "4", NULL};
    struct dcp_launch_env e = detect_ok(torch);
    assert_false(e.overridden);
    const char *const over[] = {"DCP_RANK", "3", "DCP_LOCAL_RANK", "0", "DCP_LOCAL_SIZE", "2", NULL};
    e = detect_ok(over);
    expect_env(&e, "torchrun", 3, 4, 0, 2, true);
    assert_true(e.overridden);
    clear_env(NULL);

    /* Overrides alone describe a job without a launcher. */
    const char *const alone[] = {"DCP_RANK", "2", "DCP_WORLD_SIZE", "3", NULL};
    e = detect_ok(alone);
    expect_env(&e, "none", 2, 3, 2, 3, false);
    assert_true(e.overridden);
    clear_env(NULL);

    /* A launcher's missing size may come from the override. */
    const char *const fill[] = {"RANK", "1", "DCP_WORLD_SIZE", "2", NULL};
    e = detect_ok(fill);
    expect_env(&e, "torchrun", 1, 2, 1, 2, false);
}

static void test_errors(void **state)
{
    (void)state;
    const char *const junk[] = {"RANK", "3x", "WORLD_SIZE", "4", NULL};
    detect_fails(junk, "RANK='3x' is not a non-negative decimal integer");
    const char *const negative[] = {"PMI_RANK", "-1", "PMI_SIZE", "4", NULL};
    detect_fails(negative, "PMI_RANK='-1'");
    const char *const empty[] = {"SLURM_PROCID", "", "SLURM_NTASKS", "4", NULL};
    detect_fails(empty, "SLURM_PROCID=''");
    const char *const huge[] = {"RANK", "0", "WORLD_SIZE", "4294967296", NULL};
    detect_fails(huge, "WORLD_SIZE='4294967296'");
    const char *const spaces[] = {"RANK", " 1", "WORLD_SIZE", "4", NULL};
    detect_fails(spaces, "RANK=' 1'");
    const char *const rank_too_big[] = {"OMPI_COMM_WORLD_RANK", "4", "OMPI_COMM_WORLD_SIZE", "4", NULL};
    detect_fails(rank_too_big, "rank 4 (OMPI_COMM_WORLD_RANK) is not below world size 4 (OMPI_COMM_WORLD_SIZE)");
    const char *const no_size[] = {"RANK", "0", NULL};
    detect_fails(no_size, "RANK is set but WORLD_SIZE is not");
    const char *const dcp_no_size[] = {"DCP_RANK", "1", NULL};
    detect_fails(dcp_no_size, "DCP_RANK is set but DCP_WORLD_SIZE is not");
    const char *const no_rank[] = {"DCP_WORLD_SIZE", "4", NULL};
    detect_fails(no_rank, "no rank: set DCP_RANK");
    const char *const zero[] = {"RANK", "0", "WORLD_SIZE", "0", NULL};
    detect_fails(zero, "world size 0 (WORLD_SIZE)");
    const char *const local_rank[] = {"RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2", NULL};
    detect_fails(local_rank, "local rank 2 (LOCAL_RANK) is not below local size 2 (LOCAL_WORLD_SIZE)");
    const char *const local_size[] = {"RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "8", NULL};
    detect_fails(local_size, "local size 8 (LOCAL_WORLD_SIZE) exceeds world size 4");
    const char *const local_zero[] = {"RANK", "0", "WORLD_SIZE", "4", "LOCAL_WORLD_SIZE", "0", NULL};
    detect_fails(local_zero, "local size 0");
    const char *const bad_override[] = {"RANK", "0", "WORLD_SIZE", "4", "DCP_RANK", "x", NULL};
    detect_fails(bad_override, "DCP_RANK='x'");
    /* Only the chosen launcher's variables are read: junk elsewhere is not an error. */
    const char *const ignored[] = {"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1", "LOCAL_RANK", "junk", NULL};
    struct dcp_launch_env e = detect_ok(ignored);
    expect_env(&e, "openmpi", 0, 1, 0, 1, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_no_launcher, clear_env),
        cmocka_unit_test_setup(test_slurm, clear_env),
        cmocka_unit_test_setup(test_slurm_tasks_per_node, clear_env),
        cmocka_unit_test_setup(test_openmpi, clear_env),
        cmocka_unit_test_setup(test_pmi, clear_env),
        cmocka_unit_test_setup(test_torchrun, clear_env),
        cmocka_unit_test_setup(test_inner_launcher_wins, clear_env),
        cmocka_unit_test_setup(test_overrides, clear_env),
        cmocka_unit_test_setup(test_errors, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
