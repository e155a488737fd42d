# Fashion-MNIST task, its IDX reader, the progress and metrics_log plugins, `wick plot` and the
# embedding sample (issue 5). Not part of the sanitizer build (the sample is not built there).
if(WICK_SANITIZE_SUBSET)
  return()
endif()
wick_add_test(test_idx SOURCES test_idx.cpp)
target_link_libraries(test_idx PRIVATE wick_idx)

wick_add_test(test_fashion_task SOURCES test_fashion_task.cpp
              DEPENDS fashion_mnist metrics_log progress wick_embed_sample)
target_link_libraries(test_fashion_task PRIVATE wick_idx)

wick_add_test(test_fashion_tools SOURCES test_fashion_tools.cpp
              DEPENDS synthetic progress metrics_log)
target_link_libraries(test_fashion_tools PRIVATE util)

# The DCGAN sample: two optimizers under manual optimization, exact resume after kill -9.
wick_add_test(test_gan SOURCES test_gan.cpp DEPENDS gan metrics_log checkpoint)
# Hardening (issue 13): `wick plot` with hostile metric and folder names, the IDX reader
# against headers that claim more than the file holds.
wick_add_test(test_harden_data SOURCES test_harden_data.cpp)
target_link_libraries(test_harden_data PRIVATE wick_idx)

# The LibTorch examples ported to wick (samples/ports): they train from their TOML files, and
# the mnist port resumes exactly after kill -9.
wick_add_test(test_ports SOURCES test_ports.cpp TORCH
              DEPENDS mnist regression custom_dataset transfer_learning checkpoint progress
                      metrics_log)
