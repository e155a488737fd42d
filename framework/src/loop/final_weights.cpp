// What a trained run leaves to be used: the final weights written when a fit ends
// (output_dir/model.pt), the weights a hook keeps for evaluation (Hook::eval_weights), and
// loading either into a Trainer for evaluate, predict and export.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "loop/model_parts.hpp"
#include "loop/trainer_impl.hpp"
#include "wick/config.hpp"
#include "wick/files.hpp"

namespace wick {

namespace fs = std::filesystem;

std::string Trainer::Impl::eval_weights(NamedTensors& out) const {
  for (const auto& h : dispatch.hooks()) {
    // A hook built against SDK 2.4 or older has no eval_weights in its vtable.
    if (h.api_minor < 5) continue;
    out.clear();
    // A hook that fails to offer costs its weights, not the trained ones (save_final_weights).
    const std::string failed = "plugin '" + h.plugin + "' (instance '" + h.instance +
                               "') failed to offer its weights for evaluation (eval_weights): ";
    std::string word;
    try {
      word = h.hook->eval_weights(*model, out);
    } catch (const std::exception& e) {
      throw ModelMismatch(failed + e.what());
    } catch (...) {
      throw ModelMismatch(failed + "an exception that is not a std::exception");
    }
    if (word.empty()) continue;
    check_offered_weights(*model, out, h.instance);
    return word;
  }
  out.clear();
  return "";
}

bool Trainer::Impl::final_weights_due(const FitResult& res, bool ended_in_step) const {
  // The same on every rank (a gather for them is collective).
  if (!opt.save_model) return false;
  // A failure inside a step may have left the weights half updated; nothing trained, nothing
  // to keep.
  if (ended_in_step || (state.optimizer_step == 0 && !loop.resume.resumed())) return false;
  // Nor a resume that trained nothing and did not complete (refused at its start, stopped
  // before its first batch): its weights are its checkpoint's, which keeps them, and an
  // earlier run's model.pt (from a later point, when an older checkpoint was named) stays.
  if (loop.resume.resumed() && times.samples_this_run == 0 &&
      res.status != FitResult::Status::completed)
    return false;
  // Nor are weights that took steps from a non-finite loss (found now or earlier).
  return !steps.loss_check.failed();
}

void Trainer::Impl::save_final_weights(FitResult& res, bool ended_in_step) {
  if (!final_weights_due(res, ended_in_step) || !writes_outputs() || !lock.held()) return;
  // Sharded weights are whole when a fit runs its course, or gathered by end_fit when every
  // rank ends at one point (a stop signal's agreed step). After a failure or a hook's
  // CancelFit a rank may be gone: the last checkpoint holds them whole.
  if (!dp.weights_whole()) {
    std::fprintf(stderr,
                 "wick: model.pt not written: the data-parallel strategy shards the run over the "
                 "ranks and the fit ended on one rank (a failure or a CancelFit), where the "
                 "weights cannot be gathered; its last checkpoint holds them whole\n");
    return;
  }
  steps.loss_check.verify(/*across_ranks=*/false);  // rank 0 alone writes model.pt
  // Weights another rank's non-finite loss reached, which rank 0's own losses do not show.
  if (const auto name = opt.nan_policy == NanPolicy::error ? first_non_finite(*model) : "";
      !name.empty()) {
    std::fprintf(stderr,
                 "wick: model.pt not written: parameter '%s' holds values that are not finite "
                 "(a non-finite loss, on this rank or another); the last checkpoint holds the "
                 "last good weights\n",
                 name.c_str());
    return;
  }
  NamedTensors offered;
  std::string word, refused;
  try {
    word = eval_weights(offered);
  } catch (const ModelMismatch& e) {
    // A hook's bad offer costs its weights, not the trained ones.
    refused = e.what();
    offered.clear();
  }
  const auto file = fs::path(run.output_dir) / "model.pt";
  write_file_atomic(file.string(), model_bytes(*model, offered));
  res.model_file = file.string();
  res.model_weights = word.empty() ? "trained" : word;
  if (!refused.empty()) throw std::runtime_error(refused + " (model.pt holds the trained weights)");
}

CheckpointInfo Trainer::load_weights(const std::string& folder, bool evaluation) {
  auto& I = *impl_;
  const fs::path dir = fs::absolute(folder).lexically_normal();
  const auto where = "checkpoint '" + dir.string() + "'";
  Files files;
  Manifest m;
  try {
    m = read_checkpoint(dir, &files);
    check_agreement(m, files);
  } catch (const CheckpointError& e) {
    throw CheckpointError(where + " cannot be used: " + e.what());
  }
  I.weights_loaded.clear();
  try {
    wick::load_model_file(*I.model, files, where);
    if (evaluation)
      I.weights_loaded = load_eval_weights(*I.model, I.dispatch.hooks(), files, where);
  } catch (const ModelMismatch& e) {
    throw ConfigError(e.what());  // the config's model is not the checkpoint's
  }
  std::uint64_t bytes = 0;
  for (const auto& f : files) bytes += f.second.size();
  return checkpoint_info(dir, m, bytes);
}

void Trainer::load_model_file(const std::string& file) {
  auto& I = *impl_;
  const auto where = "'" + file + "'";
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(where + ": cannot read it");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  try {
    load_model(*I.model, bytes.str(), where);
  } catch (const ModelMismatch& e) {
    throw ConfigError(e.what());
  } catch (const std::runtime_error& e) {
    throw ConfigError(std::string(e.what()) + " (not a model.pt that wick wrote)");
  }
  I.weights_loaded.clear();
}

const std::string& Trainer::weights_loaded() const {
  return impl_->weights_loaded;
}

}  // namespace wick
