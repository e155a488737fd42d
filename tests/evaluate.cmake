# `wick evaluate` and `wick predict` (issue 14): the fit's own validation, scikit-learn on the
# predictions of the Fashion-MNIST MLP, two ranks alike, input files, bad input; the host API.
wick_add_test(test_evaluate SOURCES test_evaluate.cpp PROGRAM_COST 60 TORCH
              DEPENDS metrics synthetic checkpoint fashion_mnist)
