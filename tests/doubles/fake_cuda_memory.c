/*
 * fake_cuda_memory.c: "device" memory of the libcuda.so.1 double. It lives on the
 * host (a CUdeviceptr is a host address); new allocations are filled with 0xFF
 * bytes (NaN as floats) so reads of memory nobody wrote show up. The VMM API
 * reserves address space with mmap(PROT_NONE), backs physical allocations with
 * memfd files and maps them there with MAP_SHARED|MAP_FIXED, so one allocation
 * can be mapped at several addresses, as on a GPU. Copies and memsets check that
 * every device byte they touch is allocated (and accessible, for VMM mappings)
 * when they are enqueued, and run when their stream gets there
 * (fake_cuda_stream.c); frees and unmaps first let the queued work finish.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"

#define FAKE_POISON 0xFF
#define FAKE_ALLOC_ALIGN 256

/** A physical VMM allocation (its CUmemGenericAllocationHandle is the address of this). */
struct fake_phys {
    int fd;
    size_t size;
    int device;
    int mappings;  /* live cuMemMap of it */
    int released;  /* cuMemRelease called: freed when the last mapping goes */
    struct fake_phys *next;
};

/** A cuMemAddressReserve range. */
struct fake_reservation {
    uintptr_t base;
    size_t size;
    void *map_base; /* what mmap returned (base is aligned inside it) */
    size_t map_size;
    struct fake_reservation *next;
};

/* Ranges: cuMemAlloc blocks, cuMemAllocHost blocks and VMM mappings. */
struct memory_range {
    uintptr_t base;
    size_t size;
    int device;               /* -1: pinned host memory */
    int accessible;           /* VMM mappings: after cuMemSetAccess */
    struct fake_phys *phys;   /* VMM mappings only */
    struct memory_range *next;
};

static struct memory_range *ranges;
static struct fake_reservation *reservations;
static struct fake_phys *physicals;

/* ------------------------------------------------------------------------- */
/* Bookkeeping (lock held). */

static struct memory_range *add_range(uintptr_t base, size_t size, int device,
                                      struct fake_phys *phys)
{
    struct memory_range *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    *r = (struct memory_range){base, size, device, phys == NULL, phys, ranges};
    ranges = r;
    return r;
}

static struct memory_range *range_at(uintptr_t p)
{
    for (struct memory_range *r = ranges; r; r = r->next)
        if (p >= r->base && p - r->base < r->size)
            return r;
    return NULL;
}

/* Unlinks and returns the range starting exactly at base, of the given kind. */
static struct memory_range *take_range(uintptr_t base, int host)
{
    for (struct memory_range **pr = &ranges; *pr; pr = &(*pr)->next) {
        struct memory_range *r = *pr;
        if (r->base == base && (r->device < 0) == host && !r->phys) {
            *pr = r->next;
            return r;
        }
    }
    return NULL;
}

/* Whether [ptr, ptr + size) is covered by accessible device memory. */
static int device_range_ok(CUdeviceptr ptr, size_t size)
{
    uintptr_t p = (uintptr_t)ptr;
    if (size > UINTPTR_MAX - p)
        return 0;
    uintptr_t end = p + size;
    while (p < end) {
        struct memory_range *r = range_at(p);
        if (!r || r->device < 0 || !r->accessible)
            return 0;
        p = r->base + r->size;
    }
    return 1;
}

