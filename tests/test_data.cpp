// The data side of the loop: torch::data datasets through wick::from_torch_dataset, loader
// threads (trainer.num_workers, and a system that refuses them), augmentation from the batch's
// generator, streams (wick::kUnsized, trainer.steps_per_epoch, dataset state), and exact resume
// with all of them. In process, and through `wick fit` with the data_task test plugin.
#include <unistd.h>

#include <cstdint>

#include <torch/torch.h>

#include "support.hpp"
#include "wick/task.hpp"
#include "wick/torch_data.hpp"
#include "wick/trainer.hpp"

using namespace wick::test;

namespace {

namespace td = torch::data;

at::Tensor raw_images() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  return torch::rand({20, 1, 4, 4}, gen);
}
at::Tensor raw_labels() {
  return torch::arange(20, torch::kLong).remainder(3);
}

// A LibTorch user's per-sample dataset.
struct Images : td::datasets::Dataset<Images> {
  at::Tensor x = raw_images(), y = raw_labels();
  td::Example<> get(std::size_t i) override {
    return {x[static_cast<std::int64_t>(i)], y[static_cast<std::int64_t>(i)]};
  }
  torch::optional<std::size_t> size() const override { return 20; }
};

class RecordTask : public wick::Task {
 public:
  explicit RecordTask(std::shared_ptr<wick::Dataset> ds) : ds_(std::move(ds)) {}
  std::shared_ptr<torch::nn::Module> model() override {
    net_ = torch::nn::Linear(16, 3);
    return net_.ptr();
  }
  std::shared_ptr<wick::Dataset> train_data() override { return ds_; }
  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    inputs.push_back(b.input.clone());
    targets.push_back(b.target.clone());
    return net_->forward(b.input.flatten(1).to(torch::kFloat));
  }
  wick::Output loss(wick::Context&, const at::Tensor& pred, const wick::Batch& b) override {
    return wick::classification_loss(pred, b.target, false);
  }
  std::vector<at::Tensor> inputs, targets;

 private:
  std::shared_ptr<wick::Dataset> ds_;
  torch::nn::Linear net_{nullptr};
};

wick::TrainerOptions record_options(std::int64_t workers) {
  wick::TrainerOptions o;
  o.epochs = 2;
  o.batch_size = 6;  // 4 batches, the last short
  o.log_every = 0;
  o.num_workers = workers;
  o.write_outputs = false;
  return o;
}

std::shared_ptr<RecordTask> train(std::shared_ptr<wick::Dataset> ds, std::int64_t workers,
                                  bool on_device = false) {
  auto o = record_options(workers);
  o.data_on_device = on_device;
  auto task = std::make_shared<RecordTask>(std::move(ds));
  wick::Trainer t(o, task);
  auto res = t.fit();
  INFO(res.error);
  REQUIRE(res.status == wick::FitResult::Status::completed);
  return task;
}

}  // namespace

TEST_CASE("a torch::data dataset with Normalize gives the TensorDataset's batches, in order") {
  const auto workers = GENERATE(0, 2);
  td::transforms::Normalize<> norm(0.5, 0.25);
  auto reference =
      train(std::make_shared<wick::TensorDataset>(norm(raw_images()), raw_labels()), /*workers=*/0);
  // Per-sample Normalize, then stacked by the adapter; or stacked by the user's own Stack.
  auto mapped = train(wick::from_torch_dataset(Images().map(norm)), workers);
  auto stacked =
      train(wick::from_torch_dataset(Images().map(norm).map(td::transforms::Stack<>())), workers);
  for (const auto* t : {mapped.get(), stacked.get()}) {
    REQUIRE(t->inputs.size() == 8);
    REQUIRE(reference->inputs.size() == 8);
    for (std::size_t i = 0; i < 8; ++i) {
      CHECK(t->inputs[i].scalar_type() == reference->inputs[i].scalar_type());
      CHECK(torch::equal(t->inputs[i], reference->inputs[i]));
      CHECK(torch::equal(t->targets[i], reference->targets[i]));
    }
  }
}

// On a GPU, tests/test_cuda.cpp trains with the set on the device against copied batches.
TEST_CASE(
    "trainer.data_on_device: a set that loads its samples is refused naming the key, a tensor set "
    "trains alike") {
  auto task = std::make_shared<RecordTask>(wick::from_torch_dataset(Images()));
  auto o = record_options(0);
  o.data_on_device = true;
  CHECK_THROWS_WITH(wick::Trainer(o, task),
                    Catch::Contains("trainer.data_on_device = true needs a training set held in "
                                    "tensors (wick::TensorDataset)") &&
                        Catch::Contains("set trainer.data_on_device = false"));
  // On the CPU the tensors are where they are: the same batches either way.
  auto held = std::make_shared<wick::TensorDataset>(raw_images(), raw_labels());
  auto plain = train(held, 2), kept = train(held, 2, /*on_device=*/true);
  REQUIRE(kept->inputs.size() == plain->inputs.size());
  for (std::size_t i = 0; i < plain->inputs.size(); ++i)
    CHECK(torch::equal(kept->inputs[i], plain->inputs[i]));
}

