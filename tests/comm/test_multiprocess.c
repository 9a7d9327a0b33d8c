/*
 * test_multiprocess.c: one process per GPU, end to end, on the test doubles.
 *
 * The same program runs a small decode (prefill, then a few decode steps with
 * attention on every layer) in two ways and the results must agree bit for bit:
 *   - the reference: one process driving all N ranks (threads, NCCL between the
 *     fake's N devices in this process);
 *   - N processes started as srun or torchrun would (SLURM_PROCID/SLURM_NTASKS/...
 *     or RANK/WORLD_SIZE/LOCAL_RANK/...), each driving the one rank the launcher
 *     environment gives it (the engine adopts it), the NCCL id shared through the
 *     file rendezvous (DCP_RENDEZVOUS, a job tag and secret), the collectives
 *     running across the processes through the fake NCCL's shared memory.
 * Each run writes, per rank, one FNV-1a hash of the raw output and LSE bytes of
 * every (step, layer); the driver compares the files. Cases: N = 2 and 4
 * (tp = dcp = N), MLA and GQA, merge schemes ag_rs and a2a. One more case kills
 * a rank before its first collective: the others must fail, not hang (with
 * timeouts far beyond the launcher's, so the fake NCCL must notice the death).
 * The driver is the launcher: it kills stragglers after a timeout and fails.
 *
 *   test_multiprocess                        run every case (the test)
 *   test_multiprocess --child CASE OUT       one run of a case (the launched program)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dcp/dcp.h>

#define MAX_RANKS 4
#define LAYERS 2
#define DECODE_STEPS 3
#define LAUNCH_TIMEOUT_S 240
/* The dead-peer case: the library's and the fake's own timeouts are far beyond the
 * launcher's, so only the fake NCCL noticing the dead process can end the others. */
#define DEAD_PEER_LAUNCH_TIMEOUT_S 120
#define DEAD_PEER_NCCL_TIMEOUT "1000"

/* ---- the launched program ------------------------------------------------ */

struct rank_buffers {
    void *q, *k, *v, *out, *lse; /* backend memory */
    float *host_in, *host_out;   /* staging on the host */
    FILE *hashes;
};

struct run {
    dcp_engine *engine;
    struct dcp_engine_info info;
    struct rank_buffers buf[MAX_RANKS];
    uint32_t tokens, step;
    bool attend;
    int die_at_step; /* > 0: this process exits at that decode step (the dead-peer case) */
};

static int child_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test_multiprocess child %ld: ", (long)getpid());
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

/* Deterministic values in [-1, 1) from what they are, so every layout feeds a
 * rank the same data. */
static void fill(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
    }
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static size_t q_floats(const struct dcp_engine_info *i, uint32_t T) { return (size_t)T * i->q_heads_per_rank * i->qk_dim; }
static size_t k_floats(const struct dcp_engine_info *i, uint32_t T) { return (size_t)T * i->kv_heads_per_rank * i->qk_dim; }
static size_t v_floats(const struct dcp_engine_info *i, uint32_t T) { return (size_t)T * i->kv_heads_per_rank * i->v_dim; }
static size_t out_floats(const struct dcp_engine_info *i, uint32_t T) { return (size_t)T * i->q_heads_per_rank * i->v_dim; }
static size_t lse_floats(const struct dcp_engine_info *i, uint32_t T) { return (size_t)T * i->q_heads_per_rank; }

static struct rank_buffers *buffers(struct run *r, dcp_rank *rank)
{
    const uint32_t first = dcp_rank_tp_rank(dcp_engine_rank(r->engine, 0));
    return &r->buf[dcp_rank_tp_rank(rank) - first];
}

