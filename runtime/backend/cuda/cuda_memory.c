/*
 * cuda_memory.c: device memory of the CUDA backend: tracked allocations, the KV
 * arena through virtual memory management, and host/device copies.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "util/util.h"

static void free_allocation(struct cuda_engine *ce, struct cuda_alloc *a)
{
    const struct dcp_cuda_api *api = &ce->cu->api;
    if (!a->vmm) {
        api->cuMemFree(a->addr);
        return;
    }
    for (uint32_t c = 0; c < a->chunks; c++) {
        api->cuMemUnmap(a->addr + c * a->chunk_bytes, a->chunk_bytes);
        api->cuMemRelease(a->handles[c]);
    }
    api->cuMemAddressFree(a->addr, a->reserved);
    free(a->handles);
}

/* ---- memory ---------------------------------------------------------------------- */

static int track(struct cuda_rank *cr, const struct cuda_alloc *a)
{
    if (dcp_grow_array((void **)&cr->allocs, &cr->cap_allocs, cr->num_allocs + 1, sizeof(*cr->allocs)))
        return dcp_error(DCP_ENOMEM, "allocation table");
    cr->allocs[cr->num_allocs++] = *a;
    return DCP_OK;
}

int cuda_alloc(struct dcp_rank *r, size_t bytes, uint64_t *addr)
{
    struct cuda_engine *ce = CE(r->engine);
    int err = use_rank(r);
    struct cuda_alloc a = {0};
    if (!err)
        err = CU_CALL(&ce->cu->api, cuMemAlloc, &a.addr, bytes ? bytes : 256);
    if (err)
        return err == DCP_EDEVMEM ? dcp_error(DCP_EDEVMEM, "cuMemAlloc of %zu bytes on %s: out of device memory",
                                              bytes, CR(r)->dev->info.name)
                                  : err;
    if ((err = track(CR(r), &a))) {
        ce->cu->api.cuMemFree(a.addr);
        return err;
    }
    *addr = a.addr;
    return DCP_OK;
}

/* The KV arena with virtual memory management: one reserved range, backed by
 * physical chunks mapped in order, so a shortfall is reported by how much fit. */
int cuda_alloc_arena(struct dcp_rank *r, size_t bytes, uint64_t *addr)
{
    struct cuda_engine *ce = CE(r->engine);
    struct cuda_device *d = CR(r)->dev;
    if (!d->vmm)
        return cuda_alloc(r, bytes, addr);
    const struct dcp_cuda_api *api = &ce->cu->api;
    int err = use_rank(r);
    const CUmemAllocationProp prop = {
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d->ordinal},
    };
    size_t gran = 0;
    if (!err)
        err = CU_CALL(api, cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (err)
        return err;
    struct cuda_alloc a = {.vmm = true};
    a.chunk_bytes = DCP_MAX(gran, (size_t)1 << 30) / gran * gran;
    const uint64_t want = dcp_div_ceil_u64(bytes ? bytes : 1, gran) * gran;
    a.chunk_bytes = (size_t)DCP_MIN((uint64_t)a.chunk_bytes, want);
    const uint32_t chunks = (uint32_t)dcp_div_ceil_u64(want, a.chunk_bytes);
    a.reserved = (size_t)chunks * a.chunk_bytes;
    a.handles = calloc(chunks, sizeof(*a.handles));
    if (!a.handles)
        return dcp_error(DCP_ENOMEM, "arena handles");
    if ((err = CU_CALL(api, cuMemAddressReserve, &a.addr, a.reserved, 0, 0, 0))) {
        free(a.handles);
        return err;
    }
    const CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (; a.chunks < chunks && !err; a.chunks++) {
        const CUdeviceptr at = a.addr + (uint64_t)a.chunks * a.chunk_bytes;
        err = CU_CALL(api, cuMemCreate, &a.handles[a.chunks], a.chunk_bytes, &prop, 0);
        if (err)
            break;
        if ((err = CU_CALL(api, cuMemMap, at, a.chunk_bytes, 0, a.handles[a.chunks], 0))) {
            api->cuMemRelease(a.handles[a.chunks]);
            break;
        }
        if ((err = CU_CALL(api, cuMemSetAccess, at, a.chunk_bytes, &access, 1))) {
            api->cuMemUnmap(at, a.chunk_bytes);
            api->cuMemRelease(a.handles[a.chunks]);
            break;
        }
    }
    if (err) {
        const size_t mapped = (size_t)a.chunks * a.chunk_bytes;
        free_allocation(ce, &a);
        return err == DCP_EDEVMEM
                   ? dcp_error(DCP_EDEVMEM, "KV arena of %zu bytes on %s: out of device memory after mapping %zu bytes",
                               bytes, d->info.name, mapped)
                   : err;
    }
    if ((err = track(CR(r), &a))) {
        free_allocation(ce, &a);
        return err;
    }
    *addr = a.addr;
    return DCP_OK;
}

