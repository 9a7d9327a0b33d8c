/*
 * The GPU entries of the layer kinds (docs/design.md §13) on the host emulator
 * (cuda_emu.h), against the float64 oracle (tests/common/oracle.h) and against
 * the CPU implementations bit for bit where the kernels promise it:
 *   - through a whole DCP group (tests/kernels/group_harness.h, the harness the
 *     CPU kernels' tests use): every run_kernel of the harness runs the GPU entry
 *     of its family on the emulator (emu_run below), so the sharding, both merge
 *     schemes and the sink after the merge are the same code as on the CPU;
 *   - the sink's rules, the indexer's scores and the top-k, hand-made and random;
 *   - for each kernel feature a deliberate bug (a mutant instantiation of the same
 *     source) that a test must catch.
 * Kept small: DCP_TEST_QUICK runs fewer cases.
 */
#include "emu_kernels.h"
extern "C" {
#include "group_harness.h"
#include "oracle.h"
}

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

/** launch(), where the emulator's errors are failed checks of the harness (counted for a mutant). */
template <class P>
void harness_launch_on(void (*kernel)(P), const P &params, dim3 grid, dim3 block)
{
    emu::reset_errors();
    emu::launch(kernel, params, grid, block);
    if (emu::errors())
        harness_fail("emulator: %u errors, the first: %s", emu::errors(), emu::first_error());
}

/**
 * A launch of a simple family (DCPK_SIMPLE_KERNELS) with its block size and at
 * most 3 blocks: they walk the work items of its params with a grid-stride loop,
 * so any grid is correct (and fewer blocks emulate faster).
 */
template <class P>
void launch_simple(void (*kernel)(P), enum dcpk_kernel_id id, const void *params, unsigned threads)
{
    const uint64_t items = dcpk_grid_items(dcpk_kernels[id].grid(params));
    if (items == 0)
        return;
    harness_launch_on(kernel, *static_cast<const P *>(params), dim3((unsigned)std::min<uint64_t>(items, 3)),
                      dim3(threads));
}

/* ---- the harness's kernels on the emulated GPU -------------------------------- */

/** Which attention entry the harness's launches take: the tensor-core one where there is one, or SIMT. */
bool attn_simt_only;
/** Mutant kernels the harness's attention and sparse launches take instead of the entries (null: the entries). */
AttnKernel attn_override;
using SparseKernel = void (*)(dcpk_sparse_attn_params);
SparseKernel sparse_override;

/** The SIMT entry of a shape and dtype (dcpk_attn_variant_find prefers the tensor-core one). */
const dcpk_attn_variant *attn_simt_variant(uint32_t qk, uint32_t v, uint32_t shared, uint32_t dtype)
{
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++) {
        const dcpk_attn_variant *e = dcpk_attn_variant_at(i);
        if (!e->tensor_core && e->qk_dim == qk && e->v_dim == v && e->shared_kv == shared && e->dtype == dtype)
            return e;
    }
    return nullptr;
}

/**
 * dcpk_attn on the entry the CUDA backend would pick (or the SIMT one), with the
 * params an engine gives it: head_tile within the KV head's heads, exact
 * tensor-core precision (the group tests check to fp32 accuracy).
 */
void emu_attn(const dcpk_attn_params &given)
{
    dcpk_attn_params p = given;
    const uint32_t shared = p.v_cache == p.k_cache ? 1u : 0u;
    const dcpk_attn_variant *v = attn_simt_only ? attn_simt_variant(p.qk_dim, p.v_dim, shared, p.dtype)
                                                : dcpk_attn_variant_find(p.qk_dim, p.v_dim, shared, p.dtype);
    if (!v)
        fail_msg("no GPU attention entry for qk %u v %u dtype %u", p.qk_dim, p.v_dim, p.dtype);
    const uint32_t per_kv = p.num_heads / p.num_kv_heads;
    if (p.head_tile == 0 || p.head_tile > per_kv)
        p.head_tile = per_kv;
    p.precision = DCPK_PRECISION_EXACT;
    const dcpk_grid g = dcpk_attn_grid(&p);
    if (dcpk_grid_items(g) == 0)
        return;
    harness_launch_on(attn_override ? attn_override : attn_entry(v->entry), p, dim3(g.x, g.y, g.z), dim3(v->threads));
}

SparseKernel sparse_entry(const char *name)
{
#define SPARSE_ENTRY_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    if (std::strcmp(name, "dcpk_sparse_attn__" #layout "_" #dt) == 0)              \
        return dcpk_sparse_attn__##layout##_##dt;
    DCPK_SPARSE_VARIANTS(SPARSE_ENTRY_)
    DCPK_SPARSE_TC_VARIANTS(SPARSE_ENTRY_)
#undef SPARSE_ENTRY_
    return nullptr;
}