static int rank_alloc(dcp_rank *rank, void *arg)
{
    struct run *r = arg;
    struct rank_buffers *b = buffers(r, rank);
    const struct dcp_engine_info *i = &r->info;
    const uint32_t T = i->max_step_tokens;
    int err = dcp_rank_alloc(rank, q_floats(i, T) * sizeof(float), &b->q);
    if (!err)
        err = dcp_rank_alloc(rank, k_floats(i, T) * sizeof(float), &b->k);
    if (!err)
        err = dcp_rank_alloc(rank, v_floats(i, T) * sizeof(float), &b->v);
    if (!err)
        err = dcp_rank_alloc(rank, out_floats(i, T) * sizeof(float), &b->out);
    if (!err)
        err = dcp_rank_alloc(rank, lse_floats(i, T) * sizeof(float), &b->lse);
    return err;
}

static int rank_free(dcp_rank *rank, void *arg)
{
    struct rank_buffers *b = buffers(arg, rank);
    dcp_rank_free(rank, b->q);
    dcp_rank_free(rank, b->k);
    dcp_rank_free(rank, b->v);
    dcp_rank_free(rank, b->out);
    dcp_rank_free(rank, b->lse);
    return DCP_OK;
}

static int upload(dcp_rank *rank, struct rank_buffers *b, void *dst, size_t n, uint64_t seed)
{
    fill(b->host_in, n, seed);
    return dcp_rank_upload(rank, dst, b->host_in, n * sizeof(float));
}

/* Appends this step's K/V on every layer and, when it attends, hashes the results. */
static int rank_step(dcp_rank *rank, void *arg)
{
    struct run *r = arg;
    struct rank_buffers *b = buffers(r, rank);
    const struct dcp_engine_info *i = &r->info;
    const uint32_t T = r->tokens, me = dcp_rank_tp_rank(rank);
    const bool mla = i->qk_dim != i->v_dim;
    if (r->attend && (int)r->step == r->die_at_step)
        _exit(3); /* a peer that dies before its collective */
    for (uint32_t layer = 0; layer < i->num_layers; layer++) {
        const uint64_t seed = ((uint64_t)r->step * 131 + layer) * 17 + me;
        int err = upload(rank, b, b->k, k_floats(i, T), seed * 4 + 1);
        if (!err && !mla)
            err = upload(rank, b, b->v, v_floats(i, T), seed * 4 + 2);
        if (!err)
            err = dcp_rank_append_kv(rank, layer, b->k, mla ? NULL : b->v);
        if (err)
            return err;
        if (!r->attend)
            continue;
        if ((err = upload(rank, b, b->q, q_floats(i, T), seed * 4 + 3)) ||
            (err = dcp_rank_attention(rank, layer, b->q, b->out, b->lse)))
            return err;
        const size_t no = out_floats(i, T), nl = lse_floats(i, T);
        if ((err = dcp_rank_download(rank, b->host_out, b->out, no * sizeof(float))) ||
            (err = dcp_rank_download(rank, b->host_out + no, b->lse, nl * sizeof(float))))
            return err;
        /* Real numbers, not a buffer nobody wrote (which would match too). */
        for (size_t j = 0; j < no + nl; j++) {
            if (!isfinite(b->host_out[j])) {
                child_fail("rank %u step %u layer %u: element %zu is %g", me, r->step, layer, j,
                           (double)b->host_out[j]);
                return DCP_EINVAL;
            }
        }
        fprintf(b->hashes, "step %u layer %u out %016" PRIx64 " lse %016" PRIx64 "\n", r->step, layer,
                fnv1a(b->host_out, no * sizeof(float)), fnv1a(b->host_out + no, nl * sizeof(float)));
    }
    return dcp_rank_synchronize(rank);
}

