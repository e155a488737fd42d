# Checkpoints, exact resume and fault injection (issue 4), through the wick command.
wick_add_test(test_checkpoint SOURCES test_checkpoint.cpp DEPENDS checkpoint synthetic)
