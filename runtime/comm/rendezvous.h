/*
 * rendezvous.h: hands a small opaque blob (NCCL's unique ids) from rank 0 to every
 * other rank of a multi-process job, with a timeout. docs/rendezvous.md describes
 * the threat model and the wire format.
 *
 * Two transports, chosen by a spec string:
 *   file:PATH       rank 0 writes PATH (created exclusively under a random name
 *                   beside it with mode 0600, never through a symbolic link, then
 *                   renamed atomically); the others poll until a file with the
 *                   right job tag appears. A reader takes only a regular file owned
 *                   by its own user with no group or other access, of exactly the
 *                   expected size, not stale (written longer ago than the timeout
 *                   plus a minute, or by a process of this host that has exited),
 *                   whose HMAC-SHA256 (keyed with the job secret, or an empty key
 *                   when there is none) checks; anything else is noted and waited
 *                   past until the timeout. A FIFO or device never blocks a reader.
 *                   PATH must be visible to every rank (a shared file system); it
 *                   is left in place afterwards.
 *   tcp:HOST:PORT   rank 0 listens on PORT at HOST's addresses only and serves each
 *                   peer that proves it knows the job secret; peers resolve HOST
 *                   (name, IPv4, or [IPv6]) and connect with retry and backoff until
 *                   the timeout, and take the blob only from a server that proves
 *                   it knows the secret too. PORT 0 lets rank 0 take an ephemeral
 *                   port (dcp_rendezvous_port()), which must then reach the peers
 *                   some other way. A secret is required.
 * TCP handshake: the peer says its rank, the world size and the blob size with a
 * random nonce; rank 0 checks the rank (in range, not yet served) and sizes before
 * it sends anything, answers with its own nonce and a proof, the peer answers with
 * its proof, and rank 0 sends the blob encrypted and authenticated with a session
 * key derived from the secret, the job tag and both nonces. Neither the secret nor
 * the tag crosses the wire. Rank 0 serves peers one at a time, without threads,
 * giving each connection at most a few seconds.
 */
#ifndef DCP_RENDEZVOUS_H
#define DCP_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#include "dcp/common.h"

#define DCP_RENDEZVOUS_MAX_BLOB (1u << 20) ///< Largest blob in bytes.
#define DCP_RENDEZVOUS_MAX_TAG 63          ///< Longest job tag in bytes.
#define DCP_RENDEZVOUS_MIN_SECRET 16       ///< Shortest job secret in bytes.
#define DCP_RENDEZVOUS_MAX_SECRET 1024     ///< Longest job secret in bytes.

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
    const char *tag;    ///< Job tag, unique to this run (1..DCP_RENDEZVOUS_MAX_TAG bytes), e.g. the Slurm job id.
    const void *secret; ///< Job secret shared by every rank out of band; required for TCP, optional for a file.
    size_t secret_len;  ///< Bytes of secret: 0 (none) or DCP_RENDEZVOUS_MIN_SECRET..DCP_RENDEZVOUS_MAX_SECRET.
    double timeout_s;   ///< How long exchange waits, >= 0 (0: one attempt).
};

/** Opaque rendezvous handle. */
struct dcp_rendezvous;

/**
 * Checks params and prepares: for TCP on rank 0, binds and listens now on HOST's
 * addresses, so the port is known (and peers may queue) before
 * dcp_rendezvous_exchange(). Errors: DCP_EINVAL (bad spec, rank, timeout; no job
 * tag; TCP without a secret; a secret of a bad length; a peer given port 0; rank 0
 * whose HOST does not resolve), DCP_EIO (the port cannot be bound, e.g. another
 * process holds it), DCP_ENOMEM. The secret is copied.
 */
int dcp_rendezvous_open(const struct dcp_rendezvous_params *params, struct dcp_rendezvous **out);

/** TCP port rank 0 listens on (the real one when the spec said 0); 0 otherwise. */
uint16_t dcp_rendezvous_port(const struct dcp_rendezvous *r);

/**
 * Moves size bytes (<= DCP_RENDEZVOUS_MAX_BLOB) from rank 0's blob into every
 * other rank's blob. Rank 0 returns once the file is in place (file) or every
 * peer has authenticated and received it (TCP); the others once they have it.
 * Errors: DCP_ETIMEOUT (message: which ranks arrived, or what this rank waited
 * for and last saw: no file, a file not trusted and why, a server that failed to
 * authenticate), DCP_EINVAL (a trusted file of rank 0 with another world or blob
 * size, bad size, host not found), DCP_EIO (the file cannot be written or opened,
 * no random numbers). Every message starts with "rendezvous".
 */
int dcp_rendezvous_exchange(struct dcp_rendezvous *r, void *blob, size_t size);

/** Closes sockets, frees r and sets *r to NULL. Accepts NULL and a NULL *r. */
void dcp_rendezvous_close(struct dcp_rendezvous **r);

/** open + exchange + close, for callers that do not need the port in between. */
int dcp_rendezvous_broadcast(const struct dcp_rendezvous_params *params, void *blob, size_t size);

struct stat;

/**
 * What makes st unfit to hold a secret or a rendezvous blob, or NULL when it is
 * fit: it must be a regular file owned by this (effective) user without group or
 * other access. The reason ("is not a regular file (a FIFO)", "is owned by uid 7,
 * not by this user (uid 1000)", "has mode 0644, not 0600 (...)") goes to why.
 */
const char *dcp_rendezvous_private_file_problem(const struct stat *st, char *why, size_t why_size);

/** The rendezvous settings of a multi-process job, read from the environment. */
struct dcp_rendezvous_env {
    const char *spec;                           ///< DCP_RENDEZVOUS (points into the environment); NULL when unset.
    char tag[DCP_RENDEZVOUS_MAX_TAG + 1];       ///< The job tag (see dcp_rendezvous_env_read()).
    const char *tag_source;                     ///< Variable(s) the tag came from, for messages (static string).
    uint8_t secret[DCP_RENDEZVOUS_MAX_SECRET];  ///< The job secret.
    size_t secret_len;                          ///< Its length; 0 when none is set.
};

/**
 * Reads DCP_RENDEZVOUS; the job tag from DCP_JOB_TAG, else SLURM_JOB_ID (with
 * ".SLURM_STEP_ID" and ".rSLURM_RESTART_COUNT" appended when set, so job steps
 * and requeued runs differ), else PMIX_NAMESPACE (Open MPI 5 / PRRTE), else
 * TORCHELASTIC_RUN_ID (torchrun --rdzv-id; its default "none" does not count);
 * the job secret from DCP_RENDEZVOUS_SECRET (the bytes of the value) or
 * DCP_RENDEZVOUS_SECRET_FILE (a regular file owned by this user with no group or
 * other access, one trailing newline dropped). Errors (DCP_EINVAL, message names
 * the variables): DCP_RENDEZVOUS unset or empty, no job tag, a tag too long, both
 * secret variables set, a secret shorter than DCP_RENDEZVOUS_MIN_SECRET or longer
 * than DCP_RENDEZVOUS_MAX_SECRET, a secret file that is missing, not a regular
 * file, someone else's or readable by others. Call dcp_rendezvous_env_clear()
 * when done, on success or failure.
 */
int dcp_rendezvous_env_read(struct dcp_rendezvous_env *out);

/** Wipes the secret in e. */
void dcp_rendezvous_env_clear(struct dcp_rendezvous_env *e);

#endif /* DCP_RENDEZVOUS_H */
