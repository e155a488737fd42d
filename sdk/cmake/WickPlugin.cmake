# wick_add_plugin(NAME SOURCES src... [LIBRARIES libs...] [OUTPUT_DIRECTORY dir])
# builds a wick plugin the way wick's own are built: a MODULE library wick_NAME.so with
# C++17 (or the project's CMAKE_CXX_STANDARD, 17 or newer), hidden visibility (only the
# WICK_PLUGIN symbols are exported), linked to wick::wick (which brings LibTorch, Boost and
# libdl). `wick` finds it by that file name.
#
# Out of tree (after find_package(wick)) the library lands in the caller's build folder
# (CMAKE_LIBRARY_OUTPUT_DIRECTORY when the caller sets one), or in OUTPUT_DIRECTORY.
# In the wick tree, a plugin without OUTPUT_DIRECTORY is a built-in one: it lands in
# build/lib/wick/plugins and is installed (sdk/CMakeLists.txt).
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
    CXX_EXTENSIONS OFF
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  # C++17, unless the project asks for a standard of its own (wick::wick requires 17 at least).
  if(NOT DEFINED CMAKE_CXX_STANDARD)
    set_target_properties(${name} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  endif()
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  elseif(DEFINED WICK_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${WICK_PLUGIN_OUTPUT_DIR})
    set_property(GLOBAL APPEND PROPERTY WICK_BUILTIN_PLUGINS ${name})
  elseif(NOT CMAKE_LIBRARY_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  if(DEFINED WICK_WARNINGS)
    target_compile_options(${name} PRIVATE ${WICK_WARNINGS})
  endif()
  if(COMMAND wick_use_pch)
    # A precompiled LibTorch header pays only where LibTorch is included: loading it (~20 s
    # here) costs more than compiling a source that includes the light SDK headers alone
    # (~3 s). Sources that include LibTorch, a torch-including SDK header or a local header
    # use it.
    set(heavy FALSE)
    foreach(src ${ARG_SOURCES})
      get_filename_component(abs "${src}" ABSOLUTE)
      if(NOT EXISTS "${abs}")
        set(heavy TRUE)
        continue()
      endif()
      file(STRINGS "${abs}" hits
           REGEX "#include [<\"](torch/|ATen/|wick/(task|jit|tensor_module|torch_data)\\.hpp)|#include \"")
      if(hits)
        set(heavy TRUE)
      endif()
    endforeach()
    if(heavy)
      wick_use_pch(${name})
    endif()
  endif()
  # In the wick tree, its sources compile in batches (a unity build, see wick_unity).
  if(COMMAND wick_unity)
    wick_unity(${name})
  endif()
endfunction()

# wick_add_plugin_library(NAME SOURCES src... [LIBRARIES libs...] [OUTPUT_DIRECTORY dir])
# builds a library of several plugins (declared with WICK_PLUGINS) as wicklib_NAME.so, built
# and placed as wick_add_plugin does. `wick` finds each plugin in it by the plugin's own name.
function(wick_add_plugin_library name)
  wick_add_plugin(${name} ${ARGN})
  set_target_properties(${name} PROPERTIES OUTPUT_NAME "wicklib_${name}")
endfunction()
