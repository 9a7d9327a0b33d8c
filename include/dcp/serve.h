/*
 * serve.h: serving on top of the engine: request traces, a continuous-batching
 * scheduler with prefix caching and preemption.
 *
 * The scheduler decides, step by step, which sequences run and how many tokens
 * each appends; it owns their KV blocks through the KV block manager. It runs in
 * one of two ways with the same code:
 *  - on an engine (dcp_sched_create_for_engine()): it uses the engine's own block
 *    manager, so its steps can be fed to dcp_engine_begin_step() and executed;
 *  - standalone (dcp_sched_create()): a block manager of the same kind sized like
 *    an engine of the given layout would be, for simulation with the performance
 *    model (include/dcp/perf.h, dcp_perf_step_time()) instead of kernels.
 *
 * A step, from the caller's side:
 *   dcp_sched_plan_step(s, now, &step)     plans: admits, extends blocks, preempts;
 *   ... execute step.entries or price them with dcp_perf_step_time() ...
 *   dcp_sched_complete(s, end_time)   applies the result: first tokens, MTP
 *                                     acceptance and truncation, retirement.
 * docs/serving.md describes the policies.
 */
#ifndef DCP_SERVE_H
#define DCP_SERVE_H

#include <stdbool.h>

#include "dcp/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- requests and traces -------------------------------------------------- */

/** One request of a trace. */
struct dcp_serve_request {
    double arrival;            ///< Arrival time in seconds from the start of the trace.
    uint64_t prompt_tokens;    ///< Prompt (input) tokens, >= 1.
    uint32_t output_tokens;    ///< Tokens to generate, >= 1.
    uint32_t num_hashes;       ///< Entries of hashes (0: no prefix information).
    const uint64_t *hashes;    ///< [num_hashes] one id per hash_block_tokens prompt tokens; two requests
                               ///< whose hashes start alike share that prefix. Owned by the trace.
    uint32_t hash_block_tokens; ///< Prompt tokens one hash id covers; 0 = 512.
};

/** A loaded or generated trace. Release with dcp_trace_destroy(). */
struct dcp_trace {
    uint32_t count;                       ///< Requests.
    struct dcp_serve_request *requests;   ///< [count] in arrival order (non-decreasing arrival).
    uint32_t hash_block_tokens;           ///< Prompt tokens one hash id covers (512 in Mooncake traces,
                                          ///< times the length scale).
    uint64_t *hash_storage;               ///< Backing store of every request's hashes.
    char format[16];                      ///< "mooncake", "lengths" or "synthetic".
};

/** How a trace file is read. Zero-initialise, then set what you need. */
struct dcp_trace_options {
    uint32_t limit;            ///< Read at most this many requests; 0 = all.
    double length_scale;       ///< Multiply prompt lengths (and hash_block_tokens) by this; 0 = 1.
    double time_scale;         ///< Multiply arrival times by this (< 1 compresses the trace); 0 = 1.
    uint32_t output_tokens;    ///< Output tokens of requests in the lengths format; 0 = 128.
    double interval;           ///< Seconds between arrivals in the lengths format; 0 = all at time 0.
    uint64_t max_file_bytes;   ///< Refuse larger files; 0 = DCP_TRACE_MAX_FILE_BYTES.
    uint64_t max_memory_bytes; ///< Refuse (DCP_ENOMEM) a trace whose requests and hash ids take more memory
                               ///< than this; 0 = DCP_TRACE_MAX_MEMORY_BYTES.
};

/** Default size cap of a trace file (1 GiB). */
#define DCP_TRACE_MAX_FILE_BYTES ((uint64_t)1 << 30)
/** Largest prompt or output length a trace may give, in tokens (after scaling). */
#define DCP_TRACE_MAX_TOKENS ((uint64_t)1 << 32)
/** Most hash ids one request may list. */
#define DCP_TRACE_MAX_HASHES 65536u
/** Most requests a trace may hold (loaded, parsed or synthesized); more: DCP_ECONFIG (DCP_EINVAL for
 *  dcp_trace_synthesize), so that a small file of short lines cannot take memory without bound. */
#define DCP_TRACE_MAX_REQUESTS 4194304u
/** Default cap on the memory a trace's requests and hash ids take (1 GiB): 48 bytes per request plus
 *  8 per hash id. */
#define DCP_TRACE_MAX_MEMORY_BYTES ((uint64_t)1 << 30)

