/* scheduler.c: continuous batching over the KV block manager: admission under a
 * watermark, chunked prefill in a token budget, decode with MTP drafts, prefix
 * caching of hashed prompt blocks, preemption of the youngest (recompute). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/serve.h"
#include "dcp/tools.h"
#include "engine/engine_internal.h"
#include "kv/kv_manager.h"
#include "util/util.h"

#define NO_SEQ UINT32_MAX

struct req {
    struct dcp_sched_request_info info;
    const uint64_t *hashes;
    uint32_t num_hashes;
    uint32_t hash_block_tokens;
    uint64_t target;      /* tokens to compute in this admission: prompt (+ generated - 1 after a preemption) */
    uint64_t prefilled;   /* of them computed (cached prefix included) */
    uint64_t *keys;       /* prefix keys of the prompt's blocks, computed once (NULL before) */
    uint32_t num_keys;
    uint32_t published;   /* leading blocks already offered to the cache this admission */
    bool keys_done;
    bool admitted_once;
};

struct dcp_sched {
    struct dcp_sched_params p;
    struct dcp_kv_manager *kv;
    bool own_kv;
    const struct dcp_engine *engine; /* whose sequences kv holds (NULL: standalone) */
    uint64_t tpb;             /* tokens per block */
    uint64_t num_blocks;
    uint64_t max_context;
    uint32_t max_seqs;
    uint64_t watermark_blocks;

    struct req *reqs;
    size_t reqs_cap;
    uint32_t num_reqs;
    uint32_t next_arrival;    /* first request not yet moved to the waiting queue */

    uint32_t *queue;          /* ring of waiting request ids */
    size_t queue_cap;
    uint32_t q_head, q_len;

    uint32_t *running;        /* admitted request ids, oldest first */
    size_t running_cap;
    uint32_t num_running;

    struct dcp_sched_entry *entries;
    size_t entries_cap;
    uint32_t num_entries;
    bool in_step;


    struct dcp_sched_stats st;
};

void dcp_sched_default_params(struct dcp_sched_params *p)
{
    *p = (struct dcp_sched_params){
        .max_running = 256, .step_tokens = 8192, .watermark = 0.01, .prefix_caching = true,
        .mtp_drafts = 0, .mtp_acceptance = 0.7, .seed = 1,
    };
}

const char *dcp_reject_reason_name(enum dcp_reject_reason r)
{
    switch (r) {
    case DCP_REJECT_NONE: return "none";
    case DCP_REJECT_POOL: return "pool";
    case DCP_REJECT_CONTEXT: return "context";
    }
    return "?";
}

static int check_params(const struct dcp_sched_params *p)
{
    if (!p->max_running || !p->step_tokens || !(p->watermark >= 0 && p->watermark < 1) || p->mtp_drafts > 15 ||
        !(p->mtp_acceptance >= 0 && p->mtp_acceptance <= 1) || p->step_tokens <= p->mtp_drafts)
        return dcp_error(DCP_EINVAL, "scheduler: bad parameters (max_running %u, step_tokens %u, watermark %g,"
                         " mtp_drafts %u (<= 15), mtp_acceptance %g)", p->max_running, p->step_tokens,
                         p->watermark, p->mtp_drafts, p->mtp_acceptance);
    return DCP_OK;
}

static int finish_create(dcp_sched *s, const struct dcp_sched_params *p, uint32_t group)
{
    (void)group;
    s->p = *p;
    s->tpb = dcp_kv_tokens_per_block(s->kv);
    s->watermark_blocks = (uint64_t)ceil(p->watermark * (double)s->num_blocks);
    s->st.num_blocks = s->num_blocks;
    s->st.tokens_per_block = s->tpb;
    if (p->prefix_caching)
        return dcp_kv_prefix_cache_enable(s->kv);
    return DCP_OK;
}

