/*
 * kv_manager.h: logical KV block ids and sequence block tables of one DCP group.
 *
 * One scheduler decides for every rank of a DCP group of N ranks, so all ranks use
 * the same logical block ids 0..num_blocks-1: a logical block covers
 * tokens_per_block = block_size * N tokens of a sequence, and each rank backs it
 * with one physical page of block_size tokens whose page id equals the block id.
 * A sequence of L tokens owns ceil(L / tokens_per_block) block ids, in order (its
 * block table). The TP baseline is simply N = 1.
 *
 * Blocks are reference counted so that forked sequences share a prefix; a block
 * returns to the (LIFO) free list when its count drops to 0. Every partly filled
 * block has exactly one owner: fork needs a whole number of blocks, and truncate
 * refuses to cut into a shared block, so appending never writes into a page that
 * another sequence reads.
 *
 * Sequence ids carry a generation: id = generation << slot_bits | slot, where
 * slot_bits is the fewest bits that number max_seqs slots. Releasing a sequence
 * bumps its slot's generation, so a stale id (one already released) is refused
 * with DCP_EINVAL instead of reaching the slot's next sequence, until the slot has
 * been reused 2^(32 - slot_bits) times (at least 256, for DCP_KV_MAX_SEQS).
 *
 * Prefix cache (optional, dcp_kv_prefix_cache_enable()): a full block can be
 * published under a key (a hash of the whole prefix it ends). A published block
 * that loses its last user is not freed but kept idle in an LRU list, still
 * findable by its key; a later sequence attaches it (refcount up) instead of
 * recomputing it. Idle blocks count as available: when the free list runs dry,
 * extend evicts the least recently used idle block (its key is forgotten).
 * Published blocks are never written again: they are full, and truncate refuses
 * to cut into one. Invariant: free + idle + in use (refcount > 0) = num_blocks.
 *
 * All fixed-size state is allocated at create; only a block table that outgrows
 * its preallocated slice allocates (doubling). Every function costs O(blocks it
 * touches), and every failure leaves the manager exactly as it was. Not thread
 * safe: one scheduler thread calls it between steps.
 */
#ifndef DCP_KV_MANAGER_H
#define DCP_KV_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "dcp/common.h"

/** Most sequence slots: ids keep at least 8 bits of generation. */
#define DCP_KV_MAX_SEQS (1u << 24)

/** Opaque block manager. */
struct dcp_kv_manager;

/** Sizes of a block manager; all fields are required. */
struct dcp_kv_manager_params {
    uint64_t num_blocks;  ///< Logical block ids (= pages per rank), 1..INT32_MAX.
    uint32_t block_size;  ///< Tokens per physical page, >= 1.
    uint32_t group_size;  ///< DCP group size N, >= 1 (1 = TP baseline).
    uint32_t max_seqs;    ///< Most live sequences, 1..DCP_KV_MAX_SEQS (slots 0..max_seqs-1).
    uint64_t max_context; ///< Longest sequence in tokens, >= 1.
};

/**
 * Creates a manager with every block free and no sequence. Allocates the free
 * list, reference counts, sequence slots and the preallocated block tables.
 * Errors: DCP_EINVAL (a size is 0, num_blocks > INT32_MAX, max_seqs > DCP_KV_MAX_SEQS),
 * DCP_ENOMEM.
 */
int dcp_kv_manager_create(const struct dcp_kv_manager_params *p, struct dcp_kv_manager **out);

/** Frees everything and sets *m to NULL. Accepts NULL and a NULL *m. */
void dcp_kv_manager_destroy(struct dcp_kv_manager **m);

/**
 * Creates an empty sequence and stores its id in *seq_id: the most recently
 * released slot (so slots stay small) with that slot's current generation; a
 * fresh manager hands out 0, 1, 2, ... DCP_ENOSPC when max_seqs are live.
 */
int dcp_kv_seq_create(struct dcp_kv_manager *m, uint32_t *seq_id);

/**
 * Reserves positions [L, L + n) of sequence seq (L its length), taking the blocks
 * it needs from the free list, then by evicting idle published blocks (least
 * recently used first). All or nothing: DCP_EINVAL for an unknown id or
 * when L + n exceeds max_context, DCP_ENOSPC when too few blocks are available,
 * DCP_ENOMEM when the block table cannot grow. n = 0 is a no-op.
 */
int dcp_kv_seq_extend(struct dcp_kv_manager *m, uint32_t seq, uint32_t n);

/**
 * Shortens sequence seq to len tokens, releasing the blocks it no longer needs.
 * DCP_EINVAL for an unknown id, len greater than the length, or a len that would
 * leave a partly filled block shared with another sequence or published in the
 * prefix cache (appending to it would overwrite tokens others read).
 */
int dcp_kv_seq_truncate(struct dcp_kv_manager *m, uint32_t seq, uint64_t len);

/**
 * Creates a sequence with src's length sharing all of src's blocks (each block's
 * reference count goes up by one) and stores its id in *seq_id. src's length must
 * be a multiple of tokens_per_block, else DCP_EINVAL, so that no partly filled
 * block is shared. DCP_ENOSPC when max_seqs are live, DCP_ENOMEM when the new
 * table cannot grow.
 */
int dcp_kv_seq_fork(struct dcp_kv_manager *m, uint32_t src, uint32_t *seq_id);

/** Frees sequence seq and drops its references to its blocks. DCP_EINVAL for an unknown id. */
int dcp_kv_seq_release(struct dcp_kv_manager *m, uint32_t seq);