/**
 * Loads a trace: Mooncake JSONL (one object a line with "timestamp" in ms,
 * "input_length", "output_length" and optional "hash_ids"; other keys ignored) when
 * the first non-blank character is '{', else one prompt length per line ('#' starts
 * a comment). Only regular files up to max_file_bytes are read, and at most
 * DCP_TRACE_MAX_REQUESTS requests taking at most max_memory_bytes are kept (limit
 * stops reading first). Every bad line is an
 * error naming the file and line (missing or duplicate field, negative, fractional or
 * huge number, time going backwards, malformed JSON); nothing is skipped silently.
 * Errors: DCP_EIO (unreadable, not a regular file, too large), DCP_ECONFIG (bad
 * content, too many requests), DCP_ENOMEM (out of memory, or above max_memory_bytes);
 * detail in dcp_last_error().
 */
DCP_API int dcp_trace_load(const char *path, const struct dcp_trace_options *opts, struct dcp_trace **out);

/** Like dcp_trace_load() for text in memory; name is used in messages. */
DCP_API int dcp_trace_parse(const char *name, const char *text, size_t len, const struct dcp_trace_options *opts,
                            struct dcp_trace **out);

/** Parameters of the synthetic agentic trace (dcp_trace_synthesize()). */
struct dcp_agentic_trace_params {
    uint32_t requests;         ///< Requests. Default 2,000.
    double rate;               ///< Mean arrivals per second (Poisson). Default 4.
    double median_input;       ///< Median prompt tokens (log-normal). Default 67,000.
    double input_sigma;        ///< Log-normal sigma of the prompt length. Default 0.6.
    uint64_t max_input;        ///< Cap on prompt tokens. Default 250,000.
    double median_output;      ///< Median output tokens (log-normal). Default 400.
    double output_sigma;       ///< Log-normal sigma of the output length. Default 0.5.
    uint32_t sessions;         ///< Concurrent agent sessions: a request extends its session's
                               ///< previous prompt (the prefix reuse of agentic traffic). Default 64.
    double shared_prefix;      ///< Tokens of a system prompt every request shares. Default 8,192.
    uint64_t seed;             ///< Random seed. Default 1.
    uint64_t max_memory_bytes; ///< Refuse (DCP_ENOMEM) a trace whose requests and hash ids take more
                               ///< memory than this. Default 0 = DCP_TRACE_MAX_MEMORY_BYTES.
};

/** Fills the defaults listed above. */
DCP_API void dcp_agentic_trace_default_params(struct dcp_agentic_trace_params *p);

/**
 * Generates an agentic trace: sessions whose successive prompts grow (each turn
 * appends new tokens to the previous prompt, so its hashes start with the previous
 * turn's), a shared system prompt, log-normal lengths around the given medians and
 * Poisson arrivals. hash_block_tokens is 512. Deterministic in seed. requests at most
 * DCP_TRACE_MAX_REQUESTS (else DCP_EINVAL); DCP_ENOMEM with a message once the trace
 * would take more than max_memory_bytes.
 */
DCP_API int dcp_trace_synthesize(const struct dcp_agentic_trace_params *p, struct dcp_trace **out);

/** Frees a trace and sets *t to NULL. Accepts NULL. */
DCP_API void dcp_trace_destroy(struct dcp_trace **t);

/* --- scheduler ------------------------------------------------------------- */

typedef struct dcp_sched dcp_sched; ///< Opaque scheduler.

/** Scheduler policy. Start from dcp_sched_default_params(). */
struct dcp_sched_params {
    uint32_t max_running;      ///< Most requests running (prefilling or decoding) at once. Default 256.
    uint32_t step_tokens;      ///< Token budget of one step: decode tokens first, then prefill chunks. Default 8,192.
    double watermark;          ///< Fraction of the blocks kept available when admitting, so running
                               ///< sequences can grow. Default 0.01 (at least one block).
    bool prefix_caching;       ///< Keep and reuse hashed prompt blocks. Default true.
    uint32_t mtp_drafts;       ///< Draft tokens per decode step (MTP/speculative; q_len = 1 + drafts). Default 0.
    double mtp_acceptance;     ///< Probability that each draft is accepted, given the previous was. Default 0.7.
    uint64_t seed;             ///< Seed of the acceptance draws (one stream per request and position,
                               ///< so outputs do not depend on scheduling). Default 1.
    bool prompts_loaded;       ///< A decode instance of a P/D deployment: a request arrives with its prompt's KV
                               ///< computed by a prefill instance (and its first token). Its admission loads the
                               ///< whole prompt in one entry with loaded set, outside the token budget, and the
                               ///< step completing it counts the first token. Standalone schedulers only. Default false.
};

