wick_add_test(test_smoke SOURCES test_smoke.cpp)
