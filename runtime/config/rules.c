/*
 * rules.c: the validity rules across keys (docs/design.md §5 plus memory and
 * hardware sanity), shared by the YAML loader and dcp_deployment_from_config().
 *
 * Each rule names the keys it reads; it runs only when none of them is bad, so a
 * key that failed to parse yields one error, not a cascade. Every message says
 * which rule failed and lists what would be valid.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config/config_internal.h"
#include "dcp/geometry.h"
#include "dcp/serve.h"
#include "model/model.h"
#include "util/file.h"

struct rule_ctx {
    struct config_report *report;
    const struct dcp_config *cfg;
    unsigned char *state;
    config_locate_fn locate;
    const void *locate_user;
};

/* Most divisors any 32-bit number has is 1344. */
enum { MAX_DIVISORS = 1536 };

static unsigned char *key_state(unsigned char *state, const char *path)
{
    return &state[config_key_index(config_key_find(path))];
}

static bool state_ok(unsigned char *state, const char *path)
{
    return *key_state(state, path) != CONFIG_BAD;
}

static bool key_ok(const struct rule_ctx *c, const char *path) { return state_ok(c->state, path); }

/* Reports a rule failure at the position of the key it blames. */
static void DCP_PRINTF(4, 5) rule_report(struct rule_ctx *c, enum dcp_diag_severity severity,
                                         const char *path, const char *fmt, ...)
{
    const struct config_key *k = config_key_find(path);
    const struct config_pos pos = c->locate ? c->locate(c->locate_user, k) : (struct config_pos){0, 0};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    config_report_add(c->report, severity, pos, path, "%s", msg);
}

/* Divisors of n (n >= 1) that are <= limit, ascending, at most cap of them. */
static size_t divisors(uint64_t n, uint64_t limit, uint64_t *out, size_t cap)
{
    size_t count = 0;
    uint64_t d = 1;
    for (; d <= n / d; d++)
        if (n % d == 0 && d <= limit && count < cap)
            out[count++] = d;
    /* The co-divisors n/d, ascending as d falls; skip the square root counted above. */
    while (d-- > 1)
        if (n % d == 0 && n / d != d && n / d <= limit && count < cap)
            out[count++] = n / d;
    return count;
}

/* "valid <what>: 1, 2, 4" for the divisors of n. */
static void add_valid_divisors(struct config_text *t, const char *what, uint64_t n)
{
    uint64_t values[MAX_DIVISORS];
    config_text_add(t, "valid %s: ", what);
    config_text_add_values(t, values, divisors(n, UINT64_MAX, values, MAX_DIVISORS));
}

static uint64_t total_gpus(const struct rule_ctx *c)
{
    if (!key_ok(c, "hardware.gpus_per_node") || !key_ok(c, "hardware.nodes"))
        return UINT64_MAX;
    return (uint64_t)c->cfg->hardware.gpus_per_node * c->cfg->hardware.nodes;
}

/*
 * TP sizes that split the model's heads (dcp_rank_geometry_init accepts them with
 * dcp 1: they divide query_heads, and divide kv_heads or are multiples of it) and
 * fit the GPUs. Needs attention, query_heads, kv_heads.
 */
static size_t valid_tp_values(const struct rule_ctx *c, uint64_t *out, size_t cap)
{
    const struct dcp_model_config *m = &c->cfg->model;
    uint64_t all[MAX_DIVISORS];
    const size_t n = divisors(m->num_q_heads, total_gpus(c), all, MAX_DIVISORS);
    size_t count = 0;
    for (size_t i = 0; i < n && count < cap; i++) {
        struct dcp_rank_geometry g;
        if (all[i] <= UINT32_MAX && dcp_rank_geometry_init(m, (uint32_t)all[i], 1, &g) == DCP_OK)
            out[count++] = all[i];
    }
    return count;
}

static void add_valid_tp(const struct rule_ctx *c, struct config_text *t)
{
    uint64_t values[MAX_DIVISORS];
    config_text_add(t, "; valid tp: ");
    config_text_add_values(t, values, valid_tp_values(c, values, MAX_DIVISORS));
}

/* ---- The rules ----------------------------------------------------------- */