/** Fills the defaults listed above. */
DCP_API void dcp_sched_default_params(struct dcp_sched_params *p);

/** Geometry of a standalone scheduler's block pool (as an engine's would be). */
struct dcp_sched_pool {
    uint64_t num_blocks;       ///< Logical blocks (= KV pages per GPU), >= 1.
    uint32_t block_size;       ///< Tokens per page, >= 1.
    uint32_t group_size;       ///< DCP size (a block holds block_size * group_size tokens), >= 1.
    uint32_t max_seqs;         ///< Most live sequences, >= 1.
    uint64_t max_context;      ///< Longest sequence in tokens, >= 1.
};

/**
 * Creates a standalone scheduler with its own block manager (for simulation).
 * Errors: DCP_EINVAL (a size 0, bad params), DCP_ENOMEM.
 */
DCP_API int dcp_sched_create(const struct dcp_sched_pool *pool, const struct dcp_sched_params *p, dcp_sched **out);

/**
 * Creates a scheduler over an engine's block manager: its steps' sequence ids are
 * engine sequence ids. The engine must have no live sequence and must outlive the
 * scheduler; do not create or change the engine's sequences while it lives.
 */
DCP_API int dcp_sched_create_for_engine(dcp_engine *engine, const struct dcp_sched_params *p, dcp_sched **out);

/** Frees the scheduler (releasing its sequences) and sets *s to NULL. Accepts NULL. */
DCP_API void dcp_sched_destroy(dcp_sched **s);

/** Why a request was rejected. */
enum dcp_reject_reason {
    DCP_REJECT_NONE = 0,        ///< Not rejected.
    DCP_REJECT_POOL = 1,        ///< Its prompt and output need more blocks than the whole pool.
    DCP_REJECT_CONTEXT = 2,     ///< Longer than the pool's max_context.
};

/** What happened to a request. */
enum dcp_request_state {
    DCP_REQ_PENDING = 0,        ///< Not arrived yet (arrival > now).
    DCP_REQ_WAITING = 1,        ///< Arrived, queued for admission (also after a preemption).
    DCP_REQ_PREFILL = 2,        ///< Admitted, prompt partly computed.
    DCP_REQ_DECODE = 3,         ///< Generating.
    DCP_REQ_FINISHED = 4,       ///< All output tokens generated; blocks released.
    DCP_REQ_REJECTED = 5,       ///< Can never fit; see reject.
};

/** The record of one request. */
struct dcp_sched_request_info {
    enum dcp_request_state state;   ///< Where it is.
    enum dcp_reject_reason reject;  ///< Why it was rejected, if it was.
    double arrival;                 ///< Arrival, seconds.
    double first_token;             ///< End of the step that produced the first output token; -1 before.
    double finish;                  ///< End of the step that produced the last one; -1 before.
    uint64_t prompt_tokens;         ///< As submitted.
    uint32_t output_tokens;         ///< As submitted.
    uint32_t generated;             ///< Output tokens generated so far.
    uint64_t cached_tokens;         ///< Prompt tokens served from the prefix cache (over all admissions).
    uint64_t computed_tokens;       ///< Prompt (and recomputed) tokens prefilled (over all admissions; a
                                    ///< recompute rebuilds the prompt and all outputs but the last).
    uint32_t preemptions;           ///< Times it was evicted and requeued.
    uint32_t decode_steps;          ///< Decode steps it took part in.
    uint32_t seq_id;                ///< Current sequence id while admitted, else UINT32_MAX.
};

/** One entry of a step: a sequence and the tokens it appends. */
struct dcp_sched_entry {
    uint32_t request;          ///< Request index (order of dcp_sched_add()).
    uint32_t seq_id;           ///< Sequence id (engine sequence id for an engine scheduler).
    uint32_t q_len;            ///< Tokens appended this step (positions [start, start + q_len)).
    uint64_t start;            ///< First position appended.
    bool decode;               ///< true: decode (1 + drafts tokens, attention); false: prefill chunk.
    bool loaded;               ///< A prefill entry whose KV arrives from elsewhere (P/D: a prefill instance
                               ///< computed it; struct dcp_sched_params.prompts_loaded): nothing is computed.
};