int dcp_sched_create(const struct dcp_sched_pool *pool, const struct dcp_sched_params *p, dcp_sched **out)
{
    dcp_clear_error();
    if (!pool || !p || !out)
        return dcp_error(DCP_EINVAL, "sched_create: NULL argument");
    *out = NULL;
    int st = check_params(p);
    if (st)
        return st;
    dcp_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return dcp_error(DCP_ENOMEM, "scheduler");
    const struct dcp_kv_manager_params kp = {
        .num_blocks = pool->num_blocks, .block_size = pool->block_size, .group_size = pool->group_size,
        .max_seqs = pool->max_seqs, .max_context = pool->max_context,
    };
    st = dcp_kv_manager_create(&kp, &s->kv);
    s->own_kv = true;
    s->num_blocks = pool->num_blocks;
    s->max_context = pool->max_context;
    s->max_seqs = pool->max_seqs;
    if (!st)
        st = finish_create(s, p, pool->group_size);
    if (st) {
        dcp_sched_destroy(&s);
        return st;
    }
    *out = s;
    return DCP_OK;
}

int dcp_sched_create_for_engine(dcp_engine *engine, const struct dcp_sched_params *p, dcp_sched **out)
{
    dcp_clear_error();
    if (!engine || !p || !out)
        return dcp_error(DCP_EINVAL, "sched_create_for_engine: NULL argument");
    *out = NULL;
    int st = check_params(p);
    if (st)
        return st;
    if (p->prefix_caching && engine->ring_pages)
        return dcp_error(DCP_ENOTSUP, "sched_create_for_engine: prefix caching with sliding-window layers: a cached "
                         "prefix's blocks hold the paged layers' KV, but the windows' rings of a new sequence would "
                         "be empty (docs/design.md §13)");
    if (p->prompts_loaded)
        return dcp_error(DCP_EINVAL, "sched_create_for_engine: prompts_loaded is for simulated decode instances");
    if (dcp_kv_live_seqs(engine->kv))
        return dcp_error(DCP_EINVAL, "sched_create_for_engine: the engine has %u live sequences",
                         dcp_kv_live_seqs(engine->kv));
    dcp_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return dcp_error(DCP_ENOMEM, "scheduler");
    s->kv = engine->kv;
    s->engine = engine;
    s->num_blocks = engine->num_blocks;
    s->max_context = engine->max_context;
    s->max_seqs = engine->max_seqs;
    st = finish_create(s, p, engine->geo.dcp);
    if (st) {
        dcp_sched_destroy(&s);
        return st;
    }
    *out = s;
    return DCP_OK;
}

void dcp_sched_destroy(dcp_sched **ps)
{
    dcp_sched *s = ps ? *ps : NULL;
    if (!s)
        return;
    for (uint32_t i = 0; i < s->num_running && !s->own_kv; i++)
        dcp_kv_seq_release(s->kv, s->reqs[s->running[i]].info.seq_id);
    if (s->own_kv)
        dcp_kv_manager_destroy(&s->kv);
    for (uint32_t i = 0; i < s->num_reqs; i++)
        free(s->reqs[i].keys);
    free(s->reqs);
    free(s->queue);
    free(s->running);
    free(s->entries);
    free(s);
    *ps = NULL;
}

/* ---- requests ---------------------------------------------------------------------- */

/* Makes the waiting ring hold need ids (every request is queued at most once),
 * copying it in order into a larger buffer. */
static int grow_queue(dcp_sched *s, size_t need)
{
    if (need <= s->queue_cap)
        return DCP_OK;
    const size_t cap = DCP_MAX(need, 2 * s->queue_cap);
    uint32_t *q = malloc(cap * sizeof(*q));
    if (!q)
        return DCP_ENOMEM;
    for (uint32_t k = 0; k < s->q_len; k++)
        q[k] = s->queue[(s->q_head + k) % s->queue_cap];
    free(s->queue);
    s->queue = q;
    s->queue_cap = cap;
    s->q_head = 0;
    return DCP_OK;
}

