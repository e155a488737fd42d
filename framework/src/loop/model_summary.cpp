#include "wick/model_summary.hpp"

#include "state/snapshot.hpp"
#include "wick/config.hpp"
#include "wick/data_parallel.hpp"
#include "wick/memory_estimate.hpp"
#include "wick/task.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <sstream>

namespace wick {

namespace {

// "torch::nn::LinearImpl" -> "Linear"; a user's "MyNet" stays.
std::string short_type(const std::string& full) {
  std::string t = full.substr(full.rfind("::") == std::string::npos ? 0 : full.rfind("::") + 2);
  if (t.size() > 4 && t.compare(t.size() - 4, 4, "Impl") == 0) t.resize(t.size() - 4);
  return t;
}

ModuleRow row_of(const std::string& name, const torch::nn::Module& m, int depth) {
  ModuleRow r{name, short_type(m.name()), depth, 0, 0, 0};
  for (const auto& p : m.parameters(/*recurse=*/true)) {
    r.params += p.numel();
    if (p.requires_grad()) r.trainable += p.numel();
    r.bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
  }
  for (const auto& b : m.buffers(/*recurse=*/true))
    r.bytes += b.numel() * static_cast<std::int64_t>(b.element_size());
  return r;
}

void walk(const std::string& prefix, const torch::nn::Module& m, int depth, int max_depth,
          std::vector<ModuleRow>& out) {
  if (depth > max_depth) return;
  for (const auto& child : m.named_children()) {
    const std::string name = prefix.empty() ? child.key() : prefix + "." + child.key();
    out.push_back(row_of(name, *child.value(), depth));
    walk(name, *child.value(), depth + 1, max_depth, out);
  }
}

// 1234567 -> "1,234,567"
std::string grouped(std::int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<std::size_t>(i), ",");
  return v < 0 ? "-" + s : s;
}

}  // namespace

std::vector<ModuleRow> module_rows(const torch::nn::Module& model, int max_depth) {
  std::vector<ModuleRow> out{row_of("", model, 0)};
  walk("", model, 1, max_depth, out);
  return out;
}

std::string model_summary(const torch::nn::Module& model, int max_depth, std::size_t max_rows) {
  const auto rows = module_rows(model, max_depth);
  std::vector<std::array<std::string, 5>> cells;
  cells.push_back({"Module", "Type", "Params", "Trainable", "Bytes"});
  const std::size_t shown = std::min(rows.size() - 1, max_rows);
  for (std::size_t i = 1; i <= shown; ++i) {
    const auto& r = rows[i];
    cells.push_back({std::string(2 * static_cast<std::size_t>(r.depth - 1), ' ') + r.name, r.type,
                     grouped(r.params), grouped(r.trainable), grouped(r.bytes)});
  }
  std::array<std::size_t, 5> w{};
  for (const auto& c : cells)
    for (std::size_t k = 0; k < 5; ++k) w[k] = std::max(w[k], c[k].size());
  std::ostringstream o;
  const auto& total = rows.front();
  o << "Model " << total.type << ": " << grouped(total.params) << " parameters ("
    << grouped(total.trainable) << " trainable, " << grouped(total.params - total.trainable)
    << " frozen), " << grouped(total.bytes) << " bytes with buffers\n";
  for (std::size_t i = 0; i < cells.size(); ++i) {
    o << "|";
    for (std::size_t k = 0; k < 5; ++k) {
      // Numbers right-aligned.
      const auto& c = cells[i][k];
      const std::string pad(w[k] - c.size(), ' ');
      o << " " << (k >= 2 && i > 0 ? pad + c : c + pad) << " |";
    }
    o << "\n";
    if (i == 0) {
      o << "|";
      for (std::size_t k = 0; k < 5; ++k) o << " " << std::string(w[k], '-') << " |";
      o << "\n";
    }
  }
  if (rows.size() - 1 > shown) o << "(" << rows.size() - 1 - shown << " more modules not shown)\n";
  return o.str();
}

std::string task_model_summary(const Config& cfg, const PluginFinder& finder, int ranks,
                               const std::vector<HookEntry>& hooks) {
  std::vector<HookEntry> builtins;
  std::vector<const DataParallelStrategy*> strategies;
  auto collect = [&](const std::vector<HookEntry>& from) {
    for (const auto& h : from)
      if (const auto* s = dynamic_cast<const DataParallelStrategy*>(h.hook.get()))
        strategies.push_back(s);
  };
  collect(hooks);
  if (strategies.empty()) {
    // The config enables none: each of wick's, where installed, with its defaults.
    for (const char* name : {"ddp", "zero3"}) try {
        auto more = Config::parse("[[hooks]]\nplugin = \"" + std::string(name) + "\"\n", cfg.path())
                        .make_hooks(finder);
        builtins.insert(builtins.end(), more.begin(), more.end());
      } catch (const std::exception&) {  // not installed where this config looks
      }
    collect(builtins);
  }
  seed_generators(static_cast<std::uint64_t>(cfg.trainer().seed), /*cuda=*/false);
  const auto model = cfg.make_task(finder)->model();
  return model_summary(*model) +
         memory_estimate_markdown(
             *model, cfg.has_optimizer() ? cfg.optimizers() : std::vector<OptimizerOptions>{},
             ranks, strategies);
}

}  // namespace wick