/** dcpk_sparse_attn on the entry the CUDA backend would pick, head_tile within the KV head's heads. */
void emu_sparse(const dcpk_sparse_attn_params &given)
{
    dcpk_sparse_attn_params p = given;
    const dcpk_attn_variant *v = dcpk_sparse_variant_find(p.qk_dim, p.v_dim, p.v_cache == p.k_cache, p.dtype);
    if (!v || !sparse_entry(v->entry))
        fail_msg("no GPU sparse entry for qk %u v %u dtype %u", p.qk_dim, p.v_dim, p.dtype);
    p.precision = DCPK_PRECISION_EXACT; // the group tests check to fp32 accuracy
    const uint32_t per_kv = p.num_heads / p.num_kv_heads;
    if (p.head_tile == 0 || p.head_tile > per_kv)
        p.head_tile = per_kv;
    const dcpk_grid g = dcpk_sparse_attn_grid(&p);
    if (dcpk_grid_items(g) == 0)
        return;
    harness_launch_on(sparse_override ? sparse_override : sparse_entry(v->entry), p, dim3(g.x, g.y, g.z),
                      dim3(v->threads));
}

/** harness_launch: every family with a GPU entry runs it here. */
int emu_run(enum dcpk_kernel_id id, const void *params)
{
    switch (id) {
    case DCPK_KERNEL_kv_append:
        launch_simple(dcpk_kv_append, id, params, dcpk::kBlock_kv_append);
        return 1;
    case DCPK_KERNEL_attn:
        emu_attn(*static_cast<const dcpk_attn_params *>(params));
        return 1;
    case DCPK_KERNEL_sparse_attn:
        emu_sparse(*static_cast<const dcpk_sparse_attn_params *>(params));
        return 1;
    case DCPK_KERNEL_merge:
        launch_simple(dcpk_merge, id, params, dcpk::kBlock_merge);
        return 1;
    case DCPK_KERNEL_lse_scale:
        launch_simple(dcpk_lse_scale, id, params, dcpk::kBlock_lse_scale);
        return 1;
    case DCPK_KERNEL_reduce:
        launch_simple(dcpk_reduce, id, params, dcpk::kBlock_reduce);
        return 1;
    case DCPK_KERNEL_sink:
        launch_simple(dcpk_sink, id, params, dcpk::kBlock_sink);
        return 1;
    case DCPK_KERNEL_index_score:
        launch_simple(dcpk_index_score, id, params, dcpk::kBlock_index_score);
        return 1;
    case DCPK_KERNEL_topk:
        launch_simple(dcpk_topk, id, params, dcpk::kBlock_topk);
        return 1;
    default:
        fail_msg("no GPU entry for dcpk_%s", dcpk_kernels[id].name);
        return 0;
    }
}

/** Runs the harness's kernels on the emulated GPU for the scope of one test. */
struct OnGpu {
    explicit OnGpu(bool simt_only = false)
    {
        harness_launch = emu_run;
        attn_simt_only = simt_only;
    }
    ~OnGpu()
    {
        harness_launch = nullptr;
        attn_override = nullptr;
        sparse_override = nullptr;
    }
};

/** Problems with GPU shapes (head dims 64 and 128; MLA 576/512), short sequences. */
const uint32_t kGpuDims[] = {64, 128};

void gpu_problem(attn_problem *pb, uint32_t n, uint32_t il, uint32_t block, int mla, uint32_t max_len, test_rng *rng)
{
    const problem_limits lim = {kGpuDims, 2, max_len, mla};
    random_problem_shaped(pb, n, il, block, &lim, rng);
}

/* ---- sliding windows and sparse top-k ------------------------------------------------ */

/** The gqa_d64 fp32 SIMT entry (dcpk_attn or dcpk_sparse_attn) with a deliberate bug M (attn.cuh, KeysMutant). */
template <dcpk::KeysMutant M>
void attn_mutant(dcpk_attn_params p)
{
    dcpk::attn_kernel<dcpk::AttnCfg<64, 64, 0, DCPK_FP32, 128, 16, 64>, M>(p);
}

template <dcpk::KeysMutant M>
void sparse_mutant(dcpk_sparse_attn_params p)
{
    dcpk::sparse_kernel<dcpk::AttnCfg<64, 64, 0, DCPK_FP32, 128, 16, 64>, M>(p);
}

/** The bf16 MLA tensor-core entries (dcpk_attn, dcpk_sparse_attn) with a deliberate bug M (KeysMutant). */
template <dcpk::KeysMutant M>
struct MlaTcMutants {
    template <class C>
    using Dense = dcpk::MlaTcBlockOf<C, dcpk::DenseKeysOf<M>>;
    template <class C>
    using Sparse = dcpk::MlaTcBlockOf<C, dcpk::SparseKeys<C, M>>;
};

template <dcpk::KeysMutant M>
void mla_tc_attn_mutant(dcpk_attn_params p)
{
    dcpk::attn_tc_kernel<MlaTcMutants<M>::template Dense, dcpk::MlaTcCfg<DCPK_BF16, 256, 32, 32>>(p);
}

template <dcpk::KeysMutant M>
void mla_tc_sparse_mutant(dcpk_sparse_attn_params p)
{
    dcpk::sparse_tc_kernel<MlaTcMutants<M>::template Sparse, dcpk::MlaTcCfg<DCPK_BF16, 256, 32, 32>>(p);
}

