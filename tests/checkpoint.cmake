# Checkpoints, exact resume and fault injection (issue 4), through the wick command.
wick_add_test(test_checkpoint SOURCES test_checkpoint.cpp DEPENDS checkpoint synthetic)

# Exact resume with the stateful technique plugins, once they are in the tree.
set(_wick_ckpt_techniques grad_accum lr_schedule ema early_stopping mixed_precision grad_clip)
set(_wick_ckpt_have ON)
foreach(p ${_wick_ckpt_techniques})
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/plugins/${p}/CMakeLists.txt)
    set(_wick_ckpt_have OFF)
  endif()
endforeach()
if(_wick_ckpt_have)
  wick_add_test(test_checkpoint_techniques SOURCES test_checkpoint_techniques.cpp
                DEPENDS checkpoint synthetic ${_wick_ckpt_techniques})
endif()
