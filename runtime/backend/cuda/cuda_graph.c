/*
 * cuda_graph.c: what a GPU engine needs to run libdcp inside its own decode step:
 * the caller's stream, step uploads that never wait for the step before, and
 * stream capture of a whole step into a CUDA graph (see cuda_backend.c for the
 * backend as a whole, include/dcp/engine.h for the contract).
 *
 * Ordering. A rank's kernels, copies and virtual collectives go on cr->compute:
 * the library's own stream or the caller's (dcp_rank_set_stream). NCCL runs on
 * the communication stream, ordered with compute by events both ways
 * (cuda_comm.c). Nothing of append, attention or begin_step waits for the device:
 * the only host waits left are the staging half of the step before the previous
 * one (begin_step, when the GPU is two steps behind) and the host rendezvous of
 * virtual ranks (address exchange, no device wait).
 *
 * Capture. One rank with its own GPU captures its compute stream; the
 * communication stream joins the capture through the collectives' events. Virtual
 * ranks share one GPU and order their collectives with events across their
 * streams, so a group captures one graph: group rank 0 begins the capture, the
 * others join it through an event it recorded (EV_FORK) and rejoin it at the end
 * (EV_JOIN) before it ends the capture. A launch is SPMD too: the leader waits
 * for every member's stream (EV_JOIN), launches, and the members' streams wait
 * for the launch (EV_FORK).
 */
#include "backend/cuda/cuda_internal.h"
#include "backend/group.h"
#include "util/util.h"

/* Virtual ranks of a group larger than one: the group captures one graph. */
static bool virtual_group(const struct dcp_rank *r)
{
    const struct cuda_rank *cr = CR(r);
    return cr->group && cr->group->size > 1;
}

static bool group_leader(const struct dcp_rank *r) { return !virtual_group(r) || r->group_rank == 0; }

/* ---- caller streams ------------------------------------------------------------ */

/* The new stream's later work waits for what was queued on the old one. */
int cuda_set_stream(struct dcp_rank *r, void *stream)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    CUstream next = stream ? (CUstream)stream : cr->own_stream;
    if (next == cr->compute)
        return DCP_OK;
    if (cr->capturing)
        return dcp_error(DCP_EINVAL, "rank_set_stream: rank %u is capturing a graph; end the capture first",
                         r->tp_rank);
    int err = use_rank(r);
    if (!err)
        err = CU_CALL(api, cuEventRecord, cr->events[EV_SWITCH], cr->compute);
    if (!err)
        err = CU_CALL(api, cuStreamWaitEvent, next, cr->events[EV_SWITCH], 0);
    if (err)
        return dcp_error(err, "rank_set_stream: rank %u cannot order stream %p after its current one (%s)",
                         r->tp_rank, stream, dcp_last_error());
    cr->compute = next;
    cr->caller_stream = stream != NULL;
    return DCP_OK;
}

void *cuda_get_stream(const struct dcp_rank *r) { return CR(r) ? (void *)CR(r)->compute : NULL; }

/* ---- double-buffered staging ------------------------------------------------------ */

/* Half h is free once the copies out of it ran (a bounded wait, only when some
 * may not have). */
static int wait_half(struct dcp_rank *r, uint32_t h)
{
    struct cuda_rank *cr = CR(r);
    if (!cr->stage_pending[h])
        return DCP_OK;
    const int err = cuda_wait_event(r, cr->events[EV_STAGED0 + h], "upload staging");
    if (!err)
        cr->stage_pending[h] = false;
    return err;
}

unsigned char *cuda_staging_take(struct dcp_rank *r, size_t bytes, int *err)
{
    struct cuda_rank *cr = CR(r);
    const size_t room = (bytes + 15) & ~(size_t)15;
    /* A half holds one step's metadata whole: only uploads besides begin_step's
     * (dcp_rank_upload) can fill it, and then wait for its copies. */
    if (room > cr->staging_bytes - cr->staging_used) {
        if ((*err = wait_half(r, cr->stage_cur)))
            return NULL;
        cr->staging_used = 0;
    }
    unsigned char *at = cr->staging + (size_t)cr->stage_cur * cr->staging_bytes + cr->staging_used;
    cr->staging_used += room;
    return at;
}

