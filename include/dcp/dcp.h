/*
 * dcp.h: everything libdcp offers. Include this one header.
 *
 *   common.h      status codes, dcp_strerror(), dcp_last_error(), version
 *   diag.h        diagnostics with file:line:col positions
 *   deployment.h  YAML deployments, validated and immutable
 *   placement.h   which rank stores which token (owner, local index, lengths)
 *   geometry.h    per-rank heads and bytes, KV budget, token keys
 *   plan.h        memory, capacity and communication plan: DCP vs TP
 *   engine.h      sequences, paged KV, per-rank append and attention with the DCP merge
 *   serve.h       request traces, continuous-batching scheduler
 *   perf.h        the performance model: step times of plan and replay --simulate
 *
 * Not included: tools.h (synthetic data, test and benchmark aids for tools).
 */
#ifndef DCP_DCP_H
#define DCP_DCP_H

#include "dcp/common.h"
#include "dcp/diag.h"
#include "dcp/deployment.h"
#include "dcp/placement.h"
#include "dcp/geometry.h"
#include "dcp/plan.h"
#include "dcp/engine.h"
#include "dcp/serve.h"
#include "dcp/perf.h"

#endif /* DCP_DCP_H */
