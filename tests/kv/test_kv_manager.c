/* KV block manager: block arithmetic, exhaustion, reuse, truncate, fork reference
 * counts, limits, and a randomized comparison against a reference model. */
#include <stdbool.h>
#include <string.h>

#include "kv/kv_manager.h"
#include "test_util.h"
#include "util/util.h"

static struct dcp_kv_manager *make(uint64_t num_blocks, uint32_t block_size, uint32_t group_size,
                                   uint32_t max_seqs, uint64_t max_context)
{
    const struct dcp_kv_manager_params p = {
        .num_blocks = num_blocks, .block_size = block_size, .group_size = group_size,
        .max_seqs = max_seqs, .max_context = max_context,
    };
    struct dcp_kv_manager *m = NULL;
    assert_int_equal(dcp_kv_manager_create(&p, &m), DCP_OK);
    assert_non_null(m);
    return m;
}

static uint32_t new_seq(struct dcp_kv_manager *m)
{
    uint32_t id = UINT32_MAX;
    assert_int_equal(dcp_kv_seq_create(m, &id), DCP_OK);
    return id;
}

static void assert_error_mentions(const char *text)
{
    if (!strstr(dcp_last_error(), text))
        fail_msg("last error \"%s\" does not mention \"%s\"", dcp_last_error(), text);
}

/* A copy of everything observable about one sequence, to check that failures change nothing. */
struct seq_snapshot {
    bool exists;
    uint64_t len;
    uint32_t count;
    int32_t table[64];
};

static void snapshot(const struct dcp_kv_manager *m, uint32_t seq, struct seq_snapshot *s)
{
    memset(s, 0, sizeof(*s));
    s->exists = dcp_kv_seq_exists(m, seq);
    s->len = dcp_kv_seq_length(m, seq);
    const int32_t *t = dcp_kv_seq_blocks(m, seq, &s->count);
    assert_true(s->count <= DCP_ARRAY_SIZE(s->table));
    if (s->count)
        memcpy(s->table, t, s->count * sizeof(*t));
}

static void assert_unchanged(const struct dcp_kv_manager *m, uint32_t seq, const struct seq_snapshot *before)
{
    struct seq_snapshot now;
    snapshot(m, seq, &now);
    assert_int_equal(now.exists, before->exists);
    assert_int_equal(now.len, before->len);
    assert_int_equal(now.count, before->count);
    assert_memory_equal(now.table, before->table, sizeof(now.table));
}

static void test_create_rejects_bad_params(void **state)
{
    (void)state;
    const struct dcp_kv_manager_params good = {
        .num_blocks = 8, .block_size = 16, .group_size = 2, .max_seqs = 4, .max_context = 1024,
    };
    struct dcp_kv_manager_params bad[6];
    for (size_t i = 0; i < DCP_ARRAY_SIZE(bad); i++)
        bad[i] = good;
    bad[0].num_blocks = 0;
    bad[1].block_size = 0;
    bad[2].group_size = 0;
    bad[3].max_seqs = 0;
    bad[4].max_context = 0;
    bad[5].num_blocks = (uint64_t)INT32_MAX + 1;
    for (size_t i = 0; i < DCP_ARRAY_SIZE(bad); i++) {
        struct dcp_kv_manager *m = (struct dcp_kv_manager *)&good; /* any non-NULL: must be reset */
        assert_int_equal(dcp_kv_manager_create(&bad[i], &m), DCP_EINVAL);
        assert_null(m);
    }
    assert_error_mentions("INT32_MAX");

    struct dcp_kv_manager *m = NULL;
    assert_int_equal(dcp_kv_manager_create(&good, &m), DCP_OK);
    assert_int_equal(dcp_kv_free_blocks(m), 8);
    assert_int_equal(dcp_kv_live_seqs(m), 0);
    dcp_kv_manager_destroy(&m);
    assert_null(m);
    dcp_kv_manager_destroy(&m);
    dcp_kv_manager_destroy(NULL);
}

static const uint32_t group_sizes[] = {1, 2, 4, 8};

