// libwick_openmp_env.so: OpenMP's wait policy, set before the OpenMP runtime reads it.
//
// libgomp reads OMP_WAIT_POLICY once, in its own initialiser, when it is loaded: before main(),
// so a setenv() in main() (or in libwick, which depends on LibTorch and so on libgomp) is too
// late. This library depends on libc alone and is listed first among libwick's libraries, so
// the dynamic loader runs its initialiser before libgomp's (dependencies first, then in link
// order). Idle OpenMP workers then sleep instead of spinning: spinning workers on a machine
// where another process holds cores slow training 12x (README: Threads).
#include <cstdlib>

namespace {

const char* g_policy = "";  // what this library found: "" (nothing, set PASSIVE) or the user's
bool g_set = false;

__attribute__((constructor)) void wick_passive_openmp_wait() {
  const char* user = std::getenv("OMP_WAIT_POLICY");
  if (user && *user) {
    g_policy = user;  // the user's choice stays
    return;
  }
  g_set = setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0;
  if (g_set) g_policy = "PASSIVE";
}

}  // namespace

// Called by libwick (wick::openmp_wait_policy), which also keeps this library linked under
// --as-needed.
extern "C" __attribute__((visibility("default"))) const char* wick_openmp_env_policy(
    int* set_by_wick) {
  if (set_by_wick) *set_by_wick = g_set ? 1 : 0;
  return g_policy;
}
