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
  foreach(kernel adam_kernel cross_entropy_kernel layer_norm_kernel)
    set(source ${PROJECT_SOURCE_DIR}/framework/src/cuda/${kernel}.cu)
    set(emulated ${CMAKE_CURRENT_BINARY_DIR}/cuda_emulated/${kernel}.cpp)
    add_custom_command(OUTPUT ${emulated}
                       COMMAND ${Python3_EXECUTABLE} ${emulator}/rewrite_launches.py ${source}
                               ${emulated}
                       DEPENDS ${source} ${emulator}/rewrite_launches.py
                       COMMENT "Rewriting ${kernel}.cu for the CPU emulator")
    list(APPEND emulated_sources ${emulated})
  endforeach()
  wick_add_test(test_cuda_emulated SANITIZE
                SOURCES test_cuda_emulated.cpp ${emulator}/emulator.cpp ${emulated_sources})
  if(TARGET test_cuda_emulated)
    target_include_directories(test_cuda_emulated PRIVATE ${emulator}
                               ${PROJECT_SOURCE_DIR}/framework/src ${CUDAToolkit_INCLUDE_DIRS})
  endif()
elseif(WICK_CUDA OR WICK_SANITIZE)
  message(STATUS "wick: no CUDA toolkit headers found: test_cuda_emulated is not built")
endif()
