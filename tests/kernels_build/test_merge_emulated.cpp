/*
 * The LSE merge (dcpk_merge, one warp per row) on the host emulator (cuda_emu.h):
 * against the float64 oracle (tests/common/oracle.h) and, bit for bit, against
 * its CPU implementation (ptx/cpu/merge.c: the same arithmetic in the same order),
 * for 0 to a few hundred sources (one to several rounds of a warp's 32 lanes),
 * every edge case of dcp_kernels/merge.h and every activation dtype; with
 * mutants of the warp's reductions that must fail.
 * The fused split-KV combine (dcpk_attn_params.split_counters: the last split of a
 * work item merges them) through the kernel tests' attention harness
 * (tests/kernels/attn_harness.h) on the SIMT and tensor-core entries: the bits of
 * the separate dcpk_merge launch, the oracle, counters back at 0, a second launch
 * (a graph replay) right; mutants without the fence before the count and without
 * the counter's reset. Kept small: DCP_TEST_QUICK runs fewer cases.
 */
#include "emu_kernels.h"
extern "C" {
#include "attn_harness.h"
#include "dcp_kernels/cpu.h"
#include "oracle.h"
}

#include <algorithm>
#include <string>
#include <vector>

namespace {

/** Unit roundoff of an activation dtype (one rounding of the output). */
double unit_roundoff(uint32_t dtype)
{
    switch (dtype) {
    case DCPK_BF16:
        return 1.0 / 256;
    case DCPK_FP16:
        return 1.0 / 2048;
    default:
        return 6e-8;
    }
}

/** One merge problem: sources [n][rows][v_dim] (src_dtype) and their LSEs, outputs in two chunks. */
struct MergeSetup {
    dcpk_merge_params p{};
    std::vector<unsigned char> src_o, out, out_cpu;
    std::vector<float> lse, out_lse, out_lse_cpu;
};

/** Random LSEs (within +-spread) with empty sources, a row of NaN, one of +inf, an empty row and a far larger LSE in a high lane. */
void merge_setup(MergeSetup &s, uint32_t rows, uint32_t n, uint32_t v_dim, uint32_t src_dtype, uint32_t out_dtype,
                 test_rng *rng, double spread = 20.0)
{
    const uint32_t per_chunk = (rows + 1) / 2, es = dcpk_dtype_size(src_dtype), eo = dcpk_dtype_size(out_dtype);
    const uint64_t chunk_stride = (uint64_t)per_chunk * v_dim + 5, lse_stride = per_chunk + 3;
    s.src_o.assign((size_t)n * rows * v_dim * es, 0);
    s.lse.assign((size_t)n * rows, 0.f);
    for (uint32_t src = 0; src < n; src++)
        for (uint32_t r = 0; r < rows; r++) {
            float l = (float)(spread * test_rng_unit(rng));
            if (test_rng_range(rng, 0, 4) == 0)
                l = -INFINITY; // empty: its o holds NaN, which must not leak
            if (r == 1 && src == n / 2)
                l = NAN;
            if (r == 2 && src == n - 1)
                l = INFINITY;
            if (r == 3)
                l = -INFINITY;
            if (r == 4 && src == n - 1 - n / 3)
                l = 100.f; // exp(100 - m) overflows with a max that missed it
            s.lse[(size_t)src * rows + r] = l;
            for (uint32_t d = 0; d < v_dim; d++) {
                const size_t i = ((size_t)src * rows + r) * v_dim + d;
                dcpk_store_as(s.src_o.data(), i, src_dtype,
                              l == -INFINITY ? NAN : (float)(2.0 * test_rng_unit(rng)));
            }
        }
    if (rows > 5 && n > 0 && v_dim > 1) // a NaN in a non-empty source at weight ~0 still shows
        for (uint32_t src = 0; src < n; src++)
            if (s.lse[(size_t)src * rows + 5] != -INFINITY) {
                s.lse[(size_t)src * rows + 5] = -150.f;
                dcpk_store_as(s.src_o.data(), ((size_t)src * rows + 5) * v_dim + 1, src_dtype, NAN);
                break;
            }
    s.out.assign((size_t)2 * chunk_stride * eo, 0x7b);
    s.out_cpu = s.out;
    s.out_lse.assign(2 * lse_stride, 7.f);
    s.out_lse_cpu = s.out_lse;
    s.p.src_o = addr(s.src_o.data());
    s.p.src_lse = addr(s.lse.data());
    s.p.out = addr(s.out.data());
    s.p.out_lse = addr(s.out_lse.data());
    s.p.src_stride_o = (uint64_t)rows * v_dim;
    s.p.src_stride_lse = rows;
    s.p.out_chunk_stride = chunk_stride;
    s.p.out_lse_chunk_stride = lse_stride;
    s.p.n_src = n;
    s.p.rows = rows;
    s.p.rows_per_chunk = per_chunk;
    s.p.v_dim = v_dim;
    s.p.src_dtype = src_dtype;
    s.p.out_dtype = out_dtype;
}

/** Runs kernel on the emulator with `blocks` blocks (0: the grid of params.h) and the CPU on a copy. */
bool merge_matches_cpu(MergeSetup &s, void (*kernel)(dcpk_merge_params), unsigned blocks)
{
    dcpk_merge_params cp = s.p;
    cp.out = addr(s.out_cpu.data());
    cp.out_lse = addr(s.out_lse_cpu.data());
    std::vector<unsigned char> scratch(dcpk_merge_scratch_bytes(&cp));
    dcpk_merge_cpu(&cp, 0, dcpk_grid_items(dcpk_merge_grid(&cp)), scratch.data());
    const unsigned grid = blocks ? blocks : (unsigned)dcpk_grid_items(dcpk_merge_grid(&s.p));
    emu::reset_errors();
    emu::launch(kernel, s.p, dim3(grid ? grid : 1), dim3(dcpk::kBlock_merge));
    return emu::errors() == 0 && s.out == s.out_cpu &&
           std::memcmp(s.out_lse.data(), s.out_lse_cpu.data(), s.out_lse.size() * sizeof(float)) == 0;
}

/** The emulator's output of s against oracle_merge row by row; a message for the first difference, or "". */
std::string merge_vs_oracle(const MergeSetup &s)
{
    const dcpk_merge_params &p = s.p;
    const double tol = unit_roundoff(p.out_dtype) + 1e-6 * (p.n_src + 4);
    std::vector<double> o((size_t)p.n_src * p.v_dim), lse(p.n_src), want(p.v_dim);
    char msg[256];
    for (uint32_t r = 0; r < p.rows; r++) {
        for (uint32_t src = 0; src < p.n_src; src++) {
            lse[src] = s.lse[(size_t)src * p.rows + r];
            for (uint32_t d = 0; d < p.v_dim; d++)
                o[(size_t)src * p.v_dim + d] =
                    dcpk_load_as_f32(s.src_o.data(), ((size_t)src * p.rows + r) * p.v_dim + d, p.src_dtype);
        }
        double want_lse = 0;
        oracle_merge(p.n_src, p.v_dim, o.data(), lse.data(), want.data(), &want_lse);
        const uint64_t c = r / p.rows_per_chunk, i = r % p.rows_per_chunk;
        const float got_lse = s.out_lse[c * p.out_lse_chunk_stride + i];
        const bool lse_ok = std::isnan(want_lse) ? std::isnan(got_lse)
                          : std::isinf(want_lse) ? got_lse == want_lse
                                                 : std::fabs(got_lse - want_lse) <= 1e-5 * (1 + std::fabs(want_lse));
        if (!lse_ok) {
            std::snprintf(msg, sizeof msg, "row %u: LSE %g, want %g", r, got_lse, want_lse);
            return msg;
        }
        for (uint32_t d = 0; d < p.v_dim; d++) {
            const double got = dcpk_load_as_f32(s.out.data(), c * p.out_chunk_stride + i * p.v_dim + d, p.out_dtype);
            const bool ok = std::isnan(want[d]) ? std::isnan(got) : std::fabs(got - want[d]) <= tol * (1 + std::fabs(want[d]));
            if (!ok) {
                std::snprintf(msg, sizeof msg, "row %u [%u]: %g, want %g", r, d, got, want[d]);
                return msg;
            }
        }
    }
    return "";
}

struct MergeShape {
    uint32_t rows, n, v_dim, src_dtype, out_dtype;
};

void test_merge_warps(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed());
    const MergeShape shapes[] = {
        {6, 0, 40, DCPK_FP32, DCPK_FP32},      // no source: 0 and -inf
        {7, 1, 33, DCPK_FP32, DCPK_FP32},      // one source, a column past the first 32
        {9, 3, 300, DCPK_FP32, DCPK_BF16},     // the split-KV combine into a bf16 wire
        {6, 31, 64, DCPK_BF16, DCPK_FP32},     // a2a: one round of the lanes, one full column pass
        {6, 32, 129, DCPK_FP32, DCPK_FP16},    // the lanes exactly; one column past a pass
        {6, 33, 512, DCPK_FP32, DCPK_FP32},    // a second round of one source; MLA's v_dim
        {6, 70, 64, DCPK_FP16, DCPK_BF16},     // three rounds
        {6, 300, 20, DCPK_FP32, DCPK_FP32},    // more sources than the old kernel's batch (one rounding still)
    };
    const size_t count = test_quick() ? 5 : sizeof shapes / sizeof shapes[0];
    for (size_t k = 0; k < count; k++) {
        const MergeShape &sh = shapes[k];
        for (unsigned blocks : {0u, 1u}) { // params.h's grid, and one block striding over every row
            MergeSetup s;
            merge_setup(s, sh.rows, sh.n, sh.v_dim, sh.src_dtype, sh.out_dtype, &rng);
            if (!merge_matches_cpu(s, dcpk_merge, blocks))
                fail_msg("dcpk_merge differs from the CPU's bits (%u rows, %u sources, v_dim %u, %u blocks)%s%s", sh.rows,
                         sh.n, sh.v_dim, blocks, emu::errors() ? ": " : "", emu::errors() ? emu::first_error() : "");
            const std::string bad = merge_vs_oracle(s);
            if (!bad.empty())
                fail_msg("dcpk_merge (%u sources, v_dim %u) against the oracle: %s", sh.n, sh.v_dim, bad.c_str());
        }
    }
}

