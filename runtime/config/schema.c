/*
 * schema.c: every key of a deployment, in one table, and the table-driven parts
 * of loading that do not depend on YAML: defaults, storing values, range and
 * choice checks, and the field checks of a filled struct.
 */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

#define ALL CONFIG_ATTN_ALL
#define HEADS CONFIG_ATTN_HEADS
#define MLA CONFIG_ATTN(DCP_ATTN_MLA)
#define GQA CONFIG_ATTN(DCP_ATTN_GQA)

/* Field location of a struct dcp_config member. */
#define FIELD(f) .offset = offsetof(struct dcp_config, f), .size = sizeof(((struct dcp_config *)0)->f)

#define SECTION(p, req) {.path = (p), .kind = CONFIG_SECTION, .required = (req), .applies = ALL}
#define STRING(p, f, req) {.path = (p), .kind = CONFIG_STRING, FIELD(f), .required = (req), .applies = ALL}
/* An integer key; lo/hi inclusive. */
#define INT(p, f, req, app, d, lo, hi, ...) \
    {.path = (p), .kind = CONFIG_INT, FIELD(f), .required = (req), .applies = (app), \
     .def = (d), .imin = (lo), .imax = (hi), __VA_ARGS__}
/* A number key in YAML units; the struct holds it times sc. */
#define NUMBER(p, f, req, d, lo, hi, sc, ...) \
    {.path = (p), .kind = CONFIG_NUMBER, FIELD(f), .required = (req), .applies = ALL, \
     .def = (d), .min = (lo), .max = (hi), .scale = (sc), __VA_ARGS__}
/* An enum key with a name for each value; n names the first n values only. */
#define ENUM_N(p, f, d, names, n) \
    {.path = (p), .kind = CONFIG_ENUM, FIELD(f), .applies = ALL, .def = (d), \
     .choices = (names), .num_choices = (n)}
#define ENUM(p, f, d, names) ENUM_N(p, f, d, names, DCP_ARRAY_SIZE(names))
#define BOOL(p, f, d) {.path = (p), .kind = CONFIG_BOOL, FIELD(f), .applies = ALL, .def = (d)}