/* Accounts a device allocation of size bytes on dev, or says why not. */
static CUresult charge_device(int dev, size_t size)
{
    fake.alloc_attempts++;
    if (fake.cfg.fail_alloc && fake.alloc_attempts == fake.cfg.fail_alloc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (size > fake.cfg.memory_bytes - fake.used_bytes[dev])
        return CUDA_ERROR_OUT_OF_MEMORY;
    fake.used_bytes[dev] += size;
    fake.stats.live_device_bytes += size;
    fake.stats.device_allocs++;
    return CUDA_SUCCESS;
}

static void uncharge_device(int dev, size_t size)
{
    fake.used_bytes[dev] -= size;
    fake.stats.live_device_bytes -= size;
}

/* ------------------------------------------------------------------------- */
/* cuMemAlloc family. */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

CUresult fake_cuMemAlloc(CUdeviceptr *dptr, size_t bytes)
{
    FAKE_ENTER(cuMemAlloc);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytes == 0 || bytes > SIZE_MAX / 2)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = fake_current_device();
    fake_lock();
    r = charge_device(dev, bytes);
    /* The block is rounded up for aligned_alloc; the range is exactly what was
     * asked for, so copies past the end are caught. */
    void *p = r == CUDA_SUCCESS ? aligned_alloc(FAKE_ALLOC_ALIGN, round_up(bytes, FAKE_ALLOC_ALIGN))
                                : NULL;
    if (r == CUDA_SUCCESS && (!p || !add_range((uintptr_t)p, bytes, dev, NULL))) {
        free(p);
        uncharge_device(dev, bytes);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fake_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    memset(p, FAKE_POISON, bytes);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult fake_cuMemFree(CUdeviceptr dptr)
{
    FAKE_ENTER(cuMemFree);
    if (dptr == 0)
        return CUDA_SUCCESS;
    fake_drain_device(); /* like the driver, freeing waits for the device's queued work */
    fake_lock();
    struct memory_range *r = take_range((uintptr_t)dptr, 0);
    if (r) {
        uncharge_device(r->device, r->size);
        fake.stats.device_frees++;
    }
    fake_unlock();
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    free((void *)r->base);
    free(r);
    return CUDA_SUCCESS;
}

CUresult fake_cuMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    FAKE_ENTER(cuMemGetInfo);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    *total_bytes = fake.cfg.memory_bytes;
    *free_bytes = fake.cfg.memory_bytes - fake.used_bytes[fake_current_device()];
    fake_unlock();
    return CUDA_SUCCESS;
}

CUresult fake_cuMemAllocHost(void **ptr, size_t bytes)
{
    FAKE_ENTER(cuMemAllocHost);
    CUresult r = fake_need_context();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || bytes == 0 || bytes > SIZE_MAX / 2)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = aligned_alloc(FAKE_ALLOC_ALIGN, round_up(bytes, FAKE_ALLOC_ALIGN));
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fake_lock();
    struct memory_range *range = add_range((uintptr_t)p, bytes, -1, NULL);
    if (range)
        fake.stats.live_host_allocs++;
    fake_unlock();
    if (!range) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = p;
    return CUDA_SUCCESS;
}

