#include "wick/outputs.hpp"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "records/run_lock.hpp"

namespace wick {

namespace {
// JSON has no NaN or infinity: write null so that readers do not choke.
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}
}  // namespace

bool is_record_field(std::string_view key) {
  return key == "kind" || key == "epoch" || key == "step" || key == "samples_seen" ||
         key == "time_s";
}

std::string record_to_json(const Record& r) {
  nlohmann::ordered_json j;
  j["kind"] = r.kind == Record::Kind::step ? "step" : "epoch";
  j["epoch"] = r.epoch;
  j["step"] = r.step;
  j["samples_seen"] = r.samples_seen;
  j["time_s"] = r.time_s;
  for (const auto& [k, v] : r.values) j[k] = number(v);
  return j.dump();
}

Record record_from_json(const std::string& line) {
  const auto j = nlohmann::json::parse(line);
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  Record r;
  const auto kind = j.at("kind").get<std::string>();
  if (kind != "step" && kind != "epoch") throw std::runtime_error("kind '" + kind + "'");
  r.kind = kind == "step" ? Record::Kind::step : Record::Kind::epoch;
  r.epoch = j.at("epoch").get<std::int64_t>();
  r.step = j.at("step").get<std::int64_t>();
  r.samples_seen = j.at("samples_seen").get<std::int64_t>();
  r.time_s = j.at("time_s").get<double>();
  // nlohmann's json keeps keys sorted; the record's own order comes from the line.
  nlohmann::ordered_json o = nlohmann::ordered_json::parse(line);
  for (const auto& [k, v] : o.items()) {
    if (is_record_field(k)) continue;
    if (v.is_null())
      r.values.emplace_back(k, std::nan(""));
    else if (v.is_number())
      r.values.emplace_back(k, v.get<double>());
    else
      throw std::runtime_error("value of '" + k + "' is not a number");
  }
  return r;
}

std::string summary_json(const Summary& s) {
  nlohmann::ordered_json j;
  j["status"] = s.status;
  if (!s.error.empty()) j["error"] = s.error;
  if (!s.stop_reason.empty()) j["stop_reason"] = s.stop_reason;
  j["epochs"] = s.epochs;
  j["optimizer_steps"] = s.optimizer_steps;
  j["micro_steps"] = s.micro_steps;
  j["samples_seen"] = s.samples_seen;
  j["skipped_steps"] = s.skipped_steps;
  j["cancelled_steps"] = s.cancelled_steps;
  j["cancelled_epochs"] = s.cancelled_epochs;
  j["num_processes"] = s.num_processes;
  if (s.batch_size > 0) j["batch_size"] = s.batch_size;
  if (s.threads > 0) {
    j["threads"] = s.threads;
    j["threads_from"] = s.threads_from;
  }
  if (!s.batch_size_search.empty())
    j["batch_size_search"] = nlohmann::ordered_json::parse(s.batch_size_search);
  j["train_samples_per_s"] = number(s.train_samples_per_s);
  j["train_cpu_s"] = number(s.train_cpu_s);
  j["wall_s"] = number(s.wall_s);
  for (const auto& [k, v] : s.valid) j[k] = number(v);
  for (const auto& [k, v] : s.logged)
    if (!j.contains(k)) j[k] = number(v);
  j["model_fingerprint"] = s.model_fingerprint;
  if (s.start_to_first_step_s >= 0) j["start_to_first_step_s"] = number(s.start_to_first_step_s);
  if (!s.model_file.empty()) {
    j["model_file"] = s.model_file;
    j["model_weights"] = s.model_weights;
  }
  if (!s.config.empty()) {
    j["config"] = s.config;
    j["overrides"] = s.overrides;
  }
  if (s.flops_per_step > 0) {
    j["flops_per_step"] = number(s.flops_per_step);
    j["peak_gflops"] = number(s.peak_gflops);
  }
  if (!s.profile_json.empty()) j["profile"] = nlohmann::ordered_json::parse(s.profile_json);
  if (!s.memory_json.empty()) j["memory"] = nlohmann::ordered_json::parse(s.memory_json);
  return j.dump(2) + "\n";
}

void write_summary(const std::filesystem::path& file, const Summary& s) {
  write_file_atomic(file, summary_json(s));
}

bool write_failed_start_summary(const std::filesystem::path& output_dir, const std::string& error,
                                const std::string& config,
                                const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (!std::filesystem::is_directory(output_dir, ec)) return false;
  RunLock lock;
  try {
    lock.acquire(output_dir);
  } catch (const std::exception&) {
    return false;  // another fit's folder, or not ours to write
  }
  Summary s;
  s.status = "failed";
  s.error = error;
  s.config = config;
  s.overrides = overrides;
  write_summary(output_dir / "summary.json", s);
  return true;
}

}  // namespace wick
