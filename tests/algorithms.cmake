# Training-algorithm plugins (label_smoothing, mixup, cutmix, sam, swa, freeze) and the speed
# plugins (channels_last, mixed_precision dtype = "auto") against hand-computed references;
# exact resume with each on (through wick fit, on a small Fashion-MNIST CNN).
if(WICK_SANITIZE_SUBSET)
  return()
endif()
wick_add_test(test_algorithms SOURCES test_algorithms.cpp TORCH CPU_PATHS
              DEPENDS label_smoothing mixup cutmix sam swa freeze channels_last mixed_precision
                      grad_clip grad_accum checkpoint fashion_mnist)
