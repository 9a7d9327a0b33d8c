/*
 * deployment.h: a validated, immutable description of one DCP deployment.
 *
 * A deployment says which model runs on which hardware with which parallel
 * layout, how memory is budgeted, what workload to plan for and which backend
 * runs it. It is loaded from a YAML file (docs/configuration.md lists every key)
 * or built from a filled struct dcp_config; either way every rule is checked and
 * all problems are reported into a dcp_diag at once. Once created it never changes.
 */
#ifndef DCP_DEPLOYMENT_H
#define DCP_DEPLOYMENT_H

#include <stdbool.h>

#include "dcp/common.h"
#include "dcp/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Attention layout of the model. */
enum dcp_attention_kind {
    DCP_ATTN_MLA = 0, ///< Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): one latent+RoPE vector per token.
    DCP_ATTN_GQA = 1, ///< Grouped-query attention: num_kv_heads < num_q_heads K/V heads.
    DCP_ATTN_MHA = 2, ///< Multi-head attention: one K/V head per query head.
};

/** Element types of the KV cache and of wire data. */
enum dcp_dtype {
    DCP_DTYPE_FP32 = 0,     ///< IEEE binary32.
    DCP_DTYPE_BF16 = 1,     ///< bfloat16.
    DCP_DTYPE_FP16 = 2,     ///< IEEE binary16.
    DCP_DTYPE_FP8_E4M3 = 3, ///< OCP fp8 e4m3 (finite-only, max 448) with a per-tensor scale.
};

/** Wire type of the DCP exchange (parallel.comm_dtype): a wire dtype (the values of enum
 *  dcp_dtype), or auto. */
enum dcp_wire_dtype {
    DCP_WIRE_FP32 = DCP_DTYPE_FP32, ///< fp32.
    DCP_WIRE_BF16 = DCP_DTYPE_BF16, ///< bfloat16.
    DCP_WIRE_FP16 = DCP_DTYPE_FP16, ///< binary16.
    DCP_WIRE_AUTO = 3,              ///< The engine's activation dtype (dcp_engine_params.act_dtype): the wire rounds
                                    ///< nothing the activations do not. The planner prices it as bf16, the
                                    ///< activation dtype of GPU engines (DCP_PLAN_ACT_DTYPE). The default.
};

/** The activation dtype the planner assumes for parallel.comm_dtype auto: bf16, what GPU engines run. */
#define DCP_PLAN_ACT_DTYPE DCP_DTYPE_BF16

/** Storage format of the model weights (for memory planning only). */
enum dcp_weight_dtype {
    DCP_WEIGHT_FP32 = 0,  ///< 4 bytes per parameter.
    DCP_WEIGHT_BF16 = 1,  ///< 2 bytes per parameter.
    DCP_WEIGHT_FP16 = 2,  ///< 2 bytes per parameter.
    DCP_WEIGHT_FP8 = 3,   ///< 1 byte per parameter (scales ignored).
    DCP_WEIGHT_NVFP4 = 4, ///< 4-bit values + one fp8 scale per 16: 4.5 bits per parameter.
    DCP_WEIGHT_MXFP4 = 5, ///< 4-bit values + one 8-bit scale per 32: 4.25 bits per parameter.
    DCP_WEIGHT_INT4 = 6,  ///< 4-bit integers + one bf16 scale per 128: 4.125 bits per parameter.
};

/** How partial attention results are merged across a DCP group. */
enum dcp_comm_scheme {
    DCP_COMM_AG_RS = 0, ///< AllGather LSEs, scale locally, ReduceScatter (sum) the outputs.
    DCP_COMM_A2A = 1,   ///< One all-to-all of outputs+LSEs, merged in fp32 by the receiver.
    DCP_COMM_P2P = 2,   ///< a2a's rows and merge, moved by one-sided stores into each peer's receive slots
                        ///< (allocated once at engine creation) and published by a per-exchange epoch that
                        ///< the receiver waits for (bounded): no collective call. Every rank of a DCP group
                        ///< must be in this process and reach the others' memory. Bitwise equal to a2a.
    DCP_COMM_AUTO = 3,  ///< p2p when the engine's ranks can write into each other's memory (every rank of each
                        ///< DCP group in this process, peer access), else a2a. The planner prices p2p when
                        ///< no DCP group spans nodes.
};

