# Technique plugins (grad_accum, grad_clip, mixed_precision, lr_schedule, ema, early_stopping)
# against hand-computed references, alone and composed.
wick_add_test(test_techniques SOURCES test_techniques.cpp TORCH
              DEPENDS grad_accum grad_clip mixed_precision lr_schedule ema early_stopping synthetic ddp)