int dcp_sched_add(dcp_sched *s, const struct dcp_serve_request *r, uint32_t *id)
{
    dcp_clear_error();
    if (!s || !r)
        return dcp_error(DCP_EINVAL, "sched_add: NULL argument");
    if (!r->prompt_tokens || !r->output_tokens || !isfinite(r->arrival) || r->arrival < 0 ||
        (r->num_hashes && !r->hashes) || r->prompt_tokens > UINT64_MAX / 2)
        return dcp_error(DCP_EINVAL, "sched_add: bad request (prompt %" PRIu64 ", output %u, arrival %g)",
                         r->prompt_tokens, r->output_tokens, r->arrival);
    if (s->num_reqs && r->arrival < s->reqs[s->num_reqs - 1].info.arrival)
        return dcp_error(DCP_EINVAL, "sched_add: arrival %g before the previous request's %g", r->arrival,
                         s->reqs[s->num_reqs - 1].info.arrival);
    if (s->num_reqs == UINT32_MAX - 1 ||
        dcp_grow_array((void **)&s->reqs, &s->reqs_cap, (size_t)s->num_reqs + 1, sizeof(*s->reqs)) ||
        grow_queue(s, s->num_reqs + 1))
        return dcp_error(DCP_ENOMEM, "sched_add: %u requests", s->num_reqs + 1);
    struct req *q = &s->reqs[s->num_reqs];
    memset(q, 0, sizeof(*q));
    q->hashes = r->hashes;
    q->num_hashes = r->num_hashes;
    q->hash_block_tokens = r->hash_block_tokens ? r->hash_block_tokens : 512;
    q->info = (struct dcp_sched_request_info){
        .state = DCP_REQ_PENDING, .arrival = r->arrival, .first_token = -1, .finish = -1,
        .prompt_tokens = r->prompt_tokens, .output_tokens = r->output_tokens, .seq_id = NO_SEQ,
    };
    /* The longest the sequence gets: prompt + output - 1 (the last token is never appended). */
    const uint64_t longest = r->prompt_tokens + r->output_tokens - 1;
    if (longest > s->max_context)
        q->info.reject = DCP_REJECT_CONTEXT;
    else if (dcp_kv_blocks_for(s->kv, longest) > s->num_blocks)
        q->info.reject = DCP_REJECT_POOL;
    if (q->info.reject) {
        q->info.state = DCP_REQ_REJECTED;
        s->st.rejected++;
    }
    if (id)
        *id = s->num_reqs;
    s->num_reqs++;
    s->st.submitted++;
    return DCP_OK;
}

/* ---- queues ------------------------------------------------------------------------ */

static uint32_t queue_cap(const dcp_sched *s) { return (uint32_t)s->queue_cap; }

static void queue_push_tail(dcp_sched *s, uint32_t r)
{
    s->queue[(s->q_head + s->q_len++) % queue_cap(s)] = r;
}

static void queue_push_head(dcp_sched *s, uint32_t r)
{
    s->q_head = (s->q_head + queue_cap(s) - 1) % queue_cap(s);
    s->queue[s->q_head] = r;
    s->q_len++;
}

static uint32_t queue_pop_head(dcp_sched *s)
{
    const uint32_t r = s->queue[s->q_head];
    s->q_head = (s->q_head + 1) % queue_cap(s);
    s->q_len--;
    return r;
}

static void running_remove_at(dcp_sched *s, uint32_t i)
{
    memmove(s->running + i, s->running + i + 1, (s->num_running - i - 1) * sizeof(*s->running));
    s->num_running--;
}

/* ---- prefix keys -------------------------------------------------------------------- */

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Keys of the blocks of r's prompt that its hashes cover completely: block i's key
 * names every hash up to the one holding the block's last token, and the block's
 * end, so equal keys mean equal prefixes. Computed once per request (freed when it
 * finishes); returns the count (keys in r->keys). */
