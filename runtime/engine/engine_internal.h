/*
 * engine_internal.h: the engine, its ranks, and the backend operations table.
 *
 * Everything above the table (scheduler, step metadata, the DCP attention flow)
 * is backend-free; a backend (host threads, CUDA) implements the table. Device
 * addresses are uint64_t throughout (host addresses for the host backend).
 */
#ifndef DCP_ENGINE_INTERNAL_H
#define DCP_ENGINE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "dcp/engine.h"
#include "dcp/geometry.h"
#include "dcp_kernels/cpu.h"
#include "engine/merge.h"
#include "kv/kv_manager.h"
#include "util/util.h"

struct dcp_engine;
struct dcp_rank;
struct dcp_backend_caps;
struct dcp_buffer_plan;
struct dcp_attn_target;

/** Profile categories (struct dcp_profile's fields, in order). */
enum dcp_prof_cat { PROF_APPEND, PROF_ATTENTION, PROF_MERGE, PROF_COMM, PROF_OTHER, PROF_COUNT };

/** Operations one backend provides. Rank functions are called from the rank's thread. */
struct dcp_backend_ops {
    const char *name; ///< "host" or "cuda".

    /** Engine-wide setup after the engine's sizes are known, before any rank_init.
     *  Reads the engine, never writes it: stores its private state in *state (even
     *  on failure, for engine_fini) and reports what it can do in *caps. */
    int (*engine_init)(const struct dcp_engine *e, void **state, struct dcp_backend_caps *caps);
    /** Engine-wide teardown after every rank_fini. Must accept a partial engine_init (or NULL). */
    void (*engine_fini)(void *state);
    /** Per-rank setup: streams, communicators. Called from the creating thread. */
    int (*rank_init)(struct dcp_rank *r);
    /** Optional: after every rank_init, e.g. to wait for communicators to connect. */
    int (*engine_start)(struct dcp_engine *e);
    /** Optional: first step of dcp_engine_destroy, before any buffer is freed, while no
     *  rank function runs: ends what still runs on the devices, with a bound (after a
     *  failure: aborts communicators first). Must accept a partial setup. */
    void (*engine_stop)(struct dcp_engine *e);
    /** Per-rank teardown. Must accept a partial rank_init. */
    void (*rank_fini)(struct dcp_rank *r);

    /** Allocates backend memory (setup time only). */
    int (*alloc)(struct dcp_rank *r, size_t bytes, uint64_t *addr);
    /** Optional: allocates the KV arena (e.g. reserved address space mapped in chunks). */
    int (*alloc_arena)(struct dcp_rank *r, size_t bytes, uint64_t *addr);
    /** Frees backend memory. Accepts 0. */
    void (*free)(struct dcp_rank *r, uint64_t addr);
    /** Host -> backend copy, ordered with the rank's queued work; the host buffer may be reused when it returns. */
    int (*upload)(struct dcp_rank *r, uint64_t dst, const void *src, size_t bytes);
    /** Backend -> host copy after all queued work. */
    int (*download)(struct dcp_rank *r, void *dst, uint64_t src, size_t bytes);
    /** Queues a copy between two backend buffers. */
    int (*copy)(struct dcp_rank *r, uint64_t dst, uint64_t src, size_t bytes);
    /** Queues one kernel launch. */
    int (*launch)(struct dcp_rank *r, enum dcpk_kernel_id kernel, const void *params);