/* Exactly num_blocks blocks fit; the next extend fails with ENOSPC and changes nothing. */
static void test_exhaustion(void **state)
{
    (void)state;
    for (size_t g = 0; g < DCP_ARRAY_SIZE(group_sizes); g++) {
        const uint32_t n = group_sizes[g], bs = 4;
        const uint64_t tpb = (uint64_t)bs * n, num_blocks = 10;
        struct dcp_kv_manager *m = make(num_blocks, bs, n, 4, 1 << 20);
        uint32_t a = new_seq(m), b = new_seq(m);
        /* a takes 7 blocks in uneven chunks, b the remaining 3. */
        assert_int_equal(dcp_kv_seq_extend(m, a, 1), DCP_OK);
        assert_int_equal(dcp_kv_seq_extend(m, a, (uint32_t)(7 * tpb - 1)), DCP_OK);
        assert_int_equal(dcp_kv_seq_extend(m, b, (uint32_t)(2 * tpb + 1)), DCP_OK);
        assert_int_equal(dcp_kv_free_blocks(m), 0);
        /* b's third block has room left: filling it needs no new block. */
        assert_int_equal(dcp_kv_seq_extend(m, b, (uint32_t)(tpb - 1)), DCP_OK);
        assert_int_equal(dcp_kv_seq_length(m, b), 3 * tpb);

        struct seq_snapshot sa, sb;
        snapshot(m, a, &sa);
        snapshot(m, b, &sb);
        assert_int_equal(dcp_kv_seq_extend(m, a, 1), DCP_ENOSPC);
        assert_error_mentions("need 1 blocks, 0 free");
        assert_int_equal(dcp_kv_seq_extend(m, b, (uint32_t)(3 * tpb)), DCP_ENOSPC);
        assert_error_mentions("need 3 blocks, 0 free");
        assert_unchanged(m, a, &sa);
        assert_unchanged(m, b, &sb);
        assert_int_equal(dcp_kv_free_blocks(m), 0);

        /* All or nothing: with 2 free, asking for 3 takes none. */
        assert_int_equal(dcp_kv_seq_truncate(m, a, 5 * tpb), DCP_OK);
        assert_int_equal(dcp_kv_free_blocks(m), 2);
        snapshot(m, b, &sb);
        assert_int_equal(dcp_kv_seq_extend(m, b, (uint32_t)(2 * tpb + 1)), DCP_ENOSPC);
        assert_error_mentions("need 3 blocks, 2 free");
        assert_unchanged(m, b, &sb);
        assert_int_equal(dcp_kv_free_blocks(m), 2);
        assert_int_equal(dcp_kv_seq_extend(m, b, (uint32_t)(2 * tpb)), DCP_OK);
        assert_int_equal(dcp_kv_free_blocks(m), 0);

        /* Every block id appears exactly once over both tables. */
        uint32_t seen[10] = {0}, ca, cb;
        const int32_t *ta = dcp_kv_seq_blocks(m, a, &ca), *tb = dcp_kv_seq_blocks(m, b, &cb);
        assert_int_equal(ca + cb, num_blocks);
        for (uint32_t i = 0; i < ca; i++)
            seen[ta[i]]++;
        for (uint32_t i = 0; i < cb; i++)
            seen[tb[i]]++;
        for (uint32_t i = 0; i < num_blocks; i++) {
            assert_int_equal(seen[i], 1);
            assert_int_equal(dcp_kv_block_refcount(m, (int32_t)i), 1);
        }
        dcp_kv_manager_destroy(&m);
    }
}

/* Released blocks come back; LIFO hands them out again in the released table's order. */
static void test_free_and_reuse(void **state)
{
    (void)state;
    struct dcp_kv_manager *m = make(16, 8, 2, 4, 4096);
    uint32_t a = new_seq(m), b = new_seq(m);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(dcp_kv_seq_extend(m, a, 16 * 3), DCP_OK);
    assert_int_equal(dcp_kv_seq_extend(m, b, 16 * 2), DCP_OK);
    uint32_t count;
    const int32_t *t = dcp_kv_seq_blocks(m, a, &count);
    assert_int_equal(count, 3);
    const int32_t first[3] = {t[0], t[1], t[2]};
    assert_int_equal(first[0], 0); /* a fresh manager hands out 0, 1, 2, ... */
    assert_int_equal(first[2], 2);

    assert_int_equal(dcp_kv_seq_release(m, a), DCP_OK);
    assert_false(dcp_kv_seq_exists(m, a));
    assert_int_equal(dcp_kv_free_blocks(m), 16 - 2);
    for (int i = 0; i < 3; i++)
        assert_int_equal(dcp_kv_block_refcount(m, first[i]), 0);
    assert_int_equal(dcp_kv_live_seqs(m), 1);

    uint32_t c = new_seq(m);
    assert_int_not_equal(c, a); /* a's slot is reused under a new id: a is stale */
    assert_false(dcp_kv_seq_exists(m, a));
    assert_int_equal(dcp_kv_seq_extend(m, a, 1), DCP_EINVAL);
    assert_error_mentions("stale");
    assert_int_equal(dcp_kv_seq_length(m, c), 0);
    assert_int_equal(dcp_kv_seq_extend(m, c, 16 * 3), DCP_OK);
    t = dcp_kv_seq_blocks(m, c, &count);
    assert_int_equal(count, 3);
    assert_memory_equal(t, first, sizeof(first));
    dcp_kv_manager_destroy(&m);
}

