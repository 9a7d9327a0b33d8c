/*
 * The CUDA kernels of ptx/kernels, compiled for the host and run through
 * cuda_emu.h (blocks in order, threads as fibers with exact barriers and warp
 * shuffles), against float64 references written from params.h alone. No GPU: this
 * checks the index math, tiling, masking, split and merge logic and the dtype
 * handling of the very source that nvcc compiles; speed and the hardware
 * conversion instructions are left to the GPU check.
 */
#include "emu_kernels.h"

#include <algorithm>
#include <string>

namespace {

/* ---- host-side element codec (CUDA's host conversions) -------------------- */

uint32_t esize(uint32_t dtype)
{
    return dcpk_dtype_size(dtype);
}

/** Value of a stored element (fp8 unscaled). */
double decode(const unsigned char *base, uint64_t idx, uint32_t dtype)
{
    switch (dtype) {
    case DCPK_BF16: {
        __nv_bfloat16 h;
        std::memcpy(&h, base + 2 * idx, 2);
        return __bfloat162float(h);
    }
    case DCPK_FP16: {
        __half h;
        std::memcpy(&h, base + 2 * idx, 2);
        return __half2float(h);
    }
    case DCPK_FP8_E4M3: {
        __nv_fp8_e4m3 f;
        std::memcpy(&f, base + idx, 1);
        return (float)f;
    }
    default: {
        float f;
        std::memcpy(&f, base + 4 * idx, 4);
        return f;
    }
    }
}

/** Writes a NaN (a value no visible key may have) as element idx. */
void poison(unsigned char *base, uint64_t idx, uint32_t dtype)
{
    static const unsigned char nan_fp32[4] = {0, 0, 0xc0, 0x7f}, nan_16[2] = {0x00, 0x7e}, nan_bf16[2] = {0xc0, 0x7f};
    switch (dtype) {
    case DCPK_BF16:
        std::memcpy(base + 2 * idx, nan_bf16, 2);
        break;
    case DCPK_FP16:
        std::memcpy(base + 2 * idx, nan_16, 2);
        break;
    case DCPK_FP8_E4M3:
        base[idx] = 0x7f;
        break;
    default:
        std::memcpy(base + 4 * idx, nan_fp32, 4);
        break;
    }
}

bool close_to(double got, double want, double tol)
{
    if (std::isinf(want))
        return std::isinf(got) && (got < 0) == (want < 0);
    return std::fabs(got - want) <= tol * (1.0 + std::fabs(want));
}

/** close_to, where a NaN wanted must be a NaN got. */
bool same_or_nan(double got, double want, double tol)
{
    return std::isnan(want) ? std::isnan(got) : close_to(got, want, tol);
}

/* ---- attention ------------------------------------------------------------- */

/* Fast tensor-core precision (bf16/fp16 Q and P): bounds of the max element error
 * (relative to 1 + |want|) and of the relative L2 error of the outputs. */
constexpr double kFastElemBf16 = 1e-2, kFastL2Bf16 = 5e-3;
constexpr double kFastElemFp16 = 1e-3, kFastL2Fp16 = 1e-3;

struct AttnCase {
    const char *layout; // "gqa_d64" ... "mla", "mla_tc", "gqa_d128_tc" ...
    uint32_t dtype;
    std::vector<int> seq_lens, q_tokens;
    uint32_t num_kv_heads, heads_per_kv, chunks;
    uint32_t rank, group_size, interleave, block_size, head_tile, num_splits;
    uint32_t precision = DCPK_PRECISION_FAST; // tensor-core entries only
    uint32_t q_dtype = DCPK_FP32, out_dtype = DCPK_FP32; // activation dtypes of q and out
};

struct AttnSetup {
    const dcpk_attn_variant *v;
    dcpk_attn_params p{};
    std::vector<int32_t> block_table, seq_lens, q_start;
    std::vector<unsigned char> k_cache, v_cache;
    std::vector<float> q, out, lse, ws_o, ws_lse; // q: the values (rounded to q_dtype); out: decoded after the run
    std::vector<unsigned char> q_raw, out_raw;    // q and out as the kernels see them when not fp32
    std::vector<uint64_t> local_len;
};

/** x rounded to an activation dtype (the host codec of dcp_kernels/convert.h). */
float act_round(uint32_t dtype, float x)
{
    unsigned char bits[4];
    dcpk_store_as(bits, 0, dtype, x);
    return dcpk_load_as_f32(bits, 0, dtype);
}

/** Unit roundoff of an activation dtype: the relative error of one rounding of the output. */
double act_unit_roundoff(uint32_t dtype)
{
    return dtype == DCPK_BF16 ? 0x1p-8 : dtype == DCPK_FP16 ? 0x1p-11 : 0.0;
}

/** Decodes the kernels' out_dtype output into s.out (a no-op for fp32, written in place). */
void collect_out(AttnSetup &s)
{
    if (s.p.out_dtype == DCPK_FP32)
        return;
    for (size_t i = 0; i < s.out.size(); i++)
        s.out[i] = dcpk_load_as_f32(s.out_raw.data(), i, s.p.out_dtype);
}

/** The entry dcpk_attn__<layout>_<dtype name>, or null. */
const dcpk_attn_variant *attn_variant(const char *layout, uint32_t dtype)
{
    static const char *const names[] = {"fp32", "bf16", "fp16", "fp8_e4m3"};
    const std::string want = std::string("dcpk_attn__") + layout + "_" + names[dtype];
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++)
        if (want == dcpk_attn_variant_at(i)->entry)
            return dcpk_attn_variant_at(i);
    return nullptr;
}

/** The layout part of an entry name ("dcpk_attn__mla_tc_bf16" -> "mla_tc"). */
std::string attn_layout(const dcpk_attn_variant *v)
{
    std::string name = v->entry + std::strlen("dcpk_attn__");
    static const char *const names[] = {"fp32", "bf16", "fp16", "fp8_e4m3"};
    return name.substr(0, name.size() - std::strlen(names[v->dtype]) - 1);
}

/** Builds caches (poisoned wherever no key lives), queries and outputs of a case. */
void setup_attn(const AttnCase &c, AttnSetup &s, test_rng *rng)
{
    const bool mla = std::string(c.layout).rfind("mla", 0) == 0;
    const uint32_t qk = mla ? 576 : (uint32_t)std::stoul(c.layout + 5), vd = mla ? 512 : qk;
    s.v = attn_variant(c.layout, c.dtype);
    assert_non_null(s.v);
    const uint32_t batch = (uint32_t)c.seq_lens.size(), num_heads = c.num_kv_heads * c.heads_per_kv;
    const uint32_t hpc = num_heads / c.chunks, es = esize(c.dtype);
    s.seq_lens.assign(c.seq_lens.begin(), c.seq_lens.end());
    s.q_start.assign(1, 0);
    for (int n : c.q_tokens)
        s.q_start.push_back(s.q_start.back() + n);
    const uint32_t T = (uint32_t)s.q_start.back();

    // Pages: each sequence gets the pages its local length needs, shuffled.
    uint32_t max_blocks = 1, total_pages = 0;
    for (uint32_t b = 0; b < batch; b++) {
        s.local_len.push_back(dcpk_local_length((uint64_t)c.seq_lens[b], c.rank, c.group_size, c.interleave));
        const uint32_t pages = (uint32_t)((s.local_len[b] + c.block_size - 1) / c.block_size);
        max_blocks = std::max(max_blocks, pages + 1);
        total_pages += pages;
    }
    total_pages += 2; // spare pages nobody owns
    std::vector<int32_t> perm(total_pages);
    for (uint32_t i = 0; i < total_pages; i++)
        perm[i] = (int32_t)i;
    for (uint32_t i = total_pages; i > 1; i--)
        std::swap(perm[i - 1], perm[test_rng_range(rng, 0, i - 1)]);
    s.block_table.assign((size_t)batch * max_blocks, 0x7fffffff); // unused entries must never be read
    uint32_t next = 0;
    for (uint32_t b = 0; b < batch; b++)
        for (uint64_t i = 0; i * c.block_size < s.local_len[b]; i++)
            s.block_table[b * max_blocks + i] = perm[next++];

    // Caches: every element NaN, then random values where keys live.
    const uint64_t page_elems_k = (uint64_t)c.num_kv_heads * c.block_size * qk;
    const uint64_t page_elems_v = (uint64_t)c.num_kv_heads * c.block_size * vd;
    s.k_cache.assign(total_pages * page_elems_k * es, 0);
    s.v_cache.assign(mla ? 0 : total_pages * page_elems_v * es, 0);
    for (uint64_t i = 0; i < total_pages * page_elems_k; i++)
        poison(s.k_cache.data(), i, c.dtype);
    for (uint64_t i = 0; !mla && i < total_pages * page_elems_v; i++)
        poison(s.v_cache.data(), i, c.dtype);
    for (uint32_t b = 0; b < batch; b++)
        for (uint64_t l = 0; l < s.local_len[b]; l++) {
            const uint64_t page = (uint64_t)s.block_table[b * max_blocks + l / c.block_size];
            for (uint32_t h = 0; h < c.num_kv_heads; h++) {
                const uint64_t row = (page * c.num_kv_heads + h) * c.block_size + l % c.block_size;
                for (uint32_t d = 0; d < qk; d++)
                    dcpk::store_as(addr(s.k_cache.data()), row * qk + d, c.dtype, (float)(2 * test_rng_unit(rng)));
                for (uint32_t d = 0; !mla && d < vd; d++)
                    dcpk::store_as(addr(s.v_cache.data()), row * vd + d, c.dtype, (float)(2 * test_rng_unit(rng)));
            }
        }

    // Queries, outputs and workspace with padded chunk strides.
    const uint64_t rows_per_chunk = (uint64_t)T * hpc;
    dcpk_attn_params &p = s.p;
    p.q_chunk_stride = rows_per_chunk * qk + 16;
    p.out_chunk_stride = rows_per_chunk * vd + 8;
    p.lse_chunk_stride = rows_per_chunk + 3;
    p.ws_split_stride_o = c.chunks * rows_per_chunk * vd + 4;
    p.ws_split_stride_lse = c.chunks * rows_per_chunk + 2;
    s.q.resize(c.chunks * p.q_chunk_stride);
    for (float &x : s.q)
        x = act_round(c.q_dtype, (float)test_rng_unit(rng));
    s.out.assign(c.chunks * p.out_chunk_stride, 12345.f);
    if (c.q_dtype != DCPK_FP32) {
        s.q_raw.resize(s.q.size() * esize(c.q_dtype));
        for (size_t i = 0; i < s.q.size(); i++)
            dcpk_store_as(s.q_raw.data(), i, c.q_dtype, s.q[i]);
    }
    if (c.out_dtype != DCPK_FP32) {
        s.out_raw.resize(s.out.size() * esize(c.out_dtype));
        for (size_t i = 0; i < s.out.size(); i++)
            dcpk_store_as(s.out_raw.data(), i, c.out_dtype, 12345.f);
    }
    s.lse.assign(c.chunks * p.lse_chunk_stride, 12345.f);
    if (c.num_splits > 1) {
        s.ws_o.assign(c.num_splits * p.ws_split_stride_o, 12345.f);
        s.ws_lse.assign(c.num_splits * p.ws_split_stride_lse, 12345.f);
    }

    p.q = c.q_dtype == DCPK_FP32 ? addr(s.q.data()) : addr(s.q_raw.data());
    p.q_dtype = c.q_dtype;
    p.k_cache = addr(s.k_cache.data());
    p.v_cache = mla ? p.k_cache : addr(s.v_cache.data());
    p.block_table = addr(s.block_table.data());
    p.seq_lens = addr(s.seq_lens.data());
    p.q_start = addr(s.q_start.data());
    p.out = c.out_dtype == DCPK_FP32 ? addr(s.out.data()) : addr(s.out_raw.data());
    p.out_dtype = c.out_dtype;
    p.lse = addr(s.lse.data());
    p.ws_o = addr(s.ws_o.data());
    p.ws_lse = addr(s.ws_lse.data());
    p.batch = batch;
    p.num_q_tokens = T;
    p.num_heads = num_heads;
    p.heads_per_chunk = hpc;
    p.num_kv_heads = c.num_kv_heads;
    p.head_tile = c.head_tile;
    p.qk_dim = qk;
    p.v_dim = vd;
    p.v_row_stride = mla ? qk : vd;
    p.block_size = c.block_size;
    p.max_blocks = max_blocks;
    p.rank = c.rank;
    p.group_size = c.group_size;
    p.interleave = c.interleave;
    p.num_splits = c.num_splits;
    p.dtype = c.dtype;
    p.scale = (float)(1.0 / std::sqrt((double)qk));
    p.kv_scale = c.dtype == DCPK_FP8_E4M3 ? 0.5f : 1.f;
    p.precision = c.precision;
}

