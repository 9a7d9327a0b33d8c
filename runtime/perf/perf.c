/*
 * perf.c: the performance model (include/dcp/perf.h; every term and default in
 * docs/plan.md, "The performance model").
 *
 * A step is priced per GPU from aggregates of its entries: tokens through the
 * GEMMs, KV bytes read and attention FLOPs, tokens through DCP's exchanges, and
 * the prefill chunks that gather their cached context's KV. Nothing allocates;
 * pricing a step costs a few operations per entry, so a whole trace replays in
 * seconds.
 */
#include "dcp/perf.h"

#include <ctype.h>
#include <strings.h>
#include <math.h>
#include <string.h>

#include "dcp/geometry.h"
#include "dcp/placement.h"
#include "plan/plan_internal.h"
#include "util/util.h"

void dcp_perf_default_params(struct dcp_perf_params *p)
{
    if (!p)
        return;
    *p = (struct dcp_perf_params){
        .weight_efficiency = 0.9,
        .kv_efficiency = 0.9,
        .attention_call = 2e-6,
        .gemm_efficiency = 0.6,
        .attention_efficiency = 0.6,
        .link_efficiency = 0.8,
        .hop_latency = 0.47e-6,
        .eager_collective = 8e-6,
        .oneshot_latency = 6e-6,
        .kernels_per_layer = 20,
        .kernel_gap_graph = 1e-6,
        .kernel_gap_eager = 4e-6,
        .cuda_graphs = true,
        .activation_bytes = 2,
    };
}

const char *dcp_perf_link_name(enum dcp_perf_link link)
{
    return link == DCP_PERF_LINK_NETWORK ? "network" : "nvlink";
}

static bool fraction_ok(double x) { return x > 0 && x <= 1; }

static int check_params(const struct dcp_perf_params *p)
{
    if (!fraction_ok(p->weight_efficiency) || !fraction_ok(p->kv_efficiency) || !fraction_ok(p->gemm_efficiency) ||
        !fraction_ok(p->attention_efficiency) || !fraction_ok(p->link_efficiency))
        return dcp_error(DCP_EINVAL, "perf model: an efficiency is outside (0, 1] (weights %g, kv %g, gemm %g, "
                         "attention %g, link %g)", p->weight_efficiency, p->kv_efficiency, p->gemm_efficiency,
                         p->attention_efficiency, p->link_efficiency);
    if (!(p->attention_call >= 0) || !(p->hop_latency >= 0) || !(p->eager_collective >= 0) ||
        !(p->oneshot_latency >= 0) || !isfinite(p->oneshot_latency) ||
        !(p->kernel_gap_graph >= 0) || !(p->kernel_gap_eager >= 0) || !(p->activation_bytes > 0) ||
        !isfinite(p->attention_call + p->hop_latency + p->eager_collective + p->kernel_gap_graph +
                  p->kernel_gap_eager + p->activation_bytes) ||
        p->num_collective_fits > DCP_PERF_MAX_FITS)
        return dcp_error(DCP_EINVAL, "perf model: a latency, gap or size is negative or not finite, or more "
                         "than %u collective fits", DCP_PERF_MAX_FITS);
    for (uint32_t i = 0; i < p->num_collective_fits; i++) {
        const struct dcp_perf_collective_fit *f = &p->collective_fits[i];
        if ((unsigned)f->kind >= DCP_PERF_COLL_KINDS || f->ranks < 2 || !(f->alpha >= 0) || !(f->beta > 0) ||
            !isfinite(f->alpha) || !isfinite(f->beta))
            return dcp_error(DCP_EINVAL, "perf model: collective fit %u is invalid (kind %d, ranks %u, alpha %g, "
                             "beta %g)", i, (int)f->kind, f->ranks, f->alpha, f->beta);
    }
    return DCP_OK;
}

/* A GPU deployment by its name: the CPU default's is "cpu (emulated)". */
static bool cpu_deployment(const char *gpu)
{
    return gpu && strncasecmp(gpu, "cpu", 3) == 0 && !isalnum((unsigned char)gpu[3]);
}

