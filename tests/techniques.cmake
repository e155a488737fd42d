# Technique plugins (grad_accum, grad_clip, mixed_precision, lr_schedule, ema, early_stopping)
# against hand-computed references, alone and composed; the SDK 2.9 task and record contracts.
wick_add_test(test_techniques SOURCES test_techniques.cpp TORCH
              DEPENDS grad_accum grad_clip mixed_precision lr_schedule ema early_stopping synthetic ddp
                      sam activation_checkpointing)