/* kv_heads must suit the attention kind: MLA 1, MHA query_heads, GQA a divisor of query_heads. */
static void rule_kv_heads(struct rule_ctx *c)
{
    const struct dcp_model_config *m = &c->cfg->model;
    if (m->attention == DCP_ATTN_MLA && m->num_kv_heads != 1) {
        rule_report(c, DCP_DIAG_ERROR, "model.kv_heads",
                    "mla caches one latent vector per token for all heads; kv_heads must be 1, got %u",
                    m->num_kv_heads);
    } else if (m->attention == DCP_ATTN_MHA && m->num_kv_heads != m->num_q_heads) {
        rule_report(c, DCP_DIAG_ERROR, "model.kv_heads",
                    "mha has one KV head per query head; kv_heads must equal query_heads=%u, got %u "
                    "(use attention: gqa for grouped KV heads)",
                    m->num_q_heads, m->num_kv_heads);
    } else if (m->num_q_heads % m->num_kv_heads != 0) {
        struct config_text t = {0};
        add_valid_divisors(&t, "kv_heads", m->num_q_heads);
        rule_report(c, DCP_DIAG_ERROR, "model.kv_heads",
                    "query_heads=%u is not a multiple of kv_heads=%u; %s", m->num_q_heads,
                    m->num_kv_heads, t.buf);
    } else {
        return;
    }
    /* Later rules would only repeat this in other words. */
    *key_state(c->state, "model.kv_heads") = CONFIG_BAD;
}

/*
 * The placement checks are dcp_rank_geometry_init's (include/dcp/geometry.h), the
 * one place the formulas live; these rules add where to look and what is valid.
 */

/* TP splits the query heads evenly, and the KV heads either evenly or into equal replicas. */
static void rule_tp_splits_heads(struct rule_ctx *c)
{
    struct dcp_rank_geometry g;
    if (dcp_rank_geometry_init(&c->cfg->model, c->cfg->parallel.tp, 1, &g) == DCP_OK)
        return;
    struct config_text t = {0};
    config_text_add(&t, "%s", dcp_last_error());
    add_valid_tp(c, &t);
    rule_report(c, DCP_DIAG_ERROR, "parallel.tp", "%s", t.buf);
}

/* A DCP group is a set of TP ranks holding the same KV: it must divide those replicas. */
static void rule_dcp_group(struct rule_ctx *c)
{
    const struct dcp_model_config *m = &c->cfg->model;
    const uint32_t tp = c->cfg->parallel.tp, dcp = c->cfg->parallel.dcp;
    struct dcp_rank_geometry g, with_dcp;
    if (dcp_rank_geometry_init(m, tp, 1, &g) != DCP_OK)
        return; /* a bad tp is rule_tp_splits_heads' to report */
    if (dcp_rank_geometry_init(m, tp, dcp, &with_dcp) == DCP_OK)
        return;
    struct config_text t = {0};
    config_text_add(&t, "%s; ", dcp_last_error());
    add_valid_divisors(&t, "dcp", g.kv_replicas);
    rule_report(c, DCP_DIAG_ERROR, "parallel.dcp", "%s", t.buf);
}

/* Interleave runs must tile a block: I <= B and B % I == 0. */
static void rule_interleave(struct rule_ctx *c)
{
    const uint32_t inter = c->cfg->parallel.interleave, block = c->cfg->memory.block_size;
    if (block % inter == 0)
        return;
    struct config_text t = {0};
    add_valid_divisors(&t, "interleave", block);
    rule_report(c, DCP_DIAG_ERROR, "parallel.interleave", "interleave=%u %s block_size=%u; %s", inter,
                inter > block ? "exceeds" : "does not divide", block, t.buf);
}

/* One model replica's TP ranks need that many GPUs. */
static void rule_tp_fits_gpus(struct rule_ctx *c)
{
    const struct dcp_hardware_config *h = &c->cfg->hardware;
    const uint64_t total = total_gpus(c);
    if (c->cfg->parallel.tp <= total)
        return;
    rule_report(c, DCP_DIAG_ERROR, "parallel.tp",
                "tp=%u needs %u GPUs but the hardware has %llu (gpus_per_node=%u x nodes=%u)",
                c->cfg->parallel.tp, c->cfg->parallel.tp, (unsigned long long)total,
                h->gpus_per_node, h->nodes);
}

