// 'wick_plugin_info' exported as data, not as the function pointer WICK_PLUGIN exports: the
// record itself, (DS_POINTER) a pointer to it, or (DS_STRING) a pointer to a string, which a
// linker may put in an executable segment (gold maps .rodata with .text). Calling any of them
// would crash the loader.
#include <wick/plugin.hpp>

#ifndef DS_STRING
namespace {
// clang-format off
const struct wick_plugin_info record = {
    WICK_INFO_MAGIC, WICK_API_MAJOR, WICK_API_MINOR, "data_symbol", "0.0.1", 0, "a data record",
    0, 0, nullptr, 0};
// clang-format on
}  // namespace
#endif

#if defined(DS_STRING)
extern "C" __attribute__((visibility("default"))) const char* wick_plugin_info;
const char* wick_plugin_info = "data_symbol";
#elif defined(DS_POINTER)
extern "C" __attribute__((visibility("default"))) const struct wick_plugin_info* wick_plugin_info;
const struct wick_plugin_info* wick_plugin_info = &record;
#else
extern "C" __attribute__((visibility("default"))) const struct wick_plugin_info wick_plugin_info;
const struct wick_plugin_info wick_plugin_info = record;
#endif
