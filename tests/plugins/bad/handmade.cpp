// An info record written by hand rather than by WICK_PLUGIN, so that each field can be wrong
// on purpose (HM_* defines, see CMakeLists.txt). With HM_NO_FACTORY it exports no factory.
#include <boost/dll/alias.hpp>
#include <wick/plugin.hpp>

#ifndef HM_MAJOR
#define HM_MAJOR WICK_API_MAJOR
#endif
#ifndef HM_MINOR
#define HM_MINOR WICK_API_MINOR
#endif
#ifndef HM_MAGIC
#define HM_MAGIC WICK_INFO_MAGIC
#endif

namespace {

const wick_plugin_info* handmade_info() {
  static const wick_plugin_info info = {
      HM_MAGIC, HM_MAJOR, HM_MINOR, HM_NAME, "0.0.1", 0, "hand-built info record",
      0,        0,        nullptr,  0};
  return &info;
}

#ifndef HM_NO_FACTORY
struct Empty : wick::Hook {
  void connect(wick::Registrar&) override {}
};
void* handmade_create(const wick::Params&) {
  return static_cast<wick::Hook*>(new Empty);
}
void handmade_destroy(void* p) {
  delete static_cast<wick::Hook*>(p);
}
#endif

}  // namespace

BOOST_DLL_ALIAS(handmade_info, wick_plugin_info)
#ifndef HM_NO_FACTORY
BOOST_DLL_ALIAS(handmade_create, wick_plugin_create)
BOOST_DLL_ALIAS(handmade_destroy, wick_plugin_destroy)
#endif
