# The GPT sample (samples/gpt): trains gpt.toml on the GPL's bytes, exact resume after kill -9,
# token files it cannot use refused by name. Not part of the sanitizer build (the samples are
# not built there).
if(WICK_SANITIZE_SUBSET)
  return()
endif()
wick_add_test(test_gpt SOURCES test_gpt.cpp DEPENDS gpt checkpoint grad_accum grad_clip
              lr_schedule mixed_precision progress)
