// Checkpoints and exact resume, end to end through the wick command: a run interrupted
// (SIGINT, SIGKILL, an exception) and resumed ends bit-identical to an uninterrupted one; bad
// checkpoints, read-only folders and a full disk fail clearly and never hurt earlier
// checkpoints. Faults come from the test-only plugin tests/plugins/fault.cpp.
#include <unistd.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "state/checkpoint_folder.hpp"  // private: the atomic folder write
#include "support.hpp"
#include "wick/config.hpp"
#include "wick/files.hpp"
#include "wick/sha256.hpp"

using namespace wick::test;

namespace {

// 256 samples / batch 32 = 8 batches per epoch, 24 in 3 epochs.
std::string config(const TempDir& d, const std::string& checkpoint_keys,
                   const std::string& extra = "", const std::string& task_keys = "") {
  return "[trainer]\nepochs = 3\nseed = 7\nbatch_size = 32\nlog_every = 2\nthreads = 1\n"
         "output_dir = \"" +
         (d / "run").string() + "\"\n" +
         "[task]\nplugin = \"synthetic\"\nsamples = 256\nvalid_samples = 64\n" + task_keys +
         "[[hooks]]\nplugin = \"metrics_log\"\n" + "[[hooks]]\nplugin = \"checkpoint\"\n" +
         checkpoint_keys + extra + test_plugins_toml();
}

// The PID of a process that has ended (a leftover's owner that is gone).
pid_t ended_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return pid;
}

// The rows of DIR/run/metrics.csv without the columns that hold timings.
std::vector<std::string> csv_rows(const TempDir& d) {
  std::istringstream in(read_file(d / "run" / "metrics.csv"));
  std::string line;
  std::vector<std::vector<std::string>> cells;
  while (std::getline(in, line)) {
    std::vector<std::string> row;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, ',')) row.push_back(c);
    if (!line.empty() && line.back() == ',') row.emplace_back();
    cells.push_back(row);
  }
  std::vector<std::string> out;
  if (cells.empty()) return out;
  const auto& header = cells[0];
  for (const auto& row : cells) {
    std::string kept;
    for (std::size_t i = 0; i < row.size() && i < header.size(); ++i)
      if (!is_timing_key(header[i])) kept += row[i] + ",";
    out.push_back(kept);
  }
  return out;
}

std::string fault(const std::string& keys) {
  return "[[hooks]]\nplugin = \"fault\"\n" + keys;
}

fs::path ckpt_dir(const TempDir& d) {
  return d / "run" / "checkpoints";
}

// What the checkpoint folder holds, but the lock a fit takes on it.
std::vector<std::string> checkpoints(const TempDir& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(ckpt_dir(d)))
    if (e.path().filename() != "wick.lock") out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

// As root, neither chmod's write bits nor a sticky folder (which keeps other users' entries
// from being renamed or removed) stop wick: run it without the capabilities that override them.
RunResult run_wick_unprivileged(const std::vector<std::string>& args) {
  std::vector<std::string> argv;
  if (::geteuid() == 0 && !fs::exists("/usr/bin/setpriv"))
    skip("needs util-linux's setpriv in /usr/bin, to run wick as root without its capabilities");
  if (::geteuid() == 0)
    argv = {"/usr/bin/setpriv", "--inh-caps=-all",
            "--bounding-set=-dac_override,-dac_read_search,-fowner"};
  argv.push_back(WICK_BIN);
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

struct Reference {
  std::string fingerprint;
  std::vector<std::string> logged;
  std::vector<std::string> csv;
};

// The uninterrupted run the interrupted ones must reproduce (computed once per process).
const Reference& reference() {
  static Reference ref = [] {
    TempDir d;
    write_file(d / "cfg.toml", config(d, "every_n_steps = 4\n"));
    auto r = run_wick({"fit", (d / "cfg.toml").string()});
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    return Reference{read_json(d / "run" / "summary.json")["model_fingerprint"], logged_values(d),
                     csv_rows(d)};
  }();
  return ref;
}

void check_matches_reference(const TempDir& d) {
  const auto& ref = reference();
  auto s = read_json(d / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["epochs"] == 3);
  CHECK(s["optimizer_steps"] == 24);
  CHECK(s["samples_seen"] == 768);
  CHECK(s["model_fingerprint"] == ref.fingerprint);
  // The whole history, every step and epoch loss after the resume point included, in
  // metrics.jsonl and in metrics.csv: each record exactly once.
  CHECK(logged_values(d) == ref.logged);
  CHECK(csv_rows(d) == ref.csv);
}

// `wick fit` of DIR/cfg.toml again from `from` with the fault plugin off, which must succeed.
RunResult resume_without_fault(const TempDir& d, const std::string& from = "latest") {
  auto r = run_wick(
      {"fit", (d / "cfg.toml").string(), "--resume", from, "--set", "hooks.fault.enabled=false"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  return r;
}

}  // namespace

TEST_CASE("SIGINT mid-epoch 2 saves on cancel and resume latest ends bit-identical") {
  TempDir d;
  // Batch 13 is the 5th of epoch 2 (index 1).
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 4\n", fault("action = \"sigint\"\nstep = 13\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 130);
  auto s = read_json(d / "run" / "summary.json");
  CHECK(s["status"] == "cancelled");
  CHECK(s["optimizer_steps"] == 13);
  CHECK(r.out.find("checkpoint (cancel) saved") != std::string::npos);
  CHECK(fs::exists(ckpt_dir(d) / "ckpt-e0001-b0000005" / "manifest.json"));

  auto r2 = resume_without_fault(d);
  CHECK(r2.out.find("resumed from " + (ckpt_dir(d) / "ckpt-e0001-b0000005").string() +
                    " (epoch 1, batch 5, optimizer step 13)") != std::string::npos);
  CHECK(r2.err.find("optimizer settings") == std::string::npos);  // the same config
  check_matches_reference(d);
}

TEST_CASE("a stop at max_steps mid-epoch resumes at the next batch, exactly") {
  // Step 11 is the 3rd batch of epoch 1: the stop is a position like a SIGINT's, not the
  // epoch's end (which would skip its 5 remaining batches on resume).
  TempDir d;
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\n",
                                    "[[hooks]]\nplugin = \"progress\"\nmode = \"plain\"\n"));
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.max_steps=11"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  // The progress line does not call the unfinished epoch done.
  CHECK_THAT(r.out, Catch::Contains("epoch 1/3 done"));
  CHECK_THAT(r.out, !Catch::Contains("epoch 2/3 done"));
  auto s = read_json(d / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["optimizer_steps"] == 11);
  CHECK(s["epochs"] == 1);  // whole epochs: the second was stopped in its 3rd batch
  CHECK(s["stop_reason"].get<std::string>().find("max_steps (11) reached") != std::string::npos);
  CHECK(s.contains("valid/loss"));  // validated at the stop, for the summary
  CHECK(fs::exists(ckpt_dir(d) / "ckpt-e0001-b0000003" / "manifest.json"));
  CHECK_FALSE(fs::exists(ckpt_dir(d) / "ckpt-e0002-b0000000"));
  // No epoch record for the unfinished epoch: only epoch 0's.
  int epoch_records = 0;
  for (const auto& l : read_jsonl(d / "run" / "metrics.jsonl"))
    epoch_records += l["kind"] == "epoch";
  CHECK(epoch_records == 1);

  // The same limit again trains no step past it.
  auto again = run_wick(
      {"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set", "trainer.max_steps=11"});
  INFO(again.err << again.out);
  REQUIRE(again.exit_code == 0);
  CHECK(read_json(d / "run" / "summary.json")["optimizer_steps"] == 11);

  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  CHECK(r2.out.find("(epoch 1, batch 3, optimizer step 11)") != std::string::npos);
  check_matches_reference(d);
}

