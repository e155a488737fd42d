# Data-parallel training: the torch-free launcher, and 2-rank runs of the ddp plugin on loopback.
wick_add_test(test_launch SOURCES test_launch.cpp)
wick_add_test(test_ddp SOURCES test_ddp.cpp DEPENDS ddp synthetic grad_accum checkpoint)
