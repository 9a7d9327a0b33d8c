/* oracle.c: float64 reference attention, merge and cache quantization. */
#include "oracle.h"

#include <math.h>

#include "dcp_kernels/convert.h"

/** Key e of query i's visible keys (those it may attend): position, or -1 when entry e is none. */
static int64_t visible_key(const struct oracle_attn_shape *sh, uint32_t i, int64_t pos, uint32_t e)
{
    if (sh->topk) { /* sparse: the listed positions the query sees */
        const int64_t p = sh->topk[(size_t)i * sh->topk_stride + e];
        return p >= 0 && p <= pos && p < (int64_t)sh->len ? p : -1;
    }
    const int64_t first = sh->window && pos + 1 > (int64_t)sh->window ? pos + 1 - (int64_t)sh->window : 0;
    return first + (int64_t)e; /* dense: positions first..pos */
}

/** How many entries visible_key() walks for query i at position pos. */
static uint32_t visible_entries(const struct oracle_attn_shape *sh, int64_t pos)
{
    if (sh->topk)
        return pos < 0 ? 0 : sh->num_topk;
    const int64_t last = pos + 1 < (int64_t)sh->len ? pos + 1 : (int64_t)sh->len; /* past the last key */
    const int64_t first = sh->window && pos + 1 > (int64_t)sh->window ? pos + 1 - (int64_t)sh->window : 0;
    return last > first ? (uint32_t)(last - first) : 0;
}

/** The sink: one more softmax term e^s with a zero value (docs/design.md §13). */
static void apply_sink(double s, uint32_t v_dim, double *orow, double *lrow)
{
    if (isnan(*lrow))
        return;
    if (isnan(s) || s == INFINITY) {
        for (uint32_t d = 0; d < v_dim; d++)
            orow[d] = NAN;
        *lrow = NAN;
        return;
    }
    if (s == -INFINITY)
        return;
    if (*lrow == -INFINITY) { /* nothing seen: all the weight on the sink, whose value is 0 */
        *lrow = s;
        return;
    }
    const double m = *lrow > s ? *lrow : s;
    const double total = m + log(exp(*lrow - m) + exp(s - m));
    for (uint32_t d = 0; d < v_dim; d++)
        orow[d] *= exp(*lrow - total);
    *lrow = total;
}

void oracle_attention(const struct oracle_attn_shape *sh, const double *q, const double *k,
                      const double *v, double *out, double *lse)
{
    const uint32_t group = sh->heads / sh->kv_heads;
    for (uint32_t i = 0; i < sh->q_len; i++) {
        /* Keys at positions <= pos; pos < 0 when the query precedes every key. */
        const int64_t pos = (int64_t)sh->len - sh->q_len + i;
        const uint32_t entries = visible_entries(sh, pos);
        for (uint32_t h = 0; h < sh->heads; h++) {
            const uint32_t kvh = h / group;
            const double *qrow = q + ((size_t)i * sh->heads + h) * sh->qk_dim;
            double *orow = out + ((size_t)i * sh->heads + h) * sh->v_dim;
            double *lrow = lse + (size_t)i * sh->heads + h;
            for (uint32_t d = 0; d < sh->v_dim; d++)
                orow[d] = 0.0;
            *lrow = -INFINITY;
            double max = -INFINITY;
            uint32_t seen = 0;
            for (uint32_t e = 0; e < entries; e++) {
                const int64_t j = visible_key(sh, i, pos, e);
                if (j < 0)
                    continue;
                const double *krow = k + ((size_t)j * sh->kv_heads + kvh) * sh->qk_dim;
                double s = 0.0;
                for (uint32_t d = 0; d < sh->qk_dim; d++)
                    s += qrow[d] * krow[d];
                s *= sh->scale;
                max = s > max ? s : max;
                seen++;
            }
            if (seen > 0) {
                /* Every score -inf: shift by 0, so each weight is exp(-inf) = 0, not NaN. */
                const double shift = max == -INFINITY ? 0.0 : max;
                double sum = 0.0;
                for (uint32_t e = 0; e < entries; e++) {
                    const int64_t j = visible_key(sh, i, pos, e);
                    if (j < 0)
                        continue;
                    const double *krow = k + ((size_t)j * sh->kv_heads + kvh) * sh->qk_dim;
                    const double *vrow = v + ((size_t)j * sh->kv_heads + kvh) * sh->v_dim;
                    double s = 0.0;
                    for (uint32_t d = 0; d < sh->qk_dim; d++)
                        s += qrow[d] * krow[d];
                    const double p = exp(s * sh->scale - shift);
                    sum += p;
                    for (uint32_t d = 0; d < sh->v_dim; d++)
                        orow[d] += p * vrow[d];
                }
                /* Not finite anywhere (a NaN or an infinity reached the row): all NaN. */
                int finite = isfinite(sum);
                for (uint32_t d = 0; d < sh->v_dim; d++)
                    finite = finite && isfinite(orow[d]);
                if (!finite) {
                    for (uint32_t d = 0; d < sh->v_dim; d++)
                        orow[d] = NAN;
                    *lrow = NAN;
                } else if (sum == 0.0) { /* every visible score -inf: as if no key were visible */
                    for (uint32_t d = 0; d < sh->v_dim; d++)
                        orow[d] = 0.0;
                } else {
                    for (uint32_t d = 0; d < sh->v_dim; d++)
                        orow[d] /= sum;
                    *lrow = max + log(sum);
                }
            }
            if (sh->sinks)
                apply_sink(sh->sinks[h], sh->v_dim, orow, lrow);
        }
    }
}

