// Test-only fault injection: at a lifecycle point (and a training step / epoch), once:
//   throw     throw std::runtime_error(message)
//   sigint    raise(SIGINT) (the trainer stops at the next step boundary)
//   abort     std::abort()
//   segv      write to a page mapped without access (a real SIGSEGV, as a bad pointer makes)
//   sentsegv  SIGSEGV sent by another process (a child), as `kill -SEGV PID` sends it
//   kill      kill -9 itself
//   exit      std::exit(3)
//   nan       replace the step's loss with NaN (use at = "after_loss")
//   readonly  chmod 0555 the folder `path` (relative to output_dir)
//   remove    remove the folder `path` (relative to output_dir), as `rm -r` would
//   fsize     cap the size of any file written from now on at `bytes` (a full disk: writes past
//             it fail with EFBIG instead of killing the process)
//   sync      read the step's loss on the host (.item(): a device sync on a GPU)
//   noise     every step from `step` on (not once): scale the loss by 1 + 0.1 * a draw from the
//             run device's random generator, so that training depends on its state
//   savekill  kill -9 itself as a checkpoint is made (when it asks the hooks for their state,
//             before its files are written): the one after `saves` more once the point is
//             reached (saves = 1: the second of the two the checkpoint hook may write together)
// step counts training batches from 1 over the whole fit (0: any); epoch is 0-based (-1: any);
// rank fires it on that rank only (-1: every rank).
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <wick/context.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace {

class Fault : public wick::Hook {
 public:
  explicit Fault(const wick::Params& p)
      : at_(p.get_string("at")),
        action_(p.get_string("action")),
        step_(p.get_int("step")),
        epoch_(p.get_int("epoch")),
        rank_(p.get_int("rank")),
        message_(p.get_string("message")),
        path_(p.get_string("path")),
        bytes_(p.get_int("bytes")),
        saves_(p.get_int("saves")) {
    auto pt = wick::point_from_string(at_);
    if (!pt) throw p.error("at", "is not a lifecycle point");
    point_ = *pt;
    const char* actions[] = {"throw",    "torch", "sigint", "abort", "segv",
                             "sentsegv", "kill",  "exit",   "nan",   "readonly",
                             "remove",   "fsize", "sync",   "noise", "savekill"};
    if (std::find(std::begin(actions), std::end(actions), action_) == std::end(actions))
      throw p.error("action",
                    "must be throw, torch, sigint, abort, segv, sentsegv, kill, exit, nan, "
                    "readonly, remove, fsize, sync, noise or savekill");
  }

  // Every checkpoint asks each stateful hook for its state while it writes: for savekill.
  bool has_state() const override { return action_ == "savekill"; }
  void save_state(wick::StateDict& /*out*/) const override {
    if (armed_ && saves_-- == 0) ::kill(::getpid(), SIGKILL);
  }

  void connect(wick::Registrar& r) override {
    r.on(point_, [this](wick::Context& c) {
      if ((fired_ && action_ != "noise") || !matches(c)) return;
      fired_ = true;
      fire(c);
    });
  }

 private:
  bool matches(wick::Context& c) const {
    const auto& s = c.state();
    if (epoch_ >= 0 && s.epoch != epoch_) return false;
    if (rank_ >= 0 && s.rank != rank_) return false;
    if (step_ <= 0) return true;
    if (!s.training()) return false;
    // At after_step the batch is counted in micro_step; before it, it is the next one.
    const auto batch = point_ == wick::Point::after_step ? s.micro_step : s.micro_step + 1;
    return action_ == "noise" ? batch >= step_ : batch == step_;
  }

  void fire(wick::Context& c) {
    if (action_ == "throw") throw std::runtime_error(message_);
    if (action_ == "torch") (void)c.output().loss.view({3, 7});  // LibTorch's c10::Error
    if (action_ == "sigint") {
      ::raise(SIGINT);
    } else if (action_ == "abort") {
      std::abort();
    } else if (action_ == "segv") {
      void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      *static_cast<volatile int*>(page) = 1;
    } else if (action_ == "sentsegv") {
      const pid_t parent = ::getpid();
      if (::fork() == 0) {
        ::kill(parent, SIGSEGV);
        ::_exit(0);
      }
      for (;;) ::pause();  // until the signal ends the process
    } else if (action_ == "kill") {
      ::kill(::getpid(), SIGKILL);
    } else if (action_ == "exit") {
      std::exit(3);
    } else if (action_ == "nan") {
      c.output().loss = c.output().loss * std::numeric_limits<double>::quiet_NaN();
    } else if (action_ == "sync") {
      (void)c.output().loss.item<double>();
    } else if (action_ == "noise") {
      auto& loss = c.output().loss;
      loss = loss * (1 + 0.1 * torch::randn({}, loss.options()));
    } else if (action_ == "readonly") {
      auto p = std::filesystem::path(c.run().output_dir) / path_;
      if (::chmod(p.c_str(), 0555) != 0)
        throw std::runtime_error("fault: cannot chmod " + p.string());
    } else if (action_ == "remove") {
      std::filesystem::remove_all(std::filesystem::path(c.run().output_dir) / path_);
    } else if (action_ == "fsize") {
      ::signal(SIGXFSZ, SIG_IGN);
      rlimit lim{static_cast<rlim_t>(bytes_), static_cast<rlim_t>(bytes_)};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    } else if (action_ == "savekill") {
      armed_ = true;
    }
  }

  std::string at_, action_;
  wick::Point point_ = wick::Point::after_step;
  std::int64_t step_, epoch_, rank_;
  std::string message_, path_;
  std::int64_t bytes_;
  mutable std::int64_t saves_;  // writes still to let through once armed
  bool fired_ = false, armed_ = false;
};

}  // namespace

WICK_PLUGIN(Fault,
            wick::PluginDef("fault", "1.0.0", "Test-only: inject a fault at a point and step")
                .param_string("at", "after_step", "lifecycle point")
                .param_string("action", "throw",
                              "throw, torch, sigint, abort, segv, kill, exit, nan, readonly, "
                              "remove, fsize, sync, noise or savekill")
                .param_int("step", 0, "training batch, from 1 over the fit (0: any)")
                .param_int("epoch", -1, "0-based epoch (-1: any)")
                .param_int("rank", -1, "the rank it fires on (-1: every rank)")
                .param_string("message", "injected fault", "message for throw")
                .param_string("path", "checkpoints",
                              "folder for readonly and remove, in output_dir")
                .param_int("bytes", 4096, "file size cap for fsize")
                .param_int("saves", 0, "savekill: checkpoint writes to let through first"))
