/* modules.c: embedded module registry lookup, decompression and loading. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "fatbin.h"
#include "modules.h"
#include "util/util.h"

/* ------------------------------------------------------------------------- */
/* Which image the driver runs. */

struct fatbin_target {
    int ptx;       /* compute_XY rather than sm_XY */
    int major;     /* X */
    int minor;     /* Y */
    int exact;     /* "a" suffix: only on exactly X.Y */
};

/* Parses one "sm_90", "sm_90a", "sm_100f" or "compute_100" token of len bytes. */
static int parse_target(const char *s, size_t len, struct fatbin_target *t)
{
    static const char sm[] = "sm_", compute[] = "compute_";
    size_t skip;
    if (len > strlen(sm) && strncmp(s, sm, strlen(sm)) == 0) {
        t->ptx = 0;
        skip = strlen(sm);
    } else if (len > strlen(compute) && strncmp(s, compute, strlen(compute)) == 0) {
        t->ptx = 1;
        skip = strlen(compute);
    } else {
        return 0;
    }
    int number = 0;
    size_t i = skip;
    for (; i < len && isdigit((unsigned char)s[i]) && number < 10000; i++)
        number = number * 10 + (s[i] - '0');
    if (i == skip || number < 10)
        return 0;
    t->exact = i < len && s[i] == 'a';
    t->major = number / 10;
    t->minor = number % 10;
    return 1;
}

static int target_runs_on(const struct fatbin_target *t, int major, int minor)
{
    if (t->exact)
        return t->major == major && t->minor == minor;
    if (t->ptx)
        return t->major * 10 + t->minor <= major * 10 + minor;
    return t->major == major && t->minor <= minor;
}

enum dcp_image_choice dcp_module_pick_image(const char *targets, int cc_major, int cc_minor,
                                            char *buf, size_t size)
{
    struct fatbin_target best_sass = {0}, best_ptx = {0}, t;
    int have_sass = 0, have_ptx = 0;
    for (const char *s = targets ? targets : ""; *s;) {
        size_t len = strcspn(s, ",");
        if (parse_target(s, len, &t) && target_runs_on(&t, cc_major, cc_minor)) {
            struct fatbin_target *best = t.ptx ? &best_ptx : &best_sass;
            int *have = t.ptx ? &have_ptx : &have_sass;
            if (!*have || t.major * 10 + t.minor > best->major * 10 + best->minor)
                *best = t;
            *have = 1;
        }
        s += len + (s[len] == ',');
    }
    enum dcp_image_choice choice = have_sass ? DCP_IMAGE_SASS : have_ptx ? DCP_IMAGE_PTX
                                                                        : DCP_IMAGE_NONE;
    if (buf && size) {
        if (choice == DCP_IMAGE_SASS)
            snprintf(buf, size, "SASS sm_%d%d%s", best_sass.major, best_sass.minor,
                     best_sass.exact ? "a" : "");
        else if (choice == DCP_IMAGE_PTX)
            snprintf(buf, size, "PTX JIT from compute_%d%d%s", best_ptx.major, best_ptx.minor,
                     best_ptx.exact ? "a" : "");
        else
            snprintf(buf, size, "no image for sm_%d%d", cc_major, cc_minor);
    }
    return choice;
}

/* ------------------------------------------------------------------------- */
/* Verifying and decompressing. */

static const char *module_name(const struct dcp_embedded_module *m)
{
    return m->name ? m->name : "(unnamed)";
}

static int module_error(const struct dcp_embedded_module *m, const char *what)
{
    return dcp_error(DCP_EMODULE, "embedded module %s: %s", module_name(m), what);
}

