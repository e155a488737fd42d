// wick_hand_loop: the peers section's hand-written LibTorch loop (`make bench`, section peers):
// what a C++ user writes without a framework, over the same data, models, optimizer and batch
// as wick's workloads and the Python peers (bench/peers/). Prints one JSON line like theirs.
//
//   wick_hand_loop --workload mlp|cnn|transformer|gan [--epochs N] [--batch-size 64]
//                  [--threads 1] [--max-steps N] [--data DIR] [--device cpu|cuda]
//
// mlp and cnn: Fashion-MNIST from Debian's dataset-fashion-mnist, normalised as the
// fashion_mnist task does, the models of samples/fashion_mnist/{mlp,cnn}.toml; transformer:
// the TorchScript model and data samples/torchscript/make.py writes into --data; gan: the
// DCGAN of samples/gan (images in [-1, 1]). Adam (lr 1e-3; the GAN 2e-4, betas 0.5, 0.999),
// shuffled batches, the last short batch kept; fp32.
//
// --device cuda (mlp and cnn; bench/gpu_bench.py's "libtorch loop" row): the data set is copied
// to the GPU once and each batch gathered there, nothing is read back inside the epoch, so the
// loop is LibTorch's own floor on that machine: forward, loss, backward and torch::optim::Adam,
// each a host thread dispatching kernels. "host_ms" adds the host's milliseconds per step in
// forward + loss, backward and zero_grad + step (host clocks: on a GPU that outruns the host,
// where the step's time goes); "per_call_us", measured after the epoch, what one op and one
// small backward pass cost the host there (per_call_us below).
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "idx.hpp"
#include "loop/backward_here.hpp"
#include "wick/system.hpp"

namespace nn = torch::nn;
using wick::bench::Clock;

namespace {

struct Args {
  std::string workload, data;
  long epochs = 1, batch = 64, threads = 1, max_steps = 0;
  bool cuda = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--workload")
      a.workload = value();
    else if (k == "--epochs")
      a.epochs = std::stol(value());
    else if (k == "--batch-size")
      a.batch = std::stol(value());
    else if (k == "--threads")
      a.threads = std::stol(value());
    else if (k == "--max-steps")
      a.max_steps = std::stol(value());
    else if (k == "--data")
      a.data = value();
    else if (k == "--device") {
      const auto d = value();
      if (d != "cpu" && d != "cuda") throw std::runtime_error("--device cpu|cuda, not " + d);
      a.cuda = d == "cuda";
    } else
      throw std::runtime_error("unknown argument " + k);
  }
  if (a.workload != "mlp" && a.workload != "cnn" && a.workload != "transformer" &&
      a.workload != "gan")
    throw std::runtime_error("--workload mlp|cnn|transformer|gan");
  if (a.cuda && a.workload != "mlp" && a.workload != "cnn")
    throw std::runtime_error("--device cuda: the mlp and cnn workloads only");
  return a;
}

// Fashion-MNIST images [N, 1, 28, 28] (float) and labels [N] (int64).
std::pair<at::Tensor, at::Tensor> fashion(const std::string& prefix, bool gan) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  auto img = wick::idx::read_idx(dir + prefix + "-images-idx3-ubyte.gz", 3);
  auto lbl = wick::idx::read_idx(dir + prefix + "-labels-idx1-ubyte.gz", 1);
  const auto n = img.dims[0];
  auto x = torch::from_blob(img.bytes.data(), {n, 1, 28, 28}, torch::kUInt8).to(torch::kFloat);
  x = gan ? x.div_(127.5).sub_(1.0) : x.div_(255.0).sub_(0.2860).div_(0.3530);
  auto y = torch::from_blob(lbl.bytes.data(), {n}, torch::kUInt8).to(torch::kLong);
  return {x, y};
}

nn::Sequential classifier(bool cnn) {
  nn::Sequential net;
  std::int64_t in = 784;
  if (cnn) {
    std::int64_t c = 1;
    for (std::int64_t out : {32, 64}) {
      net->push_back(nn::Conv2d(nn::Conv2dOptions(c, out, 3).padding(1).bias(false)));
      net->push_back(nn::BatchNorm2d(out));
      net->push_back(nn::ReLU());
      net->push_back(nn::MaxPool2d(2));
      c = out;
    }
    in = c * 7 * 7;
  }
  net->push_back(nn::Flatten());
  for (std::int64_t h :
       cnn ? std::vector<std::int64_t>{128} : std::vector<std::int64_t>{256, 128}) {
    net->push_back(nn::Linear(in, h));
    net->push_back(nn::ReLU());
    if (cnn) net->push_back(nn::Dropout(0.3));
    in = h;
  }
  net->push_back(nn::Linear(in, 10));
  return net;
}