const struct config_key config_keys[] = {
    SECTION("model", ALL),
    STRING("model.name", model.name, ALL),
    {.path = "model.attention", .kind = CONFIG_ENUM, FIELD(model.attention), .required = ALL,
     .applies = ALL, .choices = config_attention_names, .num_choices = DCP_ARRAY_SIZE(config_attention_names)},
    {.path = "model.layers", .kind = CONFIG_LAYERS, FIELD(model.num_layers), .required = ALL, .applies = ALL,
     .count_offset = offsetof(struct dcp_config, model.num_layer_kinds), .max_count = DCP_MAX_LAYER_PATTERN,
     .imin = 1, .imax = 4096},
    INT("model.query_heads", model.num_q_heads, ALL, ALL, 0, 1, 65536),
    /* MLA: 1 and MHA: query_heads when not given (CONFIG_DERIVED); rules.c checks them. */
    INT("model.kv_heads", model.num_kv_heads, GQA, ALL, 0, 1, 65536, .flags = CONFIG_DERIVED),
    INT("model.head_dim", model.head_dim, HEADS, HEADS, 0, 1, 1024),
    INT("model.kv_lora_rank", model.kv_lora_rank, 0, MLA, 512, 1, 4096),
    INT("model.rope_dim", model.rope_dim, 0, MLA, 64, 0, 1024),
    INT("model.qk_nope_head_dim", model.qk_nope_head_dim, 0, MLA, 128, 1, 4096),
    INT("model.v_head_dim", model.v_head_dim, 0, MLA, 128, 1, 4096),
    NUMBER("model.softmax_scale", model.softmax_scale, 0, 0, 0, 1e3, 1,
           .flags = CONFIG_DERIVED | CONFIG_MIN_OPEN),
    ENUM("model.kv_dtype", model.kv_dtype, DCP_DTYPE_BF16, config_dtype_names),
    NUMBER("model.kv_scale", model.kv_scale, 0, 1, 0, 1e9, 1, .flags = CONFIG_MIN_OPEN),
    {.path = "model.parameters", .kind = CONFIG_PARAM_COUNT, FIELD(model.num_params),
     .applies = ALL, .min = 0, .max = 1e16, .scale = 1},
    ENUM("model.weight_dtype", model.weight_dtype, DCP_WEIGHT_BF16,
         config_weight_dtype_names),
    INT("model.experts", model.experts, 0, ALL, 0, 0, 1u << 20),
    INT("model.experts_per_token", model.experts_per_token, 0, ALL, 0, 0, 1u << 20),
    {.path = "model.active_parameters", .kind = CONFIG_PARAM_COUNT, FIELD(model.active_params),
     .applies = ALL, .min = 0, .max = 1e16, .scale = 1},
    INT("model.hidden_size", model.hidden_size, 0, ALL, 0, 0, 1u << 20),
    INT("model.context_window", model.context_window, 0, ALL, 0, 0, DCP_MAX_CONTEXT_TOKENS),
    ENUM("model.window_kv", model.window_kv, DCP_WINDOW_KV_REPLICATED, config_window_kv_names),
    INT("model.index_heads", model.index_heads, 0, ALL, 64, 1, 1024),
    INT("model.index_head_dim", model.index_head_dim, 0, ALL, 128, 1, 4096),
    ENUM("model.index_dtype", model.index_dtype, DCP_DTYPE_FP8_E4M3, config_dtype_names),
    NUMBER("model.index_scale", model.index_scale, 0, 1, 0, 1e9, 1, .flags = CONFIG_MIN_OPEN),
    NUMBER("model.linear_state_mb", model.linear_state_bytes, 0, 0, 0, 1e6, 1e6),

    SECTION("hardware", ALL),
    STRING("hardware.gpu", hardware.gpu, ALL),
    NUMBER("hardware.memory_gb", hardware.memory_bytes, ALL, 0, 0, 1e5, 1e9,
           .flags = CONFIG_MIN_OPEN),
    NUMBER("hardware.hbm_gbps", hardware.hbm_bandwidth, ALL, 0, 0, 1e6, 1e9,
           .flags = CONFIG_MIN_OPEN),
    NUMBER("hardware.link_gbps", hardware.link_bandwidth, ALL, 0, 0, 1e6, 1e9,
           .flags = CONFIG_MIN_OPEN),
    NUMBER("hardware.collective_latency_us", hardware.collective_latency, 0, 12, 0, 1e6, 1e-6),
    INT("hardware.gpus_per_node", hardware.gpus_per_node, 0, ALL, 8, 1, 1024),
    INT("hardware.nodes", hardware.nodes, 0, ALL, 1, 1, 65536),
    NUMBER("hardware.tflops_bf16", hardware.flops_bf16, 0, 0, 0, 1e6, 1e12),
    NUMBER("hardware.tflops_fp8", hardware.flops_fp8, 0, 0, 0, 1e6, 1e12),
    NUMBER("hardware.tflops_fp4", hardware.flops_fp4, 0, 0, 0, 1e6, 1e12),
    NUMBER("hardware.internode_gbps", hardware.internode_bandwidth, 0, 0, 0, 1e6, 1e9),
    NUMBER("hardware.internode_latency_us", hardware.internode_latency, 0, 2.7, 0, 1e6, 1e-6),
    NUMBER("hardware.peer_latency_us", hardware.peer_latency, 0, 3.7, 0, 1e6, 1e-6),

    SECTION("parallel", ALL),
    INT("parallel.tp", parallel.tp, ALL, ALL, 0, 1, 65536),
    INT("parallel.dcp", parallel.dcp, 0, ALL, 1, 1, 65536),
    INT("parallel.interleave", parallel.interleave, 0, ALL, 1, 1, 1024),
    ENUM_N("parallel.comm", parallel.comm, DCP_COMM_A2A, dcp_merge_scheme_names, DCP_MERGE_SCHEME_COUNT),
    BOOL("parallel.replicate_q", parallel.replicate_q, 0),
    BOOL("parallel.merge_after_uv", parallel.merge_after_uv, 0),
    ENUM("parallel.comm_dtype", parallel.comm_dtype, DCP_WIRE_AUTO, config_wire_dtype_names),
    ENUM("parallel.sparse_index", parallel.sparse_index, DCP_SPARSE_INDEX_CALLER, config_sparse_index_names),

    SECTION("memory", 0),
    NUMBER("memory.gpu_fraction", memory.gpu_fraction, 0, 0.9, 0, 1, 1, .flags = CONFIG_MIN_OPEN),
    INT("memory.block_size", memory.block_size, 0, ALL, 64, 1, 1024, .flags = CONFIG_POW2),
    NUMBER("memory.reserve_gb", memory.reserve_bytes, 0, 4, 0, 1e5, 1e9),

    SECTION("workload", ALL),
    {.path = "workload.context_lengths", .kind = CONFIG_TOKEN_LIST, FIELD(workload.context_lengths),
     .count_offset = offsetof(struct dcp_config, workload.num_context_lengths),
     .max_count = DCP_MAX_CONTEXT_LENGTHS, .required = ALL, .applies = ALL, .imin = 1,
     .imax = DCP_MAX_CONTEXT_TOKENS},
    INT("workload.requests", workload.requests, 0, ALL, 64, 1, 1048576),
    INT("workload.decode_steps", workload.decode_steps, 0, ALL, 16, 1, 1048576),
    INT("workload.q_len", workload.q_len, 0, ALL, 1, 1, 64),
    INT("workload.seed", workload.seed, 0, ALL, 1, 0, UINT64_MAX),
    {.path = "workload.trace", .kind = CONFIG_PATH, FIELD(workload.trace), .applies = ALL},

    SECTION("runtime", 0),
    ENUM("runtime.backend", runtime.backend, DCP_BACKEND_AUTO, config_backend_names),
    SECTION("runtime.host", 0),
    INT("runtime.host.threads", runtime.host.threads, 0, ALL, 0, 0, 4096),
    NUMBER("runtime.host.memory_mb", runtime.host.memory_bytes, 0, 0, 0, 1e8, 1e6),
    SECTION("runtime.cuda", 0),
    ENUM("runtime.cuda.comm", runtime.cuda.comm, DCP_CUDA_COMM_AUTO, config_cuda_comm_names),
    INT("runtime.cuda.device", runtime.cuda.device, 0, ALL, 0, 0, 4095, .flags = CONFIG_SIGNED),
    NUMBER("runtime.cuda.nccl_timeout_s", runtime.cuda.nccl_timeout_s, 0, 120, 0, 86400, 1,
           .flags = CONFIG_MIN_OPEN),
    BOOL("runtime.cuda.vmm", runtime.cuda.use_vmm, 1),
    ENUM("runtime.cuda.precision", runtime.cuda.precision, DCP_CUDA_PRECISION_FAST, config_cuda_precision_names),
};

