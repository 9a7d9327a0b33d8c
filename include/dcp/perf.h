/*
 * perf.h: the performance model of a deployment: how long one engine step takes on
 * the deployment's GPUs, term by term. `dcp-run plan` (decode throughput per
 * concurrency and context, where DCP starts to win) and `dcp-run replay --simulate`
 * (every scheduled step of a trace) both price steps with it; docs/plan.md ("The
 * performance model") derives every term and gives the source of every default.
 *
 * One step of one model instance (tp GPUs; every GPU does the same work, so the
 * model prices one GPU):
 *
 *   linear     max(weight bytes / (hbm x weight_efficiency),
 *                  2 x active parameters x tokens / tp / (peak of the weight dtype x gemm_efficiency))
 *              with the expert weights of the experts the step's tokens touch (MoE)
 *   attention  per phase (the decode rows, the prefill chunks: two kernels, one after the other)
 *              max(KV bytes / (hbm x kv_efficiency) + attention_call x layers,
 *                  attention FLOPs / (bf16 peak x attention_efficiency)), the phases summed,
 *              with the KV each layer kind reads (the model layer's figures) and the tokens
 *              it attends (all, a window, the top-k)
 *   comm       per layer: 2 TP all-reduces of the activations, and DCP's exchanges (the plan's
 *              communication rows, in the layers that merge) for decode tokens; a prefill chunk
 *              over a cached sharded context gathers that context's KV or gathers its queries,
 *              whichever is cheaper
 *              each exchange: alpha + bytes / beta by kind and link (NVLink or network); an
 *              all-reduce over NVLink the cheaper of a ring and a one-shot all-reduce
 *   overhead   kernels_per_layer x layers x the gap between kernels (CUDA graph or eager)
 *   step       linear + attention + comm + overhead   (no overlap of communication and compute)
 *
 * Inputs: the deployment (model sizes including the MoE fields and hidden_size, hardware
 * bandwidths, latencies and tensor peaks), and struct dcp_perf_params (kernel efficiencies
 * and overheads: published defaults, or a calibration file written by `dcp-run calibrate`).
 * Nothing in it is fitted to a serving benchmark.
 */
#ifndef DCP_PERF_H
#define DCP_PERF_H

#include "dcp/geometry.h"
#include "dcp/plan.h"
#include "dcp/serve.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The link a collective runs over. */
enum dcp_perf_link {
    DCP_PERF_LINK_NVLINK = 0,  ///< Within a node: hardware.link_gbps, per-hop latency hop_latency.
    DCP_PERF_LINK_NETWORK = 1, ///< Between nodes: hardware.internode_gbps and internode_latency_us.
};

/** Number of collective kinds priced (enum dcp_plan_comm_kind, include/dcp/plan.h). */
#define DCP_PERF_COLL_KINDS 5

/** A measured collective: time = alpha + bytes / beta for `ranks` ranks over `link`. */
struct dcp_perf_collective_fit {
    enum dcp_plan_comm_kind kind; ///< Which collective.
    uint32_t ranks;              ///< Ranks it was measured with (it applies to that count only).
    enum dcp_perf_link link;     ///< Link it ran over.
    double alpha;                ///< Seconds per call.
    double beta;                 ///< Bytes per second (bytes one rank sends).
};

/** Most collective fits a struct dcp_perf_params holds. */
#define DCP_PERF_MAX_FITS 24

/** Which inputs of struct dcp_perf_params came from a calibration (bits of calibrated). */
enum dcp_perf_calibrated {
    DCP_PERF_CAL_COLLECTIVES = 1u << 0, ///< collective_fits (the rest of the kinds keep the model).
    DCP_PERF_CAL_KV = 1u << 1,          ///< kv_efficiency and attention_call.
    DCP_PERF_CAL_LAUNCH = 1u << 2,      ///< kernel_gap_eager.
    DCP_PERF_CAL_GRAPH = 1u << 3,       ///< kernel_gap_graph.
};

/**
 * Kernel efficiencies and overheads: what a deployment file does not say. Start from
 * dcp_perf_default_params(); docs/plan.md gives the source of every default.
 */
