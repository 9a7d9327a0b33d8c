/*
 * graph.c: the caller's stream and CUDA graphs of a rank (engine.h, "caller
 * streams and CUDA graphs"): the checks around the backend's set_stream,
 * capture_begin/end and graph_launch. What a graph bakes in is the step's shape
 * (engine.c: dcp_engine_graph_shape, dcp_engine_graph_check).
 */
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "util/util.h"

struct dcp_graph {
    struct dcp_rank *rank;
    void *exec;                   ///< The backend's launchable graph (NULL: a virtual group member's).
    struct dcp_graph_shape shape; ///< Of the step it was captured from.
};

static int need_rank(const struct dcp_rank *r, const char *op)
{
    dcp_clear_error();
    return r ? DCP_OK : dcp_error(DCP_EINVAL, "%s: rank is NULL", op);
}

/* A failed capture or launch may leave peers of the group waiting for this rank
 * in a rendezvous: abort the step, as a failed collective does. */
static int abort_on_error(struct dcp_rank *r, int err)
{
    if (err && err != DCP_EABORTED)
        dcp_engine_abort(r->engine);
    return err;
}

DCP_API int dcp_rank_set_stream(dcp_rank *r, void *stream)
{
    int err = need_rank(r, "rank_set_stream");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "rank_set_stream", DCP_EBUSY);
    if ((err = dcp_engine_check_usable(r->engine)))
        return err;
    const struct dcp_backend_ops *ops = r->engine->ops;
    if (!ops->set_stream)
        return stream ? dcp_error(DCP_ENOTSUP, "rank_set_stream: the %s backend has no streams (a stream is a "
                                  "CUDA backend feature)", ops->name)
                      : DCP_OK;
    return ops->set_stream(r, stream);
}

DCP_API void *dcp_rank_stream(const dcp_rank *r)
{
    if (need_rank(r, "rank_stream"))
        return NULL;
    return r->engine->ops->get_stream ? r->engine->ops->get_stream(r) : NULL;
}

DCP_API int dcp_rank_capture_begin(dcp_rank *r)
{
    int err = need_rank(r, "capture_begin");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "capture_begin", DCP_EBUSY);
    if ((err = dcp_engine_check_usable(r->engine)))
        return err;
    struct dcp_engine *e = r->engine;
    if (!e->ops->capture_begin)
        return dcp_error(DCP_ENOTSUP, "capture_begin: the %s backend has no CUDA graphs", e->ops->name);
    if (e->params.profile)
        return dcp_error(DCP_ENOTSUP, "capture_begin: profile = true times every operation with events a graph "
                         "cannot hold; create the engine without profiling to capture");
    if (!e->step.valid)
        return dcp_error(DCP_EINVAL, "capture_begin: no step: call dcp_engine_begin_step() first (the step "
                         "fixes the shape the graph bakes in)");
    if (r->capturing)
        return dcp_error(DCP_EINVAL, "capture_begin: rank %u is capturing already", r->tp_rank);
    if ((err = dcp_engine_graph_shape(e, &r->capture_shape)))
        return dcp_error(err, "capture_begin: %s", dcp_last_error());
    atomic_fetch_add(&e->capturing, 1);
    if ((err = e->ops->capture_begin(r)))
        atomic_fetch_sub(&e->capturing, 1);
    r->capturing = !err;
    return abort_on_error(r, err);
}

DCP_API int dcp_rank_capture_end(dcp_rank *r, dcp_graph **out)
{
    int err = need_rank(r, "capture_end");
    if (!err && !out)
        err = dcp_error(DCP_EINVAL, "capture_end: graph is NULL");
    if (err)
        return err;
    DCP_RANK_ENTRY(r, "capture_end", DCP_EBUSY);
    *out = NULL;
    struct dcp_engine *e = r->engine;
    if (!e->ops->capture_end)
        return dcp_error(DCP_ENOTSUP, "capture_end: the %s backend has no CUDA graphs", e->ops->name);
    if (!r->capturing)
        return dcp_error(DCP_EINVAL, "capture_end: rank %u is not capturing (dcp_rank_capture_begin first)",
                         r->tp_rank);
    struct dcp_graph *g = calloc(1, sizeof(*g));
    void *exec = NULL;
    err = e->ops->capture_end(r, &exec);
    r->capturing = false;
    atomic_fetch_sub(&e->capturing, 1);
    if (!err && !g)
        err = dcp_error(DCP_ENOMEM, "capture_end: graph handle");
    if (err) {
        e->ops->graph_destroy(r, exec);
        free(g);
        return abort_on_error(r, err);
    }
    *g = (struct dcp_graph){.rank = r, .exec = exec, .shape = r->capture_shape};
    *out = g;
    return DCP_OK;
}

DCP_API int dcp_graph_launch(dcp_graph *g)
{
    dcp_clear_error();
    if (!g)
        return dcp_error(DCP_EINVAL, "graph_launch: graph is NULL");
    struct dcp_rank *r = g->rank;
    DCP_RANK_ENTRY(r, "graph_launch", DCP_EBUSY);
    int err = dcp_engine_check_usable(r->engine);
    if (err || (err = dcp_engine_graph_check(r->engine, &g->shape)))
        return err;
    return abort_on_error(r, r->engine->ops->graph_launch(r, g->exec));
}

DCP_API void dcp_graph_get_shape(const dcp_graph *g, struct dcp_graph_shape *out)
{
    if (out)
        *out = g ? g->shape : (struct dcp_graph_shape){0};
}

DCP_API void dcp_graph_destroy(dcp_graph **g)
{
    if (!g || !*g)
        return;
    (*g)->rank->engine->ops->graph_destroy((*g)->rank, (*g)->exec);
    free(*g);
    *g = NULL;
}
