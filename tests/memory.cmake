# Memory: activation checkpointing against the plain run, and the per-phase memory tracker
# (white-box: framework/src/memory).
wick_add_test(test_memory SOURCES test_memory.cpp TORCH
              DEPENDS synthetic activation_checkpointing profiler ddp zero3)
if(TARGET test_memory)
  target_include_directories(test_memory PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
endif()