/** Which backend executes the ranks. */
enum dcp_backend_kind {
    DCP_BACKEND_AUTO = 0, ///< CUDA when a usable driver and device exist, else host (with a notice).
    DCP_BACKEND_CUDA = 1, ///< CUDA driver API; an error if unavailable.
    DCP_BACKEND_HOST = 2, ///< CPU threads, one per rank.
};

/** How CUDA ranks communicate. */
enum dcp_cuda_comm {
    DCP_CUDA_COMM_AUTO = 0,    ///< NCCL across GPUs when there are enough devices, else virtual ranks.
    DCP_CUDA_COMM_NCCL = 1,    ///< NCCL, one GPU per rank.
    DCP_CUDA_COMM_VIRTUAL = 2, ///< All ranks on one GPU; collectives are device copies.
};

/**
 * Operand precision of the CUDA backend's tensor-core MLA attention (bf16, fp16 or
 * fp8 e4m3 KV). The tensor-core GQA/MHA kernels always split Q and P hi + lo
 * (within 1e-4) and ignore it, as do the fp32 SIMT kernels (fp32 KV, GQA fp8 KV).
 */
enum dcp_cuda_precision {
    DCP_CUDA_PRECISION_FAST = 0,  ///< bf16/fp16 copies of Q and P in the MMA (as FlashMLA): relative L2 error
                                  ///< about 2e-3 (bf16) / 3e-4 (fp16) against exact arithmetic.
    DCP_CUDA_PRECISION_EXACT = 1, ///< Q and P split into hi + lo parts (two MMAs per product): within 1e-4.
};

/** What one layer of a model computes (docs/design.md §13, "Layer kinds"). */
enum dcp_layer_type {
    DCP_LAYER_FULL = 0,           ///< Attention over every cached token at or before the query (causal).
    DCP_LAYER_SLIDING_WINDOW = 1, ///< Attention over the last `window` tokens only (gpt-oss: 128).
    DCP_LAYER_SPARSE_TOPK = 2,    ///< DeepSeek Sparse Attention: over the `topk` tokens an indexer selects per query token.
    DCP_LAYER_NONE = 3,           ///< No KV: a linear-attention layer (Gated DeltaNet) whose fixed state the caller keeps.
};

/** One entry of a model's layer pattern (YAML: an entry of model.layers). */
struct dcp_layer_kind {
    enum dcp_layer_type type;         ///< The kind. Default full.
    uint32_t window;                  ///< sliding_window: the window W in tokens (>= 1); 0 for every other kind.
    uint32_t topk;                    ///< sparse_topk: tokens K each query token attends (>= 1); 0 otherwise.
    bool sink;                        ///< A learned sink logit per query head (gpt-oss), applied once after the DCP
                                      ///< merge; not for none layers. Default false.
    uint32_t repeat;                  ///< Consecutive layers of this kind. Default 1 (0 is read as 1).
};

/** Most entries of a layer pattern (each may repeat). */
#define DCP_MAX_LAYER_PATTERN 16

/** Where the KV of sliding-window layers lives within a DCP group. */
enum dcp_window_kv {
    DCP_WINDOW_KV_REPLICATED = 0, ///< Every rank keeps the whole window of every sequence: those layers need no
                                  ///< collective, and DCP saves nothing on them (the planner counts it once per rank).
    DCP_WINDOW_KV_SHARDED = 1,    ///< Sharded like full layers (each rank 1/dcp of the window) and merged like them.
};

/** Where a sparse_topk layer's selected positions come from. */
enum dcp_sparse_index {
    DCP_SPARSE_INDEX_CALLER = 0,  ///< Mode (a): the caller runs the indexer (its index keys replicated on every rank)
                                  ///< and passes the global positions of each query token's top-k.
    DCP_SPARSE_INDEX_SHARDED = 1, ///< Mode (b): the library keeps the index keys sharded like the KV, scores the
                                  ///< caller's index queries on each rank, and merges the group's local top-ks (one
                                  ///< more all-gather per layer).
};

