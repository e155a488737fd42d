// Test plugin: appends one line "INSTANCE WHAT EPOCH BATCH" to the file `path` for every
// lifecycle point it subscribes to and every stage-handler call, so that tests can assert
// the exact order in which a real `wick fit` runs hooks. In one stage (`decline`) it returns
// without calling next, to test a handler that stops its chain.
#include <wick/context.hpp>
#include <wick/plugin.hpp>

#include <fstream>

namespace {

class Recorder : public wick::Hook {
 public:
  explicit Recorder(const wick::Params& p)
      : instance_(p.instance()), out_(p.get_string("path"), std::ios::app) {
    if (!out_) throw p.error("path", "cannot be opened for appending");
    for (const auto& name : p.get_string_list("points")) {
      auto pt = wick::point_from_string(name);
      if (!pt) throw p.error("points", "has '" + name + "', which is not a lifecycle point");
      points_.push_back(*pt);
    }
    if (p.get_string_list("points").empty())
      for (std::size_t i = 0; i < wick::kNumPoints; ++i)
        points_.push_back(static_cast<wick::Point>(i));
    for (const auto& name : p.get_string_list("stages")) {
      auto st = wick::stage_from_string(name);
      if (!st) throw p.error("stages", "has '" + name + "', which is not a stage");
      stages_.push_back(*st);
    }
    const auto decline = p.get_string("decline");
    if (!decline.empty()) {
      auto st = wick::stage_from_string(decline);
      if (!st) throw p.error("decline", "must be backward, optimizer_step or zero_grad");
      decline_ = *st;
      stages_.push_back(*st);
    }
  }

  void connect(wick::Registrar& r) override {
    for (auto pt : points_)
      r.on(pt, [this, pt](wick::Context& c) { write(wick::to_string(pt), c); });
    for (auto st : stages_)
      r.stage(st, [this, st](wick::Context& c, wick::Next next) {
        write(wick::to_string(st), c);
        if (decline_ && *decline_ == st) return false;
        return next();
      });
  }

 private:
  void write(std::string_view what, wick::Context& c) {
    // Flushed per line: a run that dies or is interrupted keeps what it recorded.
    out_ << instance_ << ' ' << what << ' ' << c.state().epoch << ' ' << c.state().batch_idx
         << std::endl;
  }

  std::string instance_;
  std::ofstream out_;
  std::vector<wick::Point> points_;
  std::vector<wick::Stage> stages_;
  std::optional<wick::Stage> decline_;
};

}  // namespace

WICK_PLUGIN(Recorder,
            wick::PluginDef("recorder", "1.0.0", "Test: records points and stage calls to a file")
                .param_required("path", wick::ParamType::string, "file the lines are appended to")
                .param_string_list("points", {}, "points to record (empty: all eleven)")
                .param_string_list("stages", {}, "stages to add a recording handler to")
                .param_string("decline", "", "a stage whose handler does not call next"))
