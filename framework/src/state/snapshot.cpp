#include "state/snapshot.hpp"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "optim/hyperparameters.hpp"
#include "state/pickle_load.hpp"
#include "system/error_text.hpp"
#include "wick/sha256.hpp"
#include "wick/state_dict.hpp"

namespace wick {

namespace {

// state.pt's "configured" entry: optimizer NAME's group G's hyperparameter KEY.
std::string configured_key(const std::string& optimizer, std::size_t group,
                           const std::string& key) {
  return optimizer + "/" + std::to_string(group) + "/" + key;
}

// A task's, the data's or a hook's own save_state / load_state: what it throws (anything) is
// rethrown after `failed` ("hook 'ema' cannot load its state: "), without LibTorch's backtrace.
void named_state_call(const std::string& failed, const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    throw std::runtime_error(failed + without_backtraces(e.what()));
  } catch (...) {
    throw std::runtime_error(failed + "an exception that is not a std::exception");
  }
}

// str -> any: what pickle_save writes for a dict of mixed values.
using IDict = c10::impl::GenericDict;
IDict new_dict() {
  return IDict(c10::StringType::get(), c10::AnyType::get());
}

std::string pickle(const c10::IValue& v) {
  auto b = torch::pickle_save(v);
  return std::string(b.begin(), b.end());
}

// model.pt as torch.save writes a dict of tensors: pickle_save's archive without its type tags,
// which name a function (torch.jit._pickle.restore_type_tag) that PyTorch >= 2.6's torch.load
// refuses by default (weights_only). wick reads the dict back untyped either way.
std::string pickle_weights(const IDict& tensors) {
  std::string pickled;
  torch::jit::Pickler pickler([&](const char* b, std::size_t n) { pickled.append(b, n); }, nullptr,
                              nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(tensors);
  pickler.stop();
  std::string archive;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* b, std::size_t n) {
      archive.append(static_cast<const char*>(b), n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(),
                                       writer);
    writer.writeEndOfFile();
  }
  return archive;
}

// `device`: where the tensors go. The CPU unless a run restores its state: a GPU run's
// checkpoint read where CUDA is not in use (evaluate, predict, export, a checkpoint's
// inspection, a resume on a CPU) has its tensors mapped to the CPU, as torch.load's
// map_location would.
IDict unpickle_dict(const std::string& bytes, const std::string& what,
                    std::optional<c10::Device> device = c10::Device(c10::kCPU)) {
  c10::IValue v;
  try {
    v = load_pickle(bytes, device);
  } catch (const c10::Error& e) {
    throw std::runtime_error(what + " does not load: " + e.what_without_backtrace());
  }
  if (!v.isGenericDict()) throw std::runtime_error(what + " is not a dictionary");
  return v.toGenericDict();
}

IDict to_ivalue(const StateDict& sd) {
  IDict d = new_dict();
  for (const auto& k : sd.keys()) {
    switch (sd.kind(k)) {
      case StateDict::Kind::integer:
        d.insert(k, sd.get_int(k));
        break;
      case StateDict::Kind::floating:
        d.insert(k, sd.get_float(k));
        break;
      case StateDict::Kind::string:
        d.insert(k, sd.get_string(k));
        break;
      case StateDict::Kind::tensor:
        d.insert(k, sd.get_tensor(k));
        break;
    }
  }
  return d;
}

StateDict from_ivalue(const c10::IValue& v, const std::string& what) {
  if (!v.isGenericDict()) throw std::runtime_error(what + " is not a dictionary");
  StateDict sd;
  for (const auto& kv : v.toGenericDict()) {
    if (!kv.key().isString()) throw std::runtime_error(what + " has a key that is not a string");
    const auto key = kv.key().toStringRef();
    const auto x = kv.value();
    if (x.isInt())
      sd.set_int(key, x.toInt());
    else if (x.isDouble())
      sd.set_float(key, x.toDouble());
    else if (x.isString())
      sd.set_string(key, x.toStringRef());
    else if (x.isTensor())
      sd.set_tensor(key, x.toTensor());
    else
      throw std::runtime_error(what + " '" + key + "' has an unsupported type");
  }
  return sd;
}

c10::IValue get(const IDict& d, const std::string& key) {
  auto it = d.find(key);
  if (it == d.end()) throw std::runtime_error("state.pt has no '" + key + "'");
  return it->value();
}

std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

void check_offered_weights(const torch::nn::Module& model, const NamedTensors& offered,
                           const std::string& instance) {
  const auto mine = model.named_parameters();
  // As load_model names them ("[32, 16] Float"), whichever compiler built LibTorch.
  auto type = [](const at::Tensor& t) {
    return shape_str(t) + " " + c10::toString(t.scalar_type());
  };
  for (const auto& [name, t] : offered) {
    const auto* p = mine.find(name);
    if (!p || !t.defined() || p->sizes() != t.sizes() || p->dtype() != t.dtype())
      throw ModelMismatch("hook '" + instance + "' offers '" + name + "' " +
                          (t.defined() ? type(t) : std::string("(undefined)")) +
                          " for evaluation, which the model has " +
                          (p ? "as " + type(*p) : std::string("not")) +
                          "; its eval_weights must give parameters of the model as they are");
  }
}

std::string model_bytes(const torch::nn::Module& model, const NamedTensors& replaced) {
  IDict dict = new_dict();
  auto add = [&](const std::string& name, const at::Tensor& t) {
    const auto it = std::find_if(replaced.begin(), replaced.end(),
                                 [&](const auto& r) { return r.first == name; });
    dict.insert(name, (it == replaced.end() ? t : it->second).detach().cpu());
  };
  for (const auto& kv : model.named_parameters()) add(kv.key(), kv.value());
  for (const auto& kv : model.named_buffers()) add(kv.key(), kv.value());
  return pickle_weights(dict);
}

void load_model(torch::nn::Module& model, const std::string& bytes, const std::string& where) {
  auto dict = unpickle_dict(bytes, where + ": model.pt");
  std::vector<std::pair<std::string, at::Tensor>> mine;
  for (const auto& kv : model.named_parameters()) mine.emplace_back(kv.key(), kv.value());
  for (const auto& kv : model.named_buffers()) mine.emplace_back(kv.key(), kv.value());
  // Every mismatch at once, so that one look tells what changed.
  std::string bad;
  for (const auto& [name, t] : mine) {
    auto it = dict.find(name);
    if (it == dict.end() || !it->value().isTensor()) {
      bad += "\n  " + name + ": expected " + shape_str(t) + ", not in the checkpoint";
      continue;
    }
    const auto found = it->value().toTensor();
    if (found.sizes() != t.sizes() || found.scalar_type() != t.scalar_type())
      bad += "\n  " + name + ": expected " + shape_str(t) + " " +
             std::string(c10::toString(t.scalar_type())) + ", found " + shape_str(found) + " " +
             std::string(c10::toString(found.scalar_type()));
  }
  for (const auto& kv : dict) {
    const auto name = kv.key().toStringRef();
    if (std::none_of(mine.begin(), mine.end(), [&](const auto& x) { return x.first == name; }))
      bad +=
          "\n  " + name + ": found " +
          (kv.value().isTensor() ? shape_str(kv.value().toTensor()) : std::string("a non-tensor")) +
          " in the checkpoint, not in this model";
  }
  if (!bad.empty())
    throw ModelMismatch(where +
                        " does not match the model of this config (tensor: expected shape, "
                        "found shape):" +
                        bad + "\nuse the model configuration the checkpoint was trained with");
  torch::NoGradGuard ng;
  for (auto& [name, t] : mine) t.copy_(dict.at(name).toTensor());
}

namespace {

void set_rng(const StateDict& rng, bool cuda) {
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng.get_tensor("cpu"));
  }
  for (std::int64_t i = 0; cuda && rng.has("cuda" + std::to_string(i)); ++i) {
    if (i >= static_cast<std::int64_t>(torch::cuda::device_count())) break;
    auto gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng.get_tensor("cuda" + std::to_string(i)));
  }
}