    /** recv[N][bytes] = every group member's send[bytes], in group-rank order. */
    int (*all_gather)(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes);
    /** recv[count] = sum over members of their send[group_rank][count], elements of dtype (enum
     *  dcpk_dtype: fp32, bf16 or fp16; the engine's part_dtype), in rank order. */
    int (*reduce_scatter)(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t count, uint32_t dtype);
    /** recv[s][bytes] = member s's send[group_rank][bytes]. */
    int (*all_to_all)(struct dcp_rank *r, uint64_t send, uint64_t recv, size_t bytes);
    /** Optional (parallel.comm p2p, with caps.peer_writes): queues stores of bytes from src (this rank's
     *  memory) to dst, memory of group member peer (this rank included) that this rank reaches, then a
     *  release store (system scope) of epoch into the uint64 at flag (member peer's), ordered after every
     *  store before it. Bytes for another member count as wire bytes. */
    int (*peer_put)(struct dcp_rank *r, uint32_t peer, uint64_t dst, uint64_t src, size_t bytes, uint64_t flag,
                    uint64_t epoch);
    /** Optional (p2p): queues a wait until each of the n uint64 at flags (this rank's; member g publishes
     *  flags[g]) is at least epoch (acquire loads), before the work queued after it. Bounded by the comm
     *  timeout: DCP_ETIMEOUT naming the member whose epoch did not come (the group is aborted), never a
     *  hang; DCP_EABORTED when the step was aborted meanwhile. */
    int (*peer_wait)(struct dcp_rank *r, uint64_t flags, uint32_t n, uint64_t epoch);
    /** Optional: bytes the rank's collectives sent to other ranks so far, counted where the
     *  backend sees them move (shared-memory and device copies: what peers copied from it;
     *  NCCL: what it handed NCCL for other ranks). For tests (tests/engine/test_engine_wire.c). */
    uint64_t (*wire_bytes)(const struct dcp_rank *r);
    /** Waits for all queued work of the rank. */
    int (*synchronize)(struct dcp_rank *r);
    /** Wakes every rank blocked in a collective after a failure (they return DCP_EABORTED).
     *  Any thread, any time. */
    void (*abort)(struct dcp_engine *e);
    /** Optional: after an abort, while no rank function runs, makes the collectives usable
     *  again; an error (or no recover) leaves the engine failed for good. */
    int (*recover)(struct dcp_engine *e);

    /* Profiling (only called when the engine was created with profile = true). */
    /** Marks the start of a timed operation; *token identifies it. */
    int (*timer_begin)(struct dcp_rank *r, uint32_t *token);
    /** Marks its end and files it under cat (the time may be known only at collect). */
    int (*timer_end)(struct dcp_rank *r, uint32_t token, enum dcp_prof_cat cat);
    /** Adds every finished timed operation to r->prof_seconds (waits for them). */
    int (*timer_collect)(struct dcp_rank *r);

    /* Caller streams and graphs (optional: a backend without them refuses those calls). */
    /** Makes the rank queue its work on stream (NULL: its own), after what it queued before. */
    int (*set_stream)(struct dcp_rank *r, void *stream);
    /** Before begin_step's uploads to the rank (e.g. picks a free staging buffer). */
    int (*step_uploads)(struct dcp_rank *r);
    /** Starts capturing the rank's work into a graph (virtual ranks: collective over the group). */
    int (*capture_begin)(struct dcp_rank *r);
    /** Ends the capture; *exec: the launchable graph (may be NULL for a member whose group
     *  leader holds the group's graph). Ends the capture also when it fails. */
    int (*capture_end)(struct dcp_rank *r, void **exec);
    /** Launches exec on the rank's stream (SPMD like a step). */
    int (*graph_launch)(struct dcp_rank *r, void *exec);
    /** Frees exec (accepts NULL). */
    void (*graph_destroy)(struct dcp_rank *r, void *exec);
    /** The stream the rank queues its work on (NULL when the backend has none). */
    void *(*get_stream)(const struct dcp_rank *r);
};

/** What a backend can do, reported by engine_init. The engine derives its policy
 *  (split-KV, workspace and scratch sizes, where the KV budget comes from) from
 *  these; it never asks which backend it has. */