/* The decompressed, verified fatbin of m in *image (malloc'd, m->image_size bytes). */
static int decompress_module(const struct dcp_embedded_module *m, unsigned char **image)
{
    *image = NULL;
    if (!m->zstd || m->zstd_size == 0 || m->image_size == 0)
        return module_error(m, "empty registry entry");
    if (dcp_fnv1a64(m->zstd, m->zstd_size) != m->zstd_hash)
        return module_error(m, "compressed data hash mismatch (corrupt library?)");
    unsigned long long content = ZSTD_getFrameContentSize(m->zstd, m->zstd_size);
    if (content == ZSTD_CONTENTSIZE_ERROR)
        return module_error(m, "compressed data is not a zstd frame");
    if (content == ZSTD_CONTENTSIZE_UNKNOWN)
        return module_error(m, "zstd frame does not record its decompressed size");
    if (content != m->image_size)
        return module_error(m, "zstd frame size disagrees with the registry (corrupt library?)");
    unsigned char *buf = malloc(m->image_size);
    if (!buf)
        return dcp_error(DCP_ENOMEM, "embedded module %s: cannot allocate %zu bytes",
                         module_name(m), m->image_size);
    size_t got = ZSTD_decompress(buf, m->image_size, m->zstd, m->zstd_size);
    int status = DCP_OK;
    if (ZSTD_isError(got))
        status = dcp_error(DCP_EMODULE, "embedded module %s: zstd decompression failed: %s",
                           module_name(m), ZSTD_getErrorName(got));
    else if (got != m->image_size)
        status = module_error(m, "decompressed size disagrees with the registry");
    else if (dcp_fnv1a64(buf, got) != m->image_hash)
        status = module_error(m, "decompressed image hash mismatch (corrupt library?)");
    if (status) {
        free(buf);
        return status;
    }
    *image = buf;
    return DCP_OK;
}

static int check_fatbin(const struct dcp_embedded_module *m, const unsigned char *image)
{
    char why[128];
    if (dcp_fatbin_validate(image, m->image_size, why, sizeof(why)))
        return dcp_error(DCP_EMODULE, "embedded module %s: decompressed image is not a fatbin: %s",
                         module_name(m), why);
    return DCP_OK;
}

/* ------------------------------------------------------------------------- */
/* Loading into the driver. */

struct device_target {
    int major, minor;
};

#define JIT_LOG_BYTES 4096

/* JIT options that capture the driver's info and error logs. */
struct jit_logs {
    CUjit_option options[5];
    void *values[5];
    char info[JIT_LOG_BYTES];
    char error[JIT_LOG_BYTES];
};

static void jit_logs_init(struct jit_logs *j)
{
    j->info[0] = j->error[0] = '\0';
    const CUjit_option options[5] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                                     CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                                     CU_JIT_LOG_VERBOSE};
    void *const values[5] = {j->info, (void *)(uintptr_t)JIT_LOG_BYTES, j->error,
                             (void *)(uintptr_t)JIT_LOG_BYTES, (void *)(uintptr_t)1};
    memcpy(j->options, options, sizeof(options));
    memcpy(j->values, values, sizeof(values));
}

/* The driver writes at most the buffer size; make sure both logs end. */
static void jit_logs_terminate(struct jit_logs *j)
{
    j->info[JIT_LOG_BYTES - 1] = j->error[JIT_LOG_BYTES - 1] = '\0';
}

static int load_image(struct dcp_module *mod, const unsigned char *image, struct jit_logs *j,
                      const char **call)
{
    const struct dcp_cuda_api *api = &mod->cu->api;
    if (api->cuLibraryLoadData && api->cuLibraryGetKernel && api->cuKernelGetFunction &&
        api->cuLibraryUnload) {
        *call = "cuLibraryLoadData";
        return api->cuLibraryLoadData(&mod->library, image, j->options, j->values, 5, NULL, NULL,
                                      0);
    }
    *call = "cuModuleLoadDataEx";
    return api->cuModuleLoadDataEx(&mod->module, image, 5, j->options, j->values);
}


