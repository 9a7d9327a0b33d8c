/* kv_manager.c: logical KV block ids and sequence block tables of one DCP group
 * (see kv_manager.h for the rules). */
#include "kv/kv_manager.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Block tables of all sequences are preallocated from one slab of at most this many
 * bytes (more only to give each table KV_MIN_PREALLOC_ENTRIES); a table that outgrows
 * its slice moves to its own heap allocation. */
#define KV_TABLE_SLAB_BUDGET_BYTES ((uint64_t)16 << 20)
#define KV_MIN_PREALLOC_ENTRIES 16u

struct kv_seq {
    int32_t *table;      /* block ids: a slab slice, or heap memory once it outgrew it */
    uint64_t len;        /* tokens */
    uint32_t count;      /* entries of table in use: blocks_for(len) */
    uint32_t capacity;   /* entries table can hold */
    uint32_t generation; /* of the slot's current or next sequence (id = generation << slot_bits | slot) */
    bool live;
    bool table_on_heap;  /* table was malloc'd; kept for the slot's next sequence */
};

/* Prefix cache state of one block. */
struct kv_cached {
    uint64_t key;
    int32_t hnext;               /* next block in the same hash chain, -1 */
    int32_t prev, next;          /* LRU neighbours while idle, -1 */
    bool published;
};

struct dcp_kv_manager {
    struct dcp_kv_manager_params p;
    uint64_t tokens_per_block;
    uint32_t max_table;          /* most blocks one sequence can own */
    uint32_t slot_bits;          /* low bits of an id naming its slot; the rest is the generation */

    int32_t *free_blocks;        /* LIFO stack of free block ids */
    uint64_t num_free_blocks;
    uint32_t *refcount;          /* [num_blocks] sequences holding each block */

    struct kv_seq *seqs;         /* [max_seqs] slots, indexed by sequence id */
    uint32_t *free_seq_ids;      /* LIFO stack of unused slots */
    uint32_t num_free_seq_ids;
    int32_t *table_slab;         /* [max_seqs * prealloc] preallocated table entries */

    /* Prefix cache (NULL until dcp_kv_prefix_cache_enable()). */
    struct kv_cached *cache;     /* [num_blocks] */
    int32_t *buckets;            /* [num_buckets] first block of each hash chain, -1 */
    uint64_t num_buckets;        /* a power of two */
    int32_t lru_head, lru_tail;  /* idle published blocks, oldest first; -1 when empty */
    uint64_t num_idle;
    uint64_t num_published;
    uint64_t num_evictions;
};

static int check_params(const struct dcp_kv_manager_params *p)
{
    if (!p->num_blocks || !p->block_size || !p->group_size || !p->max_seqs || !p->max_context)
        return dcp_error(DCP_EINVAL,
                         "kv manager: every size must be >= 1 (num_blocks=%" PRIu64
                         " block_size=%u group_size=%u max_seqs=%u max_context=%" PRIu64 ")",
                         p->num_blocks, p->block_size, p->group_size, p->max_seqs, p->max_context);
    if (p->num_blocks > INT32_MAX)
        return dcp_error(DCP_EINVAL, "kv manager: num_blocks=%" PRIu64 " exceeds INT32_MAX (block ids are int32)",
                         p->num_blocks);
    if (p->max_seqs > DCP_KV_MAX_SEQS)
        return dcp_error(DCP_EINVAL, "kv manager: max_seqs=%u exceeds %u", p->max_seqs, DCP_KV_MAX_SEQS);
    return DCP_OK;
}

/* Table entries preallocated per sequence: all a sequence can need when the slab
 * budget allows, else an equal share of the budget. */
static uint32_t prealloc_entries(uint32_t max_table, uint32_t max_seqs)
{
    uint64_t share = KV_TABLE_SLAB_BUDGET_BYTES / sizeof(int32_t) / max_seqs;
    share = DCP_MAX(share, KV_MIN_PREALLOC_ENTRIES);
    return (uint32_t)DCP_MIN(share, (uint64_t)max_table);
}