struct dcp_backend_caps {
    uint32_t parallelism;   ///< Attention work items the backend runs at once, one wave (CUDA: SMs x resident blocks per SM of the attention kernel; host: 2 per thread).
    uint32_t blocks_per_sm; ///< CUDA: resident attention blocks per SM (cuOccupancyMaxActiveBlocksPerMultiprocessor); 0 elsewhere.
    uint32_t head_tile;     ///< Query heads per attention work item (0 = all heads of a KV head).
    uint32_t max_splits;    ///< Upper bound on split-KV (the workspace is sized for it, within a cap).
    bool host_memory;       ///< Backend memory is host memory: the KV budget may come from
                            ///< runtime.host.memory_bytes instead of the GPU's.
    char detail[512];       ///< What it runs on, for dcp_engine_info.backend_detail.
    char libraries[512];    ///< Files it loaded and their versions, for dcp_engine_info.backend_libraries.
    uint32_t layer_types;   ///< Bit 1 << enum dcp_layer_type per layer kind it runs (its kernels have entries).
    bool sinks;             ///< It runs the sink kernel (layers with sink: true).
    bool peer_writes;       ///< peer_put/peer_wait work between the ranks of each DCP group of this process.
};

/** Per-rank buffers of the layer kinds (runtime/engine/layers.c); 0 where the engine has no such layer. */
struct dcp_layer_buffers {
    uint64_t ring_table;    ///< int32 [max_batch][ring_pages]: each sequence's ring pages (sliding windows)
    uint64_t ring_slots;    ///< int64 [max_step_tokens]: this rank's ring write slots, or -1
    uint64_t sinks;         ///< fp32 [layers][H_l]: the sink logits of this rank's heads (dcp_engine_params.sinks)
    uint64_t topk;          ///< int32 [T][max_topk]: the selected positions (sparse_index sharded)
    uint64_t topk_scores;   ///< fp32 [T][max_topk]: their scores
    uint64_t scores;        ///< fp32 [T][score_stride]: the indexer's scores of this rank's keys
    uint64_t score_lens;    ///< int32 [T]: keys scored per token
    uint64_t cand;          ///< 4-byte words [2][T][max_topk]: this rank's candidates (scores, then positions)
    uint64_t cand_recv;     ///< 4-byte words [dcp][2][T][max_topk]: the group's, gathered
};

/** One layer of the engine: its kind and where its KV lives (runtime/engine/layers.c). */
struct dcp_engine_layer {
    struct dcp_layer_kind kind; ///< From the deployment (repeat 1).
    uint64_t kv_offset;         ///< Bytes from the rank's arena to the layer's K pages (V pages follow them): the KV
                                ///< arena for full and sparse_topk layers, the ring arena for sliding_window ones.
    uint64_t index_offset;      ///< sparse_topk with sparse_index sharded: bytes from the KV arena to its index-key
                                ///< pages (0: none).
};

/** Where one layer's pages are on a rank. */
struct dcp_layer_pages {
    uint64_t k, v;              ///< K and V pages (v == k for MLA).
    uint64_t index;             ///< Index-key pages, or 0.
    bool ring;                  ///< The pages are rings: block table ring_table, ring_pages per sequence.
};
/** Per-rank backend buffers holding one step's metadata and the collective workspace. */
struct dcp_rank_buffers {
    uint64_t block_table;   ///< int32 [max_batch][max_blocks_per_seq]
    uint64_t seq_lens;      ///< int32 [max_batch]
    uint64_t q_start;       ///< int32 [max_batch + 1]
    uint64_t slots;         ///< int64 [max_step_tokens] (this rank's write slots)
    uint64_t token_keys;    ///< uint64 [max_step_tokens]
    /* The rest is sized for T = max_query_tokens. */
    struct dcp_merge_buffers merge; ///< The merge scheme's (merge.h).
    uint64_t latent;        ///< fp32 [dcp][T][H_l][v] partial latent outputs before W_UV (merge_after_uv)
    uint64_t lse_scratch;   ///< fp32 [T][H_l] when the caller passes no LSE buffer
    uint64_t ws_o;          ///< fp32 split-KV partial outputs [splits][T][Hg][v], split_rows x Hg x v in all
    uint64_t ws_lse;        ///< fp32 split-KV partial LSEs [splits][T][Hg], split_rows x Hg in all
    uint64_t split_counters;///< uint32 [max_batch][Hg]: the fused split-KV combine's counters (one per attention
                            ///< work item of a sequence, kv head and head tile), zeroed at creation; every
                            ///< launch leaves them 0 (params.h), so captured graphs replay with them
    uint64_t w_uv;          ///< fp32 [layers][Hg][v][o]: W_UV of the gathered heads (merge_after_uv)
    struct dcp_layer_buffers kinds; ///< The layer kinds' (layers.c).
};