static void test_truncate(void **state)
{
    (void)state;
    const uint64_t tpb = 4 * 2;
    struct dcp_kv_manager *m = make(8, 4, 2, 2, 1000);
    uint32_t s = new_seq(m);
    assert_int_equal(dcp_kv_seq_extend(m, s, (uint32_t)(4 * tpb)), DCP_OK);
    assert_int_equal(dcp_kv_free_blocks(m), 4);
    uint32_t count;
    const int32_t last = dcp_kv_seq_blocks(m, s, &count)[3];

    /* Into the last block: it stays. */
    assert_int_equal(dcp_kv_seq_truncate(m, s, 3 * tpb + 1), DCP_OK);
    assert_int_equal(dcp_kv_free_blocks(m), 4);
    /* To a block boundary: the last block goes back. */
    assert_int_equal(dcp_kv_seq_truncate(m, s, 3 * tpb), DCP_OK);
    assert_int_equal(dcp_kv_free_blocks(m), 5);
    assert_int_equal(dcp_kv_block_refcount(m, last), 0);
    dcp_kv_seq_blocks(m, s, &count);
    assert_int_equal(count, 3);
    /* Same length: no-op. Longer: refused. */
    assert_int_equal(dcp_kv_seq_truncate(m, s, 3 * tpb), DCP_OK);
    assert_int_equal(dcp_kv_seq_truncate(m, s, 3 * tpb + 1), DCP_EINVAL);
    assert_int_equal(dcp_kv_seq_length(m, s), 3 * tpb);
    /* Several blocks at once, then to nothing. */
    assert_int_equal(dcp_kv_seq_truncate(m, s, tpb - 1), DCP_OK);
    assert_int_equal(dcp_kv_free_blocks(m), 7);
    assert_int_equal(dcp_kv_seq_truncate(m, s, 0), DCP_OK);
    assert_int_equal(dcp_kv_free_blocks(m), 8);
    assert_true(dcp_kv_seq_exists(m, s));
    /* The freed last block is the first one handed out again. */
    assert_int_equal(dcp_kv_seq_extend(m, s, 1), DCP_OK);
    assert_int_equal(dcp_kv_seq_blocks(m, s, &count)[0], 0);
    dcp_kv_manager_destroy(&m);
}