/** The model. Field defaults are those applied by the YAML loader. */
struct dcp_model_config {
    const char *name;                 ///< Display name. Required.
    enum dcp_attention_kind attention; ///< mla, gqa or mha. Required.
    uint32_t num_layers;              ///< Layers of the model, every kind counted (YAML: model.layers, or its
                                      ///< count). Required, >= 1.
    uint32_t num_q_heads;             ///< Query heads (all TP ranks together). Required, >= 1.
    uint32_t num_kv_heads;            ///< K/V heads. GQA: required; MHA: = num_q_heads; MLA: 1.
    uint32_t head_dim;                ///< Per-head dim of Q/K/V (GQA/MHA). Required for GQA/MHA.
    uint32_t kv_lora_rank;            ///< MLA latent size (512 for DeepSeek-V3). Default 512.
    uint32_t rope_dim;                ///< MLA decoupled RoPE dim (64 for DeepSeek-V3). Default 64.
    uint32_t qk_nope_head_dim;        ///< MLA per-head non-RoPE dim, only for the default scale. Default 128.
    uint32_t v_head_dim;              ///< MLA per-head value dim after the up-projection W_UV (128 for DeepSeek-V3):
                                      ///< the row length DCP merges when parallel.merge_after_uv. Default 128.
    double softmax_scale;             ///< Score scale. Default 1/sqrt(head_dim) (GQA/MHA) or 1/sqrt(qk_nope_head_dim + rope_dim) (MLA).
    enum dcp_dtype kv_dtype;          ///< KV cache element type. Default bf16.
    double kv_scale;                  ///< fp8 scale: the cache stores value x (1 / kv_scale) saturated to +-448 and
                                      ///< reads stored x kv_scale. Default 1.0.
    double num_params;                ///< Total parameter count, for the weight memory share. Default 0.
    enum dcp_weight_dtype weight_dtype; ///< Weight storage format. Default bf16.
    uint32_t experts;                 ///< MoE: routed experts per MoE layer; 0 = dense model. Default 0.
    uint32_t experts_per_token;       ///< MoE: routed experts each token uses (<= experts). Default 0.
    double active_params;             ///< MoE: parameters one token uses (shared part + experts_per_token
                                      ///< experts); at most num_params; only with experts > 0. Default 0.
    uint32_t hidden_size;             ///< Model width (the activation row a TP all-reduce moves per token);
                                      ///< required by the performance model (include/dcp/perf.h) and by an
                                      ///< MoE model. Default 0 (not given).
    uint64_t context_window;          ///< Longest sequence (prompt + output) the model accepts, in tokens
                                      ///< (config.json max_position_embeddings); 0 = not given. Workload context
                                      ///< lengths may not exceed it and replay rejects longer requests. Default 0.
    struct dcp_layer_kind layer_pattern[DCP_MAX_LAYER_PATTERN]; ///< The layers' kinds from layer 0 on, the pattern
                                      ///< repeated until num_layers layers (YAML: model.layers as a list, or its
                                      ///< pattern). Default: none given, every layer full.
    uint32_t num_layer_kinds;         ///< Entries used in layer_pattern; 0 = every layer full. Default 0.
    enum dcp_window_kv window_kv;     ///< Sliding-window KV replicated or sharded over the DCP group. Default replicated.
    uint32_t index_heads;             ///< DSA indexer heads (DeepSeek-V3.2: 64). Default 64.
    uint32_t index_head_dim;          ///< DSA index key/query length (DeepSeek-V3.2: 128). Default 128.
    enum dcp_dtype index_dtype;       ///< Element type of the cached index keys (fp8_e4m3 or bf16; fp8 scaled by
                                      ///< index_scale like kv_scale). Default fp8_e4m3.
    double index_scale;               ///< fp8 index keys: stored value x (1 / index_scale), read back x index_scale.
                                      ///< Default 1.0.
    double linear_state_bytes;        ///< Per-sequence state of one KV-free (none) layer, all heads (YAML:
                                      ///< linear_state_mb, decimal MB): TP splits it by head, DCP replicates it.
                                      ///< Default 0.
};

