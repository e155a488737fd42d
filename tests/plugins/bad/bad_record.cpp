// Info records that pass the signature and version checks but are broken inside (BR_CASE, see
// CMakeLists.txt): the loader must refuse each with a PluginError naming the library, never
// read through a bad pointer or past the params array.
#include <cstdint>

#include <boost/dll/alias.hpp>
#include <wick/plugin.hpp>

namespace {

[[maybe_unused]] constexpr std::uint32_t kFloat =
    static_cast<std::uint32_t>(wick::ParamType::floating);

#if BR_CASE == 1  // a default that is not a number, for a float parameter
const wick_param_info params[] = {{"lr", kFloat, "fast", "learning rate", nullptr, 0}};
#define BR_NUM 1u
#elif BR_CASE == 2  // an absurd parameter count
const wick_param_info params[] = {{"lr", kFloat, "0.1", "learning rate", nullptr, 0}};
#define BR_NUM 4000000000u
#elif BR_CASE == 3  // a null key
const wick_param_info params[] = {{nullptr, kFloat, "0.1", "learning rate", nullptr, 0}};
#define BR_NUM 1u
#elif BR_CASE == 4  // an unknown parameter type
const wick_param_info params[] = {{"lr", 99u, "0.1", "learning rate", nullptr, 0}};
#define BR_NUM 1u
#elif BR_CASE == 5  // a key pointing nowhere
const wick_param_info params[] = {
    {reinterpret_cast<const char*>(8), kFloat, "0.1", "lr", nullptr, 0}};
#define BR_NUM 1u
#endif

const wick_plugin_info* record() {
  static const wick_plugin_info info = {WICK_INFO_MAGIC,
                                        WICK_API_MAJOR,
                                        WICK_API_MINOR,
                                        BR_NAME,
                                        "0.0.1",
                                        0,
                                        "broken info record",
                                        0,
                                        0,
                                        params,
                                        BR_NUM};
  return &info;
}

struct Empty : wick::Hook {
  void connect(wick::Registrar&) override {}
};
void* create(const wick::Params&) {
  return static_cast<wick::Hook*>(new Empty);
}
void destroy(void* p) {
  delete static_cast<wick::Hook*>(p);
}

}  // namespace

BOOST_DLL_ALIAS(record, wick_plugin_info)
BOOST_DLL_ALIAS(create, wick_plugin_create)
BOOST_DLL_ALIAS(destroy, wick_plugin_destroy)
