/*
 * rendezvous.h: hands a small opaque blob (NCCL's 128-byte unique id) from rank 0
 * to every other rank of a multi-process job, with a timeout.
 *
 * Two transports, chosen by a spec string:
 *   file:PATH       rank 0 writes PATH (through a temporary name in the same
 *                   directory, renamed atomically); the others poll until a file
 *                   with the right header, job tag and size appears. A file left by
 *                   a run with another tag is ignored. PATH must be visible to every
 *                   rank (a shared file system); it is left in place afterwards.
 *   tcp:HOST:PORT   rank 0 listens on PORT (all interfaces) and answers each peer
 *                   that connects with the blob; peers resolve HOST (name, IPv4, or
 *                   [IPv6]) and connect with retry and backoff until the timeout.
 *                   PORT 0 lets rank 0 take an ephemeral port (dcp_rendezvous_port()),
 *                   which must then reach the peers some other way.
 * Every message carries a magic, a version, the job tag and the world size; peers
 * also say their rank, so mismatched jobs and sizes are caught, not mixed up.
 * Rank 0 serves peers one at a time, without threads.
 */
#ifndef DCP_RENDEZVOUS_H
#define DCP_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#include "dcp/common.h"

#define DCP_RENDEZVOUS_MAX_BLOB (1u << 20) ///< Largest blob in bytes.
#define DCP_RENDEZVOUS_MAX_TAG 63          ///< Longest job tag in bytes.

/** Transport of a rendezvous. */
enum dcp_rendezvous_kind {
    DCP_RENDEZVOUS_FILE, ///< file:PATH
    DCP_RENDEZVOUS_TCP,  ///< tcp:HOST:PORT
};

/** A parsed spec string. */
struct dcp_rendezvous_spec {
    enum dcp_rendezvous_kind kind; ///< Transport.
    char path[4096];               ///< FILE: the file every rank uses.
    char host[256];                ///< TCP: rank 0's host name or address (without brackets).
    uint16_t port;                 ///< TCP: rank 0's port; 0 = ephemeral (rank 0 only).
};

/**
 * Parses "file:PATH" or "tcp:HOST:PORT" (HOST may be "[IPv6]"). DCP_EINVAL with a
 * message saying what is wrong: NULL or empty, unknown scheme, empty path or
 * host, too long, a port that is not a decimal 0..65535, an IPv6 address
 * without brackets.
 */
int dcp_rendezvous_parse_spec(const char *text, struct dcp_rendezvous_spec *out);

/** What a rendezvous needs to know. */
struct dcp_rendezvous_params {
    const char *spec;   ///< "file:PATH" or "tcp:HOST:PORT".
    uint32_t rank;      ///< This process's rank, < world_size.
    uint32_t world_size;///< Processes taking part, >= 1.
    const char *tag;    ///< Job tag (at most DCP_RENDEZVOUS_MAX_TAG bytes), e.g. the Slurm job id; NULL = "".
    double timeout_s;   ///< How long exchange waits, >= 0 (0: one attempt).
};

/** Opaque rendezvous handle. */
struct dcp_rendezvous;

/**
 * Checks params and prepares: for TCP on rank 0, binds and listens now, so the
 * port is known (and peers may queue) before dcp_rendezvous_exchange(). Errors:
 * DCP_EINVAL (bad spec, rank, tag, timeout; a peer given port 0), DCP_EIO (the
 * port cannot be bound), DCP_ENOMEM.
 */
int dcp_rendezvous_open(const struct dcp_rendezvous_params *params, struct dcp_rendezvous **out);

/** TCP port rank 0 listens on (the real one when the spec said 0); 0 otherwise. */
uint16_t dcp_rendezvous_port(const struct dcp_rendezvous *r);

/**
 * Moves size bytes (<= DCP_RENDEZVOUS_MAX_BLOB) from rank 0's blob into every
 * other rank's blob. Rank 0 returns once the file is in place (file) or every
 * peer has received it (TCP); the others once they have it. Errors: DCP_ETIMEOUT
 * (message: which ranks arrived, or what this rank waited for and last saw),
 * DCP_EINVAL (rank 0 offers a blob of another size, bad size, host not found),
 * DCP_EIO (the file cannot be written or read).
 */
int dcp_rendezvous_exchange(struct dcp_rendezvous *r, void *blob, size_t size);

/** Closes sockets, frees r and sets *r to NULL. Accepts NULL and a NULL *r. */
void dcp_rendezvous_close(struct dcp_rendezvous **r);

/** open + exchange + close, for callers that do not need the port in between. */
int dcp_rendezvous_broadcast(const struct dcp_rendezvous_params *params, void *blob, size_t size);

#endif /* DCP_RENDEZVOUS_H */
