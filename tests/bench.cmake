# The benchmark's smoke run (CI: that it runs and writes its results; no timing assertions)
# and the set-up checks behind `wick doctor` and the reference-BLAS warning.
if(WICK_BUILD_BENCH)
  wick_add_test(test_bench SOURCES test_bench.cpp COST 120
                DEPENDS wick_bench ddp fashion_mnist metrics)
  if(TARGET test_bench)
    target_compile_definitions(test_bench PRIVATE WICK_BENCH_BIN="$<TARGET_FILE:wick_bench>")
  endif()
endif()
wick_add_test(test_system SOURCES test_system.cpp CPU_PATHS)
if(TARGET test_system)
  # White-box: whether this wick has a CUDA side, without loading it (framework/src/cuda).
  target_include_directories(test_system PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
endif()
# The GPU bench's plan (bench/gpu_bench.py, which runs only on a lent GPU machine) against
# stand-ins for wick and python: the rows' order, the compile row's reserve, failed rows
# measured again with LibTorch's kernels, rows skipped for the budget. Python only, no torch.
if(NOT WICK_SANITIZE_SUBSET)
  add_test(NAME gpu_bench_plan
           COMMAND ${WICK_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gpu_bench/test_gpu_bench.py)
  set_tests_properties(gpu_bench_plan PROPERTIES LABELS "unit" TIMEOUT 120)
endif()