static int alloc_state(struct dcp_kv_manager *m)
{
    const struct dcp_kv_manager_params *p = &m->p;
    const uint32_t prealloc = prealloc_entries(m->max_table, p->max_seqs);
    m->free_blocks = malloc(p->num_blocks * sizeof(*m->free_blocks));
    m->refcount = calloc(p->num_blocks, sizeof(*m->refcount));
    m->seqs = calloc(p->max_seqs, sizeof(*m->seqs));
    m->free_seq_ids = malloc((size_t)p->max_seqs * sizeof(*m->free_seq_ids));
    m->table_slab = malloc((size_t)p->max_seqs * prealloc * sizeof(*m->table_slab));
    if (!m->free_blocks || !m->refcount || !m->seqs || !m->free_seq_ids || !m->table_slab)
        return dcp_error(DCP_ENOMEM, "kv manager: %" PRIu64 " blocks, %u sequences", p->num_blocks,
                         p->max_seqs);

    /* Stacks are filled in reverse so block 0 and sequence 0 are handed out first. */
    for (uint64_t i = 0; i < p->num_blocks; i++)
        m->free_blocks[i] = (int32_t)(p->num_blocks - 1 - i);
    m->num_free_blocks = p->num_blocks;
    for (uint32_t i = 0; i < p->max_seqs; i++) {
        m->free_seq_ids[i] = p->max_seqs - 1 - i;
        m->seqs[i].table = m->table_slab + (size_t)i * prealloc;
        m->seqs[i].capacity = prealloc;
    }
    m->num_free_seq_ids = p->max_seqs;
    return DCP_OK;
}

int dcp_kv_manager_create(const struct dcp_kv_manager_params *p, struct dcp_kv_manager **out)
{
    *out = NULL;
    int st = check_params(p);
    if (st)
        return st;
    struct dcp_kv_manager *m = calloc(1, sizeof(*m));
    if (!m)
        return dcp_error(DCP_ENOMEM, "kv manager");
    m->p = *p;
    m->tokens_per_block = (uint64_t)p->block_size * p->group_size;
    while (m->slot_bits < 32 && (p->max_seqs - 1) >> m->slot_bits)
        m->slot_bits++;
    /* A table holds distinct blocks, so it never needs more than num_blocks entries. */
    m->max_table = (uint32_t)DCP_MIN(dcp_kv_blocks_for(m, p->max_context), p->num_blocks);
    st = alloc_state(m);
    if (st) {
        dcp_kv_manager_destroy(&m);
        return st;
    }
    *out = m;
    return DCP_OK;
}

void dcp_kv_manager_destroy(struct dcp_kv_manager **pm)
{
    struct dcp_kv_manager *m = pm ? *pm : NULL;
    if (!m)
        return;
    if (m->seqs)
        for (uint32_t i = 0; i < m->p.max_seqs; i++)
            if (m->seqs[i].table_on_heap)
                free(m->seqs[i].table);
    free(m->table_slab);
    free(m->cache);
    free(m->buckets);
    free(m->free_seq_ids);
    free(m->seqs);
    free(m->refcount);
    free(m->free_blocks);
    free(m);
    *pm = NULL;
}

static uint32_t slot_of(const struct dcp_kv_manager *m, uint32_t seq)
{
    return seq & (uint32_t)((1ull << m->slot_bits) - 1);
}

static uint32_t generation_of(const struct dcp_kv_manager *m, uint32_t seq)
{
    return (uint32_t)((uint64_t)seq >> m->slot_bits);
}

/* The public id of the sequence in slot (its current generation). */
static uint32_t id_of(const struct dcp_kv_manager *m, uint32_t slot)
{
    return (uint32_t)((uint64_t)m->seqs[slot].generation << m->slot_bits) | slot;
}

/* The live sequence with id seq (slot and generation), or NULL. */
static struct kv_seq *find_seq(const struct dcp_kv_manager *m, uint32_t seq)
{
    const uint32_t slot = slot_of(m, seq);
    if (slot >= m->p.max_seqs)
        return NULL;
    struct kv_seq *s = &m->seqs[slot];
    return s->live && s->generation == generation_of(m, seq) ? s : NULL;
}

