// The [trainer] options, one entry each: a new option is one entry here plus its field in
// TrainerOptions (wick/options.hpp), whose default is the only one written; and, if plugins
// may see it, a line of view_options().
#include "config/trainer_options.hpp"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "config/toml_text.hpp"  // printable
#include "wick/config.hpp"       // parse_device
#include "wick/files.hpp"        // toml_float

namespace wick {

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
// trainer.threads above this is refused: creating that many threads takes long and only slows.
constexpr std::int64_t kMaxThreads = 1024;
const std::vector<std::string> kNanPolicies = {"error", "skip", "ignore"};  // NanPolicy's order

// An output folder that is empty or is the filesystem root, after "..", "." and symbolic
// links (relative paths are taken from the current directory, as the trainer does).
bool resolves_to_root(const std::string& dir) {
  if (dir.empty()) return true;
  std::error_code ec;
  const fs::path abs = fs::absolute(dir, ec);
  if (ec) return false;
  if (abs.lexically_normal() == abs.root_path()) return true;
  const fs::path canon = fs::weakly_canonical(abs, ec);
  return !ec && canon == canon.root_path();
}

std::string quoted(const std::string& s) {
  return "\"" + s + "\"";
}

// A default as TOML text (the schema's form): a float keeps its point so that it reads back as
// a float.
std::string toml_default(std::int64_t v) {
  return std::to_string(v);
}
std::string toml_default(bool v) {
  return v ? "true" : "false";
}
std::string toml_default(const std::string& v) {
  return quoted(v);
}
std::string toml_default(double v) {
  return toml_float(v, 17);  // parsed back as TOML, whatever locale a host program set
}

template <class T>
constexpr ParamType type_of() {
  if constexpr (std::is_same_v<T, bool>) return ParamType::boolean;
  if constexpr (std::is_same_v<T, std::int64_t>) return ParamType::integer;
  if constexpr (std::is_same_v<T, double>) return ParamType::floating;
  if constexpr (std::is_same_v<T, std::string>) return ParamType::string;
}

template <class T>
T get(const Params& p, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) return p.get_bool(key);
  if constexpr (std::is_same_v<T, std::int64_t>) return p.get_int(key);
  if constexpr (std::is_same_v<T, double>) return p.get_float(key);
  if constexpr (std::is_same_v<T, std::string>) return p.get_string(key);
}

// An option stored as it is written: `must` returns "" or what the value must be.
template <class T>
TrainerOption plain(const char* key, T TrainerOptions::*field, const char* help,
                    std::function<std::string(const T&)> must = {}) {
  return {{key, type_of<T>(), toml_default(TrainerOptions{}.*field), help},
          [key = std::string(key), field, must](const Params& p, TrainerOptions& o) {
            o.*field = get<T>(p, key);
            return must ? must(o.*field) : std::string();
          }};
}

std::function<std::string(const std::int64_t&)> at_least(std::int64_t lo, std::string must) {
  return [lo, must](const std::int64_t& v) { return v >= lo ? std::string() : must; };
}
std::function<std::string(const std::int64_t&)> between(std::int64_t lo, std::int64_t hi,
                                                        std::string must) {
  return
      [lo, hi, must](const std::int64_t& v) { return v >= lo && v <= hi ? std::string() : must; };
}

