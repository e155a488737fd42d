// Memory: activation checkpointing (wick/checkpointed.hpp, the activation_checkpointing
// plugin) against the plain run, and the per-phase peak memory of a profiled run
// (framework/src/memory/memory_tracker.hpp, white-box).
#include <torch/torch.h>

#include <cstdint>
#include <set>

#include <wick/checkpointed.hpp>
#include <wick/jit.hpp>
#include <wick/sharded_state.hpp>  // balanced_owners

#include "in_process.hpp"
#include "memory/memory_tracker.hpp"
#include "support.hpp"
#include "wick/data_parallel.hpp"
#include "wick/memory_estimate.hpp"

using namespace wick::test;

namespace {

namespace nn = torch::nn;

// A Sequential that can sit inside another (its forward has fixed types).
struct BlockImpl : nn::SequentialImpl {
  using nn::SequentialImpl::SequentialImpl;
  at::Tensor forward(at::Tensor x) { return nn::SequentialImpl::forward(x); }
};
TORCH_MODULE(Block);

// Two blocks with dropout and a head; the same weights in every copy (made from one seed).
struct Net {
  Block b0{nullptr}, b1{nullptr};
  nn::Linear head{nullptr};
  Net() {
    torch::manual_seed(5);
    b0 = Block(nn::Linear(6, 16), nn::ReLU(), nn::Dropout(0.5));
    b1 = Block(nn::Linear(16, 16), nn::Tanh(), nn::Dropout(0.3));
    head = nn::Linear(16, 3);
  }
  std::vector<at::Tensor> parameters() const {
    auto p = b0->parameters();
    for (const auto& t : b1->parameters()) p.push_back(t);
    for (const auto& t : head->parameters()) p.push_back(t);
    return p;
  }
};

struct Grads {
  std::vector<at::Tensor> params;
  at::Tensor input, after;  // the input's gradient; a draw from the generator afterwards
};

// Forward, backward and one more random draw, from seed 9; the blocks checkpointed or not.
Grads run(bool checkpoint, bool input_grad) {
  Net net;
  torch::manual_seed(9);
  auto x = torch::randn({8, 6}).requires_grad_(input_grad);
  at::Tensor h = x;
  for (auto* block : {&net.b0, &net.b1})
    h = checkpoint ? wick::checkpointed(*block, h) : (*block)->forward(h);
  auto y = net.head(h);
  (y * y).sum().backward();
  Grads g;
  for (const auto& p : net.parameters()) g.params.push_back(p.grad().clone());
  if (input_grad) g.input = x.grad().clone();
  g.after = torch::rand({4});
  return g;
}

}  // namespace

TEST_CASE("checkpointed segments give the plain run's gradients bit for bit, dropout included") {
  at::set_num_threads(1);  // the same kernels in both runs
  for (bool input_grad : {false, true}) {
    INFO("input requires grad: " << input_grad);
    const auto plain = run(false, input_grad), ck = run(true, input_grad);
    REQUIRE(plain.params.size() == 6);
    for (std::size_t i = 0; i < plain.params.size(); ++i) {
      INFO("parameter " << i);
      // Every parameter got a gradient (the first block's too, with an input that needs none).
      REQUIRE(ck.params[i].defined());
      CHECK(plain.params[i].abs().sum().item<double>() > 0);
      CHECK(torch::equal(plain.params[i], ck.params[i]));
    }
    if (input_grad) CHECK(torch::equal(plain.input, ck.input));
    // The recomputation put the generator back: the run goes on drawing what it would have.
    CHECK(torch::equal(plain.after, ck.after));
  }
  // Without the generator restored, the recomputed masks differ: the check above can fail.
  Net net;
  torch::manual_seed(9);
  auto a = net.b0->forward(torch::ones({8, 6}));
  auto b = net.b0->forward(torch::ones({8, 6}));
  CHECK_FALSE(torch::equal(a, b));
}