static int current_device_target(const struct dcp_cuda *cu, struct device_target *t)
{
    CUdevice dev;
    int status = dcp_cuda_check(cu->api.cuCtxGetDevice(&dev), "cuCtxGetDevice (is a context current?)");
    if (!status)
        status = dcp_cuda_check(cu->api.cuDeviceGetAttribute(
                                    &t->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                                "cuDeviceGetAttribute");
    if (!status)
        status = dcp_cuda_check(cu->api.cuDeviceGetAttribute(
                                    &t->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                                "cuDeviceGetAttribute");
    return status;
}

/* Logs go into a one-line report: newlines become spaces. */
static void flatten(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r' || *s == '\t')
            *s = ' ';
}

static int driver_load_error(const struct dcp_embedded_module *m, const char *call, int result,
                             const struct device_target *dev, const char *picked,
                             struct jit_logs *j)
{
    flatten(j->error);
    return dcp_error(DCP_EMODULE,
                     "embedded module %s: %s: %s (%d): %s (device sm_%d%d: %s; module has %s)%s%s",
                     module_name(m), call, dcp_cuda_result_name(result), result,
                     dcp_cuda_result_message(result), dev->major, dev->minor, picked,
                     m->targets ? m->targets : "?", j->error[0] ? "; JIT error log: " : "",
                     j->error);
}

static void write_report(struct dcp_module *mod, const char *picked,
                         const struct device_target *dev, const char *call)
{
    int n = snprintf(mod->report, sizeof(mod->report),
                     "embedded module %s: %s on sm_%d%d via %s in %.1f ms", mod->name, picked,
                     dev->major, dev->minor, call, mod->load_ms);
    if (mod->jit_info_log && n > 0 && (size_t)n < sizeof(mod->report)) {
        snprintf(mod->report + n, sizeof(mod->report) - (size_t)n, "; JIT info log: %s",
                 mod->jit_info_log);
        flatten(mod->report);
    }
}

/* Hands the verified image to the driver; on success the module holds the
 * library or module handle and the JIT info log, *call names the API used. */
static int load_into_driver(struct dcp_module *mod, const struct dcp_embedded_module *m,
                            const unsigned char *image, const struct device_target *dev,
                            const char *picked, const char **call)
{
    struct jit_logs *j = malloc(sizeof(*j));
    if (!j)
        return dcp_error(DCP_ENOMEM, "embedded module %s: out of memory", module_name(m));
    jit_logs_init(j);
    int result = load_image(mod, image, j, call);
    jit_logs_terminate(j);
    int status = DCP_OK;
    if (result != CUDA_SUCCESS)
        status = driver_load_error(m, *call, result, dev, picked, j);
    else if (j->info[0])
        mod->jit_info_log = dcp_strdup(j->info);
    free(j);
    return status;
}

int dcp_module_min_driver(const struct dcp_embedded_module *m)
{
    return m && m->toolkit_version >= 1000 ? m->toolkit_version / 1000 * 1000 : 0;
}

/* The first driver branch of a CUDA major release (NVIDIA's CUDA Toolkit release
 * notes, table "CUDA Toolkit and Corresponding Driver Versions"); 0 when not known here. */
static int driver_branch(int cuda_major)
{
    switch (cuda_major) {
    case 11: return 450;
    case 12: return 525;
    case 13: return 580;
    default: return 0;
    }
}

int dcp_module_check_driver(const struct dcp_cuda *cu, const struct dcp_embedded_module *m)
{
    const int need = dcp_module_min_driver(m);
    if (!cu || !m || need == 0 || cu->driver_version >= need)
        return DCP_OK;
    char have[16], built[16], branch[32] = "";
    const int r = driver_branch(need / 1000);
    if (r)
        snprintf(branch, sizeof(branch), " (R%d or newer)", r);
    return dcp_error(DCP_EDRIVERVERSION,
                     "embedded module %s was built by CUDA %s, which needs a CUDA %d.x driver%s; the driver "
                     "is CUDA %s (%s), which cannot load its images: update the NVIDIA driver, or build "
                     "libdcp with a CUDA %s (or older) toolkit",
                     module_name(m), dcp_cuda_version_string(m->toolkit_version, built, sizeof(built)), need / 1000,
                     branch, dcp_cuda_version_string(cu->driver_version, have, sizeof(have)),
                     cu->path ? cu->path : "?", have);
}

int dcp_module_load(const struct dcp_cuda *cu, const struct dcp_embedded_module *m,
                    struct dcp_module **out)
{
    if (!out)
        return dcp_error(DCP_EINVAL, "dcp_module_load: out is NULL");
    *out = NULL;
    if (!cu || !m)
        return dcp_error(DCP_EINVAL, "dcp_module_load: NULL driver or module");
    int status = dcp_module_check_driver(cu, m);
    if (status)
        return status;
    double start = dcp_now_seconds();
    struct device_target dev;
    status = current_device_target(cu, &dev);
    if (status)
        return status;
    char picked[64];
    dcp_module_pick_image(m->targets, dev.major, dev.minor, picked, sizeof(picked));

    unsigned char *image = NULL;
    struct dcp_module *mod = NULL;
    const char *call = NULL;
    if (!(status = decompress_module(m, &image)) && !(status = check_fatbin(m, image))) {
        mod = calloc(1, sizeof(*mod));
        status = mod ? DCP_OK : dcp_error(DCP_ENOMEM, "embedded module %s: out of memory",
                                          module_name(m));
    }
    if (!status) {
        mod->cu = cu;
        mod->name = module_name(m);
        status = load_into_driver(mod, m, image, &dev, picked, &call);
    }
    free(image);
    if (status) {
        free(mod);
        return status;
    }
    mod->load_ms = (dcp_now_seconds() - start) * 1e3;
    write_report(mod, picked, &dev, call);
    *out = mod;
    return DCP_OK;
}

int dcp_module_get_function(const struct dcp_module *mod, const char *name, CUfunction *fn)
{
    if (!mod || !name || !fn)
        return dcp_error(DCP_EINVAL, "dcp_module_get_function: NULL argument");
    *fn = NULL;
    const struct dcp_cuda_api *api = &mod->cu->api;
    CUresult r;
    const char *call;
    if (mod->library) {
        CUkernel kernel;
        call = "cuLibraryGetKernel";
        r = api->cuLibraryGetKernel(&kernel, mod->library, name);
        if (r == CUDA_SUCCESS) {
            call = "cuKernelGetFunction";
            r = api->cuKernelGetFunction(fn, kernel);
        }
    } else {
        call = "cuModuleGetFunction";
        r = api->cuModuleGetFunction(fn, mod->module, name);
    }
    if (r == CUDA_ERROR_NOT_FOUND)
        return dcp_error(DCP_ENOENT, "kernel %s not found in embedded module %s", name, mod->name);
    char what[160];
    snprintf(what, sizeof(what), "%s(%s)", call, name);
    return dcp_cuda_check(r, what);
}

const char *dcp_module_report(const struct dcp_module *mod) { return mod ? mod->report : ""; }

void dcp_module_unload(struct dcp_module **mod)
{
    if (!mod || !*mod)
        return;
    const struct dcp_cuda_api *api = &(*mod)->cu->api;
    /* Errors here only mean the context is already gone; nothing to recover. */
    if ((*mod)->library)
        api->cuLibraryUnload((*mod)->library);
    if ((*mod)->module)
        api->cuModuleUnload((*mod)->module);
    free((*mod)->jit_info_log);
    free(*mod);
    *mod = NULL;
}

void dcp_module_abandon(struct dcp_module **mod)
{
    if (!mod || !*mod)
        return;
    free((*mod)->jit_info_log);
    free(*mod);
    *mod = NULL;
}

const struct dcp_embedded_module *dcp_embedded_module_find(const char *name)
{
    for (size_t i = 0; name && i < dcp_embedded_module_count; i++)
        if (dcp_embedded_modules[i].name && strcmp(dcp_embedded_modules[i].name, name) == 0)
            return &dcp_embedded_modules[i];
    return NULL;
}