/* The deployment of a case "mla:2:ag_rs": the kind, N = tp = dcp, the merge scheme. */
static int case_yaml(const char *name, char *yaml, size_t size, uint32_t *n)
{
    char kind[8], comm[8];
    if (sscanf(name, "%7[a-z]:%u:%7[a-z_2]", kind, n, comm) != 3 || *n < 1 || *n > MAX_RANKS)
        return -1;
    const bool mla = !strcmp(kind, "mla");
    snprintf(yaml, size,
             "model:\n  name: mproc-%s\n  attention: %s\n  layers: %d\n  query_heads: 8\n  kv_heads: 1\n"
             "%s"
             "hardware:\n  gpu: fake\n  memory_gb: 1\n  hbm_gbps: 100\n  link_gbps: 10\n  gpus_per_node: %u\n"
             "parallel:\n  tp: %u\n  dcp: %u\n  comm: %s\n"
             "memory:\n  reserve_gb: 0\n  block_size: 16\n"
             "workload:\n  context_lengths: [128]\n"
             "runtime:\n  backend: cuda\n  cuda:\n    comm: nccl\n    nccl_timeout_s: %s\n",
             kind, kind, LAYERS, mla ? "  kv_lora_rank: 512\n  rope_dim: 64\n" : "  head_dim: 128\n", *n, *n, *n,
             comm, getenv("MPROC_TEST_NCCL_TIMEOUT") ? getenv("MPROC_TEST_NCCL_TIMEOUT") : "30");
    return 0;
}

static int child_run(const char *case_name, const char *out_prefix)
{
    char yaml[1024];
    uint32_t n;
    if (case_yaml(case_name, yaml, sizeof(yaml), &n))
        return child_fail("bad case '%s'", case_name);
    const char *die = getenv("MPROC_TEST_DIE_AT_STEP");
    struct run r = {.die_at_step = die ? atoi(die) : 0};
    dcp_deployment *dep = NULL;
    int err = dcp_deployment_load_string(case_name, yaml, strlen(yaml), NULL, &dep);
    if (!err) {
        struct dcp_engine_params p;
        dcp_engine_default_params(&p);
        p.deployment = dep;
        p.kv_budget_bytes = 8 << 20;
        p.max_batch = 2;
        p.max_query_tokens = 2;
        p.max_step_tokens = 64;
        p.max_context = 128;
        err = dcp_engine_create(&p, &r.engine); /* the launcher's rank, if any */
    }
    if (err) {
        child_fail("%s: %s: %s", case_name, dcp_strerror(err), dcp_last_error());
        dcp_deployment_destroy(&dep);
        return err == DCP_ENOTSUP || err == DCP_ENODEVICE ? 77 : 1;
    }
    dcp_engine_get_info(r.engine, &r.info);
    const uint32_t first = dcp_rank_tp_rank(dcp_engine_rank(r.engine, 0));
    const bool launched = getenv("RANK") || getenv("SLURM_PROCID") || getenv("DCP_RANK");
    int status = 0;
    if (r.info.num_local_ranks != (launched ? 1u : n) || strcmp(r.info.backend, "cuda"))
        status = child_fail("%s: %u local ranks on %s (%s), expected %u on cuda", case_name,
                            r.info.num_local_ranks, r.info.backend, r.info.backend_detail, launched ? 1u : n);
    const size_t in = q_floats(&r.info, r.info.max_step_tokens) > k_floats(&r.info, r.info.max_step_tokens)
                          ? q_floats(&r.info, r.info.max_step_tokens)
                          : k_floats(&r.info, r.info.max_step_tokens);
    const size_t out = out_floats(&r.info, r.info.max_step_tokens) + lse_floats(&r.info, r.info.max_step_tokens);
    for (uint32_t i = 0; i < r.info.num_local_ranks && !status; i++) {
        struct rank_buffers *b = &r.buf[i];
        char path[512];
        snprintf(path, sizeof(path), "%s.rank%u", out_prefix, first + i);
        b->host_in = malloc(in * sizeof(float));
        b->host_out = malloc(out * sizeof(float));
        b->hashes = fopen(path, "w");
        if (!b->host_in || !b->host_out || !b->hashes)
            status = child_fail("%s: %s", path, strerror(errno));
    }
    if (!status && (err = dcp_engine_run(r.engine, rank_alloc, &r)))
        status = child_fail("alloc: %s: %s", dcp_strerror(err), dcp_last_error());

    /* Two sequences of 40 and 23 tokens prefilled in one step, then decode steps. */
    uint32_t seq[2] = {0, 0}, lens[2] = {40, 23};
    for (int s = 0; s < 2 && !status; s++)
        if ((err = dcp_seq_create(r.engine, &seq[s])))
            status = child_fail("seq_create: %s", dcp_last_error());
    for (uint32_t step = 0; step <= DECODE_STEPS && !status; step++) {
        r.step = step;
        r.attend = step > 0;
        r.tokens = 0;
        for (int s = 0; s < 2 && !err; s++) {
            if (r.attend)
                lens[s] = 1;
            err = dcp_seq_extend(r.engine, seq[s], lens[s]);
            r.tokens += lens[s];
        }
        const struct dcp_batch batch = {.num_seqs = 2, .seq_ids = seq, .q_lens = lens};
        if (!err)
            err = dcp_engine_begin_step(r.engine, &batch);
        if (!err)
            err = dcp_engine_run(r.engine, rank_step, &r);
        if (err)
            status = child_fail("%s step %u: %s: %s", case_name, step, dcp_strerror(err), dcp_last_error());
    }
    if (r.engine && !status)
        dcp_engine_run(r.engine, rank_free, &r);
    for (uint32_t i = 0; i < MAX_RANKS; i++) {
        if (r.buf[i].hashes && fclose(r.buf[i].hashes) && !status)
            status = child_fail("writing hashes: %s", strerror(errno));
        free(r.buf[i].host_in);
        free(r.buf[i].host_out);
    }
    dcp_engine_destroy(&r.engine);
    dcp_deployment_destroy(&dep);
    return status;
}