/* Parameter counts the way people say them: 671B, 1.04T. */
static void add_count(struct config_text *t, double n)
{
    if (n >= 1e12)
        config_text_add(t, "%.4gT", n / 1e12);
    else if (n >= 1e9)
        config_text_add(t, "%.4gB", n / 1e9);
    else if (n >= 1e6)
        config_text_add(t, "%.4gM", n / 1e6);
    else
        config_text_add(t, "%.4g", n);
}

static double weight_share(const struct dcp_config *cfg, uint64_t tp)
{
    return cfg->model.num_params * dcp_weight_dtype_bytes(cfg->model.weight_dtype) / (double)tp;
}

/* "usable 126.9 GB (memory_gb=141 x gpu_fraction=0.9)" */
static void add_usable(struct config_text *t, const struct dcp_config *cfg)
{
    config_text_add(t, "usable %.1f GB (memory_gb=%g x gpu_fraction=%g)",
                    cfg->hardware.memory_bytes * cfg->memory.gpu_fraction / 1e9,
                    cfg->hardware.memory_bytes / 1e9, cfg->memory.gpu_fraction);
}

/* The smallest valid tp whose weight share fits, if the head layout is known. */
static void add_tp_that_fits(struct rule_ctx *c, struct config_text *t, double room)
{
    if (!key_ok(c, "model.attention") || !key_ok(c, "model.query_heads") ||
        !key_ok(c, "model.kv_heads"))
        return;
    uint64_t values[MAX_DIVISORS];
    const size_t n = valid_tp_values(c, values, MAX_DIVISORS);
    for (size_t i = 0; i < n; i++) {
        if (weight_share(c->cfg, values[i]) < room) {
            config_text_add(t, "; smallest tp that fits: %llu", (unsigned long long)values[i]);
            return;
        }
    }
    if (total_gpus(c) != UINT64_MAX)
        config_text_add(t, "; no valid tp up to %llu GPUs fits", (unsigned long long)total_gpus(c));
}

/* Each GPU's weight share plus the reserve must leave room for the KV cache. */
static void rule_weights_fit(struct rule_ctx *c)
{
    const struct dcp_config *cfg = c->cfg;
    struct dcp_kv_budget b;
    dcp_kv_budget_init(cfg, &b);
    const double usable = b.usable_bytes, reserve = b.reserve_bytes;
    const uint32_t tp = cfg->parallel.tp;
    struct config_text t = {0};
    if (reserve >= usable) {
        config_text_add(&t, "reserve_gb=%g leaves no memory for weights and KV cache: ", reserve / 1e9);
        add_usable(&t, cfg);
        rule_report(c, DCP_DIAG_ERROR, "memory.reserve_gb", "%s", t.buf);
        return;
    }
    if (b.weight_bytes < usable - reserve)
        return;
    config_text_add(&t, "weights do not fit: ");
    add_count(&t, cfg->model.num_params);
    config_text_add(&t, " parameters x %g bytes (%s) / tp=%u = %.1f GB per GPU, which with reserve %.1f GB leaves no room in ",
                    dcp_weight_dtype_bytes(cfg->model.weight_dtype),
                    dcp_weight_dtype_name(cfg->model.weight_dtype), tp, b.weight_bytes / 1e9,
                    reserve / 1e9);
    add_usable(&t, cfg);
    add_tp_that_fits(c, &t, usable - reserve);
    rule_report(c, DCP_DIAG_ERROR, "parallel.tp", "%s", t.buf);
}

/* The request trace must be a readable regular file now, not when a run is half done. */
static void rule_trace_readable(struct rule_ctx *c)
{
    const char *trace = c->cfg->workload.trace;
    if (!trace)
        return;
    const int fd = dcp_file_open(trace, "trace", DCP_TRACE_MAX_FILE_BYTES, 0);
    if (fd >= 0)
        close(fd);
    else
        rule_report(c, DCP_DIAG_ERROR, "workload.trace", "%s", dcp_last_error());
}

/* kv_scale only means something for a scaled (fp8) cache. */
static void rule_kv_scale_used(struct rule_ctx *c)
{
    const struct dcp_model_config *m = &c->cfg->model;
    if (m->kv_scale != 1.0 && !dcpk_dtype_scaled((uint32_t)m->kv_dtype))
        rule_report(c, DCP_DIAG_WARNING, "model.kv_scale",
                    "kv_scale=%g has no effect: kv_dtype is %s (only fp8_e4m3 is scaled)", m->kv_scale,
                    dcp_dtype_name(m->kv_dtype));
}

