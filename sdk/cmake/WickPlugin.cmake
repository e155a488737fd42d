# wick_add_plugin(NAME SOURCES src...) builds a wick plugin the way wick's own are built:
# a MODULE library with C++17, hidden visibility (only the WICK_PLUGIN symbols are
# exported), linked to libwick (which brings LibTorch, toml++ and Boost flags).
# In the wick tree it lands in build/lib/wick/plugins; out of tree, in the caller's build dir.
function(wick_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "wick_add_plugin(${name}): give SOURCES")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE wick::wick ${ARG_LIBRARIES})
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "wick_${name}"
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  elseif(DEFINED WICK_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${WICK_PLUGIN_OUTPUT_DIR})
  endif()
  if(DEFINED WICK_WARNINGS)
    target_compile_options(${name} PRIVATE ${WICK_WARNINGS})
  endif()
  if(COMMAND wick_use_pch)
    wick_use_pch(${name})
  endif()
endfunction()