/* ---- the launcher and the checks ----------------------------------------- */

static const char *self;
static char dir[64];

enum launcher { LAUNCH_NONE, LAUNCH_SLURM, LAUNCH_TORCHRUN };

static void set_uint(const char *name, uint32_t v)
{
    char s[16];
    snprintf(s, sizeof(s), "%u", v);
    setenv(name, s, 1);
}

/* In the child: the environment srun or torchrun would give rank `rank` of n on one node. */
static void launcher_env(enum launcher l, uint32_t rank, uint32_t n, const char *tag)
{
    static const char *const clear[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                        "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS",
                                        "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_JOB_ID",
                                        "SLURM_STEP_ID", "SLURM_NODEID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                        "DCP_RANK", "DCP_WORLD_SIZE", "DCP_LOCAL_RANK", "DCP_LOCAL_SIZE",
                                        "DCP_JOB_TAG", "MPROC_TEST_DIE_AT_STEP"};
    for (size_t i = 0; i < sizeof(clear) / sizeof(clear[0]); i++)
        unsetenv(clear[i]);
    set_uint("FAKE_CUDA_DEVICES", n);
    if (l == LAUNCH_SLURM) {
        set_uint("SLURM_PROCID", rank);
        set_uint("SLURM_NTASKS", n);
        set_uint("SLURM_LOCALID", rank);
        set_uint("SLURM_NTASKS_PER_NODE", n);
        set_uint("SLURM_NODEID", 0);
        setenv("SLURM_JOB_ID", tag, 1);
        setenv("SLURM_STEP_ID", "0", 1);
    } else if (l == LAUNCH_TORCHRUN) {
        set_uint("RANK", rank);
        set_uint("WORLD_SIZE", n);
        set_uint("LOCAL_RANK", rank);
        set_uint("LOCAL_WORLD_SIZE", n);
        setenv("TORCHELASTIC_RUN_ID", tag, 1);
    }
}

