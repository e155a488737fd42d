// wick launch's process logic with ordinary programs: torchrun's environment, rank-prefixed
// output, ending the other ranks when one fails, forwarding stop signals.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

#include "support.hpp"
#include "wick/cluster.hpp"
#include "wick/launch.hpp"

using namespace wick::test;

namespace {

struct Captured {
  wick::LaunchResult res;
  std::string out, err;
  double seconds = 0;
};

std::string slurp(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  std::fclose(f);
  return s;
}

Captured run_launch(wick::LaunchOptions o) {
  Captured c;
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  const auto t0 = std::chrono::steady_clock::now();
  c.res = wick::launch(o, out, err);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.out = slurp(out);
  c.err = slurp(err);
  return c;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("launch sets torchrun's variables per rank and prefixes every output line") {
  wick::LaunchOptions o;
  o.nproc = 3;
  o.command = {"sh", "-c",
               "echo r=$RANK l=$LOCAL_RANK w=$WORLD_SIZE lw=$LOCAL_WORLD_SIZE g=$GROUP_RANK "
               "a=$MASTER_ADDR p=$MASTER_PORT; echo oops >&2; printf tail"};
  auto c = run_launch(o);
  INFO(c.err << c.out);
  REQUIRE(c.res.exit_code == 0);
  CHECK(c.res.failed_rank == -1);
  REQUIRE(c.res.master_port > 0);
  const std::string p = std::to_string(c.res.master_port);
  std::vector<std::string> want;
  for (int r = 0; r < 3; ++r) {
    const std::string rs = std::to_string(r);
    want.push_back("[rank " + rs + "] r=" + rs + " l=" + rs + " w=3 lw=3 g=0 a=127.0.0.1 p=" + p);
    want.push_back("[rank " + rs + "] tail");  // an unfinished last line is still prefixed
  }
  std::sort(want.begin(), want.end());
  CHECK(lines_of(c.out) == want);
  CHECK(lines_of(c.err) ==
        std::vector<std::string>{"[rank 0] oops", "[rank 1] oops", "[rank 2] oops"});
}

TEST_CASE("launch numbers ranks across nodes from the node rank") {
  wick::LaunchOptions o;
  o.nproc = 2;
  o.nnodes = 3;
  o.node_rank = 1;
  o.master_addr = "10.1.2.3";
  o.master_port = 29555;
  o.command = {"sh", "-c",
               "echo $RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT"};
  auto c = run_launch(o);
  REQUIRE(c.res.exit_code == 0);
  CHECK(lines_of(c.out) == std::vector<std::string>{"[rank 2] 2 0 6 1 10.1.2.3:29555",
                                                    "[rank 3] 3 1 6 1 10.1.2.3:29555"});
}

TEST_CASE("when one rank fails, launch ends the others and names the rank and exit code") {
  wick::LaunchOptions o;
  o.nproc = 3;
  o.grace_s = 1;
  o.command = {"sh", "-c", "if [ $RANK = 1 ]; then echo giving up; exit 3; fi; exec sleep 60"};
  auto c = run_launch(o);
  INFO(c.err << c.out);
  CHECK(c.res.exit_code == 3);
  CHECK(c.res.failed_rank == 1);
  CHECK(c.res.reason == "exit code 3");
  CHECK(c.out == "[rank 1] giving up\n");
  CHECK(c.err.find("wick launch: failed: rank 1 exit code 3") != std::string::npos);
  CHECK(c.seconds < 30);  // a liveness bound (the others sleep 60 s), not a timing
}

TEST_CASE("max_restarts starts every rank again with --resume auto, up to N times") {
  TempDir d;
  // Rank 1 fails on the first two starts (one marker file per start); the arguments each start
  // got are printed.
  wick::LaunchOptions o;
  o.nproc = 2;
  o.grace_s = 1;
  o.max_restarts = 2;
  o.command = {"sh",
               "-c",
               "echo \"$*\"; if [ $RANK = 1 ]; then for i in 1 2; do if [ ! -e " +
                   (d / "m").string() + "$i ]; then touch " + (d / "m").string() +
                   "$i; exit 3; fi; done; fi",
               "sh",
               "--resume",
               "PATH"};
  auto c = run_launch(o);
  INFO(c.err << c.out);
  CHECK(c.res.exit_code == 0);
  CHECK(c.res.restarts == 2);
  CHECK(c.err.find("wick launch: restart 1 of 2: starting every rank again with --resume "
                   "auto") != std::string::npos);
  CHECK(c.err.find("wick launch: restart 2 of 2") != std::string::npos);
  CHECK(c.out.find("[rank 1] --resume PATH\n") != std::string::npos);  // the first start
  CHECK(c.out.find("[rank 1] --resume auto\n") != std::string::npos);  // the restarts
  // Out of restarts: the failure stands.
  o.max_restarts = 1;
  fs::remove(d / "m1");
  fs::remove(d / "m2");
  auto e = run_launch(o);
  CHECK(e.res.exit_code == 3);
  CHECK(e.res.restarts == 1);
  o.max_restarts = -1;
  CHECK_THROWS_WITH(wick::check_launch_options(o),
                    "--max-restarts must be >= 0 (0: never restart)");
  CHECK(wick::with_resume_auto({"wick", "fit", "c.toml"}) ==
        std::vector<std::string>{"wick", "fit", "c.toml", "--resume", "auto"});
  CHECK(wick::with_resume_auto({"wick", "fit", "--resume=x"}) ==
        std::vector<std::string>{"wick", "fit", "--resume=auto"});
}

TEST_CASE("a rank that ignores SIGTERM is killed after the grace period, signals are named") {
  wick::LaunchOptions o;
  o.nproc = 2;
  o.grace_s = 1;
  // Rank 0 dies by SIGKILL; rank 1 ignores SIGTERM (inherited by sleep) and must be killed.
  o.command = {"sh", "-c",
               "if [ $RANK = 0 ]; then sleep 0.3; kill -9 $$; fi; trap '' TERM; sleep 60"};
  auto c = run_launch(o);
  INFO(c.err << c.out);
  CHECK(c.res.exit_code == 1);
  CHECK(c.res.failed_rank == 0);
  CHECK(c.res.reason == "killed by signal 9 (SIGKILL)");
  CHECK(c.seconds < 30);
}

TEST_CASE("a stop signal to the launcher reaches every rank, which exits 128 + the signal") {
  for (int sig : {SIGTERM, SIGUSR1}) {
    DYNAMIC_SECTION(sigabbrev_np(sig)) {
      TempDir d;
      wick::LaunchOptions o;
      o.nproc = 2;
      // Each rank notes the signal it got and exits as wick fit would (128 + the signal).
      const std::string dir = d.path().string();
      o.command = {"sh", "-c",
                   "trap 'echo TERM > " + dir + "/got$RANK; exit 143' TERM; trap 'echo USR1 > " +
                       dir + "/got$RANK; exit 138' USR1; touch " + dir +
                       "/ready$RANK; while :; do sleep 0.05; done"};
      std::thread sender([&] {
        for (int i = 0; i < 3000; ++i) {
          if (fs::exists(d / "ready0") && fs::exists(d / "ready1")) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        ::kill(::getpid(), sig);  // the launcher's handler is installed for launch()'s length
      });
      auto c = run_launch(o);
      sender.join();
      INFO(c.err << c.out);
      const std::string name = sig == SIGTERM ? "TERM" : "USR1";
      CHECK(c.res.exit_code == 128 + sig);
      CHECK(c.res.failed_rank == -1);
      CHECK(read_file(d / "got0") == name + "\n");
      CHECK(read_file(d / "got1") == name + "\n");
      // The last line (before it, the shells may report their sleep ended by the signal).
      const std::string last =
          "wick launch: stopped by SIG" + name + " (forwarded to every rank)\n";
      CHECK(c.err.size() >= last.size());
      CHECK(c.err.compare(c.err.size() - std::min(c.err.size(), last.size()), last.size(), last) ==
            0);
    }
  }
}

TEST_CASE("a rank that stops on a signal of its own is no failure: the others finish stopping") {
  TempDir d;
  wick::LaunchOptions o;
  o.nproc = 2;
  o.grace_s = 0.1;
  o.max_restarts = 1;
  // As wick fit's ranks after a SIGINT sent to each: they stop at the same step, rank 1 exits
  // 130 at once, rank 0 writes the cancel checkpoint first. Ended when rank 1 exited
  // (SIGTERM), rank 0 would write nothing.
  const std::string ckpt = (d / "ckpt").string();
  o.command = {"sh", "-c",
               "if [ $RANK = 1 ]; then exit 130; fi; sleep 1; touch " + ckpt + "; exit 130"};
  auto c = run_launch(o);
  INFO(c.err << c.out);
  CHECK(fs::exists(ckpt));
  CHECK(c.res.exit_code == 130);
  CHECK(c.res.failed_rank == -1);
  CHECK(c.res.restarts == 0);  // a stop is not restarted
  CHECK(c.err.find("wick launch: rank 1 (local rank 1, pid ") != std::string::npos);
  CHECK(c.err.find(") stopped on SIGINT; waiting for the others to end\n") != std::string::npos);
  CHECK(c.err.find("wick launch: stopped by SIGINT (rank 1 ended first)\n") != std::string::npos);
}

TEST_CASE(
    "a rank a stop signal ended before it could handle one stopped, one left waiting "
    "gets the signal") {
  TempDir d;
  wick::LaunchOptions o;
  o.nproc = 2;
  // Seconds enough for a busy machine's shell to run its trap before a SIGKILL would come.
  o.grace_s = 2;
  o.stop_wait_s = 0.5;
  o.max_restarts = 1;
  // Rank 1 dies of SIGINT's default action (wick fit's handler not yet installed); rank 0
  // waits for it, as at the rendezvous, until a signal ends it.
  const std::string got = (d / "got0").string();
  o.command = {"sh", "-c",
               "if [ $RANK = 1 ]; then kill -INT $$; sleep 5; exit 3; fi; trap 'touch " + got +
                   "; exit 130' INT; while :; do sleep 0.05; done"};
  auto c = run_launch(o);
  INFO(c.err << c.out);
  CHECK(c.res.exit_code == 130);
  CHECK(c.res.failed_rank == -1);
  CHECK(c.res.restarts == 0);  // a stop is not restarted
  CHECK(fs::exists(got));
  CHECK(c.err.find(") stopped on SIGINT; waiting for the others to end\n") != std::string::npos);
  CHECK(c.err.find("wick launch: rank(s) 0 still running 2.5 s after rank 1 stopped; sending "
                   "them SIGINT\n") != std::string::npos);
  CHECK(c.err.find("SIGKILL") == std::string::npos);
  CHECK(c.seconds < 20);
}

TEST_CASE("launch rejects bad options with the option named") {
  wick::LaunchOptions o;
  o.command = {"true"};
  o.nproc = 0;
  CHECK_THROWS_WITH(wick::check_launch_options(o), Catch::Contains("--nproc"));
  o.nproc = wick::kMaxLocalRanks + 1;
  CHECK_THROWS_WITH(wick::check_launch_options(o), Catch::Contains("--nproc must be in [1, 1024]"));
  o.nproc = 1;
  // Not finite or negative: the SIGKILL's time would be in the past (ranks killed at once).
  for (double g : {std::numeric_limits<double>::infinity(), std::nan(""), -1.0, 1e17}) {
    o.grace_s = g;
    CHECK_THROWS_WITH(wick::check_launch_options(o), Catch::Contains("--grace must be seconds"));
  }
  o.grace_s = 5;
  o.nnodes = 2;
  CHECK_THROWS_WITH(wick::check_launch_options(o), Catch::Contains("--master-port"));
  o.master_port = 1234;
  o.node_rank = 2;
  CHECK_THROWS_WITH(wick::check_launch_options(o), Catch::Contains("--node-rank"));
  o.node_rank = 0;
  o.nnodes = std::numeric_limits<int>::max();
  o.nproc = 2;  // a WORLD_SIZE past an int's range
  CHECK_THROWS_WITH(wick::check_launch_options(o), Catch::Contains("--nnodes x --nproc"));
  o = {};
  CHECK_THROWS_WITH(wick::check_launch_options(o), Catch::Contains("after '--'"));
}

TEST_CASE("wick launch runs a command per rank and reports a failing rank") {
  auto ok = run_wick({"launch", "--nproc", "2", "--", "sh", "-c", "echo hi $RANK"});
  INFO(ok.err << ok.out);
  CHECK(ok.exit_code == 0);
  CHECK(lines_of(ok.out) == std::vector<std::string>{"[rank 0] hi 0", "[rank 1] hi 1"});
  auto bad = run_wick({"launch", "--nproc", "2", "--grace", "1", "--", "sh", "-c",
                       "[ $RANK = 0 ] && exec sleep 60; exit 5"});
  INFO(bad.err << bad.out);
  CHECK(bad.exit_code == 5);
  CHECK(bad.err.find("rank 1") != std::string::npos);
  CHECK(bad.err.find("exit code 5") != std::string::npos);
}

namespace {
// detect_cluster_env over a fixed set of variables.
wick::ClusterEnv job_of(const std::map<std::string, std::string>& vars) {
  return wick::detect_cluster_env([&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST_CASE("the first host of a SLURM host list") {
  CHECK(wick::first_slurm_host("node07") == "node07");
  CHECK(wick::first_slurm_host("node[07-09,12],gpu1") == "node07");
  CHECK(wick::first_slurm_host("gpu1,node[07-09]") == "gpu1");
  CHECK(wick::first_slurm_host("node[12,07-09]") == "node12");
  CHECK(wick::first_slurm_host("rack[1-2]-n[01-04]") == "rack1-n01");
  CHECK(wick::first_slurm_host("") == "");
  CHECK_THROWS_WITH(wick::first_slurm_host("node[1-2"), Catch::Contains("unclosed '['"));
}

TEST_CASE("a job's ranks from torchrun's or SLURM's variables") {
  SECTION("none: one process") {
    auto j = job_of({});
    CHECK(j.source.empty());
    CHECK(j.world == 1);
    CHECK(j.rank == 0);
  }
  SECTION("torchrun's variables win over SLURM's (wick launch inside srun)") {
    auto j = job_of({{"WORLD_SIZE", "4"},
                     {"RANK", "3"},
                     {"LOCAL_RANK", "1"},
                     {"GROUP_RANK", "1"},
                     {"MASTER_ADDR", "10.0.0.1"},
                     {"MASTER_PORT", "2950"},
                     {"TORCHELASTIC_RESTART_COUNT", "2"},
                     {"SLURM_NTASKS", "2"},
                     {"SLURM_PROCID", "0"}});
    CHECK(j.source == "torchrun");
    CHECK(j.world == 4);
    CHECK(j.rank == 3);
    CHECK(j.local_rank == 1);
    CHECK(j.node_rank == 1);
    CHECK(j.master_addr == "10.0.0.1");
    CHECK(j.master_port == 2950);
    CHECK(j.restart_count == 2);
  }
  SECTION("an srun task") {
    std::map<std::string, std::string> v{
        {"SLURM_NTASKS", "8"},     {"SLURM_PROCID", "5"}, {"SLURM_STEP_ID", "0"},
        {"SLURM_LOCALID", "1"},    {"SLURM_NODEID", "2"}, {"SLURM_STEP_NODELIST", "n[3-6]"},
        {"SLURM_JOB_ID", "123456"}};
    auto j = job_of(v);
    CHECK(j.source == "slurm");
    CHECK(j.world == 8);
    CHECK(j.rank == 5);
    CHECK(j.local_rank == 1);
    CHECK(j.node_rank == 2);
    CHECK(j.master_addr == "n3");
    CHECK(j.master_port == 10000 + 123456 % 50000);
    v["MASTER_ADDR"] = "head";
    v["MASTER_PORT"] = "4242";
    j = job_of(v);
    CHECK(j.master_addr == "head");
    CHECK(j.master_port == 4242);
  }
  SECTION("sbatch's batch script is no srun task: it starts no ranks") {
    for (const char* step : {"batch", "4294967294", ""}) {
      std::map<std::string, std::string> v{{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}};
      if (*step) v["SLURM_STEP_ID"] = step;
      CHECK(job_of(v).source.empty());
      CHECK(job_of(v).world == 1);
    }
  }
  SECTION("bad values name the variable") {
    CHECK_THROWS_WITH(job_of({{"WORLD_SIZE", "two"}}),
                      Catch::Contains("WORLD_SIZE is 'two', not a whole number"));
    CHECK_THROWS_WITH(job_of({{"WORLD_SIZE", "2"}, {"RANK", "2"}}),
                      Catch::Contains("RANK is 2, not below WORLD_SIZE = 2"));
    CHECK_THROWS_WITH(job_of({{"SLURM_NTASKS", "2"},
                              {"SLURM_PROCID", "0"},
                              {"SLURM_STEP_ID", "0"},
                              {"SLURM_STEP_NODELIST", "n1"}}),
                      Catch::Contains("export MASTER_PORT"));
    CHECK_THROWS_WITH(job_of({{"SLURM_NTASKS", "2"},
                              {"SLURM_PROCID", "0"},
                              {"SLURM_STEP_ID", "0"},
                              {"SLURM_JOB_ID", "7"}}),
                      Catch::Contains("export MASTER_ADDR"));
    CHECK_THROWS_WITH(
        job_of({{"SLURM_NTASKS", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}}),
        Catch::Contains("SLURM_NTASKS is 0"));
  }
}

TEST_CASE("job_ranks: the one reader of RANK and WORLD_SIZE, checked") {
  // The trainer, the config's run facts and the commands all take the ranks from it.
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  CHECK(wick::job_ranks().world == 1);
  CHECK(wick::job_ranks().rank == 0);
  setenv("WORLD_SIZE", "3", 1);
  setenv("RANK", "2", 1);
  CHECK(wick::job_ranks().world == 3);
  CHECK(wick::job_ranks().rank == 2);
  setenv("RANK", "3", 1);
  CHECK_THROWS_MATCHES(wick::job_ranks(), wick::ConfigError,
                       Catch::Message("RANK is 3, not below WORLD_SIZE = 3; fix the job script "
                                      "or the launcher"));
  setenv("WORLD_SIZE", "three", 1);
  CHECK_THROWS_AS(wick::job_ranks(), wick::ConfigError);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

TEST_CASE("wick fit as an srun task with a bad SLURM variable stops with exit 2, naming it") {
  auto r =
      run_wick({"fit", "no-such.toml"}, {"SLURM_NTASKS=2", "SLURM_PROCID=x", "SLURM_STEP_ID=0"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("wick: SLURM_PROCID is 'x', not a whole number >= 0") != std::string::npos);
}

TEST_CASE("wick launch under srun takes the nodes, its node index and the rendezvous from SLURM") {
  const std::vector<std::string> slurm = {"SLURM_NTASKS=2",
                                          "SLURM_PROCID=1",
                                          "SLURM_STEP_ID=3",
                                          "SLURM_NODEID=1",
                                          "SLURM_STEP_NODELIST=node[4-5]",
                                          "SLURM_JOB_ID=4242"};
  auto r = run_wick({"launch", "--nproc", "2", "--", "sh", "-c",
                     "echo $RANK $WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT"},
                    slurm);
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  // Node 1 of 2 with 2 ranks each: ranks 2 and 3 of 4, the master on the job's first node.
  CHECK(r.out.find("[rank 2] 2 4 1 node4 14242") != std::string::npos);
  CHECK(r.out.find("[rank 3] 3 4 1 node4 14242") != std::string::npos);
  // Options given win; one node keeps its own loopback rendezvous.
  auto given = run_wick({"launch", "--nproc", "1", "--nnodes", "1", "--node-rank", "0", "--", "sh",
                         "-c", "echo $RANK $WORLD_SIZE $MASTER_ADDR"},
                        slurm);
  CHECK(given.out.find("[rank 0] 0 1 127.0.0.1") != std::string::npos);
}