/** A group problem of the GPU shapes with the layout and dtype asked for (drawn until one comes). */
void shaped_problem(attn_problem *pb, uint32_t n, uint32_t il, uint32_t block, int mla, uint32_t dtype, uint32_t min_len,
                    test_rng *rng, uint32_t q_len = 0)
{
    for (;;) {
        gpu_problem(pb, n, il, block, mla, 70, rng);
        if (pb->dtype == dtype && pb->seq_len[0] >= min_len && (mla || pb->qk_dim == 64) &&
            (!q_len || pb->q_len[0] == q_len))
            return;
        problem_free(pb);
    }
}

/** Whether a group's run of pb fails (emulator errors or results off the oracle), quietly. */
bool group_fails(const attn_problem &pb, uint32_t n, uint32_t il, test_rng *rng)
{
    emu::quiet = true;
    harness_soft_failures = 0;
    run_problem_tol(&pb, n, il, 1, 1e-4, rng);
    const bool failed = harness_soft_failures > 0;
    harness_soft_failures = -1;
    emu::quiet = false;
    emu::reset_errors();
    return failed;
}

/*
 * Sliding windows through whole groups on the SIMT entries (every shape; the
 * tensor-core entries do not read windows yet): windows from 1 token (shorter than
 * any shard) to longer than the sequence, keys in per-sequence rings or the paged
 * cache, multi-token steps, both merges, against the windowed oracle; without the
 * window's start in the rows' ranges (the mutant) it fails.
 */
void test_window_groups(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x5a1e);
    const OnGpu gpu(true);
    const uint32_t groups[] = {1, 2, 4, 8}, windows[] = {1, 3, 17, 1000};
    const int reps = test_quick() ? 1 : 2;
    for (uint32_t n : groups)
        for (int rep = 0; rep < reps; rep++) {
            const uint32_t il = 1u << test_rng_range(&rng, 0, 1), block = il * (uint32_t)test_rng_range(&rng, 1, 4);
            attn_problem pb;
            gpu_problem(&pb, n, il, block, rep == 1 ? 1 : 0, 70, &rng);
            pb.window = windows[test_rng_range(&rng, 0, 3)];
            pb.ring = test_rng_range(&rng, 0, 1) && pb.window < 1000;
            run_problem_tol(&pb, n, il, 0, 1e-4, &rng);
            problem_free(&pb);
        }
    // The mutant: a window of 3 under 4-token steps (the rows' windows start apart), gqa_d64 fp32.
    attn_problem pb;
    shaped_problem(&pb, 2, 1, 4, 0, DCPK_FP32, 20, &rng, 4);
    pb.window = 3;
    attn_override = attn_mutant<dcpk::KeysMutant::none>;
    if (group_fails(pb, 2, 1, &rng))
        fail_msg("the unmutated gqa_d64 fp32 entry fails the window harness");
    attn_override = attn_mutant<dcpk::KeysMutant::no_window>;
    if (!group_fails(pb, 2, 1, &rng))
        fail_msg("mutant 'no window start' went unnoticed");
    attn_override = nullptr;
    problem_free(&pb);
    print_message("windows: every group matches the oracle; mutant 'no window start' caught\n");
}

/*
 * Sparse top-k through whole groups on the GPU sparse entries (GQA and MLA):
 * random lists (positions past the token, padding), lists of one rank's tokens
 * only (the others empty: LSE -inf from the count), empty lists, every position;
 * both merges against the oracle's attention over the listed keys. Lists longer
 * than one shared-memory segment take several. A sparse entry without its
 * cp.async wait fails.
 */
void test_sparse_groups(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x70bd);
    const OnGpu gpu;
    const uint32_t groups[] = {1, 2, 3, 8}, ks[] = {1, 8, 64, 1100};
    const int reps = test_quick() ? 1 : 2;
    for (uint32_t n : groups)
        for (int rep = 0; rep < reps * 2; rep++) {
            const uint32_t il = 1u << test_rng_range(&rng, 0, 1), block = il * (uint32_t)test_rng_range(&rng, 1, 4);
            attn_problem pb;
            gpu_problem(&pb, n, il, block, rep == 3 ? 1 : 0, rep == 2 ? 1200 : 70, &rng);
            pb.num_topk = rep == 2 ? ks[3] : ks[test_rng_range(&rng, 0, 2)];
            random_topk(&pb, n, il, rep == 2 ? 3 : rep % 4, (uint32_t)test_rng_range(&rng, 0, n - 1), &rng);
            run_problem_tol(&pb, n, il, 1, 1e-4, &rng);
            problem_free(&pb);
        }
    attn_problem pb;
    do {
        gpu_problem(&pb, 2, 1, 4, 0, 60, &rng);
        if (pb.dtype == DCPK_FP32 && pb.qk_dim == 64 && pb.seq_len[0] > 20)
            break;
        problem_free(&pb);
    } while (true);
    pb.num_topk = 16;
    random_topk(&pb, 2, 1, 0, 0, &rng);
    sparse_override = sparse_mutant<dcpk::KeysMutant::none>;
    if (group_fails(pb, 2, 1, &rng))
        fail_msg("the unmutated gqa_d64 fp32 sparse entry fails the harness");
    sparse_override = sparse_mutant<dcpk::KeysMutant::no_wait>;
    if (!group_fails(pb, 2, 1, &rng))
        fail_msg("mutant 'no cp.async wait' went unnoticed");
    sparse_override = nullptr;
    problem_free(&pb);
    print_message("sparse top-k: every group matches the oracle; mutant 'no cp.async wait' caught\n");
}