static void test_fork_refcounts(void **state)
{
    (void)state;
    const uint64_t tpb = 16;
    struct dcp_kv_manager *m = make(10, 16, 1, 4, 1000);
    uint32_t src = new_seq(m), child = UINT32_MAX;
    assert_int_equal(dcp_kv_seq_extend(m, src, (uint32_t)(3 * tpb - 1)), DCP_OK);
    assert_int_equal(dcp_kv_seq_fork(m, src, &child), DCP_EINVAL); /* partly filled last block */
    assert_error_mentions("not a multiple");
    assert_int_equal(dcp_kv_live_seqs(m), 1);
    assert_int_equal(dcp_kv_seq_extend(m, src, 1), DCP_OK);

    assert_int_equal(dcp_kv_seq_fork(m, src, &child), DCP_OK);
    assert_int_not_equal(child, src);
    assert_int_equal(dcp_kv_seq_length(m, child), 3 * tpb);
    uint32_t cs, cc;
    const int32_t *ts = dcp_kv_seq_blocks(m, src, &cs), *tc = dcp_kv_seq_blocks(m, child, &cc);
    assert_int_equal(cs, 3);
    assert_int_equal(cc, 3);
    assert_memory_equal(ts, tc, 3 * sizeof(int32_t));
    const int32_t shared[3] = {ts[0], ts[1], ts[2]};
    for (int i = 0; i < 3; i++)
        assert_int_equal(dcp_kv_block_refcount(m, shared[i]), 2);
    assert_int_equal(dcp_kv_free_blocks(m), 7);

    /* The child appends into a block of its own. */
    assert_int_equal(dcp_kv_seq_extend(m, child, 5), DCP_OK);
    tc = dcp_kv_seq_blocks(m, child, &cc);
    assert_int_equal(cc, 4);
    assert_int_equal(dcp_kv_block_refcount(m, tc[3]), 1);
    assert_int_equal(dcp_kv_free_blocks(m), 6);

    /* Cutting into a shared block would let an append overwrite the other's tokens. */
    assert_int_equal(dcp_kv_seq_truncate(m, child, 2 * tpb + 3), DCP_EINVAL);
    assert_error_mentions("share");
    assert_int_equal(dcp_kv_seq_length(m, child), 3 * tpb + 5);
    assert_int_equal(dcp_kv_seq_truncate(m, src, 3 * tpb - 1), DCP_EINVAL);
    /* To a boundary is fine: the child drops one shared reference. */
    assert_int_equal(dcp_kv_seq_truncate(m, child, 2 * tpb), DCP_OK);
    assert_int_equal(dcp_kv_block_refcount(m, shared[2]), 1);
    assert_int_equal(dcp_kv_free_blocks(m), 7);
    /* Now src alone holds shared[2], so it may cut into it. */
    assert_int_equal(dcp_kv_seq_truncate(m, src, 3 * tpb - 1), DCP_OK);

    /* Releasing one holder frees nothing that the other still holds. */
    assert_int_equal(dcp_kv_seq_release(m, src), DCP_OK);
    assert_int_equal(dcp_kv_block_refcount(m, shared[0]), 1);
    assert_int_equal(dcp_kv_block_refcount(m, shared[1]), 1);
    assert_int_equal(dcp_kv_block_refcount(m, shared[2]), 0);
    assert_int_equal(dcp_kv_free_blocks(m), 8);
    assert_int_equal(dcp_kv_seq_release(m, child), DCP_OK);
    assert_int_equal(dcp_kv_block_refcount(m, shared[0]), 0);
    assert_int_equal(dcp_kv_free_blocks(m), 10);

    /* An empty sequence forks into an empty one; a fork of a fork shares three ways. */
    uint32_t e = new_seq(m), f = UINT32_MAX, g = UINT32_MAX;
    assert_int_equal(dcp_kv_seq_fork(m, e, &f), DCP_OK);
    assert_int_equal(dcp_kv_seq_length(m, f), 0);
    assert_int_equal(dcp_kv_seq_extend(m, f, (uint32_t)tpb), DCP_OK);
    assert_int_equal(dcp_kv_seq_fork(m, f, &g), DCP_OK);
    uint32_t h = UINT32_MAX, count;
    assert_int_equal(dcp_kv_seq_fork(m, g, &h), DCP_OK);
    const int32_t b = dcp_kv_seq_blocks(m, f, &count)[0];
    assert_int_equal(count, 1);
    assert_int_equal(dcp_kv_block_refcount(m, b), 3);
    assert_int_equal(dcp_kv_seq_fork(m, g, &h), DCP_ENOSPC); /* all 4 slots live */
    assert_int_equal(dcp_kv_block_refcount(m, b), 3);
    dcp_kv_manager_destroy(&m);
}

/* Blocks per sequence change exactly at multiples of block_size * N. */
static void test_block_arithmetic(void **state)
{
    (void)state;
    static const uint32_t block_sizes[] = {1, 16, 64};
    for (size_t g = 0; g < DCP_ARRAY_SIZE(group_sizes); g++)
        for (size_t k = 0; k < DCP_ARRAY_SIZE(block_sizes); k++) {
            const uint32_t n = group_sizes[g], bs = block_sizes[k];
            const uint64_t tpb = (uint64_t)bs * n;
            struct dcp_kv_manager *m = make(64, bs, n, 2, 8 * tpb);
            assert_int_equal(dcp_kv_tokens_per_block(m), tpb);
            assert_int_equal(dcp_kv_blocks_for(m, 0), 0);
            assert_int_equal(dcp_kv_blocks_for(m, 1), 1);
            assert_int_equal(dcp_kv_blocks_for(m, tpb), 1);
            assert_int_equal(dcp_kv_blocks_for(m, tpb + 1), 2);
            assert_int_equal(dcp_kv_blocks_for(m, UINT64_MAX), UINT64_MAX / tpb + (UINT64_MAX % tpb != 0));
            uint32_t s = new_seq(m), count;
            for (uint64_t len = 1; len <= 8 * tpb; len++) {
                assert_int_equal(dcp_kv_seq_extend(m, s, 1), DCP_OK);
                dcp_kv_seq_blocks(m, s, &count);
                assert_int_equal(count, (len + tpb - 1) / tpb);
                assert_int_equal(dcp_kv_free_blocks(m), 64 - count);
            }
            dcp_kv_manager_destroy(&m);
        }
}

static void test_max_seqs(void **state)
{
    (void)state;
    struct dcp_kv_manager *m = make(8, 4, 1, 3, 64);
    uint32_t ids[3];
    for (uint32_t i = 0; i < 3; i++) {
        ids[i] = new_seq(m);
        assert_int_equal(ids[i], i);
    }
    uint32_t extra = 77;
    assert_int_equal(dcp_kv_seq_create(m, &extra), DCP_ENOSPC);
    assert_error_mentions("all 3 sequence slots");
    assert_int_equal(extra, 77);
    assert_int_equal(dcp_kv_seq_fork(m, ids[0], &extra), DCP_ENOSPC);
    assert_int_equal(extra, 77);
    assert_int_equal(dcp_kv_live_seqs(m), 3);
    assert_int_equal(dcp_kv_seq_release(m, ids[1]), DCP_OK);
    assert_int_equal(dcp_kv_live_seqs(m), 2);
    const uint32_t again = new_seq(m);
    assert_int_not_equal(again, ids[1]); /* ids[1]'s slot, a new generation */
    assert_int_equal(again & 3, ids[1]);
    dcp_kv_manager_destroy(&m);
}