static int unknown_seq(const struct dcp_kv_manager *m, const char *op, uint32_t seq)
{
    const uint32_t slot = slot_of(m, seq);
    /* An earlier generation of a slot was handed out and released (until the generation wraps). */
    if (slot < m->p.max_seqs && generation_of(m, seq) < m->seqs[slot].generation)
        return dcp_error(DCP_EINVAL, "%s: sequence id %u is stale: it was released (its slot %u is now %s)", op,
                         seq, slot, m->seqs[slot].live ? "another sequence's" : "free");
    return dcp_error(DCP_EINVAL, "%s: no live sequence with id %u", op, seq);
}

/* Makes s's table hold at least need entries (need <= max_table), doubling. On
 * failure the table is unchanged. */
static int reserve_table(struct dcp_kv_manager *m, struct kv_seq *s, uint32_t need)
{
    if (need <= s->capacity)
        return DCP_OK;
    uint64_t cap = s->capacity;
    while (cap < need)
        cap *= 2;
    cap = DCP_MIN(cap, (uint64_t)m->max_table);
    int32_t *t = s->table_on_heap ? realloc(s->table, cap * sizeof(*t)) : malloc(cap * sizeof(*t));
    if (!t)
        return dcp_error(DCP_ENOMEM, "kv manager: block table of %" PRIu64 " entries", cap);
    if (!s->table_on_heap)
        memcpy(t, s->table, s->count * sizeof(*t));
    s->table = t;
    s->capacity = (uint32_t)cap;
    s->table_on_heap = true;
    return DCP_OK;
}

/* Takes a slot off the free-slot stack (the caller checked there is one); returns its id. */
static uint32_t take_seq_id(struct dcp_kv_manager *m)
{
    const uint32_t slot = m->free_seq_ids[--m->num_free_seq_ids];
    m->seqs[slot].live = true;
    m->seqs[slot].len = 0;
    m->seqs[slot].count = 0;
    return id_of(m, slot);
}

/* ---- prefix cache lists ---- */

static uint64_t bucket_of(const struct dcp_kv_manager *m, uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key & (m->num_buckets - 1);
}

static bool is_published(const struct dcp_kv_manager *m, int32_t b)
{
    return m->cache && m->cache[b].published;
}

/* The published block named key, or -1. */
static int32_t find_key(const struct dcp_kv_manager *m, uint64_t key)
{
    if (!m->cache)
        return -1;
    for (int32_t b = m->buckets[bucket_of(m, key)]; b >= 0; b = m->cache[b].hnext)
        if (m->cache[b].key == key)
            return b;
    return -1;
}

static void lru_unlink(struct dcp_kv_manager *m, int32_t b)
{
    struct kv_cached *c = &m->cache[b];
    if (c->prev >= 0)
        m->cache[c->prev].next = c->next;
    else
        m->lru_head = c->next;
    if (c->next >= 0)
        m->cache[c->next].prev = c->prev;
    else
        m->lru_tail = c->prev;
    c->prev = c->next = -1;
    m->num_idle--;
}

static void lru_push_tail(struct dcp_kv_manager *m, int32_t b)
{
    struct kv_cached *c = &m->cache[b];
    c->prev = m->lru_tail;
    c->next = -1;
    if (m->lru_tail >= 0)
        m->cache[m->lru_tail].next = b;
    else
        m->lru_head = b;
    m->lru_tail = b;
    m->num_idle++;
}

/* Evicts the least recently used idle block: forgets its key and frees it. */
static void evict_one(struct dcp_kv_manager *m)
{
    const int32_t b = m->lru_head;
    lru_unlink(m, b);
    int32_t *link = &m->buckets[bucket_of(m, m->cache[b].key)];
    while (*link != b)
        link = &m->cache[*link].hnext;
    *link = m->cache[b].hnext;
    m->cache[b].hnext = -1;
    m->cache[b].published = false;
    m->num_published--;
    m->num_evictions++;
    m->free_blocks[m->num_free_blocks++] = b;
}

/* Takes one block for a new table entry: a free one, else the LRU idle one. */
static int32_t take_block(struct dcp_kv_manager *m)
{
    if (!m->num_free_blocks)
        evict_one(m);
    const int32_t b = m->free_blocks[--m->num_free_blocks];
    m->refcount[b] = 1;
    return b;
}

