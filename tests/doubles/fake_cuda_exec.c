/*
 * fake_cuda_exec.c: code loading and kernel launches of the libcuda.so.1 double
 * (streams and events: fake_cuda_stream.c).
 *
 * Libraries and modules accept only fatbins (the layout in loader/fatbin.h). A
 * kernel is found if its name occurs as a whole identifier in the image
 * (decompressing zstd entries) and ptx/cpu knows it (dcpk_kernel_by_entry_name);
 * a launch is checked when it is enqueued and runs the kernel's CPU
 * implementation over the whole grid when its stream gets there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "dcp_kernels/cpu.h"
#include "dcp_kernels/variants.h"
#include "fake_cuda.h"
#include "fake_hooks.h"
#include "fatbin.h"

/* Until ptx/cpu provides the kernel table, kernel lookups fail (NOT_FOUND). */
#pragma weak dcpk_kernel_by_entry_name

#define FAKE_LIVE_MAGIC 0x66616b65u /* tags live handles: catches stale or foreign ones */

/* A loaded fatbin (library or module) and the kernels looked up in it. */
struct fake_image {
    unsigned int magic;
    char *text;     /* every entry's payload, decompressed, for name lookups */
    size_t text_size;
    int is_library;
    struct CUkern_st *kernels;
    struct fake_image *next;
};

struct CUfunc_st {
    unsigned int magic;
    const struct dcpk_kernel_desc *desc;
    int max_dynamic_shared;
    int regs;               /* registers per thread */
    char name[128];
};

struct CUkern_st {
    struct CUfunc_st fn; /* first: a CUkernel and its CUfunction share the object */
    struct CUkern_st *next;
};

struct CUlib_st {
    struct fake_image image;
};

struct CUmod_st {
    struct fake_image image;
};

static struct fake_image *images;

/* ------------------------------------------------------------------------- */
/* Loading fatbins. */

/* Where the driver writes its JIT logs, from the options of a load call. */
struct jit_log_options {
    char *info, *error;
    size_t info_size, error_size;
    void **info_size_slot, **error_size_slot;
};