TEST_CASE("a checkpointed segment recomputes in backward and under no_grad just runs") {
  auto lin = nn::Linear(4, 4);
  auto x = torch::randn({2, 4});
  int calls = 0;
  auto seg = [&](const at::Tensor& t) {
    ++calls;
    return torch::relu(lin(t)) * 2;
  };
  {
    torch::NoGradGuard ng;
    auto y = wick::checkpointed(seg, x);
    CHECK_FALSE(y.requires_grad());
    CHECK(calls == 1);
  }
  auto y = wick::checkpointed(seg, x);
  CHECK(y.requires_grad());
  CHECK(calls == 2);  // forward once
  y.sum().backward();
  CHECK(calls == 3);  // and again in backward
  CHECK(lin->weight.grad().defined());
  // Several outputs: each one's gradient flows.
  auto outs = wick::checkpointed(
      [&](const at::Tensor& t) {
        return std::vector<at::Tensor>{t * 3, t.sum(1)};
      },
      x.clone().requires_grad_());
  REQUIRE(outs.size() == 2);
  CHECK(outs[0].requires_grad());
  CHECK(outs[1].requires_grad());
}

TEST_CASE("the memory tracker counts LibTorch's CPU allocations per phase, exactly") {
  wick::MemoryTracker m({"a", "b"});
  auto token = m.start(1000);  // bytes that existed before
  at::Tensor keep;
  {
    const auto outer = m.enter();
    {
      auto t = torch::empty({1024}, torch::kFloat);  // 4096 bytes, freed at once
    }
    keep = torch::empty({256}, torch::kDouble);  // 2048 bytes, kept
    m.leave(0, outer);
  }
  {
    const auto outer = m.enter();
    auto t = torch::empty({100}, torch::kFloat);  // 400 bytes on top of the kept 2048
    m.leave(1, outer);
  }
  token.reset();
  const auto p = m.snapshot();
  REQUIRE(p.phases.size() == 2);
  CHECK(p.phases[0].name == "a");
  CHECK(p.phases[0].calls == 1);
  CHECK(p.phases[0].cpu_peak_bytes == 1000 + 4096);
  CHECK(p.phases[1].cpu_peak_bytes == 1000 + 2048 + 400);
  CHECK(p.phases[1].cuda_peak_bytes == 0);
  CHECK(p.peak_rss_bytes > 0);
  // Counting stopped with the token: this allocation is not seen.
  const auto outer = m.enter();
  auto t = torch::empty({1 << 20}, torch::kFloat);
  m.leave(1, outer);
  CHECK(m.snapshot().phases[1].cpu_peak_bytes == 1000 + 2048 + 400);
}

TEST_CASE("checkpointing the blocks of a deep MLP lowers the peak memory of forward and backward") {
  // 16 blocks of two 256-wide layers, batch 2048: in the plain run each block keeps two 2 MiB
  // activations for backward (its ReLUs' outputs; its input is the block before's);
  // checkpointed, only its input. Activations outweigh the gradients (8 MiB in all), so the
  // backward peak drops too.
  std::vector<Block> net;
  for (int i = 0; i < 16; ++i)
    net.push_back(Block(nn::Linear(256, 256), nn::ReLU(), nn::Linear(256, 256), nn::ReLU()));
  auto x = torch::randn({2048, 256});
  auto peaks = [&](bool checkpoint) {
    for (auto& b : net) b->zero_grad(/*set_to_none=*/true);
    wick::MemoryTracker m({"forward", "backward"});
    auto token = m.start(0);
    auto outer = m.enter();
    at::Tensor h = x;
    for (auto& b : net) h = checkpoint ? wick::checkpointed(b, h) : b->forward(h);
    auto loss = h.square().mean();
    m.leave(0, outer);
    outer = m.enter();
    loss.backward();
    m.leave(1, outer);
    auto p = m.snapshot();
    return std::make_pair(p.phases[0].cpu_peak_bytes, p.phases[1].cpu_peak_bytes);
  };
  const auto plain = peaks(false), ck = peaks(true);
  const std::int64_t act = 2048 * 256 * 4;  // one activation
  INFO("forward " << plain.first << " -> " << ck.first << ", backward " << plain.second << " -> "
                  << ck.second);
  // Plain: 2 saved activations per block, 32 in all; checkpointed: 16 block inputs and one
  // block's transients (at most 3).
  CHECK(plain.first >= 32 * act);
  CHECK(ck.first <= 20 * act);
  CHECK(ck.second < plain.second);
}