/** The hardware one deployment runs on. */
struct dcp_hardware_config {
    const char *gpu;                  ///< GPU name (display only). Required.
    double memory_bytes;              ///< Memory per GPU in bytes (YAML: memory_gb, decimal GB). Required.
    double hbm_bandwidth;             ///< Memory bandwidth per GPU, bytes/s (YAML: hbm_gbps). Required.
    double link_bandwidth;            ///< Per-GPU interconnect bandwidth per direction, bytes/s (YAML: link_gbps). Required.
    double collective_latency;        ///< Fixed cost of one collective call inside a CUDA graph, before its
                                      ///< per-hop latency and bytes, seconds (YAML: collective_latency_us). Default 12 us.
    uint32_t gpus_per_node;           ///< GPUs per node. Default 8.
    uint32_t nodes;                   ///< Nodes. Default 1.
    double flops_bf16;                ///< Dense bf16 tensor FLOP/s per GPU (YAML: tflops_bf16); 0 = not given
                                      ///< (no performance model). Default 0.
    double flops_fp8;                 ///< Dense fp8 tensor FLOP/s per GPU (YAML: tflops_fp8); 0 = no fp8 tensor
                                      ///< cores (fp8 GEMMs run at the bf16 rate). Default 0.
    double flops_fp4;                 ///< Dense fp4 tensor FLOP/s per GPU (YAML: tflops_fp4); 0 = no fp4 tensor
                                      ///< cores (4-bit weights run at the fp8, else bf16, rate). Default 0.
    double internode_bandwidth;       ///< Network bandwidth per GPU per direction between nodes, bytes/s
                                      ///< (YAML: internode_gbps); 0 = not given. Needed when a TP or DCP group
                                      ///< spans nodes, and for P/D KV transfers. Default 0.
    double internode_latency;         ///< Latency of one network hop of a collective between nodes, seconds
                                      ///< (YAML: internode_latency_us). Default 2.7 us.
    double peer_latency;              ///< Fixed cost of one round of one-sided peer writes with its epoch
                                      ///< (parallel.comm p2p), before its bytes, seconds (YAML: peer_latency_us).
                                      ///< Default 3.7 us: a published barrier-free one-sided NVLink all-to-all
                                      ///< of <= 4 KB per peer on 8 GPUs (docs/plan.md).
};

/** The parallel layout. */
struct dcp_parallel_config {
    uint32_t tp;                      ///< Tensor-parallel size (the ranks of one model replica). Required.
    uint32_t dcp;                     ///< DCP group size (divides tp). Default 1 (TP only).
    uint32_t interleave;              ///< Interleave size I: tokens dealt to a rank in runs of I. Default 1.
    enum dcp_comm_scheme comm;        ///< Merge scheme. Default a2a.
    bool replicate_q;                 ///< true: every rank computes the queries of all heads of its DCP group
                                      ///< and passes them to dcp_rank_attention(); no Q AllGather. Default false.
    bool merge_after_uv;              ///< MLA only. true: each rank projects its partial latent outputs with W_UV
                                      ///< (dcp_engine_params.w_uv) before the merge, so the wire carries
                                      ///< v_head_dim values per head instead of kv_lora_rank, and the output is
                                      ///< [T][H_l][v_head_dim]. Default false.
    enum dcp_wire_dtype comm_dtype;   ///< Wire type of the gathered queries and the partial outputs (fp32, bf16,
                                      ///< fp16, or auto: the engine's act_dtype; the LSEs stay fp32), priced by the
                                      ///< planner (auto as bf16) and moved by the engine: a 16-bit wire rounds each
                                      ///< partial output (and a query of another act_dtype) once to it, and the
                                      ///< ReduceScatter (ag_rs) sums in it. With merge_after_uv the W_UV
                                      ///< projection stores its fp32 sums rounded once to it. Default auto.
    enum dcp_sparse_index sparse_index; ///< Where sparse_topk layers get their top-k: caller (mode a) or sharded
                                      ///< (mode b, the library's sharded index-key cache). Default caller.
};

/** How each GPU's memory is budgeted. */
struct dcp_memory_config {
    double gpu_fraction;              ///< Fraction of memory_bytes the engine may use, (0, 1]. Default 0.9.
    uint32_t block_size;              ///< KV block (page) size in tokens, a power of two. Default 64.
    double reserve_bytes;             ///< Activations, workspace, graphs (YAML: reserve_gb). Default 4 GB.
};

/**
 * Longest context one request may have, in tokens (2^32): the bound of
 * workload.context_lengths, as DCP_TRACE_MAX_TOKENS (serve.h) is of a trace's.
 */
#define DCP_MAX_CONTEXT_TOKENS ((uint64_t)1 << 32)

/** Longest list of context lengths a workload may give. */
#define DCP_MAX_CONTEXT_LENGTHS 32