CUresult fake_cuMemFreeHost(void *ptr)
{
    FAKE_ENTER(cuMemFreeHost);
    fake_drain_device();
    fake_lock();
    struct memory_range *r = ptr ? take_range((uintptr_t)ptr, 1) : NULL;
    if (r)
        fake.stats.live_host_allocs--;
    fake_unlock();
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    free(ptr);
    free(r);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Copies and memsets: checked when enqueued, done when their stream gets there. */

/* Checks the device side(s) of a copy; CUDA_ERROR_INVALID_VALUE with a note on
 * stderr (the runtime's message will only say "invalid argument"). */
static CUresult check_device(const char *call, CUdeviceptr p, size_t bytes)
{
    fake_lock();
    int ok = device_range_ok(p, bytes);
    fake_unlock();
    if (ok)
        return CUDA_SUCCESS;
    fprintf(stderr, "fake libcuda: %s: [0x%llx, +%zu) is not allocated, accessible device memory\n",
            call, p, bytes);
    return CUDA_ERROR_INVALID_VALUE;
}

/* Whether host memory is page-locked (cuMemAllocHost). The driver reads a pinned
 * source, or writes a pinned destination, when the copy runs on its stream; a
 * pageable source is staged when the call is made. */
static int host_pinned(const void *p)
{
    fake_lock();
    const struct memory_range *r = range_at((uintptr_t)p);
    int pinned = r && r->device < 0;
    fake_unlock();
    return pinned;
}

static CUresult copy_prologue(CUstream stream)
{
    CUresult r = fake_need_context();
    if (r == CUDA_SUCCESS && !fake_stream_ok(stream))
        r = CUDA_ERROR_INVALID_HANDLE;
    return r;
}

/* A queued copy; a staged (pageable) source is kept in data. */
struct copy_work {
    void *dst;
    const void *src;
    size_t bytes;
    unsigned char data[];
};

static void run_copy(void *arg)
{
    struct copy_work *c = arg;
    memmove(c->dst, c->src, c->bytes);
}

/* Enqueues a copy of bytes from src to dst on stream; stage: take the source now;
 * sync: return once it is done. */
static CUresult enqueue_copy(CUstream stream, void *dst, const void *src, size_t bytes, int stage,
                             int sync)
{
    if (!bytes)
        return CUDA_SUCCESS;
    /* A captured copy reads its source when the graph runs: one staged now would
     * replay stale data (the driver refuses pageable memory in a capture). */
    if (stage && fake_stream_capturing(stream))
        return fake_capture_refuse(stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    struct copy_work *c = malloc(sizeof(*c) + (stage ? bytes : 0));
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->dst = dst;
    c->bytes = bytes;
    c->src = src;
    if (stage) {
        memcpy(c->data, src, bytes);
        c->src = c->data;
    }
    return fake_enqueue(stream, run_copy, c, sizeof(*c) + (stage ? bytes : 0), sync);
}

/*
 * Host to device. A pageable source is staged at once and the call returns, but
 * the data lands only when the stream gets there: for cuMemcpyHtoD that is the
 * legacy stream, which the runtime's non-blocking streams do not wait for (the
 * hazard of copying per-step metadata with cuMemcpyHtoD). A pinned source is
 * read when the copy runs; the synchronous call then waits for it.
 */
static CUresult copy_to_device(const char *call, CUdeviceptr dst, const void *src, size_t bytes,
                               CUstream stream, int synchronous)
{
    CUresult r = copy_prologue(stream);
    if (r == CUDA_SUCCESS && bytes && !src)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = check_device(call, dst, bytes);
    if (r != CUDA_SUCCESS)
        return r;
    const int pinned = host_pinned(src);
    if (synchronous && !pinned) /* the driver synchronizes the stream before staging */
        fake_drain_stream(stream);
    return enqueue_copy(stream, (void *)(uintptr_t)dst, src, bytes, !pinned, synchronous && pinned);
}

/* Device to host: waits for the copy unless the destination is pinned and the
 * call asynchronous. */
static CUresult copy_to_host(const char *call, void *dst, CUdeviceptr src, size_t bytes,
                             CUstream stream, int synchronous)
{
    CUresult r = copy_prologue(stream);
    if (r == CUDA_SUCCESS && bytes && !dst)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = check_device(call, src, bytes);
    if (r != CUDA_SUCCESS)
        return r;
    return enqueue_copy(stream, dst, (const void *)(uintptr_t)src, bytes, 0,
                        synchronous || !host_pinned(dst));
}

CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes)
{
    FAKE_ENTER(cuMemcpyHtoD);
    return copy_to_device("cuMemcpyHtoD", dst, src, bytes, NULL, 1);
}

CUresult fake_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes)
{
    FAKE_ENTER(cuMemcpyDtoH);
    return copy_to_host("cuMemcpyDtoH", dst, src, bytes, NULL, 1);
}

CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream)
{
    FAKE_ENTER(cuMemcpyHtoDAsync);
    return copy_to_device("cuMemcpyHtoDAsync", dst, src, bytes, stream, 0);
}

CUresult fake_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
    FAKE_ENTER(cuMemcpyDtoHAsync);
    return copy_to_host("cuMemcpyDtoHAsync", dst, src, bytes, stream, 0);
}