/*
 * Sliding windows on the tensor-core entries (GQA d64/d128, MLA; bf16, fp16 and
 * fp8 latents), the same groups as test_window_groups; then a NaN in the value of
 * a key only a multi-token step's first tokens see (before the last token's
 * window: the keys the entries zero before P.V): exactly the rows that see it are
 * NaN, through the GQA and MLA entries; and the MLA entry without the window's
 * start fails.
 */
void test_window_tensor_cores(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x5a1f);
    const OnGpu gpu;
    const uint32_t groups[] = {2, 1, 4}, windows[] = {2, 5, 40};
    const uint32_t dtypes[] = {DCPK_BF16, DCPK_FP16, DCPK_FP8_E4M3};
    for (size_t gi = 0; gi < (test_quick() ? 1u : 3u); gi++) // DCP_TEST_QUICK: a group of 2
        for (int mla = 0; mla < 2; mla++) {
            const uint32_t n = groups[gi];
            const uint32_t dt = dtypes[test_rng_range(&rng, 0, mla ? 2 : 1)];
            attn_problem pb;
            shaped_problem(&pb, n, 1, 4, mla, dt, 1, &rng);
            pb.window = windows[test_rng_range(&rng, 0, 2)];
            pb.ring = test_rng_range(&rng, 0, 1);
            run_problem_tol(&pb, n, 1, 0, 1e-4, &rng);
            problem_free(&pb);
        }
    for (int mla = 0; mla < 2; mla++) {
        attn_problem pb;
        shaped_problem(&pb, 2, 1, 4, mla, DCPK_BF16, 12, &rng, 4);
        pb.window = 3; // sequence 0's query tokens at p0 .. p0 + 3: p0 - 2 only the first one sees
        const uint32_t pos = pb.seq_len[0] - 4 - 2;
        float *v = mla ? pb.k_src[0] : pb.v_src[0];
        const uint32_t row = mla ? pb.qk_dim : pb.v_dim;
        v[(size_t)pos * pb.kv_heads * row + 5] = NAN; // KV head 0
        run_problem_tol(&pb, 2, 1, 1, 1e-4, &rng);
        problem_free(&pb);
    }
    attn_problem pb; // a window of 3 under 4-token steps: the rows' windows start apart
    shaped_problem(&pb, 2, 1, 4, 1, DCPK_BF16, 20, &rng, 4);
    pb.window = 3;
    attn_override = mla_tc_attn_mutant<dcpk::KeysMutant::none>;
    if (group_fails(pb, 2, 1, &rng))
        fail_msg("the unmutated mla_tc bf16 entry fails the window harness");
    attn_override = mla_tc_attn_mutant<dcpk::KeysMutant::no_window>;
    if (!group_fails(pb, 2, 1, &rng))
        fail_msg("mutant 'no window start' of mla_tc went unnoticed");
    attn_override = nullptr;
    problem_free(&pb);
    print_message("windows on tensor cores: groups and NaN rows match the oracle; mutant 'no window start' caught\n");
}

/*
 * Sparse top-k on the tensor-core MLA entries (DSA: bf16, fp16, fp8 latents):
 * random lists, one rank's tokens only, empty lists, lists of several segments;
 * the entry that also takes other ranks' entries fails.
 */
void test_sparse_tensor_cores(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x70be);
    const OnGpu gpu;
    const uint32_t dtypes[] = {DCPK_BF16, DCPK_FP16, DCPK_FP8_E4M3};
    for (int shape = 0; shape < (test_quick() ? 3 : 4); shape++) { // DCP_TEST_QUICK: not the long one
        const uint32_t n = shape == 3 ? 1u : 2u + (uint32_t)shape;
        attn_problem pb;
        shaped_problem(&pb, n, 1, 4, 1, dtypes[shape % 3], 1, &rng);
        if (shape == 3) { // one long sequence, every position: two segments of the list
            problem_free(&pb);
            const problem_limits lim = {kGpuDims, 2, 700, 1};
            do {
                random_problem_shaped(&pb, 1, 1, 4, &lim, &rng);
                if (pb.dtype != DCPK_FP32 && pb.seq_len[0] > 520)
                    break;
                problem_free(&pb);
            } while (true);
            pb.num_topk = 600;
        } else {
            pb.num_topk = 16;
        }
        random_topk(&pb, n, 1, shape, (uint32_t)test_rng_range(&rng, 0, n - 1), &rng);
        run_problem_tol(&pb, n, 1, 1, 1e-4, &rng);
        problem_free(&pb);
    }
    attn_problem pb;
    shaped_problem(&pb, 2, 1, 4, 1, DCPK_BF16, 20, &rng);
    pb.num_topk = 16;
    random_topk(&pb, 2, 1, 0, 0, &rng);
    sparse_override = mla_tc_sparse_mutant<dcpk::KeysMutant::none>;
    if (group_fails(pb, 2, 1, &rng))
        fail_msg("the unmutated mla_tc bf16 sparse entry fails the harness");
    sparse_override = mla_tc_sparse_mutant<dcpk::KeysMutant::no_owner>;
    if (!group_fails(pb, 2, 1, &rng))
        fail_msg("mutant 'no owner check' went unnoticed");
    sparse_override = nullptr;
    problem_free(&pb);
    print_message("sparse top-k on tensor cores: groups match the oracle; mutant 'no owner check' caught\n");
}

