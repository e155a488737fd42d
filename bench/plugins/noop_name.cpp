// The name of one of the ten no-op plugins (WICK_BENCH_NOOP_NAME, set per library): the only
// part compiled per library, since it needs no LibTorch header.
const char* wick_bench_noop_name() {
  return WICK_BENCH_NOOP_NAME;
}