static uint32_t prompt_keys(dcp_sched *s, struct req *r)
{
    if (r->keys_done)
        return r->num_keys;
    r->keys_done = true;
    const uint64_t hb = r->hash_block_tokens;
    const uint64_t full_hashes = DCP_MIN((uint64_t)r->num_hashes, r->info.prompt_tokens / hb);
    const uint64_t n = DCP_MIN(full_hashes * hb / s->tpb, (uint64_t)UINT32_MAX);
    if (!n || !(r->keys = malloc(n * sizeof(*r->keys))))
        return 0; /* no memory for keys: no caching for this request, not an error */
    uint64_t chain = 0x6a09e667f3bcc909ull, j = 0;
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t end = (i + 1) * s->tpb;
        while (j * hb < end)
            chain = mix(chain, r->hashes[j++]);
        r->keys[i] = mix(chain, end);
    }
    r->num_keys = (uint32_t)n;
    return r->num_keys;
}

/* ---- step planning ------------------------------------------------------------------- */

static int add_entry(dcp_sched *s, uint32_t r, uint32_t q_len, uint64_t start, bool decode)
{
    if (dcp_grow_array((void **)&s->entries, &s->entries_cap, (size_t)s->num_entries + 1, sizeof(*s->entries)))
        return dcp_error(DCP_ENOMEM, "scheduler: step entries");
    s->entries[s->num_entries++] = (struct dcp_sched_entry){
        .request = r, .seq_id = s->reqs[r].info.seq_id, .q_len = q_len, .start = start, .decode = decode,
        .loaded = !decode && s->p.prompts_loaded,
    };
    return DCP_OK;
}

/* Evicts request r (running index i): frees its sequence (its published blocks stay
 * cached), drops its entry of this step, requeues it at the head to recompute. */
static void preempt(dcp_sched *s, uint32_t i)
{
    const uint32_t r = s->running[i];
    struct req *q = &s->reqs[r];
    dcp_kv_seq_release(s->kv, q->info.seq_id);
    for (uint32_t e = 0; e < s->num_entries; e++)
        if (s->entries[e].request == r) {
            memmove(s->entries + e, s->entries + e + 1, (s->num_entries - e - 1) * sizeof(*s->entries));
            s->num_entries--;
            break;
        }
    q->info.seq_id = NO_SEQ;
    q->info.state = DCP_REQ_WAITING;
    q->info.preemptions++;
    q->prefilled = 0;
    running_remove_at(s, i);
    queue_push_head(s, r);
    s->st.preemptions++;
}

/* Extends r's sequence by n tokens, preempting the youngest running request while
 * blocks run short. false when r itself was preempted. */
static bool grow_or_preempt(dcp_sched *s, uint32_t r, uint32_t n, uint32_t *preempted)
{
    for (;;) {
        if (dcp_kv_seq_extend(s->kv, s->reqs[r].info.seq_id, n) == DCP_OK)
            return true;
        const uint32_t youngest = s->num_running - 1;
        const bool self = s->running[youngest] == r;
        preempt(s, youngest);
        ++*preempted;
        if (self)
            return false;
    }
}

static int plan_decodes(dcp_sched *s, uint64_t *budget, uint32_t *preempted)
{
    for (uint32_t i = 0; i < s->num_running; i++) {
        const uint32_t r = s->running[i];
        struct req *q = &s->reqs[r];
        if (q->info.state != DCP_REQ_DECODE)
            continue;
        const uint32_t remaining = q->info.output_tokens - q->info.generated;
        const uint32_t n = DCP_MIN(1 + s->p.mtp_drafts, remaining);
        const uint64_t start = dcp_kv_seq_length(s->kv, q->info.seq_id);
        if (!grow_or_preempt(s, r, n, preempted))
            break; /* r was the youngest: nobody after it */
        int st = add_entry(s, r, n, start, true);
        if (st)
            return st;
        *budget -= DCP_MIN(*budget, n);
    }
    return DCP_OK;
}

