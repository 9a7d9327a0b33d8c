/*
 * engine.h: the DCP attention/KV layer an inference engine embeds.
 *
 * A dcp_engine drives the TP ranks of one model instance that live in this process
 * (all of them for the host backend and for CUDA virtual ranks or one process with
 * several GPUs; one of them when a launcher starts a process per GPU). It owns:
 *  - the scheduler state shared by the group: sequences, their block tables and a
 *    pool of logical KV block ids (one id is backed by one page on every rank);
 *  - per rank (dcp_rank): the KV arena (all layers, allocated once), a workspace,
 *    streams and communicators. The decode path allocates nothing.
 *
 * Call order, per step:
 *   1. one thread: dcp_seq_extend() each sequence by its new tokens, then
 *      dcp_engine_begin_step() with the batch;
 *   2. every rank (its own thread, SPMD; dcp_engine_run() helps): for each layer
 *      dcp_rank_append_kv() with the new tokens' K/V, then dcp_rank_attention()
 *      with the rank's queries, which returns the rank's heads' exact output and
 *      LSE over the whole context (the DCP gather/merge happens inside).
 * Pointers given to rank functions are in the backend's memory: host memory for
 * the host backend, device addresses (CUdeviceptr cast to void *) for CUDA.
 * Layouts (T = query tokens of the step, in batch order; A = the engine's act_dtype,
 * fp32, bf16 or fp16, chosen at creation):
 *   q   A [T][q_heads_per_rank][qk_dim]     out A [T][q_heads_per_rank][out_dim]
 *   k   A [T][kv_heads_per_rank][qk_dim]    v   A [T][kv_heads_per_rank][v_dim] (NULL for MLA)
 *   lse fp32 [T][q_heads_per_rank] (natural log), whatever A is
 * The kernels convert as they load and store (no extra pass over q, k, v or out) and
 * compute in fp32; an out of bf16/fp16 is the fp32 result rounded once (to nearest
 * even), and the K/V cache holds model.kv_dtype whatever A is.
 * MLA is in absorbed form: qk_dim = kv_lora_rank + rope_dim (576), v_dim = kv_lora_rank (512),
 * k holds the latent followed by the RoPE part, and the output is in latent space
 * (out_dim = v_dim) unless the engine merges after the value up-projection (below).
 * Leaner communication (deployment keys; dcp_engine_info says what is in use):
 *  - parallel.replicate_q: q holds the queries of all gathered heads of the rank's DCP
 *    group, in the layout the attention reads: A [dcp][T][q_heads_per_rank][qk_dim],
 *    chunk c = the heads of group rank c (TP rank group * dcp + c; its first head is
 *    that rank's dcp_rank_head_offsets()). No query AllGather runs. Every rank of a
 *    group passes the same values.
 *  - parallel.merge_after_uv (MLA): each rank multiplies its partial latent outputs of
 *    every gathered head by that head's W_UV (dcp_engine_params.w_uv) before the merge;
 *    out is [T][q_heads_per_rank][v_head_dim] (out_dim = model.v_head_dim). Split-KV
 *    partials are merged in latent space first, so each row is projected once.
 *  - parallel.comm_dtype (fp32, bf16, fp16, or auto: act_dtype; the default): the wire type of the gathered queries and
 *    the partial outputs (LSEs fp32). A 16-bit wire rounds each partial output once
 *    (ag_rs: also its LSE-scaled copy and the ReduceScatter's sum) and a query of another
 *    act_dtype once; with replicate_q no query is on the wire. With merge_after_uv the
 *    latent stays fp32 and the W_UV projection (fp32 sums) stores its rows once rounded
 *    to the wire type (dcp = 1: to act_dtype, into out).
 *
 * Errors. Every function that can fail returns DCP_OK or a negative DCP_E* code and
 * leaves the reason in dcp_last_error(); every entry clears the calling thread's last
 * error first, so after a success dcp_last_error() is "". What an error means for the
 * engine:
 *  - DCP_EINVAL (an argument or the call order is wrong), DCP_ENOSPC (no free KV
 *    blocks or sequence slots), DCP_ENOTSUP and DCP_ENOMEM from dcp_engine_run() (a
 *    rank thread could not be started; then no rank function ran), DCP_EBUSY (a call
 *    on a rank that is inside another call, from another thread: one thread drives a
 *    rank at a time): that call failed and changed nothing; the engine is fine.
 *  - One thread per rank: a step's calls of one rank (append, attention) come from one
 *    thread, and a rank's collective refuses at once (DCP_EINVAL, aborting the step)
 *    when the thread calling it made this step's calls of another member of its DCP
 *    group that has not arrived: that member could only come after this call returns
 *    (one thread driving every rank waited for the comm timeout instead).
 *  - A step was aborted: a rank function failed inside dcp_engine_run() (whatever the
 *    error, an argument error included: its peers may already wait for it in a
 *    collective), a launch or collective of dcp_rank_attention() failed, a collective
 *    or a wait for the device timed out (DCP_ETIMEOUT), or dcp_engine_abort() was
 *    called. Ranks waiting in a collective return DCP_EABORTED at once (with NCCL,
 *    every local communicator is aborted; a peer may instead report DCP_ENCCL
 *    "... communicator aborted"), and the next dcp_engine_begin_step() or
 *    dcp_engine_run() restarts the collectives when it can:
 *      - host backend: always;
 *      - CUDA, virtual ranks on one GPU: once every rank's device work has finished
 *        (waited for with the bound below), so the step after an argument error runs;
 *      - CUDA with NCCL (a GPU per rank): never; the communicators were aborted.
 *  - The engine is failed when that restart is impossible: an aborted step of a CUDA
 *    engine with NCCL, device work still running after the bound (a hung kernel or
 *    collective), or a CUDA error that poisons the context (e.g. an illegal address).
 *    Then every step and rank function returns DCP_EABORTED (its message says why):
 *    destroy the engine. Sequences (dcp_seq_*) keep working so state can be inspected.
 *    A wait for the device that times out fails the engine at once (the wait itself
 *    returns DCP_ETIMEOUT; every later one DCP_EABORTED without waiting again).
 *  - Bounded waits (CUDA): every wait for the device (synchronize, download,
 *    rank_free, collectives, teardown) gives up after runtime.cuda.nccl_timeout_s with
 *    DCP_ETIMEOUT instead of blocking. dcp_engine_destroy() aborts the communicators
 *    first when a step failed, then waits for all ranks' devices with that one bound;
 *    memory that work still running after it may use (device memory, pinned buffers,
 *    the kernels' module and the context) is leaked rather than freed under it, and
 *    dcp_last_error() says so (the context stays retained by the process).
 *    dcp_rank_free() does the same for one buffer.
 */