TEST_CASE("SIGKILL or a crash after the last checkpoint loses only the steps since it") {
  // kill -9 (no handler runs), std::abort (SIGABRT), a bad pointer (SIGSEGV), a SIGSEGV another
  // process sent and a plugin's exit(): the same checkpoints; but for kill -9, each says where
  // it happened, on stderr and in summary.json, with the counts of the last checkpoint.
  const auto [action, status] = GENERATE(table<std::string, int>({{"kill", 128 + 9},
                                                                  {"abort", 128 + 6},
                                                                  {"segv", 128 + 11},
                                                                  {"sentsegv", 128 + 11},
                                                                  {"exit", 3}}));
  TempDir d;
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\nkeep_last = 0\n",
                                    fault("action = \"" + action + "\"\nstep = 14\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == status);
  // Steps 4 and 8 (the end of epoch 1, before validation), epoch 1's end, step 12; not 14.
  CHECK(checkpoints(d) == std::vector<std::string>{"ckpt-e0000-b0000004", "ckpt-e0000-b0000008",
                                                   "ckpt-e0001-b0000000", "ckpt-e0001-b0000004"});
  const auto summary = nlohmann::json::parse(read_file(d / "run" / "summary.json"));
  // The counts of the last checkpoint, which the save wrote into the summary.
  CHECK(summary["optimizer_steps"] == 12);
  if (action == "kill") {
    CHECK(summary["status"] == "running");  // no handler runs: nothing could say more
    // No monitor, no best: --resume best says so (it is a word, not a folder of the cwd).
    auto best = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "best"});
    CHECK(best.exit_code == 1);
    CHECK(best.err.find("--resume best: no '" + (ckpt_dir(d) / "best").string() +
                        "'; it is saved when hooks.checkpoint.monitor is set") !=
          std::string::npos);
  } else {
    CHECK(summary["status"] == "failed");
    const std::string error = summary.value("error", "");
    // A signal another process sent blames no code: the plugin is only where the loop was.
    CHECK(error.rfind(action == "abort"      ? "fatal signal SIGABRT (aborted"
                      : action == "exit"     ? "the process exited (status 3) during the fit"
                      : action == "sentsegv" ? "fatal signal SIGSEGV, sent by another process (pid "
                                             : "fatal signal SIGSEGV (invalid memory access)",
                      0) == 0);
    CHECK(error.find(" in plugin 'fault' (instance 'fault') at after_step") != std::string::npos);
    CHECK(r.err.find("wick: " + error + "; summary.json says failed\n") != std::string::npos);
  }

  auto r2 = resume_without_fault(d);
  CHECK(r2.out.find("(epoch 1, batch 4, optimizer step 12)") != std::string::npos);
  check_matches_reference(d);
}

TEST_CASE("resume auto after a death before the first checkpoint starts afresh, exactly") {
  // What restarts use (wick launch --max-restarts, torchrun): killed at step 3, before the
  // first periodic checkpoint (step 4), so there is nothing to resume from; the records the
  // killed attempt wrote must not stay in the history.
  TempDir d;
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 4\n", fault("action = \"kill\"\nstep = 3\n")));
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string()}).exit_code == 128 + 9);
  REQUIRE(!read_file(d / "run" / "metrics.jsonl").empty());
  auto r = resume_without_fault(d, "auto");
  CHECK(r.err.find(
            "wick: --resume auto: no checkpoint was restored (none yet, or no checkpoint hook); "
            "training from the start") != std::string::npos);
  check_matches_reference(d);
  // With checkpoints, auto is latest.
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 4\n", fault("action = \"kill\"\nstep = 14\n")));
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string()}).exit_code == 128 + 9);
  auto r2 = resume_without_fault(d, "auto");
  CHECK(r2.out.find("(epoch 1, batch 4, optimizer step 12)") != std::string::npos);
  check_matches_reference(d);
  // With every checkpoint damaged, auto refuses as latest does: a fresh start would drop the
  // run's records and training without a word.
  const auto records = read_file(d / "run" / "metrics.jsonl");
  std::vector<std::string> names;
  for (const auto& n : checkpoints(d))
    if (n.rfind("ckpt-", 0) == 0) names.push_back(n);
  REQUIRE(!names.empty());
  const auto all = checkpoints(d);
  for (const auto& n : names) write_file(ckpt_dir(d) / n / "state.pt", "damaged");
  auto r3 = run_wick(
      {"fit", (d / "cfg.toml").string(), "--resume", "auto", "--set", "hooks.fault.enabled=false"});
  INFO(r3.err << r3.out);
  CHECK(r3.exit_code == 1);
  CHECK(r3.err.find("--resume auto: no valid checkpoint in '" + ckpt_dir(d).string() + "' (" +
                    std::to_string(names.size()) + " skipped as unusable)") != std::string::npos);
  CHECK(read_file(d / "run" / "metrics.jsonl") == records);
  CHECK(checkpoints(d) == all);
}

TEST_CASE("resuming from the end-of-epoch checkpoint before validation is exact") {
  TempDir d;
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 4\nkeep_last = 0\n",
                    fault("action = \"kill\"\nat = \"before_valid\"\nepoch = 0\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  REQUIRE(r.exit_code == 128 + 9);
  auto r2 = resume_without_fault(d);
  CHECK(r2.out.find("(epoch 0, batch 8, optimizer step 8)") != std::string::npos);
  check_matches_reference(d);
}

TEST_CASE(
    "an exception in a hook is blamed with exit 1 and its failure checkpoint resumes exactly") {
  TempDir d;
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 4\n",
                    fault("action = \"throw\"\nstep = 10\nmessage = \"boom at ten\"\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 1);
  const std::string blame = "plugin 'fault' (instance 'fault') at after_step: boom at ten";
  CHECK(r.err.find(blame) != std::string::npos);
  auto s = read_json(d / "run" / "summary.json");
  CHECK(s["status"] == "failed");
  CHECK(s["error"] == blame);
  // The fault runs after the checkpoint hook at after_step, so step 10 is complete.
  CHECK(r.out.find("checkpoint (failure) saved") != std::string::npos);
  CHECK(fs::exists(ckpt_dir(d) / "ckpt-e0001-b0000002" / "manifest.json"));

  resume_without_fault(d);
  check_matches_reference(d);
}

TEST_CASE("a hook failing at after_step before later hooks saw the step saves no failure") {
  // lr_schedule (order 5) runs after the fault (order 0) at after_step: step 10 is unfinished.
  TempDir d;
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 4\n",
                    fault("action = \"throw\"\nstep = 10\n") +
                        "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"linear\"\n"));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 1);
  CHECK(r.err.find("not saving on failure: it came in the middle of a step") != std::string::npos);
  CHECK_FALSE(fs::exists(ckpt_dir(d) / "ckpt-e0001-b0000002"));
  CHECK(fs::exists(ckpt_dir(d) / "ckpt-e0001-b0000000" / "manifest.json"));
}