/* Tokens of a prefill chunk of r that fit the budget and the available blocks. */
static uint32_t chunk_that_fits(const dcp_sched *s, const struct req *q, uint64_t budget)
{
    const uint64_t len = dcp_kv_seq_length(s->kv, q->info.seq_id);
    const uint64_t room = dcp_kv_blocks_for(s->kv, len) * s->tpb - len + dcp_kv_available_blocks(s->kv) * s->tpb;
    return (uint32_t)DCP_MIN(DCP_MIN(q->target - q->prefilled, budget), DCP_MIN(room, (uint64_t)UINT32_MAX));
}

static int plan_prefills(dcp_sched *s, uint64_t *budget, uint32_t *preempted)
{
    for (uint32_t i = 0; i < s->num_running && *budget; i++) {
        const uint32_t r = s->running[i];
        struct req *q = &s->reqs[r];
        if (q->info.state != DCP_REQ_PREFILL)
            continue;
        uint32_t n = chunk_that_fits(s, q, *budget);
        while (!n) {
            /* No block left for any prompt token: make room (the youngest first). */
            const bool self = s->running[s->num_running - 1] == r;
            preempt(s, s->num_running - 1);
            ++*preempted;
            if (self)
                return DCP_OK;
            n = chunk_that_fits(s, q, *budget);
        }
        const uint64_t start = dcp_kv_seq_length(s->kv, q->info.seq_id);
        int st = dcp_kv_seq_extend(s->kv, q->info.seq_id, n);
        if (!st)
            st = add_entry(s, r, n, start, false);
        if (st)
            return st;
        *budget -= n;
    }
    return DCP_OK;
}

/* Admits waiting requests in order (FCFS: the head blocks the rest) while blocks,
 * sequences, the running limit and the budget allow. */
static int plan_admissions(dcp_sched *s, uint64_t *budget, uint32_t *admitted)
{
    while (s->q_len && (*budget || s->p.prompts_loaded) && s->num_running < s->p.max_running && dcp_kv_live_seqs(s->kv) < s->max_seqs) {
        const uint32_t r = s->queue[s->q_head];
        struct req *q = &s->reqs[r];
        /* A first admission computes the prompt; a recompute after preemption rebuilds
         * exactly the KV it had (prompt and all outputs but the last), and its next
         * decode step feeds the last output as if nothing had happened. */
        const uint64_t target = q->info.prompt_tokens + q->info.generated - (q->info.generated > 0);
        uint32_t nkeys = s->p.prefix_caching ? prompt_keys(s, q) : 0;
        /* At least one token is computed: its logits give the next output token. */
        nkeys = (uint32_t)DCP_MIN((uint64_t)nkeys, (target - 1) / s->tpb);
        uint32_t hits = 0, idle_hits = 0;
        if (nkeys)
            dcp_kv_prefix_lookup(s->kv, q->keys, nkeys, &hits, &idle_hits);
        const uint64_t need = dcp_kv_blocks_for(s->kv, target) - hits;
        const uint64_t avail = dcp_kv_available_blocks(s->kv) - idle_hits;
        const uint64_t reserve = s->num_running ? s->watermark_blocks : 0;
        if (avail < need + reserve)
            break;
        uint32_t seq;
        int st = dcp_kv_seq_create(s->kv, &seq);
        if (!st && hits)
            st = dcp_kv_seq_attach_prefix(s->kv, seq, q->keys, hits, &hits);
        if (st)
            return st;
        queue_pop_head(s);
        q->info.seq_id = seq;
        q->info.state = DCP_REQ_PREFILL;
        q->target = target;
        q->prefilled = (uint64_t)hits * s->tpb;
        q->published = hits;
        q->info.cached_tokens += q->prefilled;
        if (!q->admitted_once) {
            q->admitted_once = true;
            s->st.prompt_tokens += q->info.prompt_tokens;
            s->st.cached_tokens += q->prefilled;
        }
        s->running[s->num_running++] = r;
        ++*admitted;
        /* A loaded prompt (P/D) arrives whole and costs the step no tokens. */
        const uint64_t left = q->target - q->prefilled;
        const uint32_t n = (uint32_t)DCP_MIN(s->p.prompts_loaded ? left : DCP_MIN(left, *budget), (uint64_t)UINT32_MAX);
        if ((st = dcp_kv_seq_extend(s->kv, seq, n)) || (st = add_entry(s, r, n, q->prefilled, false)))
            return st;
        if (!s->p.prompts_loaded)
            *budget -= n;
    }
    return DCP_OK;
}