int cuda_staging_record(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    const int err = CU_CALL(&CE(r->engine)->cu->api, cuEventRecord, cr->events[EV_STAGED0 + cr->stage_cur],
                            cr->compute);
    if (!err)
        cr->stage_pending[cr->stage_cur] = true;
    return err;
}

/* begin_step: the step's uploads go to the other half, whose copies (the step
 * before the previous one) have run unless the device is two steps behind. */
int cuda_step_uploads(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    int err = use_rank(r);
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!err)
        err = CU_CALL(&CE(r->engine)->cu->api, cuStreamIsCapturing, cr->compute, &status);
    if (err)
        return err;
    if (status != CU_STREAM_CAPTURE_STATUS_NONE || cr->capturing)
        return dcp_error(DCP_EINVAL, "begin_step: rank %u's stream is capturing a graph: call begin_step before "
                         "the capture begins and between launches (the graph reads the metadata it writes)",
                         r->tp_rank);
    cr->stage_cur ^= 1u;
    cr->staging_used = 0;
    return wait_half(r, cr->stage_cur);
}

/* ---- capture --------------------------------------------------------------------- */

int cuda_refuse_capture(struct dcp_rank *r, const char *what)
{
    struct cuda_rank *cr = CR(r);
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    int err = use_rank(r);
    if (!err)
        err = CU_CALL(&CE(r->engine)->cu->api, cuStreamIsCapturing, cr->compute, &status);
    if (err)
        return err;
    if (status == CU_STREAM_CAPTURE_STATUS_NONE && !cr->capturing)
        return DCP_OK;
    return dcp_error(DCP_EINVAL, "%s: rank %u's stream is capturing a graph (%s): a host copy cannot be "
                     "captured (the graph would replay a copy from a staging buffer that later uploads "
                     "overwrite, or the driver fails the capture); copy before the capture begins or after it ends",
                     what, r->tp_rank, cr->capturing ? "dcp_rank_capture_begin" : "by the caller");
}

/* Ends a capture that capture_begin started but could not complete (the group's
 * barrier was aborted, a later call failed): the stream leaves capture mode and the
 * partial graph is dropped, so nothing stays open that no capture_end could close. */
static void discard_capture(struct dcp_rank *r)
{
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    CUgraph graph = NULL;
    api->cuStreamEndCapture(CR(r)->compute, &graph);
    if (graph)
        api->cuGraphDestroy(graph);
    CR(r)->capturing = false;
}

int cuda_capture_begin(struct dcp_rank *r)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    int err = use_rank(r);
    if (!err)
        err = CU_CALL(api, cuStreamIsCapturing, cr->compute, &status);
    if (err)
        return err;
    if (status != CU_STREAM_CAPTURE_STATUS_NONE || cr->capturing)
        return dcp_error(DCP_EINVAL, "capture_begin: rank %u's stream is capturing already (%s)", r->tp_rank,
                         cr->capturing ? "dcp_rank_capture_begin without capture_end" : "by the caller");
    if (group_leader(r)) {
        /* Thread-local: other threads (other ranks, the caller's) may keep polling
         * their own work; this rank's thread makes no unsafe call until the end. */
        err = CU_CALL(api, cuStreamBeginCapture, cr->compute, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
        if (err)
            return err;
        cr->capturing = true;
        if (virtual_group(r) && (err = CU_CALL(api, cuEventRecord, cr->events[EV_FORK], cr->compute))) {
            discard_capture(r);
            return err;
        }
    }
    if (!virtual_group(r))
        return DCP_OK;
    if ((err = rank_group_barrier(cr->group))) {
        if (group_leader(r))
            discard_capture(r);
        return err;
    }
    if (!group_leader(r)) {
        if ((err = CU_CALL(api, cuStreamWaitEvent, cr->compute, cuda_group_member(r, 0)->events[EV_FORK], 0)))
            return err;
        cr->capturing = true;
    }
    return DCP_OK;
}

