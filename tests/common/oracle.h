/*
 * oracle.h: the float64 reference the kernels are checked against. Plain loops
 * over dense arrays, no paging, no tiling, no tricks: obviously right, slow.
 */
#ifndef DCP_TEST_ORACLE_H
#define DCP_TEST_ORACLE_H

#include <stddef.h>
#include <stdint.h>

/** Shape of one sequence's causal attention. */
struct oracle_attn_shape {
    uint32_t len;      ///< Keys: positions 0..len-1.
    uint32_t q_len;    ///< Queries: query i sits at position len - q_len + i.
    uint32_t heads;    ///< Query heads; head h uses KV head h / (heads / kv_heads).
    uint32_t kv_heads;
    uint32_t qk_dim;
    uint32_t v_dim;
    double scale;      ///< Softmax scale applied to q.k.
    uint32_t window;   ///< Sliding window: query i at position p sees keys p - window < j <= p; 0: all j <= p.
    const int32_t *topk; ///< Sparse top-k: query i sees only the positions topk[i * topk_stride + e], e < num_topk,
                         ///< that lie in [0, p] (others, -1 included, are skipped; a repeat counts twice); NULL: dense.
    uint32_t num_topk;
    uint32_t topk_stride;
    const double *sinks; ///< Per head sink logit s_h, NULL: none: out = sum e^x v / (e^s + sum e^x), lse includes e^s.
};

/**
 * Causal attention of one sequence (sliding-window, sparse top-k and sink variants as the
 * shape says): q [q_len][heads][qk_dim], k [len][kv_heads][qk_dim],
 * v [len][kv_heads][v_dim] -> out [q_len][heads][v_dim] and lse [q_len][heads]
 * (natural log of the softmax denominator). Query i sees keys 0..len-q_len+i; a
 * query that sees no key, or whose visible scores are all -inf, gets out = 0 and
 * lse = -inf; one whose result is not finite anywhere (a NaN or an infinity in its
 * query or in a visible key or value) gets NaN as its LSE and every output element.
 */
void oracle_attention(const struct oracle_attn_shape *shape, const double *q, const double *k,
                      const double *v, double *out, double *lse);

/**
 * DSA indexer scores of one sequence: for query i (position p = len - q_len + i) and
 * key j, scores[i][j] = sum_h w[i][h] * max(0, q[i][h] . k[j]) for j <= p (NaN stays
 * NaN), -inf for j > p. q [q_len][heads][dim], w [q_len][heads], k [len][dim],
 * scores [q_len][len].
 */
void oracle_index_scores(uint32_t len, uint32_t q_len, uint32_t heads, uint32_t dim, const double *q,
                         const double *w, const double *k, double *scores);

/**
 * The k best positions of one row of n scores (position = index): a higher score
 * first, an equal one at the lower position first; NaN and -inf are never taken;
 * out [k], padded with -1.
 */
void oracle_topk(const double *scores, uint32_t n, uint32_t k, int32_t *out);

/**
 * Exact merge of n partial results: o [n][v_dim] with lse [n]. A source whose LSE
 * is -inf is empty: it contributes nothing and its o is not read; with none left,
 * out = 0 and out_lse = -inf. Any LSE NaN or +inf: out and out_lse are NaN.
 * Otherwise out_lse = log sum exp(lse_s), out = sum exp(lse_s - out_lse) o_s (a NaN
 * in a non-empty o_s shows in out).
 */
void oracle_merge(uint32_t n, uint32_t v_dim, const double *o, const double *lse, double *out,
                  double *out_lse);

/**
 * The value a cache of dtype yields for an fp32 source x written with kv_append
 * and read by attention: exact for fp32; rounded for bf16/fp16; for fp8 stored
 * as x * inv_scale (satfinite) and read back times kv_scale, in fp32 as the kernels do.
 */
double oracle_quantize(float x, uint32_t dtype, float inv_scale, float kv_scale);

/** oracle_quantize over an array: dst[i] = oracle_quantize(src[i], ...). */
void oracle_quantize_array(double *dst, const float *src, size_t n, uint32_t dtype, float inv_scale,
                           float kv_scale);

/**
 * The MLA value up-projection of rows rows of in_dim values: out[r][j] = sum_i
 * x[r][i] * w[head_of[r]][i][j] (w [heads][in_dim][out_dim]), in float64.
 */
void oracle_uv_proj(size_t rows, uint32_t in_dim, uint32_t out_dim, const double *x, const uint32_t *head_of,
                    const double *w, double *out);

/** sqrt(sum (got - ref)^2 / sum ref^2); the absolute L2 error when ref is all zero. */
double oracle_rel_l2(const double *ref, const double *got, size_t n);

#endif /* DCP_TEST_ORACLE_H */