int dcp_sched_plan_step(dcp_sched *s, double now, struct dcp_sched_step *step)
{
    dcp_clear_error();
    if (!s || !step)
        return dcp_error(DCP_EINVAL, "sched_plan_step: NULL argument");
    memset(step, 0, sizeof(*step));
    int st = s->engine ? dcp_engine_check_idle(s->engine, "sched_plan_step") : DCP_OK;
    if (st)
        return st;
    if (s->in_step)
        return dcp_error(DCP_EINVAL, "sched_plan_step: the previous step was not completed");
    if (dcp_grow_array((void **)&s->running, &s->running_cap, DCP_MAX(s->num_reqs, 1u), sizeof(*s->running)))
        return dcp_error(DCP_ENOMEM, "scheduler: running list");
    while (s->next_arrival < s->num_reqs && s->reqs[s->next_arrival].info.arrival <= now) {
        struct req *q = &s->reqs[s->next_arrival];
        if (q->info.state == DCP_REQ_PENDING) {
            q->info.state = DCP_REQ_WAITING;
            queue_push_tail(s, s->next_arrival);
        }
        s->next_arrival++;
    }
    s->num_entries = 0;
    uint64_t budget = s->p.step_tokens;
    st = plan_decodes(s, &budget, &step->preempted);
    if (!st)
        st = plan_prefills(s, &budget, &step->preempted);
    if (!st)
        st = plan_admissions(s, &budget, &step->admitted);
    if (st)
        return st;
    /* Decodes first: a preemption may have removed entries, but never reordered them. */
    step->entries = s->entries;
    step->num_entries = s->num_entries;
    for (uint32_t e = 0; e < s->num_entries; e++) {
        const struct dcp_sched_entry *en = &s->entries[e];
        const uint64_t end = en->start + en->q_len;
        if (en->decode) {
            step->num_decode++;
            step->decode_tokens += en->q_len;
            step->decode_context += end;
        } else if (en->loaded) {
            step->loaded_tokens += en->q_len;
        } else {
            step->prefill_tokens += en->q_len;
            step->prefill_context += end;
            step->prefill_attention += (double)en->q_len * ((double)en->start + (double)(en->q_len + 1) / 2);
        }
    }
    s->in_step = s->num_entries > 0;
    return DCP_OK;
}

/* ---- completion --------------------------------------------------------------------- */

/* Accepted drafts of r's decode step at output position pos: leading successes of
 * independent draws, one stream per (seed, request, position). */
static uint32_t accepted_drafts(const dcp_sched *s, uint32_t r, uint32_t pos, uint32_t drafts)
{
    uint32_t a = 0;
    while (a < drafts) {
        const uint64_t h = mix(mix(s->p.seed, r), (uint64_t)pos + a);
        if ((double)(h >> 11) * 0x1p-53 >= s->p.mtp_acceptance)
            break;
        a++;
    }
    return a;
}

static void finish_request(dcp_sched *s, struct req *q, double end)
{
    dcp_kv_seq_release(s->kv, q->info.seq_id);
    q->info.seq_id = NO_SEQ;
    q->info.state = DCP_REQ_FINISHED;
    q->info.finish = end;
    s->st.finished++;
    free(q->keys);
    q->keys = NULL;
    q->num_keys = 0;
}