static void read_jit_options(struct jit_log_options *o, unsigned int n,
                             const CUjit_option *options, void **values)
{
    memset(o, 0, sizeof(*o));
    for (unsigned int i = 0; options && values && i < n; i++) {
        switch (options[i]) {
        case CU_JIT_INFO_LOG_BUFFER: o->info = values[i]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            o->info_size = (size_t)(uintptr_t)values[i];
            o->info_size_slot = &values[i];
            break;
        case CU_JIT_ERROR_LOG_BUFFER: o->error = values[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            o->error_size = (size_t)(uintptr_t)values[i];
            o->error_size_slot = &values[i];
            break;
        default: break;
        }
    }
    if (o->info && o->info_size)
        o->info[0] = '\0';
    if (o->error && o->error_size)
        o->error[0] = '\0';
}

/* Writes a log as the driver does: truncated to the buffer, size written back. */
static void write_log(char *buf, size_t size, void **size_slot, const char *text)
{
    if (!buf || !size)
        return;
    snprintf(buf, size, "%s", text);
    if (size_slot)
        *size_slot = (void *)(uintptr_t)(strlen(buf) + 1);
}

/* Appends an entry's payload (decompressed if it is a zstd frame) to the text. */
static int append_payload(struct fake_image *img, const struct dcp_fatbin_entry *e,
                          const unsigned char *payload)
{
    size_t stored = e->compressed_size ? e->compressed_size : (size_t)e->payload_size;
    size_t size = stored;
    unsigned long long content = e->compressed_size ? ZSTD_getFrameContentSize(payload, stored)
                                                    : ZSTD_CONTENTSIZE_ERROR;
    int zstd = e->compressed_size && content != ZSTD_CONTENTSIZE_ERROR &&
               content != ZSTD_CONTENTSIZE_UNKNOWN && content < (1ull << 32);
    if (zstd)
        size = (size_t)content;
    char *grown = realloc(img->text, img->text_size + size + 1);
    if (!grown)
        return -1;
    img->text = grown;
    if (zstd) {
        size_t got = ZSTD_decompress(img->text + img->text_size, size, payload, stored);
        if (ZSTD_isError(got))
            return -1;
        size = got;
    } else {
        memcpy(img->text + img->text_size, payload, size);
    }
    img->text_size += size;
    img->text[img->text_size++] = '\0';
    return 0;
}

/* What the image offers the fake device: SASS for it, or PTX to "JIT". */
struct image_fit {
    int sass, ptx_arch;
};

static void note_fit(struct image_fit *fit, const struct dcp_fatbin_entry *e)
{
    int sm = fake.cfg.sm;
    if (e->kind == DCP_FATBIN_KIND_ELF && (int)e->arch / 10 == sm / 10 && (int)e->arch <= sm)
        fit->sass = 1;
    if (e->kind == DCP_FATBIN_KIND_PTX && (int)e->arch <= sm && (int)e->arch > fit->ptx_arch)
        fit->ptx_arch = (int)e->arch;
}

static CUresult load_fatbin(struct fake_image *img, const void *code, struct jit_log_options *o)
{
    char why[160], log[256];
    struct dcp_fatbin_iter it;
    struct dcp_fatbin_entry e;
    const unsigned char *payload;
    struct image_fit fit = {0, 0};
    int r = dcp_fatbin_iter_init(&it, code, 0, why, sizeof(why)) ? 1 : -1;
    while (r > 0 && (r = dcp_fatbin_next(&it, &e, &payload, why, sizeof(why))) > 0) {
        note_fit(&fit, &e);
        if (append_payload(img, &e, payload)) {
            snprintf(why, sizeof(why), "corrupt compressed fatbin entry");
            r = -1;
        }
    }
    if (r < 0) {
        snprintf(log, sizeof(log), "fake libcuda: not a valid fatbin: %s", why);
        write_log(o->error, o->error_size, o->error_size_slot, log);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    if (!fit.sass && !fit.ptx_arch) {
        snprintf(log, sizeof(log), "fake libcuda: no SASS for sm_%d and no PTX at or below "
                 "compute_%d in the fatbin", fake.cfg.sm, fake.cfg.sm);
        write_log(o->error, o->error_size, o->error_size_slot, log);
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    if (!fit.sass) {
        snprintf(log, sizeof(log), "fake libcuda: JIT-compiled compute_%d PTX for sm_%d",
                 fit.ptx_arch, fake.cfg.sm);
        write_log(o->info, o->info_size, o->info_size_slot, log);
    }
    return CUDA_SUCCESS;
}

static void register_image(struct fake_image *img, int is_library)
{
    img->magic = FAKE_LIVE_MAGIC;
    img->is_library = is_library;
    fake_lock();
    img->next = images;
    images = img;
    fake.stats.live_images++;
    fake_unlock();
}

static void free_image_contents(struct fake_image *img)
{
    while (img->kernels) {
        struct CUkern_st *k = img->kernels;
        img->kernels = k->next;
        k->fn.magic = 0;
        free(k);
    }
    free(img->text);
    img->magic = 0;
}

/* Unlinks a live image of the given kind; NULL if it is not one. */
static struct fake_image *unregister_image(const struct fake_image *img, int is_library)
{
    struct fake_image *found = NULL;
    fake_lock();
    for (struct fake_image **pi = &images; *pi; pi = &(*pi)->next) {
        if (*pi == img && img->is_library == is_library) {
            found = *pi;
            *pi = found->next;
            fake.stats.live_images--;
            break;
        }
    }
    fake_unlock();
    if (found)
        free_image_contents(found);
    return found;
}

CUresult fake_cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
                                void **jit_values, unsigned int num_jit_options,
                                CUlibraryOption *library_options, void **library_values,
                                unsigned int num_library_options)
{
    FAKE_ENTER(cuLibraryLoadData);
    (void)library_options;
    (void)library_values;
    if (!library || !code || num_library_options)
        return CUDA_ERROR_INVALID_VALUE;
    struct jit_log_options o;
    read_jit_options(&o, num_jit_options, jit_options, jit_values);
    struct CUlib_st *lib = calloc(1, sizeof(*lib));
    if (!lib)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = load_fatbin(&lib->image, code, &o);
    if (r != CUDA_SUCCESS) {
        free_image_contents(&lib->image);
        free(lib);
        return r;
    }
    register_image(&lib->image, 1);
    *library = lib;
    return CUDA_SUCCESS;
}

CUresult fake_cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int num_options,
                                 CUjit_option *options, void **values)
{
    FAKE_ENTER(cuModuleLoadDataEx);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct jit_log_options o;
    read_jit_options(&o, num_options, options, values);
    struct CUmod_st *mod = calloc(1, sizeof(*mod));
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = load_fatbin(&mod->image, image, &o);
    if (r != CUDA_SUCCESS) {
        free_image_contents(&mod->image);
        free(mod);
        return r;
    }
    register_image(&mod->image, 0);
    *module = mod;
    return CUDA_SUCCESS;
}

CUresult fake_cuLibraryUnload(CUlibrary library)
{
    FAKE_ENTER(cuLibraryUnload);
    if (!library || !unregister_image(&library->image, 1))
        return CUDA_ERROR_INVALID_HANDLE;
    free(library);
    return CUDA_SUCCESS;
}

CUresult fake_cuModuleUnload(CUmodule module)
{
    FAKE_ENTER(cuModuleUnload);
    if (!module || !unregister_image(&module->image, 0))
        return CUDA_ERROR_INVALID_HANDLE;
    free(module);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Kernel lookup. */

static int is_identifier_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Whether name occurs in the image as a whole identifier. */
static int image_mentions(const struct fake_image *img, const char *name)
{
    size_t n = strlen(name);
    const char *end = img->text + img->text_size;
    for (const char *p = img->text; n && p && (size_t)(end - p) >= n;) {
        p = memmem(p, (size_t)(end - p), name, n);
        if (!p)
            break;
        int starts = p == img->text || !is_identifier_char(p[-1]);
        int ends = p + n == end || !is_identifier_char(p[n]);
        if (starts && ends)
            return 1;
        p++;
    }
    return 0;
}

int fake_cuda_has_cpu_kernels(void) { return dcpk_kernel_by_entry_name != NULL; }

static int image_live(const struct fake_image *img, int is_library)
{
    for (const struct fake_image *p = images; p; p = p->next)
        if (p == img)
            return img->is_library == is_library;
    return 0;
}

static struct CUkern_st *cached_kernel(const struct fake_image *img, const char *name)
{
    for (struct CUkern_st *k = img->kernels; k; k = k->next)
        if (strcmp(k->fn.name, name) == 0)
            return k;
    return NULL;
}

/*
 * Registers per thread of an entry point: what ptxas reported for the device's
 * SM in the report named by FAKE_CUDA_KERNEL_REPORT (the kernel build's
 * dcp_kernels.resources.txt: "sm_90 <entry> <regs> ..."), else
 * FAKE_REGS_PER_THREAD.
 */
static int kernel_regs(const char *name)
{
    const char *path = getenv("FAKE_CUDA_KERNEL_REPORT");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    int regs = FAKE_REGS_PER_THREAD;
    char line[512], arch[32], entry[160], want[32];
    snprintf(want, sizeof(want), "sm_%d", fake.cfg.sm);
    while (f && fgets(line, sizeof(line), f)) {
        int r;
        if (line[0] != '#' && sscanf(line, "%31s %159s %d", arch, entry, &r) == 3 && !strcmp(arch, want) &&
            !strcmp(entry, name) && r > 0 && r <= 255) {
            regs = r;
            break;
        }
    }
    if (f)
        fclose(f);
    return regs;
}

/* A kernel handle for name if the image has it and the CPU kernels know it (lock held). */
static CUresult new_kernel(struct fake_image *img, const char *name, struct CUkern_st **out)
{
    const struct dcpk_kernel_desc *desc = NULL;
    if (fake_cuda_has_cpu_kernels() && image_mentions(img, name))
        desc = dcpk_kernel_by_entry_name(name);
    if (!desc)
        return CUDA_ERROR_NOT_FOUND;
    struct CUkern_st *k = calloc(1, sizeof(*k));
    if (!k)
        return CUDA_ERROR_OUT_OF_MEMORY;
    k->fn.magic = FAKE_LIVE_MAGIC;
    k->fn.desc = desc;
    k->fn.max_dynamic_shared = FAKE_SHARED_PER_BLOCK;
    k->fn.regs = kernel_regs(name);
    snprintf(k->fn.name, sizeof(k->fn.name), "%s", name);
    k->next = img->kernels;
    img->kernels = k;
    *out = k;
    return CUDA_SUCCESS;
}

static CUresult find_kernel(struct fake_image *img, int is_library, const char *name,
                            struct CUkern_st **out)
{
    *out = NULL;
    if (!name || strlen(name) >= sizeof((*out)->fn.name))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    fake_lock();
    if (!image_live(img, is_library))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!(*out = cached_kernel(img, name)))
        r = new_kernel(img, name, out);
    fake_unlock();
    return r;
}

CUresult fake_cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    FAKE_ENTER(cuLibraryGetKernel);
    if (!kernel || !library)
        return CUDA_ERROR_INVALID_VALUE;
    return find_kernel(&library->image, 1, name, kernel);
}

