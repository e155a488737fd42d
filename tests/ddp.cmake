# Data-parallel training: the torch-free launcher, and 2-rank runs of the ddp plugin on loopback.
wick_add_test(test_launch SOURCES test_launch.cpp)
wick_add_test(test_ddp SOURCES test_ddp.cpp PROGRAM_COST 120
              DEPENDS ddp synthetic grad_accum checkpoint)
# torchrun of the torch that matches this build's LibTorch: Debian's python3-torch for Debian's
# LibTorch; for the wheel's, its install folder (scripts/install-libtorch.sh) on PYTHONPATH.
if(TARGET test_ddp)
  get_filename_component(wick_torch_parent ${TORCH_INSTALL_PREFIX} DIRECTORY)
  set(wick_torchrun_path "")
  if(EXISTS ${wick_torch_parent}/torch/distributed/run.py)
    set(wick_torchrun_path ${wick_torch_parent})
  endif()
  set(WICK_TORCHRUN_PYTHONPATH "${wick_torchrun_path}" CACHE PATH
      "PYTHONPATH for the torchrun test: a folder holding the torch of this build's LibTorch")
  target_compile_definitions(test_ddp PRIVATE
                             WICK_TORCHRUN_PYTHONPATH="${WICK_TORCHRUN_PYTHONPATH}")
endif()
# ZeRO stages 1 and 2 (ddp's shard_optimizer, shard_gradients) and the zero3 strategy against
# plain ddp.
wick_add_test(test_zero SOURCES test_zero.cpp PROGRAM_COST 50
              DEPENDS ddp zero3 synthetic grad_accum grad_clip lr_schedule mixed_precision
                      checkpoint)