static int complete_entry(dcp_sched *s, const struct dcp_sched_entry *en, double end)
{
    struct req *q = &s->reqs[en->request];
    if (!en->decode) {
        q->prefilled += en->q_len;
        q->info.computed_tokens += en->q_len;
        const uint32_t n = s->p.prefix_caching ? prompt_keys(s, q) : 0;
        const uint64_t full = DCP_MIN((uint64_t)n, q->prefilled / s->tpb);
        if (full > q->published) {
            int st = dcp_kv_seq_publish(s->kv, en->seq_id, q->keys, q->published, n, NULL);
            if (st)
                return st;
            q->published = (uint32_t)full;
        }
        if (q->prefilled < q->target)
            return DCP_OK;
        q->info.state = DCP_REQ_DECODE;
        if (q->info.generated == 0) {
            /* The prompt is in: its last logits give the first output token. */
            q->info.generated = 1;
            s->st.generated_tokens++;
            q->info.first_token = end;
        }
    } else {
        const uint32_t drafts = en->q_len - 1;
        const uint32_t a = accepted_drafts(s, en->request, q->info.generated, drafts);
        /* The step's input token and the accepted drafts stay; a bonus token follows. */
        const uint32_t g = DCP_MIN(1 + a, q->info.output_tokens - q->info.generated);
        q->info.generated += g;
        q->info.decode_steps++;
        s->st.generated_tokens += g;
        s->st.drafted_tokens += drafts;
        s->st.accepted_drafts += g - 1;
        if (g < en->q_len) {
            int st = dcp_kv_seq_truncate(s->kv, en->seq_id, en->start + g);
            if (st)
                return st;
        }
    }
    if (q->info.generated >= q->info.output_tokens)
        finish_request(s, q, end);
    return DCP_OK;
}

int dcp_sched_complete(dcp_sched *s, double end)
{
    dcp_clear_error();
    if (!s)
        return dcp_error(DCP_EINVAL, "sched_complete: NULL argument");
    int st = s->engine ? dcp_engine_check_idle(s->engine, "sched_complete") : DCP_OK;
    if (st)
        return st;
    if (!s->in_step)
        return dcp_error(DCP_EINVAL, "sched_complete: no step planned");
    s->in_step = false;
    for (uint32_t e = 0; e < s->num_entries; e++) {
        st = complete_entry(s, &s->entries[e], end);
        if (st)
            return st;
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < s->num_running; i++)
        if (s->reqs[s->running[i]].info.state != DCP_REQ_FINISHED)
            s->running[kept++] = s->running[i];
    s->num_running = kept;
    s->num_entries = 0;
    s->st.steps++;
    return DCP_OK;
}

double dcp_sched_next_arrival(const dcp_sched *s)
{
    for (uint32_t i = s->next_arrival; i < s->num_reqs; i++)
        if (s->reqs[i].info.state == DCP_REQ_PENDING)
            return s->reqs[i].info.arrival;
    return INFINITY;
}

bool dcp_sched_done(const dcp_sched *s)
{
    return s->st.finished + s->st.rejected == s->num_reqs;
}

void dcp_sched_get_stats(const dcp_sched *s, struct dcp_sched_stats *st)
{
    *st = s->st;
    st->waiting = s->q_len;
    st->running = s->num_running;
    st->used_blocks = dcp_kv_used_blocks(s->kv);
    st->idle_blocks = dcp_kv_idle_blocks(s->kv);
    st->evictions = dcp_kv_evictions(s->kv);
}

const struct dcp_sched_request_info *dcp_sched_request(const dcp_sched *s, uint32_t id)
{
    return s && id < s->num_reqs ? &s->reqs[id].info : NULL;
}

/* ---- invariants ---------------------------------------------------------------------- */

