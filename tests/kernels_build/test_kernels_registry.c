/*
 * The embedded kernel registry (loader/embedded.h) as the loader will read it:
 * the zstd frame decompresses to image_size bytes whose FNV-1a hashes match, the
 * image is a fatbin holding SASS (ELF) for every kernel_archs target and PTX for
 * the newest, none of it compressed by nvcc, and every entry point of variants.h
 * is in every image, and the tensor-core attention entries use mma.sync and
 * ldmatrix (PTX), the SIMT ones neither. When cuobjdump is found it must list the
 * same targets, and the tensor-core entries' SASS must have HMMA and LDSM.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "dcp_build_config.h"
#include "embedded.h"
#include "kernel_list.h"
#include "test_util.h"

/*
 * The fatbin container (as nvcc writes it): a 16-byte header
 *   u32 magic 0xBA55ED50, u16 version, u16 header size, u64 bytes of entries,
 * then entries, each a header followed by its payload:
 *   u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size,
 *   u32 compressed size, u32 -, u16 minor, u16 major, u32 arch (80 = sm_80),
 *   u32 name offset, u32 name size, u64 flags, u64 -, u64 decompressed size.
 * Flags 0x2000 (LZ4) and 0x8000 (zstd) mark a payload nvcc compressed.
 */
enum {
    FATBIN_MAGIC = 0xBA55ED50u,
    FATBIN_PTX = 1,
    FATBIN_ELF = 2,
    FATBIN_ENTRY_HEADER_MIN = 64,
    FATBIN_ENTRIES_MAX = 32,
};
#define FATBIN_FLAGS_COMPRESSED 0xA000ull
/* An architecture-specific image (sm_90a): the same arch number, this flag set. */
#define FATBIN_FLAGS_ARCH_SPECIFIC 0x100000ull

struct fatbin_entry {
    unsigned kind, arch;
    uint64_t flags, decompressed_size;
    const unsigned char *payload;
    uint64_t size;
};

static unsigned char *image;
static size_t image_size;
static struct fatbin_entry fat[FATBIN_ENTRIES_MAX];
static size_t nfat;
static struct kernel_entry entries[KERNEL_LIST_MAX];
static size_t nentries;
static unsigned archs[KERNEL_ARCHS_MAX];
static size_t narchs;