struct dcp_perf_params {
    double weight_efficiency;    ///< Fraction of HBM bandwidth reached streaming weights. Default 0.9.
    double kv_efficiency;        ///< Fraction of HBM bandwidth decode attention reaches on long contexts.
                                 ///< Default 0.9.
    double attention_call;       ///< Fixed seconds of one attention kernel call per layer (split-KV combine,
                                 ///< pipeline fill): what makes short per-rank contexts less efficient.
                                 ///< Default 2e-6.
    double gemm_efficiency;      ///< Fraction of the tensor peak large GEMMs reach. Default 0.6.
    double attention_efficiency; ///< Fraction of the bf16 peak compute-bound attention reaches. Default 0.6.
    double link_efficiency;      ///< Fraction of link bandwidth a collective's bytes move at. Default 0.8.
    double hop_latency;          ///< Seconds per ring step of a collective over NVLink. Default 0.47e-6.
    double eager_collective;     ///< Extra seconds per collective call outside a CUDA graph. Default 8e-6.
    double oneshot_latency;      ///< Seconds of a one-shot all-reduce over NVLink (each rank reads every peer's
                                 ///< buffer and sums: serving engines' custom all-reduce for small messages),
                                 ///< launch included. Default 6e-6; 0 prices every all-reduce as a ring.
    uint32_t kernels_per_layer;  ///< Kernels one layer launches besides the collectives. Default 20.
    double kernel_gap_graph;     ///< Seconds between kernels replayed in a CUDA graph. Default 1e-6.
    double kernel_gap_eager;     ///< Seconds per kernel launched eagerly. Default 4e-6.
    bool cuda_graphs;            ///< Decode-only steps replay as CUDA graphs (steps with prefill run
                                 ///< eagerly). Default true.
    double activation_bytes;     ///< Bytes per activation element of the TP all-reduces (bf16). Default 2.
    uint32_t num_collective_fits; ///< Entries of collective_fits. Default 0.
    struct dcp_perf_collective_fit collective_fits[DCP_PERF_MAX_FITS]; ///< Measured collectives: a kind,
                                 ///< rank count and link found here is priced by its fit, not the model.
    uint32_t calibrated;         ///< enum dcp_perf_calibrated bits: inputs a calibration set. Default 0.
    char calibrated_on[96];      ///< The backend the calibration ran on ("" without one).
};

/** Fills the defaults listed above. */
DCP_API void dcp_perf_default_params(struct dcp_perf_params *p);

/** Largest calibration file dcp_perf_params_load() reads. */
#define DCP_PERF_CALIBRATION_MAX_BYTES (1u << 20)

/**
 * Reads a calibration file (YAML, written by `dcp-run calibrate`; docs/plan.md,
 * "Calibration", gives the format) into p: what it measured replaces p's inputs and
 * sets their bits in p->calibrated, the rest of p is kept. Only a regular file of at
 * most DCP_PERF_CALIBRATION_MAX_BYTES is read; every problem is reported to diag as
 * `FILE:LINE:COL: KEY: message` and p is then unchanged. Returns DCP_OK, DCP_EIO
 * (unreadable), DCP_ECONFIG (bad content) or DCP_ENOMEM.
 */
DCP_API int dcp_perf_params_load(const char *path, dcp_diag *diag, struct dcp_perf_params *p);

/** One timed collective of a calibration. */
struct dcp_calibration_collective {
    enum dcp_plan_comm_kind kind; ///< Which collective.
    uint32_t ranks;              ///< Group size.
    double bytes;                ///< Bytes one rank sends to the others.
    double seconds;              ///< Median time of one call.
};

/** One timed attention call of a calibration. */
struct dcp_calibration_attention {
    uint64_t context;            ///< Tokens of each sequence on the rank.
    uint32_t batch;              ///< Sequences.
    double bytes;                ///< KV bytes the call reads on the rank (one layer).
    double seconds;              ///< Median time of one call.
};

/** Most samples of each kind a calibration holds. */
#define DCP_CALIBRATION_MAX_SAMPLES 64

/** What `dcp-run calibrate` measured, and the model inputs fitted to it. */
struct dcp_calibration {
    char backend[96];            ///< Where it ran ("host (4 ranks)", "cuda (NVIDIA H200, nccl)").
    char deployment[256];        ///< The deployment whose shapes were measured.
    double hbm_bandwidth;        ///< Bytes/s kv_efficiency is relative to (the deployment's hbm_gbps).
    struct dcp_perf_params fit;  ///< collective_fits, kv_efficiency, attention_call and the kernel gaps
                                 ///< measured (bits in fit.calibrated); the rest are the defaults.
    uint32_t num_collectives;    ///< Entries of collectives.
    struct dcp_calibration_collective collectives[DCP_CALIBRATION_MAX_SAMPLES]; ///< Timed collectives.
    uint32_t num_attention;      ///< Entries of attention.
    struct dcp_calibration_attention attention[DCP_CALIBRATION_MAX_SAMPLES]; ///< Timed attention calls.
};