/* The tensor peak the GEMMs of weights stored as w run at: 4-bit formats on fp4
 * tensor cores where the GPU has them, fp8 on fp8 ones, anything else (and int4,
 * which serving engines run as W4A16) at the bf16 rate. */
static double gemm_peak(const struct dcp_hardware_config *hw, enum dcp_weight_dtype w, const char **name)
{
    const bool fp4 = w == DCP_WEIGHT_NVFP4 || w == DCP_WEIGHT_MXFP4;
    if (fp4 && hw->flops_fp4 > 0) {
        *name = "fp4";
        return hw->flops_fp4;
    }
    if ((fp4 || w == DCP_WEIGHT_FP8) && hw->flops_fp8 > 0) {
        *name = "fp8";
        return hw->flops_fp8;
    }
    *name = "bf16";
    return hw->flops_bf16;
}

/* Whether some group of `size` consecutive GPUs of some instance crosses a node
 * boundary (instances are tp consecutive GPUs, groups consecutive ranks in them). */
static bool group_spans_nodes(const struct dcp_hardware_config *hw, uint32_t tp, uint32_t size)
{
    if (size <= 1)
        return false;
    const uint64_t gpus = (uint64_t)hw->gpus_per_node * hw->nodes, instances = gpus / tp;
    for (uint64_t i = 0; i < instances; i++)
        for (uint64_t g = 0; g < tp / size; g++) {
            const uint64_t first = i * tp + g * size, last = first + size - 1;
            if (first / hw->gpus_per_node != last / hw->gpus_per_node)
                return true;
        }
    return false;
}

/* The DCP exchanges per layer: the rows of the plan's communication (whatever the
 * merge scheme), each priced on the larger of what a rank sends and receives. */
static void dcp_rows(const struct dcp_plan_comm *c, struct dcp_perf_model *m)
{
    m->num_rows = DCP_MIN(c->num_rows, (uint32_t)DCP_PERF_MAX_ROWS);
    for (uint32_t i = 0; i < m->num_rows; i++)
        m->rows[i] = (struct dcp_perf_row){c->rows[i].kind, c->rows[i].ranks,
                                           DCP_MAX(c->rows[i].send_bytes, c->rows[i].recv_bytes), c->rows[i].layers};
}

/* The attention layers grouped by the span a query attends (none layers attend nothing). */
static void attention_spans(const struct dcp_model_config *mc, struct dcp_perf_model *m)
{
    for (uint32_t l = 0; l < mc->num_layers; l++) {
        const struct dcp_layer_kind k = dcp_model_layer_kind(mc, l);
        if (k.type == DCP_LAYER_NONE)
            continue;
        const uint32_t limit = k.type == DCP_LAYER_SLIDING_WINDOW ? k.window
                               : k.type == DCP_LAYER_SPARSE_TOPK  ? k.topk
                                                                  : 0;
        uint32_t i = 0;
        while (i < m->num_spans && (m->spans[i].type != k.type || m->spans[i].limit != limit))
            i++;
        if (i == m->num_spans) {
            if (i == DCP_MAX_LAYER_PATTERN)
                i--; /* a pattern has at most this many kinds; past it, fold into the last */
            else
                m->spans[m->num_spans++] = (struct dcp_perf_span){k.type, limit, 0};
        }
        m->spans[i].layers++;
    }
}

/* The busiest rank's tokens of a sequence of len tokens under the layer kinds' kv. */
static double shard_of(const struct dcp_perf_model *m, const struct dcp_model_kv *kv, uint64_t len)
{
    return kv->dcp == 1 ? (double)len : (double)dcp_kv_local_length(len, 0, kv->dcp, m->interleave);
}

static double line_at(const struct dcp_perf_model *m, const struct dcp_model_kv *kv, const struct dcp_perf_reads *r,
                      uint64_t len)
{
    return r->a * shard_of(m, kv, len) + r->b * (double)len + r->e;
}

