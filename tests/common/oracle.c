/* oracle.c: float64 reference attention, merge and cache quantization. */
#include "oracle.h"

#include <math.h>

#include "dcp_kernels/convert.h"

void oracle_attention(const struct oracle_attn_shape *sh, const double *q, const double *k,
                      const double *v, double *out, double *lse)
{
    const uint32_t group = sh->heads / sh->kv_heads;
    for (uint32_t i = 0; i < sh->q_len; i++) {
        /* Keys at positions 0..pos; pos < 0 when the query precedes every key. */
        const int64_t pos = (int64_t)sh->len - sh->q_len + i;
        const uint32_t visible = pos < 0 ? 0 : (uint32_t)(pos + 1 < sh->len ? pos + 1 : sh->len);
        for (uint32_t h = 0; h < sh->heads; h++) {
            const uint32_t kvh = h / group;
            const double *qrow = q + ((size_t)i * sh->heads + h) * sh->qk_dim;
            double *orow = out + ((size_t)i * sh->heads + h) * sh->v_dim;
            double *lrow = lse + (size_t)i * sh->heads + h;
            for (uint32_t d = 0; d < sh->v_dim; d++)
                orow[d] = 0.0;
            if (visible == 0) {
                *lrow = -INFINITY;
                continue;
            }
            double max = -INFINITY;
            for (uint32_t j = 0; j < visible; j++) {
                const double *krow = k + ((size_t)j * sh->kv_heads + kvh) * sh->qk_dim;
                double s = 0.0;
                for (uint32_t d = 0; d < sh->qk_dim; d++)
                    s += qrow[d] * krow[d];
                s *= sh->scale;
                max = s > max ? s : max;
            }
            /* Every score -inf: shift by 0, so each weight is exp(-inf) = 0, not NaN. */
            const double shift = max == -INFINITY ? 0.0 : max;
            double sum = 0.0;
            for (uint32_t j = 0; j < visible; j++) {
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
                continue;
            }
            if (sum == 0.0) { /* every visible score -inf: as if no key were visible */
                *lrow = -INFINITY;
                continue;
            }
            for (uint32_t d = 0; d < sh->v_dim; d++)
                orow[d] /= sum;
            *lrow = max + log(sum);
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
    switch (dtype) {
    case DCPK_BF16:
        return dcpk_bf16_to_f32(dcpk_f32_to_bf16(x));
    case DCPK_FP16:
        return dcpk_fp16_to_f32(dcpk_f32_to_fp16(x));
    case DCPK_FP8_E4M3:
        return (double)(dcpk_fp8e4m3_to_f32(dcpk_f32_to_fp8e4m3(x * inv_scale, 1)) * kv_scale);
    default:
        return x;
    }
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