/**
 * Runs the case's attention (kernel, or the entry of the case) and the split merge
 * through the emulator. Returns the attention launch's emulator errors when
 * tolerated (a mutant), else fails the test on any.
 */
unsigned run_attn_launches(const AttnCase &c, AttnSetup &s, AttnKernel kernel, std::string *tolerate_errors)
{
    const dcpk_attn_params &p = s.p;
    const uint32_t head_tiles = (c.heads_per_kv + c.head_tile - 1) / c.head_tile;
    const dim3 grid(c.num_splits, c.num_kv_heads * head_tiles, p.batch);
    unsigned errors = 0;
    if (tolerate_errors) {
        emu::reset_errors();
        emu::launch(kernel ? kernel : attn_entry(s.v->entry), p, grid, dim3(s.v->threads));
        errors = emu::errors();
        *tolerate_errors = errors ? emu::first_error() : "-";
    } else {
        launch(kernel ? kernel : attn_entry(s.v->entry), p, grid, dim3(s.v->threads));
    }
    if (c.num_splits == 1)
        return errors;
    dcpk_merge_params m{};
    m.src_o = p.ws_o;
    m.src_lse = p.ws_lse;
    m.out = p.out;
    m.out_lse = p.lse;
    m.src_stride_o = p.ws_split_stride_o;
    m.src_stride_lse = p.ws_split_stride_lse;
    m.out_chunk_stride = p.out_chunk_stride;
    m.out_lse_chunk_stride = p.lse_chunk_stride;
    m.n_src = c.num_splits;
    m.rows_per_chunk = p.num_q_tokens * p.heads_per_chunk;
    m.rows = c.chunks * m.rows_per_chunk;
    m.v_dim = p.v_dim;
    m.src_dtype = DCPK_FP32;
    m.out_dtype = p.out_dtype;
    launch(dcpk_merge, m, dim3(m.rows), dim3(dcpk::kBlock_merge));
    return errors;
}

unsigned run_attn(const AttnCase &c, AttnSetup &s, AttnKernel kernel = nullptr, std::string *tolerate_errors = nullptr)
{
    const unsigned errors = run_attn_launches(c, s, kernel, tolerate_errors);
    collect_out(s);
    return errors;
}

/**
 * float64 attention of one query row (b, t, g) from params.h's definitions: a row
 * whose result is not finite is NaN in its LSE and every element.
 */
void reference_row(const AttnSetup &s, uint32_t b, uint32_t t, uint32_t g, std::vector<double> &o, double &lse)
{
    const dcpk_attn_params &p = s.p;
    const uint32_t hpk = p.num_heads / p.num_kv_heads, kvh = g / hpk;
    const uint32_t c = g / p.heads_per_chunk, h = g % p.heads_per_chunk;
    const float *q = s.q.data() + c * p.q_chunk_stride + ((uint64_t)t * p.heads_per_chunk + h) * p.qk_dim;
    const int64_t nq = s.q_start[b + 1] - s.q_start[b];
    const int64_t pos = s.seq_lens[b] - nq + (t - s.q_start[b]);
    const double kscale = p.dtype == DCPK_FP8_E4M3 ? p.kv_scale : 1.0;
    std::vector<double> scores;
    std::vector<uint64_t> rows;
    for (uint64_t l = 0; l < s.local_len[b]; l++) {
        if ((int64_t)dcpk_global_position(l, p.rank, p.group_size, p.interleave) > pos)
            continue;
        const uint64_t page = (uint64_t)s.block_table[b * p.max_blocks + l / p.block_size];
        const uint64_t row = (page * p.num_kv_heads + kvh) * p.block_size + l % p.block_size;
        double dot = 0;
        for (uint32_t d = 0; d < p.qk_dim; d++)
            dot += (double)q[d] * decode(s.k_cache.data(), row * p.qk_dim + d, p.dtype) * kscale;
        scores.push_back(dot * p.scale);
        rows.push_back(row);
    }
    o.assign(p.v_dim, 0.0);
    if (scores.empty()) {
        lse = -INFINITY;
        return;
    }
    const double m = *std::max_element(scores.begin(), scores.end());
    double sum = 0;
    for (double x : scores)
        sum += std::exp(x - m);
    lse = m + std::log(sum);
    const unsigned char *vbase = p.v_cache == p.k_cache ? s.k_cache.data() : s.v_cache.data();
    for (size_t i = 0; i < scores.size(); i++) {
        const double w = std::exp(scores[i] - lse);
        for (uint32_t d = 0; d < p.v_dim; d++)
            o[d] += w * decode(vbase, rows[i] * p.v_row_stride + d, p.dtype) * kscale;
    }
    bool finite = std::isfinite(lse);
    for (uint32_t d = 0; d < p.v_dim; d++)
        finite = finite && std::isfinite(o[d]);
    if (!finite) {
        lse = NAN;
        o.assign(p.v_dim, NAN);
    }
}

/** How far an attention result is from the float64 reference. */
struct AttnError {
    double out = 0;    ///< max |got - want| / (1 + |want|) over output elements
    double lse = 0;    ///< the same over LSEs
    double rel_l2 = 0; ///< ||got - want||_2 / ||want||_2 over all outputs
    bool finite = true;
    uint32_t rows = 0, empty = 0, nan_rows = 0; ///< rows checked, without keys, NaN by the reference
};

/**
 * Bounds on AttnError a correct result keeps: fp32 arithmetic (SIMT entries),
 * hi/lo operands (exact tensor-core precision, and the GQA tensor-core entries,
 * which always split: the 1e-4), or bf16/fp16 operands (fast: measured
 * fast-mode errors are printed by test_mla_tc_random; the bound has margin over
 * the worst seen).
 */
struct AttnTolerance {
    double elem, rel_l2;
};

AttnTolerance attn_tolerance_kernel(const dcpk_attn_variant *v, uint32_t precision)
{
    if (!v->tensor_core)
        return {2e-5, 2e-5};
    if (precision == DCPK_PRECISION_EXACT || !v->shared_kv)
        return {1e-4, 1e-4};
    // fp8 KV multiplies bf16 operands (its values widened exactly), so bf16's bounds.
    return v->dtype == DCPK_FP16 ? AttnTolerance{kFastElemFp16, kFastL2Fp16} : AttnTolerance{kFastElemBf16, kFastL2Bf16};
}

/** The kernel's bound plus one rounding of the output to out_dtype (the reference runs
 *  on the queries rounded to q_dtype, so that is the only other error). */
AttnTolerance attn_tolerance(const dcpk_attn_variant *v, uint32_t precision, uint32_t out_dtype = DCPK_FP32)
{
    const AttnTolerance t = attn_tolerance_kernel(v, precision);
    const double u = act_unit_roundoff(out_dtype);
    return {t.elem + u, t.rel_l2 + u};
}

/** Compares every output row and LSE with the reference; a row the reference makes NaN
 *  (docs/design.md §4) must be NaN in its LSE and every element. */
