// A purpose-built plugin whose info record claims an SDK API version other than the one it
// is compiled with: WICK_TEST_MAJOR_DELTA / WICK_TEST_MINOR_DELTA are added to this SDK's
// version (see tests/sdk.cmake), so the cases stay meaningful when the version moves on.
// It uses nothing newer than SDK x.0, so the "older minor" build is what a plugin compiled
// against an older minor of this major looks like to the host.
#include <cstdint>

#include <wick/wick.hpp>

// At minor 0 there is no older minor: the "older" build claims the host's own (x.0).
#define WICK_TEST_MINOR \
  (WICK_API_MINOR + WICK_TEST_MINOR_DELTA < 0 ? 0 : WICK_API_MINOR + WICK_TEST_MINOR_DELTA)

namespace {

class Versioned : public wick::Hook {
 public:
  explicit Versioned(const wick::Params&) {}
  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_epoch,
         [](wick::Context& ctx) { ctx.log(WICK_TEST_NAME "/ran", 1.0); });
  }
};

const wick_plugin_info* info() {
  static wick_plugin_info i = [] {
    static wick::PluginDef def(WICK_TEST_NAME, "1.0.0", "SDK version test plugin");
    wick_plugin_info r = *def.info(wick::PluginKind::hook);
    r.api_major = static_cast<std::uint16_t>(WICK_API_MAJOR + WICK_TEST_MAJOR_DELTA);
    r.api_minor = static_cast<std::uint16_t>(WICK_TEST_MINOR);
    return r;
  }();
  return &i;
}
void* create(const wick::Params& p) {
  return wick::detail::create<Versioned>(p);
}
void destroy(void* p) {
  wick::detail::destroy<Versioned>(p);
}

}  // namespace

BOOST_DLL_ALIAS(info, wick_plugin_info)
BOOST_DLL_ALIAS(create, wick_plugin_create)
BOOST_DLL_ALIAS(destroy, wick_plugin_destroy)