/* ---- the sink ------------------------------------------------------------------- */

/** dcpk_sink with a deliberate bug M (rows.cuh, SinkMutant). */
template <dcpk::SinkMutant M>
void sink_mutant(dcpk_sink_params p)
{
    dcpk::sink_rows<M>(p);
}

/** Rows of (LSE, sink) that cover the rules: ordinary, empty, no sink, NaN row, NaN sink, dominating sink. */
constexpr uint32_t kSinkRows = 6, kSinkDim = 150;
const float kSinkLse[kSinkRows] = {0.5f, -INFINITY, 1.0f, NAN, 2.0f, -3.0f};
const float kSinkLogit[kSinkRows] = {0.25f, 3.0f, -INFINITY, 0.0f, NAN, 40.0f};

/**
 * Runs kernel (the entry or a mutant) on the rule rows in out_dtype, 2 blocks for
 * 6 rows (grid-stride), and compares with the float64 sink: L' = logaddexp(L, s),
 * o' = o e^(L - L'); an empty row takes s and stays 0 (its NaN never leaks); a NaN
 * in L or s makes the row NaN. Returns whether every row matches.
 */
bool sink_rules_hold(void (*kernel)(dcpk_sink_params), uint32_t out_dtype)
{
    std::vector<float> o(kSinkRows * kSinkDim), lse(kSinkLse, kSinkLse + kSinkRows);
    for (uint32_t r = 0; r < kSinkRows; r++)
        for (uint32_t d = 0; d < kSinkDim; d++)
            o[r * kSinkDim + d] = act_round(out_dtype, kSinkLse[r] == -INFINITY ? 0.f : 0.1f * (float)(d % 13) - 0.5f);
    o[1 * kSinkDim + 7] = NAN; // an empty row's stale value: must not leak
    std::vector<unsigned char> raw(o.size() * dcpk_dtype_size(out_dtype));
    for (size_t i = 0; i < o.size(); i++)
        dcpk_store_as(raw.data(), i, out_dtype, o[i]);
    dcpk_sink_params p{};
    p.out = addr(raw.data());
    p.lse = addr(lse.data());
    p.sinks = addr(kSinkLogit);
    p.rows = kSinkRows;
    p.num_heads = kSinkRows;
    p.v_dim = kSinkDim;
    p.out_dtype = out_dtype;
    emu::reset_errors();
    emu::launch(kernel, p, dim3(2), dim3(dcpk::kBlock_sink));
    bool ok = emu::errors() == 0;
    const double tol = 1e-6 + act_unit_roundoff(out_dtype);
    for (uint32_t r = 0; r < kSinkRows; r++) {
        const double l = kSinkLse[r], s = kSinkLogit[r];
        double want_lse, w;
        if (std::isnan(l) || std::isnan(s))
            want_lse = w = NAN;
        else if (l == -INFINITY)
            want_lse = s, w = 0;
        else if (s == -INFINITY)
            want_lse = l, w = 1;
        else
            want_lse = std::max(l, s) + std::log1p(std::exp(-std::fabs(l - s))), w = std::exp(l - want_lse);
        ok = ok && (std::isnan(want_lse) ? std::isnan(lse[r]) : std::fabs(lse[r] - want_lse) <= 1e-6 * (1 + std::fabs(want_lse)));
        for (uint32_t d = 0; d < kSinkDim; d++) {
            const double got = dcpk_load_as_f32(raw.data(), r * kSinkDim + d, out_dtype);
            const double want = std::isnan(w) ? NAN : l == -INFINITY ? 0.0 : o[r * kSinkDim + d] * w;
            ok = ok && (std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= tol * (1 + std::fabs(want)));
        }
    }
    return ok;
}

/* The sink's rules in every activation dtype; applied twice, or an empty row scaled by 0, fails them. */
void test_sink_rules(void **state)
{
    (void)state;
    for (uint32_t dt = DCPK_FP32; dt <= DCPK_FP16; dt++)
        if (!sink_rules_hold(dcpk_sink, dt))
            fail_msg("dcpk_sink breaks the sink's rules (out dtype %u)", dt);
    emu::quiet = true;
    const bool twice = sink_rules_hold(sink_mutant<dcpk::SinkMutant::twice>, DCPK_FP32);
    const bool scale_empty = sink_rules_hold(sink_mutant<dcpk::SinkMutant::scale_empty>, DCPK_FP32);
    emu::quiet = false;
    emu::reset_errors();
    if (twice || scale_empty)
        fail_msg("a mutant of dcpk_sink went unnoticed (%s)", twice ? "sink applied twice" : "empty row scaled by 0");
    print_message("dcpk_sink: rules hold in fp32/bf16/fp16; mutants 'applied twice' and 'empty row scaled' caught\n");
}