TEST_CASE("activation_checkpointing trains bit-identical to the plain run and reports memory") {
  auto cfg = [](const TempDir& d, const std::string& hooks) {
    return "[trainer]\nepochs = 2\nseed = 3\nbatch_size = 32\nthreads = 1\noutput_dir = \"" +
           (d / "run").string() +
           "\"\n[task]\nplugin = \"synthetic\"\nsamples = 256\nvalid_samples = 64\n"
           "hidden = [32, 32, 16]\ndropout = 0.2\n[optimizer]\nname = \"adam\"\nlr = 0.01\n" +
           hooks + test_plugins_toml();
  };
  TempDir plain, ck;
  write_file(plain / "cfg.toml", cfg(plain, ""));
  write_file(ck / "cfg.toml",
             cfg(ck, "[[hooks]]\nplugin = \"activation_checkpointing\"\nmodules = [\"*\"]\n"));
  auto a = run_wick({"fit", (plain / "cfg.toml").string()});
  INFO(a.err << a.out);
  REQUIRE(a.exit_code == 0);
  auto b = run_wick({"fit", (ck / "cfg.toml").string(), "--profile"});
  INFO(b.err << b.out);
  REQUIRE(b.exit_code == 0);
  // "*" matches the three blocks, the head and everything inside the blocks: the outermost
  // are the segments.
  CHECK(b.err.find("activation_checkpointing: 4 segment(s) recomputed in backward: 0, 1, 2, 3") !=
        std::string::npos);
  auto sa = read_json(plain / "run" / "summary.json"), sb = read_json(ck / "run" / "summary.json");
  CHECK(sb["model_fingerprint"] == sa["model_fingerprint"]);
  CHECK(sb["valid/loss"] == sa["valid/loss"]);
  // --profile: the peak memory of each phase, in summary.json and printed.
  REQUIRE(sb.contains("memory"));
  std::set<std::string> phases;
  for (const auto& p : sb["memory"]["phases"]) {
    phases.insert(p["name"].get<std::string>());
    CHECK(p["cpu_peak_bytes"].get<std::int64_t>() > 0);
  }
  for (const char* want : {"forward", "backward", "optimizer", "validation"})
    CHECK(phases.count(want) == 1);
  CHECK(b.err.find("wick: peak memory per phase (rank 0)") != std::string::npos);
  CHECK_FALSE(sa.contains("memory"));  // not profiled: nothing counted
}