// Times every step after the first, and counts the samples of those.
struct Meter {
  long steps = 0, max_steps = 0;
  double first_step_at = -1, samples = 0;
  Clock::time_point t0;
  double seconds = 0;
  void begin() {
    if (steps == 0) first_step_at = wick::process_age_seconds();
    if (steps == 1) t0 = Clock::now();
  }
  void end(long batch) {
    if (steps >= 1) samples += static_cast<double>(batch);
    ++steps;
    if (steps >= 2) seconds = wick::bench::seconds_since(t0);
  }
  bool done() const { return max_steps > 0 && steps >= max_steps; }
};

double accuracy(const std::function<at::Tensor(const at::Tensor&)>& forward, const at::Tensor& x,
                const at::Tensor& y) {
  torch::NoGradGuard g;
  std::int64_t right = 0;
  for (std::int64_t i = 0; i < x.size(0); i += 1000) {
    const auto n = std::min<std::int64_t>(1000, x.size(0) - i);
    right += forward(x.narrow(0, i, n)).argmax(1).eq(y.narrow(0, i, n)).sum().item<std::int64_t>();
  }
  return static_cast<double>(right) / static_cast<double>(x.size(0));
}

// What one call costs the host on this device, in microseconds (the median of 5 runs of
// `reps` calls): an op that queues one kernel (add_ on one value), and a backward pass of two
// ops with its forward, run by LibTorch's autograd thread for the device (its default, as in
// this loop) and on the calling thread (wick's step: loop/backward_here.hpp). On a GPU whose
// host bounds the step, these say what each of the step's calls costs where the time goes.
nlohmann::json per_call_us(const torch::Device& device) {
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  auto median_us = [&](long reps, const std::function<void()>& call) {
    for (long i = 0; i < reps / 10; ++i) call();  // warm-up
    sync();
    std::vector<double> us;
    for (int run = 0; run < 5; ++run) {
      const auto t0 = Clock::now();
      for (long i = 0; i < reps; ++i) call();
      us.push_back(1e6 * wick::bench::seconds_since(t0) / static_cast<double>(reps));
      sync();
    }
    return wick::bench::make_stats(std::move(us)).median;
  };
  auto one = torch::zeros({1}, torch::TensorOptions().device(device));
  auto w = torch::ones({1}, torch::TensorOptions().device(device).requires_grad(true));
  auto backward = [&] { (w * one).sum().backward(); };
  nlohmann::json out = {{"add_", median_us(1000, [&] { one.add_(1); })},
                        {"backward_autograd_thread", median_us(300, backward)}};
#if TORCH_VERSION_MAJOR >= 2
  {
    wick::BackwardHere here;
    out["backward_this_thread"] = median_us(300, backward);
  }
#endif
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    const auto t_start = Clock::now();
    torch::set_num_threads(static_cast<int>(a.threads));
    torch::manual_seed(0);
    Meter m;
    m.max_steps = a.max_steps;
    if (a.cuda && !torch::cuda::is_available())
      throw std::runtime_error("--device cuda: no CUDA device here");
    const torch::Device device = a.cuda ? torch::kCUDA : torch::kCPU;
    nlohmann::json out = {{"framework", "libtorch-hand"}, {"version", TORCH_VERSION},
                          {"workload", a.workload},       {"device", device.str()},
                          {"precision", "fp32"},          {"threads", a.threads},
                          {"epochs", a.epochs},           {"batch_size", a.batch}};

    if (a.workload == "gan") {
      auto [x, y] = fashion("train", true);
      auto g = nn::Sequential(
          nn::ConvTranspose2d(nn::ConvTranspose2dOptions(64, 128, 7).bias(false)),
          nn::BatchNorm2d(128), nn::ReLU(),
          nn::ConvTranspose2d(
              nn::ConvTranspose2dOptions(128, 64, 4).stride(2).padding(1).bias(false)),
          nn::BatchNorm2d(64), nn::ReLU(),
          nn::ConvTranspose2d(nn::ConvTranspose2dOptions(64, 1, 4).stride(2).padding(1)),
          nn::Tanh());
      auto d = nn::Sequential(
          nn::Conv2d(nn::Conv2dOptions(1, 64, 4).stride(2).padding(1)),
          nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
          nn::Conv2d(nn::Conv2dOptions(64, 128, 4).stride(2).padding(1).bias(false)),
          nn::BatchNorm2d(128), nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
          nn::Conv2d(nn::Conv2dOptions(128, 1, 7)), nn::Flatten());
      const auto adam = torch::optim::AdamOptions(2e-4).betas({0.5, 0.999});
      torch::optim::Adam opt_g(g->parameters(), adam), opt_d(d->parameters(), adam);
      auto bce = [](const at::Tensor& l, const at::Tensor& t) {
        return torch::binary_cross_entropy_with_logits(l, t);
      };
      double d_loss = 0, g_loss = 0;
      for (long e = 0; e < a.epochs && !m.done(); ++e) {
        const auto order = torch::randperm(x.size(0));
        for (std::int64_t i = 0; i < x.size(0) && !m.done(); i += a.batch) {
          m.begin();
          const auto idx = order.narrow(0, i, std::min<std::int64_t>(a.batch, x.size(0) - i));
          const auto real = x.index_select(0, idx);
          const auto n = real.size(0);
          const auto ones = torch::ones({n, 1}), zeros = torch::zeros({n, 1});
          const auto fake = g->forward(torch::randn({n, 64, 1, 1}));
          auto dl = bce(d->forward(real), ones) + bce(d->forward(fake.detach()), zeros);
          opt_d.zero_grad();
          dl.backward();
          opt_d.step();
          auto gl = bce(d->forward(fake), ones);
          opt_g.zero_grad();
          gl.backward();
          opt_g.step();
          d_loss = dl.item<double>();
          g_loss = gl.item<double>();
          m.end(n);
        }
      }
      out["d_loss"] = d_loss;
      out["g_loss"] = g_loss;
    } else {
      at::Tensor x, y, vx, vy;
      std::function<at::Tensor(const at::Tensor&)> forward;
      std::vector<at::Tensor> params;
      std::function<void(bool)> train_mode;
      nn::Sequential net{nullptr};
      torch::jit::Module jit;
      if (a.workload == "transformer") {
        // What samples/torchscript/make.py wrote: model.pt, train.pt and valid.pt.
        // Run as wick::JitModuleImpl::load sets TorchScript up: without the graph executor's
        // optimizing pass, whose differentiable graphs train this model 1.46x slower on the CPU.
        torch::jit::setGraphExecutorOptimize(false);
        jit = torch::jit::load(a.data + "/model.pt");
        auto read = [&](const std::string& f) {
          std::ifstream in(a.data + "/" + f, std::ios::binary);
          std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
          auto dict = torch::pickle_load(bytes).toGenericDict();
          return std::make_pair(dict.at("input").toTensor(), dict.at("target").toTensor());
        };
        std::tie(x, y) = read("train.pt");
        std::tie(vx, vy) = read("valid.pt");
        for (const auto& p : jit.parameters()) params.push_back(p);
        forward = [&](const at::Tensor& in) { return jit.forward({in}).toTensor(); };
        train_mode = [&](bool on) { on ? jit.train() : jit.eval(); };
      } else {
        std::tie(x, y) = fashion("train", false);
        std::tie(vx, vy) = fashion("t10k", false);
        for (auto* t : {&x, &y, &vx, &vy}) *t = t->to(device);
        net = classifier(a.workload == "cnn");
        net->to(device);
        params = net->parameters();
        forward = [&](const at::Tensor& in) { return net->forward(in); };
        train_mode = [&](bool on) { net->train(on); };
      }
      torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-3));
      train_mode(true);
      double host_forward = 0, host_backward = 0, host_step = 0;  // after the first step
      for (long e = 0; e < a.epochs && !m.done(); ++e) {
        const auto order = torch::randperm(x.size(0)).to(device);
        for (std::int64_t i = 0; i < x.size(0) && !m.done(); i += a.batch) {
          m.begin();
          const auto t0 = Clock::now();
          const auto idx = order.narrow(0, i, std::min<std::int64_t>(a.batch, x.size(0) - i));
          auto loss =
              torch::cross_entropy_loss(forward(x.index_select(0, idx)), y.index_select(0, idx));
          const auto t1 = Clock::now();
          loss.backward();
          const auto t2 = Clock::now();
          opt.step();
          opt.zero_grad();
          if (m.steps >= 1) {
            host_forward += std::chrono::duration<double>(t1 - t0).count();
            host_backward += std::chrono::duration<double>(t2 - t1).count();
            host_step += wick::bench::seconds_since(t2);
          }
          if (a.cuda && (m.done() || i + a.batch >= x.size(0))) torch::cuda::synchronize();
          m.end(idx.size(0));
        }
      }
      if (m.steps > 1) {
        const double n = static_cast<double>(m.steps - 1) / 1000;
        out["host_ms"] = {{"forward_and_loss", host_forward / n},
                          {"backward", host_backward / n},
                          {"optimizer", host_step / n}};
      }
      train_mode(false);
      out["valid_accuracy"] = accuracy(forward, vx, vy);
      if (a.workload != "transformer") out["per_call_us"] = per_call_us(device);
    }
    out["steps"] = m.steps;
    out["samples_per_s"] = m.seconds > 0 ? m.samples / m.seconds : 0.0;
    out["time_to_first_step_s"] = m.first_step_at;
    out["peak_rss_mb"] = wick::bench::self_peak_rss_mb();
    out["wall_s"] = wick::bench::seconds_since(t_start);
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wick_hand_loop: %s\n", e.what());
    return 1;
  }
}