/** How dcp_calibrate() measures. Start from dcp_calibrate_default_params(). */
struct dcp_calibrate_params {
    uint64_t min_bytes;          ///< Smallest collective message per rank. Default 4 KiB.
    uint64_t max_bytes;          ///< Largest. Default 4 MiB (sizes go up by 4x).
    uint32_t repeats;            ///< Timed calls per point (the median is kept). Default 20.
    uint64_t max_context;        ///< Longest per-rank context timed (from 256 tokens up by 4x). Default 65,536.
    double kv_bytes;             ///< KV arena bytes per rank of the attention engine. Default 256e6.
};

/** Fills the defaults listed above. */
DCP_API void dcp_calibrate_default_params(struct dcp_calibrate_params *p);

/**
 * Measures the performance model's inputs on the backend dep runs on (runtime.backend: host threads,
 * CUDA virtual ranks or NCCL across GPUs): each collective of the DCP merge (all-gather,
 * reduce-scatter, all-to-all) over the deployment's DCP group from min_bytes to
 * max_bytes per rank, fitted to alpha + bytes / beta; decode attention of one rank with
 * the deployment's shapes at per-rank contexts from 256 tokens to max_context, fitted to
 * bytes / (hbm x kv_efficiency) + attention_call; and the cost of the smallest
 * attention call (kernel_gap_eager). A deployment with dcp 1 measures no collectives.
 * DCP_EINVAL for bad arguments; engine errors as dcp_engine_create() gives them.
 */
DCP_API int dcp_calibrate(const dcp_deployment *dep, const struct dcp_calibrate_params *p,
                          struct dcp_calibration *out);

/** Writes c as a calibration file (YAML) that dcp_perf_params_load() reads. DCP_EIO on failure. */
DCP_API int dcp_calibration_write(const struct dcp_calibration *c, const char *path);

/** Most communication rows a model prices per layer. */
#define DCP_PERF_MAX_ROWS 8

/** One exchange of DCP's decode step (a row of the plan's communication). */
struct dcp_perf_row {
    enum dcp_plan_comm_kind kind; ///< How it moves.
    uint32_t ranks;              ///< Ranks in it (the DCP group).
    double bytes;                ///< max(send, receive) bytes per rank per query token, per layer.
    uint32_t layers;             ///< Layers that run it in a step (those DCP merges; see the plan's row).
};

/**
 * The KV bytes a GPU reads for one sequence, as a function of its context c: the
 * model layer's dcp_model_kv_read_bytes() is a shard(c) + b c + e once c passes every
 * window and top-k of the model (shard(c): the busiest rank's tokens,
 * dcp_kv_local_length). dcp_perf_model_init() takes a, b, e from that function at three
 * contexts and checks the line at two more; below `from`, or when the check failed,
 * the model calls the function itself (a loop over the layers).
 */
struct dcp_perf_reads {
    double a;                    ///< Bytes per token of the busiest rank's shard.
    double b;                    ///< Bytes per context token read whatever the shard (replicated index keys).
    double e;                    ///< Bytes read whatever the context (top-k rows, window rings).
    uint64_t from;               ///< Contexts from which the line holds.
    bool affine;                 ///< The check passed: the line is used from `from` on.
};

/** Layers that attend the same span of a sequence (struct dcp_perf_model.spans). */
struct dcp_perf_span {
    enum dcp_layer_type type;    ///< full, sliding_window or sparse_topk (none layers attend nothing).
    uint32_t limit;              ///< Tokens a query attends at most: the window or the top-k; 0 = all (full).
    uint32_t layers;             ///< How many layers.
};