/* Drops s's references to its table entries [new_count, count), last first, so the
 * LIFO free list hands them out again in table order. A published block that loses
 * its last user goes idle (most recently used end of the LRU list). */
static void drop_blocks_from(struct dcp_kv_manager *m, struct kv_seq *s, uint32_t new_count)
{
    while (s->count > new_count) {
        int32_t b = s->table[--s->count];
        if (--m->refcount[b] == 0) {
            if (is_published(m, b))
                lru_push_tail(m, b);
            else
                m->free_blocks[m->num_free_blocks++] = b;
        }
    }
}

int dcp_kv_seq_create(struct dcp_kv_manager *m, uint32_t *seq_id)
{
    if (!m->num_free_seq_ids)
        return dcp_error(DCP_ENOSPC, "seq_create: all %u sequence slots are live", m->p.max_seqs);
    *seq_id = take_seq_id(m);
    return DCP_OK;
}

int dcp_kv_seq_extend(struct dcp_kv_manager *m, uint32_t seq, uint32_t n)
{
    struct kv_seq *s = find_seq(m, seq);
    if (!s)
        return unknown_seq(m, "seq_extend", seq);
    if (n > m->p.max_context - s->len)
        return dcp_error(DCP_EINVAL, "seq_extend: sequence %u: %" PRIu64 " + %u tokens exceeds max_context %" PRIu64,
                         seq, s->len, n, m->p.max_context);
    const uint64_t new_len = s->len + n;
    const uint64_t need = dcp_kv_blocks_for(m, new_len) - s->count;
    if (need > dcp_kv_available_blocks(m))
        return dcp_error(DCP_ENOSPC, "seq_extend: sequence %u to %" PRIu64 " tokens: need %" PRIu64
                         " blocks, %" PRIu64 " free (idle cached blocks included)", seq, new_len, need,
                         dcp_kv_available_blocks(m));
    /* need <= available blocks, none of which s holds, so count + need <= num_blocks
     * and fits the table limit. */
    int st = reserve_table(m, s, s->count + (uint32_t)need);
    if (st)
        return st;
    for (uint64_t i = 0; i < need; i++)
        s->table[s->count++] = take_block(m);
    s->len = new_len;
    return DCP_OK;
}

int dcp_kv_seq_truncate(struct dcp_kv_manager *m, uint32_t seq, uint64_t len)
{
    struct kv_seq *s = find_seq(m, seq);
    if (!s)
        return unknown_seq(m, "seq_truncate", seq);
    if (len > s->len)
        return dcp_error(DCP_EINVAL, "seq_truncate: sequence %u has %" PRIu64 " tokens, cannot grow to %" PRIu64,
                         seq, s->len, len);
    const uint32_t new_count = (uint32_t)dcp_kv_blocks_for(m, len);
    if (len % m->tokens_per_block &&
        (m->refcount[s->table[new_count - 1]] > 1 || is_published(m, s->table[new_count - 1])))
        return dcp_error(DCP_EINVAL, "seq_truncate: sequence %u to %" PRIu64 " tokens would leave block %d"
                         " partly filled while %s (truncate to a multiple of %" PRIu64 ")",
                         seq, len, s->table[new_count - 1],
                         m->refcount[s->table[new_count - 1]] > 1 ? "other sequences share it"
                                                                  : "the prefix cache publishes it",
                         m->tokens_per_block);
    drop_blocks_from(m, s, new_count);
    s->len = len;
    return DCP_OK;
}