const size_t config_key_count = DCP_ARRAY_SIZE(config_keys);

_Static_assert(DCP_ARRAY_SIZE(config_keys) <= CONFIG_KEY_MAX, "grow CONFIG_KEY_MAX");
/* Enums are stored through an int. */
_Static_assert(sizeof(enum dcp_attention_kind) == sizeof(int) && sizeof(enum dcp_dtype) == sizeof(int) &&
                   sizeof(enum dcp_weight_dtype) == sizeof(int) &&
                   sizeof(enum dcp_comm_scheme) == sizeof(int) &&
                   sizeof(enum dcp_backend_kind) == sizeof(int) &&
                   sizeof(enum dcp_cuda_comm) == sizeof(int) && sizeof(enum dcp_cuda_precision) == sizeof(int),
               "enum fields are int-sized");

/* Keys outside the model: written by people who know other engines' options, so
 * they get the reason instead of "did you mean". */
static const struct {
    const char *path, *why;
} outside_model[] = {
    {"parallel.pp", "pipeline parallelism (pp) is outside the model: one instance is one TP group "
                    "(tp GPUs, with dcp sharding its KV cache); plan each pipeline stage as its own deployment, "
                    "or use a larger tp"},
    {"parallel.pipeline_parallel", "pipeline parallelism is outside the model: one instance is one TP group "
                                   "(tp GPUs, with dcp sharding its KV cache); use a larger tp"},
};

