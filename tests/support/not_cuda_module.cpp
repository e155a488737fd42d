// A shared library that is no CUDA module of wick, for test_cuda: it lacks the table's symbol.
extern "C" __attribute__((visibility("default"))) int wick_not_a_cuda_module() {
  return 0;
}
