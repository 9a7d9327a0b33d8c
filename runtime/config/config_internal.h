/*
 * config_internal.h: the deployment schema and the checks shared by the YAML
 * loader and dcp_deployment_from_config().
 *
 * Dependencies run one way: deployment.c (the public API) calls the YAML loader,
 * which fills a struct dcp_config, and the checks; neither calls back into it.
 *
 * One table (schema.c) lists every key of a deployment file: its path, type, the
 * field of struct dcp_config it fills, whether it is required, its default, its
 * range or choices and the attention kinds it applies to. The YAML walker
 * (yaml_loader.c), the defaults, the range checks of a filled struct and the deep
 * copy of a deployment's strings are all driven by that table; the cross-key
 * validity rules (rules.c) run on the filled struct in both paths.
 */
#ifndef DCP_CONFIG_INTERNAL_H
#define DCP_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp/deployment.h"
#include "dcp_kernels/common.h"
#include "engine/merge.h"
#include "util/diag_internal.h"

/** How a key's value is written in YAML and stored in struct dcp_config. */
enum config_key_kind {
    CONFIG_SECTION,     ///< A nested mapping of further keys; no field.
    CONFIG_STRING,      ///< Any non-empty scalar; a const char * field.
    CONFIG_PATH,        ///< Like CONFIG_STRING, naming a file relative to the deployment file.
    CONFIG_INT,         ///< A plain decimal integer; an unsigned or signed field of 4 or 8 bytes.
    CONFIG_NUMBER,      ///< A plain decimal number; a double field (YAML value * scale).
    CONFIG_PARAM_COUNT, ///< A number with an optional M/B/T suffix (1e6/1e9/1e12); a double field.
    CONFIG_BOOL,        ///< true/false/yes/no; a bool field.
    CONFIG_ENUM,        ///< One of the key's choices (any scalar style); an enum field.
    CONFIG_TOKEN_LIST,  ///< A list of token counts (k/K = 1024, M = 1048576); a uint64_t array + count.
    CONFIG_LAYERS,      ///< model.layers: a layer count, or a list of layer kinds (with a count and a repeated
                        ///< pattern); the uint32_t count field, and model.layer_pattern / num_layer_kinds (layers.c).
};

/** Bit of an attention kind in config_key.required / .applies. */
#define CONFIG_ATTN(kind) (1u << (unsigned)(kind))
#define CONFIG_ATTN_ALL (CONFIG_ATTN(DCP_ATTN_MLA) | CONFIG_ATTN(DCP_ATTN_GQA) | CONFIG_ATTN(DCP_ATTN_MHA))
#define CONFIG_ATTN_HEADS (CONFIG_ATTN(DCP_ATTN_GQA) | CONFIG_ATTN(DCP_ATTN_MHA))

/** Extra properties of a key. */
enum config_key_flag {
    CONFIG_DERIVED = 1u << 0,  ///< 0 in a filled struct means "derive from other keys".
    CONFIG_POW2 = 1u << 1,     ///< An integer that must be a power of two.
    CONFIG_SIGNED = 1u << 2,   ///< The integer field is signed.
    CONFIG_MIN_OPEN = 1u << 3, ///< A number's lower bound is exclusive (> min rather than >= min).
};

/** One key of the deployment schema. */
struct config_key {
    const char *path;            ///< Dotted path, "parallel.dcp"; sections too ("runtime.cuda").
    enum config_key_kind kind;   ///< Type of the value.
    size_t offset;               ///< Field offset in struct dcp_config (not for sections).
    size_t size;                 ///< Field size in bytes.
    size_t count_offset;         ///< CONFIG_TOKEN_LIST: offset of the uint32_t entry count.
    size_t max_count;            ///< CONFIG_TOKEN_LIST: capacity of the array.
    unsigned required;           ///< Attention kinds for which the key must be given (0: optional).
    unsigned applies;            ///< Attention kinds for which the key may be given.
    unsigned flags;              ///< enum config_key_flag bits.
    double def;                  ///< Default in YAML units (numbers, integers, enum index, bool).
    uint64_t imin, imax;         ///< CONFIG_INT / CONFIG_TOKEN_LIST: inclusive range.
    double min, max;             ///< CONFIG_NUMBER / CONFIG_PARAM_COUNT: range in YAML units.
    double scale;                ///< Stored value = YAML value * scale (numbers; 0 means 1).
    const char *const *choices;  ///< CONFIG_ENUM: names, indexed by enum value.
    unsigned num_choices;        ///< CONFIG_ENUM: number of names.
};

/**
 * Why a key that people write is not part of the schema (the model behind plan and
 * replay has no place for it), or NULL: "parallel.pp" is pipeline parallelism.
 */