static CUresult device_copy(const char *dst_what, const char *src_what, CUdeviceptr dst,
                            CUdeviceptr src, size_t bytes, CUstream stream)
{
    CUresult r = check_device(dst_what, dst, bytes);
    if (r == CUDA_SUCCESS)
        r = check_device(src_what, src, bytes);
    if (r == CUDA_SUCCESS)
        r = enqueue_copy(stream, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, 0, 0);
    return r;
}

CUresult fake_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
    FAKE_ENTER(cuMemcpyDtoDAsync);
    CUresult r = copy_prologue(stream);
    return r != CUDA_SUCCESS ? r : device_copy("cuMemcpyDtoD (destination)", "cuMemcpyDtoD (source)",
                                               dst, src, bytes, stream);
}

CUresult fake_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                CUcontext src_ctx, size_t bytes, CUstream stream)
{
    FAKE_ENTER(cuMemcpyPeerAsync);
    CUresult r = copy_prologue(stream);
    if (r == CUDA_SUCCESS && (!dst_ctx || !src_ctx))
        r = CUDA_ERROR_INVALID_CONTEXT;
    return r != CUDA_SUCCESS ? r : device_copy("cuMemcpyPeer (destination)", "cuMemcpyPeer (source)",
                                               dst, src, bytes, stream);
}

/* A queued memset of count elements of width bytes. */
struct memset_work {
    void *dst;
    unsigned int value;
    size_t count;
    int width;
};

static void run_memset(void *arg)
{
    const struct memset_work *m = arg;
    if (m->width == 1) {
        memset(m->dst, (int)m->value, m->count);
        return;
    }
    unsigned int *p = m->dst;
    for (size_t i = 0; i < m->count; i++)
        p[i] = m->value;
}

static CUresult enqueue_memset(const char *call, CUdeviceptr dst, unsigned int value, size_t count,
                               int width, CUstream stream)
{
    CUresult r = copy_prologue(stream);
    if (r == CUDA_SUCCESS && (dst % (unsigned)width || count > SIZE_MAX / (unsigned)width))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = check_device(call, dst, count * (unsigned)width);
    if (r != CUDA_SUCCESS || !count)
        return r;
    struct memset_work *m = malloc(sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (struct memset_work){(void *)(uintptr_t)dst, value, count, width};
    return fake_enqueue(stream, run_memset, m, sizeof(*m), 0);
}

CUresult fake_cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream)
{
    FAKE_ENTER(cuMemsetD8Async);
    return enqueue_memset("cuMemsetD8", dst, value, count, 1, stream);
}

CUresult fake_cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream)
{
    FAKE_ENTER(cuMemsetD32Async);
    return enqueue_memset("cuMemsetD32", dst, value, count, 4, stream);
}

/* ------------------------------------------------------------------------- */
/* Pointer attributes. */