/* The model layer's read bytes as a line past the model's windows and top-k (struct
 * dcp_perf_reads): three contexts a period of the group apart determine it, two more
 * check it. */
static void read_line(const struct dcp_perf_model *m, const struct dcp_model_kv *kv, struct dcp_perf_reads *r)
{
    memset(r, 0, sizeof(*r));
    uint64_t knee = 1;
    for (uint32_t i = 0; i < m->num_spans; i++)
        knee = DCP_MAX(knee, (uint64_t)m->spans[i].limit);
    const uint64_t n = kv->dcp, il = m->interleave, period = n * il;
    const uint64_t p1 = (knee / period + 1) * period, p2 = p1 + 1, p3 = p1 + period;
    const double f1 = dcp_model_kv_read_bytes(m->cfg, kv, p1), f2 = dcp_model_kv_read_bytes(m->cfg, kv, p2);
    const double f3 = dcp_model_kv_read_bytes(m->cfg, kv, p3);
    if (n == 1) {
        r->a = f2 - f1; /* shard = context: one slope */
    } else {
        /* shard grows by 1 from p1 to p2 and by I from p1 to p3 (the context by 1 and n I). */
        r->a = ((double)period * (f2 - f1) - (f3 - f1)) / ((double)il * (double)(n - 1));
        r->b = (f2 - f1) - r->a;
    }
    r->e = f1 - r->a * shard_of(m, kv, p1) - r->b * (double)p1;
    r->from = p1;
    const uint64_t checks[2] = {3 * p1 + 7, p1 + period / 2 + 1};
    r->affine = true;
    for (int i = 0; i < 2; i++) {
        const double want = dcp_model_kv_read_bytes(m->cfg, kv, checks[i]);
        r->affine &= fabs(line_at(m, kv, r, checks[i]) - want) <= 1e-9 * fabs(want) + 1e-6;
    }
}

int dcp_perf_model_init(const dcp_deployment *dep, uint32_t dcp, const struct dcp_perf_params *p,
                        struct dcp_perf_model *m)
{
    dcp_clear_error();
    if (!dep || !p || !m)
        return dcp_error(DCP_EINVAL, "perf_model_init: NULL argument");
    memset(m, 0, sizeof(*m));
    int st = check_params(p);
    if (st)
        return st;
    struct dcp_config cfg = *dcp_deployment_config(dep);
    const struct dcp_model_config *mc = &cfg.model;
    const struct dcp_hardware_config *hw = &cfg.hardware;
    if (cpu_deployment(hw->gpu))
        return dcp_error(DCP_EINVAL, "a CPU deployment (hardware.gpu '%s'): the performance model prices GPU "
                         "steps only; give a GPU deployment (configs/*.yaml)", hw->gpu);
    if (!(hw->flops_bf16 > 0))
        return dcp_error(DCP_EINVAL, "no hardware.tflops_bf16 (dense bf16 tensor TFLOP/s per GPU): the performance "
                         "model needs the GPU's peaks");
    if (!mc->hidden_size)
        return dcp_error(DCP_EINVAL, "no model.hidden_size: the performance model needs it to price the TP "
                         "all-reduces");
    struct dcp_rank_geometry g;
    if (dcp_rank_geometry_init(mc, cfg.parallel.tp, dcp, &g))
        return dcp_error(DCP_EINVAL, "dcp=%u: %s", dcp, dcp_last_error());

    m->params = *p;
    m->tp = cfg.parallel.tp;
    m->dcp = dcp;
    m->layers = mc->num_layers;
    m->interleave = cfg.parallel.interleave;
    m->hbm_bandwidth = hw->hbm_bandwidth;
    m->gemm_peak = gemm_peak(hw, mc->weight_dtype, &m->gemm_dtype);
    m->attention_peak = hw->flops_bf16;
    m->nvlink_bandwidth = hw->link_bandwidth;
    m->network_bandwidth = hw->internode_bandwidth;
    m->collective_latency = hw->collective_latency;
    m->network_hop_latency = hw->internode_latency;
    m->peer_latency = hw->peer_latency;