static int check_request(const dcp_sched *s, uint32_t i, uint32_t *counts)
{
    const struct req *q = &s->reqs[i];
    const struct dcp_sched_request_info *in = &q->info;
    if ((unsigned)in->state > DCP_REQ_REJECTED)
        return dcp_error(DCP_EINVAL, "sched check: request %u in state %d", i, (int)in->state);
    counts[in->state]++;
    const bool admitted = in->state == DCP_REQ_PREFILL || in->state == DCP_REQ_DECODE;
    if (admitted != (in->seq_id != NO_SEQ) || (admitted && !dcp_kv_seq_exists(s->kv, in->seq_id)))
        return dcp_error(DCP_EINVAL, "sched check: request %u (state %d) has sequence %u", i, (int)in->state,
                         in->seq_id);
    if (in->generated > in->output_tokens || (in->state == DCP_REQ_FINISHED) != (in->generated == in->output_tokens &&
                                                                               in->state != DCP_REQ_REJECTED))
        return dcp_error(DCP_EINVAL, "sched check: request %u generated %u of %u in state %d", i, in->generated,
                         in->output_tokens, (int)in->state);
    if (s->in_step || !admitted)
        return DCP_OK;
    /* Between steps: a prefilling sequence holds what was computed, a decoding one
     * its prompt and all outputs but the last (appended by its next step). */
    const uint64_t len = dcp_kv_seq_length(s->kv, in->seq_id);
    const uint64_t want = in->state == DCP_REQ_PREFILL ? q->prefilled : in->prompt_tokens + in->generated - 1;
    if (len != want)
        return dcp_error(DCP_EINVAL, "sched check: request %u sequence holds %" PRIu64 " tokens, expected %" PRIu64,
                         i, len, want);
    return DCP_OK;
}

int dcp_sched_check(const dcp_sched *s)
{
    dcp_clear_error();
    if (!s)
        return dcp_error(DCP_EINVAL, "sched_check: NULL scheduler");
    int st = dcp_kv_check(s->kv);
    if (st)
        return st;
    uint32_t counts[DCP_REQ_REJECTED + 1] = {0};
    for (uint32_t i = 0; i < s->num_reqs && !st; i++)
        st = check_request(s, i, counts);
    if (st)
        return st;
    for (uint32_t k = 0; k < s->q_len; k++) {
        const uint32_t r = s->queue[(s->q_head + k) % queue_cap(s)];
        if (s->reqs[r].info.state != DCP_REQ_WAITING)
            return dcp_error(DCP_EINVAL, "sched check: queued request %u is in state %d", r,
                             (int)s->reqs[r].info.state);
    }
    for (uint32_t k = 0; k < s->num_running; k++) {
        const enum dcp_request_state rs = s->reqs[s->running[k]].info.state;
        if (rs != DCP_REQ_PREFILL && rs != DCP_REQ_DECODE)
            return dcp_error(DCP_EINVAL, "sched check: running request %u is in state %d", s->running[k], (int)rs);
    }
    if (counts[DCP_REQ_WAITING] != s->q_len ||
        counts[DCP_REQ_PREFILL] + counts[DCP_REQ_DECODE] != s->num_running ||
        counts[DCP_REQ_FINISHED] != s->st.finished || counts[DCP_REQ_REJECTED] != s->st.rejected ||
        (s->own_kv && dcp_kv_live_seqs(s->kv) != s->num_running))
        return dcp_error(DCP_EINVAL, "sched check: counts disagree (waiting %u/%u, running %u/%u, finished %u/%u,"
                         " rejected %u/%u, live sequences %u)", counts[DCP_REQ_WAITING], s->q_len,
                         counts[DCP_REQ_PREFILL] + counts[DCP_REQ_DECODE], s->num_running,
                         counts[DCP_REQ_FINISHED], s->st.finished, counts[DCP_REQ_REJECTED], s->st.rejected,
                         dcp_kv_live_seqs(s->kv));
    return DCP_OK;
}