void oracle_merge(uint32_t n, uint32_t v_dim, const double *o, const double *lse, double *out,
                  double *out_lse)
{
    double max = -INFINITY;
    for (uint32_t s = 0; s < n; s++) {
        if (isnan(lse[s]) || lse[s] == INFINITY) {
            for (uint32_t d = 0; d < v_dim; d++)
                out[d] = NAN;
            *out_lse = NAN;
            return;
        }
        max = lse[s] > max ? lse[s] : max;
    }
    for (uint32_t d = 0; d < v_dim; d++)
        out[d] = 0.0;
    if (max == -INFINITY) {
        *out_lse = -INFINITY;
        return;
    }
    double sum = 0.0;
    for (uint32_t s = 0; s < n; s++)
        if (lse[s] != -INFINITY)
            sum += exp(lse[s] - max);
    const double total = max + log(sum);
    for (uint32_t s = 0; s < n; s++)
        if (lse[s] != -INFINITY) /* an empty source's output is never read */
            for (uint32_t d = 0; d < v_dim; d++)
                out[d] += exp(lse[s] - total) * o[(size_t)s * v_dim + d];
    *out_lse = total;
}

double oracle_quantize(float x, uint32_t dtype, float inv_scale, float kv_scale)
{
    /* What kv_append stores (the dtype's codec, fp8 scaled first) and attention reads back. */
    const int scaled = dcpk_dtype_scaled(dtype);
    unsigned char bits[4];
    dcpk_store_as(bits, 0, dtype, scaled ? x * inv_scale : x);
    const float back = dcpk_load_as_f32(bits, 0, dtype);
    return scaled ? (double)(back * kv_scale) : (double)back;
}

void oracle_quantize_array(double *dst, const float *src, size_t n, uint32_t dtype, float inv_scale,
                           float kv_scale)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = oracle_quantize(src[i], dtype, inv_scale, kv_scale);
}

double oracle_rel_l2(const double *ref, const double *got, size_t n)
{
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        err += (got[i] - ref[i]) * (got[i] - ref[i]);
        norm += ref[i] * ref[i];
    }
    return norm > 0.0 ? sqrt(err / norm) : sqrt(err);
}

void oracle_uv_proj(size_t rows, uint32_t in_dim, uint32_t out_dim, const double *x, const uint32_t *head_of,
                    const double *w, double *out)
{
    for (size_t r = 0; r < rows; r++) {
        const double *wh = w + (size_t)head_of[r] * in_dim * out_dim;
        for (uint32_t j = 0; j < out_dim; j++) {
            double acc = 0.0;
            for (uint32_t i = 0; i < in_dim; i++)
                acc += x[r * in_dim + i] * wh[(size_t)i * out_dim + j];
            out[r * out_dim + j] = acc;
        }
    }
}

void oracle_index_scores(uint32_t len, uint32_t q_len, uint32_t heads, uint32_t dim, const double *q,
                         const double *w, const double *k, double *scores)
{
    for (uint32_t i = 0; i < q_len; i++) {
        const int64_t pos = (int64_t)len - q_len + i;
        for (uint32_t j = 0; j < len; j++) {
            double sc = -INFINITY;
            if ((int64_t)j <= pos) {
                sc = 0.0;
                for (uint32_t h = 0; h < heads; h++) {
                    double dot = 0.0;
                    for (uint32_t d = 0; d < dim; d++)
                        dot += q[((size_t)i * heads + h) * dim + d] * k[(size_t)j * dim + d];
                    sc += w[(size_t)i * heads + h] * (dot > 0.0 || isnan(dot) ? dot : 0.0);
                }
            }
            scores[(size_t)i * len + j] = sc;
        }
    }
}

void oracle_topk(const double *scores, uint32_t n, uint32_t k, int32_t *out)
{
    /* Selection by repeated scans: slow and obviously right. */
    for (uint32_t r = 0; r < k; r++) {
        int64_t best = -1;
        for (uint32_t j = 0; j < n; j++) {
            const double s = scores[j];
            if (isnan(s) || s == -INFINITY)
                continue;
            int taken = 0;
            for (uint32_t q = 0; q < r && !taken; q++)
                taken = out[q] == (int32_t)j;
            if (!taken && (best < 0 || s > scores[best])) /* ascending j: ties keep the lower position */
                best = j;
        }
        out[r] = (int32_t)best;
    }
}