/* MoE fields (the performance model reads the experts a step touches from them): an
 * MoE model gives all four, a dense one none of experts_per_token and
 * active_parameters, and a token cannot use more experts or parameters than the
 * model has. */
static void rule_moe(struct rule_ctx *c)
{
    const struct dcp_model_config *m = &c->cfg->model;
    if (m->experts == 0) {
        if (m->experts_per_token || m->active_params > 0)
            rule_report(c, DCP_DIAG_ERROR, m->experts_per_token ? "model.experts_per_token" : "model.active_parameters",
                        "%s is given but experts is 0 (a dense model); an MoE model gives experts, "
                        "experts_per_token, active_parameters and hidden_size",
                        m->experts_per_token ? "experts_per_token" : "active_parameters");
        return;
    }
    struct config_text t = {0};
    if (!m->experts_per_token)
        config_text_add(&t, "%sexperts_per_token", t.len ? ", " : "");
    if (!(m->active_params > 0))
        config_text_add(&t, "%sactive_parameters", t.len ? ", " : "");
    if (!m->hidden_size)
        config_text_add(&t, "%shidden_size", t.len ? ", " : "");
    if (t.len)
        rule_report(c, DCP_DIAG_ERROR, "model.experts",
                    "an MoE model (experts=%u) must also give %s: without them every parameter would be "
                    "priced as read by every step", m->experts, t.buf);
    if (m->experts_per_token > m->experts)
        rule_report(c, DCP_DIAG_ERROR, "model.experts_per_token", "experts_per_token=%u exceeds experts=%u",
                    m->experts_per_token, m->experts);
    if (m->active_params > m->num_params)
        rule_report(c, DCP_DIAG_ERROR, "model.active_parameters",
                    "active_parameters=%g exceeds parameters=%g", m->active_params, m->num_params);
}

/* Nothing is planned past the model's context window. */
static void rule_context_window(struct rule_ctx *c)
{
    const uint64_t window = c->cfg->model.context_window;
    const struct dcp_workload_config *w = &c->cfg->workload;
    for (uint32_t i = 0; window && i < w->num_context_lengths; i++)
        if (w->context_lengths[i] > window) {
            rule_report(c, DCP_DIAG_ERROR, "workload.context_lengths",
                        "context length %llu exceeds the model's context_window=%llu tokens",
                        (unsigned long long)w->context_lengths[i], (unsigned long long)window);
            return;
        }
}

/* The merge after the value up-projection exists only where the output is a latent (MLA). */
static void rule_merge_after_uv(struct rule_ctx *c)
{
    const struct dcp_config *cfg = c->cfg;
    if (cfg->parallel.merge_after_uv && cfg->model.attention != DCP_ATTN_MLA)
        rule_report(c, DCP_DIAG_ERROR, "parallel.merge_after_uv",
                    "merge_after_uv applies to mla (it projects the latent output with W_UV before the merge); "
                    "%s outputs are already values: set it to false",
                    dcp_attention_kind_name(cfg->model.attention));
}

/* The layer kinds need attention somewhere, and the features they combine with. */
static void rule_layer_kinds(struct rule_ctx *c)
{
    const struct dcp_config *cfg = c->cfg;
    uint32_t count[DCP_LAYER_NONE + 1];
    dcp_model_count_layers(&cfg->model, cfg->model.num_layers, count);
    if (count[DCP_LAYER_NONE] == cfg->model.num_layers)
        rule_report(c, DCP_DIAG_ERROR, "model.layers",
                    "every one of the %u layers is none (KV-free): the deployment has no attention layer for "
                    "DCP to shard", cfg->model.num_layers);
    if (count[DCP_LAYER_SLIDING_WINDOW] && cfg->model.window_kv == DCP_WINDOW_KV_REPLICATED &&
        cfg->parallel.merge_after_uv && cfg->parallel.dcp > 1)
        rule_report(c, DCP_DIAG_ERROR, "parallel.merge_after_uv",
                    "merge_after_uv with replicated sliding-window layers (model.window_kv: replicated): those "
                    "layers are not merged, so nothing would project them; use window_kv: sharded or no "
                    "merge_after_uv");
}