TEST_CASE("wick::fetch_generator outside a get() is an error") {
  CHECK_THROWS_AS(wick::fetch_generator(), std::logic_error);
}

namespace {

std::string data_config(const TempDir& d, const std::string& trainer_keys,
                        const std::string& task_keys, const std::string& extra = "",
                        int checkpoint_every = 3) {
  return "[trainer]\nepochs = 3\nseed = 3\nbatch_size = 8\nlog_every = 2\nthreads = 1\n" +
         trainer_keys + "output_dir = \"" + (d / "run").string() + "\"\n" +
         "[task]\nplugin = \"data_task\"\n" + task_keys +
         "[[hooks]]\nplugin = \"checkpoint\"\nkeep_last = 0\nevery_n_steps = " +
         std::to_string(checkpoint_every) + "\n" + extra + test_plugins_toml();
}

std::string fingerprint(const TempDir& d) {
  return read_json(d / "run" / "summary.json")["model_fingerprint"];
}

// An uninterrupted run, then one killed (kill -9) at step 11 (epoch 1, batch 2 of 8; the
// last checkpoint is at step 9) and resumed: the same model and the same logged values.
void check_kill_resume(const std::string& trainer_keys, const std::string& task_keys) {
  TempDir ref;
  write_file(ref / "cfg.toml", data_config(ref, trainer_keys, task_keys));
  auto r0 = run_wick({"fit", (ref / "cfg.toml").string()});
  INFO(r0.err << r0.out);
  REQUIRE(r0.exit_code == 0);

  TempDir d;
  write_file(d / "cfg.toml",
             data_config(d, trainer_keys, task_keys,
                         "[[hooks]]\nplugin = \"fault\"\naction = \"kill\"\nstep = 11\n"));
  auto r1 = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r1.err << r1.out);
  REQUIRE(r1.exit_code == 128 + 9);
  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set",
                      "hooks.fault.enabled=false"});
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  CHECK(r2.out.find("optimizer step 9)") != std::string::npos);
  CHECK(fingerprint(d) == fingerprint(ref));
  CHECK(logged_values(d) == logged_values(ref));
}

}  // namespace

TEST_CASE("augmentation from the fetch generator resumes exactly after kill -9") {
  const auto workers = GENERATE(0, 2);
  check_kill_resume("num_workers = " + std::to_string(workers) + "\n", "kind = \"augment\"\n");
}

TEST_CASE("loader threads do not change what is trained") {
  std::string fp[2];
  for (int w : {0, 2}) {
    TempDir d;
    write_file(d / "cfg.toml",
               data_config(d, "num_workers = " + std::to_string(w) + "\n", "kind = \"augment\"\n"));
    auto r = run_wick({"fit", (d / "cfg.toml").string()});
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    fp[w / 2] = fingerprint(d);
  }
  CHECK(fp[0] == fp[1]);
}

// RLIMIT_NPROC binds neither root nor a process with CAP_SYS_RESOURCE or CAP_SYS_ADMIN: the
// command runs under a user id of its own (from this process's, so that two runs of the test
// on one host do not share it), whose processes the limit counts: its own threads alone. The
// BLAS and OpenMP pools held to one thread, so that their start, which varies with the
// machine's cores, leaves room.
RunResult run_limited(const std::string& program, const std::vector<std::string>& args,
                      const std::string& nproc = "") {
  const auto uid = std::to_string(60000 + ::getpid() % 5000);
  std::vector<std::string> argv;
  if (!nproc.empty()) argv = {"/usr/bin/prlimit", "--nproc=" + nproc};
  for (const auto& a : {std::string("/usr/bin/setpriv"), "--reuid=" + uid, "--regid=" + uid,
                        std::string("--clear-groups"), program})
    argv.push_back(a);
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "MKL_NUM_THREADS=1"});
}