#ifndef DCP_ENGINE_H
#define DCP_ENGINE_H

#include <stdbool.h>

#include "dcp/deployment.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_engine dcp_engine; ///< Opaque engine.
typedef struct dcp_rank dcp_rank;     ///< Opaque rank context, owned by its engine.

/** Engine settings. Start from dcp_engine_default_params(). */
struct dcp_engine_params {
    const dcp_deployment *deployment; ///< Model, layout, memory, runtime. Required; must outlive the engine.
    uint32_t dcp;              ///< DCP size: 0 = the deployment's, or any divisor of tp that also divides
                               ///< the KV replicas (tp / kv_heads for GQA; tp for MLA), e.g. 1 = the TP
                               ///< baseline (replicated KV). Else DCP_EINVAL. Default 0.
    uint32_t num_layers;       ///< Layers to hold KV for; 0 = the model's, at most the model's (else DCP_EINVAL).
                               ///< Default 0.
    double kv_budget_bytes;    ///< KV arena bytes per rank: finite, 0 ..  2^53, else DCP_EINVAL. 0 = from
                               ///< the deployment: on the host backend runtime.host.memory_bytes x
                               ///< memory.gpu_fraction when set, else hardware.memory_bytes x
                               ///< memory.gpu_fraction - weights / tp - memory.reserve_bytes (the KV budget
                               ///< `dcp-run plan` shows). Whole pages of all layers are allocated, at most
                               ///< INT32_MAX of them. Default 0.
    uint32_t max_batch;        ///< Most sequences in one step (at most max_seqs: larger values are
                               ///< lowered to it). Default 64.
    uint32_t max_query_tokens; ///< Most query tokens one dcp_rank_attention() handles (sizes the attention
                               ///< workspace). Default 0 = max_batch * workload.q_len.
    uint32_t max_step_tokens;  ///< Most tokens one step appends (T; prefill chunks may exceed
                               ///< max_query_tokens when they only append). Default 0 = max_query_tokens.
                               ///< Both are at most 2^24 (else DCP_EINVAL).
    uint32_t max_seqs;         ///< Most live sequences, at most 2^24 (else DCP_EINVAL). Default 4096.
    uint64_t max_context;      ///< Longest sequence in tokens (sizes block tables), at most INT32_MAX (else
                               ///< DCP_EINVAL). Default 0 = the longest workload context + 1024.
    uint32_t rank_begin;       ///< First TP rank this process drives. Default 0.
    uint32_t rank_count;       ///< TP ranks this process drives; 0 = all from rank_begin. Default 0.
    bool profile;              ///< Time every launch and collective per rank (dcp_rank_get_profile()). Default false.
    bool graphs;               ///< Graph-ready steps (see "Caller streams and CUDA graphs" below): every step's
                               ///< block table has the row stride max_blocks_per_seq (begin_step uploads
                               ///< max_batch x that many block ids at most) and its split-KV factor depends on
                               ///< its number of sequences and query tokens only, never on their lengths, so a
                               ///< step captured once replays for later steps of that shape whose lengths grow.
                               ///< Required by dcp_rank_capture_begin(). Default false.
    const float *const *w_uv;  ///< MLA value up-projection, required exactly when the deployment sets
                               ///< parallel.merge_after_uv (else DCP_EINVAL): num_layers host pointers (the
                               ///< engine's layers), w_uv[l] = layer l's W_UV, fp32 [num_q_heads][kv_lora_rank]
                               ///< [v_head_dim] over all heads of the model (global head order). Read only
                               ///< during dcp_engine_create(): each rank keeps a copy of its gathered heads
                               ///< (num_layers x gathered_heads x kv_lora_rank x v_head_dim floats, counted in
                               ///< workspace_bytes_per_rank). Default NULL.
    enum dcp_dtype act_dtype;  ///< Element type of q, k, v and out of every rank function ("activations"):
                               ///< DCP_DTYPE_FP32, _BF16 or _FP16; fp8 or an unknown value is DCP_EINVAL.
                               ///< LSE stays fp32. The all-gathered queries and the partial outputs the DCP
                               ///< merge exchanges move in parallel.comm_dtype (the wire's; this rank's
                               ///< queries are converted to it before the gather when it differs, and the
                               ///< merge stores out in act_dtype; with parallel.merge_after_uv and dcp = 1
                               ///< the W_UV projection does, rounding its fp32 sums once). Default fp32.
    const float *const *sinks; ///< Sink logits of the layers with sink: true (model.layers): num_layers host
                               ///< pointers, sinks[l] = fp32 [num_q_heads] over all heads of the model (global head
                               ///< order), or a NULL entry (or NULL) for a layer whose logits come with each call
                               ///< (dcp_attention_extra.sinks). Read only during dcp_engine_create(): each rank keeps
                               ///< its heads' (num_layers x q_heads_per_rank floats, in workspace_bytes_per_rank).
                               ///< Default NULL.
    bool replicate_q;          ///< The caller passes q in the layout of parallel.replicate_q, every gathered
                               ///< head: [dcp][T][H_l][qk] instead of [T][H_l][qk]. With dcp > 1 it must match
                               ///< the deployment's parallel.replicate_q (else DCP_EINVAL, naming both): a q
                               ///< buffer's size and layout are a contract of the caller's code, which a
                               ///< deployment file must not change under it. Ignored when dcp = 1. Default false.
};