static CUresult write_pointer_attribute(void *data, CUpointer_attribute attribute,
                                        const struct memory_range *r)
{
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
        CUcontext ctx = r->device >= 0 ? &fake.contexts[r->device] : NULL;
        memcpy(data, &ctx, sizeof(ctx));
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: {
        unsigned int type = r->device >= 0 ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        memcpy(data, &type, sizeof(type));
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
        int dev = r->device;
        memcpy(data, &dev, sizeof(dev));
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: {
        CUdeviceptr base = r->base;
        memcpy(data, &base, sizeof(base));
        return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        memcpy(data, &r->size, sizeof(r->size));
        return CUDA_SUCCESS;
    default:
        fprintf(stderr, "fake libcuda: pointer attribute %d is not modelled\n", attribute);
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult fake_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    FAKE_ENTER(cuPointerGetAttribute);
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    fake_lock();
    const struct memory_range *r = range_at((uintptr_t)ptr);
    CUresult result = r ? write_pointer_attribute(data, attribute, r) : CUDA_ERROR_INVALID_VALUE;
    fake_unlock();
    return result;
}

/* ------------------------------------------------------------------------- */
/* Virtual memory management. */

static int valid_prop(const CUmemAllocationProp *prop)
{
    return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
           prop->location.id < fake.cfg.devices && !prop->win32HandleMetaData;
}

CUresult fake_cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                            CUmemAllocationGranularity_flags option)
{
    FAKE_ENTER(cuMemGetAllocationGranularity);
    if (!granularity || !valid_prop(prop) || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                              option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = FAKE_GRANULARITY;
    return CUDA_SUCCESS;
}

CUresult fake_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                  CUdeviceptr addr, unsigned long long flags)
{
    FAKE_ENTER(cuMemAddressReserve);
    (void)addr; /* a hint: the fake takes whatever mmap gives */
    if (!ptr || size == 0 || size % FAKE_GRANULARITY || flags ||
        (alignment & (alignment - 1)) || size > SIZE_MAX / 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment < FAKE_GRANULARITY)
        alignment = FAKE_GRANULARITY;
    struct fake_reservation *res = calloc(1, sizeof(*res));
    if (!res)
        return CUDA_ERROR_OUT_OF_MEMORY;
    res->map_size = size + alignment;
    res->map_base = mmap(NULL, res->map_size, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res->map_base == MAP_FAILED) {
        free(res);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    res->base = round_up((uintptr_t)res->map_base, alignment);
    res->size = size;
    fake_lock();
    res->next = reservations;
    reservations = res;
    fake.stats.live_reservations++;
    fake_unlock();
    *ptr = res->base;
    return CUDA_SUCCESS;
}

static int range_has_mappings(uintptr_t base, size_t size)
{
    for (struct memory_range *r = ranges; r; r = r->next)
        if (r->phys && r->base < base + size && base < r->base + r->size)
            return 1;
    return 0;
}

CUresult fake_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    FAKE_ENTER(cuMemAddressFree);
    struct fake_reservation *res = NULL;
    fake_lock();
    for (struct fake_reservation **pr = &reservations; *pr; pr = &(*pr)->next) {
        if ((*pr)->base == ptr && (*pr)->size == size && !range_has_mappings(ptr, size)) {
            res = *pr;
            *pr = res->next;
            fake.stats.live_reservations--;
            break;
        }
    }
    fake_unlock();
    if (!res)
        return CUDA_ERROR_INVALID_VALUE;
    munmap(res->map_base, res->map_size);
    free(res);
    return CUDA_SUCCESS;
}

/* Fills a new physical allocation with the poison pattern. */
static int poison_phys(int fd, size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -1;
    memset(p, FAKE_POISON, size);
    munmap(p, size);
    return 0;
}

static void free_phys(struct fake_phys *phys)
{
    for (struct fake_phys **pp = &physicals; *pp; pp = &(*pp)->next) {
        if (*pp == phys) {
            *pp = phys->next;
            break;
        }
    }
    uncharge_device(phys->device, phys->size);
    close(phys->fd);
    free(phys);
}

CUresult fake_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                          const CUmemAllocationProp *prop, unsigned long long flags)
{
    FAKE_ENTER(cuMemCreate);
    if (!handle || !valid_prop(prop) || flags || size == 0 || size % FAKE_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if (fake.cfg.no_vmm)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct fake_phys *phys = calloc(1, sizeof(*phys));
    if (!phys)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phys = (struct fake_phys){.fd = -1, .size = size, .device = prop->location.id};
    fake_lock();
    CUresult r = charge_device(phys->device, size);
    fake_unlock();
    if (r != CUDA_SUCCESS) {
        free(phys);
        return r;
    }
    phys->fd = memfd_create("fake_cuda_vmm", MFD_CLOEXEC);
    if (phys->fd < 0 || ftruncate(phys->fd, (off_t)size) != 0 || poison_phys(phys->fd, size)) {
        fake_lock();
        free_phys(phys);
        fake_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    fake_lock();
    phys->next = physicals;
    physicals = phys;
    fake_unlock();
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)phys;
    return CUDA_SUCCESS;
}

/* The live, unreleased allocation behind a handle (lock held); NULL for anything else. */
static struct fake_phys *live_phys(CUmemGenericAllocationHandle handle)
{
    for (struct fake_phys *p = physicals; p; p = p->next)
        if ((uintptr_t)p == handle && !p->released)
            return p;
    return NULL;
}

CUresult fake_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    FAKE_ENTER(cuMemRelease);
    fake_lock();
    struct fake_phys *phys = live_phys(handle);
    if (phys) {
        phys->released = 1;
        fake.stats.device_frees++;
        if (phys->mappings == 0)
            free_phys(phys);
    }
    fake_unlock();
    return phys ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static const struct fake_reservation *reservation_holding(uintptr_t base, size_t size)
{
    for (const struct fake_reservation *res = reservations; res; res = res->next)
        if (base >= res->base && size <= res->size && base - res->base <= res->size - size)
            return res;
    return NULL;
}

CUresult fake_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                       CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    FAKE_ENTER(cuMemMap);
    if (flags || size == 0 || ptr % FAKE_GRANULARITY || size % FAKE_GRANULARITY ||
        offset % FAKE_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    fake_lock();
    struct fake_phys *phys = live_phys(handle);
    if (!phys || offset > phys->size || size > phys->size - offset ||
        !reservation_holding(ptr, size) || range_has_mappings(ptr, size))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, phys->fd,
                  (off_t)offset) == MAP_FAILED)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (!add_range(ptr, size, phys->device, phys))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        phys->mappings++;
    fake_unlock();
    return r;
}