const char *config_key_outside_model(const char *path)
{
    for (size_t i = 0; i < DCP_ARRAY_SIZE(outside_model); i++)
        if (strcmp(outside_model[i].path, path) == 0)
            return outside_model[i].why;
    return NULL;
}

/* ---- Looking keys up ---------------------------------------------------- */

const char *config_key_name(const struct config_key *k)
{
    const char *dot = strrchr(k->path, '.');
    return dot ? dot + 1 : k->path;
}

size_t config_key_index(const struct config_key *k) { return (size_t)(k - config_keys); }

bool config_key_is_under(const struct config_key *k, const char *parent)
{
    const size_t n = strlen(parent);
    const char *leaf = config_key_name(k);
    if (n == 0)
        return leaf == k->path;
    return (size_t)(leaf - k->path) == n + 1 && memcmp(k->path, parent, n) == 0;
}

const struct config_key *config_key_find(const char *path)
{
    for (size_t i = 0; i < config_key_count; i++)
        if (strcmp(config_keys[i].path, path) == 0)
            return &config_keys[i];
    return NULL;
}

const struct config_key *config_key_child(const char *parent, const char *name, size_t len)
{
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        const char *leaf = config_key_name(k);
        if (strlen(leaf) == len && memcmp(leaf, name, len) == 0 && config_key_is_under(k, parent))
            return k;
    }
    return NULL;
}

const struct config_key *config_key_parent(const struct config_key *k)
{
    const char *leaf = config_key_name(k);
    if (leaf == k->path)
        return NULL;
    const size_t n = (size_t)(leaf - k->path) - 1;
    for (size_t i = 0; i < config_key_count; i++)
        if (strlen(config_keys[i].path) == n && memcmp(config_keys[i].path, k->path, n) == 0)
            return &config_keys[i];
    return NULL;
}

bool config_attention_valid(enum dcp_attention_kind attn)
{
    return (int)attn >= 0 && (size_t)attn < DCP_ARRAY_SIZE(config_attention_names);
}

bool config_key_required_for(const struct config_key *k, enum dcp_attention_kind attn)
{
    return (k->required & CONFIG_ATTN(attn)) != 0;
}

/* ---- Integer syntax ------------------------------------------------------ */

/* A decimal integer with an optional sign; negative values are out of range. */
enum config_int_parse config_parse_uint(const char *s, size_t len, uint64_t *out)
{
    size_t i = 0;
    bool negative = false;
    if (len > 0 && (s[0] == '+' || s[0] == '-')) {
        negative = s[0] == '-';
        i = 1;
    }
    if (i == len)
        return INT_SYNTAX;
    uint64_t v = 0;
    bool overflow = false;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return INT_SYNTAX;
        const unsigned digit = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            overflow = true;
        else
            v = v * 10 + digit;
    }
    if (overflow || (negative && v != 0))
        return INT_RANGE;
    *out = v;
    return INT_OK;
}

/* A token count: an integer with an optional binary suffix, k/K (1024) or M (1048576). */
enum config_int_parse config_parse_token_count(const char *s, size_t len, uint64_t *out)
{
    uint64_t mult = 1;
    if (len > 0 && (s[len - 1] == 'k' || s[len - 1] == 'K'))
        mult = 1024;
    else if (len > 0 && s[len - 1] == 'M')
        mult = 1024 * 1024;
    const enum config_int_parse p = config_parse_uint(s, mult == 1 ? len : len - 1, out);
    if (p != INT_OK)
        return p;
    if (*out > UINT64_MAX / mult)
        return INT_RANGE;
    *out *= mult;
    return INT_OK;
}

/* ---- Storing and loading field values ------------------------------------ */

static void *field_of(struct dcp_config *cfg, const struct config_key *k)
{
    return (char *)cfg + k->offset;
}

static const void *cfield_of(const struct dcp_config *cfg, const struct config_key *k)
{
    return (const char *)cfg + k->offset;
}

static double key_scale(const struct config_key *k) { return k->scale != 0 ? k->scale : 1.0; }

