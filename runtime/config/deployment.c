/*
 * deployment.c: the public deployment API. A deployment is an immutable deep
 * copy of a checked struct dcp_config plus the name of its source, made here
 * from a config filled by the YAML loader or given by the caller; the loader
 * never makes deployments itself.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "util/file.h"

struct dcp_deployment {
    struct dcp_config config; ///< Strings are owned copies.
    char *source;             ///< File name, "<string>" or "<config>".
};


static void free_strings(struct dcp_config *cfg)
{
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->kind == CONFIG_STRING || k->kind == CONFIG_PATH) {
            free((char *)config_load_string(cfg, k));
            config_store_string(cfg, k, NULL);
        }
    }
}

DCP_API void dcp_deployment_destroy(dcp_deployment **dep)
{
    if (!dep || !*dep)
        return;
    free_strings(&(*dep)->config);
    free((*dep)->source);
    free(*dep);
    *dep = NULL;
}

/* Makes a deployment from a checked config: deep copies of its strings and of source. */
static int deployment_create(const struct dcp_config *cfg, const char *source, dcp_deployment **out)
{
    dcp_deployment *d = calloc(1, sizeof(*d));
    if (!d)
        return DCP_ENOMEM;
    d->config = *cfg;
    bool ok = (d->source = dcp_strdup(source)) != NULL;
    for (size_t i = 0; i < config_key_count; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->kind != CONFIG_STRING && k->kind != CONFIG_PATH)
            continue;
        const char *s = config_load_string(cfg, k);
        char *copy = ok ? dcp_strdup(s) : NULL;
        ok = ok && (copy || !s);
        config_store_string(&d->config, k, copy); /* never leave a borrowed pointer behind */
    }
    if (!ok) {
        dcp_deployment_destroy(&d);
        return DCP_ENOMEM;
    }
    *out = d;
    return DCP_OK;
}

DCP_API const struct dcp_config *dcp_deployment_config(const dcp_deployment *dep)
{
    return dep ? &dep->config : NULL;
}

DCP_API const char *dcp_deployment_source(const dcp_deployment *dep)
{
    return dep ? dep->source : NULL;
}

/* The status of a finished load, with the detail for dcp_last_error(). */
static int load_status(struct config_report *r, int status, const char *name)
{
    config_report_finish(r);
    if (status == DCP_ENOMEM || r->out_of_memory)
        return dcp_error(DCP_ENOMEM, "%s: out of memory while loading the deployment", name);
    if (r->errors)
        return dcp_error(DCP_ECONFIG, "%s: invalid deployment (%u error%s)", name, r->errors,
                         r->errors == 1 ? "" : "s");
    return status;
}

/* Loads YAML text; base_dir resolves relative paths in it (NULL: current directory). */
static int load_text(const char *name, const char *text, size_t len, const char *base_dir,
                     dcp_diag *diag, dcp_deployment **out)
{
    struct config_report r = {.diag = diag, .file = name};
    struct yaml_loader *loaded = NULL;
    int status = config_yaml_load(&r, text, len, base_dir, &loaded);
    if (loaded)
        status = deployment_create(config_yaml_config(loaded), name, out);
    config_yaml_free(&loaded);
    status = load_status(&r, status, name);
    if (status)
        dcp_deployment_destroy(out);
    return status;
}

DCP_API int dcp_deployment_load_string(const char *name, const char *text, size_t len,
                                       dcp_diag *diag, dcp_deployment **out)
{
    dcp_clear_error();
    if (!out)
        return dcp_error(DCP_EINVAL, "dcp_deployment_load_string: out is NULL");
    *out = NULL;
    if (!text && len)
        return dcp_error(DCP_EINVAL, "dcp_deployment_load_string: text is NULL");
    return load_text(name ? name : "<string>", text ? text : "", len, NULL, diag, out);
}

DCP_API int dcp_deployment_load_file(const char *path, dcp_diag *diag, dcp_deployment **out)
{
    dcp_clear_error();
    if (!out)
        return dcp_error(DCP_EINVAL, "dcp_deployment_load_file: out is NULL");
    *out = NULL;
    if (!path)
        return dcp_error(DCP_EINVAL, "dcp_deployment_load_file: path is NULL");
    char *text = NULL;
    size_t len = 0;
    const int err = dcp_file_read(path, "deployment file", DCP_DEPLOYMENT_MAX_BYTES, 0, &text, &len);
    if (err) {
        if (err == DCP_EIO && dcp_diag_add(diag, DCP_DIAG_ERROR, "", 0, 0, "", "%s", dcp_last_error()))
            return DCP_ENOMEM;
        return err;
    }
    /* Relative paths inside the file (workload.trace) are relative to its directory. */
    const char *slash = strrchr(path, '/');
    char *dir = slash ? dcp_asprintf("%.*s", (int)(slash - path + (slash == path)), path) : NULL;
    int status = DCP_ENOMEM;
    if (dir || !slash)
        status = load_text(path, text, len, dir, diag, out);
    else
        dcp_error(DCP_ENOMEM, "%s: out of memory", path);
    free(dir);
    free(text);
    return status;
}

DCP_API int dcp_deployment_from_config(const struct dcp_config *cfg, dcp_diag *diag,
                                       dcp_deployment **out)
{
    dcp_clear_error();
    if (!out)
        return dcp_error(DCP_EINVAL, "dcp_deployment_from_config: out is NULL");
    *out = NULL;
    if (!cfg)
        return dcp_error(DCP_EINVAL, "dcp_deployment_from_config: cfg is NULL");
    struct config_report r = {.diag = diag, .file = ""};
    struct dcp_config copy = *cfg; /* derived values are filled in here, never in *cfg */
    unsigned char state[CONFIG_KEY_MAX];
    config_check_fields(&r, &copy, state);
    config_resolve_and_check(&r, &copy, state, NULL, NULL);
    int status = r.errors || r.out_of_memory ? DCP_OK : deployment_create(&copy, "<config>", out);
    status = load_status(&r, status, "<config>");
    if (status)
        dcp_deployment_destroy(out);
    return status;
}
