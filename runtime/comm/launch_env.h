/*
 * launch_env.h: this process's place in a multi-process job, read from the
 * environment that an existing launcher (Slurm, Open MPI, MPICH/Hydra/PMI,
 * torchrun) sets. libdcp never launches processes itself.
 */
#ifndef DCP_LAUNCH_ENV_H
#define DCP_LAUNCH_ENV_H

#include <stdbool.h>
#include <stdint.h>

#include "dcp/common.h"

/** Rank and size of this process in its job and on its node. */
struct dcp_launch_env {
    uint32_t rank;        ///< Global rank, 0..world_size-1. 0 without a launcher.
    uint32_t world_size;  ///< Processes in the job. 1 without a launcher.
    uint32_t local_rank;  ///< Rank among the job's processes on this node; rank when unknown.
    uint32_t local_size;  ///< The job's processes on this node; world_size when unknown.
    bool local_known;     ///< Whether local_rank came from the environment (else one node is assumed).
    bool overridden;      ///< Whether any DCP_RANK / DCP_WORLD_SIZE / DCP_LOCAL_RANK / DCP_LOCAL_SIZE was applied.
    const char *launcher; ///< "openmpi", "pmi", "torchrun", "slurm" or "none" (static string).
};

/**
 * Fills *out from the environment. The innermost launcher wins when several are
 * visible (mpirun or torchrun inside a Slurm allocation): Open MPI
 * (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE), then MPICH/Hydra/PMI
 * (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS), then torchrun (RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), then Slurm (SLURM_PROCID,
 * SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, else this node's entry of
 * SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE such as "2(x3),1" picked by
 * SLURM_NODEID). A launcher is present when its rank variable is set. Then each
 * of DCP_RANK, DCP_WORLD_SIZE, DCP_LOCAL_RANK, DCP_LOCAL_SIZE that is set
 * replaces its field. Without any of these: rank 0 of 1.
 * Errors (DCP_EINVAL, *out unspecified, message names the variables): a value that
 * is not a decimal integer, a launcher's size variable missing, rank >= world
 * size, local rank >= local size, local size > world size, world size 0.
 */
int dcp_launch_env_detect(struct dcp_launch_env *out);

#endif /* DCP_LAUNCH_ENV_H */
