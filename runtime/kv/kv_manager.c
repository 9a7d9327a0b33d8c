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

/* Drops s's references to its table entries [new_count, count), last first, so the
 * LIFO free list hands them out again in table order. */
static void drop_blocks_from(struct dcp_kv_manager *m, struct kv_seq *s, uint32_t new_count)
{
    while (s->count > new_count) {
        int32_t b = s->table[--s->count];
        if (--m->refcount[b] == 0)
            m->free_blocks[m->num_free_blocks++] = b;
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
    if (need > m->num_free_blocks)
        return dcp_error(DCP_ENOSPC, "seq_extend: sequence %u to %" PRIu64 " tokens: need %" PRIu64
                         " blocks, %" PRIu64 " free", seq, new_len, need, m->num_free_blocks);
    /* need <= free blocks, so count + need <= num_blocks and fits the table limit. */
    int st = reserve_table(m, s, s->count + (uint32_t)need);
    if (st)
        return st;
    for (uint64_t i = 0; i < need; i++) {
        int32_t b = m->free_blocks[--m->num_free_blocks];
        m->refcount[b] = 1;
        s->table[s->count++] = b;
    }
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
    if (len % m->tokens_per_block && m->refcount[s->table[new_count - 1]] > 1)
        return dcp_error(DCP_EINVAL, "seq_truncate: sequence %u to %" PRIu64 " tokens would leave block %d"
                         " partly filled while other sequences share it (truncate to a multiple of %" PRIu64 ")",
                         seq, len, s->table[new_count - 1], m->tokens_per_block);
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