/** What an engine was built with. */
struct dcp_engine_info {
    const char *backend;          ///< "host" or "cuda".
    const char *backend_detail;   ///< Human-readable detail (device name, threads, comm).
    const char *backend_notice;   ///< Why backend auto fell back to host (one line), or "".
    const char *backend_libraries; ///< The CUDA backend: the driver and NCCL files it loaded, as the
                                   ///< dynamic linker resolved them, with their versions ("CUDA driver
                                   ///< 12.4 (/usr/lib/x86_64-linux-gnu/libcuda.so.1); NCCL 2.21.5 (...)",
                                   ///< or "NCCL not loaded (...)" when no collective needs it); "" for host.
    uint32_t tp;                  ///< TP size.
    uint32_t dcp;                 ///< DCP size in use.
    uint32_t num_local_ranks;     ///< Ranks driven by this process.
    uint32_t num_layers;          ///< Layers (every kind; the KV-free ones hold nothing, see layers).
    uint32_t q_heads_per_rank;    ///< Query heads each rank owns (H_l).
    uint32_t kv_heads_per_rank;   ///< KV heads each rank stores.
    uint32_t gathered_heads;      ///< Heads each rank attends after the Q gather (dcp * H_l).
    uint32_t qk_dim;              ///< Query/key row length.
    uint32_t v_dim;               ///< Value row length (MLA: the latent, kv_lora_rank).
    uint32_t out_dim;             ///< Row length of out: v_dim, or model.v_head_dim with merge_after_uv.
    bool replicate_q;             ///< q holds all gathered heads, no Q AllGather (parallel.replicate_q, dcp > 1).
    bool merge_after_uv;          ///< Partial outputs are projected with W_UV before the merge (MLA).
    uint32_t block_size;          ///< Tokens per page.
    uint64_t num_blocks;          ///< Logical block ids (= pages per rank).
    uint64_t tokens_per_block;    ///< Context tokens one logical block holds (block_size * dcp).
    uint64_t kv_bytes_per_rank;   ///< KV bytes per rank: the arena of the paged layers plus the sliding-window rings.
    uint64_t workspace_bytes_per_rank; ///< Workspace bytes per rank.
    uint32_t max_batch;           ///< In use (defaults applied, at most max_seqs).
    uint32_t max_query_tokens;    ///< In use (defaults applied).
    uint32_t max_step_tokens;     ///< In use (defaults applied).
    uint32_t max_seqs;            ///< In use (defaults applied).
    uint64_t max_context;         ///< In use (defaults applied).
    enum dcp_dtype act_dtype;     ///< Element type of q, k, v and out (dcp_engine_params.act_dtype).
    enum dcp_dtype comm_dtype;    ///< Wire type of the gathered queries and partial outputs (parallel.comm_dtype).
    enum dcp_comm_scheme comm;    ///< Merge scheme in use: parallel.comm, with auto resolved to p2p or a2a
                                  ///< (dcp > 1; a2a's value when dcp = 1, which merges nothing).
    const struct dcp_layer_kind *layers; ///< [num_layers]: each layer's kind (model.layers, repeat 1), valid as long as
                                         ///< the engine (docs/design.md §13).
    uint32_t ring_pages;          ///< Pages of one sequence's ring per sliding_window layer (the window plus a step's
                                  ///< queries, model.window_kv replicated or sharded); 0 without such layers.
};

