/*
 * sha256.h: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the rendezvous's
 * challenge-response. Written here so that libdcp needs no crypto library at run
 * time; checked against the FIPS 180-4 / RFC 4231 vectors in tests/unit/test_sha256.c.
 * Not constant-time with respect to message length (only the key and the MAC
 * comparison matter for the rendezvous; see dcp_mac_equal()).
 */
#ifndef DCP_SHA256_H
#define DCP_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DCP_SHA256_BYTES 32 ///< Digest size.
#define DCP_SHA256_BLOCK 64 ///< Block size.

/** A running SHA-256. */
struct dcp_sha256 {
    uint32_t h[8];                  ///< Chaining state.
    uint64_t bytes;                 ///< Message bytes hashed so far.
    uint8_t buf[DCP_SHA256_BLOCK];  ///< Partial block.
    size_t used;                    ///< Bytes in buf.
};

/** Starts a hash. */
void dcp_sha256_init(struct dcp_sha256 *s);
/** Adds n bytes (data may be NULL when n is 0). */
void dcp_sha256_update(struct dcp_sha256 *s, const void *data, size_t n);
/** Finishes the hash into out; s must be re-initialised before reuse. */
void dcp_sha256_final(struct dcp_sha256 *s, uint8_t out[DCP_SHA256_BYTES]);
/** One-shot SHA-256 of n bytes. */
void dcp_sha256(const void *data, size_t n, uint8_t out[DCP_SHA256_BYTES]);

/** A running HMAC-SHA256: the inner hash and the outer key pad. */
struct dcp_hmac {
    struct dcp_sha256 inner;          ///< H((K ^ ipad) || message ...).
    uint8_t opad[DCP_SHA256_BLOCK];   ///< K ^ opad, for the outer hash.
};

/** Starts an HMAC with a key of any length (keys longer than a block are hashed first). */
void dcp_hmac_init(struct dcp_hmac *m, const void *key, size_t key_len);
/** Adds n bytes of message. */
void dcp_hmac_update(struct dcp_hmac *m, const void *data, size_t n);
/** Finishes into out and wipes the key material in m. */
void dcp_hmac_final(struct dcp_hmac *m, uint8_t out[DCP_SHA256_BYTES]);
/** One-shot HMAC-SHA256. */
void dcp_hmac_sha256(const void *key, size_t key_len, const void *data, size_t n, uint8_t out[DCP_SHA256_BYTES]);

/** Compares two n-byte MACs in time that does not depend on where they differ. */
bool dcp_mac_equal(const uint8_t *a, const uint8_t *b, size_t n);

/** Overwrites n bytes at p with zeros in a way the compiler does not drop. */
void dcp_wipe(void *p, size_t n);

#endif /* DCP_SHA256_H */