/* Ends the capture and instantiates it; the graph itself is not kept. */
static int end_capture(struct dcp_rank *r, CUgraphExec *exec)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    CUgraph graph = NULL;
    int err = DCP_OK;
    for (uint32_t s = 1; virtual_group(r) && s < cr->group->size && !err; s++)
        err = CU_CALL(api, cuStreamWaitEvent, cr->compute, cuda_group_member(r, s)->events[EV_JOIN], 0);
    /* Always ended, also after an error inside the capture: the stream leaves capture mode. */
    const int ended = CU_CALL(api, cuStreamEndCapture, cr->compute, &graph);
    err = err ? err : ended;
    if (!err)
        err = CU_CALL(api, cuGraphInstantiateWithFlags, exec, graph, 0);
    if (graph)
        api->cuGraphDestroy(graph);
    return err ? dcp_error(err, "capture_end: rank %u: %s", r->tp_rank, dcp_last_error()) : DCP_OK;
}

int cuda_capture_end(struct dcp_rank *r, void **out)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    *out = NULL;
    if (!cr->capturing)
        return dcp_error(DCP_EINVAL, "capture_end: rank %u is not capturing (dcp_rank_capture_begin first)",
                         r->tp_rank);
    int err = use_rank(r);
    if (err)
        return err;
    CUgraphExec exec = NULL;
    if (!virtual_group(r)) {
        err = end_capture(r, &exec);
    } else if (!group_leader(r)) {
        err = CU_CALL(api, cuEventRecord, cr->events[EV_JOIN], cr->compute);
        const int b1 = rank_group_barrier(cr->group);
        /* Waits until the leader ended the capture, so this stream is out of capture mode. */
        const int b2 = b1 ? b1 : rank_group_barrier(cr->group);
        err = err ? err : b1 ? b1 : b2;
    } else {
        err = rank_group_barrier(cr->group);
        const int ended = end_capture(r, &exec);
        const int b2 = err ? err : rank_group_barrier(cr->group);
        err = err ? err : ended ? ended : b2;
    }
    cr->capturing = false;
    if (err && exec) {
        api->cuGraphExecDestroy(exec);
        exec = NULL;
    }
    *out = exec;
    return err;
}

int cuda_graph_launch(struct dcp_rank *r, void *exec)
{
    struct cuda_rank *cr = CR(r);
    const struct dcp_cuda_api *api = &CE(r->engine)->cu->api;
    if (cr->capturing)
        return dcp_error(DCP_EINVAL, "graph_launch: rank %u is capturing a graph", r->tp_rank);
    int err = use_rank(r);
    if (err)
        return err;
    cr->queued = true;
    if (!virtual_group(r))
        return CU_CALL(api, cuGraphLaunch, (CUgraphExec)exec, cr->compute);
    if (!group_leader(r)) {
        err = CU_CALL(api, cuEventRecord, cr->events[EV_JOIN], cr->compute);
        const int b1 = rank_group_barrier(cr->group);
        const int b2 = b1 ? b1 : rank_group_barrier(cr->group);
        err = err ? err : b1 ? b1 : b2;
        return err ? err : CU_CALL(api, cuStreamWaitEvent, cr->compute, cuda_group_member(r, 0)->events[EV_FORK], 0);
    }
    err = rank_group_barrier(cr->group);
    for (uint32_t s = 1; s < cr->group->size && !err; s++)
        err = CU_CALL(api, cuStreamWaitEvent, cr->compute, cuda_group_member(r, s)->events[EV_JOIN], 0);
    if (!err)
        err = CU_CALL(api, cuGraphLaunch, (CUgraphExec)exec, cr->compute);
    if (!err)
        err = CU_CALL(api, cuEventRecord, cr->events[EV_FORK], cr->compute);
    const int b2 = rank_group_barrier(cr->group);
    return err ? err : b2;
}

void cuda_graph_destroy(struct dcp_rank *r, void *exec)
{
    if (exec && !use_rank(r))
        CE(r->engine)->cu->api.cuGraphExecDestroy((CUgraphExec)exec);
}