/** One step's batch: the sequences decoded together and their query tokens. */
struct dcp_batch {
    uint32_t num_seqs;        ///< Sequences in the step (<= max_batch).
    const uint32_t *seq_ids;  ///< [num_seqs] sequence ids, each at most once.
    const uint32_t *q_lens;   ///< [num_seqs] query tokens per sequence, >= 1: the sequence's last q_lens[i] positions.
};

/** Fills defaults (see the fields). */
DCP_API void dcp_engine_default_params(struct dcp_engine_params *params);

/**
 * Creates an engine: selects the backend (runtime.backend), creates every local
 * rank, and allocates all pools once. Errors: DCP_EINVAL, DCP_ENOMEM, DCP_EDEVMEM,
 * DCP_ENODRIVER, DCP_ENODEVICE, DCP_ENCCL, DCP_EMODULE, ... with dcp_last_error().
 * Refused (DCP_EINVAL) inside a rank function of dcp_engine_run().
 */
DCP_API int dcp_engine_create(const struct dcp_engine_params *params, dcp_engine **out);

/**
 * Frees everything and sets *engine to NULL. Accepts NULL. Never waits without a bound:
 * after a failed step it aborts the communicators first, and what hung device work may
 * still use is leaked, with the reason in dcp_last_error() (see Errors at the top).
 * Called inside a rank function of dcp_engine_run(), or while another thread's
 * dcp_engine_run() runs this engine, it does nothing (*engine is kept) and
 * dcp_last_error() says why.
 */
DCP_API void dcp_engine_destroy(dcp_engine **engine);

/** Fills info (nothing when engine or info is NULL). */
DCP_API void dcp_engine_get_info(const dcp_engine *engine, struct dcp_engine_info *info);

/** Local rank i (0 <= i < num_local_ranks), or NULL (with dcp_last_error()). */
DCP_API dcp_rank *dcp_engine_rank(dcp_engine *engine, uint32_t i);

/* --- scheduler (one thread, between steps) -------------------------------- */

/*
 * Sequence ids carry a generation: releasing a sequence retires its id, and its slot's
 * next sequence gets a different id. A stale id (one already released) is refused with
 * DCP_EINVAL ("stale") by every call instead of reaching another sequence, until the
 * slot has been reused 2^(32 - b) times, where b is the bits that number max_seqs slots
 * (at least 256 reuses; 2^20 with the default 4096). A fresh engine hands out 0, 1, 2...
 */

/** Creates an empty sequence. DCP_ENOSPC when max_seqs are live. */
DCP_API int dcp_seq_create(dcp_engine *engine, uint32_t *seq_id);

/**
 * Reserves positions [len, len + n) of a sequence, taking the blocks it needs.
 * All or nothing: on DCP_ENOSPC (no free blocks) or DCP_EINVAL (unknown or stale
 * sequence, or beyond max_context) nothing changes. Invalidates the current step:
 * call dcp_engine_begin_step() before the next rank function.
 */
DCP_API int dcp_seq_extend(dcp_engine *engine, uint32_t seq_id, uint32_t n);

/**
 * Shortens a sequence to len tokens (e.g. rejected draft tokens), freeing blocks it
 * no longer needs. DCP_EINVAL if len is longer than the sequence, or if it would cut
 * into a block another sequence shares (forks share whole blocks only). Invalidates
 * the current step, like dcp_seq_extend().
 */
DCP_API int dcp_seq_truncate(dcp_engine *engine, uint32_t seq_id, uint64_t len);

/**
 * Creates a sequence sharing src's blocks (prefix sharing; reference counted).
 * src's length must be a multiple of tokens_per_block (else DCP_EINVAL), so no
 * partly filled page is ever shared. The shared prefix is read-only: a step that
 * would write into it (a q_len reaching back into it) is refused by begin_step.
 */
DCP_API int dcp_seq_fork(dcp_engine *engine, uint32_t src, uint32_t *seq_id);

/** Frees a sequence and releases its blocks; its id becomes stale. Invalidates the current step. */
DCP_API int dcp_seq_release(dcp_engine *engine, uint32_t seq_id);