/** The workload to plan for and to run. */
struct dcp_workload_config {
    uint64_t context_lengths[DCP_MAX_CONTEXT_LENGTHS]; ///< Context lengths in tokens. Required, at least one.
    uint32_t num_context_lengths;     ///< Entries used in context_lengths.
    uint32_t requests;                ///< Requests offered by `dcp-run run` (admitted while blocks fit). Default 64.
    uint32_t decode_steps;            ///< Decode steps timed by `dcp-run run`. Default 16.
    uint32_t q_len;                   ///< Query tokens per request per step (1 = plain decode; >1 speculative/MTP). Default 1.
    uint64_t seed;                    ///< Seed of the synthetic K/V and query generator. Default 1.
    const char *trace;                ///< Optional request trace file (one context length per line); NULL if none.
};

/** Settings of the CUDA backend. */
struct dcp_cuda_config {
    enum dcp_cuda_comm comm;          ///< auto, nccl or virtual. Default auto.
    int32_t device;                   ///< First device ordinal for this process. Default 0.
    double nccl_timeout_s;            ///< Seconds before a stuck collective is aborted. Default 120.
    bool use_vmm;                     ///< Reserve the KV arena with cuMemAddressReserve/cuMemMap when supported. Default true.
    enum dcp_cuda_precision precision; ///< fast or exact operands of the tensor-core attention kernels. Default fast.
};

/** Settings of the host (CPU) backend. */
struct dcp_host_config {
    uint32_t threads;                 ///< Worker threads per rank; 0 = cores / ranks (at least 1). Default 0.
    double memory_bytes;              ///< Per-rank memory emulated on the host; 0 = hardware.memory_bytes (YAML: memory_mb). Default 0.
};

/** Execution settings. */
struct dcp_runtime_config {
    enum dcp_backend_kind backend;    ///< auto, cuda or host. Default auto.
    struct dcp_cuda_config cuda;      ///< CUDA settings.
    struct dcp_host_config host;      ///< Host settings.
};

/** A whole deployment. */
struct dcp_config {
    struct dcp_model_config model;       ///< The model.
    struct dcp_hardware_config hardware; ///< The hardware.
    struct dcp_parallel_config parallel; ///< The parallel layout.
    struct dcp_memory_config memory;     ///< The memory budget.
    struct dcp_workload_config workload; ///< The workload.
    struct dcp_runtime_config runtime;   ///< The execution settings.
};

/** Opaque validated deployment. */
typedef struct dcp_deployment dcp_deployment;

/**
 * Fills cfg with the defaults the YAML loader applies; required fields are left
 * 0 / NULL. Softmax scale is left 0, meaning "derive".
 */
DCP_API void dcp_config_defaults(struct dcp_config *cfg);

/** Largest deployment file read (deployment files are a few KiB; /dev/zero is not one). */
#define DCP_DEPLOYMENT_MAX_BYTES (1u << 20)

/**
 * Loads and validates a YAML deployment file: a regular file (not a FIFO or a
 * device) of at most DCP_DEPLOYMENT_MAX_BYTES. On success *out is a new deployment.
 * On failure returns DCP_ECONFIG (bad content; every problem is in diag),
 * DCP_EIO (unreadable file; also in diag) or DCP_ENOMEM, and *out is NULL.
 * diag may be NULL if the caller does not want the messages. Warnings may be
 * added to diag on success.
 */
DCP_API int dcp_deployment_load_file(const char *path, dcp_diag *diag, dcp_deployment **out);

/**
 * Like dcp_deployment_load_file() for YAML text in memory. name is used as the
 * file name in diagnostics (NULL: "<string>"). text need not be NUL-terminated.
 */
DCP_API int dcp_deployment_load_string(const char *name, const char *text, size_t len,
                                       dcp_diag *diag, dcp_deployment **out);

/**
 * Validates a filled config (start from dcp_config_defaults()) and makes a
 * deployment from a deep copy of it. Problems carry key paths but no positions.
 */
DCP_API int dcp_deployment_from_config(const struct dcp_config *cfg, dcp_diag *diag,
                                       dcp_deployment **out);

/** Frees a deployment and sets *dep to NULL. Accepts NULL. */
DCP_API void dcp_deployment_destroy(dcp_deployment **dep);

/**
 * The validated settings, with defaults applied and the softmax scale resolved.
 * Valid as long as the deployment.
 */