TEST_CASE("an exception in the middle of a step writes no failure checkpoint") {
  TempDir d;
  // LibTorch's own error (a view of the wrong size), told without its C++ backtrace.
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 4\nkeep_last = 0\n",
                    fault("action = \"torch\"\nat = \"after_backward\"\nstep = 6\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 1);
  const std::string blame =
      "plugin 'fault' (instance 'fault') at after_backward: shape '[3, 7]' "
      "is invalid for input of size 1";
  CHECK(r.err.find(blame) != std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["error"] == blame);
  CHECK(r.err.find("frame #") == std::string::npos);
  CHECK(r.err.find("Exception raised from") == std::string::npos);
  CHECK(r.err.find("not saving on failure: it came in the middle of a step") != std::string::npos);
  CHECK(checkpoints(d) == std::vector<std::string>{"ckpt-e0000-b0000004"});
}

TEST_CASE("on_failure = false writes no checkpoint on failure") {
  TempDir d;
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\non_failure = false\n",
                                    fault("action = \"throw\"\nstep = 6\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  REQUIRE(r.exit_code == 1);
  CHECK(checkpoints(d) == std::vector<std::string>{"ckpt-e0000-b0000004"});
}

TEST_CASE("a NaN loss stops naming the step under policy error and is counted under skip") {
  TempDir d;
  write_file(d / "cfg.toml",
             config(d, "", fault("action = \"nan\"\nat = \"after_loss\"\nstep = 5\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 1);
  CHECK(r.err.find(") at epoch 0, batch 4, optimizer step 4; set trainer.nan_policy") !=
        std::string::npos);
  CHECK(r.err.find("non-finite loss (") != std::string::npos);
  CHECK(r.err.find("nan_policy = \"skip\"") != std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["status"] == "failed");
  // With no step records, the epoch's end reads them, and the error says so.
  auto r0 = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.log_every=0"});
  CHECK(r0.exit_code == 1);
  CHECK(r0.err.find("training failed: the end of the epoch's training: non-finite loss (nan) at "
                    "epoch 0, batch 4") != std::string::npos);

  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.nan_policy=skip"});
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  auto s = read_json(d / "run" / "summary.json");
  CHECK(s["skipped_steps"] == 1);
  CHECK(s["optimizer_steps"] == 23);
  CHECK(s["micro_steps"] == 24);
}

TEST_CASE("corrupt checkpoints: latest falls back with a warning and an explicit path fails") {
  // Every section starts from the same 2-epoch run (Catch runs the test case again from the
  // top for each): trained once per process, its folder put back as it was before each.
  static TempDir d;
  static const fs::path pristine = d / "pristine-run";
  if (!fs::exists(pristine)) {
    fs::remove_all(d / "run");  // a first fit that failed in an earlier section
    write_file(d / "cfg.toml", config(d, "keep_last = 0\n"));
    REQUIRE(run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=2"}).exit_code ==
            0);
    fs::copy(d / "run", pristine, fs::copy_options::recursive);
  } else {
    fs::remove_all(d / "run");
    fs::copy(pristine, d / "run", fs::copy_options::recursive);
  }
  REQUIRE(checkpoints(d) == std::vector<std::string>{"ckpt-e0001-b0000000", "ckpt-e0002-b0000000"});
  const auto good = ckpt_dir(d) / "ckpt-e0001-b0000000";
  const auto bad = ckpt_dir(d) / "ckpt-e0002-b0000000";
  const auto good_hashes = file_hashes(good);

  SECTION("a flipped byte") {
    auto bytes = read_file(bad / "model.pt");
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x01);
    write_file(bad / "model.pt", bytes);
    auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", bad.string()});
    INFO(r.err << r.out);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("cannot resume from checkpoint '" + bad.string() +
                     "': model.pt does not match its sha256 in the manifest (corrupted)") !=
          std::string::npos);
    CHECK(file_hashes(good) == good_hashes);
    CHECK(checkpoints(d).size() == 2);  // nothing written, nothing removed

    auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
    INFO(r2.err << r2.out);
    CHECK(r2.exit_code == 0);
    CHECK(r2.err.find("warning: skipping checkpoint '" + bad.string() +
                      "': model.pt does not "
                      "match its sha256") != std::string::npos);
    CHECK(r2.out.find("resumed from " + good.string()) != std::string::npos);
    check_matches_reference(d);
  }
  SECTION("a truncated file") {
    auto bytes = read_file(bad / "optimizer.pt");
    write_file(bad / "optimizer.pt", bytes.substr(0, bytes.size() / 3));
    auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", bad.string()});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("optimizer.pt has " + std::to_string(bytes.size() / 3) +
                     " bytes, the manifest says " + std::to_string(bytes.size()) +
                     " (truncated?)") != std::string::npos);
    auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
    INFO(r2.err << r2.out);
    CHECK(r2.exit_code == 0);
    CHECK(r2.err.find("skipping checkpoint '" + bad.string() + "'") != std::string::npos);
    check_matches_reference(d);
  }
  SECTION("a partial write (no manifest) and nothing valid at all") {
    fs::remove(bad / "manifest.json");
    fs::remove(good / "state.pt");
    auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
    INFO(r.err << r.out);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("'" + bad.string() + "': no manifest.json (an unfinished write?)") !=
          std::string::npos);
    CHECK(r.err.find("'" + good.string() + "': state.pt is missing") != std::string::npos);
    CHECK(r.err.find("--resume latest: no valid checkpoint in '" + ckpt_dir(d).string() +
                     "' (2 skipped as unusable)") != std::string::npos);
  }
  // The manifest is untrusted input: whatever it says, nothing outside the folder is opened,
  // nothing unbounded is read, and `latest` skips it with the reason.
  auto tamper = [&](const std::function<void(nlohmann::json&)>& f) {
    auto m = read_json(bad / "manifest.json");
    f(m);
    write_file(bad / "manifest.json", m.dump(2));
  };
  auto refused = [&](const std::string& why) {
    auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", bad.string()});
    INFO(r.err << r.out);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("cannot resume from checkpoint '" + bad.string() + "': " + why) !=
          std::string::npos);
    auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
    INFO(r2.err << r2.out);
    CHECK(r2.exit_code == 0);
    CHECK(r2.err.find("warning: skipping checkpoint '" + bad.string() + "': " + why) !=
          std::string::npos);
    CHECK(r2.out.find("resumed from " + good.string()) != std::string::npos);
    CHECK(file_hashes(good) == good_hashes);
  };
  // Another run's files, the manifest's sizes and hashes rewritten to match: consistent
  // hashes, but a mix-up of two runs, refused by what state.pt records of its run and files.
  auto from_other_run = [&](const std::string& file) {
    TempDir other;
    write_file(other / "cfg.toml", config(other, "keep_last = 0\n"));
    REQUIRE(run_wick({"fit", (other / "cfg.toml").string(), "--set", "trainer.epochs=2", "--set",
                      "trainer.seed=8"})
                .exit_code == 0);
    const auto bytes = read_file(other / "run" / "checkpoints" / "ckpt-e0002-b0000000" / file);
    write_file(bad / file, bytes);
    tamper([&](nlohmann::json& m) {
      m["files"][file] = {{"bytes", bytes.size()}, {"sha256", wick::sha256_hex(bytes)}};
    });
  };
  SECTION("state.pt of another run") {
    from_other_run("state.pt");
    refused("state.pt is from another run than manifest.json");
  }
  SECTION("model.pt of another run") {
    from_other_run("model.pt");
    refused(
        "model.pt is not the one state.pt was saved with: a folder mixed from two runs' "
        "checkpoints");
  }
  SECTION("a file entry that leaves the folder") {
    write_file(d / "secret.txt", "secret");
    tamper([&](nlohmann::json& m) {
      m["files"]["../../../secret.txt"] = {{"bytes", 6}, {"sha256", wick::sha256_hex("secret")}};
    });
    refused("manifest.json lists an unexpected file '../../../secret.txt'");
  }
  SECTION("a manifest that is a link to /dev/zero") {
    fs::remove(bad / "manifest.json");
    fs::create_symlink("/dev/zero", bad / "manifest.json");
    refused("manifest.json is not a regular file (it is a symbolic link)");
  }
  SECTION("a manifest that is a FIFO") {
    fs::remove(bad / "manifest.json");
    REQUIRE(::mkfifo((bad / "manifest.json").c_str(), 0600) == 0);
    refused("manifest.json is not a regular file (it is a FIFO)");
  }
  SECTION("a --resume folder that does not exist") {
    auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", (d / "nowhere").string()});
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("cannot resume from checkpoint '" + (d / "nowhere").string() +
                     "': no such folder (No such file or directory)") != std::string::npos);
  }
  SECTION("a folder in place of model.pt") {
    fs::remove(bad / "model.pt");
    fs::create_directory(bad / "model.pt");
    refused("model.pt is not a regular file (it is a folder)");
  }
  SECTION("wrong JSON types") {
    tamper([](nlohmann::json& m) { m["position"]["epoch"] = "two"; });
    refused("manifest.json position 'epoch' is missing or not an integer");
  }
  SECTION("a negative epoch") {
    tamper([](nlohmann::json& m) { m["position"]["epoch"] = -1; });
    refused("manifest.json position 'epoch' is negative (-1)");
  }
  SECTION("a batch past the epoch") {
    tamper([](nlohmann::json& m) { m["position"]["batch"] = 9; });
    refused("its position (epoch 2, batch 9) is past the 8 batches of an epoch of this run");
  }
  SECTION("a world size of 0 or one past any machine") {
    const std::int64_t world = GENERATE(std::int64_t{0}, std::int64_t{1} << 40);
    tamper([&](nlohmann::json& m) { m["run"]["world_size"] = world; });
    refused("manifest.json run 'batch_size' or 'world_size' is out of range (32, " +
            std::to_string(world) + ")");
  }
  SECTION("a position past any data") {
    tamper([](nlohmann::json& m) { m["position"]["batch"] = std::int64_t{1} << 41; });
    refused("manifest.json position is out of range (batch 2199023255552, dealt_from_sample 0)");
  }
  SECTION("an epoch dealt from a batch past its position") {
    tamper([](nlohmann::json& m) {
      m["position"]["dealt_from_batch"] = m["position"]["batch"].get<int>() + 1;
    });
    refused("manifest.json position 'dealt_from_batch' is past its 'batch'");
  }
  SECTION("a record count of zero does not delete the logged history") {
    const auto before = read_jsonl(d / "run" / "metrics.jsonl").size();
    tamper([](nlohmann::json& m) { m["records"] = 0; });
    refused("manifest.json does not agree with state.pt (records: 0 against 10)");
    CHECK(read_jsonl(d / "run" / "metrics.jsonl").size() >= before);
  }
}

