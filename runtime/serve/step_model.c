/* step_model.c: the step-time model that replaces kernels in simulation (terms in
 * docs/serving.md): weights and KV read from HBM, FLOPs, collectives. */
#include <math.h>
#include <string.h>

#include "dcp/plan.h"
#include "dcp/serve.h"
#include "util/util.h"

void dcp_step_model_default_params(struct dcp_step_model_params *p)
{
    *p = (struct dcp_step_model_params){
        .kv_efficiency = 0.6, .gpu_flops = 2.25e15, .flops_efficiency = 0.5, .step_overhead = 0,
    };
}

int dcp_step_model_init(const dcp_deployment *dep, uint32_t dcp, const struct dcp_step_model_params *p,
                        struct dcp_step_model *m)
{
    dcp_clear_error();
    if (!dep || !p || !m)
        return dcp_error(DCP_EINVAL, "step_model_init: NULL argument");
    memset(m, 0, sizeof(*m));
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    const struct dcp_model_config *mc = &cfg->model;
    if (dcp != 1 && dcp != cfg->parallel.dcp)
        return dcp_error(DCP_EINVAL, "step_model_init: dcp=%u: only 1 or the deployment's %u", dcp,
                         cfg->parallel.dcp);
    if (!(p->kv_efficiency > 0 && p->kv_efficiency <= 1) || !(p->gpu_flops > 0) ||
        !(p->flops_efficiency > 0 && p->flops_efficiency <= 1) || !(p->step_overhead >= 0))
        return dcp_error(DCP_EINVAL, "step_model_init: bad parameters (kv_efficiency %g, gpu_flops %g,"
                         " flops_efficiency %g, step_overhead %g)", p->kv_efficiency, p->gpu_flops,
                         p->flops_efficiency, p->step_overhead);
    struct dcp_plan plan;
    int st = dcp_plan_compute(dep, &plan);
    if (st)
        return st;
    const struct dcp_plan_layout *lay = dcp == 1 ? &plan.baseline : &plan.dcp;
    m->params = *p;
    m->tp = cfg->parallel.tp;
    m->dcp = dcp;
    m->layers = mc->num_layers;
    m->hbm_bandwidth = cfg->hardware.hbm_bandwidth;
    m->link_bandwidth = cfg->hardware.link_bandwidth;
    m->collective_latency = cfg->hardware.collective_latency;
    m->kv_bytes_per_token = lay->kv_bytes_per_token;

    /* Weights: P = dense + E e and A = dense + k e give one expert's parameters e
     * (all layers) and the part every token reads. */
    const double wb = dcp_weight_dtype_bytes(mc->weight_dtype), P = mc->num_params;
    const double A = mc->active_params > 0 ? mc->active_params : P;
    m->active_params = A;
    if (mc->experts && mc->experts_per_token && mc->experts > mc->experts_per_token && A < P) {
        const double e = (P - A) / (double)(mc->experts - mc->experts_per_token);
        m->experts = mc->experts;
        m->experts_per_token = mc->experts_per_token;
        m->expert_weight_bytes = e * wb / m->tp;
        m->dense_weight_bytes = DCP_MAX(A - mc->experts_per_token * e, 0.0) * wb / m->tp;
    } else {
        m->dense_weight_bytes = P * wb / m->tp;
    }

    /* Attention FLOPs per query token per context token: scores over qk_dim and the
     * weighted sum over v_dim for every head; a GPU does its share of the heads (with
     * DCP: all gathered heads over 1/dcp of the tokens, the same amount). */
    uint32_t qk, v;
    dcp_model_attention_dims(mc, &qk, &v);
    m->attn_flops_per_ctx = 2.0 * mc->num_q_heads * (double)(qk + v) * mc->num_layers / m->tp;
    /* Prefill of MLA runs in the expanded form (per head: qk_nope + rope for scores,
     * qk_nope_head_dim as the value size, as in DeepSeek-V3 and Kimi K2), which is
     * cheaper for many query tokens than the absorbed form decode uses. */
    m->prefill_attn_flops_per_ctx = m->attn_flops_per_ctx;
    if (mc->attention == DCP_ATTN_MLA)
        m->prefill_attn_flops_per_ctx = 2.0 * mc->num_q_heads *
                                        (double)(mc->qk_nope_head_dim + mc->rope_dim + mc->qk_nope_head_dim) *
                                        mc->num_layers / m->tp;
    if (dcp > 1) {
        m->dcp_comm_bytes = plan.comm.total_send;
        m->dcp_collectives = plan.comm.collectives;
    }
    m->hidden_bytes = 2.0 * mc->hidden_size; /* bf16 activations */
    return DCP_OK;
}

void dcp_step_model_time(const struct dcp_step_model *m, const struct dcp_sched_step *s, struct dcp_step_time *t)
{
    memset(t, 0, sizeof(*t));
    const double T = (double)(s->decode_tokens + s->prefill_tokens);
    if (T <= 0)
        return;
    /* Expected distinct experts the step's tokens route to, per layer, if each token
     * picks experts_per_token of the experts uniformly. */
    if (m->experts) {
        const double miss = pow(1.0 - (double)m->experts_per_token / m->experts, T);
        t->experts_touched = m->experts * (1.0 - miss);
    }
    t->weights = (m->dense_weight_bytes + t->experts_touched * m->expert_weight_bytes) / m->hbm_bandwidth;
    /* Every sequence of the step reads its whole context once (decode tokens of one
     * sequence share the read; a prefill chunk reads the cached prefix once). */
    const double ctx = (double)(s->decode_context + s->prefill_context);
    t->kv = ctx * m->kv_bytes_per_token / (m->hbm_bandwidth * m->params.kv_efficiency);
    /* FLOPs: 2 per active parameter per token (split over tp), plus attention. */
    const double decode_attn = s->num_decode ? (double)s->decode_context * (double)s->decode_tokens / s->num_decode : 0;
    const double flops = 2.0 * m->active_params * T / m->tp + m->attn_flops_per_ctx * decode_attn +
                         m->prefill_attn_flops_per_ctx * s->prefill_attention;
    t->compute = flops / (m->params.gpu_flops * m->params.flops_efficiency);
    /* Per layer: two TP all-reduces of the activations (ring: 2 (tp-1)/tp of the bytes),
     * and DCP's collectives (Q gather, output merge). */
    double per_layer = 0;
    if (m->tp > 1)
        per_layer += 2 * (m->collective_latency + 2.0 * (m->tp - 1) / m->tp * T * m->hidden_bytes / m->link_bandwidth);
    if (m->dcp > 1)
        per_layer += m->dcp_collectives * m->collective_latency + T * m->dcp_comm_bytes / m->link_bandwidth;
    t->comm = per_layer * m->layers;
    t->total = DCP_MAX(t->weights + t->kv, t->compute) + t->comm + m->params.step_overhead;
}
