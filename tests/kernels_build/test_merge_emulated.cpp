/*
 * The LSE merge (dcpk_merge, one warp per row) on the host emulator (cuda_emu.h):
 * against the float64 oracle (tests/common/oracle.h) and, bit for bit, against
 * its CPU implementation (ptx/cpu/merge.c: the same arithmetic in the same order),
 * for 0 to a few hundred sources (one to several rounds of a warp's 32 lanes),
 * every edge case of dcp_kernels/merge.h and every activation dtype; with
 * mutants of the warp's reductions that must fail. Kept small: DCP_TEST_QUICK
 * runs fewer cases.
 */
#include "emu_kernels.h"
extern "C" {
#include "dcp_kernels/cpu.h"
#include "oracle.h"
}

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

} // namespace

int main()
{
    emu::set_shared(dcpk_smem, sizeof dcpk_smem);
    emu::set_seed(test_seed());
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_warps),
        cmocka_unit_test(test_merge_mutants),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