void config_store_int(struct dcp_config *cfg, const struct config_key *k, uint64_t u)
{
    void *f = field_of(cfg, k);
    if (k->kind == CONFIG_BOOL) {
        const bool b = u != 0;
        memcpy(f, &b, sizeof(b));
    } else if (k->kind == CONFIG_ENUM) {
        const int e = (int)u;
        memcpy(f, &e, sizeof(e));
    } else if (k->size == sizeof(uint64_t)) {
        memcpy(f, &u, sizeof(u));
    } else {
        /* 32-bit fields; a signed one only receives values up to INT32_MAX. */
        const uint32_t v = (uint32_t)u;
        memcpy(f, &v, sizeof(v));
    }
}

void config_store_number(struct dcp_config *cfg, const struct config_key *k, double yaml_value)
{
    const double v = yaml_value * key_scale(k);
    memcpy(field_of(cfg, k), &v, sizeof(v));
}

void config_store_string(struct dcp_config *cfg, const struct config_key *k, const char *s)
{
    memcpy(field_of(cfg, k), &s, sizeof(s));
}

/* An unsigned integer field of 4 or 8 bytes (a signed one comes back as its bit pattern). */
uint64_t config_load_uint(const struct dcp_config *cfg, const struct config_key *k)
{
    const void *f = cfield_of(cfg, k);
    if (k->size == sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, f, sizeof(v));
        return v;
    }
    uint32_t v;
    memcpy(&v, f, sizeof(v));
    return v;
}

int config_load_enum(const struct dcp_config *cfg, const struct config_key *k)
{
    int e;
    memcpy(&e, cfield_of(cfg, k), sizeof(e));
    return e;
}

double config_load_number(const struct dcp_config *cfg, const struct config_key *k)
{
    double v;
    memcpy(&v, cfield_of(cfg, k), sizeof(v));
    return v / key_scale(k);
}

const char *config_load_string(const struct dcp_config *cfg, const struct config_key *k)
{
    const char *s;
    memcpy(&s, cfield_of(cfg, k), sizeof(s));
    return s;
}

DCP_API void dcp_config_defaults(struct dcp_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        switch (k->kind) {
        case CONFIG_INT:
        case CONFIG_LAYERS: /* the count; no pattern (every layer full) */
        case CONFIG_ENUM:
        case CONFIG_BOOL: config_store_int(cfg, k, (uint64_t)k->def); break;
        case CONFIG_NUMBER:
        case CONFIG_PARAM_COUNT: config_store_number(cfg, k, k->def); break;
        case CONFIG_SECTION:
        case CONFIG_STRING:
        case CONFIG_PATH:
        case CONFIG_TOKEN_LIST: break; /* NULL / empty */
        }
    }
}

/* ---- Checking values ----------------------------------------------------- */

/* A number key's largest value in YAML units: its own bound, or what keeps the
 * stored value (memory_gb in bytes) finite. */
static double number_max(const struct config_key *k)
{
    return key_scale(k) > 1 ? DCP_MIN(k->max, DBL_MAX / key_scale(k)) : k->max;
}

/* The powers of two in [imin, imax] ("1, 2, 4, ..., 1024"). */
static void describe_powers_of_two(struct config_text *t, const struct config_key *k)
{
    uint64_t values[64];
    size_t n = 0;
    for (uint64_t p = 1; p && p <= k->imax; p <<= 1)
        if (p >= k->imin)
            values[n++] = p;
    config_text_add_values(t, values, n);
}

/* The valid values of a key in words: "1..1024", "> 0 and <= 1", "1, 2, 4, ..., 1024". */
static void describe_range(struct config_text *t, const struct config_key *k)
{
    if (k->kind == CONFIG_INT || k->kind == CONFIG_TOKEN_LIST || k->kind == CONFIG_LAYERS) {
        if (k->flags & CONFIG_POW2)
            describe_powers_of_two(t, k);
        else
            config_text_add(t, "%llu..%llu", (unsigned long long)k->imin,
                            (unsigned long long)k->imax);
        return;
    }
    config_text_add(t, "%s %g and <= %g", k->flags & CONFIG_MIN_OPEN ? ">" : ">=", k->min,
                    number_max(k));
}

static void report_range(struct config_report *r, const struct config_key *k, const char *name,
                         const char *path, struct config_pos pos, const char *shown)
{
    struct config_text valid = {0};
    describe_range(&valid, k);
    config_report_add(r, DCP_DIAG_ERROR, pos, path, "%s=%s is out of range; valid: %s", name, shown,
                      valid.buf);
}

