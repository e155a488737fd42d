# The torchscript task, `wick export` and the data files (issue 15): a transformer scripted
# with Debian's python3-torch trained from TOML alone against Python's own loop, every data
# format alike, exact resume, memory-mapped .npy under a memory limit, bad input.
wick_add_test(test_torchscript SOURCES test_torchscript.cpp PROGRAM_COST 90
              DEPENDS torchscript checkpoint metrics progress metrics_log ddp grad_accum swa
                      mixed_precision grad_clip lr_schedule ema early_stopping)