// LibTorch's optimizer load allocates and loops by the counts the archive states: each is
// checked first against this run's optimizer, which the state must fit anyway.
void check_optimizer_counts(torch::serialize::InputArchive& a, const torch::optim::Optimizer& o,
                            const std::string& where) {
  auto count = [&](torch::serialize::InputArchive& from, const std::string& key, std::size_t want,
                   const std::string& what) {
    at::Tensor t;
    if (!from.try_read(key, t) || t.numel() != 1 || t.scalar_type() != at::kLong)
      throw CheckpointError(where + ": field '" + key + "' is missing or not a count");
    const auto n = t.item<std::int64_t>();
    if (n != static_cast<std::int64_t>(want))
      throw CheckpointError(where + ": field '" + key + "' says " + std::to_string(n) + " " + what +
                            ", this run's optimizer has " + std::to_string(want) +
                            " (a damaged checkpoint, one of another model or optimizer, or "
                            "one whose fit had a hook change the optimizer's groups)");
  };
  // LibTorch's layout: param_groups/{size, 0, 1, ...}, each group with params/size.
  torch::serialize::InputArchive pg;
  if (!a.try_read("param_groups", pg))
    throw CheckpointError(where + ": field 'param_groups' is missing");
  const auto& groups = o.param_groups();
  count(pg, "param_groups/size", groups.size(), "parameter groups");
  for (std::size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::InputArchive g;
    const auto key = "param_groups/" + std::to_string(i);
    if (!pg.try_read(key, g)) throw CheckpointError(where + ": field '" + key + "' is missing");
    count(g, "params/size", groups[i].params().size(), "parameters in group " + std::to_string(i));
  }
}

}  // namespace