std::vector<TrainerOption> make_options() {
  const TrainerOptions d;
  const std::string int_max = std::to_string(kIntMax);
  return {
      plain("epochs", &TrainerOptions::epochs, "epochs to train",
            at_least(0, "must be >= 0 (0: nothing trained)")),
      plain("seed", &TrainerOptions::seed, "seed for initialisation and the sample order"),
      // "auto" is taken out before the table is validated (Config), so this reads an integer.
      plain("batch_size", &TrainerOptions::batch_size,
            "training batch size per process, or \"auto\": the fastest power of two (CPU), the "
            "largest that fits (CUDA)",
            // Batch sizes stay far from int64 overflow in the batch arithmetic.
            between(1, kIntMax, "must be between 1 and " + int_max)),
      plain("max_batch_size", &TrainerOptions::max_batch_size,
            "batch_size = \"auto\": the largest tried",
            between(1, kIntMax, "must be between 1 and " + int_max)),
      plain("valid_batch_size", &TrainerOptions::valid_batch_size,
            "validation batch size (0: batch_size)",
            between(0, kIntMax, "must be between 0 (same as batch_size) and " + int_max)),
      plain("shuffle", &TrainerOptions::shuffle, "shuffle the training set each epoch"),
      plain("drop_last", &TrainerOptions::drop_last, "drop the last, short training batch"),
      plain("max_steps", &TrainerOptions::max_steps,
            "stop after this many optimizer steps (0: off)",
            at_least(0, "must be >= 0 (0: no limit)")),
      plain("log_every", &TrainerOptions::log_every,
            "write a step record every N batches (accumulating, at the window's end; 0: off)",
            at_least(0, "must be >= 0 (0: epoch records only)")),
      // "auto" (auto_threads), the default, is taken out before validation like batch_size's.
      {{"threads", ParamType::integer, d.auto_threads ? quoted("auto") : toml_default(d.threads),
        "intra-op threads, or \"auto\": the cores free at the start, shared among this "
        "machine's ranks (OMP_NUM_THREADS when set); 0: LibTorch's default"},
       [](const Params& p, TrainerOptions& o) {
         o.threads = p.get_int("threads");  // 0 with auto_threads
         return between(0, kMaxThreads,
                        "must be \"auto\" (the default), 0 (LibTorch's default) or at most " +
                            std::to_string(kMaxThreads) +
                            "; more threads than cores only slows training, so set at most the "
                            "number of cores (`wick doctor` shows it)")(o.threads);
       }},
      plain("num_workers", &TrainerOptions::num_workers, "threads loading batches ahead (0: none)",
            between(
                0, kMaxThreads,
                "must be between 0 (load on the main thread) and " + std::to_string(kMaxThreads))),
      plain("data_on_device", &TrainerOptions::data_on_device,
            "keep a training set held in tensors on the CUDA device: batches gathered there, "
            "no copy per step"),
      plain("steps_per_epoch", &TrainerOptions::steps_per_epoch,
            "batches per epoch (0: from the data)", at_least(0, "must be >= 0 (0: from the data)")),
      {{"device", ParamType::string, quoted(d.auto_device ? "auto" : d.device.str()),
        "cpu, cuda, cuda:N or auto"},
       [](const Params& p, TrainerOptions& o) {
         const auto device = p.get_string("device");
         const auto parsed = parse_device(device);
         o.auto_device = device == "auto";
         if (parsed) o.device = *parsed;
         return o.auto_device || (parsed && parsed->index <= 127)
                    ? std::string()
                    : "must be \"cpu\", \"cuda\", \"cuda:N\" (N from 0 to 127) or \"auto\", not "
                      "\"" +
                          printable(device) + "\"";
       }},
      // A choice: the validator has checked the value (with a suggestion).
      {{"nan_policy", ParamType::choice, quoted(kNanPolicies[static_cast<int>(d.nan_policy)]),
        "non-finite loss: error, skip or ignore", kNanPolicies},
       [](const Params& p, TrainerOptions& o) {
         const auto v = p.get_string("nan_policy");
         o.nan_policy = v == "skip"     ? NanPolicy::skip
                        : v == "ignore" ? NanPolicy::ignore
                                        : NanPolicy::error;
         return std::string();
       }},
      plain<std::string>("output_dir", &TrainerOptions::output_dir, "run directory",
                         [](const std::string& dir) {
                           if (!resolves_to_root(dir)) return std::string();
                           return dir.empty() ? std::string(
                                                    "must name a run folder, not be empty (e.g. "
                                                    "\"runs/my-run\")")
                                              : "must name a run folder, not the filesystem "
                                                "root (\"" +
                                                    printable(dir) + "\" resolves to /)";
                         }),
      plain("save_model", &TrainerOptions::save_model,
            "write the final weights to output_dir/model.pt when the fit ends"),
      plain("flops", &TrainerOptions::flops,
            "count the FLOPs of a training step; log train/flops_per_s"),
      plain<double>("peak_gflops", &TrainerOptions::peak_gflops,
                    "peak GFLOP/s for train/flops_utilization (0: a probe measures it)",
                    [](const double& v) {
                      return v >= 0 && std::isfinite(v)
                                 ? std::string()
                                 : "must be >= 0 (0: measured with a short matrix-product probe)";
                    }),
  };
}

}  // namespace

const std::vector<TrainerOption>& trainer_options() {
  static const std::vector<TrainerOption> options = make_options();
  return options;
}

std::vector<ParamInfo> trainer_schema() {
  std::vector<ParamInfo> schema;
  for (const auto& o : trainer_options()) schema.push_back(o.info);
  return schema;
}

void view_options(const TrainerOptions& o, const Device& device, RunInfo& r) {
  r.device = device;
  r.seed = o.seed;
  r.epochs = o.epochs;
  r.max_steps = o.max_steps;
  r.batch_size = o.batch_size;
  r.valid_batch_size = o.valid_batch_size > 0 ? o.valid_batch_size : o.batch_size;
  r.shuffle = o.shuffle;
  r.drop_last = o.drop_last;
  r.nan_policy = o.nan_policy;
}

}  // namespace wick
