# Training-algorithm plugins (label_smoothing, mixup, cutmix, sam, swa, freeze) and the speed
# plugins (channels_last, mixed_precision dtype = "auto") against hand-computed references;
# exact resume with each on (through wick fit, on a small Fashion-MNIST CNN).
if(WICK_SANITIZE_SUBSET)
  return()
endif()
wick_add_test(test_algorithms SOURCES test_algorithms.cpp TORCH CPU_PATHS
              DEPENDS label_smoothing mixup cutmix sam swa freeze channels_last mixed_precision
                      grad_clip grad_accum checkpoint fashion_mnist)
# White-box: wick::gelu_mlp's autograd function on the CPU (framework/src/ops/gelu_mlp.hpp).
target_include_directories(test_algorithms PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
# wick's CPU kernels as a CPU without AVX2 runs them (the baseline loops; [cpu-path] covers
# AVX-512 and AVX2).
add_test(NAME test_algorithms_cpu_kernels_baseline COMMAND test_algorithms "[cpu-kernels]"
         --warn NoTests)
set_tests_properties(test_algorithms_cpu_kernels_baseline PROPERTIES
  ENVIRONMENT "WICK_CPU_DISABLE=avx2" SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS "unit;cpu-path")