/** Whether seq is the id of a live sequence (not a stale one). */
bool dcp_kv_seq_exists(const struct dcp_kv_manager *m, uint32_t seq);

/** DCP_OK if seq is a live sequence, else DCP_EINVAL with a message that starts with op
 *  and says whether the id is stale (released) or was never handed out. */
int dcp_kv_seq_check(const struct dcp_kv_manager *m, uint32_t seq, const char *op);

/** The slot (0..max_seqs-1) of a live sequence id, or UINT32_MAX for any other id. */
uint32_t dcp_kv_seq_slot(const struct dcp_kv_manager *m, uint32_t seq);

/** Length of sequence seq in tokens, or 0 if it does not exist. */
uint64_t dcp_kv_seq_length(const struct dcp_kv_manager *m, uint32_t seq);

/**
 * Block table of sequence seq: *count block ids, position p lives in block
 * table[p / tokens_per_block]. Valid until the next call that changes seq.
 * NULL with *count = 0 if seq does not exist. count may be NULL.
 */
const int32_t *dcp_kv_seq_blocks(const struct dcp_kv_manager *m, uint32_t seq, uint32_t *count);

/** Number of free block ids. */
uint64_t dcp_kv_free_blocks(const struct dcp_kv_manager *m);

/** Tokens one logical block holds: block_size * group_size. */
uint64_t dcp_kv_tokens_per_block(const struct dcp_kv_manager *m);

/** Blocks a sequence of len tokens owns: ceil(len / tokens_per_block). */
uint64_t dcp_kv_blocks_for(const struct dcp_kv_manager *m, uint64_t len);

/** How many sequences hold block (0 when free or out of range). */
uint32_t dcp_kv_block_refcount(const struct dcp_kv_manager *m, int32_t block);

/** Number of live sequences. */
uint32_t dcp_kv_live_seqs(const struct dcp_kv_manager *m);

/* --- prefix cache ----------------------------------------------------------- */

/**
 * Allocates the prefix cache state (a key per block, a hash index, the LRU list).
 * Idempotent. DCP_ENOMEM leaves the cache disabled.
 */
int dcp_kv_prefix_cache_enable(struct dcp_kv_manager *m);

/**
 * Counts the leading keys[0..n) that name published blocks: *hits of them, of which
 * *idle_hits have no user now (attaching them takes them out of the available
 * pool). 0 hits when the cache is disabled.
 */
void dcp_kv_prefix_lookup(const struct dcp_kv_manager *m, const uint64_t *keys, uint32_t n,
                          uint32_t *hits, uint32_t *idle_hits);

/**
 * Gives the empty sequence seq the published blocks of the leading keys that hit
 * (at most n): its table becomes those blocks, its length hits * tokens_per_block.
 * DCP_EINVAL for an unknown or non-empty sequence or a disabled cache; DCP_ENOMEM
 * when the table cannot grow (nothing changes).
 */
int dcp_kv_seq_attach_prefix(struct dcp_kv_manager *m, uint32_t seq, const uint64_t *keys, uint32_t n,
                             uint32_t *hits);

/**
 * Publishes blocks [first, min(n, length / tokens_per_block)) of seq (full blocks
 * only), block i under keys[i]. A block already published, or a key already naming
 * another block, is left as it is. Stores how many blocks became newly published in
 * *published (may be NULL). DCP_EINVAL for an unknown sequence or a disabled cache.
 */
int dcp_kv_seq_publish(struct dcp_kv_manager *m, uint32_t seq, const uint64_t *keys, uint32_t first, uint32_t n,
                       uint32_t *published);

/** Whether block is published in the prefix cache (then it is never written). */
bool dcp_kv_block_published(const struct dcp_kv_manager *m, int32_t block);

/** Published blocks without a user (kept for reuse, evicted LRU first). */
uint64_t dcp_kv_idle_blocks(const struct dcp_kv_manager *m);

/** Published blocks, in use or idle. */
uint64_t dcp_kv_published_blocks(const struct dcp_kv_manager *m);

/** Blocks an extend can take: free + idle published. */
uint64_t dcp_kv_available_blocks(const struct dcp_kv_manager *m);

/** Blocks held by at least one sequence: num_blocks - available. */
uint64_t dcp_kv_used_blocks(const struct dcp_kv_manager *m);

/** Idle published blocks evicted so far. */
uint64_t dcp_kv_evictions(const struct dcp_kv_manager *m);

/**
 * Recounts everything from the block tables and checks the invariants: every
 * refcount equals the number of tables holding the block, free blocks have count
 * 0 and appear once, idle blocks are published with count 0 and sit in the LRU
 * list once, every key finds its block, free + idle + used = num_blocks. O(blocks
 * + table entries); for tests. DCP_OK, or DCP_EINVAL with the first violation in
 * dcp_last_error().
 */
int dcp_kv_check(const struct dcp_kv_manager *m);

/* --- test hooks --------------------------------------------------------------- */

/*
 * For tests of dcp_kv_check() only: overwrite one counter, breaking the invariants
 * on purpose, and return its old value. Nothing but dcp_kv_check() and another
 * poke (to restore the old value) may be called on a manager left corrupted.
 */

/** Sets the reference count of block (0..num_blocks-1) to refcount. */
uint32_t dcp_kv_test_poke_refcount(struct dcp_kv_manager *m, int32_t block, uint32_t refcount);

/** Sets the number of free-list entries to n (clamped to num_blocks). */
uint64_t dcp_kv_test_poke_free_count(struct dcp_kv_manager *m, uint64_t n);

#endif /* DCP_KV_MANAGER_H */
