// Named values a hook saves into checkpoints and reads back on resume.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace at {
class Tensor;
}

namespace wick {

class WICK_EXPORT StateDict {
 public:
  StateDict();
  ~StateDict();
  StateDict(const StateDict&);
  StateDict& operator=(const StateDict&);
  StateDict(StateDict&&) noexcept;
  StateDict& operator=(StateDict&&) noexcept;

  void set_int(const std::string& key, std::int64_t v);
  void set_float(const std::string& key, double v);
  void set_string(const std::string& key, const std::string& v);
  void set_tensor(const std::string& key, const at::Tensor& t);  // stored as a copy

  bool has(const std::string& key) const;
  // Getters throw std::runtime_error naming the key when it is missing or of another kind;
  // get_float also reads an integer (widened), as an integer is a number too.
  std::int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  at::Tensor get_tensor(const std::string& key) const;

  enum class Kind { integer, floating, string, tensor };
  Kind kind(const std::string& key) const;  // throws when missing
  std::vector<std::string> keys() const;
  bool empty() const;

  // Not exported with its class (wick/version.hpp).
  struct WICK_INTERNAL Impl;
  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace wick

WICK_PUBLIC_END