/** Current length of a sequence in tokens, or 0 (with dcp_last_error()) if the id is not live. */
DCP_API uint64_t dcp_seq_length(const dcp_engine *engine, uint32_t seq_id);

/** Free logical block ids. */
DCP_API uint64_t dcp_engine_free_blocks(const dcp_engine *engine);

/** Blocks needed by a sequence of len tokens: ceil(len / tokens_per_block). */
DCP_API uint64_t dcp_engine_blocks_for(const dcp_engine *engine, uint64_t len);

/**
 * Fixes the batch of the next step: records block tables, lengths, query offsets
 * and each rank's write slots into persistent buffers (copied to the device for
 * CUDA). Call after the extends, before any rank function of the step, while no
 * rank function runs. DCP_EINVAL (nothing changes; there is no step until a
 * begin_step succeeds) for: more than max_batch sequences, an unknown, stale or
 * repeated id, a q_len of 0 or beyond the sequence, more than max_step_tokens
 * tokens in all, or query positions inside a block shared with a fork (the step
 * writes every query token's K/V). A step with more than max_query_tokens tokens
 * is accepted as append-only: dcp_rank_attention() refuses it.
 * Restarts the collectives after an abort (see Errors at the top); DCP_EABORTED
 * when the engine failed.
 */
DCP_API int dcp_engine_begin_step(dcp_engine *engine, const struct dcp_batch *batch);

/** How the current step's local attention is launched (what begin_step chose). */
struct dcp_step_launch {
    uint32_t num_splits;     ///< Split-KV factor: each sequence's local KV is cut into this many parts, merged after.
    uint32_t grid[3];        ///< Attention grid: splits, KV heads x head tiles, sequences (CUDA blocks; host work items).
    uint64_t blocks;         ///< grid[0] * grid[1] * grid[2].
    uint32_t slots;          ///< Work items the backend runs at once (CUDA: SMs x blocks_per_sm; host: 2 per thread).
    uint32_t blocks_per_sm;  ///< CUDA: attention blocks one SM holds at once (driver occupancy); 0 on the host.
    uint32_t max_splits;     ///< Most splits any step may use (the workspace is sized once for it).
};

/**
 * Describes the attention launch of the step begin_step fixed: the split-KV
 * factor is chosen per step from its sequences' lengths and the backend's slots,
 * so that the launch fills whole waves. DCP_EINVAL without a valid step.
 */
DCP_API int dcp_engine_step_launch(const dcp_engine *engine, struct dcp_step_launch *out);

/* --- ranks (SPMD: each rank from its own thread) -------------------------- */

/** Signature of a per-rank function for dcp_engine_run(). */
typedef int (*dcp_rank_fn)(dcp_rank *rank, void *arg);

/**
 * Runs fn on one thread per local rank and waits. Returns DCP_OK or the root
 * failure ("rank N: ..."). When a rank's fn fails, the step is aborted so that
 * ranks waiting for it in a collective return DCP_EABORTED at once (NCCL: every
 * local communicator is aborted); the engine restarts its collectives at the next
 * run or begin_step when it can (see Errors at the top: after any failure of a rank,
 * an argument error included, a host or virtual-rank engine stays usable and a CUDA
 * engine with NCCL is failed). When a rank thread cannot be started, no fn runs and
 * the call fails with DCP_ENOMEM, leaving the engine as it was.
 * A rank function may not change the engine's steps, sequences or life: inside one,
 * dcp_engine_run, dcp_engine_create, dcp_engine_begin_step,
 * dcp_seq_create/extend/truncate/fork/release and an engine scheduler's
 * dcp_sched_plan_step/complete return DCP_EINVAL with a message naming the call, and
 * dcp_engine_destroy does nothing (the calls on this engine are refused alike from any
 * other thread while its dcp_engine_run runs); the engine and its step are unchanged.
 * Reading (dcp_seq_length, dcp_engine_get_info, ...) and dcp_engine_abort are fine.
 */
DCP_API int dcp_engine_run(dcp_engine *engine, dcp_rank_fn fn, void *arg);

/**
 * Aborts the current step: every rank blocked in a collective (now or later in this
 * step) returns DCP_EABORTED. For callers that drive the rank threads themselves:
 * when one rank's function fails, call this so its peers stop waiting for it (else
 * they wait for runtime.cuda.nccl_timeout_s, then fail with DCP_ETIMEOUT). CUDA with
 * NCCL: every local communicator is aborted (one in use by a rank thread, by that
 * thread as soon as it polls it). Any thread, any time; NULL is ignored. The next dcp_engine_begin_step() or
 * dcp_engine_run() restarts the collectives or reports that the engine failed.
 */
DCP_API void dcp_engine_abort(dcp_engine *engine);

/** TP rank index of a rank. */
DCP_API uint32_t dcp_rank_tp_rank(const dcp_rank *rank);