void seed_generators(std::uint64_t seed, bool cuda) {
  if (cuda) {
    torch::manual_seed(seed);  // every generator, the GPUs' included
    return;
  }
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

Manifest snapshot_manifest(const SnapshotParts& run, const std::string& reason) {
  Manifest m;
  m.reason = reason;
  m.position = run.position;
  if (run.position.epoch == run.state.epoch) {  // not the next epoch's start (after_epoch)
    m.dealt_from_batch = run.epoch_start.first_batch;
    m.dealt_from_sample = run.epoch_start.offset;
  }
  m.optimizer_step = run.state.optimizer_step;
  m.micro_step = run.state.micro_step;
  m.samples_seen = run.state.samples_seen;
  m.records = run.records;
  m.run = run.identity;
  return m;
}

Files snapshot_files(SnapshotParts& run) {
  Files files;
  files.emplace_back("model.pt", model_bytes(run.model));
  {
    // One archive, each optimizer's state under its name.
    torch::serialize::OutputArchive a;
    for (auto& o : run.optimizers) {
      torch::serialize::OutputArchive sub;
      o.optimizer->save(sub);
      a.write(o.name, sub);
    }
    std::ostringstream out;
    a.save_to(out);
    files.emplace_back("optimizer.pt", out.str());
  }
  IDict d = new_dict();
  // The position and counts again inside the hashed files: the manifest is only a summary, and
  // a manifest edited to say otherwise is caught (check_agreement).
  StateDict step;
  step.set_int("epoch", run.position.epoch);
  step.set_int("batch", run.position.batch);
  step.set_int("records", run.records);
  step.set_int("optimizer_step", run.state.optimizer_step);
  step.set_int("micro_step", run.state.micro_step);
  step.set_int("samples_seen", run.state.samples_seen);
  step.set_int("skipped_steps", run.state.skipped_steps);
  // Bound to its run and to its sibling files (check_agreement): a folder that mixes two runs'
  // files is refused even when the manifest's hashes were rewritten to match.
  step.set_string("run_id", run.identity.id);
  for (const auto& [name, bytes] : files) step.set_string(name, sha256_hex(bytes));
  d.insert("step", to_ivalue(step));

  StateDict rng;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng.set_tensor("cpu", gen.get_state());
  }
  const auto gpus = run.cuda ? static_cast<std::int64_t>(torch::cuda::device_count()) : 0;
  for (std::int64_t i = 0; i < gpus; ++i) {
    auto gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i));
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng.set_tensor("cuda" + std::to_string(i), gen.get_state());
  }
  d.insert("rng", to_ivalue(rng));
  StateDict loop;
  run.save_loop(loop);
  d.insert("loop", to_ivalue(loop));
  // What the config gave each optimizer group, for a resume to compare with its own config.
  StateDict configured;
  for (const auto& o : run.optimizers) {
    if (!o.configured.empty() && *optimizer_name(*o.configured[0]))
      configured.set_string(o.name + "/name", optimizer_name(*o.configured[0]));
    for (std::size_t g = 0; g < o.configured.size(); ++g)
      for (const auto& [key, value] : hyperparameters(*o.configured[g]))
        configured.set_float(configured_key(o.name, g, key), value);
  }
  d.insert("configured", to_ivalue(configured));
  if (!run.config_toml.empty()) d.insert("config", run.config_toml);

  // Gradients pending inside an accumulation window (a save between micro-batches).
  IDict grads = new_dict();
  for (const auto& kv : run.model.named_parameters())
    if (kv.value().grad().defined()) grads.insert(kv.key(), kv.value().grad().detach().cpu());
  d.insert("grads", grads);

  // A save_state that throws is named: the error would otherwise be blamed on the hook that
  // asked for the checkpoint.
  auto saved = [](const std::string& whose, const std::function<void()>& save) {
    named_state_call(whose + " cannot save its state: ", save);
  };
  if (run.task.has_state()) {
    StateDict sd;
    saved("the task", [&] { run.task.save_state(sd); });
    d.insert("task", to_ivalue(sd));
  }
  // The training data's state as of the last consumed batch (loader threads may be ahead).
  if (run.train_data.has_state()) {
    StateDict sd;
    if (run.data_state)
      sd = *run.data_state;
    else
      saved("the training data", [&] { run.train_data.save_state(sd); });
    d.insert("data", to_ivalue(sd));
  }
  IDict hooks = new_dict();
  for (auto& [instance, hook] : run.stateful_hooks) {
    StateDict sd;
    Hook* h = hook;  // a structured binding cannot be captured in C++17
    saved("hook '" + instance + "'", [&] { h->save_state(sd); });
    hooks.insert(instance, to_ivalue(sd));
  }
  d.insert("hooks", hooks);
  files.emplace_back("state.pt", pickle(d));
  return files;
}