/*
 * The sink after each destination's merge of a whole group (both schemes), on
 * full layers, through the GPU entries (SIMT and tensor-core attention, merge,
 * lse_scale, reduce, sink): every row against the oracle's softmax with the sink.
 */
void test_sink_groups(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x51c9);
    const OnGpu gpu;
    const uint32_t groups[] = {1, 2, 4};
    float sinks[16];
    for (uint32_t n : groups) {
        attn_problem pb;
        gpu_problem(&pb, n, 1 + (n == 2), 8, 0, 60, &rng);
        for (uint32_t h = 0; h < pb.heads; h++)
            sinks[h] = h % 5 == 4 ? -INFINITY : (float)(test_rng_unit(&rng) * 8.0 - 2.0);
        pb.sinks = sinks;
        run_problem_tol(&pb, n, 1 + (n == 2), 1, 1e-4, &rng);
        problem_free(&pb);
    }
}

/* ---- the indexer ------------------------------------------------------------------ */

/* The sharded indexer of a whole group (scores, local top-k, global merge) against the oracle. */
void test_index_groups(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x1d39);
    const OnGpu gpu;
    const uint32_t groups[] = {1, 2, 3, 8};
    const int reps = test_quick() ? 1 : 3;
    for (uint32_t n : groups)
        for (int rep = 0; rep < reps; rep++) {
            const uint32_t il = 1u << test_rng_range(&rng, 0, 2);
            run_index_case(n, il, il * (uint32_t)test_rng_range(&rng, 1, 4), &rng);
        }
}

/** dcpk_index_score / dcpk_topk with a deliberate bug M (index.cuh, IndexMutant). */
template <dcpk::IndexMutant M>
void index_score_mutant(dcpk_index_score_params p)
{
    dcpk::index_score_items<M>(p);
}

template <dcpk::IndexMutant M>
void topk_mutant(dcpk_topk_params p)
{
    dcpk::topk_rows<M>(p);
}

/** One rank's index-key cache and queries (paged; random or tie-heavy values). */
struct IndexSetup {
    dcpk_index_score_params p{};
    std::vector<int32_t> table, seq_lens, q_start, lens;
    std::vector<unsigned char> cache, q;
    std::vector<float> w, scores;
};

void index_setup(IndexSetup &s, uint32_t dtype, uint32_t heads, uint32_t dim, test_rng *rng)
{
    const uint32_t n = 2, rank = 1, il = 2, bs = 8;
    s.seq_lens = {150, 37};
    s.q_start = {0, 2, 3};
    uint32_t pages = 0, max_blocks = 0;
    for (int32_t len : s.seq_lens) {
        const uint32_t b = (uint32_t)((dcpk_local_length((uint64_t)len, rank, n, il) + bs - 1) / bs);
        max_blocks = std::max(max_blocks, b);
        pages += b;
    }
    s.table.assign(2 * max_blocks, -1);
    for (uint32_t b = 0, next = pages; b < 2; b++)
        for (uint32_t i = 0; i * bs < dcpk_local_length((uint64_t)s.seq_lens[b], rank, n, il); i++)
            s.table[b * max_blocks + i] = (int32_t)--next;
    const uint32_t es = dcpk_dtype_size(dtype);
    s.cache.resize((size_t)pages * bs * dim * es);
    for (size_t i = 0; i < (size_t)pages * bs * dim; i++)
        dcpk_store_as(s.cache.data(), i, dtype, (float)test_rng_unit(rng) * 2.f);
    const uint32_t T = 3;
    s.q.resize((size_t)T * heads * dim * 2);
    for (size_t i = 0; i < (size_t)T * heads * dim; i++)
        dcpk_store_as(s.q.data(), i, DCPK_BF16, (float)test_rng_unit(rng));
    s.w.resize((size_t)T * heads);
    for (float &x : s.w)
        x = (float)test_rng_unit(rng);
    const uint64_t stride = dcpk_local_length(150, rank, n, il) + 5;
    s.scores.assign((size_t)T * stride, 12345.f);
    s.lens.assign(T, -7);
    dcpk_index_score_params &p = s.p;
    p.q = addr(s.q.data());
    p.weights = addr(s.w.data());
    p.k_cache = addr(s.cache.data());
    p.block_table = addr(s.table.data());
    p.seq_lens = addr(s.seq_lens.data());
    p.q_start = addr(s.q_start.data());
    p.scores = addr(s.scores.data());
    p.score_lens = addr(s.lens.data());
    p.score_stride = stride;
    p.batch = 2;
    p.num_q_tokens = T;
    p.num_index_heads = heads;
    p.index_dim = dim;
    p.block_size = bs;
    p.max_blocks = max_blocks;
    p.rank = rank;
    p.group_size = n;
    p.interleave = il;
    p.dtype = dtype;
    p.kv_scale = dtype == DCPK_FP8_E4M3 ? 0.75f : 1.f;
    p.q_dtype = DCPK_BF16;
}