/** dcpk_merge with a deliberate bug M (rows.cuh, MergeMutant). */
template <dcpk::MergeMutant M>
void merge_mutant(dcpk_merge_params p)
{
    dcpk::merge_rows<M>(p);
}

/** True when the mutant differs from the CPU's bits or from the oracle on some shape. */
template <dcpk::MergeMutant M>
bool merge_caught(test_rng *rng)
{
    // Close LSEs: every exponential counts in the sum, so its order shows in the bits.
    const MergeShape shapes[] = {{16, 40, 24, DCPK_FP32, DCPK_FP32}, {6, 5, 24, DCPK_FP32, DCPK_FP32}};
    bool caught = false;
    for (const MergeShape &sh : shapes) {
        MergeSetup s;
        merge_setup(s, sh.rows, sh.n, sh.v_dim, sh.src_dtype, sh.out_dtype, rng, 1.0);
        caught = caught || !merge_matches_cpu(s, merge_mutant<M>, 0) || !merge_vs_oracle(s).empty();
    }
    return caught;
}

void test_merge_mutants(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() + 1);
    emu::quiet = true;
    const bool none = merge_caught<dcpk::MergeMutant::none>(&rng);
    const bool short_max = merge_caught<dcpk::MergeMutant::short_max>(&rng);
    const bool tree_sum = merge_caught<dcpk::MergeMutant::tree_sum>(&rng);
    emu::quiet = false;
    emu::reset_errors();
    if (none)
        fail_msg("the unmutated merge fails the mutant harness");
    if (!short_max)
        fail_msg("mutant 'max without the xor-16 step' went unnoticed");
    if (!tree_sum)
        fail_msg("mutant 'exponentials summed as a butterfly' went unnoticed");
    print_message("dcpk_merge: mutants 'max without the xor-16 step' and 'butterfly sum' caught\n");
}