CUresult fake_cuKernelGetFunction(CUfunction *fn, CUkernel kernel)
{
    FAKE_ENTER(cuKernelGetFunction);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!fn || !kernel || kernel->fn.magic != FAKE_LIVE_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *fn = &kernel->fn;
    return CUDA_SUCCESS;
}

CUresult fake_cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name)
{
    FAKE_ENTER(cuModuleGetFunction);
    if (!fn || !module)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUkern_st *k;
    CUresult r = find_kernel(&module->image, 0, name, &k);
    *fn = r == CUDA_SUCCESS ? &k->fn : NULL;
    return r;
}

static int function_ok(CUfunction fn) { return fn && fn->magic == FAKE_LIVE_MAGIC; }

CUresult fake_cuFuncGetAttribute(int *value, CUfunction_attribute attrib, CUfunction fn)
{
    FAKE_ENTER(cuFuncGetAttribute);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!function_ok(fn))
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = 0; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = fn->regs; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = fake.cfg.sm; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *value = fn->max_dynamic_shared;
        return CUDA_SUCCESS;
    default:
        fprintf(stderr, "fake libcuda: function attribute %d is not modelled\n", attrib);
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult fake_cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attrib, int value)
{
    FAKE_ENTER(cuFuncSetAttribute);
    if (!function_ok(fn))
        return CUDA_ERROR_INVALID_HANDLE;
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && value >= 0 &&
        value <= FAKE_SHARED_PER_BLOCK_OPTIN) {
        fn->max_dynamic_shared = value;
        return CUDA_SUCCESS;
    }
    if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT && value >= -1 &&
        value <= 100)
        return CUDA_SUCCESS;
    return CUDA_ERROR_INVALID_VALUE;
}