static const struct config_rule {
    void (*check)(struct rule_ctx *c);
    const char *keys[8]; ///< Keys the rule reads; it is skipped if any is bad.
} rules[] = {
    {rule_kv_heads, {"model.attention", "model.query_heads", "model.kv_heads"}},
    {rule_tp_splits_heads, {"model.attention", "model.query_heads", "model.kv_heads", "parallel.tp"}},
    {rule_dcp_group, {"model.attention", "model.kv_heads", "parallel.tp", "parallel.dcp"}},
    {rule_interleave, {"parallel.interleave", "memory.block_size"}},
    {rule_tp_fits_gpus, {"parallel.tp", "hardware.gpus_per_node", "hardware.nodes"}},
    {rule_weights_fit,
     {"hardware.memory_gb", "memory.gpu_fraction", "memory.reserve_gb", "model.parameters",
      "model.weight_dtype", "parallel.tp"}},
    {rule_trace_readable, {"workload.trace"}},
    {rule_kv_scale_used, {"model.kv_scale", "model.kv_dtype"}},
    {rule_merge_after_uv, {"model.attention", "parallel.merge_after_uv"}},
    {rule_moe,
     {"model.experts", "model.experts_per_token", "model.active_parameters", "model.parameters", "model.hidden_size"}},
    {rule_context_window, {"model.context_window", "workload.context_lengths"}},
    {rule_layer_kinds, {"model.layers", "model.window_kv", "parallel.merge_after_uv", "parallel.dcp"}},
};

static bool rule_inputs_ok(const struct rule_ctx *c, const struct config_rule *rule)
{
    for (size_t i = 0; i < DCP_ARRAY_SIZE(rule->keys) && rule->keys[i]; i++)
        if (!key_ok(c, rule->keys[i]))
            return false;
    return true;
}

/* ---- Derived values ------------------------------------------------------ */

/* kv_heads left 0: MLA has one latent "head", MHA one per query head. */
static void resolve_kv_heads(struct dcp_config *cfg, unsigned char *state)
{
    struct dcp_model_config *m = &cfg->model;
    if (m->num_kv_heads != 0)
        return;
    const bool attn_ok = state_ok(state, "model.attention");
    if (attn_ok && m->attention == DCP_ATTN_MLA)
        m->num_kv_heads = 1;
    else if (attn_ok && m->attention == DCP_ATTN_MHA && state_ok(state, "model.query_heads"))
        m->num_kv_heads = m->num_q_heads;
    else
        *key_state(state, "model.kv_heads") = CONFIG_BAD;
}

/* softmax_scale left 0: 1/sqrt of the query/key dimension before absorption. */
static void resolve_softmax_scale(struct dcp_config *cfg, unsigned char *state)
{
    struct dcp_model_config *m = &cfg->model;
    if (m->softmax_scale != 0.0)
        return;
    const bool attn_ok = state_ok(state, "model.attention");
    if (attn_ok && m->attention == DCP_ATTN_MLA && state_ok(state, "model.qk_nope_head_dim") &&
        state_ok(state, "model.rope_dim"))
        m->softmax_scale = 1.0 / sqrt((double)m->qk_nope_head_dim + m->rope_dim);
    else if (attn_ok && m->attention != DCP_ATTN_MLA && state_ok(state, "model.head_dim") &&
             m->head_dim != 0)
        m->softmax_scale = 1.0 / sqrt((double)m->head_dim);
    else
        *key_state(state, "model.softmax_scale") = CONFIG_BAD;
}

void config_resolve_and_check(struct config_report *r, struct dcp_config *cfg,
                              unsigned char state[CONFIG_KEY_MAX], config_locate_fn locate,
                              const void *locate_user)
{
    resolve_kv_heads(cfg, state);
    resolve_softmax_scale(cfg, state);
    struct rule_ctx c = {
        .report = r, .cfg = cfg, .state = state, .locate = locate, .locate_user = locate_user,
    };
    for (size_t i = 0; i < DCP_ARRAY_SIZE(rules); i++)
        if (rule_inputs_ok(&c, &rules[i]))
            rules[i].check(&c);
}