/* ---- the fused split-KV combine ------------------------------------------------- */

/** The attention kernel the harness's launches take (null: the entry dcpk_attn_variant_find picks). */
AttnKernel fused_override;

/** harness_launch: attention (the workspace watched), kv_append and merge on the emulator. */
int emu_run(enum dcpk_kernel_id id, const void *params)
{
    if (id == DCPK_KERNEL_kv_append) {
        const auto &p = *static_cast<const dcpk_kv_append_params *>(params);
        const dcpk_grid g = dcpk_kv_append_grid(&p);
        if (dcpk_grid_items(g))
            launch(dcpk_kv_append, p, dim3((unsigned)std::min<uint64_t>(dcpk_grid_items(g), 3)),
                   dim3(dcpk::kBlock_kv_append));
        return 1;
    }
    if (id == DCPK_KERNEL_merge) {
        const auto &p = *static_cast<const dcpk_merge_params *>(params);
        launch(dcpk_merge, p, dim3((unsigned)std::max<uint64_t>(1, dcpk_grid_items(dcpk_merge_grid(&p)))),
               dim3(dcpk::kBlock_merge));
        return 1;
    }
    if (id != DCPK_KERNEL_attn)
        return 0;
    dcpk_attn_params p = *static_cast<const dcpk_attn_params *>(params);
    const dcpk_attn_variant *v = dcpk_attn_variant_find(p.qk_dim, p.v_dim, p.v_cache == p.k_cache, p.dtype);
    if (!v)
        fail_msg("no GPU attention entry for qk %u v %u dtype %u", p.qk_dim, p.v_dim, p.dtype);
    const uint32_t per_kv = p.num_heads / p.num_kv_heads;
    if (p.head_tile == 0 || p.head_tile > per_kv)
        p.head_tile = per_kv;
    p.precision = DCPK_PRECISION_EXACT;
    const dcpk_grid g = dcpk_attn_grid(&p);
    if (p.num_splits > 1) { // the partials other blocks read after the count
        emu::watch(reinterpret_cast<void *>(p.ws_o), (p.num_splits - 1) * p.ws_split_stride_o * 4 +
                                                         p.ws_split_stride_o * 4);
        emu::watch(reinterpret_cast<void *>(p.ws_lse), p.num_splits * p.ws_split_stride_lse * 4);
    }
    emu::reset_errors();
    emu::launch(fused_override ? fused_override : attn_entry(v->entry), p, dim3(g.x, g.y, g.z), dim3(v->threads));
    emu::unwatch_all();
    if (emu::errors())
        harness_fail("emulator: %u errors, the first: %s", emu::errors(), emu::first_error());
    return 1;
}