/*
 * Blocks of fn that fit on one SM at once, limited like Hopper's: 2048 threads,
 * 32 blocks, 64 Ki registers (allocated per warp, per-thread counts rounded up
 * to 8; see kernel_regs) and 228 KiB of shared memory with 1 KiB reserved per
 * block. With ptxas's register counts and the real shared memory of the
 * attention entries this gives 4 blocks of the GQA d128 bf16 entry (128
 * registers) and 1 of the MLA bf16 entry (196 registers) on sm_90.
 */
CUresult fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int *num_blocks, CUfunction fn,
                                                          int block_size, size_t dynamic_smem_bytes)
{
    FAKE_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor);
    if (!num_blocks || block_size <= 0 || block_size > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (!function_ok(fn))
        return CUDA_ERROR_INVALID_HANDLE;
    if (dynamic_smem_bytes > (size_t)fn->max_dynamic_shared) {
        *num_blocks = 0;
        return CUDA_SUCCESS;
    }
    const int warps = (block_size + 31) / 32;
    int blocks = FAKE_THREADS_PER_SM / (warps * 32);
    const int by_regs = FAKE_REGS_PER_SM / (warps * 32 * ((fn->regs + 7) / 8 * 8));
    const int by_smem = (int)(FAKE_SHARED_PER_SM / (dynamic_smem_bytes + FAKE_SHARED_RESERVED_PER_BLOCK));
    blocks = blocks < by_regs ? blocks : by_regs;
    blocks = blocks < by_smem ? blocks : by_smem;
    *num_blocks = blocks < FAKE_BLOCKS_PER_SM ? blocks : FAKE_BLOCKS_PER_SM;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Launches. */

static CUresult check_launch_shape(CUfunction fn, unsigned int gx, unsigned int gy,
                                   unsigned int gz, unsigned int bx, unsigned int by,
                                   unsigned int bz, unsigned int shared_bytes)
{
    if (!gx || !gy || !gz || gy > 65535 || gz > 65535 || !bx || !by || !bz ||
        (unsigned long long)bx * by * bz > 1024 || bz > 64)
        return CUDA_ERROR_INVALID_VALUE;
    if (shared_bytes > (unsigned int)fn->max_dynamic_shared) {
        fprintf(stderr, "fake libcuda: launch of %s asks %u bytes of dynamic shared memory, "
                "above its limit %d (cuFuncSetAttribute)\n", fn->name, shared_bytes,
                fn->max_dynamic_shared);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* The grid must be the one the kernel's params call for, or the CPU run (which
 * covers dcpk_<k>_grid(params)) would differ from what a GPU does. */
static CUresult check_grid(CUfunction fn, const void *params, unsigned int gx, unsigned int gy,
                           unsigned int gz)
{
    struct dcpk_grid g = fn->desc->grid(params);
    if (g.x == gx && g.y == gy && g.z == gz)
        return CUDA_SUCCESS;
    fprintf(stderr, "fake libcuda: launch of %s with grid (%u, %u, %u) but its params call "
            "for (%u, %u, %u)\n", fn->name, gx, gy, gz, g.x, g.y, g.z);
    return CUDA_ERROR_INVALID_VALUE;
}

/* A queued launch: the kernel and its copy of the parameter struct. */
struct launch_work {
    const struct dcpk_kernel_desc *desc;
    _Alignas(16) unsigned char params[]; /* a kernel gets a copy of its argument */
};

static void run_on_cpu(void *arg)
{
    const struct launch_work *w = arg;
    const struct dcpk_kernel_desc *d = w->desc;
    size_t scratch_bytes = d->scratch(w->params);
    void *scratch = scratch_bytes ? malloc(scratch_bytes) : NULL;
    if (scratch_bytes && !scratch) {
        fprintf(stderr, "fake libcuda: no memory for the scratch of a dcpk_%s launch\n", d->name);
        return;
    }
    d->cpu(w->params, 0, dcpk_grid_items(d->grid(w->params)), scratch);
    free(scratch);
    __atomic_add_fetch(&fake.stats.launches, 1, __ATOMIC_RELAXED);
}

/*
 * Whether an attention or sparse attention entry serves a launch. Like the real
 * entries, one that gets another block size, dtype, head size, a misaligned cache
 * or a q/out dtype that is no activation dtype returns without doing anything:
 * cuLaunchKernel succeeds and the output keeps what it held.
 * Other kernels serve any launch.
 */
static int entry_serves(CUfunction fn, unsigned int block_x, const void *params)
{
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT + DCPK_SPARSE_VARIANT_COUNT; i++) {
        const int sparse = i >= DCPK_ATTN_VARIANT_COUNT;
        const struct dcpk_attn_variant *v = sparse ? dcpk_sparse_variant_at(i - DCPK_ATTN_VARIANT_COUNT)
                                                   : dcpk_attn_variant_at(i);
        if (strcmp(v->entry, fn->name) != 0)
            continue;
        if (sparse) {
            const struct dcpk_sparse_attn_params *p = params;
            return block_x == v->threads && p->dtype == v->dtype && p->qk_dim == v->qk_dim &&
                   p->v_dim == v->v_dim && (p->k_cache | p->v_cache) % 16 == 0 && dcpk_act_dtype_ok(p->q_dtype) &&
                   dcpk_act_dtype_ok(p->out_dtype);
        }
        const struct dcpk_attn_params *p = params;
        return block_x == v->threads && p->dtype == v->dtype && p->qk_dim == v->qk_dim &&
               p->v_dim == v->v_dim && (p->k_cache | p->v_cache) % 16 == 0 &&
               dcpk_act_dtype_ok(p->q_dtype) && dcpk_act_dtype_ok(p->out_dtype);
    }
    return 1;
}

CUresult fake_cuLaunchKernel(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                             void **params, void **extra)
{
    FAKE_ENTER(cuLaunchKernel);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!function_ok(fn) || !fn->desc || !fake_stream_ok(stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (extra || !params || !params[0])
        return CUDA_ERROR_INVALID_VALUE; /* kernels take one struct via kernelParams */
    r = check_launch_shape(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes);
    if (r != CUDA_SUCCESS)
        return r;
    const size_t work_bytes = sizeof(struct launch_work) + (fn->desc->params_size + 15) / 16 * 16;
    struct launch_work *w = malloc(work_bytes);
    if (!w)
        return CUDA_ERROR_OUT_OF_MEMORY;
    w->desc = fn->desc;
    memcpy(w->params, params[0], fn->desc->params_size);
    r = check_grid(fn, w->params, grid_x, grid_y, grid_z);
    if (r != CUDA_SUCCESS || !entry_serves(fn, block_x, w->params)) {
        if (r == CUDA_SUCCESS)
            __atomic_add_fetch(&fake.stats.unserved_launches, 1, __ATOMIC_RELAXED);
        free(w);
        return r;
    }
    /* FAKE_CUDA_HANG_LAUNCH: a kernel that never returns (a deadlock, a peer that
     * never writes): its stream stalls for good, with the kernel behind the stall. */
    if (fake.cfg.hang_launch && __atomic_add_fetch(&fake.launch_attempts, 1, __ATOMIC_RELAXED) == fake.cfg.hang_launch)
        fake_cuda_stream_stall(stream);
    return fake_enqueue(stream, run_on_cpu, w, work_bytes, 0);
}

/* ------------------------------------------------------------------------- */

void fake_exec_cleanup(void)
{
    while (images) {
        struct fake_image *img = images;
        images = img->next;
        free_image_contents(img);
        free(img); /* first member of CUlib_st / CUmod_st */
    }
}
