/*
 * layers.c: model.layers, the model's layer kinds (docs/design.md §13): the
 * checks of one pattern entry, shared by the YAML loader (which parses the
 * entries, yaml_loader.c) and the checks of a filled struct.
 */
#include <stdio.h>

#include "config/config_internal.h"

/* The integers of an entry, as pseudo keys so that their range messages read like any key's. */
const struct config_key config_layer_window_key = {
    .path = "model.layers[].sliding_window", .kind = CONFIG_INT, .imin = 1, .imax = 1u << 24};
const struct config_key config_layer_topk_key = {
    .path = "model.layers[].sparse_topk", .kind = CONFIG_INT, .imin = 1, .imax = 1u << 20};
const struct config_key config_layer_repeat_key = {
    .path = "model.layers[].repeat", .kind = CONFIG_INT, .imin = 1, .imax = 4096};

/* An integer of an entry in range; 0 means "not given" only where allowed. */
static bool check_entry_int(struct config_report *r, const struct config_key *k, const char *path,
                            struct config_pos pos, uint32_t v)
{
    char name[64], shown[24];
    snprintf(name, sizeof(name), "%s", config_key_name(k));
    snprintf(shown, sizeof(shown), "%u", v);
    return config_check_int(r, k, name, path, pos, v, shown);
}

bool config_check_layer_kind(struct config_report *r, const char *path, struct config_pos pos,
                             const struct dcp_layer_kind *kind)
{
    bool ok = true;
    const int type = (int)kind->type;
    if (type < 0 || (size_t)type >= DCP_ARRAY_SIZE(config_layer_type_names)) {
        config_report_add(r, DCP_DIAG_ERROR, pos, path, "unknown layer kind %d; valid: full, sliding_window, "
                          "sparse_topk, none", type);
        return false;
    }
    if (kind->type == DCP_LAYER_SLIDING_WINDOW)
        ok &= check_entry_int(r, &config_layer_window_key, path, pos, kind->window);
    else if (kind->window) {
        config_report_add(r, DCP_DIAG_ERROR, pos, path, "a window of %u tokens on a %s layer: only sliding_window "
                          "layers have one", kind->window, config_layer_type_names[type]);
        ok = false;
    }
    if (kind->type == DCP_LAYER_SPARSE_TOPK)
        ok &= check_entry_int(r, &config_layer_topk_key, path, pos, kind->topk);
    else if (kind->topk) {
        config_report_add(r, DCP_DIAG_ERROR, pos, path, "a top-k of %u tokens on a %s layer: only sparse_topk "
                          "layers have one", kind->topk, config_layer_type_names[type]);
        ok = false;
    }
    if (kind->sink && kind->type == DCP_LAYER_NONE) {
        config_report_add(r, DCP_DIAG_ERROR, pos, path, "sink on a none layer: a KV-free layer has no softmax "
                          "to add a sink to");
        ok = false;
    }
    if (kind->repeat) /* 0 is read as 1 */
        ok &= check_entry_int(r, &config_layer_repeat_key, path, pos, kind->repeat);
    return ok;
}

bool config_check_layers_field(struct config_report *r, const struct dcp_config *cfg, const struct config_key *k)
{
    const struct dcp_model_config *m = &cfg->model;
    char shown[24];
    snprintf(shown, sizeof(shown), "%u", m->num_layers);
    bool ok = config_check_int(r, k, config_key_name(k), k->path, (struct config_pos){0, 0}, m->num_layers, shown);
    if (m->num_layer_kinds > DCP_MAX_LAYER_PATTERN) {
        config_report_too_many(r, k, k->path, (struct config_pos){0, 0}, m->num_layer_kinds);
        return false;
    }
    for (uint32_t i = 0; i < m->num_layer_kinds; i++) {
        char path[64];
        snprintf(path, sizeof(path), "%s[%u]", k->path, i);
        ok &= config_check_layer_kind(r, path, (struct config_pos){0, 0}, &m->layer_pattern[i]);
    }
    return ok;
}