/* Ids carry a generation: a released id stays refused until its slot has been
 * reused 2^(32 - slot bits) times. */
static void test_generations(void **state)
{
    (void)state;
    /* One slot: no slot bits, all 32 bits are generation. */
    struct dcp_kv_manager *m = make(8, 4, 1, 1, 64);
    uint32_t a = new_seq(m);
    assert_int_equal(a, 0);
    assert_int_equal(dcp_kv_seq_release(m, a), DCP_OK);
    uint32_t b = new_seq(m);
    assert_int_equal(b, 1);
    assert_int_equal(dcp_kv_seq_check(m, a, "op"), DCP_EINVAL);
    assert_error_mentions("op: sequence id 0 is stale");
    assert_int_equal(dcp_kv_seq_check(m, b, "op"), DCP_OK);
    assert_int_equal(dcp_kv_seq_slot(m, b), 0);
    assert_int_equal(dcp_kv_seq_slot(m, a), UINT32_MAX);
    dcp_kv_manager_destroy(&m);

    /* The most slots: 24 slot bits leave 8 bits, 256 generations per slot. */
    m = make(8, 4, 1, DCP_KV_MAX_SEQS, 64);
    a = new_seq(m);
    assert_int_equal(a, 0);
    uint32_t id = a;
    for (uint32_t i = 1; i < 256; i++) {
        assert_int_equal(dcp_kv_seq_release(m, id), DCP_OK);
        id = new_seq(m);
        assert_int_equal(id, i << 24);
        assert_false(dcp_kv_seq_exists(m, a));
    }
    assert_int_equal(dcp_kv_seq_release(m, id), DCP_OK);
    assert_int_equal(new_seq(m), a); /* wrapped around */
    dcp_kv_manager_destroy(&m);

    const struct dcp_kv_manager_params p = {
        .num_blocks = 8, .block_size = 4, .group_size = 1, .max_seqs = DCP_KV_MAX_SEQS + 1, .max_context = 64,
    };
    assert_int_equal(dcp_kv_manager_create(&p, &m), DCP_EINVAL);
    assert_error_mentions("max_seqs");
    assert_null(m);
}

static void test_unknown_ids(void **state)
{
    (void)state;
    struct dcp_kv_manager *m = make(8, 4, 2, 4, 64);
    uint32_t live = new_seq(m), gone = new_seq(m), out = 99;
    assert_int_equal(dcp_kv_seq_extend(m, live, 9), DCP_OK);
    assert_int_equal(dcp_kv_seq_release(m, gone), DCP_OK);
    const uint32_t unknown[] = {gone, 3, 4, UINT32_MAX};
    for (size_t i = 0; i < DCP_ARRAY_SIZE(unknown); i++) {
        const uint32_t id = unknown[i];
        assert_int_equal(dcp_kv_seq_extend(m, id, 1), DCP_EINVAL);
        assert_error_mentions(id == gone ? "stale" : "no live sequence");
        assert_int_equal(dcp_kv_seq_truncate(m, id, 0), DCP_EINVAL);
        assert_int_equal(dcp_kv_seq_fork(m, id, &out), DCP_EINVAL);
        assert_int_equal(dcp_kv_seq_release(m, id), DCP_EINVAL);
        assert_false(dcp_kv_seq_exists(m, id));
        assert_int_equal(dcp_kv_seq_length(m, id), 0);
        uint32_t count = 5;
        assert_null(dcp_kv_seq_blocks(m, id, &count));
        assert_int_equal(count, 0);
    }
    assert_int_equal(out, 99);
    assert_int_equal(dcp_kv_free_blocks(m), 6);
    assert_int_equal(dcp_kv_seq_length(m, live), 9);
    assert_int_equal(dcp_kv_block_refcount(m, -1), 0);
    assert_int_equal(dcp_kv_block_refcount(m, 8), 0);
    assert_int_equal(dcp_kv_block_refcount(m, INT32_MAX), 0);
    assert_null(dcp_kv_seq_blocks(m, 3, NULL));
    dcp_kv_manager_destroy(&m);
}

