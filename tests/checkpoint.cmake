# Checkpoints, exact resume and fault injection (issue 4), through the wick command.
wick_add_test(test_checkpoint SOURCES test_checkpoint.cpp PROGRAM_COST 70
              DEPENDS checkpoint synthetic metrics_log progress)
# Exact resume with every stateful technique plugin enabled.
wick_add_test(test_checkpoint_techniques SOURCES test_checkpoint_techniques.cpp
              DEPENDS checkpoint synthetic grad_accum lr_schedule ema early_stopping
                      mixed_precision grad_clip activation_checkpointing)
# White-box: the atomic folder write's failure path (framework/src/state/checkpoint_folder.hpp).
if(TARGET test_checkpoint)  # not in the sanitizer build
  target_include_directories(test_checkpoint PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
endif()
