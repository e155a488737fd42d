// Writes the path Params::get_path (SDK 1.1) resolved for its `file` parameter into that
// file, so a test can see where a relative value was taken from.
#include <fstream>
#include <wick/wick.hpp>

namespace {

class PathProbe : public wick::Hook {
 public:
  explicit PathProbe(const wick::Params& p) : file_(p.get_path("file")) {}
  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context&) { std::ofstream(file_) << file_; });
  }

 private:
  std::string file_;
};

}  // namespace

WICK_PLUGIN(PathProbe, wick::PluginDef("path_probe", "1.0.0", "Writes its resolved file path")
                           .param_string("file", "probe.txt", "file to write"))
