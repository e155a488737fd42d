#include "wick/cluster.hpp"

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "wick/params.hpp"  // ConfigError

namespace wick {

namespace {

// A whole, non-negative number from variable `name`; `fallback` when it is not set.
long number(const EnvLookup& env, const char* name, long fallback) {
  const char* v = env(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < 0 || n > 1L << 30)
    throw std::invalid_argument(std::string(name) + " is '" + v +
                                "', not a whole number >= 0; unset it or fix the job script");
  return n;
}

std::string text(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v ? v : "";
}

// A task of an srun step: sbatch's batch script (step "batch", 4294967294) and the extern step
// also carry SLURM_PROCID and SLURM_NTASKS, but start no ranks.
bool in_srun_step(const EnvLookup& env) {
  const std::string step = text(env, "SLURM_STEP_ID");
  return !step.empty() && step != "batch" && step != "extern" && step != "4294967294" &&
         step != "4294967293";
}

}  // namespace

std::string first_slurm_host(std::string_view list) {
  std::string host;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const char ch = list[i];
    if (ch == ',') break;
    if (ch != '[') {
      host += ch;
      continue;
    }
    const std::size_t close = list.find(']', i);
    if (close == std::string_view::npos)
      throw std::invalid_argument("SLURM host list '" + std::string(list) +
                                  "' has an unclosed '['");
    // The first element of the range list: "07-09,12" -> "07".
    const auto inside = list.substr(i + 1, close - i - 1);
    host += inside.substr(0, inside.find_first_of(",-"));
    i = close;
  }
  return host;
}

ClusterEnv detect_cluster_env(const EnvLookup& env) {
  ClusterEnv c;
  c.restart_count = static_cast<int>(number(env, "TORCHELASTIC_RESTART_COUNT", 0));
  const char* rank_var = "RANK";
  const char* world_var = "WORLD_SIZE";
  if (env("WORLD_SIZE")) {
    c.source = "torchrun";
    c.world = static_cast<int>(number(env, "WORLD_SIZE", 1));
    c.rank = static_cast<int>(number(env, "RANK", 0));
    c.local_rank = static_cast<int>(number(env, "LOCAL_RANK", 0));
    c.node_rank = static_cast<int>(number(env, "GROUP_RANK", 0));
    c.master_addr = text(env, "MASTER_ADDR");
    c.master_port = static_cast<int>(number(env, "MASTER_PORT", 0));
  } else if (env("SLURM_NTASKS") && env("SLURM_PROCID") && in_srun_step(env)) {
    c.source = "slurm";
    rank_var = "SLURM_PROCID";
    world_var = "SLURM_NTASKS";
    c.world = static_cast<int>(number(env, "SLURM_NTASKS", 1));
    c.rank = static_cast<int>(number(env, "SLURM_PROCID", 0));
    c.local_rank = static_cast<int>(number(env, "SLURM_LOCALID", 0));
    c.node_rank = static_cast<int>(number(env, "SLURM_NODEID", 0));
    c.master_addr = text(env, "MASTER_ADDR");
    if (c.master_addr.empty()) {
      std::string list = text(env, "SLURM_STEP_NODELIST");
      if (list.empty()) list = text(env, "SLURM_JOB_NODELIST");
      c.master_addr = first_slurm_host(list);
    }
    c.master_port = static_cast<int>(number(env, "MASTER_PORT", 0));
    if (c.master_port == 0 && c.world > 1) {
      if (!env("SLURM_JOB_ID"))
        throw std::invalid_argument(
            "SLURM_NTASKS is " + std::to_string(c.world) +
            " but neither MASTER_PORT nor SLURM_JOB_ID is set, so the tasks cannot agree on a "
            "rendezvous port; export MASTER_PORT in the job script");
      c.master_port = static_cast<int>(10000 + number(env, "SLURM_JOB_ID", 0) % 50000);
    }
    if (c.master_addr.empty() && c.world > 1)
      throw std::invalid_argument(
          "SLURM_NTASKS is " + std::to_string(c.world) +
          " but neither MASTER_ADDR nor SLURM_STEP_NODELIST names the first task's host; export "
          "MASTER_ADDR in the job script");
  }
  if (c.world < 1)
    throw std::invalid_argument(std::string(world_var) + " is 0; it must be at least 1");
  if (c.rank >= c.world)
    throw std::invalid_argument(std::string(rank_var) + " is " + std::to_string(c.rank) +
                                ", not below " + world_var + " = " + std::to_string(c.world));
  return c;
}

ClusterEnv adopt_cluster_env() {
  const ClusterEnv c = detect_cluster_env([](const char* n) { return std::getenv(n); });
  if (c.source != "slurm") return c;
  auto put = [](const char* name, const std::string& v) { setenv(name, v.c_str(), 1); };
  put("RANK", std::to_string(c.rank));
  put("WORLD_SIZE", std::to_string(c.world));
  put("LOCAL_RANK", std::to_string(c.local_rank));
  put("GROUP_RANK", std::to_string(c.node_rank));
  if (!c.master_addr.empty()) put("MASTER_ADDR", c.master_addr);
  if (c.master_port > 0) put("MASTER_PORT", std::to_string(c.master_port));
  return c;
}

JobRanks job_ranks() {
  const EnvLookup env = [](const char* n) { return std::getenv(n); };
  if (!env("WORLD_SIZE")) return {};
  try {
    const ClusterEnv c = detect_cluster_env(env);  // torchrun's variables, checked
    return {c.rank, c.world};
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string(e.what()) + "; fix the job script or the launcher");
  }
}

}  // namespace wick