TEST_CASE("a resume into another model, data order or optimizer is refused with the differences") {
  TempDir d;
  write_file(d / "cfg.toml", config(d, "", "", "hidden = [32]\n"));
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"}).exit_code == 0);
  const auto before = file_hashes(ckpt_dir(d) / "ckpt-e0001-b0000000");

  auto r = run_wick(
      {"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set", "task.hidden=[48, 8]"});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("does not match the model of this config") != std::string::npos);
  CHECK(r.err.find("0.weight: expected [48, 16] Float, found [32, 16] Float") != std::string::npos);
  CHECK(r.err.find("2.weight: expected [8, 48] Float, found [4, 32] Float") != std::string::npos);
  CHECK(r.err.find("4.weight: expected [4, 8], not in the checkpoint") != std::string::npos);

  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set",
                      "trainer.seed=8", "--set", "trainer.shuffle=false"});
  CHECK(r2.exit_code == 1);
  CHECK(r2.err.find("shuffle: checkpoint 1, this run 0") != std::string::npos);
  CHECK(r2.err.find("seed: checkpoint 7, this run 8") != std::string::npos);

  // Adam's moments are no SGD state: said in the config's words, not LibTorch's.
  auto r3 = run_wick(
      {"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set", "optimizer.name=\"sgd\""});
  INFO(r3.err);
  CHECK(r3.exit_code == 1);
  CHECK(r3.err.find("optimizer 'optimizer' was \"adam\" in the checkpoint's run and is \"sgd\" in "
                    "this config; its state does not carry over. Resume with [optimizer] name = "
                    "\"adam\"") != std::string::npos);
  CHECK(file_hashes(ckpt_dir(d) / "ckpt-e0001-b0000000") == before);
}

TEST_CASE(
    "a resume takes a changed lr from the config, and another accumulation where windows "
    "begin") {
  // 8 batches, windows of 2: stopped at max_steps 2, the checkpoint is at batch 4.
  TempDir d;
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 1\n",
                    "[optimizer]\nname = \"adamw\"\nlr = 0.01\nweight_decay = 0.1\n"
                    "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"linear\"\ntotal_steps = 4\n"
                    "[[hooks]]\nplugin = \"grad_accum\"\nsteps = 2\n"));
  const std::string cfg = (d / "cfg.toml").string();
  REQUIRE(run_wick({"fit", cfg, "--set", "trainer.epochs=1", "--set", "trainer.max_steps=2"})
              .exit_code == 0);
  REQUIRE(fs::exists(ckpt_dir(d) / "ckpt-e0000-b0000004"));
  const auto before = file_hashes(ckpt_dir(d) / "ckpt-e0000-b0000004");
  const auto model_before = read_file(d / "run" / "model.pt");

  // Windows of 3 would begin at batch 3: batch 4 is inside one.
  auto r = run_wick({"fit", cfg, "--resume", "latest", "--set", "trainer.epochs=1", "--set",
                     "hooks.grad_accum.steps=3"});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("(epoch 0, batch 4) was written by a run accumulating 2 micro-batches per "
                   "optimizer step, and this run accumulates 3") != std::string::npos);
  CHECK(r.err.find("resume with hooks.grad_accum.steps = 2") != std::string::npos);
  CHECK(file_hashes(ckpt_dir(d) / "ckpt-e0000-b0000004") == before);
  CHECK(read_file(d / "run" / "model.pt") == model_before);
  // Nor does a refused resume from an older checkpoint replace the later weights of model.pt
  // with its own.
  REQUIRE(fs::exists(ckpt_dir(d) / "ckpt-e0000-b0000002"));
  auto older = run_wick({"fit", cfg, "--resume", (ckpt_dir(d) / "ckpt-e0000-b0000002").string(),
                         "--set", "trainer.epochs=1", "--set", "hooks.grad_accum.steps=3"});
  CHECK(older.exit_code == 1);
  CHECK(read_file(d / "run" / "model.pt") == model_before);

  // Windows of 4 begin at batch 4: one more step, at the new lr's schedule.
  auto r2 = run_wick({"fit", cfg, "--resume", "latest", "--set", "trainer.epochs=1", "--set",
                      "hooks.grad_accum.steps=4", "--set", "optimizer.lr=0.005", "--set",
                      "optimizer.weight_decay=0"});
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  CHECK(r2.err.find("optimizer 'optimizer', parameter group 0: lr 0.01 -> 0.005, weight_decay "
                    "0.1 -> 0") != std::string::npos);
  CHECK(r2.err.find("written by a run accumulating 2 micro-batches per optimizer step, with 4") !=
        std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["optimizer_steps"] == 3);
  // Linear to 0 over 4 steps: the third step trained at half the base, the new one's.
  double lr = 0;
  for (const auto& l : read_jsonl(d / "run" / "metrics.jsonl"))
    if (l.contains("lr")) lr = l["lr"].get<double>();
  CHECK(lr == Approx(0.005 / 2));
}

TEST_CASE("a resume with the task or hooks configured otherwise names each change") {
  TempDir d;
  write_file(d / "cfg.toml", config(d, ""));
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"}).exit_code == 0);
  write_file(d / "changed.toml",
             config(d, "keep_last = 2\n", "[[hooks]]\nplugin = \"mixup\"\n", "seed = 3\n"));
  auto r = run_wick(
      {"fit", (d / "changed.toml").string(), "--resume", "latest", "--set", "trainer.epochs=2"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("with a task or hooks configured otherwise than its run's; this config's are "
                   "taken (where they change training, the run no longer continues as the "
                   "interrupted one would have):\n"
                   "  task.seed: (unset) -> 3\n"
                   "  hooks.checkpoint.keep_last: (unset) -> 2\n"
                   "  hooks.mixup: added\n") != std::string::npos);
  // The same config again: nothing to say.
  auto r2 = run_wick(
      {"fit", (d / "changed.toml").string(), "--resume", "latest", "--set", "trainer.epochs=3"});
  CHECK(r2.exit_code == 0);
  CHECK(r2.err.find("configured otherwise") == std::string::npos);
}

TEST_CASE("a resume onto other training data or shorter epochs is refused, naming what differs") {
  // Not skipped as a damaged checkpoint: the order of the epoch, or its length, is another.
  TempDir d;
  write_file(d / "cfg.toml", config(d, "every_n_steps = 2\n"));
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.max_steps=5"}).exit_code ==
          0);
  auto more = run_wick(
      {"fit", (d / "cfg.toml").string(), "--set", "task.samples=320", "--resume", "latest"});
  CHECK(more.exit_code == 1);
  CHECK(more.err.find("was written by a run whose training data held 256 samples; this run's "
                      "holds 320: each epoch's order is dealt over them") != std::string::npos);
  auto shorter = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.steps_per_epoch=4",
                           "--resume", "latest"});
  CHECK(shorter.exit_code == 1);
  CHECK(shorter.err.find("is at batch 5 of epoch 0, past the 4 batches of this run's epochs "
                         "(trainer.steps_per_epoch = 4; the checkpoint's run had none, its "
                         "epochs the data's length); leave trainer.steps_per_epoch unset to "
                         "continue it") != std::string::npos);
  CHECK(checkpoints(d).back() == "ckpt-e0000-b0000005");  // nothing set aside
  // Another count of threads goes on, saying the values will not be bit-identical.
  auto threads = run_wick(
      {"fit", (d / "cfg.toml").string(), "--set", "trainer.threads=2", "--resume", "latest"});
  INFO(threads.err);
  CHECK(threads.exit_code == 0);
  CHECK(threads.err.find("was trained on 1 thread(s), this run on 2 (trainer.threads): the values "
                         "will differ from an uninterrupted run's in their last bits") !=
        std::string::npos);
}

