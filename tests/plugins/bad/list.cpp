// A plugin list written by hand rather than by WICK_PLUGINS, so that it can be wrong on
// purpose (LIST_* defines, see CMakeLists.txt): a null name, an absurd count, a factory that
// points at data (LIST_DATA_FACTORY), or a well-formed list of one hook named LIST_NAME.
#include <boost/dll/alias.hpp>
#include <wick/plugin.hpp>

#ifndef LIST_COUNT
#define LIST_COUNT 1
#endif

namespace {

struct Empty : wick::Hook {
  explicit Empty(const wick::Params&) {}
  void connect(wick::Registrar&) override {}
};

const wick_plugin_info infos[] = {{WICK_INFO_MAGIC, WICK_API_MAJOR, WICK_API_MINOR, LIST_NAME,
                                   "0.0.1", 0, "hand-built list entry", 0, 0, nullptr, 0}};
#ifdef LIST_DATA_FACTORY
// A table where the factory should be: calling it would run data.
unsigned char not_code[16] = {};
const wick_plugin_entry entries[] = {{&infos[0],
                                      reinterpret_cast<void* (*)(const wick::Params&)>(&not_code),
                                      &wick::detail::destroy<Empty>}};
#else
const wick_plugin_entry entries[] = {
    {&infos[0], &wick::detail::create<Empty>, &wick::detail::destroy<Empty>}};
#endif

const wick_plugin_list* list_fn() {
  static const wick_plugin_list list = {WICK_LIST_MAGIC, WICK_API_MAJOR, WICK_API_MINOR, LIST_COUNT,
                                        entries};
  return &list;
}

}  // namespace

BOOST_DLL_ALIAS(list_fn, wick_plugin_list)
