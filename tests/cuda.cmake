# CUDA: training on the GPU, the CUDA kernels, pinned copies, the CUDA generator in
# checkpoints, fp16 loss scaling, NCCL and cuda_graph. Skipped without a GPU (and, but for the
# cuda_graph refusals that need none, in a build against a CPU-only LibTorch), but for
# native_bf16's answer for CUDA, checked everywhere, and a stale module's refusal (a CUDA build).
set(WICK_CUDA_TEST_DEPENDS synthetic checkpoint grad_accum gpt mixed_precision lr_schedule grad_clip
                            metrics_log)
if(WICK_CUDA)
  list(APPEND WICK_CUDA_TEST_DEPENDS cuda_graph)
endif()
wick_add_test(test_cuda SOURCES test_cuda.cpp TORCH DEPENDS ${WICK_CUDA_TEST_DEPENDS})
if(TARGET test_cuda AND WICK_CUDA)
  # White-box: the private interface behind the pinned copies (framework/src/cuda).
  target_compile_definitions(test_cuda PRIVATE WICK_TEST_CUDA)
  target_include_directories(test_cuda PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
  # LibTorch's CUDA API (libwick links LibTorch's CPU side alone).
  target_link_libraries(test_cuda PRIVATE wick_torch_cuda)
  # A module of another build of wick and a library that is none, which the loader refuses.
  add_library(wick_stale_cuda_module SHARED support/stale_cuda_module.cpp)
  add_library(wick_not_cuda_module SHARED support/not_cuda_module.cpp)
  add_dependencies(test_cuda wick_stale_cuda_module wick_not_cuda_module)
  target_compile_definitions(test_cuda PRIVATE
                             WICK_STALE_CUDA_MODULE="$<TARGET_FILE:wick_stale_cuda_module>"
                             WICK_NOT_CUDA_MODULE="$<TARGET_FILE:wick_not_cuda_module>")
endif()

# The same program under ThreadSanitizer (test_cuda_emulated_tsan, about 25 s): the emulator
# runs a launch's blocks on threads of their own, so a location that two blocks of one launch
# touch, one writing, is a race it reports (on a GPU, a result that rides on the blocks'
# timing). Torch-free, with flags of its own: built beside test_cuda_emulated where the
# compiler has a ThreadSanitizer, but not in the sanitizer tree (AddressSanitizer excludes it). Function entries
# and exits are not instrumented: the fibers switch stacks, which ThreadSanitizer's call
# stacks cannot follow (a report gives the racing line, not its callers).
function(wick_add_tsan_test name)
  if(WICK_SANITIZE)
    return()
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set(no_calls --param=tsan-instrument-func-entry-exit=0)
  else()
    set(no_calls -mllvm -tsan-instrument-func-entry-exit=0)
  endif()
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=thread ${no_calls}")
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=thread)
  string(REPLACE ";" " " CMAKE_REQUIRED_FLAGS "${CMAKE_REQUIRED_FLAGS}")
  check_cxx_source_compiles("int main() { return 0; }" WICK_HAS_TSAN)
  if(NOT WICK_HAS_TSAN)
    message(STATUS "wick: ${CMAKE_CXX_COMPILER} has no ThreadSanitizer: ${name} is not built")
    return()
  endif()
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE Catch2::Catch2WithMain Threads::Threads)
  target_include_directories(${name} PRIVATE ${emulator} ${PROJECT_SOURCE_DIR}/framework/src
                             ${CUDAToolkit_INCLUDE_DIRS})
  # -O1 after the tests' -O0: a third of the time.
  target_compile_options(${name} PRIVATE ${WICK_WARNINGS} -O1 -g -fsanitize=thread ${no_calls})
  target_link_options(${name} PRIVATE -fsanitize=thread)
  add_test(NAME ${name} COMMAND ${emulator}/run_tsan.sh $<TARGET_FILE:${name}>)
  set_tests_properties(${name} PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 600 COST 30)
endfunction()

# wick's CUDA kernels run on the CPU (cuda_emulator/): the sources as built into libwick_cuda,
# their launches rewritten into the emulator's calls, against references in double. It needs
# the CUDA toolkit's headers, not a GPU or a CUDA LibTorch: built where the kernels are (a CUDA
# LibTorch) and in the sanitizer build, where every access a kernel makes is a checked one of
# host memory.
if(WICK_CUDA OR WICK_SANITIZE)
  find_package(CUDAToolkit QUIET)
endif()
if(CUDAToolkit_FOUND)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(emulator ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emulator)
  set(emulated_sources "")
  # The device headers the kernels include, which the rewrite writes into each source.
  file(GLOB emulated_headers ${PROJECT_SOURCE_DIR}/framework/src/cuda/*.cuh)
  foreach(kernel adam_kernel column_sum_kernel cross_entropy_kernel layer_norm_kernel)
    set(source ${PROJECT_SOURCE_DIR}/framework/src/cuda/${kernel}.cu)
    set(emulated ${CMAKE_CURRENT_BINARY_DIR}/cuda_emulated/${kernel}.cpp)
    add_custom_command(OUTPUT ${emulated}
                       COMMAND ${Python3_EXECUTABLE} ${emulator}/rewrite_launches.py ${source}
                               ${emulated}
                       DEPENDS ${source} ${emulated_headers} ${emulator}/rewrite_launches.py
                       COMMENT "Rewriting ${kernel}.cu for the CPU emulator")
    list(APPEND emulated_sources ${emulated})
  endforeach()
  wick_add_test(test_cuda_emulated SANITIZE
                SOURCES test_cuda_emulated.cpp ${emulator}/emulator.cpp ${emulated_sources})
  if(TARGET test_cuda_emulated)
    target_include_directories(test_cuda_emulated PRIVATE ${emulator}
                               ${PROJECT_SOURCE_DIR}/framework/src ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  wick_add_tsan_test(test_cuda_emulated_tsan test_cuda_emulated.cpp ${emulator}/emulator.cpp
                     ${emulated_sources})
elseif(WICK_CUDA OR WICK_SANITIZE)
  message(STATUS "wick: no CUDA toolkit headers found: test_cuda_emulated is not built")
endif()
