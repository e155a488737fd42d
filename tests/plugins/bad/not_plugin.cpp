// Not a wick plugin: an ordinary shared object with one exported function.
extern "C" __attribute__((visibility("default"))) int not_a_wick_plugin() {
  return 42;
}