AttnError attn_error(const AttnSetup &s)
{
    const dcpk_attn_params &p = s.p;
    std::vector<double> ref;
    double ref_lse, err2 = 0, ref2 = 0;
    AttnError e;
    for (uint32_t b = 0; b < p.batch; b++)
        for (uint32_t t = (uint32_t)s.q_start[b]; t < (uint32_t)s.q_start[b + 1]; t++)
            for (uint32_t g = 0; g < p.num_heads; g++) {
                reference_row(s, b, t, g, ref, ref_lse);
                e.rows++;
                e.empty += std::isinf(ref_lse);
                const uint32_t ch = g / p.heads_per_chunk, h = g % p.heads_per_chunk;
                const uint64_t in_chunk = (uint64_t)t * p.heads_per_chunk + h;
                const float got_lse = s.lse[ch * p.lse_chunk_stride + in_chunk];
                const float *o = s.out.data() + ch * p.out_chunk_stride + in_chunk * p.v_dim;
                if (std::isnan(ref_lse)) {
                    e.nan_rows++;
                    bool all_nan = std::isnan(got_lse);
                    for (uint32_t d = 0; d < p.v_dim; d++)
                        all_nan = all_nan && std::isnan(o[d]);
                    e.finite = e.finite && all_nan;
                    continue;
                }
                if (std::isinf(ref_lse))
                    e.finite = e.finite && std::isinf(got_lse) && got_lse < 0;
                else if (!std::isfinite(got_lse))
                    e.finite = false;
                else
                    e.lse = std::max(e.lse, std::fabs(got_lse - ref_lse) / (1 + std::fabs(ref_lse)));
                for (uint32_t d = 0; d < p.v_dim; d++) {
                    if (!std::isfinite(o[d])) {
                        e.finite = false;
                        continue;
                    }
                    const double diff = o[d] - ref[d];
                    e.out = std::max(e.out, std::fabs(diff) / (1 + std::fabs(ref[d])));
                    err2 += diff * diff;
                    ref2 += ref[d] * ref[d];
                }
            }
    e.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    return e;
}

bool within(const AttnError &e, const AttnTolerance &t)
{
    return e.finite && e.out <= t.elem && e.lse <= t.elem && e.rel_l2 <= t.rel_l2;
}

/** Fails the test unless the result is within the entry's tolerance. */
AttnError check_attn(const AttnCase &c, const AttnSetup &s)
{
    const AttnError e = attn_error(s);
    const AttnTolerance tol = attn_tolerance(s.v, c.precision, c.out_dtype);
    if (!within(e, tol))
        fail_msg("%s/%u (%s, q %u out %u): %s; max error out %.3g, lse %.3g, rel L2 %.3g (bounds %.3g, %.3g)", s.v->entry,
                 c.num_splits, c.precision == DCPK_PRECISION_EXACT ? "exact" : "fast", c.q_dtype, c.out_dtype,
                 e.finite ? "finite" : "NOT FINITE or wrong -inf", e.out, e.lse, e.rel_l2, tol.elem, tol.rel_l2);
    print_message("%-30s splits %u%s: %u rows (%u without keys) match (max %.2g, rel L2 %.2g)\n", s.v->entry,
                  c.num_splits, !s.v->tensor_core ? "" : !s.v->shared_kv ? " hi/lo" : c.precision == DCPK_PRECISION_EXACT ? " exact" : " fast",
                  e.rows, e.empty, std::max(e.out, e.lse), e.rel_l2);
    return e;
}

AttnError attn_case(const AttnCase &c)
{
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ std::hash<std::string>()(c.layout) ^ c.dtype);
    AttnSetup s;
    setup_attn(c, s, &rng);
    run_attn(c, s);
    return check_attn(c, s);
}

/*
 * Every entry once on a small shape: 2 KV heads (MLA 1) x 4 heads, two DCP chunks,
 * rank 1 of 2 with interleave 2, pages of 8 (tiles span pages), a 1-token and a
 * 3-token sequence (causal mask over global positions), head tiles of 3 (the last
 * partial).
 */
void test_every_entry_small(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++) {
        const dcpk_attn_variant *v = dcpk_attn_variant_at(i);
        const std::string layout = attn_layout(v);
        for (uint32_t prec = 0; prec <= (v->tensor_core ? 1u : 0u); prec++)
            attn_case({layout.c_str(), v->dtype, {2, 45}, {1, 3}, v->shared_kv ? 1u : 2u, 4, 2, 1, 2, 2, 8, 3, 1, prec});
    }
}

/* Splits, empty shards and rows that see no key, many passes, pages of one token. */
void test_gqa_shapes(void **state)
{
    (void)state;
    // Rank 1 of 2 with interleave 2: sequence 1 has no key here; splits merged by dcpk_merge.
    attn_case({"gqa_d64", DCPK_BF16, {1, 37, 100}, {1, 3, 2}, 2, 5, 2, 1, 2, 2, 8, 3, 1});
    attn_case({"gqa_d64", DCPK_BF16, {1, 37, 100}, {1, 3, 2}, 2, 5, 2, 1, 2, 2, 8, 3, 3});
    // 8 heads x 3 tokens = 24 rows: two passes of a 16-row entry; fp8 scales.
    attn_case({"gqa_d128", DCPK_FP8_E4M3, {50, 130}, {3, 1}, 1, 8, 1, 0, 1, 1, 16, 8, 2});
    // Rank 2 of 4: the first query token of sequence 0 sees no key on this rank.
    attn_case({"gqa_d256", DCPK_FP16, {3, 70}, {2, 1}, 2, 2, 4, 2, 4, 1, 32, 2, 1});
    // MHA, pages of one token, more splits than some sequences have pages.
    attn_case({"gqa_d128", DCPK_FP32, {40, 3}, {1, 1}, 4, 1, 1, 0, 1, 1, 1, 1, 4});
}

void test_mla_shapes(void **state)
{
    (void)state;
    // 40 heads in tiles of 32 (+8), 2 tokens: 64 rows = two passes; two DCP chunks; splits.
    attn_case({"mla", DCPK_BF16, {20, 90}, {2, 1}, 1, 40, 2, 1, 2, 4, 16, 32, 2});
    attn_case({"mla", DCPK_FP8_E4M3, {33}, {1}, 1, 16, 1, 0, 1, 1, 64, 16, 1});
}

/*
 * Page sizes that are not powers of two (attn_page_index divides; a power of two
 * shifts): pages of 3 (several in one tile, tiles that start inside a page) and of
 * 48 (tiles inside one page, a 64-key tile over two), two splits of whole pages, on
 * the tensor-core MLA and GQA entries (their per-key lookups shared by shuffle,
 * TileRows) and a SIMT one (a lookup per copied chunk).
 */
void test_page_sizes(void **state)
{
    (void)state;
    static const struct {
        const char *layout;
        uint32_t dtype;
    } entries[] = {{"mla_tc", DCPK_BF16}, {"gqa_d64_tc", DCPK_FP16}, {"gqa_d128_tc", DCPK_BF16}, {"gqa_d128", DCPK_FP8_E4M3}};
    for (const auto &e : entries)
        for (uint32_t bs : {3u, 48u}) {
            if (bs == 48 && test_quick()) // under valgrind: the 3-token pages only
                continue;
            const bool mla = std::strncmp(e.layout, "mla", 3) == 0;
            attn_case({e.layout, e.dtype, {110, 45}, {1, 2}, mla ? 1u : 2u, 3, 1, 1, 2, 1, bs, 3, 2});
        }
}

/*
 * Queries and outputs in bf16/fp16 (params.h q_dtype, out_dtype) on SIMT and
 * tensor-core entries, one split (attention stores out) and two (the merge does),
 * against the float64 reference on the rounded queries within the entry's bound
 * plus one output rounding. An entry that read q, or wrote out, as fp32 fails.
 * Under DCP_TEST_QUICK each entry runs one combination.
 */
void test_act_dtypes(void **state)
{
    (void)state;
    static const struct {
        const char *layout;
        uint32_t dtype;
    } entries[] = {{"gqa_d64", DCPK_BF16}, {"mla", DCPK_FP16}, {"mla_tc", DCPK_BF16}, {"gqa_d64_tc", DCPK_FP16},
                   {"gqa_d128_tc", DCPK_BF16}};
    static const uint32_t combos[][2] = {
        {DCPK_BF16, DCPK_BF16}, {DCPK_FP16, DCPK_FP16}, {DCPK_BF16, DCPK_FP32}, {DCPK_FP32, DCPK_FP16}};
    const int n_entries = (int)(sizeof(entries) / sizeof(entries[0])), n_combos = 4;
    for (int i = 0; i < n_entries; i++)
        for (int k = 0; k < n_combos; k++) {
            if (test_quick() && k != i % n_combos)
                continue;
            const bool mla = std::string(entries[i].layout).rfind("mla", 0) == 0;
            AttnCase c{entries[i].layout, entries[i].dtype, {2, 45}, {1, 3}, mla ? 1u : 2u, 4, 2, 1, 2, 2, 8, 3,
                       1u + (uint32_t)(k % 2)};
            c.q_dtype = combos[k][0];
            c.out_dtype = combos[k][1];
            attn_case(c);
        }
}

/* ---- the tensor-core MLA entries ------------------------------------------- */

/*
 * Random shapes against the float64 oracle, every dtype x precision: batches of
 * 1-3, lengths down to the query tokens themselves (short shards, and ranks with
 * no key at all), 1-4 query tokens (causal mask on global positions), DCP groups
 * of 1-4 with interleaves 1-16, pages of 1-64 tokens, 1-4 splits merged by
 * dcpk_merge, up to 40 heads in head tiles that take one or more passes of 32
 * rows. Prints the largest errors seen per dtype and precision.
 */