TEST_CASE(
    "loader threads the system refuses: the fit stops naming trainer.num_workers, the "
    "checkpoint it resumed from kept") {
  if (::geteuid() != 0) skip("needs root, to run wick under a user id of its own");
  if (!fs::exists("/usr/bin/prlimit") || !fs::exists("/usr/bin/setpriv") || !fs::exists("/bin/sh"))
    skip("needs util-linux's prlimit and setpriv in /usr/bin, and /bin/sh");
  // A shell that must start a process for its first command, under a limit of one.
  if (run_limited("/bin/sh", {"-c", "/bin/true; /bin/true"}, "1").exit_code == 0)
    skip("RLIMIT_NPROC does not bind here (a sandbox that ignores it)");
  TempDir d;
  fs::permissions(d.path(), fs::perms::all);  // written by that user
  // 400 batches an epoch: 64 loader threads are asked for, and each one started stays alive,
  // waiting for room once the 128 batches they may load ahead are loaded (none exits for want
  // of work before the next is started).
  write_file(d / "cfg.toml", data_config(d, "", "samples = 3200\n", "", 200));
  const auto cfg = (d / "cfg.toml").string();
  if (run_limited(WICK_BIN, {"check", cfg}).exit_code != 0)
    skip(
        "wick cannot run under another user id here (its files, or the temporary folder's, "
        "unreadable to it)");
  auto r0 = run_limited(WICK_BIN, {"fit", cfg, "--set", "trainer.epochs=1"});
  INFO(r0.err << r0.out);
  REQUIRE(r0.exit_code == 0);
  const auto kept = file_hashes(d / "run" / "checkpoints");
  REQUIRE_FALSE(kept.empty());

  // Room for wick's own threads, not for 64 more.
  auto r1 = run_limited(
      WICK_BIN, {"fit", cfg, "--resume", "latest", "--set", "trainer.num_workers=64"}, "24");
  INFO(r1.err << r1.out);
  CHECK(r1.exit_code == 1);
  CHECK_THAT(r1.err, Catch::Contains("cannot start 64 data loader threads (") &&
                         Catch::Contains("); lower trainer.num_workers"));
  CHECK(file_hashes(d / "run" / "checkpoints") == kept);
}

TEST_CASE("a stream with steps_per_epoch continues where it was after kill -9") {
  const auto workers = GENERATE(0, 2);
  // The stream throws when read out of order: a resume that lost its state fails.
  check_kill_resume("steps_per_epoch = 8\nnum_workers = " + std::to_string(workers) + "\n",
                    "kind = \"stream\"\n");
}

TEST_CASE("a stream resumes only with the batch size it was numbered by") {
  TempDir d;
  write_file(d / "cfg.toml", data_config(d, "steps_per_epoch = 4\n", "kind = \"stream\"\n"));
  REQUIRE(run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.epochs=1"}).exit_code == 0);
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set",
                     "trainer.batch_size=4", "--set", "trainer.epochs=2"});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("batch_size: checkpoint 8, this run 4") != std::string::npos);
  CHECK(r.err.find("(a stream's samples are numbered by world size and batch size)") !=
        std::string::npos);
  CHECK(r.err.find("drop_last, and on a stream its batch size and world size (they fix") !=
        std::string::npos);
}

TEST_CASE("a loader thread's exception fails the fit naming the samples, checkpoints intact") {
  TempDir d;
  // Batch 3 (samples 24..31, not shuffled) fails; checkpoints at steps 1 and 2.
  write_file(d / "cfg.toml", data_config(d, "shuffle = false\nnum_workers = 2\n",
                                         "kind = \"throw\"\nfail_at = 24\n", "", 1));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 1);
  CHECK(r.err.find("samples 24, 25, 26, 27, 28, ... (8 in all)") != std::string::npos);
  CHECK(r.err.find("bad record 24 in images.bin") != std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["status"] == "failed");
  // The last good checkpoint (after batch 3) is whole: a run without the fault resumes from it.
  auto r2 = run_wick(
      {"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set", "task.fail_at=1000"});
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  CHECK(r2.out.find("(epoch 0, batch 3, optimizer step 3)") != std::string::npos);
}

TEST_CASE("num_workers out of [0, 1024] and a stream without steps_per_epoch are config errors") {
  TempDir d;
  write_file(d / "cfg.toml", data_config(d, "num_workers = -1\n", "kind = \"augment\"\n"));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 2);
  const std::string must =
      "'num_workers' in [trainer] must be between 0 (load on the main "
      "thread) and 1024";
  CHECK(r.err.find((d / "cfg.toml").string() + ":7:15: " + must) != std::string::npos);
  const auto many = wick_check(d / "cfg.toml", {"trainer.num_workers=1025"});
  CHECK(many.exit_code == 2);
  CHECK(many.err.find("--set trainer.num_workers=1025: " + must) != std::string::npos);

  write_file(d / "cfg.toml", data_config(d, "", "kind = \"stream\"\n"));
  auto r2 = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r2.err << r2.out);
  CHECK(r2.exit_code == 2);
  CHECK(r2.err.find("set trainer.steps_per_epoch") != std::string::npos);
}

TEST_CASE("a task's default optimizer that wick does not have is refused, naming it") {
  TempDir d;
  write_file(d / "cfg.toml", data_config(d, "", "default_optimizer = \"rmsprop\"\n"));
  const auto r = wick_check(d / "cfg.toml");
  CHECK(r.exit_code == 2);
  CHECK(r.err == "wick: " + (d / "cfg.toml").string() +
                     ": the task's default_optimizer() names 'rmsprop', which is not an "
                     "optimizer wick has (adam, adamw or sgd); set one in [optimizer]\n");
  // One it has is taken (an [optimizer] table would override it).
  write_file(d / "ok.toml", data_config(d, "", "default_optimizer = \"sgd\"\n"));
  CHECK(wick_check(d / "ok.toml").exit_code == 0);
}