/* Starts one run of case_name in its own process group; returns its pid. */
static pid_t spawn(const char *case_name, const char *out, enum launcher l, uint32_t rank, uint32_t n,
                   const char *tag, int die_at_step)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    launcher_env(l, rank, n, tag);
    if (die_at_step) {
        char s[16];
        snprintf(s, sizeof(s), "%d", die_at_step);
        setenv("MPROC_TEST_DIE_AT_STEP", s, 1);
    }
    execl(self, self, "--child", case_name, out, (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", self, strerror(errno));
    _exit(127);
}

/* Waits for the pids; after the timeout kills what is left. statuses get exit
 * codes (-1: killed by the launcher, -2 - sig: died of a signal). */
static int wait_all(pid_t *pids, int *statuses, uint32_t n, int timeout_s)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint32_t left = n;
    int timed_out = 0;
    while (left) {
        for (uint32_t i = 0; i < n; i++) {
            int st;
            if (!pids[i] || waitpid(pids[i], &st, WNOHANG) != pids[i])
                continue;
            statuses[i] = WIFEXITED(st) ? WEXITSTATUS(st) : timed_out ? -1 : -2 - WTERMSIG(st);
            pids[i] = 0;
            left--;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (left && !timed_out && now.tv_sec - t0.tv_sec > timeout_s) {
            timed_out = 1;
            for (uint32_t i = 0; i < n; i++)
                if (pids[i]) {
                    fprintf(stderr, "launcher: rank %u still running after %d s: killed\n", i, timeout_s);
                    kill(-pids[i], SIGKILL);
                }
        }
        if (left)
            nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    return timed_out;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    int c;
    while (m && (c = fgetc(f)) != EOF)
        fputc(c, m);
    fclose(f);
    if (m)
        fclose(m);
    return buf;
}

static int failures;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    failures++;
}

static void tag_for(char *tag, size_t size, const char *case_name, const char *what)
{
    unsigned char r[8] = {0};
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r[0] = (unsigned char)getpid();
    snprintf(tag, size, "mproc-%s-%s-%02x%02x%02x%02x%02x%02x%02x%02x", what, case_name, r[0], r[1], r[2], r[3],
             r[4], r[5], r[6], r[7]);
    for (char *p = tag; *p; p++)
        if (*p == ':')
            *p = '-';
}

/* The reference run, then N launched processes; compares each rank's hashes.
 * Returns 77 when the CUDA backend is not available here. */
static int run_case(const char *case_name, enum launcher l)
{
    char yaml[1024], ref[256], mp[256], tag[128], rdzv[256];
    uint32_t n;
    if (case_yaml(case_name, yaml, sizeof(yaml), &n)) {
        fail("bad case %s", case_name);
        return 1;
    }
    snprintf(ref, sizeof(ref), "%s/ref-%s", dir, case_name);
    snprintf(mp, sizeof(mp), "%s/mp-%s", dir, case_name);
    pid_t pids[MAX_RANKS];
    int st[MAX_RANKS];
    pids[0] = spawn(case_name, ref, LAUNCH_NONE, 0, n, "", 0);
    if (wait_all(pids, st, 1, LAUNCH_TIMEOUT_S) || st[0] != 0) {
        if (st[0] == 77)
            return 77;
        fail("%s: the single-process reference run exited with %d", case_name, st[0]);
        return 1;
    }
    tag_for(tag, sizeof(tag), case_name, "ok");
    snprintf(rdzv, sizeof(rdzv), "file:%s/rdzv-%s", dir, case_name);
    setenv("DCP_RENDEZVOUS", rdzv, 1);
    for (uint32_t r = 0; r < n; r++)
        pids[r] = spawn(case_name, mp, l, r, n, tag, 0);
    const int timed_out = wait_all(pids, st, n, LAUNCH_TIMEOUT_S);
    for (uint32_t r = 0; r < n; r++)
        if (st[r] != 0)
            fail("%s: process of rank %u %s %d", case_name, r, st[r] == -1 ? "killed after the timeout," : "exited with",
                 st[r]);
    if (timed_out)
        return 1;
    char *first = NULL;
    for (uint32_t r = 0; r < n; r++) {
        char a[300], b[300];
        snprintf(a, sizeof(a), "%s.rank%u", ref, r);
        snprintf(b, sizeof(b), "%s.rank%u", mp, r);
        char *x = slurp(a), *y = slurp(b);
        if (!x || !y || !*x)
            fail("%s: rank %u wrote no results (%s, %s)", case_name, r, a, b);
        else if (strcmp(x, y))
            fail("%s: rank %u differs between one process and %u processes:\n--- one process\n%s--- %u "
                 "processes\n%s", case_name, r, n, x, n, y);
        else if (first && !strcmp(first, x))
            fail("%s: rank %u has the same results as rank 0 (the hashes cannot tell ranks apart)", case_name, r);
        if (r == 0 && x) {
            first = x;
            x = NULL;
        }
        free(x);
        free(y);
    }
    free(first);
    printf("%-12s %u processes (%s) == 1 process, bit for bit\n", case_name, n,
           l == LAUNCH_SLURM ? "Slurm environment" : "torchrun environment");
    return 0;
}

/* Rank 1 dies before its first collective: every other rank must fail on its
 * own (the launcher's timeout must not be what ends it). */
static void run_dead_peer(const char *case_name)
{
    char tag[128], rdzv[256], mp[256];
    uint32_t n;
    char yaml[1024];
    case_yaml(case_name, yaml, sizeof(yaml), &n);
    tag_for(tag, sizeof(tag), case_name, "dead");
    snprintf(rdzv, sizeof(rdzv), "file:%s/rdzv-dead-%s", dir, case_name);
    snprintf(mp, sizeof(mp), "%s/dead-%s", dir, case_name);
    setenv("DCP_RENDEZVOUS", rdzv, 1);
    setenv("MPROC_TEST_NCCL_TIMEOUT", DEAD_PEER_NCCL_TIMEOUT, 1);
    setenv("FAKE_NCCL_TIMEOUT", DEAD_PEER_NCCL_TIMEOUT, 1);
    pid_t pids[MAX_RANKS];
    int st[MAX_RANKS];
    const int failed_before = failures;
    for (uint32_t r = 0; r < n; r++)
        pids[r] = spawn(case_name, mp, LAUNCH_TORCHRUN, r, n, tag, r == 1 ? 1 : 0);
    if (wait_all(pids, st, n, DEAD_PEER_LAUNCH_TIMEOUT_S))
        fail("%s: with rank 1 dead, the other ranks hung until the launcher's timeout", case_name);
    unsetenv("MPROC_TEST_NCCL_TIMEOUT");
    unsetenv("FAKE_NCCL_TIMEOUT");
    if (st[1] != 3)
        fail("%s: rank 1 should have died (exit 3), got %d", case_name, st[1]);
    for (uint32_t r = 0; r < n; r++)
        if (r != 1 && st[r] != 1)
            fail("%s: rank %u exited with %d; it should fail (1) once its peer died", case_name, r, st[r]);
    if (failures == failed_before)
        printf("%-12s rank 1 died: the other %u processes failed on their own\n", case_name, n - 1);
}

static int quick(void)
{
    const char *q = getenv("DCP_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--child"))
        return child_run(argv[2], argv[3]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--child CASE OUT_PREFIX]\n", argv[0]);
        return 2;
    }
    self = "/proc/self/exe";
    char exe[4096];
    ssize_t len = readlink(self, exe, sizeof(exe) - 1);
    if (len > 0) {
        exe[len] = '\0';
        self = exe;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%.40s/dcp-mproc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char secret[65];
    unsigned char raw[32];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return 1;
    for (int i = 0; i < 32; i++)
        snprintf(secret + 2 * i, 3, "%02x", raw[i]);
    setenv("DCP_RENDEZVOUS_SECRET", secret, 1);
    /* Small staging areas: the layer's collectives go through the segment in several rounds. */
    setenv("FAKE_NCCL_SHM_BYTES", "65536", 1);

    static const char *const cases[] = {"mla:2:ag_rs", "mla:2:a2a", "gqa:2:ag_rs", "gqa:2:a2a",
                                        "mla:4:ag_rs", "mla:4:a2a", "gqa:4:ag_rs", "gqa:4:a2a"};
    const size_t ncases = quick() ? 4 : sizeof(cases) / sizeof(cases[0]);
    int skipped = 0;
    for (size_t i = 0; i < ncases && !skipped; i++)
        skipped = run_case(cases[i], i % 2 ? LAUNCH_SLURM : LAUNCH_TORCHRUN) == 77;
    if (!skipped)
        run_dead_peer("gqa:4:a2a");
    /* Leave nothing behind. */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (skipped) {
        printf("the CUDA backend is not available here (no kernels built?): skipped\n");
        return 77;
    }
    if (failures)
        fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