void test_mla_tc_random(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x6d6c6174u);
    static const uint32_t dtypes[] = {DCPK_BF16, DCPK_FP16, DCPK_FP8_E4M3};
    static const char *const dtype_names[] = {"bf16", "fp16", "fp8_e4m3"};
    static const uint32_t pages[] = {1, 5, 16, 64};
    static const uint32_t interleaves[] = {1, 2, 16};
    AttnError worst[3][2];
    const int cases = test_quick() ? 6 : 18; /* 6 still covers each dtype x precision */
    for (int n = 0; n < cases; n++) {
        const uint32_t di = (uint32_t)n % 3, prec = (uint32_t)n / 3 % 2;
        AttnCase c{"mla_tc", dtypes[di], {}, {}, 1, 1, 1, 0, 1, 1, 16, 1, 1, prec};
        const uint32_t batch = (uint32_t)test_rng_range(&rng, 1, 3);
        for (uint32_t b = 0; b < batch; b++) {
            const int q = (int)test_rng_range(&rng, 1, 4);
            c.q_tokens.push_back(q);
            c.seq_lens.push_back(q + (test_rng_range(&rng, 0, 3) == 0 ? 0 : (int)test_rng_range(&rng, 0, 150)));
        }
        c.group_size = (uint32_t)test_rng_range(&rng, 1, 4);
        c.rank = (uint32_t)test_rng_range(&rng, 0, c.group_size - 1);
        c.interleave = interleaves[test_rng_range(&rng, 0, 2)];
        c.block_size = pages[test_rng_range(&rng, 0, 3)];
        c.heads_per_kv = (uint32_t)test_rng_range(&rng, 1, 40);
        c.chunks = c.heads_per_kv % 2 == 0 && test_rng_range(&rng, 0, 1) ? 2 : 1;
        c.head_tile = (uint32_t)test_rng_range(&rng, 1, c.heads_per_kv);
        c.num_splits = (uint32_t)test_rng_range(&rng, 1, 4);
        AttnSetup s;
        setup_attn(c, s, &rng);
        run_attn(c, s);
        const AttnError e = check_attn(c, s);
        AttnError &w = worst[di][prec];
        w.out = std::max(w.out, e.out);
        w.lse = std::max(w.lse, e.lse);
        w.rel_l2 = std::max(w.rel_l2, e.rel_l2);
    }
    for (int di = 0; di < 3; di++)
        for (int prec = 0; prec < 2; prec++)
            print_message("mla_tc %s %s: worst max error out %.3g, lse %.3g, rel L2 %.3g\n", dtype_names[di],
                          prec ? "exact" : "fast", worst[di][prec].out, worst[di][prec].lse, worst[di][prec].rel_l2);
}

/** The tensor-core MLA entry of p's dtype with a deliberate bug M (attn_mla_tc.cuh, TcMutant). */
template <dcpk::TcMutant M>
void mla_tc_mutant(dcpk_attn_params p)
{
    const uint32_t cache_dtype = p.dtype;
#define MUTANT_CFG_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    if (cache_dtype == dtype)                                                    \
        dcpk::attn_tc_kernel<dcpk::MlaTcBlock, dcpk::MlaTcCfg<dtype, threads, rows, tile, M>>(p);
    DCPK_ATTN_MLA_TC_VARIANTS(MUTANT_CFG_)
#undef MUTANT_CFG_
}

/** Whether the emulated oracle test of mla_tc_<dtype> fails with kernel (errors or a wrong result). */
bool mla_tc_caught(AttnKernel kernel, const char *what, uint32_t dtype = DCPK_BF16)
{
    // Several tiles (double buffer reused), two passes of 32 rows, splits.
    const AttnCase c{"mla_tc", dtype, {130, 70}, {2, 1}, 1, 20, 1, 0, 1, 1, 16, 20, 2, DCPK_PRECISION_FAST};
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x6d7574u);
    AttnSetup s;
    setup_attn(c, s, &rng);
    std::string first;
    emu::quiet = true;
    const unsigned errors = run_attn(c, s, kernel, &first);
    emu::quiet = false;
    emu::reset_errors();
    const AttnError e = attn_error(s);
    const bool right = within(e, attn_tolerance(s.v, c.precision));
    print_message("mla_tc %-4s %-22s %s: %u emulator errors (%s), result %s (max error %.3g)\n",
                  dtype == DCPK_FP8_E4M3 ? "fp8" : "bf16", what,
                  errors || !right ? "fails" : "passes", errors, first.c_str(), right ? "right" : "wrong",
                  std::max(e.out, e.lse));
    return errors || !right;
}

/* Bugs in the tensor-core MLA kernel itself make its emulated test fail; the unmutated one passes. */
void test_mla_tc_mutants(void **state)
{
    (void)state;
    if (mla_tc_caught(mla_tc_mutant<dcpk::TcMutant::none>, "unmutated"))
        fail_msg("the unmutated kernel fails the mutant harness");
    if (!mla_tc_caught(mla_tc_mutant<dcpk::TcMutant::no_wait>, "delete cp.async wait"))
        fail_msg("mutant 'delete cp.async wait' went unnoticed");
    if (!mla_tc_caught(mla_tc_mutant<dcpk::TcMutant::no_barrier>, "delete barrier"))
        fail_msg("mutant 'delete barrier' went unnoticed");
    if (!mla_tc_caught(mla_tc_mutant<dcpk::TcMutant::swap_rows>, "swap fragment rows"))
        fail_msg("mutant 'swap fragment rows' went unnoticed");
    // fp8: the widening step reads the raw copies, so a missing wait or barrier shows there too.
    if (mla_tc_caught(mla_tc_mutant<dcpk::TcMutant::none>, "unmutated", DCPK_FP8_E4M3))
        fail_msg("the unmutated fp8 kernel fails the mutant harness");
    if (!mla_tc_caught(mla_tc_mutant<dcpk::TcMutant::no_wait>, "delete cp.async wait", DCPK_FP8_E4M3))
        fail_msg("fp8 mutant 'delete cp.async wait' went unnoticed");
    if (!mla_tc_caught(mla_tc_mutant<dcpk::TcMutant::no_barrier>, "delete barrier", DCPK_FP8_E4M3))
        fail_msg("fp8 mutant 'delete barrier' went unnoticed");
    if (!mla_tc_caught(mla_tc_mutant<dcpk::TcMutant::swap_rows>, "swap fragment rows", DCPK_FP8_E4M3))
        fail_msg("fp8 mutant 'swap fragment rows' went unnoticed");
}

/* ---- the tensor-core GQA entries ------------------------------------------- */

/*
 * Random shapes against the float64 oracle, every head dim x dtype: batches of
 * 1-3, lengths down to the query tokens themselves (short shards, ranks with no
 * key at all), 1-4 query tokens (causal mask on global positions), 1-3 KV heads
 * with 1-10 query heads each (MHA to 10-way GQA, head tiles that take one or more
 * passes), DCP groups of 1-4 with interleaves 1-16, pages of 1-64 tokens, 1-4
 * splits merged by dcpk_merge; longer sequences for d64 and d128 so that the
 * cp.async ring wraps. Prints the largest errors seen per entry.
 */
void test_gqa_tc_random(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x67716174u);
    static const char *const layouts[] = {"gqa_d64_tc", "gqa_d128_tc", "gqa_d256_tc"};
    static const uint32_t dtypes[] = {DCPK_BF16, DCPK_FP16};
    static const uint32_t pages[] = {1, 3, 16, 64};
    static const uint32_t interleaves[] = {1, 2, 16};
    static const int max_len[] = {400, 300, 120};
    AttnError worst[3][2];
    const int cases = test_quick() ? 6 : 18; /* 6 still covers each head dim x dtype */
    for (int n = 0; n < cases; n++) {
        const uint32_t li = (uint32_t)n % 3, di = (uint32_t)n / 3 % 2;
        AttnCase c{layouts[li], dtypes[di], {}, {}, 1, 1, 1, 0, 1, 1, 16, 1, 1, (uint32_t)n / 6 % 2};
        const uint32_t batch = (uint32_t)test_rng_range(&rng, 1, 3);
        for (uint32_t b = 0; b < batch; b++) {
            const int q = (int)test_rng_range(&rng, 1, 4);
            c.q_tokens.push_back(q);
            c.seq_lens.push_back(q + (test_rng_range(&rng, 0, 3) == 0 ? 0 : (int)test_rng_range(&rng, 0, max_len[li])));
        }
        c.group_size = (uint32_t)test_rng_range(&rng, 1, 4);
        c.rank = (uint32_t)test_rng_range(&rng, 0, c.group_size - 1);
        c.interleave = interleaves[test_rng_range(&rng, 0, 2)];
        c.block_size = pages[test_rng_range(&rng, 0, 3)];
        c.num_kv_heads = (uint32_t)test_rng_range(&rng, 1, 3);
        c.heads_per_kv = (uint32_t)test_rng_range(&rng, 1, 10);
        c.chunks = c.heads_per_kv % 2 == 0 && test_rng_range(&rng, 0, 1) ? 2 : 1;
        c.head_tile = (uint32_t)test_rng_range(&rng, 1, c.heads_per_kv);
        c.num_splits = (uint32_t)test_rng_range(&rng, 1, 4);
        AttnSetup s;
        setup_attn(c, s, &rng);
        run_attn(c, s);
        const AttnError e = check_attn(c, s);
        AttnError &w = worst[li][di];
        w.out = std::max(w.out, e.out);
        w.lse = std::max(w.lse, e.lse);
        w.rel_l2 = std::max(w.rel_l2, e.rel_l2);
    }
    for (int li = 0; li < 3; li++)
        for (int di = 0; di < 2; di++)
            print_message("%s %s: worst max error out %.3g, lse %.3g, rel L2 %.3g\n", layouts[li], di ? "fp16" : "bf16",
                          worst[li][di].out, worst[li][di].lse, worst[li][di].rel_l2);
}

/** The d128 bf16 tensor-core GQA entry with a deliberate bug M (attn_gqa_tc.cuh, TcMutant). */
template <dcpk::TcMutant M>
void gqa_tc_mutant(dcpk_attn_params p)
{
#define MUTANT_CFG_(layout, qk, v, shared, threads, rows, tile, dt, dtype, esize) \
    if (qk == 128 && dtype == DCPK_BF16)                                         \
        dcpk::attn_tc_kernel<dcpk::GqaTcBlock, dcpk::GqaTcCfg<qk, dtype, threads, rows, tile, M>>(p);
    DCPK_ATTN_GQA_TC_VARIANTS(MUTANT_CFG_)
#undef MUTANT_CFG_
}