TEST_CASE("activation_checkpointing refuses modules it cannot reach, naming them") {
  TempDir d;
  auto cfg = [&](const std::string& modules) {
    return "[trainer]\nepochs = 1\nbatch_size = 32\noutput_dir = \"" + (d / "run").string() +
           "\"\n[task]\nplugin = \"synthetic\"\nsamples = 64\nvalid_samples = 0\n"
           "hidden = [8]\ndropout = 0.1\n[[hooks]]\nplugin = \"activation_checkpointing\"\n"
           "modules = " +
           modules + "\n" + test_plugins_toml();
  };
  write_file(d / "cfg.toml", cfg("[\"blocks.*\"]"));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("glob 'blocks.*' matches no module of the model; its modules are 0, 0.0") !=
        std::string::npos);
  write_file(d / "cfg.toml", cfg("[]"));
  r = run_wick({"check", (d / "cfg.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("modules") != std::string::npos);
  // No modules key at all: a required key (`wick plugins` says so).
  auto text = cfg("[]");
  text.erase(text.find("modules = []\n"), std::string("modules = []\n").size());
  write_file(d / "cfg.toml", text);
  r = run_wick({"check", (d / "cfg.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("missing required key 'modules'") != std::string::npos);
}

TEST_CASE("the memory estimate counts parameters, gradients and optimizer state per rank") {
  // 10 -> 20 -> 3: 283 floats (1132 bytes); the last bias frozen: 280 trainable (1120 bytes).
  nn::Sequential net(nn::Linear(10, 20), nn::Linear(20, 3));
  net[1]->named_parameters()["bias"].set_requires_grad(false);
  wick::OptimizerOptions adam, sgd, momentum;
  sgd.kind = momentum.kind = wick::OptimizerKind::sgd;
  momentum.momentum = 0.9;
  // Each strategy gives its own rows: ddp's three, zero3's one.
  const auto hooks = load_hooks("[[hooks]]\nplugin = \"ddp\"\n[[hooks]]\nplugin = \"zero3\"\n");
  REQUIRE(hooks.size() == 2);
  const auto* ddp = dynamic_cast<const wick::DataParallelStrategy*>(hooks[0].hook.get());
  const auto* zero3 = dynamic_cast<const wick::DataParallelStrategy*>(hooks[1].hook.get());
  REQUIRE(ddp);
  REQUIRE(zero3);
  auto rows = wick::estimate_memory(*net, {adam}, 2, false, {ddp});
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].setting == "1 process");
  CHECK(rows[0].parameters == 1132);
  CHECK(rows[0].gradients == 1120);
  CHECK(rows[0].optimizer_state == 2 * 1120);  // two moments
  CHECK(rows[1].setting == "ddp");
  CHECK(rows[1].total() == 1132 + 1120 + 2240);
  // Sharded as ddp splits (last layer first, 140 floats a rank: rank 0 the last weight's 60,
  // the first bias's 20 and 60 of the first weight, rank 1 its other 140): the larger share.
  CHECK(rows[2].optimizer_state == 2 * 140 * 4);  // ZeRO-1
  CHECK(rows[2].gradients == 1120);
  // ZeRO-2: the gradients kept between steps; the split weight's stay on both ranks.
  CHECK(rows[3].gradients == (60 + 20 + 200) * 4);
  CHECK(wick::estimate_memory(*net, {sgd}, 2, false, {ddp})[1].optimizer_state == 0);
  // 3 ranks: 93, 93 and 94 floats of momentum.
  CHECK(wick::estimate_memory(*net, {momentum}, 3, false, {ddp})[2].optimizer_state == 94 * 4);
  CHECK(wick::balanced_owners({60, 20, 200}, 2) == std::vector<int>{0, 0, 1});
  CHECK(wick::balanced_owners({100, 100, 100, 100}, 2) == std::vector<int>{0, 0, 1, 1});
  const auto bf16 = wick::estimate_memory(*net, {adam}, 2, true, {ddp});
  CHECK(bf16[0].parameters == 566);
  CHECK(bf16[0].optimizer_state == 1120);
  // zero3 owns whole tensors (last layer first: rank 0 the last weight and the first bias, 80
  // floats, rank 1 the first weight, 200): the larger share of parameters, gradients and
  // state, and the frozen bias on every rank.
  const auto z = wick::estimate_memory(*net, {adam}, 2, false, {zero3});
  REQUIRE(z.size() == 2);
  CHECK(z[1].setting == "zero3");
  CHECK(z[1].parameters == 3 * 4 + 200 * 4);
  CHECK(z[1].gradients == 200 * 4);
  CHECK(z[1].optimizer_state == 2 * 200 * 4);
  CHECK(wick::estimate_memory(*net, {adam}, 1, false, {zero3})[1].total() == rows[0].total());
}

TEST_CASE("wick describe prints the memory estimate for the ranks asked") {
  TempDir d;
  write_file(d / "cfg.toml",
             "[task]\nplugin = \"synthetic\"\nfeatures = 10\nhidden = [20]\nclasses = 3\n"
             "[optimizer]\nname = \"adamw\"\n" +
                 test_plugins_toml());
  auto r = run_wick({"describe", (d / "cfg.toml").string(), "--ranks", "4"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("Memory per rank at 4 ranks") != std::string::npos);
  // The config enables no strategy: the rows of each of wick's.
  CHECK(r.out.find("| ddp, shard_optimizer + shard_gradients (ZeRO-2) |") != std::string::npos);
  CHECK(r.out.find("| zero3 |") != std::string::npos);
  const auto zero = run_wick({"describe", (d / "cfg.toml").string(), "--ranks", "0"});
  CHECK(zero.exit_code == 2);
  CHECK(zero.err.find("--ranks: Value 0 not in range 1 to 1048576") != std::string::npos);
}

TEST_CASE("a TorchScript part runs as one checkpointed segment with the plain part's gradients") {
  auto make = [] {
    torch::jit::Module m("Part");
    torch::manual_seed(2);
    m.register_parameter("w", torch::randn({5, 5}).requires_grad_(), false);
    m.define(R"(
def forward(self, x):
    return torch.tanh(torch.relu(x.matmul(self.w)).matmul(self.w))
)");
    return wick::JitModule(m, wick::JitMode::trainable);
  };
  auto plain = make(), ck = make();
  ck->set_checkpointed(true);
  CHECK(ck->is_checkpointed());
  auto x = torch::randn({3, 5});
  auto yp = plain->forward(x);
  auto y = ck->forward(x);
  // The part's graph is not kept: the output hangs off the checkpoint's own node.
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name().find("CheckpointFunction") != std::string::npos);
  CHECK(yp.grad_fn()->name().find("CheckpointFunction") == std::string::npos);
  yp.sum().backward();
  y.sum().backward();
  const auto gp = plain->named_parameters()["w"].grad(), gc = ck->named_parameters()["w"].grad();
  REQUIRE(gc.defined());
  CHECK(torch::allclose(gp, gc, 1e-6, 1e-7));
}
