wick_add_test(test_smoke SOURCES test_smoke.cpp)
# The trainer core in process and through `wick fit` (lifecycle order, hook order, stage
# chains, cancels, errors, SIGINT), and the plugin loader: also run under ASan and UBSan.
wick_add_test(test_lifecycle SOURCES test_lifecycle.cpp TORCH SANITIZE)
wick_add_test(test_cancel SOURCES test_cancel.cpp SANITIZE)
wick_add_test(test_loader SOURCES test_loader.cpp SANITIZE)
wick_add_test(test_config SOURCES test_config.cpp SANITIZE)
wick_add_test(test_describe SOURCES test_describe.cpp)
# Hardening (issue 13): config files that are not regular or too big, values wrong on their
# face, broken plugin info records, and `wick check` running the task's own checks.
wick_add_test(test_harden SOURCES test_harden.cpp SANITIZE DEPENDS synthetic)