namespace {
const std::string& bytes_of(const Files& files, const char* name) {
  for (const auto& [n, b] : files)
    if (n == name) return b;
  throw CheckpointError(std::string("no ") + name);
}
}  // namespace

void check_agreement(const Manifest& m, const Files& files) {
  StateDict step;
  try {
    step = from_ivalue(get(unpickle_dict(bytes_of(files, "state.pt"), "state.pt"), "step"), "step");
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(e.what());
  }
  const std::pair<const char*, std::int64_t> mine[] = {
      {"epoch", m.position.epoch},  {"batch", m.position.batch},
      {"records", m.records},       {"optimizer_step", m.optimizer_step},
      {"micro_step", m.micro_step}, {"samples_seen", m.samples_seen}};
  for (const auto& [key, v] : mine) {
    if (!step.has(key) || step.kind(key) != StateDict::Kind::integer)
      throw CheckpointError(std::string("state.pt has no integer '") + key + "'");
    if (step.get_int(key) != v)
      throw CheckpointError("manifest.json does not agree with state.pt (" + std::string(key) +
                            ": " + std::to_string(v) + " against " +
                            std::to_string(step.get_int(key)) + ")");
  }
  // Checkpoints written before the binding have neither record; one alone is a mix-up.
  const bool bound = step.has("run_id");
  if (bound != !m.run.id.empty())
    throw CheckpointError(
        "manifest.json and state.pt are from different runs (one names its run, "
        "the other does not)");
  if (!bound) return;
  if (step.kind("run_id") != StateDict::Kind::string || step.get_string("run_id") != m.run.id)
    throw CheckpointError("state.pt is from another run than manifest.json (run " +
                          (step.kind("run_id") == StateDict::Kind::string
                               ? step.get_string("run_id")
                               : std::string("?")) +
                          " against " + m.run.id +
                          "): a folder mixed from two runs' checkpoints; use a whole checkpoint "
                          "folder as wick wrote it");
  for (const auto& [name, hash] : m.verified_sha256) {
    if (name == "state.pt") continue;
    if (!step.has(name) || step.kind(name) != StateDict::Kind::string ||
        step.get_string(name) != hash)
      throw CheckpointError(name +
                            " is not the one state.pt was saved with: a folder mixed from "
                            "two runs' checkpoints; use a whole checkpoint folder as wick "
                            "wrote it");
  }
}

void load_model_file(torch::nn::Module& model, const Files& files, const std::string& where) {
  load_model(model, bytes_of(files, "model.pt"), where);
}

