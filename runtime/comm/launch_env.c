/* launch_env.c: rank and world size from the environment of an existing launcher. */
#include "comm/launch_env.h"

#include <stdlib.h>

#include "util/util.h"

enum { F_RANK, F_SIZE, F_LOCAL_RANK, F_LOCAL_SIZE, F_COUNT };

/* One field of the result and the variable it came from (NULL: not set). */
struct env_value {
    uint32_t value;
    const char *var;
};

/* The variables one launcher sets, in field order, and an optional way to find
 * the local size when its variable is absent. */
struct launcher {
    const char *name;
    const char *vars[F_COUNT];
    int (*local_size_fallback)(struct env_value *out);
};

static int slurm_local_size(struct env_value *out);

/* Innermost launcher first: mpirun or torchrun started inside a Slurm allocation
 * inherits SLURM_PROCID of the batch step, which is not this process's rank. */
static const struct launcher launchers[] = {
    {"openmpi", {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE"}, NULL},
    {"pmi", {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}, NULL},
    {"torchrun", {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}, NULL},
    {"slurm", {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
     slurm_local_size},
};

static const struct launcher overrides = {
    "dcp", {"DCP_RANK", "DCP_WORLD_SIZE", "DCP_LOCAL_RANK", "DCP_LOCAL_SIZE"}, NULL,
};

/* Parses a decimal uint32 at *p (digits only) and advances *p past it. */
static bool parse_u32_prefix(const char **p, uint32_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > UINT32_MAX)
            return false;
    }
    *out = (uint32_t)v;
    *p = s;
    return true;
}

/* Reads variable var as a decimal uint32; out->var stays NULL when it is unset. */
static int read_u32(const char *var, struct env_value *out)
{
    out->var = NULL;
    const char *text = getenv(var);
    if (!text)
        return DCP_OK;
    const char *p = text;
    if (!parse_u32_prefix(&p, &out->value) || *p)
        return dcp_error(DCP_EINVAL, "launch environment: %s='%s' is not a non-negative decimal integer",
                         var, text);
    out->var = var;
    return DCP_OK;
}

static int read_fields(const struct launcher *l, struct env_value v[F_COUNT])
{
    for (int f = 0; f < F_COUNT; f++) {
        int st = read_u32(l->vars[f], &v[f]);
        if (st)
            return st;
    }
    if (!v[F_LOCAL_SIZE].var && l->local_size_fallback)
        return l->local_size_fallback(&v[F_LOCAL_SIZE]);
    return DCP_OK;
}

/* Parses one entry, "N" or "N(xR)" (N tasks on each of R nodes), of a Slurm task list. */
static bool parse_tasks_entry(const char **p, uint32_t *tasks, uint32_t *repeat)
{
    *repeat = 1;
    if (!parse_u32_prefix(p, tasks))
        return false;
    if (**p != '(')
        return true;
    ++*p;
    if (*(*p)++ != 'x' || !parse_u32_prefix(p, repeat))
        return false;
    return *(*p)++ == ')';
}

/* Finds node's entry in a Slurm task list such as "2(x3),1" (nodes 0-2 run 2 tasks
 * each, node 3 runs 1); the whole list must parse. */
static int tasks_on_node(const char *var, const char *text, uint32_t node, uint32_t *count)
{
    const char *p = text;
    uint32_t left = node, tasks, repeat;
    bool found = false, parsed;
    do {
        if (!(parsed = parse_tasks_entry(&p, &tasks, &repeat)))
            break;
        if (!found && left < repeat) {
            *count = tasks;
            found = true;
        } else if (!found) {
            left -= repeat;
        }
    } while (*p++ == ',');
    if (!parsed || p[-1] != '\0')
        return dcp_error(DCP_EINVAL, "launch environment: cannot parse %s='%s' (expected e.g. \"2(x3),1\")",
                         var, text);
    if (!found)
        return dcp_error(DCP_EINVAL, "launch environment: SLURM_NODEID=%u but %s='%s' lists fewer nodes",
                         node, var, text);
    return DCP_OK;
}

/* Slurm sets SLURM_NTASKS_PER_NODE only when asked for; the per-node list is always there. */
static int slurm_local_size(struct env_value *out)
{
    static const char *const lists[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
    struct env_value node;
    int st = read_u32("SLURM_NODEID", &node);
    if (st || !node.var)
        return st;
    for (size_t i = 0; i < DCP_ARRAY_SIZE(lists); i++) {
        const char *text = getenv(lists[i]);
        if (!text)
            continue;
        st = tasks_on_node(lists[i], text, node.value, &out->value);
        if (!st)
            out->var = lists[i];
        return st;
    }
    return DCP_OK;
}

static const char *origin(const struct env_value *v) { return v->var ? v->var : "default"; }

static int validate(const struct env_value v[F_COUNT])
{
    const struct env_value *rank = &v[F_RANK], *size = &v[F_SIZE];
    const struct env_value *lrank = &v[F_LOCAL_RANK], *lsize = &v[F_LOCAL_SIZE];
    if (!size->value)
        return dcp_error(DCP_EINVAL, "launch environment: world size 0 (%s)", origin(size));
    if (!lsize->value)
        return dcp_error(DCP_EINVAL, "launch environment: local size 0 (%s)", origin(lsize));
    if (rank->value >= size->value)
        return dcp_error(DCP_EINVAL, "launch environment: rank %u (%s) is not below world size %u (%s)",
                         rank->value, origin(rank), size->value, origin(size));
    if (lsize->value > size->value)
        return dcp_error(DCP_EINVAL, "launch environment: local size %u (%s) exceeds world size %u (%s)",
                         lsize->value, origin(lsize), size->value, origin(size));
    if (lrank->value >= lsize->value)
        return dcp_error(DCP_EINVAL, "launch environment: local rank %u (%s) is not below local size %u (%s)",
                         lrank->value, origin(lrank), lsize->value, origin(lsize));
    return DCP_OK;
}

/* Fills what the environment left unset: rank 0 of 1, and one node. */
static int apply_defaults(const struct launcher *l, struct env_value v[F_COUNT])
{
    if (!v[F_SIZE].var && v[F_RANK].var)
        return dcp_error(DCP_EINVAL, "launch environment: %s is set but %s is not (world size unknown;"
                         " %s overrides it)", v[F_RANK].var, l ? l->vars[F_SIZE] : overrides.vars[F_SIZE],
                         overrides.vars[F_SIZE]);
    if (!v[F_SIZE].var)
        v[F_SIZE].value = 1;
    if (!v[F_RANK].var && v[F_SIZE].value > 1)
        return dcp_error(DCP_EINVAL, "launch environment: world size %u (%s) but no rank: set %s",
                         v[F_SIZE].value, v[F_SIZE].var, overrides.vars[F_RANK]);
    if (!v[F_RANK].var)
        v[F_RANK].value = 0;
    if (!v[F_LOCAL_RANK].var)
        v[F_LOCAL_RANK].value = v[F_RANK].value;
    if (!v[F_LOCAL_SIZE].var)
        v[F_LOCAL_SIZE].value = v[F_SIZE].value;
    return DCP_OK;
}

int dcp_launch_env_detect(struct dcp_launch_env *out)
{
    struct env_value v[F_COUNT] = {{0, NULL}}, ov[F_COUNT];
    const struct launcher *found = NULL;
    for (size_t i = 0; i < DCP_ARRAY_SIZE(launchers) && !found; i++)
        if (getenv(launchers[i].vars[F_RANK]))
            found = &launchers[i];
    int st = found ? read_fields(found, v) : DCP_OK;
    if (!st)
        st = read_fields(&overrides, ov);
    if (st)
        return st;

    out->overridden = false;
    for (int f = 0; f < F_COUNT; f++)
        if (ov[f].var) {
            v[f] = ov[f];
            out->overridden = true;
        }
    out->local_known = v[F_LOCAL_RANK].var != NULL;
    st = apply_defaults(found, v);
    if (!st)
        st = validate(v);
    if (st)
        return st;
    out->rank = v[F_RANK].value;
    out->world_size = v[F_SIZE].value;
    out->local_rank = v[F_LOCAL_RANK].value;
    out->local_size = v[F_LOCAL_SIZE].value;
    out->launcher = found ? found->name : "none";
    return DCP_OK;
}