    /* Weights. P = dense + E e and A = dense + k e give one routed expert's
     * parameters e (all layers) and the part every token reads. */
    const double wb = dcp_weight_dtype_bytes(mc->weight_dtype), P = mc->num_params;
    if (mc->experts > mc->experts_per_token && mc->experts_per_token && mc->active_params > 0 &&
        mc->active_params < P) {
        const double e = (P - mc->active_params) / (double)(mc->experts - mc->experts_per_token);
        m->experts = mc->experts;
        m->experts_per_token = mc->experts_per_token;
        m->active_params = mc->active_params;
        m->expert_weight_bytes = e * wb / m->tp;
        m->dense_weight_bytes = DCP_MAX(mc->active_params - mc->experts_per_token * e, 0.0) * wb / m->tp;
    } else {
        m->active_params = P;
        m->dense_weight_bytes = P * wb / m->tp;
    }

    /* KV per GPU by layer kind: the model layer's figures (runtime/model). */
    m->cfg = dcp_deployment_config(dep);
    if (dcp_model_kv_init(m->cfg, dcp, &m->kv) || dcp_model_kv_init(m->cfg, 1, &m->kv_tp))
        return dcp_error(DCP_EINVAL, "dcp=%u: %s", dcp, dcp_last_error());
    m->gather_layers = m->kv.layers[DCP_LAYER_FULL] + m->kv.layers[DCP_LAYER_SPARSE_TOPK];
    attention_spans(mc, m);
    read_line(m, &m->kv, &m->reads);
    read_line(m, &m->kv_tp, &m->reads_tp);
    /* Attention arithmetic per GPU and attended token. Decode: the TP rank's H_l heads
     * over the context, or (DCP) the group's dcp x H_l gathered heads over 1/dcp of
     * it: the same FLOPs per global context token. MLA decodes in the absorbed form
     * (scores over kv_lora_rank + rope, values of kv_lora_rank) and prefills in the
     * expanded one (qk_nope + rope, then v_head_dim). */
    m->decode_flops = 2.0 * g.q_heads_per_rank * (double)(g.qk_dim + g.v_dim);
    m->prefill_flops = mc->attention == DCP_ATTN_MLA
                           ? 2.0 * g.q_heads_per_rank * (double)(mc->qk_nope_head_dim + mc->rope_dim + mc->v_head_dim)
                           : m->decode_flops;
    m->allreduce_bytes = m->tp > 1 ? 2.0 * (m->tp - 1) / m->tp * mc->hidden_size * p->activation_bytes : 0;
    m->tp_link = m->tp > hw->gpus_per_node ? DCP_PERF_LINK_NETWORK : DCP_PERF_LINK_NVLINK;
    m->dcp_link = group_spans_nodes(hw, m->tp, dcp) ? DCP_PERF_LINK_NETWORK : DCP_PERF_LINK_NVLINK;
    if ((m->tp_link == DCP_PERF_LINK_NETWORK || m->dcp_link == DCP_PERF_LINK_NETWORK) && !(m->network_bandwidth > 0))
        return dcp_error(DCP_EINVAL, "a %s group spans nodes of %u GPUs, so its collectives cross the network: "
                         "give hardware.internode_gbps (network bandwidth per GPU per direction)",
                         m->tp_link == DCP_PERF_LINK_NETWORK ? "TP" : "DCP", hw->gpus_per_node);

    /* DCP's exchanges: the plan's communication of the same config with this dcp. */
    if (dcp > 1) {
        cfg.parallel.dcp = dcp;
        struct dcp_plan plan;
        if (!dcp_plan_from_config(&cfg, &plan))
            return dcp_error(DCP_EINVAL, "perf_model_init: the plan of dcp=%u does not fit 64 bits", dcp);
        dcp_rows(&plan.comm, m);
        m->gather_bytes_per_token = (double)(dcp - 1) / dcp * (double)m->kv_tp.page_token_bytes;
    }
    return DCP_OK;
}