/* Whether [base, base + size) is exactly a union of whole mappings. */
static int covered_by_mappings(uintptr_t base, size_t size)
{
    uintptr_t p = base, end = base + size;
    while (p < end) {
        struct memory_range *r = range_at(p);
        if (!r || !r->phys || r->base != p || r->size > end - p)
            return 0;
        p += r->size;
    }
    return 1;
}

CUresult fake_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    FAKE_ENTER(cuMemUnmap);
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    fake_drain_device();
    fake_lock();
    int ok = covered_by_mappings(ptr, size);
    for (struct memory_range **pr = &ranges; ok && *pr;) {
        struct memory_range *r = *pr;
        if (r->phys && r->base >= ptr && r->base < ptr + size) {
            *pr = r->next;
            mmap((void *)r->base, r->size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
            if (--r->phys->mappings == 0 && r->phys->released)
                free_phys(r->phys);
            free(r);
        } else {
            pr = &r->next;
        }
    }
    fake_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static int access_protection(const CUmemAccessDesc *desc, size_t count, int *prot)
{
    *prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
            desc[i].location.id >= fake.cfg.devices)
            return 0;
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            *prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && *prot == PROT_NONE)
            *prot = PROT_READ;
        else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
                 desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ)
            return 0;
    }
    return 1;
}

CUresult fake_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                             size_t count)
{
    FAKE_ENTER(cuMemSetAccess);
    int prot;
    if (!desc || count == 0 || size == 0 || !access_protection(desc, count, &prot))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    fake_lock();
    if (!covered_by_mappings(ptr, size) || mprotect((void *)(uintptr_t)ptr, size, prot) != 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (struct memory_range *m = ranges; m; m = m->next)
            if (m->phys && m->base >= ptr && m->base < ptr + size)
                m->accessible = prot != PROT_NONE;
    }
    fake_unlock();
    return r;
}

/* ------------------------------------------------------------------------- */

void fake_memory_cleanup(void)
{
    while (ranges) {
        struct memory_range *r = ranges;
        ranges = r->next;
        if (r->phys) {
            munmap((void *)r->base, r->size);
        } else {
            free((void *)r->base);
        }
        free(r);
    }
    while (physicals)
        free_phys(physicals);
    while (reservations) {
        struct fake_reservation *res = reservations;
        reservations = res->next;
        munmap(res->map_base, res->map_size);
        free(res);
    }
}