/** A planned step. Entries: decodes first, then prefill chunks. Valid until the next call. */
struct dcp_sched_step {
    uint32_t num_entries;                 ///< Entries.
    const struct dcp_sched_entry *entries; ///< [num_entries]
    uint32_t num_decode;                  ///< Leading entries that decode.
    uint64_t decode_tokens;               ///< Tokens of decode entries.
    uint64_t prefill_tokens;              ///< Tokens of prefill entries.
    uint64_t decode_context;              ///< Sum of decode sequences' lengths after the step.
    uint64_t prefill_context;             ///< Sum over prefill entries of (start + q_len).
    double prefill_attention;             ///< Sum over prefill tokens of their context length (for FLOPs).
    uint32_t admitted;                    ///< Requests admitted by this step.
    uint32_t preempted;                   ///< Requests preempted by this step.
    uint64_t loaded_tokens;               ///< Prompt tokens of loaded entries (prompts_loaded), not in prefill_tokens.
};

/**
 * Submits a request (arrival order: arrival may not decrease). Stores its index in
 * *id (may be NULL). A request that can never fit is recorded as rejected (not an
 * error). The hashes must outlive the scheduler. DCP_EINVAL for a bad request.
 */
DCP_API int dcp_sched_add(dcp_sched *s, const struct dcp_serve_request *r, uint32_t *id);

/**
 * Plans one step at time now: requests with arrival <= now join the waiting queue;
 * every decoding sequence gets 1 + drafts tokens (preempting the youngest running
 * request, recompute, while blocks run short); prefilling sequences then new ones
 * (admitted while blocks above the watermark allow, reusing cached prefix blocks)
 * get prefill chunks within the token budget. An empty step (num_entries 0) means
 * nothing can run before the next arrival (dcp_sched_next_arrival()). Call
 * dcp_sched_complete() after each non-empty step. DCP_EINVAL when the previous
 * step was not completed.
 */
DCP_API int dcp_sched_plan_step(dcp_sched *s, double now, struct dcp_sched_step *step);

/**
 * Applies the planned step as executed, ending at time end: prefill progress and
 * prefix publication, first tokens, accepted MTP drafts (rejected ones are
 * truncated from the sequence), retirement of finished requests.
 */
DCP_API int dcp_sched_complete(dcp_sched *s, double end);

/** Arrival time of the next request not yet arrived, or INFINITY. */
DCP_API double dcp_sched_next_arrival(const dcp_sched *s);

/** Whether every submitted request is finished or rejected. */
DCP_API bool dcp_sched_done(const dcp_sched *s);

/** Totals of a scheduler. */
struct dcp_sched_stats {
    uint32_t submitted;        ///< Requests added.
    uint32_t waiting;          ///< Arrived and queued.
    uint32_t running;          ///< Admitted (prefill or decode).
    uint32_t finished;         ///< Finished.
    uint32_t rejected;         ///< Rejected (never fit).
    uint64_t preemptions;      ///< Preemptions so far.
    uint64_t steps;            ///< Completed steps.
    uint64_t prompt_tokens;    ///< Prompt tokens of admitted requests (first admissions).
    uint64_t cached_tokens;    ///< Prompt tokens served from the prefix cache (first admissions).
    uint64_t generated_tokens; ///< Output tokens generated.
    uint64_t drafted_tokens;   ///< MTP draft tokens proposed.
    uint64_t accepted_drafts;  ///< Draft tokens accepted.
    uint64_t num_blocks;       ///< Blocks of the pool.
    uint64_t used_blocks;      ///< Blocks held by sequences now.
    uint64_t idle_blocks;      ///< Cached blocks without a user now.
    uint64_t tokens_per_block; ///< Tokens one block holds.
    uint64_t evictions;        ///< Cached blocks evicted so far.
};

/** Fills the totals. */
DCP_API void dcp_sched_get_stats(const dcp_sched *s, struct dcp_sched_stats *st);

/** The record of request id, or NULL when out of range. */
DCP_API const struct dcp_sched_request_info *dcp_sched_request(const dcp_sched *s, uint32_t id);

/** Human-readable name of a reject reason ("none", "pool", "context"). */
DCP_API const char *dcp_reject_reason_name(enum dcp_reject_reason r);

#ifdef __cplusplus
}
#endif

#endif /* DCP_SERVE_H */
