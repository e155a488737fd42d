# The GPT sample (samples/gpt): trains gpt.toml on the GPL's bytes, exact resume after kill -9,
# token files it cannot use refused by name, and wick_gpt_generate's text from the trained
# run, checked against Trainer::predict in the test (on the CPU, and on a GPU where there is
# one). Not part of the sanitizer build (the samples are not built there).
if(WICK_SANITIZE_SUBSET)
  return()
endif()
wick_add_test(test_gpt SOURCES test_gpt.cpp TORCH DEPENDS gpt wick_gpt_generate checkpoint
              grad_accum grad_clip lr_schedule mixed_precision progress)
target_compile_definitions(test_gpt PRIVATE WICK_GPT_GENERATE="$<TARGET_FILE:wick_gpt_generate>")
# cuda/cuda_load.hpp: the GPU case loads wick's CUDA side before it asks LibTorch about CUDA.
target_include_directories(test_gpt PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
