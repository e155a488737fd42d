// Where a rank learns its place in a data-parallel job: torchrun's variables (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; set by wick launch and torchrun) or, when
// those are absent, SLURM's (an `srun` task). Torch-free, so that it can be tested alone.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

struct ClusterEnv {
  std::string source;  // "" (one process), "torchrun" or "slurm"
  int rank = 0, world = 1, local_rank = 0, node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: torchrun's restarts of the workers
};

using EnvLookup = std::function<const char*(const char*)>;

// The job this process belongs to. SLURM (an srun step: SLURM_STEP_ID set, not sbatch's batch
// script): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID; the master is MASTER_ADDR or
// the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), the port MASTER_PORT or 10000 +
// SLURM_JOB_ID % 50000 (the same on every task of the job). Throws std::invalid_argument naming a
// variable that is not a valid number or a rank outside the world.
ClusterEnv detect_cluster_env(const EnvLookup& env);

// The first host of a SLURM host list: "node[07-09,12],gpu1" -> "node07",
// "rack[1-2]-n[01-04]" -> "rack1-n01". Throws std::invalid_argument on an unclosed bracket.
std::string first_slurm_host(std::string_view nodelist);

// For an srun task without torchrun's variables: sets RANK, WORLD_SIZE, LOCAL_RANK,
// GROUP_RANK, MASTER_ADDR and MASTER_PORT from SLURM's (everything downstream reads those).
// Call before any thread starts. Returns the job as detected.
ClusterEnv adopt_cluster_env();

// This process's place in a torchrun-style job, from RANK and WORLD_SIZE (set by wick launch,
// torchrun, and adopt_cluster_env under srun): the one reader of them that the trainer, the
// config's run facts and the commands share. {0, 1} without WORLD_SIZE. Throws ConfigError
// naming the variable when one is not a whole number, or RANK is not below WORLD_SIZE.
struct JobRanks {
  int rank = 0, world = 1;
};
JobRanks job_ranks();

}  // namespace wick

WICK_PUBLIC_END