std::string load_eval_weights(torch::nn::Module& model, const std::vector<HookEntry>& hooks,
                              const Files& files, const std::string& where) {
  auto saved = get(unpickle_dict(bytes_of(files, "state.pt"), where + ": state.pt"), "hooks");
  if (!saved.isGenericDict()) throw std::runtime_error(where + ": state.pt holds no hook states");
  const auto states = saved.toGenericDict();
  // Hooks built against SDK 2.4 or older have no eval_weights (it is not in their vtable).
  NamedTensors offered;
  for (const auto& h : hooks) {
    if (h.api_minor < 5 || !h.hook->has_state()) continue;
    const auto it = states.find(h.instance);
    if (it == states.end()) continue;
    h.hook->load_state(from_ivalue(it->value(), "hook '" + h.instance + "' state"));
    const auto word = h.hook->eval_weights(model, offered);
    if (word.empty()) continue;
    try {
      check_offered_weights(model, offered, h.instance);
    } catch (const ModelMismatch& e) {
      throw ModelMismatch(where + ": " + e.what());
    }
    const auto mine = model.named_parameters();
    torch::NoGradGuard ng;
    for (const auto& [name, t] : offered) mine.find(name)->detach().copy_(t);
    return word;
  }
  return "";
}

namespace {

// A setting in a notice: as the config would write it, to 8 significant digits.
std::string shown(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.8g", v);
  return buf;
}

// Another optimizer kind cannot take the checkpoint's state (Adam's moments are not SGD's
// momentum): said in the config's words before LibTorch fails on the state's layout.
void check_optimizer_names(const std::vector<NamedOptimizer>& optimizers, const IDict& d,
                           const std::string& where) {
  auto it = d.find("configured");
  if (it == d.end()) return;
  const StateDict then = from_ivalue(it->value(), "configured");
  for (const auto& o : optimizers) {
    const std::string key = o.name + "/name";
    if (o.configured.empty() || !then.has(key)) continue;
    const std::string was = then.get_string(key), now = optimizer_name(*o.configured[0]);
    if (was == now) continue;
    const std::string table = o.name == "optimizer" ? "[optimizer]" : "[optimizers." + o.name + "]";
    throw std::runtime_error(where + ": optimizer '" + o.name + "' was \"" + was +
                             "\" in the checkpoint's run and is \"" + now +
                             "\" in this config; its state does not carry over. Resume with " +
                             table + " name = \"" + was +
                             "\", or train afresh in another checkpoint folder");
  }
}

// Where this run's config sets an optimizer group's hyperparameters otherwise than the
// checkpoint's run did, the group takes the config's (its lr too when the config changed it;
// otherwise the lr stays where the checkpoint's schedule left it). Returns one line per
// group changed. A checkpoint written before the config was recorded compares nothing.
std::string take_changed_settings(std::vector<NamedOptimizer>& optimizers, const IDict& d) {
  auto it = d.find("configured");
  if (it == d.end()) return {};
  const StateDict then = from_ivalue(it->value(), "configured");
  std::string notes;
  for (auto& o : optimizers) {
    auto& groups = o.optimizer->param_groups();
    for (std::size_t g = 0; g < o.configured.size() && g < groups.size(); ++g) {
      std::string changed;
      bool lr_changed = false;
      for (const auto& [key, now] : hyperparameters(*o.configured[g])) {
        const auto k = configured_key(o.name, g, key);
        if (!then.has(k) || then.get_float(k) == now) continue;
        changed += (changed.empty() ? " " : ", ") + key + " " + shown(then.get_float(k)) + " -> " +
                   shown(now);
        lr_changed = lr_changed || key == "lr";
      }
      if (changed.empty()) continue;
      const double lr = groups[g].options().get_lr();
      groups[g].set_options(o.configured[g]->clone());
      if (!lr_changed) groups[g].options().set_lr(lr);
      notes +=
          "\n  optimizer '" + o.name + "', parameter group " + std::to_string(g) + ":" + changed;
    }
  }
  return notes;
}

}  // namespace