struct FusedCase {
    const char *what;
    uint32_t heads, kv_heads, qk, v, dtype, splits, chunks;
    int mla;
};

/** A problem of c's shape: two sequences, 1 and 3 query tokens. */
void fused_problem(attn_problem &pb, const FusedCase &c, test_rng *rng)
{
    std::memset(&pb, 0, sizeof pb);
    pb.batch = 2;
    pb.seq_len[0] = 45;
    pb.seq_len[1] = 70;
    pb.q_len[0] = 1;
    pb.q_len[1] = 3;
    pb.heads = c.heads;
    pb.kv_heads = c.kv_heads;
    pb.qk_dim = c.qk;
    pb.v_dim = c.v;
    pb.mla = c.mla;
    pb.dtype = c.dtype;
    pb.block_size = 8;
    pb.scale = (float)(1.0 / std::sqrt((double)c.qk));
    pb.kv_scale = 1.0f;
    pb.q_dtype = DCPK_FP32;
    pb.src_dtype = DCPK_FP32;
    pb.out_dtype = c.dtype == DCPK_FP32 ? DCPK_FP32 : DCPK_BF16;
    problem_fill(&pb, rng, 1.0f);
}

/** Output and LSE of one run of pb (fused or through dcpk_merge) with the rng at seed. */
struct FusedResult {
    std::vector<float> out, lse;
};

FusedResult fused_run(const attn_problem &pb, const FusedCase &c, int fused, uint64_t seed)
{
    const uint64_t rows = (uint64_t)problem_tokens(&pb) * (pb.heads / c.chunks);
    FusedResult r;
    r.out.assign((rows * pb.v_dim + 3) * c.chunks, -7.f);
    r.lse.assign((rows + 2) * c.chunks, -7.f);
    attn_output dst{r.out.data(), r.lse.data(), rows * pb.v_dim + 3, rows + 2};
    rank_run run{};
    run.group_size = 1;
    run.interleave = 1;
    run.num_splits = c.splits;
    run.head_tile = 2;
    run.chunks = c.chunks;
    run.fused = fused;
    test_rng rng;
    test_rng_seed(&rng, seed);
    rank_attention(&pb, &run, &rng, &dst);
    return r;
}

const FusedCase kFusedCases[] = {
    {"gqa d64 fp32 (SIMT)", 8, 2, 64, 64, DCPK_FP32, 3, 2, 0},
    {"gqa d128 bf16 (tensor cores)", 4, 1, 128, 128, DCPK_BF16, 4, 1, 0},
    {"mla bf16 (tensor cores)", 4, 1, 576, 512, DCPK_BF16, 2, 2, 1},
};