/* Forgets an allocation without freeing it: work that never finished may still
 * use it, and the driver's free would wait for that work. */
static void leak_allocation(struct cuda_alloc *a)
{
    free(a->handles);
    a->handles = NULL;
}

/* The rank's work may still use addr: it is freed once the streams are idle (a
 * bounded wait), and leaked, with the reason in dcp_last_error(), when they never
 * get there (a hung kernel or collective). */
void cuda_free(struct dcp_rank *r, uint64_t addr)
{
    struct cuda_rank *cr = CR(r);
    if (!addr || !cr)
        return;
    for (size_t i = 0; i < cr->num_allocs; i++)
        if (cr->allocs[i].addr == addr) {
            const int err = cuda_wait_device(r, NULL, "rank_free");
            if (err == DCP_ETIMEOUT || atomic_load(&cr->stuck)) {
                dcp_error(DCP_ETIMEOUT, "rank_free: rank %u's device work never finished (a hung kernel or "
                          "collective); the allocation at 0x%llx is leaked, not freed under it", r->tp_rank,
                          (unsigned long long)addr);
                leak_allocation(&cr->allocs[i]);
            } else {
                free_allocation(CE(r->engine), &cr->allocs[i]);
            }
            cr->allocs[i] = cr->allocs[--cr->num_allocs];
            return;
        }
}

/*
 * Every copy goes on the stream of the work that reads it (docs/design.md):
 * uploads on the rank's compute stream (its own or the caller's), after the
 * kernels already queued there (per-step metadata is rewritten in place while the
 * previous step's kernels may still read it) and before the ones that read the
 * new data. Never cuMemcpyHtoD: it runs on the legacy stream, which the rank's
 * non-blocking streams do not wait for, and from pageable memory it returns before
 * the data lands. A source that fits goes through a pinned staging half (truly
 * asynchronous, cuda_graph.c); begin_step alternates between the two halves, so it
 * waits only when the copies of the step before the previous one have not run. A
 * larger source is copied from pageable memory, which the driver stages before
 * cuMemcpyHtoDAsync returns.
 */
int cuda_upload(struct dcp_rank *r, uint64_t dst, const void *src, size_t bytes)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int err = cuda_refuse_capture(r, "rank_upload");
    if (err)
        return err;
    cr->queued = true;
    if (bytes > cr->staging_bytes)
        return CU_CALL(api, cuMemcpyHtoDAsync, dst, src, bytes, cr->compute);
    unsigned char *at = cuda_staging_take(r, bytes, &err);
    if (!at)
        return err;
    memcpy(at, src, bytes);
    err = CU_CALL(api, cuMemcpyHtoDAsync, dst, at, bytes, cr->compute);
    return err ? err : cuda_staging_record(r);
}

/* After the rank's work (a bounded wait), on its stream; to pageable memory the
 * driver returns once the copy is done. */
int cuda_download(struct dcp_rank *r, void *dst, uint64_t src, size_t bytes)
{
    int err = cuda_refuse_capture(r, "rank_download"); /* it would wait on work a capture only records */
    if (!err)
        err = cuda_synchronize(r);
    if (!err)
        err = CU_CALL(&CE(r->engine)->cu->api, cuMemcpyDtoHAsync, dst, src, bytes, CR(r)->compute);
    return err ? err : cuda_wait_device(r, NULL, "rank_download");
}

int cuda_copy(struct dcp_rank *r, uint64_t dst, uint64_t src, size_t bytes)
{
    int err = use_rank(r);
    CR(r)->queued = true;
    return err ? err : CU_CALL(&CE(r->engine)->cu->api, cuMemcpyDtoDAsync, dst, src, bytes, CR(r)->compute);
}

/* A stuck rank's allocations are leaked (see cuda_free). */
void cuda_memory_rank_fini(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    const bool leak = atomic_load(&cr->stuck);
    for (size_t i = 0; i < cr->num_allocs; i++) {
        if (leak)
            leak_allocation(&cr->allocs[i]);
        else
            free_allocation(CE(r->engine), &cr->allocs[i]);
    }
    free(cr->allocs);
}