static void test_max_context(void **state)
{
    (void)state;
    struct dcp_kv_manager *m = make(100, 4, 2, 2, 50);
    uint32_t s = new_seq(m);
    assert_int_equal(dcp_kv_seq_extend(m, s, 51), DCP_EINVAL);
    assert_error_mentions("max_context 50");
    assert_int_equal(dcp_kv_seq_extend(m, s, UINT32_MAX), DCP_EINVAL);
    assert_int_equal(dcp_kv_seq_length(m, s), 0);
    assert_int_equal(dcp_kv_free_blocks(m), 100);
    assert_int_equal(dcp_kv_seq_extend(m, s, 40), DCP_OK);
    assert_int_equal(dcp_kv_seq_extend(m, s, 11), DCP_EINVAL);
    assert_int_equal(dcp_kv_seq_extend(m, s, 10), DCP_OK);
    assert_int_equal(dcp_kv_seq_extend(m, s, 0), DCP_OK);
    assert_int_equal(dcp_kv_seq_length(m, s), 50);
    assert_int_equal(dcp_kv_free_blocks(m), 100 - 7);
    dcp_kv_manager_destroy(&m);

    /* A limit near UINT64_MAX cannot overflow the length check. */
    m = make(4, 1, 1, 1, UINT64_MAX);
    s = new_seq(m);
    assert_int_equal(dcp_kv_seq_extend(m, s, 4), DCP_OK);
    assert_int_equal(dcp_kv_seq_extend(m, s, UINT32_MAX), DCP_ENOSPC);
    dcp_kv_manager_destroy(&m);
}

/* With many sequence slots each table gets a small preallocated slice; longer tables
 * move to the heap, keep their contents, and are kept for the slot's next sequence. */
static void test_table_growth(void **state)
{
    (void)state;
    const uint32_t max_seqs = 1u << 20; /* leaves 16 preallocated entries per table */
    struct dcp_kv_manager *m = make(1000, 1, 1, max_seqs, 1000);
    uint32_t a = new_seq(m), b = new_seq(m), count;
    for (uint32_t len = 1; len <= 300; len++) {
        assert_int_equal(dcp_kv_seq_extend(m, a, 1), DCP_OK);
        assert_int_equal(dcp_kv_seq_extend(m, b, 1), DCP_OK);
    }
    const int32_t *ta = dcp_kv_seq_blocks(m, a, &count);
    assert_int_equal(count, 300);
    for (uint32_t i = 0; i < 300; i++)
        assert_int_equal(ta[i], (int32_t)(2 * i)); /* a and b alternate from a fresh pool */

    /* Fork of a long table into a slot whose table is still the small slice. */
    uint32_t c = UINT32_MAX;
    assert_int_equal(dcp_kv_seq_fork(m, a, &c), DCP_OK);
    const int32_t *tc = dcp_kv_seq_blocks(m, c, &count);
    ta = dcp_kv_seq_blocks(m, a, NULL);
    assert_int_equal(count, 300);
    assert_memory_equal(tc, ta, 300 * sizeof(int32_t));

    /* Release and reuse a slot with a grown table; then grow past it again. */
    assert_int_equal(dcp_kv_seq_release(m, b), DCP_OK);
    b = new_seq(m); /* b's slot again */
    assert_int_equal(dcp_kv_seq_extend(m, b, 400), DCP_OK);
    dcp_kv_seq_blocks(m, b, &count);
    assert_int_equal(count, 400);
    assert_int_equal(dcp_kv_free_blocks(m), 1000 - 300 - 400);
    dcp_kv_manager_destroy(&m);
}

/* --- randomized comparison against a reference model ------------------------ */

#define MODEL_BLOCKS 48
#define MODEL_SEQS 6
#define MODEL_SLOT_BITS 3 /* the fewest bits that number 6 slots */

/* The manager's rules written the obvious way: per-slot block lists, a refcount
 * per block, LIFO stacks of free blocks and free slots, and a generation per slot
 * that each release bumps (id = generation << MODEL_SLOT_BITS | slot). */
struct model {
    uint64_t tpb, max_context;
    uint32_t gen[MODEL_SEQS];
    bool live[MODEL_SEQS];
    uint64_t len[MODEL_SEQS];
    uint32_t count[MODEL_SEQS];
    int32_t table[MODEL_SEQS][MODEL_BLOCKS];
    uint32_t ref[MODEL_BLOCKS];
    int32_t free_stack[MODEL_BLOCKS];
    uint32_t nfree;
    uint32_t id_stack[MODEL_SEQS];
    uint32_t nids;
};