/** Arrays begin_step uploads to each rank at most (block_table .. token_keys, ring_table, ring_slots). */
#define DCP_STEP_UPLOADS 7

/** Bytes begin_step uploads to each rank at most (block_table .. token_keys above, and the rings'). */
static inline size_t dcp_step_upload_bytes(uint32_t max_batch, uint32_t max_blocks_per_seq, uint32_t max_tokens,
                                           uint32_t ring_pages)
{
    return ((size_t)max_batch * max_blocks_per_seq + max_batch + max_batch + 1) * sizeof(int32_t) +
           (size_t)max_tokens * (sizeof(int64_t) + sizeof(uint64_t)) +
           (ring_pages ? (size_t)max_batch * ring_pages * sizeof(int32_t) + (size_t)max_tokens * sizeof(int64_t) : 0);
}

/** One rank. */
struct dcp_rank {
    struct dcp_engine *engine;
    uint32_t local_index;   ///< Index among the engine's local ranks.
    uint32_t tp_rank;       ///< TP rank.
    uint32_t group_rank;    ///< Rank within the DCP group.
    uint32_t group_id;      ///< Which DCP group (tp_rank / dcp).
    uint64_t kv_arena;      ///< The paged layers' K and V pages (and sparse layers' index keys).
    uint64_t ring_arena;    ///< The sliding-window layers' rings (0: none).
    struct dcp_rank_buffers buf;
    void *backend;          ///< Backend-private state.
    double prof_seconds[PROF_COUNT];   ///< Collected profile (engine params.profile).
    uint64_t prof_calls[PROF_COUNT];
    struct dcp_graph_shape capture_shape; ///< Shape of the step dcp_rank_capture_begin() began with.
    bool capturing;                       ///< Between dcp_rank_capture_begin() and _end().
    atomic_int in_call;                   ///< A public entry runs on the rank (DCP_RANK_ENTRY): one at a time.
    _Atomic uint64_t step_thread;         ///< Thread of the rank's last append_kv or attention ...
    _Atomic uint64_t step_thread_step;    ///< ... and the step (dcp_engine.step_id) it was in.
    uint64_t *user_bufs;                  ///< Live buffers of dcp_rank_alloc(), sorted (a double free is refused).
    size_t num_user_bufs, cap_user_bufs;
};

/** The current step, on the host. */
struct dcp_step {
    uint32_t batch;         ///< Sequences.
    uint32_t tokens;        ///< T.
    uint32_t max_blocks;    ///< Row stride of block_table this step.
    uint32_t num_splits;    ///< Split-KV factor chosen for this step.
    int32_t *block_table;   ///< [max_batch * max_blocks_per_seq]
    int32_t *seq_lens;      ///< [max_batch]
    int32_t *q_start;       ///< [max_batch + 1]
    uint64_t *token_keys;   ///< [max_step_tokens]
    int64_t *slots;         ///< [dcp][max_step_tokens] write slot per group rank
    int32_t *ring_table;    ///< [max_batch * ring_pages] each sequence's ring pages (sliding windows)
    int64_t *ring_slots;    ///< [dcp][max_step_tokens] ring write slot per group rank
    uint32_t *seen;         ///< [max_seqs] step stamp per sequence (duplicate check)
    uint32_t stamp;
    bool valid;             ///< begin_step succeeded.
};