TEST_CASE("resume without a checkpoint hook is an error and not a silent fresh start") {
  TempDir d;
  write_file(d / "cfg.toml", "[trainer]\nepochs = 1\noutput_dir = \"" + (d / "run").string() +
                                 "\"\n[task]\nplugin = \"synthetic\"\nsamples = 64\n");
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("no hook restored a checkpoint; enable one with [[hooks]] plugin = "
                   "\"checkpoint\"") != std::string::npos);
}

TEST_CASE("a leftover of an ended save that cannot be removed is reported, and the fit goes on") {
  TempDir d;
  // An unfinished save of a process that has ended, holding a folder whose entries cannot be
  // unlinked (no write permission on it; run without the capability that overrides it).
  const auto leftover = ckpt_dir(d) / (".tmp-ckpt-e0000-b0000004-" + std::to_string(ended_pid()));
  fs::create_directories(leftover / "stuck");
  write_file(leftover / "stuck" / "model.pt", "partial");
  fs::permissions(leftover / "stuck",
                  fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\nkeep_last = 0\n"));
  auto r = run_wick_unprivileged({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"});
  fs::permissions(leftover / "stuck", fs::perms::owner_write, fs::perm_options::add);
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("wick: checkpoint: could not remove the leftover '" + leftover.string() +
                   "': Permission denied") != std::string::npos);
  CHECK(fs::exists(ckpt_dir(d) / "ckpt-e0000-b0000004" / "manifest.json"));
}

TEST_CASE(
    "a moved-aside checkpoint that cannot be put back is reported and kept, the fit goes on") {
  if (::geteuid() != 0) skip("needs root, to give the checkpoint folder to another user");
  TempDir d;
  // A replace killed between its two renames, by a process that has ended: checkpoint
  // ckpt-e0000-b0000003 moved aside, its replacement not yet in place. In a sticky folder, an
  // entry of another user cannot be renamed without CAP_FOWNER (run without it).
  const auto aside = ckpt_dir(d) / (".old-ckpt-e0000-b0000003-" + std::to_string(ended_pid()));
  fs::create_directories(aside);
  write_file(aside / "manifest.json", "{}");
  for (const auto& p : {ckpt_dir(d), aside})
    if (::chown(p.c_str(), 61234, 61234) != 0)
      skip("cannot give a folder to another user id here: " + std::string(std::strerror(errno)));
  fs::permissions(ckpt_dir(d), fs::perms::all | fs::perms::sticky_bit);
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\nkeep_last = 0\n"));
  auto r = run_wick_unprivileged({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("wick: checkpoint: could not restore the leftover '" + aside.string() +
                   "': Operation not permitted") != std::string::npos);
  CHECK(read_file(aside / "manifest.json") == "{}");
  CHECK_FALSE(fs::exists(ckpt_dir(d) / "ckpt-e0000-b0000003"));
  CHECK(fs::exists(ckpt_dir(d) / "ckpt-e0000-b0000004" / "manifest.json"));
}

TEST_CASE("a read-only checkpoint folder gives a clear error at start and at save time") {
  TempDir d;
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\nkeep_last = 0\n"));
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"}).exit_code == 0);
  const auto names = checkpoints(d);
  std::map<std::string, std::map<std::string, std::string>> before;
  for (const auto& n : names) before[n] = file_hashes(ckpt_dir(d) / n);

  SECTION("at start") {
    fs::permissions(ckpt_dir(d),
                    fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
    auto r = run_wick_unprivileged({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
    fs::permissions(ckpt_dir(d), fs::perms::owner_write, fs::perm_options::add);
    INFO(r.err << r.out);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("plugin 'checkpoint' (instance 'checkpoint') at before_fit: the checkpoint "
                     "folder '" +
                     ckpt_dir(d).string() + "' cannot hold a checkpoint: Permission denied") !=
          std::string::npos);
    CHECK(read_json(d / "run" / "summary.json")["optimizer_steps"] == 0);
  }
  SECTION("an output_dir that cannot be written") {
    const auto out = d / "readonly_out";
    fs::create_directories(out);
    fs::permissions(out, fs::perms::owner_read | fs::perms::owner_exec);
    auto r = run_wick_unprivileged(
        {"fit", (d / "cfg.toml").string(), "--set", "trainer.output_dir=" + out.string()});
    fs::permissions(out, fs::perms::owner_all);
    INFO(r.err << r.out);
    CHECK(r.exit_code == 1);
    // The lock is the first file a fit writes.
    CHECK(r.err.find("cannot write '" + (out / "wick.lock").string() +
                     "': Permission denied; make the output folder writable or set "
                     "trainer.output_dir to another folder") != std::string::npos);
    CHECK(fs::is_empty(out));
  }
  SECTION("at save time") {
    // Read-only from step 10 (in epoch 2) on: the save of step 12 fails.
    write_file(d / "cfg.toml", config(d, "every_n_steps = 4\nkeep_last = 0\n",
                                      fault("action = \"readonly\"\nstep = 10\n")));
    auto r = run_wick_unprivileged({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
    fs::permissions(ckpt_dir(d), fs::perms::owner_write, fs::perm_options::add);
    INFO(r.err << r.out);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("cannot save checkpoint '" + (ckpt_dir(d) / "ckpt-e0001-b0000004").string() +
                     "': cannot create") != std::string::npos);
    CHECK(r.err.find("Permission denied; the earlier checkpoints in '" + ckpt_dir(d).string() +
                     "' are untouched") != std::string::npos);
    auto s = read_json(d / "run" / "summary.json");
    CHECK(s["status"] == "failed");
  }
  SECTION("a fresh fit that cannot set the earlier run's checkpoints aside") {
    // Read-only from step 1 on: the first save, at step 4, makes no folder to move them into.
    write_file(d / "cfg.toml", config(d, "every_n_steps = 4\nkeep_last = 0\n",
                                      fault("action = \"readonly\"\nstep = 1\n")));
    auto r = run_wick_unprivileged({"fit", (d / "cfg.toml").string()});
    fs::permissions(ckpt_dir(d), fs::perms::owner_write, fs::perm_options::add);
    INFO(r.err << r.out);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("cannot make a folder to set checkpoints aside in, '" +
                     (ckpt_dir(d) / "superseded-").string()) != std::string::npos);
    CHECK(r.err.find("Permission denied; free the checkpoint folder or set "
                     "hooks.checkpoint.dir") != std::string::npos);
  }
  SECTION("a fresh fit that cannot move one of the earlier run's checkpoints") {
    // Moving a folder to another parent rewrites its "..": a folder without write permission
    // stays. The folder made for them is removed again, empty.
    const auto stuck = ckpt_dir(d) / names.front();
    fs::permissions(stuck, fs::perms::owner_write, fs::perm_options::remove);
    auto r = run_wick_unprivileged({"fit", (d / "cfg.toml").string()});
    fs::permissions(stuck, fs::perms::owner_write, fs::perm_options::add);
    INFO(r.err << r.out);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("cannot move the checkpoint '" + stuck.string() + "' aside to '" +
                     (ckpt_dir(d) / "superseded-").string()) != std::string::npos);
    CHECK(r.err.find("Permission denied; move or remove it, then start the fit again") !=
          std::string::npos);
  }
  CHECK(checkpoints(d) == names);
  for (const auto& n : names) CHECK(file_hashes(ckpt_dir(d) / n) == before[n]);
}

TEST_CASE("a full disk at save time gives a clear error and earlier checkpoints stay loadable") {
  TempDir d;
  // A bigger model so that its checkpoint files outgrow the 16 KiB cap; metrics.jsonl does not.
  const std::string task = "hidden = [256]\n";
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\nkeep_last = 0\n",
                                    fault("action = \"fsize\"\nstep = 6\nbytes = 16384\n"), task));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("cannot save checkpoint '" + (ckpt_dir(d) / "ckpt-e0000-b0000008").string() +
                   "'") != std::string::npos);
  CHECK(r.err.find("File too large") != std::string::npos);
  CHECK(checkpoints(d) == std::vector<std::string>{"ckpt-e0000-b0000004"});  // no leftovers

  // The earlier checkpoint still resumes.
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\n", "", task));
  auto r2 = run_wick(
      {"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set", "trainer.epochs=1"});
  INFO(r2.err << r2.out);
  CHECK(r2.exit_code == 0);
  CHECK(r2.out.find("(epoch 0, batch 4, optimizer step 4)") != std::string::npos);
}

TEST_CASE("a checkpoint folder another run writes is refused at start, naming the holder") {
  TempDir d;
  const auto shared = d / "shared";
  write_file(d / "cfg.toml", config(d, "dir = \"" + shared.string() + "\"\n"));
  // Held as another fit holds it (this process, through the SDK's lock).
  fs::create_directories(shared);
  auto held = wick::lock_folder(shared.string(), "checkpoint folder", "use another");
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("checkpoint folder '" + shared.string() + "' is in use by wick pid " +
                   std::to_string(::getpid()) + " on host ") != std::string::npos);
  CHECK(r.err.find("or give each run its own hooks.checkpoint.dir") != std::string::npos);
  held.reset();
  // A fit lets go of it when it ends (had it not, the file would still name it, and the next
  // fit would say it takes the folder over): the next one resumes there.
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"}).exit_code == 0);
  CHECK(read_file(shared / "wick.lock").empty());
  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
  INFO(r2.err);
  CHECK(r2.exit_code == 0);
  CHECK(r2.err.find("taking over") == std::string::npos);
}