int dcp_kv_seq_fork(struct dcp_kv_manager *m, uint32_t src, uint32_t *seq_id)
{
    const struct kv_seq *s = find_seq(m, src);
    if (!s)
        return unknown_seq(m, "seq_fork", src);
    if (s->len % m->tokens_per_block)
        return dcp_error(DCP_EINVAL, "seq_fork: sequence %u has %" PRIu64 " tokens, not a multiple of the %" PRIu64
                         " tokens per block (a partly filled block cannot be shared)",
                         src, s->len, m->tokens_per_block);
    if (!m->num_free_seq_ids)
        return dcp_error(DCP_ENOSPC, "seq_fork: all %u sequence slots are live", m->p.max_seqs);
    /* The slot on top of the free-id stack is the one take_seq_id() will return. */
    struct kv_seq *d = &m->seqs[m->free_seq_ids[m->num_free_seq_ids - 1]];
    int st = reserve_table(m, d, s->count);
    if (st)
        return st;
    const uint32_t id = take_seq_id(m);
    memcpy(d->table, s->table, s->count * sizeof(*d->table));
    for (uint32_t i = 0; i < s->count; i++)
        m->refcount[s->table[i]]++;
    d->count = s->count;
    d->len = s->len;
    *seq_id = id;
    return DCP_OK;
}

int dcp_kv_seq_release(struct dcp_kv_manager *m, uint32_t seq)
{
    struct kv_seq *s = find_seq(m, seq);
    if (!s)
        return unknown_seq(m, "seq_release", seq);
    drop_blocks_from(m, s, 0);
    s->len = 0;
    s->live = false;
    /* The slot's next sequence gets a new id; this one becomes stale. */
    s->generation = (uint32_t)((s->generation + 1) & ((1ull << (32 - m->slot_bits)) - 1));
    m->free_seq_ids[m->num_free_seq_ids++] = slot_of(m, seq);
    return DCP_OK;
}

bool dcp_kv_seq_exists(const struct dcp_kv_manager *m, uint32_t seq)
{
    return find_seq(m, seq) != NULL;
}

int dcp_kv_seq_check(const struct dcp_kv_manager *m, uint32_t seq, const char *op)
{
    return find_seq(m, seq) ? DCP_OK : unknown_seq(m, op, seq);
}

uint32_t dcp_kv_seq_slot(const struct dcp_kv_manager *m, uint32_t seq)
{
    return find_seq(m, seq) ? slot_of(m, seq) : UINT32_MAX;
}

uint64_t dcp_kv_seq_length(const struct dcp_kv_manager *m, uint32_t seq)
{
    const struct kv_seq *s = find_seq(m, seq);
    return s ? s->len : 0;
}

const int32_t *dcp_kv_seq_blocks(const struct dcp_kv_manager *m, uint32_t seq, uint32_t *count)
{
    const struct kv_seq *s = find_seq(m, seq);
    if (count)
        *count = s ? s->count : 0;
    return s ? s->table : NULL;
}

uint64_t dcp_kv_free_blocks(const struct dcp_kv_manager *m) { return m->num_free_blocks; }

uint64_t dcp_kv_tokens_per_block(const struct dcp_kv_manager *m) { return m->tokens_per_block; }

uint64_t dcp_kv_blocks_for(const struct dcp_kv_manager *m, uint64_t len)
{
    /* Same value as dcp_kv_blocks_for_length(), written so that no len overflows
     * (max_context may be as large as UINT64_MAX). */
    return len / m->tokens_per_block + (len % m->tokens_per_block != 0);
}

uint32_t dcp_kv_block_refcount(const struct dcp_kv_manager *m, int32_t block)
{
    return block >= 0 && (uint64_t)block < m->p.num_blocks ? m->refcount[block] : 0;
}

uint32_t dcp_kv_live_seqs(const struct dcp_kv_manager *m)
{
    return m->p.max_seqs - m->num_free_seq_ids;
}

/* ---- prefix cache ---------------------------------------------------------------- */

int dcp_kv_prefix_cache_enable(struct dcp_kv_manager *m)
{
    if (m->cache)
        return DCP_OK;
    uint64_t nb = 1;
    while (nb < m->p.num_blocks)
        nb *= 2;
    struct kv_cached *c = malloc(m->p.num_blocks * sizeof(*c));
    int32_t *buckets = malloc(nb * sizeof(*buckets));
    if (!c || !buckets) {
        free(c);
        free(buckets);
        return dcp_error(DCP_ENOMEM, "kv manager: prefix cache for %" PRIu64 " blocks", m->p.num_blocks);
    }
    for (uint64_t i = 0; i < m->p.num_blocks; i++)
        c[i] = (struct kv_cached){.hnext = -1, .prev = -1, .next = -1};
    for (uint64_t i = 0; i < nb; i++)
        buckets[i] = -1;
    m->cache = c;
    m->buckets = buckets;
    m->num_buckets = nb;
    m->lru_head = m->lru_tail = -1;
    return DCP_OK;
}

