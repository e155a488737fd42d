// Metrics records: what the trainer writes to metrics.jsonl and hands to metrics sinks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

struct Record {
  enum class Kind : std::uint8_t { step, epoch };
  Kind kind = Kind::step;
  std::int64_t epoch = 0;  // 0-based
  std::int64_t step = 0;   // optimizer steps taken when the record was made
  std::int64_t samples_seen = 0;
  double time_s = 0;                                   // seconds since the fit started
  std::vector<std::pair<std::string, double>> values;  // e.g. "train/loss", "valid/accuracy"

  std::optional<double> get(const std::string& key) const {
    for (const auto& [k, v] : values)
      if (k == key) return v;
    return std::nullopt;
  }
};

}  // namespace wick

WICK_PUBLIC_END
