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
 *   attention  max(KV bytes / (hbm x kv_efficiency) + attention_call x layers,
 *                  attention FLOPs / (bf16 peak x attention_efficiency))
 *   comm       per layer: 2 TP all-reduces of the activations, and DCP's exchanges (the plan's
 *              communication rows) for decode tokens; a prefill chunk over a cached sharded
 *              context gathers that context's KV or gathers its queries, whichever is cheaper
 *              each exchange: alpha + bytes / beta by kind and link (NVLink or network)
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
};

/** Fills the defaults listed above. */
DCP_API void dcp_perf_default_params(struct dcp_perf_params *p);

/** Most communication rows a model prices per layer. */
#define DCP_PERF_MAX_ROWS 8

/** One exchange of DCP's decode step, per layer (a row of the plan's communication). */
struct dcp_perf_row {
    enum dcp_plan_comm_kind kind; ///< How it moves.
    uint32_t ranks;              ///< Ranks in it (the DCP group).
    double bytes;                ///< max(send, receive) bytes per rank per query token.
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
    double kv_token_layer_bytes; ///< KV bytes a GPU holds per token it stores, per layer.
    double decode_flops;         ///< Decode attention FLOPs per GPU per query token per context token per layer.
    double prefill_flops;        ///< The same for prefill (MLA in its expanded form).
    double allreduce_bytes;      ///< Bytes one rank sends per TP all-reduce per token: 2 (tp-1)/tp x hidden x activation_bytes.
    enum dcp_perf_link tp_link;  ///< The link of the TP group (network when an instance spans nodes).
    enum dcp_perf_link dcp_link; ///< The link of a DCP group (network when some group spans nodes).
    uint32_t num_rows;           ///< DCP exchanges per layer (0 for dcp = 1).
    struct dcp_perf_row rows[DCP_PERF_MAX_ROWS]; ///< Them, from the plan's communication.
    double gather_bytes_per_token; ///< Bytes one rank receives per cached context token per layer when a
                                 ///< prefill chunk gathers the context's KV: (dcp - 1) / dcp x KV bytes.
    double nvlink_bandwidth;     ///< hardware.link_gbps in bytes/s.
    double network_bandwidth;    ///< hardware.internode_gbps in bytes/s (0: not given).
    double collective_latency;   ///< hardware.collective_latency_us in seconds.
    double network_hop_latency;  ///< hardware.internode_latency_us in seconds.
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
    double kv;                   ///< KV bytes read / (hbm x kv_efficiency) + attention_call x layers.
    double attention_flops;      ///< Attention FLOPs / (bf16 peak x attention_efficiency).
    double attention;            ///< max(kv, attention_flops).
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
 * Seconds one collective of `kind` among `ranks` ranks takes over `link` for `bytes`
 * bytes per rank: a calibrated fit if params has one for it, else
 * collective_latency + steps x hop + bytes / (bandwidth x link_efficiency), with
 * n - 1 steps (2 (n - 1) for an all-reduce, 1 for peer writes), plus
 * eager_collective outside a graph. 0 for fewer than 2 ranks.
 */
DCP_API double dcp_perf_collective_time(const struct dcp_perf_model *m, enum dcp_plan_comm_kind kind, uint32_t ranks,
                                        enum dcp_perf_link link, double bytes, bool graph);

/** "nvlink" or "network". */
DCP_API const char *dcp_perf_link_name(enum dcp_perf_link link);

#ifdef __cplusplus
}
#endif

#endif /* DCP_PERF_H */
