#include "wick/state_dict.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <variant>

#include "state/state_dict_impl.hpp"

namespace wick {

StateDict::StateDict() : impl_(std::make_unique<Impl>()) {}
StateDict::~StateDict() = default;
StateDict::StateDict(const StateDict& o) : impl_(std::make_unique<Impl>(*o.impl_)) {}
StateDict& StateDict::operator=(const StateDict& o) {
  *impl_ = *o.impl_;
  return *this;
}
StateDict::StateDict(StateDict&&) noexcept = default;
StateDict& StateDict::operator=(StateDict&&) noexcept = default;

void StateDict::set_int(const std::string& key, std::int64_t v) {
  impl_->values[key] = v;
}
void StateDict::set_float(const std::string& key, double v) {
  impl_->values[key] = v;
}
void StateDict::set_string(const std::string& key, const std::string& v) {
  impl_->values[key] = v;
}
void StateDict::set_tensor(const std::string& key, const at::Tensor& t) {
  impl_->values[key] = t.detach().clone();
}

bool StateDict::has(const std::string& key) const {
  return impl_->values.count(key) > 0;
}

namespace {
template <class T>
const T& get(const StateDict::Impl& impl, const std::string& key, const char* type) {
  auto it = impl.values.find(key);
  if (it == impl.values.end())
    throw std::runtime_error("state has no '" + key + "' (a checkpoint from another version?)");
  if (auto* v = std::get_if<T>(&it->second)) return *v;
  throw std::runtime_error("state '" + key + "' is not " + type);
}
}  // namespace

std::int64_t StateDict::get_int(const std::string& key) const {
  return get<std::int64_t>(*impl_, key, "an integer");
}
double StateDict::get_float(const std::string& key) const {
  auto it = impl_->values.find(key);
  if (it != impl_->values.end())
    if (auto* i = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*i);
  return get<double>(*impl_, key, "a float");
}
std::string StateDict::get_string(const std::string& key) const {
  return get<std::string>(*impl_, key, "a string");
}
at::Tensor StateDict::get_tensor(const std::string& key) const {
  return get<at::Tensor>(*impl_, key, "a tensor");
}

StateDict::Kind StateDict::kind(const std::string& key) const {
  auto it = impl_->values.find(key);
  if (it == impl_->values.end()) throw std::runtime_error("state has no '" + key + "'");
  return static_cast<Kind>(it->second.index());
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  for (const auto& kv : impl_->values) out.push_back(kv.first);
  return out;
}
bool StateDict::empty() const {
  return impl_->values.empty();
}

}  // namespace wick