void dcp_kv_prefix_lookup(const struct dcp_kv_manager *m, const uint64_t *keys, uint32_t n,
                          uint32_t *hits, uint32_t *idle_hits)
{
    uint32_t h = 0, idle = 0;
    for (; h < n; h++) {
        const int32_t b = find_key(m, keys[h]);
        if (b < 0)
            break;
        idle += m->refcount[b] == 0;
    }
    *hits = h;
    if (idle_hits)
        *idle_hits = idle;
}

int dcp_kv_seq_attach_prefix(struct dcp_kv_manager *m, uint32_t seq, const uint64_t *keys, uint32_t n,
                             uint32_t *hits)
{
    *hits = 0;
    struct kv_seq *s = find_seq(m, seq);
    if (!s)
        return unknown_seq(m, "seq_attach_prefix", seq);
    if (!m->cache || s->len)
        return dcp_error(DCP_EINVAL, "seq_attach_prefix: sequence %u: %s", seq,
                         !m->cache ? "the prefix cache is not enabled" : "the sequence is not empty");
    uint32_t h;
    dcp_kv_prefix_lookup(m, keys, n, &h, NULL);
    h = (uint32_t)DCP_MIN((uint64_t)h, dcp_kv_blocks_for(m, m->p.max_context));
    int st = reserve_table(m, s, h);
    if (st)
        return st;
    for (uint32_t i = 0; i < h; i++) {
        const int32_t b = find_key(m, keys[i]);
        if (m->refcount[b]++ == 0)
            lru_unlink(m, b);
        s->table[s->count++] = b;
    }
    s->len = (uint64_t)h * m->tokens_per_block;
    *hits = h;
    return DCP_OK;
}

int dcp_kv_seq_publish(struct dcp_kv_manager *m, uint32_t seq, const uint64_t *keys, uint32_t first, uint32_t n,
                       uint32_t *published)
{
    if (published)
        *published = 0;
    struct kv_seq *s = find_seq(m, seq);
    if (!s)
        return unknown_seq(m, "seq_publish", seq);
    if (!m->cache)
        return dcp_error(DCP_EINVAL, "seq_publish: the prefix cache is not enabled");
    const uint64_t full = DCP_MIN((uint64_t)n, s->len / m->tokens_per_block);
    uint32_t done = 0;
    for (uint64_t i = first; i < full; i++) {
        const int32_t b = s->table[i];
        if (m->cache[b].published || find_key(m, keys[i]) >= 0)
            continue;
        const uint64_t k = bucket_of(m, keys[i]);
        m->cache[b].key = keys[i];
        m->cache[b].hnext = m->buckets[k];
        m->buckets[k] = b;
        m->cache[b].published = true;
        m->num_published++;
        done++;
    }
    if (published)
        *published = done;
    return DCP_OK;
}

bool dcp_kv_block_published(const struct dcp_kv_manager *m, int32_t block)
{
    return block >= 0 && (uint64_t)block < m->p.num_blocks && is_published(m, block);
}

uint64_t dcp_kv_idle_blocks(const struct dcp_kv_manager *m) { return m->num_idle; }

uint64_t dcp_kv_published_blocks(const struct dcp_kv_manager *m) { return m->num_published; }

uint64_t dcp_kv_available_blocks(const struct dcp_kv_manager *m) { return m->num_free_blocks + m->num_idle; }

uint64_t dcp_kv_used_blocks(const struct dcp_kv_manager *m)
{
    return m->p.num_blocks - dcp_kv_available_blocks(m);
}

uint64_t dcp_kv_evictions(const struct dcp_kv_manager *m) { return m->num_evictions; }

static int check_fail(const char *what, int64_t a, int64_t b)
{
    return dcp_error(DCP_EINVAL, "kv check: %s (%" PRId64 " vs %" PRId64 ")", what, a, b);
}