/** Whether the emulated oracle test of gqa_d128_tc_bf16 fails with kernel (errors or a wrong result). */
bool gqa_tc_caught(AttnKernel kernel, const char *what)
{
    // 5 tiles of 64 keys (the 3-stage ring wraps), two passes of 16 rows (8 heads x 3 tokens), splits.
    const AttnCase c{"gqa_d128_tc", DCPK_BF16, {330, 90}, {3, 1}, 2, 8, 1, 0, 1, 1, 16, 8, 2, DCPK_PRECISION_FAST};
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x67757474u);
    AttnSetup s;
    setup_attn(c, s, &rng);
    std::string first;
    emu::quiet = true;
    const unsigned errors = run_attn(c, s, kernel, &first);
    emu::quiet = false;
    emu::reset_errors();
    const AttnError e = attn_error(s);
    const bool right = within(e, attn_tolerance(s.v, c.precision));
    print_message("gqa_tc %-22s %s: %u emulator errors (%s), result %s (max error %.3g)\n", what,
                  errors || !right ? "fails" : "passes", errors, first.c_str(), right ? "right" : "wrong",
                  std::max(e.out, e.lse));
    return errors || !right;
}

/* Bugs in the tensor-core GQA kernel itself make its emulated test fail; the unmutated one passes. */
void test_gqa_tc_mutants(void **state)
{
    (void)state;
    if (gqa_tc_caught(gqa_tc_mutant<dcpk::TcMutant::none>, "unmutated"))
        fail_msg("the unmutated kernel fails the mutant harness");
    if (!gqa_tc_caught(gqa_tc_mutant<dcpk::TcMutant::no_wait>, "delete cp.async wait"))
        fail_msg("mutant 'delete cp.async wait' went unnoticed");
    if (!gqa_tc_caught(gqa_tc_mutant<dcpk::TcMutant::no_barrier>, "delete barrier"))
        fail_msg("mutant 'delete barrier' went unnoticed");
    if (!gqa_tc_caught(gqa_tc_mutant<dcpk::TcMutant::swap_rows>, "swap fragment rows"))
        fail_msg("mutant 'swap fragment rows' went unnoticed");
    if (!gqa_tc_caught(gqa_tc_mutant<dcpk::TcMutant::no_syncwarp>, "delete P^T __syncwarp"))
        fail_msg("mutant 'delete P^T __syncwarp' went unnoticed");
}

/* ---- NaN (docs/design.md §4) ------------------------------------------------ */

/** Where the one NaN of a case goes, in sequence 0. */
enum class NanSite {
    key,         // a key every query token of the sequence sees
    value,       // its value (MLA: the latent part of the K row)
    query,       // one query row
    masked_value // the value of a key the sequence's first query token does not see
};

/** Writes the NaN of `site` into the case's cache or queries (a place for it must exist). */
void poison_case(AttnSetup &s, NanSite site, test_rng *rng)
{
    const dcpk_attn_params &p = s.p;
    const int64_t nq = s.q_start[1] - s.q_start[0];
    if (site == NanSite::query) {
        const uint32_t t = (uint32_t)test_rng_range(rng, 0, (uint64_t)nq - 1);
        const uint32_t g = (uint32_t)test_rng_range(rng, 0, p.num_heads - 1);
        const uint32_t c = g / p.heads_per_chunk, h = g % p.heads_per_chunk;
        s.q[c * p.q_chunk_stride + ((uint64_t)t * p.heads_per_chunk + h) * p.qk_dim +
            test_rng_range(rng, 0, p.qk_dim - 1)] = NAN;
        return;
    }
    // Local keys at a global position every query token sees (<= len - nq), or not.
    std::vector<uint64_t> keys;
    for (uint64_t l = 0; l < s.local_len[0]; l++) {
        const bool all_see = (int64_t)dcpk_global_position(l, p.rank, p.group_size, p.interleave) <=
                             s.seq_lens[0] - nq;
        if (all_see == (site != NanSite::masked_value))
            keys.push_back(l);
    }
    assert_false(keys.empty());
    const uint64_t l = keys[test_rng_range(rng, 0, keys.size() - 1)];
    const uint64_t page = (uint64_t)s.block_table[l / p.block_size];
    const uint32_t kvh = (uint32_t)test_rng_range(rng, 0, p.num_kv_heads - 1);
    const uint64_t row = (page * p.num_kv_heads + kvh) * p.block_size + l % p.block_size;
    if (site == NanSite::key)
        poison(s.k_cache.data(), row * p.qk_dim + test_rng_range(rng, 0, p.qk_dim - 1), p.dtype);
    else if (p.v_cache == p.k_cache)
        poison(s.k_cache.data(), row * p.qk_dim + test_rng_range(rng, 0, p.v_dim - 1), p.dtype);
    else
        poison(s.v_cache.data(), row * p.v_dim + test_rng_range(rng, 0, p.v_dim - 1), p.dtype);
}

/*
 * One NaN in sequence 0 (a visible key or value, a query, a value under the causal
 * mask of its first query token), with and without split-KV: the rows it reaches
 * are NaN in their LSE and every output element (the flags of finish() meet across
 * the threads of a row), the others match the reference, the masked rows included
 * (a row never adds 0 * NaN of a key it does not see).
 */
void test_nan_rows(void **state)
{
    (void)state;
    const AttnCase cases[] = {
        // Rank 1 of 2, interleave 2: positions 38 and 39 of sequence 0 live here.
        {"gqa_d64", DCPK_BF16, {40, 23}, {3, 1}, 2, 4, 2, 1, 2, 2, 8, 3, 1},
        {"gqa_d128", DCPK_FP8_E4M3, {40, 23}, {3, 1}, 1, 8, 1, 0, 1, 1, 16, 8, 1},
        {"mla", DCPK_BF16, {40, 9}, {3, 1}, 1, 8, 2, 1, 2, 2, 16, 8, 1},
        {"mla_tc", DCPK_BF16, {40, 9}, {3, 1}, 1, 8, 2, 1, 2, 2, 16, 8, 1, DCPK_PRECISION_FAST},
        {"mla_tc", DCPK_FP16, {40, 9}, {3, 1}, 1, 8, 2, 1, 2, 2, 16, 8, 1, DCPK_PRECISION_EXACT},
        // fp8: the widened bf16 tile is what P.V reads, and what is sanitized.
        {"mla_tc", DCPK_FP8_E4M3, {40, 9}, {3, 1}, 1, 8, 2, 1, 2, 2, 16, 8, 1, DCPK_PRECISION_FAST},
        // GQA tensor cores (V apart from K): two n-tiles of rows in one pass; and two
        // passes of 16 rows, the first of which holds two query tokens.
        {"gqa_d64_tc", DCPK_BF16, {40, 23}, {3, 1}, 2, 4, 2, 1, 2, 2, 8, 3, 1},
        {"gqa_d128_tc", DCPK_FP16, {40, 23}, {3, 1}, 1, 8, 1, 0, 1, 1, 16, 8, 1},
        {"gqa_d256_tc", DCPK_BF16, {40, 23}, {3, 1}, 1, 2, 1, 1, 2, 2, 16, 2, 1},
    };
    const char *const names[] = {"key", "value", "query", "masked value"};
    for (const AttnCase &base : cases)
        for (uint32_t splits : {1u, 3u})
            for (int site = 0; site < 4; site++) {
                AttnCase c = base;
                c.num_splits = splits;
                test_rng rng;
                test_rng_seed(&rng, test_seed() ^ 0x4a4eu ^ (uint64_t)site << 8 ^ splits);
                AttnSetup s;
                setup_attn(c, s, &rng);
                poison_case(s, (NanSite)site, &rng);
                run_attn(c, s);
                print_message("NaN in a %s: ", names[site]);
                if (check_attn(c, s).nan_rows == 0)
                    fail_msg("%s: the NaN in a %s reached no row", s.v->entry, names[site]);
            }
}

/* ---- the emulator's tensor-core model and its checks ------------------------ */

/* ldmatrix: values encode their (matrix, row, column); lane l must get row l / 4,
 * columns 2 (l % 4) + {0, 1} of each matrix (.trans: the transposed pair). */
struct LdmParams {
    uint64_t out; // uint32 [4 shapes][32 lanes][4 registers]
};

void ldmatrix_kernel(LdmParams p)
{
    uint16_t *tile = reinterpret_cast<uint16_t *>(dcpk_smem); // 4 matrices of 8 rows x 8, row stride 24
    const unsigned lane = threadIdx.x;
    for (unsigned i = lane; i < 4 * 8 * 8; i += 32) {
        const unsigned m = i / 64, r = i / 8 % 8, c = i % 8;
        dcpk::smem_store(tile + (m * 8 + r) * 24 + c, (uint16_t)(m << 8 | r << 4 | c));
    }
    __syncthreads();
    const uint16_t *row = tile + (lane / 8 * 8 + lane % 8) * 24; // lane -> row lane % 8 of matrix lane / 8
    uint32_t *out = reinterpret_cast<uint32_t *>(p.out) + lane * 4;
    uint32_t r1[1], r2[2], r4[4];
    dcpk::ldmatrix<1>(r1, row);
    out[0 * 128] = r1[0];
    dcpk::ldmatrix<2, true>(r2, row);
    out[1 * 128] = r2[0];
    out[1 * 128 + 1] = r2[1];
    dcpk::ldmatrix<4>(r4, row);
    for (int i = 0; i < 4; i++)
        out[2 * 128 + i] = r4[i];
    dcpk::ldmatrix<4, true>(r4, row);
    for (int i = 0; i < 4; i++)
        out[3 * 128 + i] = r4[i];
}

void test_ldmatrix_layout(void **state)
{
    (void)state;
    std::vector<uint32_t> out(4 * 32 * 4, 0);
    LdmParams p{addr(out.data())};
    launch(ldmatrix_kernel, p, dim3(1), dim3(32));
    const int nmat[4] = {1, 2, 4, 4};
    const bool trans[4] = {false, true, false, true};
    for (int shape = 0; shape < 4; shape++)
        for (unsigned l = 0; l < 32; l++)
            for (int m = 0; m < nmat[shape]; m++)
                for (unsigned j = 0; j < 2; j++) {
                    const unsigned r = trans[shape] ? 2 * (l % 4) + j : l / 4, c = trans[shape] ? l / 4 : 2 * (l % 4) + j;
                    const uint32_t got = out[(shape * 32 + l) * 4 + m] >> (16 * j) & 0xffffu;
                    if (got != ((unsigned)m << 8 | r << 4 | c))
                        fail_msg("ldmatrix .x%d%s lane %u reg %d half %u: %#x, want matrix %d (%u, %u)", nmat[shape],
                                 trans[shape] ? ".trans" : "", l, m, j, got, m, r, c);
                }
}

