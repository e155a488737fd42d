# Tuning (issue 19): wick lr-find, trainer.batch_size = "auto", wick sweep.
if(WICK_SANITIZE_SUBSET)
  return()
endif()
wick_add_test(test_tune SOURCES test_tune.cpp PROGRAM_COST 45 CPU_PATHS
              DEPENDS synthetic checkpoint fashion_mnist progress metrics_log lr_schedule)
