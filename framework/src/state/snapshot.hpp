// Private: the framework's snapshot of a run between steps, and its restore. A snapshot is
// the files of a checkpoint:
//   model.pt      parameters and buffers by name (torch::pickle_save of a dict, torch.load-able)
//   optimizer.pt  the optimizer's own archive (torch::optim::Optimizer::save)
//   state.pt      step counters, RNG state, the loop's epoch values and pending record values,
//                 pending gradients, the task's state and every stateful hook's state
// and a manifest (position, counts, the run's identity).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/sampler.hpp"
#include "optim/optimizers.hpp"
#include "state/checkpoint_folder.hpp"
#include "wick/hook.hpp"
#include "wick/schedule.hpp"
#include "wick/task.hpp"

namespace wick {

// A run as a snapshot sees it: the parts it saves and restores, each through its own
// interface. The loop fills one (Trainer::Impl::snapshot_parts); nothing here knows the
// loop's internals.
struct SnapshotParts {
  torch::nn::Module& model;
  std::vector<NamedOptimizer>& optimizers;
  Task& task;
  Dataset& train_data;
  // The training data's state as of the last batch the loop consumed (null: ask the data).
  std::shared_ptr<StateDict>& data_state;
  StepState& state;
  Position& position;       // where the loop is between steps
  EpochStart& epoch_start;  // where this epoch's dealing of the order began
  RunIdentity identity;     // seed, batch size, ranks, shuffle, drop_last
  std::int64_t records;     // metrics records written so far
  std::vector<std::pair<std::string, Hook*>> stateful_hooks;  // by instance name
  // The loop's own resumable state (state.pt's "loop"): its components' parts.
  std::function<void(StateDict&)> save_loop;
  std::function<void(const StateDict&)> load_loop;
  // The run trains on a GPU: its CUDA generators are saved and restored. A CPU run never
  // touches CUDA state, even on a machine that has a GPU.
  bool cuda = false;
  std::string config_toml;  // the run's config as its resume compares it (RunInfo::config_toml)
};

// Seeds the run's random generators: the CPU's, and the GPUs' only for a run on CUDA
// (torch::manual_seed would initialise CUDA in a CPU run on a machine that has a GPU).
void seed_generators(std::uint64_t seed, bool cuda);

Manifest snapshot_manifest(const SnapshotParts& run, const std::string& reason);
Files snapshot_files(SnapshotParts& run);
// Throws CheckpointError when the manifest's position or counts differ from the ones in the
// hashed state.pt (a manifest edited by hand or by an attacker).
void check_agreement(const Manifest& m, const Files& files);
// Thrown when a checkpoint's model.pt does not fit the model: every differing tensor listed.
struct ModelMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Weights a hook offers for evaluation (Hook::eval_weights) must be the model's parameters by
// name, shape and dtype: throws ModelMismatch naming the hook and the first that is not.
void check_offered_weights(const torch::nn::Module& model, const NamedTensors& offered,
                           const std::string& instance);
// A model.pt's bytes: the model's parameters and buffers by name, on the CPU; a tensor named
// in `replaced` (weights a hook keeps for evaluation) instead of the model's own.
std::string model_bytes(const torch::nn::Module& model, const NamedTensors& replaced = {});
// Copies a model.pt's parameters and buffers into the model, nothing else; ModelMismatch
// lists every tensor that does not fit. `where` names the checkpoint in messages.
void load_model(torch::nn::Module& model, const std::string& bytes, const std::string& where);
void load_model_file(torch::nn::Module& model, const Files& files, const std::string& where);
// The weights a hook keeps for evaluation (Hook::eval_weights), as the checkpoint's hook
// states give them: those hooks' states are restored, and the first that offers weights puts
// them in the model. Returns its word for them ("ema"), "" when no hook offers any.
std::string load_eval_weights(torch::nn::Module& model, const std::vector<HookEntry>& hooks,
                              const Files& files, const std::string& where);
// What a resume is told of the checkpoint's run beside its state.
struct Restored {
  // An optimizer setting this run's config gives otherwise than the checkpoint's run (a lower
  // lr for the rest of a run) is taken from the config: those changes, a line each.
  std::string optimizer_changes;
  std::string config_toml;  // the run's config (SnapshotParts::config_toml); "" before it was kept
};
// Loads verified files into the run. Throws std::runtime_error for a model, optimizer or
// state that does not fit this run.
Restored restore_files(SnapshotParts& run, const Manifest& m, const Files& files,
                       const std::string& where);

}  // namespace wick