DCP_API const struct dcp_config *dcp_deployment_config(const dcp_deployment *dep);

/** The file name the deployment was loaded from ("<string>" or "<config>" otherwise). */
DCP_API const char *dcp_deployment_source(const dcp_deployment *dep);

/**
 * The deployment's settings as one JSON object, nested by section, with the key
 * names, units and choice names of a deployment file (docs/configuration.md):
 * every key that applies to the model's attention kind, defaults and derived
 * values (kv_heads, softmax_scale) included; workload.trace only when set, as
 * the path the deployment resolved. JSON is YAML flow syntax, so the text loads
 * back with dcp_deployment_load_string() to the same configuration. Strings are
 * written byte for byte (a deployment loaded from YAML holds UTF-8 only).
 * On success *out is a NUL-terminated string for the caller to free().
 * Returns DCP_OK, DCP_EINVAL (NULL argument) or DCP_ENOMEM.
 */
DCP_API int dcp_deployment_to_json(const dcp_deployment *dep, char **out);

/** Canonical lower-case names used in YAML and output ("mla", "bf16", "a2a", ...). */
DCP_API const char *dcp_attention_kind_name(enum dcp_attention_kind kind);
DCP_API const char *dcp_dtype_name(enum dcp_dtype dtype);               ///< "fp32", "bf16", "fp16", "fp8_e4m3".
DCP_API const char *dcp_wire_dtype_name(enum dcp_wire_dtype wire);         ///< "fp32", "bf16", "fp16", "auto".
DCP_API const char *dcp_weight_dtype_name(enum dcp_weight_dtype dtype); ///< "fp32", "bf16", ..., "nvfp4".
DCP_API const char *dcp_comm_scheme_name(enum dcp_comm_scheme scheme);  ///< "ag_rs", "a2a", "p2p" or "auto".
DCP_API const char *dcp_backend_kind_name(enum dcp_backend_kind kind);  ///< "auto", "cuda", "host".
DCP_API const char *dcp_layer_type_name(enum dcp_layer_type type);    ///< "full", "sliding_window", "sparse_topk", "none".

/**
 * The dtype dcp_dtype_name() calls name ("fp32", "bf16", "fp16", "fp8_e4m3"; exact
 * match, as in YAML): DCP_OK with *out set, else DCP_EINVAL with dcp_last_error()
 * listing the names (NULL argument or unknown name) and *out unchanged.
 */
DCP_API int dcp_dtype_from_name(const char *name, enum dcp_dtype *out);

/**
 * The dtype a wire of type wire carries for activations of act_dtype: act_dtype for
 * DCP_WIRE_AUTO (the planner passes DCP_PLAN_ACT_DTYPE), else the wire's own.
 */
DCP_API enum dcp_dtype dcp_wire_dtype_of(enum dcp_wire_dtype wire, enum dcp_dtype act_dtype);

/** Bytes per element of a KV / wire dtype (4, 2, 2, 1). */
DCP_API uint32_t dcp_dtype_size(enum dcp_dtype dtype);

/** Bytes per parameter of a weight format (e.g. 0.5625 for nvfp4). */
DCP_API double dcp_weight_dtype_bytes(enum dcp_weight_dtype dtype);

/**
 * Attention dimensions implied by a model: qk_dim is the length of a query/key
 * vector per head (head_dim, or kv_lora_rank + rope_dim for MLA), v_dim of a value
 * vector (head_dim, or kv_lora_rank for MLA).
 */
DCP_API void dcp_model_attention_dims(const struct dcp_model_config *model,
                                      uint32_t *qk_dim, uint32_t *v_dim);

/**
 * KV cache bytes one token takes in one layer for the whole model (all KV heads):
 * MLA (kv_lora_rank + rope_dim) * dtype size, GQA/MHA 2 * num_kv_heads * head_dim * size.
 */
DCP_API uint64_t dcp_model_kv_bytes_per_token_layer(const struct dcp_model_config *model);

/**
 * The kind of layer `layer` of a model: its layer_pattern repeated from layer 0
 * (each entry `repeat` times), returned with repeat = 1; full for a model without
 * a pattern (or NULL).
 */
DCP_API struct dcp_layer_kind dcp_model_layer_kind(const struct dcp_model_config *model, uint32_t layer);

#ifdef __cplusplus
}
#endif

#endif /* DCP_DEPLOYMENT_H */