void config_report_range(struct config_report *r, const struct config_key *k, const char *name,
                         const char *path, struct config_pos pos, const char *shown)
{
    report_range(r, k, name, path, pos, shown);
}

bool config_check_int(struct config_report *r, const struct config_key *k, const char *name,
                      const char *path, struct config_pos pos, uint64_t u, const char *shown)
{
    if (u < k->imin || u > k->imax) {
        config_report_range(r, k, name, path, pos, shown);
        return false;
    }
    if ((k->flags & CONFIG_POW2) && (u & (u - 1)) != 0) {
        struct config_text valid = {0};
        describe_powers_of_two(&valid, k);
        config_report_add(r, DCP_DIAG_ERROR, pos, path, "%s=%s is not a power of two; valid: %s",
                          name, shown, valid.buf);
        return false;
    }
    return true;
}

bool config_check_number(struct config_report *r, const struct config_key *k, const char *path,
                         struct config_pos pos, double yaml_value, const char *shown)
{
    /* Written so that NaN fails every comparison and is rejected. */
    const bool above_min = k->flags & CONFIG_MIN_OPEN ? yaml_value > k->min : yaml_value >= k->min;
    if (above_min && yaml_value <= number_max(k))
        return true;
    report_range(r, k, config_key_name(k), path, pos, shown);
    return false;
}

void config_report_choice(struct config_report *r, const struct config_key *k, const char *path,
                          struct config_pos pos, const char *shown, const char *near)
{
    struct config_text valid = {0};
    if (near)
        config_text_add(&valid, "did you mean '%s'? ", near);
    config_text_add(&valid, "valid: ");
    for (unsigned i = 0; i < k->num_choices; i++)
        config_text_add(&valid, "%s%s", i ? ", " : "", k->choices[i]);
    config_report_add(r, DCP_DIAG_ERROR, pos, path, "invalid value %s; %s", shown, valid.buf);
}

void config_report_too_many(struct config_report *r, const struct config_key *k, const char *path,
                            struct config_pos pos, size_t count)
{
    config_report_add(r, DCP_DIAG_ERROR, pos, path, "too many entries: %zu given, at most %zu", count,
                      k->max_count);
}

const char *config_key_word(const struct config_key *k)
{
    return config_key_parent(k) ? "key" : "section";
}

void config_report_missing(struct config_report *r, const struct config_key *k,
                           struct config_pos pos)
{
    const char *what = config_key_word(k);
    if (k->required == CONFIG_ATTN_ALL) {
        config_report_add(r, DCP_DIAG_ERROR, pos, k->path, "missing required %s '%s'", what,
                          config_key_name(k));
        return;
    }
    struct config_text kinds = {0};
    for (unsigned a = 0; a < DCP_ARRAY_SIZE(config_attention_names); a++)
        if (k->required & CONFIG_ATTN(a))
            config_text_add(&kinds, "%s%s", kinds.len ? "/" : "", config_attention_names[a]);
    config_report_add(r, DCP_DIAG_ERROR, pos, k->path, "missing required %s '%s' (required for %s)",
                      what, config_key_name(k), kinds.buf);
}

/* ---- Checking a filled struct (dcp_deployment_from_config) --------------- */

static const struct config_pos no_pos = {0, 0};

/* Whether a field holds its "not set" value: 0, NULL or an empty list. */
static bool field_unset(const struct dcp_config *cfg, const struct config_key *k)
{
    switch (k->kind) {
    case CONFIG_STRING:
    case CONFIG_PATH: return config_load_string(cfg, k) == NULL;
    case CONFIG_INT:
    case CONFIG_LAYERS: return config_load_uint(cfg, k) == 0;
    case CONFIG_NUMBER:
    case CONFIG_PARAM_COUNT: return config_load_number(cfg, k) == 0.0;
    case CONFIG_TOKEN_LIST: {
        uint32_t n;
        memcpy(&n, (const char *)cfg + k->count_offset, sizeof(n));
        return n == 0;
    }
    case CONFIG_ENUM:
    case CONFIG_BOOL:
    case CONFIG_SECTION: return false;
    }
    return false;
}

