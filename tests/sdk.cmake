# The SDK as a package (issue 7): the guide's minimal example, the version rule, and an
# install into a temporary prefix with plugins built out of tree against it.
# Not part of the sanitizer build (the loader's own tests cover it there).
if(WICK_SANITIZE_SUBSET)
  return()
endif()
set(WICK_SDK_TEST_PLUGIN_DIR ${CMAKE_BINARY_DIR}/tests/sdk/plugins)

# wick_sdk_test_plugin(NAME SOURCE [defs...]): tests/sdk/plugins/wick_NAME.so
function(wick_sdk_test_plugin name source)
  wick_add_plugin(sdk_${name} SOURCES ${source} OUTPUT_DIRECTORY ${WICK_SDK_TEST_PLUGIN_DIR})
  set_target_properties(sdk_${name} PROPERTIES OUTPUT_NAME wick_${name})
  target_compile_definitions(sdk_${name} PRIVATE WICK_TEST_NAME="${name}" ${ARGN})
  add_dependencies(wick_test_plugins sdk_${name})
endfunction()

wick_sdk_test_plugin(minimal_hook ${PROJECT_SOURCE_DIR}/sdk/examples/minimal_hook.cpp)
wick_sdk_test_plugin(minimal_task ${PROJECT_SOURCE_DIR}/sdk/examples/minimal_task.cpp)
wick_sdk_test_plugin(minimal_metric ${PROJECT_SOURCE_DIR}/sdk/examples/minimal_metric.cpp)
wick_sdk_test_plugin(path_probe ${CMAKE_CURRENT_SOURCE_DIR}/sdk/path_probe.cpp)
# Purpose-built libraries for the version rule: record = this SDK's version + deltas.
set(versioned ${CMAKE_CURRENT_SOURCE_DIR}/sdk/versioned.cpp)
wick_sdk_test_plugin(v_same_minor ${versioned} WICK_TEST_MAJOR_DELTA=0 WICK_TEST_MINOR_DELTA=0)
wick_sdk_test_plugin(v_older_minor ${versioned} WICK_TEST_MAJOR_DELTA=0 WICK_TEST_MINOR_DELTA=-1)
wick_sdk_test_plugin(v_newer_minor ${versioned} WICK_TEST_MAJOR_DELTA=0 WICK_TEST_MINOR_DELTA=1)
wick_sdk_test_plugin(v_next_major ${versioned} WICK_TEST_MAJOR_DELTA=1 WICK_TEST_MINOR_DELTA=0)
wick_sdk_test_plugin(v_prev_major ${versioned} WICK_TEST_MAJOR_DELTA=-1 WICK_TEST_MINOR_DELTA=0)

wick_add_test(test_sdk SOURCES test_sdk.cpp)
target_compile_definitions(test_sdk PRIVATE
  WICK_SDK_TEST_PLUGIN_DIR="${WICK_SDK_TEST_PLUGIN_DIR}")

# Slow (~2 min: installs, then configures and builds plugin projects against the
# install): label "slow", still part of `make test`.
add_executable(test_sdk_install test_sdk_install.cpp)
target_link_libraries(test_sdk_install PRIVATE wick_test_main)
target_compile_options(test_sdk_install PRIVATE ${WICK_WARNINGS})
set(ccache "")
if(WICK_CCACHE)
  set(ccache ${WICK_CCACHE})  # makes the out-of-tree rebuilds of later runs cheap
endif()
# What this tree was configured with to find its dependencies (a GPU machine's unpacked Debian
# packages: scripts/gpu-check.sh), for the plugin projects the test builds (":"-separated).
string(REPLACE ";" ":" outer_prefix_path "${CMAKE_PREFIX_PATH}")
target_compile_definitions(test_sdk_install PRIVATE
  WICK_OUTER_PREFIX_PATH="${outer_prefix_path}" WICK_OUTER_CXX_FLAGS="${CMAKE_CXX_FLAGS}"
  WICK_CMAKE="${CMAKE_COMMAND}" WICK_CCACHE_PROGRAM="${ccache}" WICK_READELF="${CMAKE_READELF}"
  WICK_TORCH_LIB_DIR="${TORCH_INSTALL_PREFIX}/lib" WICK_TORCH_CXX_FLAGS="${TORCH_CXX_FLAGS}"
  WICK_BUILT_WITH_CUDA=$<BOOL:${WICK_CUDA}>
  WICK_TEST_PLUGIN_FOLDERS=$<BOOL:${WICK_TEST_PLUGIN_FOLDERS}>)
# `cmake --install` needs everything it installs to be built.
get_property(builtin GLOBAL PROPERTY WICK_BUILTIN_PLUGINS)
add_dependencies(test_sdk_install wick_cli ${builtin})
add_test(NAME sdk_install COMMAND test_sdk_install)
# COST: started first by ctest -j, not left to run alone at the end.
set_tests_properties(sdk_install PROPERTIES LABELS "slow;install" TIMEOUT 900 COST 150)