/** Index of a rank within its DCP group. */
DCP_API uint32_t dcp_rank_group_rank(const dcp_rank *rank);

/**
 * Global index of the first query head and of the first KV head this rank holds
 * (its heads are consecutive), e.g. to generate or load the matching weights.
 */
DCP_API void dcp_rank_head_offsets(const dcp_rank *rank, uint32_t *q_head0, uint32_t *kv_head0);

/** The engine a rank belongs to. */
DCP_API dcp_engine *dcp_rank_engine(dcp_rank *rank);

/**
 * Writes the step's new K/V (all T query tokens, rank's KV heads) for layer into
 * the cache; only tokens this rank owns are stored. v is NULL for MLA. fp8 caches
 * store value x (1 / kv_scale), saturated to +-448 (so values beyond +-448 x kv_scale
 * read back as +-448 x kv_scale). DCP_EINVAL without a step or for a bad layer.
 * Sliding-window layers keep each sequence's last window in a ring (every rank the
 * whole window with model.window_kv replicated, else the tokens it owns); a none
 * (KV-free) layer keeps nothing: DCP_EINVAL.
 */
DCP_API int dcp_rank_append_kv(dcp_rank *rank, uint32_t layer, const void *k, const void *v);

/**
 * Attention of the step's queries for layer: q holds this rank's heads (with
 * replicate_q: all gathered heads of its group, see Layouts at the top); out and lse
 * (lse may be NULL) receive the exact result of this rank's heads over the whole
 * context, as if one device held every token (with merge_after_uv: projected by W_UV). Collective over the DCP group. Argument errors
 * (DCP_EINVAL: no step, a bad layer, NULL q or out, a step with more than
 * max_query_tokens tokens) are found before any collective; every rank of the
 * group must call it with the same layer. A failed launch or collective aborts
 * the step (see dcp_engine_abort()).
 */
DCP_API int dcp_rank_attention(dcp_rank *rank, uint32_t layer, const void *q, void *out, void *lse);

/**
 * Per-call inputs of the layer kinds (docs/design.md §13), in the backend's memory
 * like q and out. Zero-initialise it and set what the layer needs; the others are
 * ignored. T = the step's query tokens, K = the layer's sparse_topk.
 */
struct dcp_attention_extra {
    const float *sinks;         ///< Layers with sink: true: fp32 [q_heads_per_rank] sink logits of this rank's heads
                                ///< (natural log), used instead of dcp_engine_params.sinks; NULL: those. Applied once,
                                ///< after the DCP merge: lse' = logaddexp(lse, s_h), out' = out x e^(lse - lse').
    const int32_t *topk;        ///< sparse_topk with parallel.sparse_index caller (mode a): int32 [T][K], the global
                                ///< positions each query token attends (its indexer's top-k; -1 pads a row; positions
                                ///< past the token are not its keys). The same on every rank of the group. Required.
    const void *index_q;        ///< sparse_topk with sparse_index sharded (mode b): act_dtype
                                ///< [T][index_heads][index_head_dim], the indexer's queries of the step's tokens (the
                                ///< same on every rank of the group). Required.
    const float *index_weights; ///< Mode (b): fp32 [T][index_heads], the indexer's head weights w (any scale folded in):
                                ///< a key's score is sum_h w[h] x max(0, index_q[h] . index_key). Required.
    int32_t *topk_out;          ///< Mode (b), optional: int32 [T][K] receives the global top-k the library selected
                                ///< (best first: higher score, then lower position; -1 pads), the same on every rank.
};

/**
 * dcp_rank_attention() for a layer of any kind: the layer's kind (model.layers,
 * dcp_engine_info.layers) decides the path. full: the DCP attention above.
 * sliding_window: the same over each query's last `window` tokens, merged like a full
 * layer when its KV is sharded; with model.window_kv replicated every rank attends its
 * own heads over its whole ring, with no collective. sparse_topk: each query token
 * attends only its top-k positions (extra->topk, or selected from the sharded index
 * keys with extra->index_q and index_weights: one more all-gather of K (score,
 * position) pairs per token), each rank the ones it owns, then the merge. A layer with
 * a sink gets it once, after the merge. none: DCP_EINVAL (the library keeps nothing for
 * a KV-free layer). extra may be NULL for a full or window layer without a sink.
 * Missing inputs are DCP_EINVAL before any collective; every rank of the group must
 * call it with the same layer.
 */
DCP_API int dcp_rank_attention_ex(dcp_rank *rank, uint32_t layer, const void *q, void *out, void *lse,
                                  const struct dcp_attention_extra *extra);

/**
 * Mode (b) of a sparse_topk layer (parallel.sparse_index sharded): writes the step's
 * new index keys, act_dtype [T][index_head_dim], into the layer's index-key cache,
 * sharded like the KV (only the owner of a position stores it; fp8 keys stored x
 * (1 / index_scale)). DCP_EINVAL for another layer kind or mode, without a step or
 * for NULL k.
 */