TEST_CASE("a checkpoint folder whose saves would pass the path limit is refused at start") {
  TempDir d;
  // A folder the system can make, whose checkpoints' files it could not: the limit is 4096
  // bytes a path, and a save writes .tmp-ckpt-e0000-b0000004-PID/manifest.json.tmp under it.
  fs::path dir = d.path();
  while (dir.string().size() + 201 < 4060) dir /= std::string(200, 'c');
  dir /= std::string(4060 - dir.string().size() - 1, 'c');
  REQUIRE(dir.string().size() == 4060);
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\ndir = \"" + dir.string() + "\"\n"));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("' cannot hold a checkpoint: File name too long; make it writable or set "
                   "hooks.checkpoint.dir to a writable folder with a shorter path") !=
        std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["optimizer_steps"] == 0);
}

TEST_CASE("fresh fits of one process in one second each move the earlier checkpoints aside") {
  // A host program's fits, in process: one pid, and each start in the same second. The folder
  // a second fit would move the first's checkpoints to is taken already (made here for every
  // second of the next minute), holding checkpoints of the same names: a move into it fails.
  TempDir d;
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\n"));
  auto fit = [&] {
    const auto conf = wick::Config::load((d / "cfg.toml").string(), {"trainer.epochs=1"});
    wick::PluginFinder finder({WICK_PLUGIN_DIR});
    return wick::make_trainer(conf, finder)->fit().status;
  };
  REQUIRE(fit() == wick::FitResult::Status::completed);
  const auto first = checkpoints(d);
  REQUIRE(first.size() == 3);  // at steps 4 and 8, and the epoch's end
  const auto first_hashes = file_hashes(ckpt_dir(d) / first.back());
  std::vector<std::string> taken;
  for (std::time_t t = std::time(nullptr) - 1, end = t + 61; t < end; ++t) {
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&t));
    taken.push_back("superseded-" + std::string(stamp) + "-" + std::to_string(::getpid()));
    for (const auto& n : first) write_file(ckpt_dir(d) / taken.back() / n / "other", "x");
  }
  REQUIRE(fit() == wick::FitResult::Status::completed);
  // The first fit's checkpoints are in a folder of their own, none left among the second's.
  std::vector<std::string> made;
  for (const auto& n : checkpoints(d))
    if (n.rfind("superseded-", 0) == 0 && std::find(taken.begin(), taken.end(), n) == taken.end())
      made.push_back(n);
  REQUIRE(made.size() == 1);
  CHECK(file_hashes(ckpt_dir(d) / made[0] / first.back()) == first_hashes);
  CHECK(file_hashes(ckpt_dir(d) / first.back()) != first_hashes);  // the second fit's own
}

TEST_CASE("keep_superseded keeps the newest folders of set-aside checkpoints") {
  // Fresh fits of one process into one folder: each sets the one before aside.
  TempDir d;
  auto fit = [&](const std::string& keep) {
    const auto conf =
        wick::Config::load((d / "cfg.toml").string(),
                           {"trainer.epochs=1", "hooks.checkpoint.keep_superseded=" + keep});
    wick::PluginFinder finder({WICK_PLUGIN_DIR});
    std::string out, err;
    wick::test::capturing(
        [&] {
          REQUIRE(wick::make_trainer(conf, finder)->fit().status ==
                  wick::FitResult::Status::completed);
        },
        out, err);
    return err;
  };
  auto aside = [&] {
    std::vector<std::string> out;
    for (const auto& n : checkpoints(d))
      if (n.rfind("superseded-", 0) == 0) out.push_back(n);
    return out;
  };
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\n"));
  fit("0");
  fit("0");
  // All kept (0): from the second folder on, their number and size are said.
  const auto err = fit("0");
  CHECK(aside().size() == 2);
  CHECK_THAT(
      err,
      Catch::Contains("wick: note: 2 folders of set-aside checkpoints (superseded-...) hold ") &&
          Catch::Contains("set hooks.checkpoint.keep_superseded to keep the newest few"));
  const auto before = aside();
  const auto err2 = fit("2");
  const auto after = aside();
  REQUIRE(after.size() == 2);
  CHECK(std::count(after.begin(), after.end(), before[0]) == 0);  // the oldest removed
  CHECK_THAT(err2, Catch::Contains("removed the 1 oldest folder(s) of set-aside checkpoints "
                                   "(hooks.checkpoint.keep_superseded = 2)"));
  CHECK(fit("1").find("removed the 2 oldest") != std::string::npos);
  CHECK(aside().size() == 1);
  // A count below 0 is refused, naming the key.
  const auto bad =
      wick::Config::load((d / "cfg.toml").string(), {"hooks.checkpoint.keep_superseded=-1"});
  wick::PluginFinder finder({WICK_PLUGIN_DIR});
  CHECK_THROWS_WITH(
      wick::make_trainer(bad, finder),
      Catch::Contains("'keep_superseded'") && Catch::Contains("must be >= 0 (0: keep all)"));
}