const char *config_key_outside_model(const char *path);

/** Upper bound of the schema size, for per-key arrays. */
#define CONFIG_KEY_MAX 96

/** The schema, sections before their keys. */
extern const struct config_key config_keys[];
/** Number of rows in config_keys. */
extern const size_t config_key_count;

/** Canonical names, indexed by enum value (also the YAML choices). */
extern const char *const config_attention_names[3];
extern const char *const config_dtype_names[DCPK_DTYPE_COUNT];
extern const char *const config_weight_dtype_names[7];
extern const char *const config_wire_dtype_names[4];
extern const char *const config_backend_names[3];
extern const char *const config_cuda_comm_names[3];
extern const char *const config_cuda_precision_names[2];
extern const char *const config_layer_type_names[4];
extern const char *const config_window_kv_names[2];
extern const char *const config_sparse_index_names[2];

/** What is known about one key after loading or checking. */
enum config_key_state {
    CONFIG_ABSENT = 0, ///< Not given: the default (or a derived value) applies.
    CONFIG_SET,        ///< Given and valid.
    CONFIG_BAD,        ///< Invalid or missing; rules that need it are skipped.
};

/** A 1-based position in the source; 0/0 when there is none. */
struct config_pos {
    unsigned line;
    unsigned column;
};

/** Where loading reports: the diagnostics list plus counts kept even when it is NULL. */
struct config_report {
    dcp_diag *diag;     ///< May be NULL.
    const char *file;   ///< Source name for entries; "" when there is none.
    unsigned errors;    ///< Errors reported (including those dropped after the cap).
    bool out_of_memory; ///< A diagnostic could not be stored.
};

/** Most errors one load reports; then a final entry says it stopped. */
#define CONFIG_MAX_ERRORS 100

/** Deepest nesting of lists and mappings a deployment file may have (it needs 3). */
#define CONFIG_MAX_DEPTH 32

/** Adds a diagnostic (errors past CONFIG_MAX_ERRORS are counted, not stored). */
void config_report_add(struct config_report *r, enum dcp_diag_severity severity,
                       struct config_pos pos, const char *path, const char *fmt, ...)
    DCP_PRINTF(5, 6);

/** Ends a load: adds a note with the total when errors were dropped past the cap. */
void config_report_finish(struct config_report *r);

/** A fixed buffer for building messages; overlong text ends in "...". */
struct config_text {
    char buf[480];
    size_t len;
};

/** Appends printf-style text. */
void config_text_add(struct config_text *t, const char *fmt, ...) DCP_PRINTF(2, 3);
/** Appends "v0, v1, ..." (over 16 values: the first 15, "...", the last). */
void config_text_add_values(struct config_text *t, const uint64_t *values, size_t count);

/** Result of parsing an integer. */
enum config_int_parse {
    INT_OK,     ///< Parsed.
    INT_SYNTAX, ///< Not an integer.
    INT_RANGE,  ///< An integer, but negative or above UINT64_MAX.
};

/** A decimal integer with an optional sign (len bytes of s). */
enum config_int_parse config_parse_uint(const char *s, size_t len, uint64_t *out);
/** A token count: an integer with an optional suffix k/K (1024) or M (1048576). */
enum config_int_parse config_parse_token_count(const char *s, size_t len, uint64_t *out);

/** The key whose path is exactly path, or NULL. */
const struct config_key *config_key_find(const char *path);
/** The key named name (len bytes) directly under section parent ("" for the top). */
const struct config_key *config_key_child(const char *parent, const char *name, size_t len);
/** Position of k in config_keys. */
size_t config_key_index(const struct config_key *k);
/** Last component of k's path ("dcp" for "parallel.dcp"). */
const char *config_key_name(const struct config_key *k);
/** The section that holds k, or NULL for a top-level section. */
const struct config_key *config_key_parent(const struct config_key *k);
/** Whether k is directly under section parent ("" for the top). */
bool config_key_is_under(const struct config_key *k, const char *parent);
/** Whether a key that applies to some attention kinds is required for attention kind attn. */
bool config_key_required_for(const struct config_key *k, enum dcp_attention_kind attn);
/** Whether attention kind attn is one of the three kinds. */
bool config_attention_valid(enum dcp_attention_kind attn);