/*
 * A small tensor-core GEMM, D[16][8 * warps] = A[16][K] B[K][8 * warps], in the
 * shape the attention kernels use: A row-major and B stored [N][K] in global
 * memory, K in steps of 16 through a cp.async double buffer, ldmatrix into
 * fragments, one m16n8k16 per warp and step; with a warp checksum through
 * shuffles. Mutation names a deliberate bug the emulated tests must catch.
 */
enum class Mutation { none, no_wait, no_barrier_before_use, no_barrier_after_use, swap_fragment_rows, half_mask };

struct GemmParams {
    uint64_t a, b, d, sums; // bf16/fp16 [16][K], [N][K]; fp32 [16][N], [warps]
    uint32_t k;
    uint32_t fp16;
};

constexpr int kGemmRow = 24; // halves per smem row: 16 + 8 of padding (ldmatrix rows stay 16-byte aligned)

template <Mutation M>
void gemm_kernel(GemmParams p)
{
    const unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32, nwarps = blockDim.x / 32;
    const unsigned rows = 16 + 8 * nwarps; // A rows then B rows of one stage
    uint16_t *stage[2] = {reinterpret_cast<uint16_t *>(dcpk_smem),
                          reinterpret_cast<uint16_t *>(dcpk_smem) + rows * kGemmRow};
    const uint16_t *a = reinterpret_cast<const uint16_t *>(p.a), *b = reinterpret_cast<const uint16_t *>(p.b);
    auto load = [&](unsigned step, uint16_t *dst) {
        for (unsigned c = tid; c < rows * 2; c += blockDim.x) { // two 16-byte chunks per row
            const unsigned r = c / 2, half = c % 2;
            const uint16_t *src = r < 16 ? a + r * p.k : b + (r - 16) * p.k;
            dcpk::cp_async16(dst + r * kGemmRow + 8 * half, src + step * 16 + 8 * half, true);
        }
    };
    float d[4] = {0, 0, 0, 0};
    const unsigned steps = p.k / 16;
    load(0, stage[0]);
    dcpk::cp_async_commit();
    for (unsigned s = 0; s < steps; s++) {
        if (s + 1 < steps)
            load(s + 1, stage[(s + 1) % 2]);
        dcpk::cp_async_commit();
        if (M != Mutation::no_wait)
            dcpk::cp_async_wait<1>();
        if (M != Mutation::no_barrier_before_use)
            __syncthreads();
        const uint16_t *t = stage[s % 2];
        uint32_t af[4], bf[2];
        dcpk::ldmatrix<4>(af, t + (lane % 16) * kGemmRow + 8 * (lane / 16));
        dcpk::ldmatrix<2>(bf, t + (16 + 8 * warp + lane % 8) * kGemmRow + 8 * (lane / 8 % 2));
        if (M == Mutation::swap_fragment_rows)
            std::swap(af[0], af[1]);
        if (p.fp16)
            dcpk::mma_16816<dcpk::MmaIn::fp16>(d, af, bf);
        else
            dcpk::mma_16816<dcpk::MmaIn::bf16>(d, af, bf);
        if (M != Mutation::no_barrier_after_use)
            __syncthreads();
    }
    float *out = reinterpret_cast<float *>(p.d);
    const unsigned n = 8 * nwarps, g = lane / 4, t4 = lane % 4;
    for (int i = 0; i < 4; i++)
        out[(g + 8 * (i / 2)) * n + 8 * warp + 2 * t4 + i % 2] = d[i];
    float sum = d[0] + d[1] + d[2] + d[3];
    for (int off = 16; off > 0; off /= 2)
        sum += __shfl_xor_sync(M == Mutation::half_mask ? 0x0000ffffu : 0xffffffffu, sum, off);
    if (lane == 0)
        reinterpret_cast<float *>(p.sums)[warp] = sum;
}

/** What running one GEMM variant showed: emulator errors, and whether D and the sums were right. */
struct GemmOutcome {
    unsigned errors;
    bool right;
};

template <Mutation M>
GemmOutcome run_gemm(bool fp16, uint32_t k, unsigned warps, test_rng *rng)
{
    const unsigned n = 8 * warps;
    std::vector<uint16_t> a(16 * k), b(n * k);
    std::vector<double> av(a.size()), bv(b.size());
    auto fill = [&](std::vector<uint16_t> &bits, std::vector<double> &val) {
        for (size_t i = 0; i < bits.size(); i++) {
            const float x = (float)test_rng_unit(rng);
            if (fp16) {
                const __half h = __float2half_rn(x);
                std::memcpy(&bits[i], &h, 2);
                val[i] = __half2float(h);
            } else {
                const __nv_bfloat16 h = __float2bfloat16_rn(x);
                std::memcpy(&bits[i], &h, 2);
                val[i] = __bfloat162float(h);
            }
        }
    };
    fill(a, av);
    fill(b, bv);
    std::vector<float> d(16 * n, NAN), sums(warps, NAN);
    GemmParams p{addr(a.data()), addr(b.data()), addr(d.data()), addr(sums.data()), k, fp16};
    emu::reset_errors();
    emu::launch(gemm_kernel<M>, p, dim3(1), dim3(32 * warps));
    bool right = true;
    std::vector<double> wsum(warps, 0.0);
    for (unsigned r = 0; r < 16; r++)
        for (unsigned c = 0; c < n; c++) {
            double want = 0, mag = 0;
            for (unsigned i = 0; i < k; i++) {
                want += av[r * k + i] * bv[c * k + i];
                mag += std::fabs(av[r * k + i] * bv[c * k + i]);
            }
            wsum[c / 8] += want;
            // One fp32 rounding per k-step of 16 (the accumulator), nothing else.
            right = right && std::fabs(d[r * n + c] - want) <= 1e-6 * (mag + 1e-30) * (k / 16);
        }
    for (unsigned w = 0; w < warps; w++)
        right = right && std::fabs(sums[w] - wsum[w]) <= 1e-4 * (1 + std::fabs(wsum[w]));
    return {emu::errors(), right};
}

/* mma.sync through ldmatrix against a float64 matrix product, bf16 and fp16, 1-3 warps. */
void test_mma_matches_matmul(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x6d6d61u);
    for (int fp16 = 0; fp16 < 2; fp16++)
        for (unsigned warps = 1; warps <= 3; warps++) {
            const uint32_t k = 16 * (1 + warps); // 2-4 steps: both buffers reused
            const GemmOutcome o = run_gemm<Mutation::none>(fp16, k, warps, &rng);
            if (o.errors)
                fail_msg("gemm %s k %u warps %u: emulator error: %s", fp16 ? "fp16" : "bf16", k, warps, emu::first_error());
            if (!o.right)
                fail_msg("gemm %s k %u warps %u: D differs from the float64 product", fp16 ? "fp16" : "bf16", k, warps);
        }
}

/* Each deliberate bug is caught: by an emulator error, by a wrong result, or both. */
template <Mutation M>
void expect_caught(const char *what, test_rng *rng)
{
    emu::quiet = true;
    const GemmOutcome o = run_gemm<M>(false, 48, 2, rng);
    emu::quiet = false;
    if (o.errors == 0 && o.right)
        fail_msg("mutant '%s' went unnoticed by the emulated test", what);
    print_message("mutant %-24s caught: %u emulator errors (%s), result %s\n", what, o.errors,
                  o.errors ? emu::first_error() : "-", o.right ? "right" : "wrong");
}

void test_mutants_caught(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x6d7574u);
    expect_caught<Mutation::no_wait>("delete cp.async wait", &rng);
    expect_caught<Mutation::no_barrier_before_use>("delete barrier before use", &rng);
    expect_caught<Mutation::no_barrier_after_use>("delete barrier after use", &rng);
    expect_caught<Mutation::swap_fragment_rows>("swap fragment rows", &rng);
    expect_caught<Mutation::half_mask>("shuffle mask of half the warp", &rng);
    emu::reset_errors();
}

/* ---- merge and lse_scale edge cases --------------------------------------- */

/* Rows of three sources' LSEs: all -inf (empty), with a NaN or a +inf (the row is
 * NaN), ordinary with an empty source, and with a weight that underflows to 0. */
constexpr uint32_t kEdgeRows = 6;
const float kLseRows[kEdgeRows][3] = {
    {-INFINITY, -INFINITY, -INFINITY},
    {NAN, 1.5f, -INFINITY},
    {INFINITY, -2.f, 0.25f},
    {3.f, -INFINITY, -1.f},
    {-200.f, 80.f, -INFINITY},
    {80.f, -200.f, -INFINITY},
};

/** Lambda by docs/design.md §4: NaN if any LSE is NaN or +inf, -inf if all are -inf. */
double ref_lambda(const float *lse, int n)
{
    double m = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (std::isnan(lse[i]) || lse[i] == INFINITY)
            return NAN;
        m = std::max(m, (double)lse[i]);
    }
    if (std::isinf(m))
        return -INFINITY;
    double s = 0;
    for (int i = 0; i < n; i++)
        if (lse[i] != -INFINITY)
            s += std::exp(lse[i] - m);
    return m + std::log(s);
}