/** The engine. */
struct dcp_engine {
    struct dcp_engine_params params;
    const struct dcp_config *cfg;
    const struct dcp_backend_ops *ops; ///< Chosen by dcp_backend_open (backend/select.h).
    void *backend;                  ///< Backend-private engine state (engine_init's *state).
    struct dcp_kv_manager *kv;

    /* shape */
    struct dcp_rank_geometry geo;   ///< Per-rank geometry under tp and this engine's dcp (model layer,
                                    ///< runtime/model): heads, dims and bytes are read from here, never copied.
    uint32_t interleave, block_size, num_layers;
    uint32_t v_row_stride;          ///< Elements between V rows of a page (v_dim; MLA: the K row, qk_dim).
    struct dcp_engine_layer *layers; ///< [num_layers]: each layer's kind and pages (layers.c).
    struct dcp_layer_kind *layer_kinds; ///< [num_layers]: the kinds, for dcp_engine_info.layers.
    uint32_t max_window;            ///< Largest sliding window (0: no window layer).
    uint32_t max_topk;              ///< Largest top-k of the sparse_topk layers (0: none).
    bool window_sharded;            ///< model.window_kv sharded.
    bool sharded_index;             ///< parallel.sparse_index sharded (mode b).
    bool has_sink_params;           ///< dcp_engine_params.sinks gives some layer's logits.
    uint32_t out_dim;               ///< Values per head on the merge's wire and in out (v_dim, or v_head_dim).
    bool replicate_q;               ///< The caller passes all gathered heads' queries (dcp > 1): no Q gather.
    bool merge_uv;                  ///< Partial latent outputs are projected by W_UV before the merge.
    uint32_t dtype;                 ///< enum dcpk_dtype of the cache.
    uint32_t act_dtype;             ///< enum dcpk_dtype of q, k, v and out (params.act_dtype).
    uint32_t part_dtype;            ///< enum dcpk_dtype of what the DCP step puts on the wire: gathered queries and
                                    ///< partial outputs (parallel.comm_dtype); the LSEs stay fp32.
    float scale, kv_scale;
    bool mla;
    enum dcp_comm_scheme comm;
    struct dcp_backend_caps caps;   ///< From the backend; max_splits capped by the engine.

    /* sizes */
    uint64_t num_blocks;
    uint32_t max_blocks_per_seq;
    uint32_t max_batch, max_seqs;
    uint32_t max_tokens;            ///< Tokens one step may append.
    uint32_t max_qtokens;           ///< Query tokens one attention call may handle.
    uint64_t max_context;
    uint64_t k_page_bytes, v_page_bytes; ///< One page of one layer.
    uint64_t kv_bytes;              ///< KV arena bytes per rank (every paged layer's pages).
    uint32_t ring_pages;            ///< Pages of one sequence's ring per sliding-window layer (0: none).
    uint64_t ring_bytes;            ///< Ring arena bytes per rank.
    uint64_t *ring_hi;              ///< [max_seqs] longest length each sequence slot's rings were written for.
    uint64_t index_page_bytes;      ///< One page of a sparse layer's index keys (sparse_index sharded; else 0).
    uint64_t score_stride;          ///< Local keys one row of indexer scores holds (max_blocks_per_seq x block_size).
    uint64_t workspace_bytes;       ///< Workspace bytes per rank.
    size_t kernel_scratch_bytes;    ///< Worst-case scratch of one kernel work item (CPU kernels).
    uint64_t split_rows;            ///< (split, query token) rows the split-KV workspace holds (0: no split-KV).
    uint32_t split_override;        ///< Tests only: split-KV factor every step uses (0: choose), within the workspace.
    atomic_uint capturing;          ///< Ranks between dcp_rank_capture_begin and _end (begin_step refuses then).

    struct dcp_step step;
    struct dcp_rank *ranks;
    uint32_t num_ranks;
    uint32_t ranks_initialised;