/** Whether fused and separate runs give the same bits, on the CPU and on the emulator, and the oracle's result. */
void test_fused_combine(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() + 2);
    const size_t count = test_quick() ? 2 : sizeof kFusedCases / sizeof kFusedCases[0];
    for (size_t k = 0; k < count; k++) {
        const FusedCase &c = kFusedCases[k];
        attn_problem pb;
        fused_problem(pb, c, &rng);
        const uint64_t seed = test_rng_next(&rng);
        for (int gpu = 0; gpu < 2; gpu++) {
            harness_launch = gpu ? emu_run : nullptr;
            const FusedResult a = fused_run(pb, c, 0, seed), b = fused_run(pb, c, 1, seed);
            harness_launch = nullptr;
            if (std::memcmp(a.out.data(), b.out.data(), a.out.size() * 4) != 0 ||
                std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) != 0)
                fail_msg("%s on the %s: the fused combine differs from dcpk_merge's bits", c.what,
                         gpu ? "emulated GPU" : "CPU");
            const uint64_t rows = (uint64_t)problem_tokens(&pb) * (pb.heads / c.chunks);
            const attn_output res{const_cast<float *>(b.out.data()), const_cast<float *>(b.lse.data()),
                                  rows * pb.v_dim + 3, rows + 2};
            check_against_oracle(&pb, 0, pb.heads, pb.heads / c.chunks, &res,
                                 pb.out_dtype == DCPK_FP32 ? 1e-5 : 1e-2, c.what);
        }
        problem_free(&pb);
    }
}

/** The gqa_d64 fp32 SIMT entry with a fused-combine bug M (attn.cuh, CombineMutant). */
template <dcpk::CombineMutant M>
void combine_mutant(dcpk_attn_params p)
{
    dcpk::attn_kernel<dcpk::AttnCfg<64, 64, 0, DCPK_FP32, 128, 16, 64>, dcpk::KeysMutant::none, M>(p);
}

/** Failed harness checks (emulator errors, counters, oracle) of a fused run through kernel. */
int fused_failures(AttnKernel kernel, test_rng *rng)
{
    const FusedCase &c = kFusedCases[0];
    attn_problem pb;
    fused_problem(pb, c, rng);
    harness_soft_failures = 0;
    harness_launch = emu_run;
    fused_override = kernel;
    const FusedResult b = fused_run(pb, c, 1, test_rng_next(rng));
    const uint64_t rows = (uint64_t)problem_tokens(&pb) * (pb.heads / c.chunks);
    const attn_output res{const_cast<float *>(b.out.data()), const_cast<float *>(b.lse.data()), rows * pb.v_dim + 3,
                          rows + 2};
    check_against_oracle(&pb, 0, pb.heads, pb.heads / c.chunks, &res, 1e-5, c.what);
    const int failures = harness_soft_failures;
    harness_soft_failures = -1;
    harness_launch = nullptr;
    fused_override = nullptr;
    problem_free(&pb);
    return failures;
}

void test_fused_mutants(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() + 3);
    emu::quiet = true;
    const int none = fused_failures(combine_mutant<dcpk::CombineMutant::none>, &rng);
    const int no_fence = fused_failures(combine_mutant<dcpk::CombineMutant::no_fence>, &rng);
    const int no_reset = fused_failures(combine_mutant<dcpk::CombineMutant::no_reset>, &rng);
    emu::quiet = false;
    emu::reset_errors();
    if (none)
        fail_msg("the unmutated fused combine fails the mutant harness (%d failures)", none);
    if (!no_fence)
        fail_msg("mutant 'no __threadfence before the count' went unnoticed");
    if (!no_reset)
        fail_msg("mutant 'counter not reset' went unnoticed");
    print_message("fused combine: mutants 'no fence before the count' (%d failures) and 'counter not reset' (%d) "
                  "caught\n", no_fence, no_reset);
}

} // namespace

int main()
{
    emu::set_shared(dcpk_smem, sizeof dcpk_smem);
    emu::set_seed(test_seed());
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_warps),
        cmocka_unit_test(test_merge_mutants),
        cmocka_unit_test(test_fused_combine),
        cmocka_unit_test(test_fused_mutants),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
