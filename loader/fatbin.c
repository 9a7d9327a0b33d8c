/* fatbin.c: walking the entries of an nvcc fatbin (layout in fatbin.h). */
#include <stdio.h>
#include <string.h>

#include "fatbin.h"

static void set_reason(char *why, size_t why_size, const char *reason)
{
    if (why && why_size)
        snprintf(why, why_size, "%s", reason);
}

size_t dcp_fatbin_iter_init(struct dcp_fatbin_iter *it, const void *image, size_t size,
                            char *why, size_t why_size)
{
    struct dcp_fatbin_header h;
    memset(it, 0, sizeof(*it));
    if (!image || (size && size < sizeof(h))) {
        set_reason(why, why_size, "shorter than a fatbin header");
        return 0;
    }
    memcpy(&h, image, sizeof(h));
    if (h.magic != DCP_FATBIN_MAGIC) {
        set_reason(why, why_size, "no fatbin magic 0xBA55ED50");
        return 0;
    }
    if (h.version != DCP_FATBIN_VERSION || h.header_size < sizeof(h)) {
        set_reason(why, why_size, "unknown fatbin header version or size");
        return 0;
    }
    if (h.fat_size > SIZE_MAX - h.header_size) {
        set_reason(why, why_size, "fatbin size overflows");
        return 0;
    }
    size_t total = (size_t)h.header_size + (size_t)h.fat_size;
    if (size && total != size) {
        set_reason(why, why_size, "fatbin header size disagrees with the image size");
        return 0;
    }
    it->image = image;
    it->size = total;
    it->offset = h.header_size;
    return total;
}

int dcp_fatbin_next(struct dcp_fatbin_iter *it, struct dcp_fatbin_entry *entry,
                    const unsigned char **payload, char *why, size_t why_size)
{
    if (it->offset == it->size)
        return 0;
    size_t left = it->size - it->offset;
    if (left < sizeof(*entry)) {
        set_reason(why, why_size, "truncated fatbin entry header");
        return -1;
    }
    memcpy(entry, it->image + it->offset, sizeof(*entry));
    if (entry->kind != DCP_FATBIN_KIND_PTX && entry->kind != DCP_FATBIN_KIND_ELF) {
        set_reason(why, why_size, "fatbin entry of unknown kind");
        return -1;
    }
    if (entry->header_size < sizeof(*entry) || entry->header_size > left ||
        entry->payload_size > left - entry->header_size ||
        entry->compressed_size > entry->payload_size) {
        set_reason(why, why_size, "fatbin entry runs past the end of the image");
        return -1;
    }
    *payload = it->image + it->offset + entry->header_size;
    it->offset += entry->header_size + (size_t)entry->payload_size;
    return 1;
}

int dcp_fatbin_validate(const void *image, size_t size, char *why, size_t why_size)
{
    struct dcp_fatbin_iter it;
    if (!dcp_fatbin_iter_init(&it, image, size, why, why_size))
        return -1;
    struct dcp_fatbin_entry entry;
    const unsigned char *payload;
    int r, entries = 0;
    while ((r = dcp_fatbin_next(&it, &entry, &payload, why, why_size)) == 1)
        entries++;
    if (r < 0)
        return -1;
    if (entries == 0) {
        set_reason(why, why_size, "fatbin has no entries");
        return -1;
    }
    return 0;
}