/* ---- pricing ------------------------------------------------------------------------- */

static const struct dcp_perf_collective_fit *find_fit(const struct dcp_perf_params *p, enum dcp_plan_comm_kind kind,
                                                      uint32_t ranks, enum dcp_perf_link link)
{
    for (uint32_t i = 0; i < p->num_collective_fits; i++) {
        const struct dcp_perf_collective_fit *f = &p->collective_fits[i];
        if (f->kind == kind && f->ranks == ranks && f->link == link)
            return f;
    }
    return NULL;
}

/* Ring steps of a collective among n ranks (its latency is one hop per step). */
static double ring_steps(enum dcp_plan_comm_kind kind, uint32_t n)
{
    switch (kind) {
    case DCP_PLAN_COMM_ALL_REDUCE: return 2.0 * (n - 1);
    default: return n - 1;
    }
}

double dcp_perf_collective_time(const struct dcp_perf_model *m, enum dcp_plan_comm_kind kind, uint32_t ranks,
                                enum dcp_perf_link link, double bytes, bool graph)
{
    if (!m || ranks < 2)
        return 0;
    const double eager = graph ? 0 : m->params.eager_collective;
    const struct dcp_perf_collective_fit *f = find_fit(&m->params, kind, ranks, link);
    if (f)
        return f->alpha + bytes / f->beta + eager;
    const bool net = link == DCP_PERF_LINK_NETWORK;
    const double hop = net ? m->network_hop_latency : m->params.hop_latency;
    const double bw = (net ? m->network_bandwidth : m->nvlink_bandwidth) * m->params.link_efficiency;
    /* One round of one-sided stores with its epoch (comm p2p): its own fixed cost, no ring. */
    const double fixed = kind == DCP_PLAN_COMM_PEER_WRITE ? m->peer_latency
                                                          : m->collective_latency + ring_steps(kind, ranks) * hop;
    const double ring = fixed + (bw > 0 ? bytes / bw : 0) + eager;
    if (kind != DCP_PLAN_COMM_ALL_REDUCE || net || !(m->params.oneshot_latency > 0) || !(bw > 0))
        return ring;
    /* One-shot: every rank reads the n - 1 peers' whole buffers S = bytes n / (2 (n - 1))
     * over NVLink and sums them in one kernel (no ring steps, no NCCL call). */
    const double peers = (double)(ranks - 1) * bytes * ranks / (2.0 * (ranks - 1));
    return DCP_MIN(ring, m->params.oneshot_latency + peers / bw);
}

/* What a step does, summed over its entries. Decode and prefill attention are
 * separate kernels (engines call a decode kernel for the decode rows and a prefill
 * kernel for the chunks, one after the other): [0] decode, [1] prefill. */
struct work {
    double tokens;          /* through the GEMMs */
    double kv_bytes[2];     /* KV bytes read per GPU, all layers */
    double attn_flops[2];   /* attention FLOPs per GPU, all layers */
    double dcp_tokens;      /* query tokens through DCP's exchanges */
    uint32_t gathers;       /* prefill chunks that gather their context's KV */
    double gather_seconds;  /* their all-gathers, all layers */
    uint32_t sequences[2];  /* sequences whose KV each kernel reads */
    bool prefill;           /* some entry prefills: the step runs eagerly */
};

/* KV bytes a GPU reads for one sequence of `context` tokens with the layer kinds' KV
 * kv (m->kv or m->kv_tp): the model layer's figure, from its line where it holds. */
static double kv_read(const struct dcp_perf_model *m, const struct dcp_model_kv *kv, uint64_t context)
{
    const struct dcp_perf_reads *r = kv == &m->kv ? &m->reads : &m->reads_tp;
    if (r->affine && context >= r->from)
        return line_at(m, kv, r, context);
    return dcp_model_kv_read_bytes(m->cfg, kv, context);
}