Restored restore_files(SnapshotParts& run, const Manifest& m, const Files& files,
                       const std::string& where) {
  auto bytes_of = [&](const char* name) -> const std::string& {
    return wick::bytes_of(files, name);
  };
  load_model_file(run.model, files, where);
  // A GPU run's tensors where it saved them (hooks' states, the epoch's values), as before.
  auto d = unpickle_dict(bytes_of("state.pt"), where + ": state.pt",
                         run.cuda ? std::nullopt : std::optional(c10::Device(c10::kCPU)));
  check_optimizer_names(run.optimizers, d, where);
  try {
    std::istringstream in(bytes_of("optimizer.pt"));
    torch::serialize::InputArchive a;
    // Beside the parameters, wherever the checkpoint's run kept them.
    const auto params = run.model.parameters();
    a.load_from(in, params.empty() ? c10::Device(c10::kCPU) : params.front().device());
    for (auto& o : run.optimizers) {
      torch::serialize::InputArchive sub;
      if (!a.try_read(o.name, sub))
        throw std::runtime_error(where + ": optimizer.pt holds no state for optimizer '" + o.name +
                                 "' (the checkpoint was trained with other optimizers)");
      check_optimizer_counts(sub, *o.optimizer,
                             where + ": optimizer.pt, optimizer '" + o.name + "'");
      o.optimizer->load(sub);
    }
  } catch (const c10::Error& e) {
    throw std::runtime_error(where +
                             ": the optimizer state does not load (another optimizer in the "
                             "config?): " +
                             e.what_without_backtrace());
  }
  auto step = from_ivalue(get(d, "step"), "step");
  auto& s = run.state;
  s.epoch = m.position.epoch;
  s.batch_idx = m.position.batch;
  s.optimizer_step = step.get_int("optimizer_step");
  s.micro_step = step.get_int("micro_step");
  s.samples_seen = step.get_int("samples_seen");
  s.skipped_steps = step.get_int("skipped_steps");
  set_rng(from_ivalue(get(d, "rng"), "rng"), run.cuda);
  run.load_loop(from_ivalue(get(d, "loop"), "loop"));
  Restored out;
  out.optimizer_changes = take_changed_settings(run.optimizers, d);
  if (auto it = d.find("config"); it != d.end() && it->value().isString())
    out.config_toml = it->value().toStringRef();

  auto gv = get(d, "grads");
  if (!gv.isGenericDict()) throw std::runtime_error(where + ": state.pt grads is not a dict");
  auto grads = gv.toGenericDict();
  for (auto& kv : run.model.named_parameters()) {
    auto it = grads.find(kv.key());
    if (it != grads.end() &&
        (!it->value().isTensor() || it->value().toTensor().sizes() != kv.value().sizes()))
      throw std::runtime_error(where + ": the pending gradient of '" + kv.key() +
                               "' does not fit the parameter");
    kv.value().mutable_grad() =
        it == grads.end() ? at::Tensor() : it->value().toTensor().to(kv.value().device());
  }

  if (run.task.has_state()) {
    auto it = d.find("task");
    if (it == d.end())
      std::fprintf(stderr, "wick: warning: %s has no state for the task; it starts afresh\n",
                   where.c_str());
    else
      named_state_call(where + ": the task cannot load its state: ",
                       [&] { run.task.load_state(from_ivalue(it->value(), "task state")); });
  }

  if (run.train_data.has_state()) {
    auto it = d.find("data");
    if (it == d.end()) {
      std::fprintf(stderr,
                   "wick: warning: %s has no state for the training data; it starts afresh\n",
                   where.c_str());
    } else {
      named_state_call(where + ": the training data cannot load its state: ", [&] {
        auto sd = std::make_shared<StateDict>(from_ivalue(it->value(), "data state"));
        run.train_data.load_state(*sd);
        run.data_state = std::move(sd);
      });
    }
  }

  auto hv = get(d, "hooks");
  if (!hv.isGenericDict()) throw std::runtime_error(where + ": state.pt hooks is not a dict");
  auto hooks = hv.toGenericDict();
  std::vector<std::string> used;
  for (auto& [instance, hook] : run.stateful_hooks) {
    auto it = hooks.find(instance);
    if (it == hooks.end()) {
      std::fprintf(stderr, "wick: warning: %s has no state for hook '%s'; it starts afresh\n",
                   where.c_str(), instance.c_str());
      continue;
    }
    // (Bound by name: C++17 captures no structured binding.)
    named_state_call(where + ": hook '" + instance + "' cannot load its state: ",
                     [&, h = hook, name = instance] {
                       h->load_state(from_ivalue(it->value(), "hook '" + name + "' state"));
                     });
    used.push_back(instance);
  }
  for (const auto& kv : hooks)
    if (std::find(used.begin(), used.end(), kv.key().toStringRef()) == used.end())
      std::fprintf(stderr,
                   "wick: warning: %s holds state for hook '%s', which this config does not "
                   "enable; it is ignored\n",
                   where.c_str(), kv.key().toStringRef().c_str());
  return out;
}

}  // namespace wick