TEST_CASE("a set-aside folder keep_superseded cannot remove is warned of and the fit goes on") {
  TempDir d;
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\n"));
  const std::vector<std::string> one_epoch = {"fit", (d / "cfg.toml").string(), "--set",
                                              "trainer.epochs=1"};
  for (int i = 0; i < 3; ++i) REQUIRE(run_wick(one_epoch).exit_code == 0);
  std::vector<std::string> aside;
  for (const auto& n : checkpoints(d))
    if (n.rfind("superseded-", 0) == 0) aside.push_back(n);
  REQUIRE(aside.size() == 2);
  // The older one's checkpoints cannot be removed (their folder is not writable, to a user
  // without root's capabilities); the newer one goes.
  std::sort(aside.begin(), aside.end(), [&](const std::string& a, const std::string& b) {
    return fs::last_write_time(ckpt_dir(d) / a) < fs::last_write_time(ckpt_dir(d) / b);
  });
  const auto stuck = ckpt_dir(d) / aside[0] / "ckpt-e0000-b0000004";
  REQUIRE(fs::exists(stuck / "manifest.json"));
  fs::permissions(stuck, fs::perms::owner_write, fs::perm_options::remove);
  auto args = one_epoch;
  args.insert(args.end(), {"--set", "hooks.checkpoint.keep_superseded=1"});
  auto r = run_wick_unprivileged(args);
  fs::permissions(stuck, fs::perms::owner_write, fs::perm_options::add);
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("wick: warning: cannot remove the set-aside checkpoints '" +
                   (ckpt_dir(d) / aside[0]).string() +
                   "' (hooks.checkpoint.keep_superseded = 1): Permission denied") !=
        std::string::npos);
  CHECK(fs::exists(stuck / "manifest.json"));
  CHECK_FALSE(fs::exists(ckpt_dir(d) / aside[1]));
  CHECK(read_json(d / "run" / "summary.json")["status"] == "completed");
}

TEST_CASE("a run folder removed while the fit runs stops it at the next record and says so") {
  TempDir d;
  write_file(d / "cfg.toml", config(d, "", fault("action = \"remove\"\npath = \"\"\nstep = 3\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  // log_every = 2: the record of step 4 is the first that would have been lost.
  CHECK(r.err.find("'" + (d / "run" / "metrics.jsonl").string() +
                   "' was removed while the fit ran (its run folder with it?)") !=
        std::string::npos);
}

TEST_CASE("a fit ends in its own words, not killed by SIGPIPE or SIGXFSZ") {
  {
    // Its reader gone (`wick fit | tee`, then Ctrl-C): the fit goes on and ends as it would.
    TempDir d;
    write_file(d / "cfg.toml", config(d, ""));
    auto r = run({"/bin/bash", "-c", "\"$0\" fit \"$1\" | true; exit ${PIPESTATUS[0]}", WICK_BIN,
                  (d / "cfg.toml").string()});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(read_json(d / "run" / "summary.json")["status"] == "completed");
  }
  TempDir d;
  write_file(d / "cfg.toml", config(d, "every_n_steps = 4\n", "", "hidden = [256]\n"));
  // 32 blocks of 512 bytes: the checkpoint's files outgrow it, the run's small files do not.
  auto r = run({"/bin/sh", "-c", "ulimit -f 32 && exec \"$0\" fit \"$1\"", WICK_BIN,
                (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("cannot save checkpoint '" + (ckpt_dir(d) / "ckpt-e0000-b0000004").string() +
                   "'") != std::string::npos);
  CHECK(r.err.find("File too large") != std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["status"] == "failed");
}

TEST_CASE("a record that cannot be written leaves no checkpoint past it, and no stale summary") {
  TempDir d;
  write_file(d / "cfg.toml", config(d, ""));
  fs::create_directories(d / "run");
  fs::create_symlink("/dev/full", d / "run" / "metrics.jsonl");
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.log_every=0"});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  // Epoch 0's record failed after after_epoch: the epoch's checkpoint, due then and written at
  // the fit's end, would resume past it.
  CHECK(r.err.find("not saving checkpoint 'ckpt-e0001-b0000000' (epoch): a record this run is "
                   "past could not be written to metrics.jsonl") != std::string::npos);
  CHECK(checkpoints(d).empty());

  // A fit that cannot write its summary.json does not print the one an earlier run left.
  fs::remove(d / "run" / "metrics.jsonl");
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"}).exit_code == 0);
  fs::create_directories(d / "run" / "summary.json.tmp" / "x");
  auto r2 = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r2.err << r2.out);
  CHECK(r2.exit_code == 1);
  CHECK(r2.out.find("wick: completed") == std::string::npos);
  CHECK(r2.out.find("wick: failed after 0 epoch(s), 0 optimizer steps") != std::string::npos);
}

TEST_CASE("keep_last keeps the newest K and best follows the monitored metric") {
  TempDir d;
  write_file(d / "cfg.toml",
             config(d,
                    "every_n_steps = 2\nkeep_last = 2\nmonitor = \"valid/accuracy\"\n"
                    "mode = \"max\"\n"));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(checkpoints(d) ==
        std::vector<std::string>{"best", "ckpt-e0002-b0000008", "ckpt-e0003-b0000000"});
  double best = -1;
  std::int64_t best_epoch = -1, records_then = 0, n = 0;
  for (auto& l : read_jsonl(d / "run" / "metrics.jsonl")) {
    ++n;
    if (l["kind"] == "epoch" && l["valid/accuracy"].get<double>() > best) {
      best = l["valid/accuracy"];
      best_epoch = l["epoch"];
      records_then = n;  // the best epoch's record is the last one the snapshot counts
    }
  }
  auto m = read_json(ckpt_dir(d) / "best" / "manifest.json");
  CHECK(m["position"]["epoch"] == best_epoch + 1);
  CHECK(m["records"] == records_then);
  CHECK(m["reason"] == "best");

  // A fresh run into the same folder moves the earlier run's checkpoints aside, so that
  // neither keep_last nor --resume latest mixes the two runs.
  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"});
  INFO(r2.err << r2.out);
  CHECK(r2.exit_code == 0);
  CHECK(r2.err.find("moved 3 checkpoint(s) of an earlier run aside to '" +
                    (ckpt_dir(d) / "superseded-").string()) != std::string::npos);
  auto now = checkpoints(d);
  REQUIRE(now.size() == 4);
  CHECK(std::vector<std::string>(now.begin(), now.begin() + 3) ==
        std::vector<std::string>{"best", "ckpt-e0000-b0000008", "ckpt-e0001-b0000000"});
  CHECK(now[3].rfind("superseded-", 0) == 0);
  CHECK(fs::exists(ckpt_dir(d) / now[3] / "ckpt-e0003-b0000000" / "manifest.json"));

  // A fit that fails before it trains (a hook's check in before_fit, after the checkpoint
  // hook's) saves nothing and leaves the earlier run's checkpoints and records as they were.
  const auto records = read_file(d / "run" / "metrics.jsonl");
  const auto table = read_file(d / "run" / "metrics.csv");
  write_file(d / "fails.toml",
             config(d, "every_n_steps = 2\nkeep_last = 2\n", fault("at = \"before_fit\"\n")));
  auto r3 = run_wick({"fit", (d / "fails.toml").string()});
  INFO(r3.err << r3.out);
  CHECK(r3.exit_code == 1);
  CHECK(r3.err.find("not saving on failure: nothing was trained since the fit started") !=
        std::string::npos);
  CHECK(checkpoints(d) == now);
  CHECK(read_file(d / "run" / "metrics.jsonl") == records);
  CHECK(read_file(d / "run" / "metrics.csv") == table);
}

TEST_CASE(
    "a resume from best moves aside only what came after it, and a best a kill left aside is "
    "back") {
  TempDir d;
  write_file(d / "cfg.toml", config(d,
                                    "every_n_steps = 4\nkeep_last = 0\nmonitor = \"valid/loss\"\n"
                                    "mode = \"max\"\n"));  // the highest loss: an early epoch
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string()}).exit_code == 0);
  const auto m = read_json(ckpt_dir(d) / "best" / "manifest.json");
  char at[64];
  std::snprintf(at, sizeof at, "ckpt-e%04lld-b%07lld", m["position"]["epoch"].get<long long>(),
                m["position"]["batch"].get<long long>());
  std::vector<std::string> before, after;
  for (const auto& n : checkpoints(d))
    if (n.rfind("ckpt-", 0) == 0) (n <= at ? before : after).push_back(n);
  REQUIRE_FALSE(after.empty());
  // A save of best killed between its two renames: the old best aside, the new one not yet in.
  const auto aside = ckpt_dir(d) / (".old-best-" + std::to_string(ended_pid()));
  fs::rename(ckpt_dir(d) / "best", aside);
  // A save in progress in a live process (this one) that shares the folder: left alone.
  const auto live = ckpt_dir(d) / (".tmp-ckpt-e0009-b0000000-" + std::to_string(::getpid()));
  fs::create_directory(live);
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "best"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(fs::exists(aside));
  CHECK(fs::exists(live));
  CHECK(r.err.find("moved " + std::to_string(after.size()) +
                   " checkpoint(s) of the abandoned later part") != std::string::npos);
  for (const auto& n : before) CHECK(fs::exists(ckpt_dir(d) / n / "manifest.json"));
}

TEST_CASE("replacing a checkpoint folder: a failed second rename puts the earlier one back") {
  TempDir d;
  const auto dir = d / "best";
  auto files_of = [](const std::string& body) {
    wick::Files f;
    for (const char* name : wick::kCheckpointFiles) f.emplace_back(name, body + name);
    return f;
  };
  wick::Manifest m;
  m.reason = "first";
  wick::write_checkpoint_folder(dir, m, files_of("a"));
  m.reason = "second";
  wick::write_checkpoint_folder(dir, m, files_of("b"));  // a plain replace
  CHECK(read_json(dir / "manifest.json")["reason"] == "second");
  // The new folder vanishes between the two renames (the old one is aside): the second
  // rename fails for real, and the second folder must come back under its name.
  m.reason = "third";
  const auto tmp = d / (".tmp-best-" + std::to_string(::getpid()));
  CHECK_THROWS_WITH(wick::write_checkpoint_folder(dir, m, files_of("c"),
                                                  [&] {
                                                    REQUIRE_FALSE(fs::exists(dir));
                                                    fs::remove_all(tmp);
                                                  }),
                    Catch::Contains("cannot save checkpoint '" + dir.string() + "'") &&
                        Catch::Contains("' are untouched"));
  CHECK(read_json(dir / "manifest.json")["reason"] == "second");
  CHECK(read_file(dir / "model.pt") == "bmodel.pt");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(d.path())) left.push_back(e.path().filename());
  CHECK(left == std::vector<std::string>{"best"});  // neither .tmp- nor .old- is left
}