DCP_API int dcp_rank_append_index_k(dcp_rank *rank, uint32_t layer, const void *k);

/** Waits until all work queued by this rank has finished. */
DCP_API int dcp_rank_synchronize(dcp_rank *rank);

/* --- caller streams and CUDA graphs (CUDA backend) ------------------------ */

/*
 * A GPU engine runs its decode step on its own stream and captures it in a CUDA
 * graph (docs/embedding.md, "Your stream and CUDA graphs"):
 *  - dcp_rank_set_stream() gives a rank the caller's CUstream: append and attention
 *    (and begin_step's metadata copies to that rank) are queued on it, NCCL runs on
 *    the library's communication stream ordered with it by events both ways, and
 *    nothing of begin_step, append or attention waits for the device. The only host
 *    waits left in a step: begin_step when the device is two steps behind (its
 *    pinned staging is double-buffered), and for virtual ranks on one GPU the host
 *    rendezvous of their collectives (an address exchange, no device wait).
 *  - With engine params.graphs = true every per-step value the kernels read (block
 *    tables, lengths, query offsets, write slots) lives in device buffers at fixed
 *    addresses that begin_step rewrites, and the values baked into the kernels'
 *    launches (sequences, query tokens, split-KV factor, block table stride) depend
 *    on the step's shape only (struct dcp_graph_shape). A step captured once replays
 *    for every later step of the same shape, whatever the lengths (up to max_context).
 *  - Either the library captures (dcp_rank_capture_begin() .. dcp_rank_capture_end()
 *    around the rank's appends and attentions, then dcp_graph_launch() per step, which
 *    refuses a step of another shape), or the caller captures its own stream around
 *    its whole forward pass (cuStreamBeginCapture, relaxed or thread-local mode when
 *    ranks run on several threads) and calls dcp_engine_graph_shape() while capturing
 *    and dcp_engine_graph_check() before every cuGraphLaunch.
 *  A graph bakes in the addresses the caller passed (q, k, v, out, lse): replay reads
 *  and writes the same buffers, as with any CUDA graph. Virtual ranks (one GPU, one
 *  process) capture one graph per DCP group; the calls below are then SPMD over the
 *  group (every rank calls them, from its thread), like a step's rank functions.
 *  Not capturable: profile = true (timing events), dcp_rank_upload/download (refused
 *  with DCP_EINVAL while the rank's stream captures, the library's capture or the caller's).
 */

/**
 * Queues the rank's work on cu_stream (a CUstream of the rank's device, cast to
 * void *) from now on; NULL: back to the library's own stream. The new stream's
 * later work is ordered after what the rank queued on the old one (an event, no
 * wait). Call between steps, outside any capture, from the rank's thread or while no
 * rank function runs. The stream must stay valid until the rank is set back to NULL
 * or the engine is destroyed (teardown and dcp_rank_free() wait for its work).
 * Host backend: NULL is accepted (nothing changes), a stream is DCP_ENOTSUP.
 */
DCP_API int dcp_rank_set_stream(dcp_rank *rank, void *cu_stream);

/** The stream the rank queues its work on (CUstream as void *): the caller's or the
 *  library's own. NULL for the host backend. */
DCP_API void *dcp_rank_stream(const dcp_rank *rank);

/** What a captured step baked into its kernel launches. Two steps with equal shapes
 *  replay the same graph. */
struct dcp_graph_shape {
    uint32_t num_seqs;     ///< Sequences of the step (attention grid, block table rows).
    uint32_t num_tokens;   ///< Query tokens of the step (T: append, attention, collective sizes).
    uint32_t num_splits;   ///< Split-KV factor (dcp_step_launch.num_splits).
    uint32_t block_stride; ///< Row stride of the device block table (max_blocks_per_seq when params.graphs).
};

/**
 * The current step's shape, for a caller that captures its own stream: record it
 * while capturing and pass it to dcp_engine_graph_check() before each replay.
 * DCP_EINVAL without a step; DCP_ENOTSUP unless the engine was created with
 * params.graphs = true (the stride and splits would follow the lengths).
 */
DCP_API int dcp_engine_graph_shape(const dcp_engine *engine, struct dcp_graph_shape *out);

/**
 * DCP_OK when the current step (after its begin_step) has the shape a graph was
 * captured with, so replaying it gives this step's exact result; else DCP_EINVAL
 * with a message naming what differs ("this step has 3 sequences ..., the graph was
 * captured for 4 ..."); then run the step eagerly or capture a graph of its shape.
 * DCP_EINVAL without a step.
 */
DCP_API int dcp_engine_graph_check(const dcp_engine *engine, const struct dcp_graph_shape *captured);

typedef struct dcp_graph dcp_graph; ///< A captured step of one rank (virtual ranks: of its group).