/** The model of one layout of a deployment. Plain data; dcp_perf_model_init() fills it. */
struct dcp_perf_model {
    struct dcp_perf_params params; ///< The inputs above.
    uint32_t tp;                 ///< GPUs of one instance.
    uint32_t dcp;                ///< DCP size of this layout (1 = TP only).
    uint32_t layers;             ///< Layers.
    uint32_t interleave;         ///< DCP interleave.
    double hbm_bandwidth;        ///< Bytes/s per GPU.
    double gemm_peak;            ///< FLOP/s of the GEMMs: the tensor peak of the weight dtype.
    const char *gemm_dtype;      ///< Which peak that is: "bf16", "fp8" or "fp4".
    double attention_peak;       ///< FLOP/s of attention (the bf16 peak).
    double dense_weight_bytes;   ///< Weight bytes per GPU every step reads (everything but routed experts).
    double expert_weight_bytes;  ///< Weight bytes per GPU of one routed expert, all layers.
    uint32_t experts;            ///< Routed experts (0: a dense model).
    uint32_t experts_per_token;  ///< Routed experts one token uses.
    double active_params;        ///< Parameters one token uses (all of them for a dense model).
    const struct dcp_config *cfg; ///< The deployment's settings (its layer kinds); valid while it lives.
    struct dcp_model_kv kv;      ///< The layer kinds' KV of this layout on one GPU (runtime/model, geometry.h).
    struct dcp_model_kv kv_tp;   ///< The same with dcp 1: what a GPU reads once a prefill chunk gathered
                                 ///< its sharded context.
    struct dcp_perf_reads reads; ///< kv's read bytes per sequence as a line (decode, the chunk's own reads).
    struct dcp_perf_reads reads_tp; ///< kv_tp's (what a GPU reads after gathering a context).
    uint32_t num_spans;          ///< Entries of spans.
    struct dcp_perf_span spans[DCP_MAX_LAYER_PATTERN]; ///< The attention layers by the span a query attends.
    uint32_t gather_layers;      ///< Layers whose sharded KV a prefill chunk gathers (full and sparse_topk).
    double decode_flops;         ///< Decode attention FLOPs per GPU per query token per context token per layer.
    double prefill_flops;        ///< The same for prefill (MLA in its expanded form).
    double allreduce_bytes;      ///< Bytes one rank sends per TP all-reduce per token: 2 (tp-1)/tp x hidden x activation_bytes.
    enum dcp_perf_link tp_link;  ///< The link of the TP group (network when an instance spans nodes).
    enum dcp_perf_link dcp_link; ///< The link of a DCP group (network when some group spans nodes).
    uint32_t num_rows;           ///< DCP exchanges (0 for dcp = 1).
    struct dcp_perf_row rows[DCP_PERF_MAX_ROWS]; ///< Them, from the plan's communication.
    double gather_bytes_per_token; ///< Bytes one rank receives per cached context token, all gather_layers, when
                                 ///< a prefill chunk gathers the context's KV: (dcp - 1) / dcp x the token's KV.
    double nvlink_bandwidth;     ///< hardware.link_gbps in bytes/s.
    double network_bandwidth;    ///< hardware.internode_gbps in bytes/s (0: not given).
    double collective_latency;   ///< hardware.collective_latency_us in seconds.
    double network_hop_latency;  ///< hardware.internode_latency_us in seconds.
    double peer_latency;         ///< hardware.peer_latency_us in seconds: the fixed cost of a round of peer writes.
};

/**
 * Builds the model of deployment dep with DCP size dcp (1 = TP only; any size the
 * model and tp allow, not only the deployment's). Errors (DCP_EINVAL, with the reason
 * in dcp_last_error()): a CPU deployment (hardware.gpu "cpu ..."), no
 * hardware.tflops_bf16, no model.hidden_size, an invalid dcp, bad params.
 */
DCP_API int dcp_perf_model_init(const dcp_deployment *dep, uint32_t dcp, const struct dcp_perf_params *p,
                                struct dcp_perf_model *m);

