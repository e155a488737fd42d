wick_add_test(test_smoke SOURCES test_smoke.cpp)
# The trainer core in process and through `wick fit` (lifecycle order, hook order, stage
# chains, cancels, errors, SIGINT), and the plugin loader: also run under ASan and UBSan.
wick_add_test(test_lifecycle SOURCES test_lifecycle.cpp PROGRAM_COST 35 TORCH SANITIZE)
if(TARGET test_lifecycle)
  # White-box: how an error's text is cleaned (system/error_text.hpp).
  target_include_directories(test_lifecycle PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
endif()
wick_add_test(test_cancel SOURCES test_cancel.cpp PROGRAM_COST 50 SANITIZE)
wick_add_test(test_loader SOURCES test_loader.cpp SANITIZE)
# The version of the other LibTorch a mismatched test plugin was built against
# (tests/plugins/bad): none when this machine has only one LibTorch (the test skips).
get_property(wick_other_torch_version GLOBAL PROPERTY WICK_OTHER_TORCH_VERSION)
if(wick_other_torch_version AND TARGET test_loader)
  target_compile_definitions(test_loader PRIVATE
                             WICK_OTHER_TORCH_VERSION="${wick_other_torch_version}")
endif()
wick_add_test(test_config SOURCES test_config.cpp PROGRAM_COST 35 SANITIZE)
# The [trainer] options' table (framework/src/config/trainer_options.hpp) is private.
target_include_directories(test_config PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
# The loop's parts in process: the scope helper, the resume point, the fit loop (private
# headers of framework/src/loop).
wick_add_test(test_loop SOURCES test_loop.cpp TORCH DEPENDS synthetic checkpoint)
if(TARGET test_loop)  # not in the sanitizer subset
  target_include_directories(test_loop PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
endif()
# The evaluator and the step engine in process, each given hand-written parts (private headers
# of framework/src); one program, one link.
wick_add_test(test_loop_parts SOURCES test_evaluator.cpp test_step_engine.cpp TORCH SANITIZE)
target_include_directories(test_loop_parts PRIVATE ${PROJECT_SOURCE_DIR}/framework/src)
wick_add_test(test_describe SOURCES test_describe.cpp)
# The --each-forked runner (support/each_forked.hpp) on a probe with a case of each outcome.
if(NOT WICK_SANITIZE_SUBSET)
  add_executable(each_forked_probe support/each_forked_probe.cpp)
  target_link_libraries(each_forked_probe PRIVATE wick_test_main)
  wick_add_test(test_each_forked SOURCES test_each_forked.cpp DEPENDS each_forked_probe)
  target_compile_definitions(test_each_forked PRIVATE
                             WICK_EACH_FORKED_PROBE="$<TARGET_FILE:each_forked_probe>")
endif()
# SHA-256 (nettle) against the NIST example vectors.
wick_add_test(test_sha256 SOURCES test_sha256.cpp SANITIZE)
# Data loading: torch::data adapter, loader threads, streams, their exact resume.
wick_add_test(test_data SOURCES test_data.cpp TORCH DEPENDS checkpoint)
# Hardening (issue 13): config files that are not regular or too big, values wrong on their
# face, broken plugin info records, and `wick check` running the task's own checks.
wick_add_test(test_harden SOURCES test_harden.cpp PROGRAM_COST 55 SANITIZE
              DEPENDS synthetic lr_schedule grad_clip metrics_log)
