/*
 * fatbin.h: the container nvcc -fatbin writes, as far as libdcp looks into it.
 *
 * The layout is not in the toolkit's public headers; it is read off nvcc's output
 * (CUDA 12/13) and checked by tests/cuda/test_fatbin.c against a fatbin nvcc
 * builds when it is installed. A fatbin is a 16-byte header followed by entries,
 * each a 64-byte (ELF) or 80-byte (PTX) header and a padded payload. Payloads may
 * be zstd frames (CUDA 12.8+ compresses PTX by default, everything with
 * -compress-all); uncompressed ELF payloads carry the kernel names in plain text.
 * All fields are little-endian; readers copy headers out (payloads are unaligned).
 */
#ifndef DCP_LOADER_FATBIN_H
#define DCP_LOADER_FATBIN_H

#include <stddef.h>
#include <stdint.h>

#define DCP_FATBIN_MAGIC 0xBA55ED50u  ///< First word of every fatbin.
#define DCP_FATBIN_VERSION 1          ///< The only header version seen.

/** File header. */
struct dcp_fatbin_header {
    uint32_t magic;       ///< DCP_FATBIN_MAGIC.
    uint16_t version;     ///< DCP_FATBIN_VERSION.
    uint16_t header_size; ///< Bytes of this header (16).
    uint64_t fat_size;    ///< Bytes of all entries after the header.
};
_Static_assert(sizeof(struct dcp_fatbin_header) == 16, "fatbin header layout");

/** What an entry holds. */
enum dcp_fatbin_kind {
    DCP_FATBIN_KIND_PTX = 1, ///< PTX text for compute_<arch>.
    DCP_FATBIN_KIND_ELF = 2, ///< SASS (cubin ELF) for sm_<arch>.
};

/** Entry header (the fields libdcp reads; the rest is zero in nvcc's output). */
struct dcp_fatbin_entry {
    uint16_t kind;              ///< enum dcp_fatbin_kind.
    uint16_t version;           ///< 0x0101.
    uint32_t header_size;       ///< Bytes of this entry's header (64 ELF, 80 PTX).
    uint64_t payload_size;      ///< Bytes of payload after the header (padded).
    uint32_t compressed_size;   ///< Bytes of the zstd frame in the payload; 0 if not compressed.
    uint32_t reserved0;         ///< Unknown (64 in PTX entries).
    uint16_t binary_minor;      ///< Format minor version.
    uint16_t binary_major;      ///< Format major version (PTX ISA major for PTX).
    uint32_t arch;              ///< SM number: 90 for sm_90 / compute_90.
    uint32_t name_offset;       ///< Unused (0).
    uint32_t name_size;         ///< Unused (0).
    uint64_t flags;             ///< Bit 0x8000: payload is a zstd frame.
    uint64_t reserved1;         ///< Zero.
    uint64_t uncompressed_size; ///< Bytes after decompression (0 if not compressed).
};
_Static_assert(sizeof(struct dcp_fatbin_entry) == 64, "fatbin entry layout");

/** Walks the entries of a fatbin. Initialise with dcp_fatbin_iter_init(). */
struct dcp_fatbin_iter {
    const unsigned char *image; ///< The fatbin.
    size_t size;                ///< Its bytes (header + fat_size).
    size_t offset;              ///< Next entry.
};

/**
 * Checks the header of a fatbin of `size` bytes (size 0: trust the header's own
 * length) and prepares *it. Returns the fatbin's total size (header_size +
 * fat_size) or 0 with a reason in why (may be NULL) if it is not one.
 */
size_t dcp_fatbin_iter_init(struct dcp_fatbin_iter *it, const void *image, size_t size,
                            char *why, size_t why_size);

/**
 * Next entry: copies its header to *entry and points *payload at its payload
 * (entry->payload_size bytes, of which entry->compressed_size are a zstd frame when
 * compressed). Returns 1, 0 at the end, -1 (reason in why) if an entry is malformed.
 */
int dcp_fatbin_next(struct dcp_fatbin_iter *it, struct dcp_fatbin_entry *entry,
                    const unsigned char **payload, char *why, size_t why_size);

/** Checks a whole fatbin: header and every entry. 0, or -1 with a reason in why. */
int dcp_fatbin_validate(const void *image, size_t size, char *why, size_t why_size);

#endif /* DCP_LOADER_FATBIN_H */
