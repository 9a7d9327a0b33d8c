/*
 * topk.c: top-k of (score, position) candidates per row (dcpk_topk, params.h):
 * the local top-k of the DSA indexer's scores over this rank's keys and the merge
 * of the DCP group's gathered local top-ks into the global one. Work item = row.
 * A binary heap of the k best so far, whose root is the worst of them, then the
 * heap sorted best first; the order (higher score, then lower position) is total
 * on valid candidates, so every rank and every backend picks the same entries.
 */
#include "dcp_kernels/convert.h"
#include "dcp_kernels/cpu.h"
#include "dcp_kernels/placement.h"

/** One candidate. */
struct topk_entry {
    float score;
    int32_t pos;
};

/** A score that can be selected: neither NaN nor -inf (+inf can). By the bits, as convert.h tests. */
static int topk_valid_score(float s)
{
    const uint32_t a = dcpk_f32_bits(s) & 0x7fffffffu;
    return a <= 0x7f800000u && s != dcpk_neg_inf();
}

/** a goes before b in the output: a higher score, or an equal one at a lower position. */
static int topk_before(struct topk_entry a, struct topk_entry b)
{
    return a.score > b.score || (a.score == b.score && a.pos < b.pos);
}

/** Restores the heap (root = the entry every other one goes before) below node i of n. */
static void topk_sift_down(struct topk_entry *h, uint32_t n, uint32_t i)
{
    for (;;) {
        const uint32_t l = 2 * i + 1, r = l + 1;
        uint32_t worst = i;
        if (l < n && topk_before(h[worst], h[l]))
            worst = l;
        if (r < n && topk_before(h[worst], h[r]))
            worst = r;
        if (worst == i)
            return;
        const struct topk_entry t = h[i];
        h[i] = h[worst];
        h[worst] = t;
        i = worst;
    }
}

static void topk_sift_up(struct topk_entry *h, uint32_t i)
{
    while (i > 0) {
        const uint32_t parent = (i - 1) / 2;
        if (!topk_before(h[parent], h[i]))
            return;
        const struct topk_entry t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

struct dcpk_grid dcpk_topk_grid(const void *params)
{
    const struct dcpk_topk_params *p = params;
    struct dcpk_grid g = {p->k ? p->rows : 0, 1, 1};
    return g;
}

size_t dcpk_topk_scratch_bytes(const void *params)
{
    const struct dcpk_topk_params *p = params;
    return (size_t)p->k * sizeof(struct topk_entry) + _Alignof(struct topk_entry);
}

void dcpk_topk_cpu(const void *params, uint64_t begin, uint64_t end, void *scratch)
{
    const struct dcpk_topk_params *p = params;
    const float *scores = (const float *)(uintptr_t)p->scores;
    const int32_t *positions = (const int32_t *)(uintptr_t)p->positions;
    const int32_t *row_lens = (const int32_t *)(uintptr_t)p->row_lens;
    float *out_scores = (float *)(uintptr_t)p->out_scores;
    int32_t *out_pos = (int32_t *)(uintptr_t)p->out_positions;
    struct topk_entry *heap = (struct topk_entry *)(((uintptr_t)scratch + _Alignof(struct topk_entry) - 1) &
                                                    ~(uintptr_t)(_Alignof(struct topk_entry) - 1));
    for (uint64_t r = begin; r < end; r++) {
        uint32_t len = p->n_entries;
        if (row_lens)
            len = row_lens[r] < 0 ? 0 : (uint32_t)row_lens[r] < len ? (uint32_t)row_lens[r] : len;
        uint32_t n = 0;
        for (uint32_t s = 0; s < p->n_src; s++)
            for (uint32_t e = 0; e < len; e++) {
                const uint64_t at = s * p->src_stride + r * p->row_stride + e;
                const uint64_t pos = positions ? (uint64_t)(int64_t)positions[at]
                                               : dcpk_global_position(e, p->rank, p->group_size, p->interleave);
                if (pos > INT32_MAX || !topk_valid_score(scores[at]))
                    continue; /* not a candidate: padding (position < 0), NaN or -inf */
                const struct topk_entry c = {scores[at], (int32_t)pos};
                if (n < p->k) {
                    heap[n] = c;
                    topk_sift_up(heap, n++);
                } else if (topk_before(c, heap[0])) {
                    heap[0] = c;
                    topk_sift_down(heap, n, 0);
                }
            }
        /* Heap sort: the root (the worst kept) goes last, n shrinking. */
        for (uint32_t m = n; m > 1; m--) {
            const struct topk_entry t = heap[0];
            heap[0] = heap[m - 1];
            heap[m - 1] = t;
            topk_sift_down(heap, m - 1, 0);
        }
        for (uint32_t i = 0; i < p->k; i++) {
            out_scores[r * p->k + i] = i < n ? heap[i].score : dcpk_neg_inf();
            out_pos[r * p->k + i] = i < n ? heap[i].pos : -1;
        }
    }
}