/** One output array of a launch: where the GPU entry wrote it, where the CPU implementation did. */
struct Output {
    const void *gpu, *cpu;
    size_t bytes;
};

/**
 * Runs kernel (the entry or a mutant) with gpu on the emulator and the CPU
 * implementation of family id with cpu (the same params, outputs elsewhere):
 * true when the emulator saw no error and every output has the same bytes.
 */
template <class P>
bool same_bits_as_cpu(enum dcpk_kernel_id id, void (*kernel)(P), const P &gpu, const P &cpu, dim3 grid,
                      unsigned threads, std::initializer_list<Output> outs)
{
    std::vector<unsigned char> scratch(dcpk_kernels[id].scratch(&cpu) + 1);
    dcpk_kernels[id].cpu(&cpu, 0, dcpk_grid_items(dcpk_kernels[id].grid(&cpu)), scratch.data());
    emu::reset_errors();
    emu::launch(kernel, gpu, grid, dim3(threads));
    bool same = emu::errors() == 0;
    for (const Output &o : outs)
        same = same && std::memcmp(o.gpu, o.cpu, o.bytes) == 0;
    return same;
}

/** Runs kernel on s and the CPU implementation on a copy; true when scores and lengths agree bit for bit. */
bool index_matches_cpu(IndexSetup &s, void (*kernel)(dcpk_index_score_params))
{
    std::vector<float> scores = s.scores;
    std::vector<int32_t> lens = s.lens;
    dcpk_index_score_params cp = s.p;
    cp.scores = addr(scores.data());
    cp.score_lens = addr(lens.data());
    const dcpk_grid g = dcpk_index_score_grid(&s.p);
    return same_bits_as_cpu(DCPK_KERNEL_index_score, kernel, s.p, cp, dim3(g.x, g.y, g.z), dcpk::kBlock_index_score,
                            {{s.scores.data(), scores.data(), scores.size() * sizeof(float)},
                             {s.lens.data(), lens.data(), lens.size() * sizeof(int32_t)}});
}

/*
 * Scores bit for bit the CPU's (fp8, bf16 and fp32 keys; 64 heads of 128 as in
 * DeepSeek-V3.2, and shapes that take several head chunks or a partial quad), so a
 * GPU rank's indexer picks what the host backend picks; summing the heads in
 * another order, or dropping the ReLU, does not.
 */
void test_index_bits(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x1db1);
    struct Shape {
        uint32_t dtype, heads, dim;
    };
    const Shape shapes[] = {{DCPK_FP8_E4M3, 64, 128}, {DCPK_BF16, 5, 32}, {DCPK_FP32, 37, 16}};
    for (const Shape &sh : shapes) {
        IndexSetup s;
        index_setup(s, sh.dtype, sh.heads, sh.dim, &rng);
        if (!index_matches_cpu(s, dcpk_index_score))
            fail_msg("dcpk_index_score differs from the CPU's bits (dtype %u, %u heads of %u)", sh.dtype, sh.heads, sh.dim);
    }
    emu::quiet = true;
    IndexSetup a, b;
    index_setup(a, DCPK_BF16, 5, 32, &rng);
    index_setup(b, DCPK_BF16, 5, 32, &rng);
    const bool unordered = index_matches_cpu(a, index_score_mutant<dcpk::IndexMutant::sum_unordered>);
    const bool no_relu = index_matches_cpu(b, index_score_mutant<dcpk::IndexMutant::no_relu>);
    emu::quiet = false;
    emu::reset_errors();
    if (unordered || no_relu)
        fail_msg("a mutant of dcpk_index_score went unnoticed (%s)", unordered ? "heads summed out of order" : "no ReLU");
    print_message("dcpk_index_score: the CPU's bits; mutants 'heads out of order' and 'no ReLU' caught\n");
}

/** Candidates of a topk launch: [n_src][rows][n_entries] scores and positions (or implicit positions). */
struct TopkSetup {
    dcpk_topk_params p{};
    std::vector<float> scores, out_scores;
    std::vector<int32_t> positions, lens, out_positions;
};

/**
 * Random candidates with many ties (scores from a few values, -0 and +0 among them),
 * NaN, -inf and +inf scores, padding positions (-1) and, for the merge, duplicates
 * of no position (positions distinct per row, as the group's local top-ks are).
 */
