# Metric plugins (wicklib_metrics): hand-computed references, scikit-learn on the same
# predictions, whole-set values through `wick fit`, and data-parallel sums.
wick_add_test(test_metrics SOURCES test_metrics.cpp TORCH DEPENDS metrics synthetic ddp)