# Every public SDK header compiles on its own, included first and alone (no reliance on what
# another header happened to include): one generated translation unit per header, built with
# the tests (no precompiled header, so nothing comes in from elsewhere).
file(GLOB WICK_SDK_PUBLIC_HEADERS ${PROJECT_SOURCE_DIR}/sdk/include/wick/*.hpp)
set(WICK_HEADER_ALONE_SOURCES)
foreach(header ${WICK_SDK_PUBLIC_HEADERS})
  get_filename_component(stem ${header} NAME_WE)
  set(tu ${CMAKE_CURRENT_BINARY_DIR}/header_alone/${stem}.cpp)
  file(GENERATE OUTPUT ${tu} CONTENT "#include <wick/${stem}.hpp>\n")
  list(APPEND WICK_HEADER_ALONE_SOURCES ${tu})
endforeach()
if(WICK_HEADER_ALONE)
  add_library(wick_sdk_headers_alone OBJECT ${WICK_HEADER_ALONE_SOURCES})
  target_link_libraries(wick_sdk_headers_alone PRIVATE wick)
  target_compile_options(wick_sdk_headers_alone PRIVATE ${WICK_WARNINGS})
  add_dependencies(wick_test_plugins wick_sdk_headers_alone)
endif()

# The SDK boundary, held by the build (issue 34). A plugin that includes a framework header
# does not build: the probe is built by the test, not with the tree, and must fail for that
# reason (the header is not on a plugin's include path), not another.
wick_add_plugin(sdk_includes_framework
                SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sdk/includes_framework.cpp
                OUTPUT_DIRECTORY ${WICK_SDK_TEST_PLUGIN_DIR})
set_target_properties(sdk_includes_framework PROPERTIES EXCLUDE_FROM_ALL ON)
# (Names without spaces: this CMake's add_test keeps the old policy CMP0110.)
add_test(NAME sdk_boundary_plugin_cannot_include_framework
         COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target sdk_includes_framework)
# (Each runs the build tool in this tree: one at a time.)
set_tests_properties(sdk_boundary_plugin_cannot_include_framework PROPERTIES
  PASS_REGULAR_EXPRESSION "wick/trainer\\.hpp(: No such file or directory|' file not found)"
  RESOURCE_LOCK wick_build_tree)
# A task that leaves a pure virtual function unimplemented gets WICK_PLUGIN's word that the
# class is abstract, and which functions a task must override (issue 45), not a request for a
# constructor it has.
wick_add_plugin(sdk_abstract_task SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sdk/abstract_task.cpp
                OUTPUT_DIRECTORY ${WICK_SDK_TEST_PLUGIN_DIR})
set_target_properties(sdk_abstract_task PROPERTIES EXCLUDE_FROM_ALL ON)
add_test(NAME sdk_abstract_task_named_abstract
         COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target sdk_abstract_task)
set_tests_properties(sdk_abstract_task_named_abstract PROPERTIES
  PASS_REGULAR_EXPRESSION "the class is abstract: it does not override every pure virtual function of wick::Task"
  RESOURCE_LOCK wick_build_tree)
# PyTorch's documented way to point CMake at LibTorch works beside Debian's libtorch-dev (as on
# CI): the libraries come from the LibTorch CMAKE_PREFIX_PATH found (issue 49).
if(WICK_TORCH_ROOT AND EXISTS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/libtorch.so)
  set(_probe ${CMAKE_CURRENT_BINARY_DIR}/cmake_prefix_probe)
  add_test(NAME cmake_prefix_path_takes_its_own_libtorch
           COMMAND sh -c "rm -rf '${_probe}' && '${CMAKE_COMMAND}' -S '${CMAKE_CURRENT_SOURCE_DIR}/cmake_prefix' -B '${_probe}' -DCMAKE_PREFIX_PATH='${WICK_TORCH_ROOT}/share/cmake' -DWICK_SDK_CMAKE='${PROJECT_SOURCE_DIR}/sdk/cmake'")
  set_tests_properties(cmake_prefix_path_takes_its_own_libtorch PROPERTIES
    PASS_REGULAR_EXPRESSION "wick-probe: TORCH_LIBRARY=${WICK_TORCH_ROOT}/lib/libtorch.so"
    FAIL_REGULAR_EXPRESSION "comes from elsewhere")
endif()
# And libwick exports the public headers' symbols, not its internals.
add_test(NAME sdk_boundary_libwick_exports_interface_only
         COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DLIB=$<TARGET_FILE:wick>
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/sdk/exports.cmake)