double dcp_perf_kv_read_bytes(const struct dcp_perf_model *m, uint64_t context)
{
    return m ? kv_read(m, &m->kv, context) : 0;
}

double dcp_perf_kv_request_bytes(const struct dcp_perf_model *m, uint64_t context)
{
    return m ? dcp_model_kv_request_bytes(m->cfg, &m->kv, context) : 0;
}

/* Layer-tokens a query token at position `context` attends over the attention layers:
 * all of the context (full), at most the window, or the top-k. */
static double attended(const struct dcp_perf_model *m, double context)
{
    double t = 0;
    for (uint32_t i = 0; i < m->num_spans; i++)
        t += m->spans[i].layers * (m->spans[i].limit ? DCP_MIN((double)m->spans[i].limit, context) : context);
    return t;
}

static void add_decode(const struct dcp_perf_model *m, struct work *w, double n, uint64_t context, uint32_t q_len)
{
    w->tokens += n * q_len;
    w->kv_bytes[0] += n * kv_read(m, &m->kv, context);
    w->attn_flops[0] += n * q_len * attended(m, (double)context) * m->decode_flops;
    w->dcp_tokens += n * q_len;
}

/* One prefill chunk of q tokens after `start` computed ones. With DCP the cached
 * context is sharded: the chunk either gathers it (one all-gather of its KV per
 * layer; then every rank attends its own heads over the whole context, as TP does)
 * or gathers its queries and merges like decode tokens; the cheaper one is taken. */
static void add_prefill(const struct dcp_perf_model *m, struct work *w, uint64_t start, uint32_t q)
{
    /* A chunk token attends on average up to the middle of the chunk past start. */
    w->tokens += q;
    w->attn_flops[1] += (double)q * attended(m, (double)start + (double)(q + 1) / 2) * m->prefill_flops;
    const double own = kv_read(m, &m->kv, start + q);
    if (m->dcp == 1 || start == 0 || !m->gather_layers) {
        w->kv_bytes[1] += own;
        return;
    }
    const double hbm = m->hbm_bandwidth * m->params.kv_efficiency;
    double q_gather = own / hbm;
    for (uint32_t i = 0; i < m->num_rows; i++)
        q_gather += m->rows[i].layers * dcp_perf_collective_time(m, m->rows[i].kind, m->rows[i].ranks, m->dcp_link,
                                                                 q * m->rows[i].bytes, false);
    const double per_layer = (double)start * m->gather_bytes_per_token / m->gather_layers;
    const double gathered = kv_read(m, &m->kv_tp, start + q);
    const double gather_comm =
        m->gather_layers * dcp_perf_collective_time(m, DCP_PLAN_COMM_ALL_GATHER, m->dcp, m->dcp_link, per_layer, false);
    if (gather_comm + gathered / hbm <= q_gather) {
        w->gathers++;
        w->gather_seconds += gather_comm;
        w->kv_bytes[1] += gathered;
    } else {
        w->dcp_tokens += q;
        w->kv_bytes[1] += own;
    }
}