TEST_CASE("a checkpoint never replaces a file or a folder that is not a checkpoint's") {
  TempDir d;
  wick::Files files;
  for (const char* name : wick::kCheckpointFiles) files.emplace_back(name, name);
  wick::Manifest m;
  // A user's folder, the run folder itself (its records inside), a run's file.
  fs::create_directories(d / "notes");
  write_file(d / "notes" / "data.txt", "precious");
  write_file(d / "metrics.jsonl", "{}\n");
  for (const auto& target : {d / "notes", d.path(), d / "metrics.jsonl"}) {
    INFO(target);
    CHECK_THROWS_WITH(wick::write_checkpoint_folder(target, m, files),
                      Catch::Contains("cannot save checkpoint '" + target.string() +
                                      "': it exists and is not a checkpoint's folder"));
  }
  CHECK(read_file(d / "notes" / "data.txt") == "precious");
  CHECK(read_file(d / "metrics.jsonl") == "{}\n");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(d.path())) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"metrics.jsonl", "notes"});  // no .tmp- left
}

TEST_CASE(
    "a kill between best and the periodic checkpoint after it keeps best, and the resume "
    "writes it again") {
  TempDir d;
  // Epoch 0's end makes best due (its first value) and the epoch's checkpoint; epoch 1's start
  // writes them, best first. The kill comes in the second write.
  write_file(d / "cfg.toml",
             config(d, "every_n_steps = 4\nkeep_last = 0\nmonitor = \"valid/loss\"\n",
                    fault("action = \"savekill\"\nat = \"after_epoch\"\nepoch = 0\nsaves = 1\n")));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 128 + 9);
  std::vector<std::string> periodic;
  for (const auto& n : checkpoints(d))
    if (n.rfind("ckpt-", 0) == 0) periodic.push_back(n);
  CHECK(periodic == std::vector<std::string>{"ckpt-e0000-b0000004", "ckpt-e0000-b0000008"});
  const auto m = read_json(ckpt_dir(d) / "best" / "manifest.json");
  CHECK(m["position"]["epoch"] == 1);
  CHECK(m["position"]["batch"] == 0);

  // The latest checkpoint holds no best value yet: epoch 0's validation runs again and best is
  // written again, so best always holds the best value of the checkpoints there are.
  auto r2 = resume_without_fault(d);
  CHECK(r2.out.find("(epoch 0, batch 8, optimizer step 8)") != std::string::npos);
  check_matches_reference(d);
  double best = 0;
  std::int64_t best_epoch = -1;
  for (auto& l : read_jsonl(d / "run" / "metrics.jsonl"))
    if (l["kind"] == "epoch" && (best_epoch < 0 || l["valid/loss"].get<double>() < best)) {
      best = l["valid/loss"];
      best_epoch = l["epoch"];
    }
  const auto m2 = read_json(ckpt_dir(d) / "best" / "manifest.json");
  CHECK(m2["position"]["epoch"] == best_epoch + 1);
  for (const auto& n : checkpoints(d)) CHECK(n.rfind(".tmp-", 0) != 0);  // the kill's is gone
}

TEST_CASE("a stop signal before the loop acts on early stopping: the resume stops there too") {
  TempDir d;
  // Stops after epoch 1 of 3: no change counts as an improvement.
  const std::string stop =
      "[[hooks]]\nplugin = \"early_stopping\"\npatience = 1\nmin_delta = 100.0\n";
  write_file(d / "cfg.toml", config(d, "", stop));
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string()}).exit_code == 0);
  const auto whole = read_json(d / "run" / "summary.json");
  REQUIRE(whole["epochs"] == 2);
  // A restart from the checkpoint the stopped run ended with (a kill -9 before its exit) trains
  // nothing more either.
  auto again = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "auto"});
  INFO(again.err << again.out);
  REQUIRE(again.exit_code == 0);
  CHECK(again.err.find("the checkpoint's run was stopping (early_stopping: ") != std::string::npos);
  for (const char* k : {"epochs", "optimizer_steps", "model_fingerprint", "valid/loss"})
    CHECK(read_json(d / "run" / "summary.json")[k] == whole[k]);
  // SIGINT as epoch 1's validation starts: its after_epoch still runs (early stopping asks to
  // stop), then the signal ends the fit with a cancel checkpoint at (2, 0).
  write_file(
      d / "cfg.toml",
      config(d, "", stop + fault("action = \"sigint\"\nat = \"before_valid\"\nepoch = 1\n")));
  auto cut = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(cut.err << cut.out);
  REQUIRE(cut.exit_code == 130);
  REQUIRE(fs::exists(ckpt_dir(d) / "ckpt-e0002-b0000000"));
  CHECK(read_json(d / "run" / "summary.json")["epochs"] == 2);  // whole epochs, by position
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("the checkpoint's run was stopping (early_stopping: valid/loss has not "
                   "improved for 1 epochs") != std::string::npos);
  const auto resumed = read_json(d / "run" / "summary.json");
  CHECK(resumed["status"] == "completed");
  // What the uninterrupted run ended with; its last validation kept by the checkpoint.
  for (const char* k : {"epochs", "optimizer_steps", "model_fingerprint", "valid/loss"})
    CHECK(resumed[k] == whole[k]);
  // Other limits: the user asks for more, and the resume trains on (early stopping, whose
  // patience is spent, stops it after one more epoch).
  auto more = run_wick(
      {"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set", "trainer.epochs=5"});
  INFO(more.err << more.out);
  REQUIRE(more.exit_code == 0);
  CHECK(more.err.find("was stopping") == std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["epochs"] == 3);
}
