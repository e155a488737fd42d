#include "wick/params.hpp"

#include <climits>  // NAME_MAX
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "config/params_impl.hpp"

namespace wick {

Params::Params() : impl_(std::make_unique<Impl>()) {}
Params::~Params() = default;
Params::Params(Params&&) noexcept = default;
Params& Params::operator=(Params&&) noexcept = default;

const std::string& Params::plugin() const {
  return impl_->plugin;
}
const std::string& Params::instance() const {
  return impl_->instance;
}

namespace {
const Params::Impl::Entry& lookup(const Params::Impl& impl, std::string_view key) {
  auto it = impl.entries.find(key);
  if (it == impl.entries.end())
    throw ConfigError("plugin '" + impl.plugin + "' read parameter '" + std::string(key) +
                      "', which it did not declare (a bug in the plugin: declare it in its "
                      "PluginDef)");
  if (!it->second.set)
    throw ConfigError("plugin '" + impl.plugin + "' read parameter '" + std::string(key) +
                      "', which is not set; check has() first");
  return it->second;
}

template <class T>
const T& get_as(const Params::Impl& impl, std::string_view key, const char* type) {
  const auto& e = lookup(impl, key);
  if (auto* v = std::get_if<T>(&e.value)) return *v;
  throw ConfigError("plugin '" + impl.plugin + "' read parameter '" + std::string(key) + "' as " +
                    type + ", but declared it as " + std::string(to_string(e.type)));
}
}  // namespace

bool Params::has(std::string_view key) const {
  auto it = impl_->entries.find(key);
  return it != impl_->entries.end() && it->second.set;
}
bool Params::get_bool(std::string_view key) const {
  return get_as<bool>(*impl_, key, "bool");
}
std::int64_t Params::get_int(std::string_view key) const {
  return get_as<std::int64_t>(*impl_, key, "int");
}
double Params::get_float(std::string_view key) const {
  return get_as<double>(*impl_, key, "float");
}
std::string Params::get_string(std::string_view key) const {
  return get_as<std::string>(*impl_, key, "string");
}
std::vector<std::int64_t> Params::get_int_list(std::string_view key) const {
  return get_as<std::vector<std::int64_t>>(*impl_, key, "int list");
}
std::vector<double> Params::get_float_list(std::string_view key) const {
  return get_as<std::vector<double>>(*impl_, key, "float list");
}
std::vector<std::string> Params::get_string_list(std::string_view key) const {
  return get_as<std::vector<std::string>>(*impl_, key, "string list");
}

std::string Params::get_path(std::string_view key) const {
  std::filesystem::path p = get_as<std::string>(*impl_, key, "path (a string)");
  if (p.is_relative()) p = std::filesystem::path(impl_->base_dir) / p;
  return std::filesystem::absolute(p).lexically_normal().string();
}

std::string Params::get_output_file(std::string_view key) const {
  namespace fs = std::filesystem;
  const fs::path f = get_as<std::string>(*impl_, key, "file name (a string)");
  if (f.empty()) throw error(key, "must not be empty");
  const fs::path out = impl_->run.output_dir;
  const auto full = (f.is_absolute() ? f : out / f).lexically_normal();
  std::error_code ec;
  const auto name = f.filename();
  if (name.empty() || name == "." || name == ".." || fs::is_directory(full, ec))
    throw error(key, "names a folder ('" + full.string() + "'), not a file; give a file name");
  // Files are written whole under NAME.tmp first (write_file_atomic), which must fit too.
  if (name.string().size() + 4 > NAME_MAX)
    throw error(key, "is a file name of " + std::to_string(name.string().size()) +
                         " bytes; with the '.tmp' its writes add it passes the file system's " +
                         std::to_string(NAME_MAX) + ": give a shorter one");
  if (!out.empty())
    for (const char* own : {"metrics.jsonl", "summary.json", "model.pt", "wick.lock"}) {
      std::error_code e1, e2;
      const auto a = fs::weakly_canonical(full, e1), b = fs::weakly_canonical(out / own, e2);
      if (!e1 && !e2 && a == b)
        throw error(key, "is the run's own " + std::string(own) +
                             ", which the trainer writes; give another file name");
    }
  return full.string();
}

const RunInfo& Params::run() const {
  return impl_->run;
}

ConfigError Params::error(std::string_view message) const {
  std::string section = impl_->section.empty() ? "[hooks." + impl_->instance + "]" : impl_->section;
  return ConfigError((impl_->table_where.empty() ? std::string() : impl_->table_where + ": ") +
                     section + " (plugin '" + impl_->plugin + "') " + std::string(message));
}

ConfigError Params::error(std::string_view key, std::string_view message) const {
  std::string where;
  auto it = impl_->entries.find(key);
  if (it != impl_->entries.end() && !it->second.where.empty())
    where = it->second.where;
  else
    where = impl_->table_where;
  std::string section = impl_->section.empty() ? "[hooks." + impl_->instance + "]" : impl_->section;
  return ConfigError((where.empty() ? std::string() : where + ": ") + "'" + std::string(key) +
                     "' in " + section + " (plugin '" + impl_->plugin + "') " +
                     std::string(message));
}

}  // namespace wick
