# Seeing inside a run (issue 18): TensorBoard event files read back by tests/support/
# read_tfevents.py, the profiler, the model summary, FLOPs counted from shapes.
if(WICK_SANITIZE_SUBSET)
  return()
endif()
wick_add_test(test_observe SOURCES test_observe.cpp TORCH
              DEPENDS tensorboard profiler synthetic checkpoint grad_clip early_stopping
                      fashion_mnist)
# FlopCounter is libwick's own (framework/src/loop/flops.hpp).
target_include_directories(test_observe PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