    uint64_t step_id;               ///< Counts successful begin_steps (a rank's step_thread_step refers to it).
    atomic_int running;             ///< dcp_engine_run is running rank functions: entries that change the
                                    ///< engine's steps, sequences or life refuse (dcp_engine_check_idle).
    atomic_int aborted;             ///< The step was aborted; recover at the next begin_step or run.
    atomic_int failed;              ///< Recovery failed: the engine refuses every step (destroy it).
    atomic_int failing;             ///< dcp_engine_fail claimed the failure message (set once).
    char failure[256];              ///< Why it failed.
    char notice[512];               ///< Why auto fell back to host ("" if it did not).
};

/* ---- the layer kinds (layers.c) ----------------------------------------------- */

/** Resolves each layer's kind (from the deployment; params.num_layers may cut or repeat the pattern). */
int dcp_engine_layers_resolve(struct dcp_engine *e);
/** Frees what dcp_engine_layers_resolve allocated. */
void dcp_engine_layers_free(struct dcp_engine *e);
/** DCP_ENOTSUP when the backend's capabilities miss a layer's kind or sink. */
int dcp_engine_layers_check_backend(const struct dcp_engine *e);
/** Ring pages and index page size; *paged_bytes_per_block: all paged layers' bytes per block; *ring_arena_bytes. */
int dcp_engine_layers_size(struct dcp_engine *e, uint64_t *paged_bytes_per_block, uint64_t *ring_arena_bytes);
/** Places every layer's pages once num_blocks and max_blocks_per_seq are final; sets kv_bytes and ring_bytes. */
void dcp_engine_layers_place(struct dcp_engine *e);
/** The per-rank buffers of the layer kinds. */
void dcp_engine_layers_plan_buffers(const struct dcp_engine *e, struct dcp_layer_buffers *b, struct dcp_buffer_plan *bp);
/** After the rank's buffers are allocated: its heads' sink logits from dcp_engine_params.sinks. */
int dcp_engine_layers_rank_init(struct dcp_rank *r);
/** begin_step: the ring tables and ring slots of the batch (host side). */
void dcp_engine_layers_build_step(struct dcp_engine *e, const struct dcp_batch *b);
/** begin_step: uploads them to a rank. */
int dcp_engine_layers_upload_step(struct dcp_rank *r);
/** dcp_seq_fork: the child's rings become copies of the parent's. */
int dcp_engine_layers_fork(struct dcp_engine *e, uint32_t src, uint32_t child);
/** dcp_seq_truncate: refuses a cut the rings cannot serve. */
int dcp_engine_layers_check_truncate(const struct dcp_engine *e, uint32_t seq, uint64_t len);
/** A new sequence's rings are empty (from = UINT32_MAX), or a fork's are its parent's. */
void dcp_engine_layers_seq_reset(struct dcp_engine *e, uint32_t seq, uint32_t from);

/** Where layer l's pages are on rank r. */
struct dcp_layer_pages dcp_layer_pages(const struct dcp_rank *r, uint32_t layer);
/** The write slots of layer l's appends on rank r (the rings' for sliding windows). */
uint64_t dcp_rank_layer_slots(const struct dcp_rank *r, uint32_t layer);
/** Argument checks of a rank function on layer l by its kind (x: the attention's extra inputs, or NULL). */
int dcp_rank_layer_check(const struct dcp_rank *r, const char *op, uint32_t layer, const struct dcp_attention_extra *x);
/** A sparse_topk layer's partial outputs into t: the top-k (given, or selected: mode b), then dcpk_sparse_attn
 *  over heads query heads (gathered_heads with the chunked q, or q_heads_per_rank). */
int dcp_rank_sparse_partials(struct dcp_rank *r, uint32_t layer, uint64_t q, uint32_t q_dtype, uint64_t q_chunk_stride,
                             uint32_t heads, const struct dcp_attn_target *t, const struct dcp_attention_extra *x);
/** The sink of layer l on the merged rows out (act_dtype) and lse, once. */
int dcp_rank_apply_sink(struct dcp_rank *r, uint32_t layer, uint64_t out, uint64_t lse,
                        const struct dcp_attention_extra *x);