void topk_setup(TopkSetup &s, uint32_t rows, uint32_t n_src, uint32_t n_entries, uint32_t k, bool local, test_rng *rng)
{
    const float values[] = {1.f, 2.f, -0.f, 0.f, 0.5f, -1.f, INFINITY, -INFINITY, NAN};
    const size_t total = (size_t)n_src * rows * n_entries;
    s.scores.resize(total);
    for (float &x : s.scores)
        x = test_rng_range(rng, 0, 2) ? values[test_rng_range(rng, 0, 8)] : (float)test_rng_unit(rng);
    if (!local) {
        s.positions.resize(total);
        for (uint32_t r = 0; r < rows; r++) { // distinct within a row: a shuffled range, with some padding
            std::vector<int32_t> pos((size_t)n_src * n_entries);
            for (size_t i = 0; i < pos.size(); i++)
                pos[i] = (int32_t)i * 3 + (int32_t)r;
            for (size_t i = pos.size(); i > 1; i--)
                std::swap(pos[i - 1], pos[test_rng_range(rng, 0, i - 1)]);
            for (uint32_t src = 0; src < n_src; src++)
                for (uint32_t e = 0; e < n_entries; e++)
                    s.positions[((size_t)src * rows + r) * n_entries + e] =
                        test_rng_range(rng, 0, 9) ? pos[(size_t)src * n_entries + e] : -1;
        }
    }
    s.lens.resize(rows);
    for (int32_t &l : s.lens)
        l = (int32_t)test_rng_range(rng, 0, n_entries + 2) - 1; // -1 (none) to past n_entries (clipped)
    s.out_scores.assign((size_t)rows * k, 12345.f);
    s.out_positions.assign((size_t)rows * k, 12345);
    dcpk_topk_params &p = s.p;
    p.scores = addr(s.scores.data());
    p.positions = local ? 0 : addr(s.positions.data());
    p.row_lens = addr(s.lens.data());
    p.out_scores = addr(s.out_scores.data());
    p.out_positions = addr(s.out_positions.data());
    p.src_stride = (uint64_t)rows * n_entries;
    p.row_stride = n_entries;
    p.rows = rows;
    p.n_src = n_src;
    p.n_entries = n_entries;
    p.k = k;
    p.rank = 2;
    p.group_size = 3;
    p.interleave = 4;
}

/** Runs kernel on s (half as many blocks as rows: grid-stride) and the CPU implementation on a copy. */
bool topk_matches_cpu(TopkSetup &s, void (*kernel)(dcpk_topk_params))
{
    std::vector<float> os = s.out_scores;
    std::vector<int32_t> op = s.out_positions;
    dcpk_topk_params cp = s.p;
    cp.out_scores = addr(os.data());
    cp.out_positions = addr(op.data());
    return same_bits_as_cpu(DCPK_KERNEL_topk, kernel, s.p, cp, dim3(std::max(1u, s.p.rows / 2)), dcpk::kBlock_topk,
                            {{s.out_scores.data(), os.data(), os.size() * sizeof(float)},
                             {s.out_positions.data(), op.data(), op.size() * sizeof(int32_t)}});
}

/*
 * The top-k bit for bit the CPU's (scores' bits, -0 included, and positions): the
 * local top-k over a rank's keys (implicit positions, row lengths), the merge of
 * gathered candidates, k below, at and above the candidates, and k above one
 * round of the kernel (kTopkRound: further rounds); ties broken by the higher
 * position, or a histogram read before the barrier, fail it.
 */
void test_topk_bits(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x70b1);
    struct Shape {
        uint32_t rows, n_src, n_entries, k;
        bool local;
    };
    const Shape shapes[] = {
        {3, 1, 700, 64, true},    // local top-k, ties and implicit positions
        {2, 4, 40, 40, false},    // the group merge: N sources of K candidates
        {2, 3, 5, 32, false},     // k above the candidates: padding
        {1, 1, 2600, 2300, true}, // two rounds of kTopkRound
    };
    for (const Shape &sh : shapes) {
        TopkSetup s;
        topk_setup(s, sh.rows, sh.n_src, sh.n_entries, sh.k, sh.local, &rng);
        if (!topk_matches_cpu(s, dcpk_topk))
            fail_msg("dcpk_topk differs from the CPU (rows %u, %u sources of %u, k %u, %s)", sh.rows, sh.n_src,
                     sh.n_entries, sh.k, sh.local ? "local" : "merge");
    }
    emu::quiet = true;
    TopkSetup a, b;
    topk_setup(a, 3, 1, 700, 64, true, &rng);
    topk_setup(b, 3, 1, 700, 64, true, &rng);
    const bool ties = topk_matches_cpu(a, topk_mutant<dcpk::IndexMutant::ties_high_first>);
    const bool barrier = topk_matches_cpu(b, topk_mutant<dcpk::IndexMutant::no_barrier>);
    emu::quiet = false;
    emu::reset_errors();
    if (ties || barrier)
        fail_msg("a mutant of dcpk_topk went unnoticed (%s)", ties ? "ties by the higher position" : "no barrier");
    print_message("dcpk_topk: the CPU's bits; mutants 'ties by the higher position' and 'no barrier' caught\n");
}

} // namespace

int main()
{
    emu::set_shared(dcpk_smem, sizeof dcpk_smem);
    emu::set_seed(test_seed());
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_window_groups),
        cmocka_unit_test(test_sparse_groups),
        cmocka_unit_test(test_window_tensor_cores),
        cmocka_unit_test(test_sparse_tensor_cores),
        cmocka_unit_test(test_sink_rules),
        cmocka_unit_test(test_sink_groups),
        cmocka_unit_test(test_index_bits),
        cmocka_unit_test(test_topk_bits),
        cmocka_unit_test(test_index_groups),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