void test_merge_edge_cases(void **state)
{
    (void)state;
    const uint32_t rows = kEdgeRows, n = 3, vd = 300, nan_d = 7;
    std::vector<float> o(n * rows * vd), lse(n * rows), out(3 * 1000, 7.f), out_lse(3 * 10, 7.f);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t r = 0; r < rows; r++) {
            lse[s * rows + r] = kLseRows[r][s];
            for (uint32_t d = 0; d < vd; d++)
                // An empty source (LSE -inf) carries NaN: it must not leak.
                o[(s * rows + r) * vd + d] = kLseRows[r][s] == -INFINITY ? NAN : (float)(s + 1) * (d + 1);
        }
    // Row 4's source 0 has weight exp(-280) = 0 in fp32: its NaN still shows.
    o[(0 * rows + 4) * vd + nan_d] = NAN;
    dcpk_merge_params m{};
    m.src_o = addr(o.data());
    m.src_lse = addr(lse.data());
    m.out = addr(out.data());
    m.out_lse = addr(out_lse.data());
    m.src_stride_o = rows * vd;
    m.src_stride_lse = rows;
    m.out_chunk_stride = 1000;
    m.out_lse_chunk_stride = 10;
    m.n_src = n;
    m.rows = rows;
    m.rows_per_chunk = 2;
    m.v_dim = vd;
    launch(dcpk_merge, m, dim3(2), dim3(dcpk::kBlock_merge)); // fewer blocks than rows: grid-stride
    for (uint32_t r = 0; r < rows; r++) {
        const double lam = ref_lambda(kLseRows[r], n);
        assert_true(same_or_nan(out_lse[(r / 2) * 10 + r % 2], lam, 1e-6));
        for (uint32_t d = 0; d < vd; d++) {
            double want = std::isnan(lam) ? NAN : 0;
            for (uint32_t s = 0; s < n && !std::isnan(lam); s++)
                if (kLseRows[r][s] != -INFINITY)
                    want += std::exp(kLseRows[r][s] - lam) * o[(s * rows + r) * vd + d];
            const float got = out[(r / 2) * 1000 + (r % 2) * vd + d];
            if (!same_or_nan(got, want, 1e-6))
                fail_msg("merge row %u [%u] = %g, want %g", r, d, got, want);
        }
    }
    assert_true(std::isnan(out[(4 / 2) * 1000 + nan_d]) && !std::isnan(out[(4 / 2) * 1000 + nan_d + 1]));
}

void test_lse_scale(void **state)
{
    (void)state;
    const uint32_t rows = kEdgeRows, n = 3, vd = 130, self = 1;
    std::vector<float> lse(n * rows), o(rows * vd, 2.f), out_lse(2, 7.f);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t r = 0; r < rows; r++)
            lse[s * rows + r] = kLseRows[r][s];
    o[0 * vd + 3] = NAN; // row 0: this rank is empty (LSE -inf): the row becomes 0, NaN included
    o[3 * vd + 4] = NAN; // row 3: the same
    o[4 * vd + 5] = NAN; // row 4: weight 1, the NaN stays (it is real data)
    o[5 * vd + 6] = NAN; // row 5: weight exp(-280) = 0, the NaN still shows
    const std::vector<float> o0 = o;
    dcpk_lse_scale_params p{};
    p.lse_all = addr(lse.data());
    p.o = addr(o.data());
    p.out_lse = addr(out_lse.data());
    p.n_src = n;
    p.self = self;
    p.rows = rows;
    p.rows_per_chunk = 2;
    p.own_chunk = 1;
    p.v_dim = vd;
    launch(dcpk_lse_scale, p, dim3(rows), dim3(dcpk::kBlock_lse_scale));
    for (uint32_t r = 0; r < rows; r++) {
        const double lam = ref_lambda(kLseRows[r], n);
        const float own = kLseRows[r][self];
        for (uint32_t d = 0; d < vd; d++) {
            const double want = own == -INFINITY ? 0 : std::exp(own - lam) * o0[r * vd + d];
            if (!same_or_nan(o[r * vd + d], want, 1e-6))
                fail_msg("lse_scale row %u [%u] = %g, want %g", r, d, o[r * vd + d], want);
        }
        if (r == 2 || r == 3)
            assert_true(same_or_nan(out_lse[r - 2], lam, 1e-6));
    }
    assert_true(std::isnan(o[1 * vd]) && std::isnan(o[2 * vd]) && o[0 * vd + 3] == 0.f && o[3 * vd + 4] == 0.f);
    assert_true(std::isnan(o[4 * vd + 5]) && std::isnan(o[5 * vd + 6]) && o[5 * vd + 7] == 0.f);
}

/* ---- uv_proj ------------------------------------------------------------------ */

/* Chunked rows with gaps between chunks, more tokens than one token group (4) and a
 * partial last group, out_dim above the block (128 threads) with a partial stride,
 * fewer blocks than heads (grid-stride), every head's W distinct: each output
 * against float64 from params.h, the gaps untouched. */
void test_uv_proj(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0x0e11);
    const uint32_t chunks = 3, hpc = 2, T = 6, in = 37, out = 131, heads = chunks * hpc;
    const uint64_t src_stride = (uint64_t)T * hpc * in + 7, dst_stride = (uint64_t)T * hpc * out + 9;
    std::vector<float> src(chunks * src_stride), w((size_t)heads * in * out);
    for (float &x : src)
        x = (float)test_rng_unit(&rng);
    for (float &x : w)
        x = (float)test_rng_unit(&rng);
    // dst_dtype fp32/bf16/fp16 (fp32 sums, one rounding); fp8: refused, dst untouched.
    const uint32_t dtypes[] = {DCPK_FP32, DCPK_BF16, DCPK_FP16, DCPK_FP8_E4M3};
    for (uint32_t dt : dtypes) {
        std::vector<unsigned char> dst(chunks * dst_stride * sizeof(float), 0x5a);
        const std::vector<unsigned char> before = dst;
        dcpk_uv_proj_params p{};
        p.src = addr(src.data());
        p.w = addr(w.data());
        p.dst = addr(dst.data());
        p.src_chunk_stride = src_stride;
        p.dst_chunk_stride = dst_stride;
        p.num_tokens = T;
        p.num_heads = heads;
        p.heads_per_chunk = hpc;
        p.in_dim = in;
        p.out_dim = out;
        p.dst_dtype = dt;
        launch(dcpk_uv_proj, p, dim3(4), dim3(dcpk::kBlock_uv_proj));
        if (dt == DCPK_FP8_E4M3) {
            assert_true(dst == before);
            continue;
        }
        const double tol = 1e-5 + (dt == DCPK_BF16 ? 0x1p-8 : dt == DCPK_FP16 ? 0x1p-11 : 0.0);
        for (uint32_t c = 0; c < chunks; c++) {
            for (uint32_t t = 0; t < T; t++)
                for (uint32_t h = 0; h < hpc; h++) {
                    const uint64_t row = (uint64_t)t * hpc + h, g = (uint64_t)c * hpc + h;
                    for (uint32_t j = 0; j < out; j++) {
                        double want = 0;
                        for (uint32_t i = 0; i < in; i++)
                            want += (double)src[c * src_stride + row * in + i] * w[(g * in + i) * out + j];
                        const double got = decode(dst.data(), c * dst_stride + row * out + j, dt);
                        if (!close_to(got, want, tol))
                            fail_msg("uv_proj dtype %u chunk %u token %u head %u col %u = %g, want %g", dt, c, t,
                                     h, j, got, want);
                    }
                }
            const size_t es = esize(dt);
            for (uint64_t i = ((uint64_t)c * dst_stride + (uint64_t)T * hpc * out) * es;
                 i < ((uint64_t)c + 1) * dst_stride * es; i++)
                assert_true(dst[i] == 0x5a); // between chunks: untouched
        }
    }
}

/* ---- kv_append, fill, reduce ------------------------------------------------ */

void test_kv_append(void **state)
{
    (void)state;
    const uint32_t dtypes[] = {DCPK_FP32, DCPK_BF16, DCPK_FP16, DCPK_FP8_E4M3};
    for (uint32_t dtype : dtypes) {
        const uint32_t tokens = 5, heads = 2, kd = 40, vd = 24, bs = 4, pages = 6, es = esize(dtype);
        std::vector<float> k(tokens * heads * kd), v(tokens * heads * vd);
        for (size_t i = 0; i < k.size(); i++)
            k[i] = (float)(i % 17) * 0.37f - 3.f + (i == 7 ? 1e4f : 0.f); // one beyond fp8 range
        for (size_t i = 0; i < v.size(); i++)
            v[i] = (float)(i % 13) * -0.21f + 1.f;
        const int64_t slots[tokens] = {5, -1, 23, 0, 14};
        std::vector<unsigned char> kc(pages * heads * bs * kd * es, 0xAB), vc(pages * heads * bs * vd * es, 0xAB);
        dcpk_kv_append_params p{};
        p.k_cache = addr(kc.data());
        p.v_cache = addr(vc.data());
        p.k_src = addr(k.data());
        p.v_src = addr(v.data());
        p.slots = addr(slots);
        p.num_tokens = tokens;
        p.num_kv_heads = heads;
        p.k_dim = kd;
        p.v_dim = vd;
        p.block_size = bs;
        p.dtype = dtype;
        p.inv_scale = dtype == DCPK_FP8_E4M3 ? 4.f : 1.f;
        launch(dcpk_kv_append, p, dim3(3), dim3(dcpk::kBlock_kv_append));
        const double tol = dtype == DCPK_FP32 ? 0 : dtype == DCPK_FP8_E4M3 ? 1.0 / 16 : 1.0 / 256;
        std::vector<bool> k_written(kc.size()), v_written(vc.size());
        for (uint32_t t = 0; t < tokens; t++)
            for (uint32_t h = 0; h < heads && slots[t] >= 0; h++) {
                const uint64_t s = (uint64_t)slots[t], row = (s / bs * heads + h) * bs + s % bs;
                for (uint32_t d = 0; d < kd; d++) {
                    double want = k[(t * heads + h) * kd + d] * p.inv_scale;
                    if (dtype == DCPK_FP8_E4M3)
                        want = std::min(std::max(want, -448.0), 448.0);
                    assert_true(close_to(decode(kc.data(), row * kd + d, dtype), want, tol));
                }
                for (uint32_t d = 0; d < vd; d++)
                    assert_true(close_to(decode(vc.data(), row * vd + d, dtype),
                                         v[(t * heads + h) * vd + d] * p.inv_scale, tol));
                std::fill_n(k_written.begin() + row * kd * es, kd * es, true);
                std::fill_n(v_written.begin() + row * vd * es, vd * es, true);
            }
        // Slot -1 and every slot not appended to are untouched.
        for (size_t i = 0; i < kc.size(); i++)
            assert_true(k_written[i] || kc[i] == 0xAB);
        for (size_t i = 0; i < vc.size(); i++)
            assert_true(v_written[i] || vc[i] == 0xAB);
    }
}