/** Where one step's time goes, seconds (the terms in the header comment). */
struct dcp_perf_step {
    double weights;              ///< Weight bytes read / (hbm x weight_efficiency).
    double gemm;                 ///< GEMM FLOPs / (peak x gemm_efficiency).
    double linear;               ///< max(weights, gemm).
    double kv;                   ///< KV bytes read / (hbm x kv_efficiency) + attention_call x layers per phase
                                 ///< with sequences, both phases summed.
    double attention_flops;      ///< Attention FLOPs / (bf16 peak x attention_efficiency), both phases summed.
    double phase_attention[2];   ///< [0] decode rows, [1] prefill chunks: max(that phase's kv, its FLOPs time).
    double attention;            ///< phase_attention[0] + phase_attention[1] (separate kernels).
    double tp_comm;              ///< TP all-reduces.
    double dcp_comm;             ///< DCP exchanges: decode rows, prefill Q gathers or KV gathers.
    double overhead;             ///< Gaps between kernels.
    double total;                ///< linear + attention + tp_comm + dcp_comm + overhead.
    double experts_touched;      ///< Expected distinct routed experts per layer the step's tokens use.
    uint32_t gathered_chunks;    ///< Prefill chunks that gathered the context's KV (DCP).
    bool graph;                  ///< Priced as a CUDA graph replay (decode only).
};

/**
 * Prices one scheduled step (struct dcp_sched_step: its entries' positions give every
 * sequence's context). Entries with loaded set (P/D: the prompt's KV arrived from a
 * prefill instance) cost nothing here.
 */
DCP_API void dcp_perf_step_time(const struct dcp_perf_model *m, const struct dcp_sched_step *step,
                                struct dcp_perf_step *out);

/**
 * Prices a decode-only step of batch requests of context tokens each, q_len query
 * tokens per request (1 + MTP drafts): the steady state of a closed loop.
 */
DCP_API void dcp_perf_decode_time(const struct dcp_perf_model *m, uint64_t batch, uint64_t context,
                                  uint32_t q_len, struct dcp_perf_step *out);

/**
 * KV bytes one GPU reads in a decode step (one query token) of a request of `context`
 * tokens over every layer: the model layer's dcp_model_kv_read_bytes() for the
 * layout's layer kinds (the largest shard of full layers, a window's last tokens, the
 * top-k rows and the index keys scored).
 */
DCP_API double dcp_perf_kv_read_bytes(const struct dcp_perf_model *m, uint64_t context);

/** KV bytes one request of `context` tokens keeps on one GPU (dcp_model_kv_request_bytes()). */
DCP_API double dcp_perf_kv_request_bytes(const struct dcp_perf_model *m, uint64_t context);

/**
 * Output tokens per second per GPU of the decode steady state of a closed loop of
 * `clients` requests of `context` tokens when `fits` of them fit the KV pool at once
 * (the others wait): min(clients, fits) sequences decode together, each step giving
 * one token per sequence (drafts, q_len > 1, are priced as read and computed, and
 * credited as rejected: a lower bound). 0 when nothing fits.
 */
DCP_API double dcp_perf_decode_rate(const struct dcp_perf_model *m, uint64_t fits, uint64_t clients, uint64_t context,
                                    uint32_t q_len);

/**
 * The smallest concurrency from which layout b decodes more tokens per GPU per second
 * than layout a at every concurrency up to max_clients (dcp_perf_decode_rate() at
 * context tokens, a_fits and b_fits requests fitting at once); 0 when b is not ahead
 * at max_clients.
 */
DCP_API uint32_t dcp_perf_wins_from(const struct dcp_perf_model *a, uint64_t a_fits, const struct dcp_perf_model *b,
                                    uint64_t b_fits, uint64_t context, uint32_t q_len, uint32_t max_clients);

/**
 * Seconds one collective of `kind` among `ranks` ranks takes over `link` for `bytes`
 * bytes per rank: a calibrated fit if params has one for it, else
 * collective_latency + steps x hop + bytes / (bandwidth x link_efficiency), with
 * n - 1 steps (2 (n - 1) for an all-reduce), or for peer writes (comm p2p)
 * peer_latency + bytes / (bandwidth x link_efficiency), plus eager_collective
 * outside a graph. An all-reduce over NVLink (bytes = 2 (n - 1) / n of the buffer S,
 * what a ring sends) takes the cheaper of that ring and a one-shot all-reduce:
 * oneshot_latency + (n - 1) S / (bandwidth x link_efficiency), graph or eager alike.
 * 0 for fewer than 2 ranks.
 */
DCP_API double dcp_perf_collective_time(const struct dcp_perf_model *m, enum dcp_plan_comm_kind kind, uint32_t ranks,
                                        enum dcp_perf_link link, double bytes, bool graph);

/** "nvlink" or "network". */
DCP_API const char *dcp_perf_link_name(enum dcp_perf_link link);

#ifdef __cplusplus
}
#endif

#endif /* DCP_PERF_H */