/** An integer field (CONFIG_INT; a signed one comes back as its 32-bit pattern). */
uint64_t config_load_uint(const struct dcp_config *cfg, const struct config_key *k);
/** An enum (CONFIG_ENUM) or bool's field as an int (CONFIG_ENUM only). */
int config_load_enum(const struct dcp_config *cfg, const struct config_key *k);
/** A number field in YAML units (stored value / scale). */
double config_load_number(const struct dcp_config *cfg, const struct config_key *k);
/** A string field's value (CONFIG_STRING / CONFIG_PATH). */
const char *config_load_string(const struct dcp_config *cfg, const struct config_key *k);
/** Writes a key's value into cfg (integers, enums, bools: u; numbers: f in YAML units). */
void config_store_int(struct dcp_config *cfg, const struct config_key *k, uint64_t u);
void config_store_number(struct dcp_config *cfg, const struct config_key *k, double yaml_value);
void config_store_string(struct dcp_config *cfg, const struct config_key *k, const char *s);

/**
 * Checks an integer or number against k's range (and power-of-two rule); reports
 * "<name>=<shown> is out of range; valid: <range>" at pos/path and returns false
 * when it fails. shown is how the value was written.
 */
bool config_check_int(struct config_report *r, const struct config_key *k, const char *name,
                      const char *path, struct config_pos pos, uint64_t u, const char *shown);
bool config_check_number(struct config_report *r, const struct config_key *k, const char *path,
                         struct config_pos pos, double yaml_value, const char *shown);
/** Reports an integer out of range without checking (negative or too large to parse). */
void config_report_range(struct config_report *r, const struct config_key *k, const char *name,
                         const char *path, struct config_pos pos, const char *shown);
/**
 * Reports "invalid value <shown>; valid: <choices>", with "did you mean '<near>'? "
 * before the list when near is not NULL.
 */
void config_report_choice(struct config_report *r, const struct config_key *k, const char *path,
                          struct config_pos pos, const char *shown, const char *near);
/** Reports "too many entries: <count> given, at most <max>" for a list key. */
void config_report_too_many(struct config_report *r, const struct config_key *k, const char *path,
                            struct config_pos pos, size_t count);
/** "section" for a top-level key, "key" otherwise (for messages). */
const char *config_key_word(const struct config_key *k);
/** Reports "missing required key 'x'" (with "(required for gqa/mha)" when it depends). */
void config_report_missing(struct config_report *r, const struct config_key *k,
                           struct config_pos pos);

/**
 * Checks every field of a filled struct against the schema (dcp_deployment_from_config):
 * ranges, choices, required fields (0 / NULL is "not set"). Keys that do not apply
 * to the model's attention kind are ignored. Fills state for the rules.
 */
void config_check_fields(struct config_report *r, const struct dcp_config *cfg,
                         unsigned char state[CONFIG_KEY_MAX]);

/* ---- model.layers (layers.c) ------------------------------------------------ */

/** Range of one integer of a layer entry (sliding_window, sparse_topk, repeat), for the messages. */
extern const struct config_key config_layer_window_key, config_layer_topk_key, config_layer_repeat_key;

/**
 * Checks one entry of a layer pattern as written (path names it, pos locates it):
 * one kind; a window for sliding_window only, a top-k for sparse_topk only, each
 * in range; no sink on a none layer; repeat in range (0 read as 1). False when
 * anything is wrong (every problem reported).
 */
bool config_check_layer_kind(struct config_report *r, const char *path, struct config_pos pos,
                             const struct dcp_layer_kind *kind);

/** Checks model.layers of a filled struct: the count and every pattern entry. */
bool config_check_layers_field(struct config_report *r, const struct dcp_config *cfg, const struct config_key *k);

/** Finds the source position to blame for a key in a rule error. */
typedef struct config_pos (*config_locate_fn)(const void *user, const struct config_key *k);

/**
 * Derives what was left to derive (kv_heads for MLA/MHA, the softmax scale) and
 * checks the validity rules across keys; rules whose keys are CONFIG_BAD are skipped.
 * locate may be NULL (no positions).
 */
void config_resolve_and_check(struct config_report *r, struct dcp_config *cfg,
                              unsigned char state[CONFIG_KEY_MAX], config_locate_fn locate,
                              const void *locate_user);

/** A parsed deployment file: its checked config, whose strings it owns. */
struct yaml_loader;

/**
 * Parses YAML text, reports every problem into r and resolves and checks the
 * rules. base_dir is the directory relative paths are resolved against (NULL:
 * the current directory). When nothing is wrong, *out holds the checked config
 * (config_yaml_config) until config_yaml_free; otherwise *out is NULL.
 * Returns DCP_OK (also when r->errors grew) or DCP_ENOMEM.
 */
int config_yaml_load(struct config_report *r, const char *text, size_t len, const char *base_dir,
                     struct yaml_loader **out);
/** The config of a successful load; its strings live as long as the loader. */
const struct dcp_config *config_yaml_config(const struct yaml_loader *loader);
/** Frees a loader (NULL is fine) and sets *loader to NULL. */
void config_yaml_free(struct yaml_loader **loader);

#endif /* DCP_CONFIG_INTERNAL_H */