/**
 * Begins capturing the rank's work (its stream, and the communication stream
 * through the collectives' events) with cuStreamBeginCapture in thread-local mode:
 * call after dcp_engine_begin_step(), then the step's dcp_rank_append_kv() and
 * dcp_rank_attention() calls (nothing runs: they are recorded), then
 * dcp_rank_capture_end(). The step itself has not run when the capture ends: launch
 * the graph for it too. Virtual ranks: SPMD over the DCP group. DCP_ENOTSUP: host
 * backend, profile = true, or an engine without params.graphs; DCP_EINVAL: no step,
 * the stream is capturing already. A driver error aborts the step.
 */
DCP_API int dcp_rank_capture_begin(dcp_rank *rank);

/**
 * Ends the rank's capture and instantiates it: *graph (free with dcp_graph_destroy())
 * replays the captured appends and attentions. Always ends the capture, also after a
 * failure inside it (then the error, e.g. DCP_ECUDA with the driver's
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and *graph = NULL). Virtual ranks: SPMD.
 */
DCP_API int dcp_rank_capture_end(dcp_rank *rank, dcp_graph **graph);

/**
 * Replays the graph for the current step on the rank's stream, after the work queued
 * there (begin_step's metadata copies included) and before what is queued later.
 * Refuses, launching nothing, a step whose shape differs from the captured one
 * (DCP_EINVAL, as dcp_engine_graph_check()), or no step. Does not wait for the device.
 * Virtual ranks: SPMD over the group. A driver error aborts the step.
 */
DCP_API int dcp_graph_launch(dcp_graph *graph);

/** The shape the graph was captured with (zeros for NULL). */
DCP_API void dcp_graph_get_shape(const dcp_graph *graph, struct dcp_graph_shape *out);

/** Frees a graph (a launch still running finishes first, in the driver) and sets *graph to NULL.
 *  Call before dcp_engine_destroy() (a graph belongs to its rank). Accepts NULL. */
DCP_API void dcp_graph_destroy(dcp_graph **graph);

/** Where a rank's time went, when the engine was created with profile = true.
 *  CUDA: device time between events around each operation; host: wall time. */
struct dcp_profile {
    double append_seconds;     ///< KV append kernels.
    double attention_seconds;  ///< Local attention kernels (split-KV included).
    double merge_seconds;      ///< Split-KV combine, LSE correction and DCP merge kernels.
    double comm_seconds;       ///< Collectives (Q gather, LSE gather, ReduceScatter, all-to-all).
    double other_seconds;      ///< Synthetic fills and copies.
    uint64_t append_calls;     ///< Operations counted in append_seconds.
    uint64_t attention_calls;  ///< ... in attention_seconds.
    uint64_t merge_calls;      ///< ... in merge_seconds.
    uint64_t comm_calls;       ///< ... in comm_seconds.
    uint64_t other_calls;      ///< ... in other_seconds.
};

/**
 * The rank's accumulated profile (waits for its queued work first). DCP_ENOTSUP
 * unless the engine was created with profile = true. Call from the rank's thread
 * or while no rank function runs.
 */
DCP_API int dcp_rank_get_profile(dcp_rank *rank, struct dcp_profile *out);

/** Clears the rank's profile. */
DCP_API void dcp_rank_reset_profile(dcp_rank *rank);

/* --- buffers (setup time, not in the hot path) ---------------------------- */

/** Allocates bytes of backend memory for this rank's inputs/outputs. */
DCP_API int dcp_rank_alloc(dcp_rank *rank, size_t bytes, void **ptr);

/** Frees memory from dcp_rank_alloc(). Accepts NULL. A pointer that is no live buffer of this
 *  rank (freed already, another rank's, not from dcp_rank_alloc) is refused: nothing is freed
 *  and dcp_last_error() says so. CUDA: waits (bounded) for the rank's work first; if that work
 *  never finishes the buffer is leaked and dcp_last_error() says so. */
DCP_API void dcp_rank_free(dcp_rank *rank, void *ptr);

/**
 * Copies host memory to backend memory, in order with the rank's work: after
 * what is queued already, before what is queued later (CUDA: on the rank's
 * stream). src may be reused as soon as the call returns. Refused (DCP_EINVAL)
 * while the rank's stream is capturing a graph.
 */
DCP_API int dcp_rank_upload(dcp_rank *rank, void *dst, const void *src, size_t bytes);

/** Copies backend memory to host memory (synchronous; waits for queued work). Refused
 *  (DCP_EINVAL) while the rank's stream is capturing a graph. */
DCP_API int dcp_rank_download(dcp_rank *rank, void *dst, const void *src, size_t bytes);

/**
 * The rank's KV arena (all layers' pages, allocated once): its address in backend
 * memory and its size. For registering memory with other libraries or measuring.
 */
DCP_API void dcp_rank_kv_arena(const dcp_rank *rank, void **ptr, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* DCP_ENGINE_H */
