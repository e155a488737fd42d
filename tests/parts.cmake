# Several plugins in one library, typed task access, TorchScript parts and bare tensors.
wick_add_test(test_parts SOURCES test_parts.cpp TORCH DEPENDS activation_checkpointing)