static uint64_t le(const unsigned char *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/** Splits image into fat[]; -1 when it is not a well-formed fatbin. */
static int parse_fatbin(void)
{
    if (image_size < 16 || le(image, 4) != FATBIN_MAGIC)
        return -1;
    const uint64_t header = le(image + 6, 2), total = le(image + 8, 8);
    if (header + total != image_size)
        return -1;
    for (uint64_t off = header; off < image_size; nfat++) {
        const unsigned char *e = image + off;
        if (nfat == FATBIN_ENTRIES_MAX || image_size - off < FATBIN_ENTRY_HEADER_MIN)
            return -1;
        const uint64_t ehdr = le(e + 4, 4), size = le(e + 8, 8);
        if (ehdr < FATBIN_ENTRY_HEADER_MIN || ehdr > image_size - off || size > image_size - off - ehdr)
            return -1;
        fat[nfat] = (struct fatbin_entry){
            .kind = (unsigned)le(e, 2),
            .arch = (unsigned)le(e + 28, 4),
            .flags = le(e + 40, 8),
            .decompressed_size = le(e + 56, 8),
            .payload = e + ehdr,
            .size = size,
        };
        off += ehdr + size;
    }
    return 0;
}

/** The image of kind for target code (kernel_list.h: 900 sm_90, 901 sm_90a). */
static const struct fatbin_entry *find_fat(unsigned kind, unsigned code)
{
    for (size_t i = 0; i < nfat; i++)
        if (fat[i].kind == kind && fat[i].arch == kernel_arch_sm(code) &&
            ((fat[i].flags & FATBIN_FLAGS_ARCH_SPECIFIC) != 0) == kernel_arch_specific(code))
            return &fat[i];
    return NULL;
}

static void test_registry_entry(void **state)
{
    (void)state;
    assert_int_equal(dcp_embedded_module_count, 1);
    const struct dcp_embedded_module *m = &dcp_embedded_modules[0];
    assert_string_equal(m->name, "dcp_kernels");
    assert_int_equal(dcp_fnv1a64(m->zstd, m->zstd_size), m->zstd_hash);
    assert_true(m->zstd_size < m->image_size);
    /* targets = sm_<a> for each arch, then compute_<newest>. */
    char want[256] = "";
    char name[16];
    for (size_t a = 0; a < narchs; a++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s,", kernel_arch_name(archs[a], "sm_", name, sizeof(name)));
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "compute_%u", kernel_arch_ptx(archs, narchs));
    assert_string_equal(m->targets, want);
}

static void test_image_decompresses_to_its_hash(void **state)
{
    (void)state;
    const struct dcp_embedded_module *m = &dcp_embedded_modules[0];
    assert_int_equal(ZSTD_getFrameContentSize(m->zstd, m->zstd_size), m->image_size);
    assert_int_equal(image_size, m->image_size);
    assert_int_equal(dcp_fnv1a64(image, image_size), m->image_hash);
}

static void test_fatbin_targets(void **state)
{
    (void)state;
    assert_int_equal(parse_fatbin(), 0);
    char name[16];
    for (size_t a = 0; a < narchs; a++)
        if (!find_fat(FATBIN_ELF, archs[a]))
            fail_msg("no SASS for %s", kernel_arch_name(archs[a], "sm_", name, sizeof(name)));
    assert_non_null(find_fat(FATBIN_PTX, 10 * kernel_arch_ptx(archs, narchs)));
    /* Exactly those: one ELF per target plus one PTX. */
    assert_int_equal(nfat, narchs + 1);
    for (size_t i = 0; i < nfat; i++) {
        if ((fat[i].flags & FATBIN_FLAGS_COMPRESSED) || fat[i].decompressed_size)
            fail_msg("entry %zu (kind %u, arch %u) is compressed by nvcc (flags 0x%llx)", i, fat[i].kind,
                     fat[i].arch, (unsigned long long)fat[i].flags);
        if (fat[i].kind == FATBIN_ELF)
            assert_memory_equal(fat[i].payload, "\177ELF", 4);
    }
}

/* An ELF names an entry in its string table ("\0name\0"); PTX declares ".entry name(". */
static int image_has_entry(const struct fatbin_entry *f, const char *name)
{
    char needle[128];
    const int n = f->kind == FATBIN_ELF ? snprintf(needle, sizeof(needle), "%c%s%c", 0, name, 0)
                                        : snprintf(needle, sizeof(needle), ".entry %s(", name);
    return memmem(f->payload, f->size, needle, (size_t)n) != NULL;
}

static void test_every_entry_in_every_image(void **state)
{
    (void)state;
    assert_true(nfat > 0);
    for (size_t i = 0; i < nfat; i++)
        for (size_t e = 0; e < nentries; e++)
            if (!image_has_entry(&fat[i], entries[e].name))
                fail_msg("%s missing from the %s image for %u", entries[e].name,
                         fat[i].kind == FATBIN_ELF ? "SASS" : "PTX", fat[i].arch);
}

/** The PTX text of entry `name` in f: from its ".entry name(" to the next entry (or the end). */
static const char *ptx_body(const struct fatbin_entry *f, const char *name, size_t *len)
{
    char needle[128];
    const int n = snprintf(needle, sizeof(needle), ".entry %s(", name);
    const char *start = memmem(f->payload, f->size, needle, (size_t)n);
    if (!start)
        return NULL;
    const char *end = (const char *)f->payload + f->size;
    const char *next = memmem(start + n, (size_t)(end - start - n), ".entry ", 7);
    *len = (size_t)((next ? next : end) - start);
    return start;
}

/*
 * The tensor-core attention entries (variants.h tensor_core = 1) are made of
 * mma.sync m16n8k16 and ldmatrix in the PTX, and the SIMT ones of neither, so
 * the entry name the backend reports tells which arithmetic a run used.
 */
static void test_tensor_core_entries_use_mma(void **state)
{
    (void)state;
    const struct fatbin_entry *ptx = find_fat(FATBIN_PTX, 10 * kernel_arch_ptx(archs, narchs));
    assert_non_null(ptx);
    unsigned tc = 0;
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++) {
        const struct dcpk_attn_variant *v = dcpk_attn_variant_at(i);
        size_t len = 0;
        const char *body = ptx_body(ptx, v->entry, &len);
        assert_non_null(body);
        const int mma = memmem(body, len, "mma.sync.aligned.m16n8k16.row.col.f32", 37) != NULL;
        const int ldm = memmem(body, len, "ldmatrix.sync.aligned.m8n8.x4", 29) != NULL;
        /* Both families read V (MLA: as B, GQA: as A of V^T . P^T) through the transposing load. */
        const int ldt = memmem(body, len, "ldmatrix.sync.aligned.m8n8.x4.trans", 35) != NULL;
        if (mma != (int)v->tensor_core || ldm != (int)v->tensor_core || ldt != (int)v->tensor_core)
            fail_msg("%s (tensor_core %u): mma.sync %s, ldmatrix %s, ldmatrix .trans %s in its PTX", v->entry,
                     v->tensor_core, mma ? "present" : "absent", ldm ? "present" : "absent", ldt ? "present" : "absent");
        tc += v->tensor_core;
    }
    assert_true(tc > 0);
}