static void model_init(struct model *md, uint64_t tpb, uint64_t max_context)
{
    memset(md, 0, sizeof(*md));
    md->tpb = tpb;
    md->max_context = max_context;
    for (uint32_t i = 0; i < MODEL_BLOCKS; i++)
        md->free_stack[md->nfree++] = MODEL_BLOCKS - 1 - (int32_t)i;
    for (uint32_t i = 0; i < MODEL_SEQS; i++)
        md->id_stack[md->nids++] = MODEL_SEQS - 1 - i;
}

static uint32_t model_blocks(const struct model *md, uint64_t len) { return (uint32_t)((len + md->tpb - 1) / md->tpb); }

static void model_drop_to(struct model *md, uint32_t s, uint32_t count)
{
    while (md->count[s] > count) {
        int32_t b = md->table[s][--md->count[s]];
        if (--md->ref[b] == 0)
            md->free_stack[md->nfree++] = b;
    }
}

static uint32_t model_id(const struct model *md, uint32_t slot) { return md->gen[slot] << MODEL_SLOT_BITS | slot; }

/* The slot of id when it names a live sequence, else MODEL_SEQS. */
static uint32_t model_slot(const struct model *md, uint32_t id)
{
    const uint32_t slot = id & ((1u << MODEL_SLOT_BITS) - 1);
    return slot < MODEL_SEQS && md->live[slot] && model_id(md, slot) == id ? slot : MODEL_SEQS;
}

static bool model_has(const struct model *md, uint32_t id) { return model_slot(md, id) < MODEL_SEQS; }

static int model_create(struct model *md, uint32_t *id)
{
    if (!md->nids)
        return DCP_ENOSPC;
    const uint32_t slot = md->id_stack[--md->nids];
    md->live[slot] = true;
    md->len[slot] = 0;
    md->count[slot] = 0;
    *id = model_id(md, slot);
    return DCP_OK;
}

static int model_extend(struct model *md, uint32_t id, uint32_t n)
{
    const uint32_t s = model_slot(md, id);
    if (s == MODEL_SEQS || md->len[s] + n > md->max_context)
        return DCP_EINVAL;
    uint32_t want = model_blocks(md, md->len[s] + n);
    if (want - md->count[s] > md->nfree)
        return DCP_ENOSPC;
    while (md->count[s] < want) {
        int32_t b = md->free_stack[--md->nfree];
        md->ref[b] = 1;
        md->table[s][md->count[s]++] = b;
    }
    md->len[s] += n;
    return DCP_OK;
}

static int model_truncate(struct model *md, uint32_t id, uint64_t len)
{
    const uint32_t s = model_slot(md, id);
    if (s == MODEL_SEQS || len > md->len[s])
        return DCP_EINVAL;
    uint32_t keep = model_blocks(md, len);
    if (len % md->tpb && md->ref[md->table[s][keep - 1]] > 1)
        return DCP_EINVAL;
    model_drop_to(md, s, keep);
    md->len[s] = len;
    return DCP_OK;
}

static int model_fork(struct model *md, uint32_t src_id, uint32_t *id)
{
    const uint32_t src = model_slot(md, src_id);
    if (src == MODEL_SEQS || md->len[src] % md->tpb)
        return DCP_EINVAL;
    int st = model_create(md, id);
    if (st)
        return st;
    const uint32_t dst = model_slot(md, *id);
    md->len[dst] = md->len[src];
    md->count[dst] = md->count[src];
    memcpy(md->table[dst], md->table[src], sizeof(md->table[src]));
    for (uint32_t i = 0; i < md->count[src]; i++)
        md->ref[md->table[src][i]]++;
    return DCP_OK;
}

static int model_release(struct model *md, uint32_t id)
{
    const uint32_t s = model_slot(md, id);
    if (s == MODEL_SEQS)
        return DCP_EINVAL;
    model_drop_to(md, s, 0);
    md->live[s] = false;
    md->gen[s] = (md->gen[s] + 1) & ((1u << (32 - MODEL_SLOT_BITS)) - 1);
    md->id_stack[md->nids++] = s;
    return DCP_OK;
}

static void check_against_model(const struct dcp_kv_manager *m, const struct model *md)
{
    uint64_t table_sum = 0, ref_sum = 0;
    uint32_t live = 0;
    for (uint32_t s = 0; s < MODEL_SEQS; s++) {
        const uint32_t id = model_id(md, s);
        assert_int_equal(dcp_kv_seq_exists(m, id), md->live[s]);
        assert_int_equal(dcp_kv_seq_length(m, id), md->live[s] ? md->len[s] : 0);
        if (md->gen[s]) /* the slot's previous id is stale */
            assert_false(dcp_kv_seq_exists(m, (md->gen[s] - 1) << MODEL_SLOT_BITS | s));
        uint32_t count;
        const int32_t *t = dcp_kv_seq_blocks(m, id, &count);
        if (!md->live[s]) {
            assert_int_equal(count, 0);
            continue;
        }
        live++;
        assert_int_equal(count, md->count[s]);
        assert_int_equal(count, model_blocks(md, md->len[s]));
        if (count)
            assert_memory_equal(t, md->table[s], count * sizeof(*t));
        table_sum += count;
    }
    for (int32_t b = 0; b < MODEL_BLOCKS; b++) {
        assert_int_equal(dcp_kv_block_refcount(m, b), md->ref[b]);
        ref_sum += md->ref[b];
    }
    assert_int_equal(ref_sum, table_sum);
    assert_int_equal(dcp_kv_free_blocks(m), md->nfree);
    assert_int_equal(dcp_kv_live_seqs(m), live);
}