/* The LRU list and hash chains agree with the per-block flags. */
static int check_cache(const struct dcp_kv_manager *m, const uint32_t *count)
{
    uint64_t idle = 0, published = 0;
    for (int32_t b = m->lru_head, prev = -1; b >= 0; prev = b, b = m->cache[b].next) {
        if (m->cache[b].prev != prev || !m->cache[b].published || count[b] || ++idle > m->num_idle)
            return check_fail("LRU list entry is not an idle published block", b, (int64_t)idle);
    }
    for (uint64_t i = 0; i < m->num_buckets; i++)
        for (int32_t b = m->buckets[i]; b >= 0; b = m->cache[b].hnext)
            if (!m->cache[b].published || bucket_of(m, m->cache[b].key) != i ||
                find_key(m, m->cache[b].key) != b || ++published > m->num_published)
                return check_fail("hash chain holds a block its key does not find", b, (int64_t)i);
    uint64_t flagged = 0, flagged_idle = 0;
    for (uint64_t b = 0; b < m->p.num_blocks; b++) {
        flagged += m->cache[b].published;
        flagged_idle += m->cache[b].published && !count[b];
    }
    if (idle != m->num_idle || flagged_idle != idle)
        return check_fail("idle blocks: LRU list vs count", (int64_t)idle, (int64_t)flagged_idle);
    if (published != m->num_published || flagged != published)
        return check_fail("published blocks: index vs count", (int64_t)published, (int64_t)flagged);
    return DCP_OK;
}

int dcp_kv_check(const struct dcp_kv_manager *m)
{
    const uint64_t nb = m->p.num_blocks;
    uint32_t *count = calloc(nb, sizeof(*count));
    if (!count)
        return dcp_error(DCP_ENOMEM, "kv check");
    int st = DCP_OK;
    for (uint32_t i = 0; i < m->p.max_seqs && !st; i++) {
        const struct kv_seq *s = &m->seqs[i];
        if (!s->live)
            continue;
        if (s->count != dcp_kv_blocks_for(m, s->len))
            st = check_fail("table length vs sequence length", s->count, (int64_t)s->len);
        for (uint32_t j = 0; j < s->count && !st; j++)
            count[s->table[j]]++;
        /* A partly filled last block is written next: it must be private and unpublished. */
        if (!st && s->len % m->tokens_per_block &&
            (is_published(m, s->table[s->count - 1]) || m->refcount[s->table[s->count - 1]] > 1))
            st = check_fail("a partly filled block is shared or published", i, s->table[s->count - 1]);
    }
    uint64_t used = 0;
    for (uint64_t b = 0; b < nb && !st; b++) {
        if (count[b] != m->refcount[b])
            st = check_fail("refcount differs from the tables holding the block", m->refcount[b], count[b]);
        used += count[b] > 0;
    }
    for (uint64_t i = 0; i < m->num_free_blocks && !st; i++) {
        const int32_t b = m->free_blocks[i];
        if (count[b] || is_published(m, b) || count[b] == UINT32_MAX)
            st = check_fail("a free block is in use or published", b, count[b]);
        else
            count[b] = UINT32_MAX; /* seen: a duplicate hits the test above */
    }
    if (!st && m->cache) {
        for (uint64_t i = 0; i < m->num_free_blocks; i++)
            count[m->free_blocks[i]] = 0;
        st = check_cache(m, count);
    }
    if (!st && m->num_free_blocks + m->num_idle + used != nb)
        st = check_fail("free + idle + used != num_blocks", (int64_t)(m->num_free_blocks + m->num_idle + used),
                        (int64_t)nb);
    free(count);
    return st;
}

uint32_t dcp_kv_test_poke_refcount(struct dcp_kv_manager *m, int32_t block, uint32_t refcount)
{
    if (block < 0 || (uint64_t)block >= m->p.num_blocks)
        return 0;
    const uint32_t old = m->refcount[block];
    m->refcount[block] = refcount;
    return old;
}

uint64_t dcp_kv_test_poke_free_count(struct dcp_kv_manager *m, uint64_t n)
{
    const uint64_t old = m->num_free_blocks;
    m->num_free_blocks = DCP_MIN(n, m->p.num_blocks);
    return old;
}