/** Argument checks of a step's rank function (rank.c). */
int dcp_rank_check_step(const struct dcp_rank *r, const char *op, uint32_t layer);

/** Query heads per attention work item (the backend's head_tile, within one KV head's heads). */
static inline uint32_t dcp_engine_head_tile(const struct dcp_engine *e)
{
    const uint32_t heads_per_kv = e->geo.q_per_kv_head;
    return e->caps.head_tile && e->caps.head_tile < heads_per_kv ? e->caps.head_tile : heads_per_kv;
}

/** Queues one kernel launch of the rank, timed under cat when the engine profiles. */
int dcp_rank_launch(struct dcp_rank *r, enum dcp_prof_cat cat, enum dcpk_kernel_id kernel, const void *params);

/** The collectives of the backend table. */
enum dcp_collective { DCP_ALL_GATHER, DCP_REDUCE_SCATTER, DCP_ALL_TO_ALL };

/** Runs one collective of the rank's group, timed as PROF_COMM: n is bytes per member, or
 *  elements of the engine's part_dtype per member for DCP_REDUCE_SCATTER. */
int dcp_rank_collective(struct dcp_rank *r, enum dcp_collective kind, uint64_t send, uint64_t recv, size_t n);

/** Starts a timed operation of the rank (profile): pair with dcp_rank_timed_end. */
int dcp_rank_timed_begin(struct dcp_rank *r, uint32_t *token);
/** Ends it, counted as one call of cat when err is DCP_OK; returns err (or the timer's error). */
int dcp_rank_timed_end(struct dcp_rank *r, uint32_t token, enum dcp_prof_cat cat, int err);
/** Before waiting for the rest of the group: refuses (and aborts the step) when this thread also drives a
 *  member it would wait for (rank.c check_group_threads). */
int dcp_rank_check_group(struct dcp_rank *r);

/** The backend's wire byte count of a rank (ops->wire_bytes), 0 when it keeps none. */
uint64_t dcp_rank_wire_bytes(const struct dcp_rank *r);

/** DCP_OK, or DCP_EINVAL with a message naming op when dcp_engine_run of e is running rank functions
 *  (op was called from one of them, or from another thread meanwhile). For entries outside engine.c
 *  that change sequences (the engine scheduler). */
int dcp_engine_check_idle(const struct dcp_engine *e, const char *op);

/**
 * Claims rank r for one public entry named op: r, or NULL with DCP_EBUSY and a message
 * when another call is inside the rank (engine.h: one thread drives a rank at a time).
 * Use DCP_RANK_ENTRY, which releases the claim when the entry returns.
 */
struct dcp_rank *dcp_rank_claim(struct dcp_rank *r, const char *op);
/** Releases a claim (the cleanup of DCP_RANK_ENTRY's variable). */
void dcp_rank_release(struct dcp_rank *const *claim);
/** In a public rank entry after its NULL check: claims the rank until the entry returns,
 *  or returns fail (DCP_EBUSY) at once. DCP_RANK_ENTRY_VOID for entries without a result. */
#define DCP_RANK_ENTRY(r, op, fail)                                                                  \
    struct dcp_rank *const rank_claim_ __attribute__((cleanup(dcp_rank_release))) = dcp_rank_claim(r, op); \
    if (!rank_claim_)                                                                                \
    return fail
#define DCP_RANK_ENTRY_VOID(r, op)                                                                   \
    struct dcp_rank *const rank_claim_ __attribute__((cleanup(dcp_rank_release))) = dcp_rank_claim(r, op); \
    if (!rank_claim_)                                                                                \
    return

/** Marks the engine failed for good (engine.h, Errors) with why as the reason every later
 *  step and rank function gives with DCP_EABORTED; the first reason stays. Any thread. */
void dcp_engine_fail(struct dcp_engine *e, const char *why);

/** DCP_OK, or DCP_EABORTED with a message when the engine failed for good. */
int dcp_engine_check_usable(const struct dcp_engine *e);

#endif /* DCP_ENGINE_INTERNAL_H */