/* A sequence id: mostly a slot's current id (live or not), sometimes a stale one
 * (an earlier generation of a slot), sometimes anything. */
static uint32_t random_id(struct test_rng *r, const struct model *md)
{
    const uint32_t slot = (uint32_t)test_rng_range(r, 0, MODEL_SEQS - 1);
    switch (test_rng_range(r, 0, 19)) {
    case 0: return (uint32_t)test_rng_range(r, 0, UINT32_MAX);
    case 1: return (uint32_t)test_rng_range(r, 0, md->gen[slot]) << MODEL_SLOT_BITS | slot;
    default: return model_id(md, slot);
    }
}

/* A truncation length: often a block boundary (so forks become possible), sometimes too long. */
static uint64_t random_truncate_len(struct test_rng *r, uint64_t len, uint64_t tpb)
{
    switch (test_rng_range(r, 0, 3)) {
    case 0: return len / tpb * tpb;
    case 1: return len + test_rng_range(r, 1, 5);
    default: return test_rng_range(r, 0, len);
    }
}

static void run_model_check(uint32_t block_size, uint32_t group_size, uint64_t seed, int iterations)
{
    const uint64_t tpb = (uint64_t)block_size * group_size, max_context = 20 * tpb + 3;
    struct dcp_kv_manager *m = make(MODEL_BLOCKS, block_size, group_size, MODEL_SEQS, max_context);
    struct model md;
    model_init(&md, tpb, max_context);
    struct test_rng r;
    test_rng_seed(&r, seed);
    for (int it = 0; it < iterations; it++) {
        uint32_t s = random_id(&r, &md), got_id = UINT32_MAX, want_id = UINT32_MAX;
        int got, want;
        switch (test_rng_range(&r, 0, 9)) {
        case 0:
        case 1:
            want = model_create(&md, &want_id);
            got = dcp_kv_seq_create(m, &got_id);
            break;
        case 2:
        case 3:
        case 4: {
            /* Mostly whole blocks so forks stay possible; sometimes too much. */
            uint32_t n = test_rng_range(&r, 0, 1) ? (uint32_t)(tpb * test_rng_range(&r, 0, 4))
                                                  : (uint32_t)test_rng_range(&r, 0, 6 * tpb);
            want = model_extend(&md, s, n);
            got = dcp_kv_seq_extend(m, s, n);
            break;
        }
        case 5:
        case 6: {
            uint64_t len = random_truncate_len(&r, model_has(&md, s) ? md.len[model_slot(&md, s)] : 0, tpb);
            want = model_truncate(&md, s, len);
            got = dcp_kv_seq_truncate(m, s, len);
            break;
        }
        case 7:
        case 8:
            want = model_fork(&md, s, &want_id);
            got = dcp_kv_seq_fork(m, s, &got_id);
            break;
        default:
            want = model_release(&md, s);
            got = dcp_kv_seq_release(m, s);
            break;
        }
        if (got != want)
            fail_msg("iteration %d: status %d, model says %d (%s)", it, got, want, dcp_last_error());
        assert_int_equal(got_id, want_id);
        check_against_model(m, &md);
    }
    dcp_kv_manager_destroy(&m);
}

static void test_model_check(void **state)
{
    (void)state;
    const uint64_t seed = test_seed();
    static const uint32_t block_sizes[] = {1, 3, 16};
    for (size_t g = 0; g < DCP_ARRAY_SIZE(group_sizes); g++)
        for (size_t k = 0; k < DCP_ARRAY_SIZE(block_sizes); k++)
            run_model_check(block_sizes[k], group_sizes[g], seed + 131 * g + k, 20000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_bad_params),
        cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_free_and_reuse),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_fork_refcounts),
        cmocka_unit_test(test_block_arithmetic),
        cmocka_unit_test(test_max_seqs),
        cmocka_unit_test(test_unknown_ids),
        cmocka_unit_test(test_generations),
        cmocka_unit_test(test_max_context),
        cmocka_unit_test(test_table_growth),
        cmocka_unit_test(test_model_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