static void price(const struct dcp_perf_model *m, const struct work *w, struct dcp_perf_step *t)
{
    const struct dcp_perf_params *p = &m->params;
    memset(t, 0, sizeof(*t));
    if (w->tokens <= 0)
        return;
    t->graph = !w->prefill && p->cuda_graphs;
    /* Distinct experts the step's tokens route to per layer, each token picking
     * experts_per_token of them uniformly. */
    if (m->experts)
        t->experts_touched = m->experts * (1.0 - pow(1.0 - (double)m->experts_per_token / m->experts, w->tokens));
    t->weights = (m->dense_weight_bytes + t->experts_touched * m->expert_weight_bytes) /
                 (m->hbm_bandwidth * p->weight_efficiency);
    t->gemm = 2.0 * m->active_params * w->tokens / m->tp / (m->gemm_peak * p->gemm_efficiency);
    t->linear = DCP_MAX(t->weights, t->gemm);
    /* Per phase (decode rows, prefill chunks), one attention call per layer reads
     * every sequence's KV (a batched kernel) and is bound by its bytes or its FLOPs;
     * the two kernels run one after the other. */
    for (int k = 0; k < 2; k++) {
        const double kv = w->kv_bytes[k] / (m->hbm_bandwidth * p->kv_efficiency) +
                          (w->sequences[k] ? p->attention_call * m->layers : 0);
        const double fl = w->attn_flops[k] / (m->attention_peak * p->attention_efficiency);
        t->kv += kv;
        t->attention_flops += fl;
        t->phase_attention[k] = DCP_MAX(kv, fl);
    }
    t->attention = t->phase_attention[0] + t->phase_attention[1];
    /* Two all-reduces per layer (after attention and after the MLP/MoE). */
    t->tp_comm = 2.0 * m->layers *
                 dcp_perf_collective_time(m, DCP_PLAN_COMM_ALL_REDUCE, m->tp, m->tp_link, w->tokens * m->allreduce_bytes,
                                          t->graph);
    if (w->dcp_tokens > 0)
        for (uint32_t i = 0; i < m->num_rows; i++)
            t->dcp_comm += m->rows[i].layers * dcp_perf_collective_time(m, m->rows[i].kind, m->rows[i].ranks,
                                                                        m->dcp_link, w->dcp_tokens * m->rows[i].bytes,
                                                                        t->graph);
    t->dcp_comm += w->gather_seconds;
    t->gathered_chunks = w->gathers;
    t->overhead = (double)p->kernels_per_layer * m->layers * (t->graph ? p->kernel_gap_graph : p->kernel_gap_eager);
    t->total = t->linear + t->attention + t->tp_comm + t->dcp_comm + t->overhead;
}

void dcp_perf_step_time(const struct dcp_perf_model *m, const struct dcp_sched_step *s, struct dcp_perf_step *out)
{
    struct work w = {0};
    for (uint32_t i = 0; i < s->num_entries; i++) {
        const struct dcp_sched_entry *e = &s->entries[i];
        if (e->loaded)
            continue;
        w.sequences[e->decode ? 0 : 1]++;
        if (e->decode) {
            add_decode(m, &w, 1, e->start + e->q_len, e->q_len);
        } else {
            w.prefill = true;
            add_prefill(m, &w, e->start, e->q_len);
        }
    }
    price(m, &w, out);
}

void dcp_perf_decode_time(const struct dcp_perf_model *m, uint64_t batch, uint64_t context, uint32_t q_len,
                          struct dcp_perf_step *out)
{
    struct work w = {0};
    if (batch && q_len) {
        w.sequences[0] = (uint32_t)DCP_MIN(batch, (uint64_t)UINT32_MAX);
        add_decode(m, &w, (double)batch, context, q_len);
    }
    price(m, &w, out);
}

double dcp_perf_decode_rate(const struct dcp_perf_model *m, uint64_t fits, uint64_t clients, uint64_t context,
                            uint32_t q_len)
{
    const uint64_t batch = DCP_MIN(fits, clients);
    if (!m || !batch || !q_len)
        return 0;
    struct dcp_perf_step t;
    dcp_perf_decode_time(m, batch, context, q_len, &t);
    return t.total > 0 ? (double)batch / t.total / m->tp : 0;
}

uint32_t dcp_perf_wins_from(const struct dcp_perf_model *a, uint64_t a_fits, const struct dcp_perf_model *b,
                            uint64_t b_fits, uint64_t context, uint32_t q_len, uint32_t max_clients)
{
    uint32_t from = 0;
    for (uint32_t c = max_clients; c >= 1; c--) {
        if (!(dcp_perf_decode_rate(b, b_fits, c, context, q_len) > dcp_perf_decode_rate(a, a_fits, c, context, q_len)))
            break;
        from = c;
    }
    return from;
}