static bool check_token_list_field(struct config_report *r, const struct dcp_config *cfg,
                                   const struct config_key *k)
{
    uint32_t n;
    memcpy(&n, (const char *)cfg + k->count_offset, sizeof(n));
    if (n > k->max_count) {
        config_report_too_many(r, k, k->path, no_pos, n);
        return false;
    }
    const uint64_t *values = cfield_of(cfg, k);
    bool ok = true;
    for (uint32_t i = 0; i < n; i++) {
        char name[64], path[96], shown[24];
        snprintf(name, sizeof(name), "%s[%u]", config_key_name(k), i);
        snprintf(path, sizeof(path), "%s[%u]", k->path, i);
        snprintf(shown, sizeof(shown), "%llu", (unsigned long long)values[i]);
        ok &= config_check_int(r, k, name, path, no_pos, values[i], shown);
    }
    return ok;
}

/* Checks one set field of a filled struct against its key. */
static bool check_field_value(struct config_report *r, const struct dcp_config *cfg,
                              const struct config_key *k)
{
    char shown[40];
    switch (k->kind) {
    case CONFIG_STRING:
    case CONFIG_PATH:
        if (config_load_string(cfg, k)[0] != '\0')
            return true;
        config_report_add(r, DCP_DIAG_ERROR, no_pos, k->path, "must not be empty");
        return false;
    case CONFIG_INT: {
        const uint64_t u = config_load_uint(cfg, k);
        if ((k->flags & CONFIG_SIGNED) && (int32_t)u < 0) {
            snprintf(shown, sizeof(shown), "%d", (int)(int32_t)u);
            config_report_range(r, k, config_key_name(k), k->path, no_pos, shown);
            return false;
        }
        snprintf(shown, sizeof(shown), "%llu", (unsigned long long)u);
        return config_check_int(r, k, config_key_name(k), k->path, no_pos, u, shown);
    }
    case CONFIG_NUMBER:
    case CONFIG_PARAM_COUNT: {
        const double v = config_load_number(cfg, k);
        snprintf(shown, sizeof(shown), "%g", v);
        return config_check_number(r, k, k->path, no_pos, v, shown);
    }
    case CONFIG_ENUM: {
        const int e = config_load_enum(cfg, k);
        if (e >= 0 && (unsigned)e < k->num_choices)
            return true;
        snprintf(shown, sizeof(shown), "%d", e);
        config_report_choice(r, k, k->path, no_pos, shown, NULL);
        return false;
    }
    case CONFIG_TOKEN_LIST: return check_token_list_field(r, cfg, k);
    case CONFIG_LAYERS: return config_check_layers_field(r, cfg, k);
    case CONFIG_BOOL:
    case CONFIG_SECTION: return true;
    }
    return true;
}

void config_check_fields(struct config_report *r, const struct dcp_config *cfg,
                         unsigned char state[CONFIG_KEY_MAX])
{
    memset(state, CONFIG_ABSENT, CONFIG_KEY_MAX);
    const enum dcp_attention_kind attn = cfg->model.attention;
    const bool attn_known = config_attention_valid(attn);
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->kind == CONFIG_SECTION)
            continue;
        const bool depends_on_attention = k->applies != CONFIG_ATTN_ALL ||
                                          (k->required != 0 && k->required != CONFIG_ATTN_ALL);
        if (depends_on_attention && !attn_known) {
            state[i] = CONFIG_BAD; /* cannot tell what it should be */
            continue;
        }
        if (attn_known && !(k->applies & CONFIG_ATTN(attn)))
            continue; /* ignored for this attention kind */
        const bool required = attn_known ? config_key_required_for(k, attn)
                                         : k->required == CONFIG_ATTN_ALL;
        if (field_unset(cfg, k)) {
            if (required) {
                config_report_missing(r, k, no_pos);
                state[i] = CONFIG_BAD;
                continue;
            }
            if (k->flags & CONFIG_DERIVED || k->kind == CONFIG_PATH)
                continue; /* derived later / no trace */
        }
        state[i] = check_field_value(r, cfg, k) ? CONFIG_SET : CONFIG_BAD;
    }
}