void test_fill(void **state)
{
    (void)state;
    const uint32_t rows = 3, heads = 2, dim = 70;
    const uint64_t keys[rows] = {9, 1ull << 40, 3};
    for (int use_keys = 0; use_keys < 2; use_keys++) {
        std::vector<float> dst(rows * heads * dim, 0.f);
        dcpk_fill_params p{};
        p.dst = addr(dst.data());
        p.row_keys = use_keys ? addr(keys) : 0;
        p.key_base = 100;
        p.seed = 42;
        p.rows = rows;
        p.heads = heads;
        p.dim = dim;
        p.head_offset = 5;
        p.dtype = DCPK_FP32;
        p.amplitude = 0.75f;
        launch(dcpk_fill, p, dim3(rows), dim3(dcpk::kBlock_fill));
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t h = 0; h < heads; h++)
                for (uint32_t d = 0; d < dim; d++) {
                    const uint64_t key = use_keys ? keys[r] : 100 + r;
                    assert_true(dst[(r * heads + h) * dim + d] == 0.75f * dcpk_synth_unit(42, key, 5 + h, d));
                }
    }
}

void test_reduce(void **state)
{
    (void)state;
    const uint64_t count = 2500, offset = 3;
    std::vector<float> a(count + offset), b(count + offset), c(count + offset), dst(count, 0.f);
    for (uint64_t i = 0; i < count + offset; i++) {
        a[i] = 1e8f * (float)(i % 3);
        b[i] = 1.f + (float)i;
        c[i] = -1e8f * (float)(i % 3);
    }
    const uint64_t ptrs[3] = {addr(a.data()), addr(b.data()), addr(c.data())};
    dcpk_reduce_params p{};
    p.dst = addr(dst.data());
    p.src_ptrs = addr(ptrs);
    p.src_offset = offset;
    p.count = count;
    p.n_src = 3;
    launch(dcpk_reduce, p, dim3(3), dim3(dcpk::kBlock_reduce));
    for (uint64_t i = 0; i < count; i++) {
        float want = 0.f; // in source order, as the CPU kernel sums
        want += a[offset + i];
        want += b[offset + i];
        want += c[offset + i];
        assert_true(dst[i] == want);
    }
}

/*
 * The row kernels' activation dtypes: kv_append from bf16/fp16 sources (stored as
 * the rounded source value), merge from bf16 sources into fp16, lse_scale of fp16
 * rows in place, reduce of bf16 arrays (fp32 sum in order, rounded once).
 */
void test_rows_act_dtypes(void **state)
{
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, test_seed() ^ 0xd7e6);
    for (uint32_t sd = DCPK_BF16; sd <= DCPK_FP16; sd++) { // kv_append into an fp32 cache: exact
        const uint32_t tokens = 3, heads = 2, kd = 24, bs = 4;
        std::vector<float> val(tokens * heads * kd);
        std::vector<unsigned char> src(val.size() * 2), kc(2 * heads * bs * kd * 4, 0xAB);
        for (size_t i = 0; i < val.size(); i++) {
            val[i] = act_round(sd, (float)test_rng_unit(&rng) * 5.f);
            dcpk_store_as(src.data(), i, sd, val[i]);
        }
        const int64_t slots[tokens] = {6, -1, 1};
        dcpk_kv_append_params p{};
        p.k_cache = addr(kc.data());
        p.k_src = addr(src.data());
        p.slots = addr(slots);
        p.num_tokens = tokens;
        p.num_kv_heads = heads;
        p.k_dim = kd;
        p.block_size = bs;
        p.dtype = DCPK_FP32;
        p.inv_scale = 1.f;
        p.src_dtype = sd;
        launch(dcpk_kv_append, p, dim3(2), dim3(dcpk::kBlock_kv_append));
        for (uint32_t t = 0; t < tokens; t++)
            for (uint32_t h = 0; h < heads && slots[t] >= 0; h++) {
                const uint64_t s = (uint64_t)slots[t], row = (s / bs * heads + h) * bs + s % bs;
                for (uint32_t d = 0; d < kd; d++)
                    assert_true(decode(kc.data(), row * kd + d, DCPK_FP32) == val[(t * heads + h) * kd + d]);
            }
    }
    { // merge: bf16 sources, fp16 output
        const uint32_t n = 3, rows = 4, vd = 150;
        std::vector<float> o(n * rows * vd), lse(n * rows);
        std::vector<unsigned char> src(o.size() * 2), out(rows * vd * 2);
        for (size_t i = 0; i < lse.size(); i++)
            lse[i] = i % 5 == 2 ? -INFINITY : (float)(test_rng_unit(&rng) * 4.0);
        for (size_t i = 0; i < o.size(); i++) {
            o[i] = act_round(DCPK_BF16, (float)test_rng_unit(&rng) * 3.f);
            dcpk_store_as(src.data(), i, DCPK_BF16, o[i]);
        }
        dcpk_merge_params m{};
        m.src_o = addr(src.data());
        m.src_lse = addr(lse.data());
        m.out = addr(out.data());
        m.src_stride_o = rows * vd;
        m.src_stride_lse = rows;
        m.n_src = n;
        m.rows = rows;
        m.rows_per_chunk = rows;
        m.v_dim = vd;
        m.src_dtype = DCPK_BF16;
        m.out_dtype = DCPK_FP16;
        launch(dcpk_merge, m, dim3(rows), dim3(dcpk::kBlock_merge));
        for (uint32_t r = 0; r < rows; r++) {
            float row_lse[3];
            for (uint32_t s = 0; s < n; s++)
                row_lse[s] = lse[s * rows + r];
            const double lam = ref_lambda(row_lse, (int)n);
            for (uint32_t d = 0; d < vd; d++) {
                double want = 0;
                for (uint32_t s = 0; s < n; s++)
                    if (row_lse[s] != -INFINITY)
                        want += std::exp(row_lse[s] - lam) * o[(s * rows + r) * vd + d];
                const double got = decode(out.data(), (uint64_t)r * vd + d, DCPK_FP16);
                if (!(std::fabs(got - want) <= 0x1p-11 * std::fabs(want) + 1e-6))
                    fail_msg("merge bf16 -> fp16 row %u [%u] = %g, want %g", r, d, got, want);
            }
        }
    }
    { // lse_scale: fp16 rows scaled in place
        const uint32_t n = 2, rows = 4, vd = 70;
        std::vector<float> lse(n * rows), o(rows * vd);
        std::vector<unsigned char> buf(o.size() * 2);
        for (size_t i = 0; i < lse.size(); i++)
            lse[i] = (float)(test_rng_unit(&rng) * 4.0);
        for (size_t i = 0; i < o.size(); i++) {
            o[i] = act_round(DCPK_FP16, (float)test_rng_unit(&rng) * 3.f);
            dcpk_store_as(buf.data(), i, DCPK_FP16, o[i]);
        }
        dcpk_lse_scale_params p{};
        p.lse_all = addr(lse.data());
        p.o = addr(buf.data());
        p.n_src = n;
        p.self = 1;
        p.rows = rows;
        p.rows_per_chunk = 2;
        p.own_chunk = 1;
        p.v_dim = vd;
        p.o_dtype = DCPK_FP16;
        launch(dcpk_lse_scale, p, dim3(rows), dim3(dcpk::kBlock_lse_scale));
        for (uint32_t r = 0; r < rows; r++) {
            const float row_lse[2] = {lse[r], lse[rows + r]};
            const double w = std::exp(lse[rows + r] - ref_lambda(row_lse, 2));
            for (uint32_t d = 0; d < vd; d++) {
                const double want = w * o[r * vd + d], got = decode(buf.data(), (uint64_t)r * vd + d, DCPK_FP16);
                if (!(std::fabs(got - want) <= 0x1p-11 * std::fabs(want) + 1e-6))
                    fail_msg("lse_scale fp16 row %u [%u] = %g, want %g", r, d, got, want);
            }
        }
    }
    { // reduce: bf16 arrays
        const uint64_t count = 1300, offset = 5;
        std::vector<float> v[3];
        std::vector<unsigned char> raw[3], dst(count * 2);
        uint64_t ptrs[3];
        for (int s = 0; s < 3; s++) {
            v[s].resize(count + offset);
            raw[s].resize((count + offset) * 2);
            for (uint64_t i = 0; i < count + offset; i++) {
                v[s][i] = act_round(DCPK_BF16, (float)test_rng_unit(&rng) * 50.f);
                dcpk_store_as(raw[s].data(), i, DCPK_BF16, v[s][i]);
            }
            ptrs[s] = addr(raw[s].data());
        }
        dcpk_reduce_params p{};
        p.dst = addr(dst.data());
        p.src_ptrs = addr(ptrs);
        p.src_offset = offset;
        p.count = count;
        p.n_src = 3;
        p.dtype = DCPK_BF16;
        launch(dcpk_reduce, p, dim3(2), dim3(dcpk::kBlock_reduce));
        for (uint64_t i = 0; i < count; i++) {
            float want = 0.f;
            for (int s = 0; s < 3; s++)
                want += v[s][offset + i];
            assert_true(decode(dst.data(), i, DCPK_BF16) == act_round(DCPK_BF16, want));
        }
    }
}

} // namespace

int main()
{
    emu::set_shared(dcpk_smem, sizeof dcpk_smem);
    emu::set_seed(test_seed());
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_ldmatrix_layout),
        cmocka_unit_test(test_mma_matches_matmul),
        cmocka_unit_test(test_mutants_caught),
        cmocka_unit_test(test_every_entry_small),
        cmocka_unit_test(test_gqa_shapes),
        cmocka_unit_test(test_mla_shapes),
        cmocka_unit_test(test_page_sizes),
        cmocka_unit_test(test_act_dtypes),
        cmocka_unit_test(test_mla_tc_random),
        cmocka_unit_test(test_mla_tc_mutants),
        cmocka_unit_test(test_gqa_tc_random),
        cmocka_unit_test(test_gqa_tc_mutants),
        cmocka_unit_test(test_nan_rows),
        cmocka_unit_test(test_merge_edge_cases),
        cmocka_unit_test(test_lse_scale),
        cmocka_unit_test(test_kv_append),
        cmocka_unit_test(test_fill),
        cmocka_unit_test(test_reduce),
        cmocka_unit_test(test_uv_proj),
        cmocka_unit_test(test_rows_act_dtypes),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