/* And ptxas kept them: every SASS target's code of a tensor-core entry has HMMA.16816 and LDSM. */
static void test_tensor_core_entries_sass(void **state)
{
    (void)state;
    const char *tool = getenv("DCP_CUOBJDUMP");
    if (!tool || !*tool)
        skip();
    char path[] = "/tmp/dcp_kernels_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, image, image_size), (ssize_t)image_size);
    close(fd);
    for (uint32_t i = 0; i < DCPK_ATTN_VARIANT_COUNT; i++) {
        const struct dcpk_attn_variant *v = dcpk_attn_variant_at(i);
        if (!v->tensor_core)
            continue;
        char cmd[1024], line[512];
        snprintf(cmd, sizeof(cmd), "'%s' -sass -fun %s '%s' 2>&1", tool, v->entry, path);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        unsigned arch = 0, hmma[KERNEL_ARCHS_MAX] = {0}, ldsm[KERNEL_ARCHS_MAX] = {0};
        while (fgets(line, sizeof(line), p)) {
            const char *a = strstr(line, "arch = sm_");
            if (a) {
                char *end;
                arch = 10 * (unsigned)strtoul(a + 10, &end, 10);
                arch += *end == 'a';
            }
            for (size_t k = 0; k < narchs; k++)
                if (archs[k] == arch) {
                    hmma[k] += strstr(line, "HMMA.16816.F32") != NULL;
                    ldsm[k] += strstr(line, "LDSM.16.M") != NULL;
                }
        }
        assert_int_equal(pclose(p), 0);
        for (size_t k = 0; k < narchs; k++) {
            char name[16];
            kernel_arch_name(archs[k], "sm_", name, sizeof(name));
            if (!hmma[k] || !ldsm[k])
                fail_msg("%s for %s: %u HMMA.16816.F32, %u LDSM in its SASS", v->entry, name, hmma[k], ldsm[k]);
            print_message("%s %s: %u HMMA.16816.F32, %u LDSM\n", v->entry, name, hmma[k], ldsm[k]);
        }
    }
    unlink(path);
}

/** Runs `cuobjdump option file` and returns its output (static buffer) or NULL. */
static const char *cuobjdump(const char *tool, const char *option, const char *file)
{
    static char out[16384];
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' %s '%s' 2>&1", tool, option, file);
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    const size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    return pclose(p) == 0 ? out : NULL;
}

static void test_cuobjdump_agrees(void **state)
{
    (void)state;
    const char *tool = getenv("DCP_CUOBJDUMP");
    if (!tool || !*tool)
        skip();
    char path[] = "/tmp/dcp_kernels_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, image, image_size), (ssize_t)image_size);
    close(fd);
    const char *elf = cuobjdump(tool, "--list-elf", path);
    assert_non_null(elf);
    for (size_t a = 0; a < narchs; a++) {
        char want[32], name[16];
        snprintf(want, sizeof(want), ".%s.cubin", kernel_arch_name(archs[a], "sm_", name, sizeof(name)));
        if (!strstr(elf, want))
            fail_msg("cuobjdump --list-elf shows no %s:\n%s", want, elf);
    }
    const char *ptx = cuobjdump(tool, "--list-ptx", path);
    assert_non_null(ptx);
    char want[32];
    snprintf(want, sizeof(want), ".sm_%u.ptx", kernel_arch_ptx(archs, narchs));
    if (!strstr(ptx, want))
        fail_msg("cuobjdump --list-ptx shows no %s:\n%s", want, ptx);
    unlink(path);
}

/** Decompresses the registry's module into image; -1 on failure. */
static int decompress_module(void)
{
    const struct dcp_embedded_module *m = &dcp_embedded_modules[0];
    image = malloc(m->image_size);
    if (!image)
        return -1;
    const size_t n = ZSTD_decompress(image, m->image_size, m->zstd, m->zstd_size);
    if (ZSTD_isError(n))
        return -1;
    image_size = n;
    return 0;
}

int main(void)
{
#if !DCP_HAVE_KERNELS
    puts("kernels not built (no nvcc): skipped");
    return 77;
#endif
    nentries = kernel_list(entries);
    narchs = kernel_archs(archs);
    if (narchs == 0 || dcp_embedded_module_count < 1 || decompress_module() != 0) {
        fprintf(stderr, "no registry to test (DCP_KERNEL_ARCHS=%s, %zu modules)\n",
                getenv("DCP_KERNEL_ARCHS") ? getenv("DCP_KERNEL_ARCHS") : "unset", dcp_embedded_module_count);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_entry),
        cmocka_unit_test(test_image_decompresses_to_its_hash),
        cmocka_unit_test(test_fatbin_targets),
        cmocka_unit_test(test_every_entry_in_every_image),
        cmocka_unit_test(test_cuobjdump_agrees),
        cmocka_unit_test(test_tensor_core_entries_use_mma),
        cmocka_unit_test(test_tensor_core_entries_sass),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(image);
    return rc;
}
