// Private: the framework's snapshot of a run between steps, and its restore. A snapshot is
// the files of a checkpoint:
//   model.pt      parameters and buffers by name (torch::pickle_save of a dict, torch.load-able)
//   optimizer.pt  the optimizer's own archive (torch::optim::Optimizer::save)
//   state.pt      step counters, RNG state, the loop's epoch values and pending record values,
//                 pending gradients, the task's state and every stateful hook's state
// and a manifest (position, counts, the run's identity).
#pragma once

#include "loop/trainer_impl.hpp"
#include "state/checkpoint_folder.hpp"

namespace wick {

Manifest snapshot_manifest(const Trainer::Impl& I, const std::string& reason);
Files snapshot_files(Trainer::Impl& I);
// Throws CheckpointError when the manifest's position or counts differ from the ones in the
// hashed state.pt (a manifest edited by hand or by an attacker).
void check_agreement(const Manifest& m, const Files& files);
// Loads verified files into the run; `where` names the checkpoint in messages. Throws
// std::runtime_error for a model, optimizer or state that does not fit this run.
// Thrown when a checkpoint's model.pt does not fit the model: every differing tensor listed.
struct ModelMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A model.pt's bytes: the model's parameters and buffers by name, on the CPU; a tensor named
// in `replaced` (weights a hook keeps for evaluation) instead of the model's own.
std::string model_bytes(const Trainer::Impl& I, const NamedTensors& replaced = {});
// Copies a model.pt's parameters and buffers into the model, nothing else; ModelMismatch
// lists every tensor that does not fit.
void load_model(Trainer::Impl& I, const std::string& bytes, const std::string& where);
void load_model_file(Trainer::Impl& I, const Files& files, const std::string& where);
// The weights a hook keeps for evaluation (Hook::eval_weights), as the checkpoint's hook
// states give them: those hooks' states are restored, and the first that offers weights puts
// them in the model. Returns its word for them ("ema"), "" when no hook offers any.
std::string load_eval_weights(Trainer::Impl& I, const Files& files, const std::string& where);
void restore_files(Trainer::Impl& I, const Manifest& m, const Files& files,
                   const std::string& where);

}  // namespace wick
