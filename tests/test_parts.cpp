// Several plugins in one library (WICK_PLUGINS): found by name, listed, refused when a name is
// declared twice or the list is malformed; a hook reaching its task typed across the plugin
// boundary; TorchScript parts (wick/jit.hpp) and bare tensors (wick/tensor_module.hpp) moved,
// trained or frozen, switched train/eval, checkpointed and resumed by the trainer.
#include <torch/script.h>

#include "support.hpp"
#include "wick/jit.hpp"
#include "wick/loader.hpp"
#include "wick/tensor_module.hpp"

using namespace wick::test;
using Kind = wick::PluginError::Kind;

namespace {

const fs::path kParts = fs::path(WICK_BINARY_DIR) / "tests" / "parts";
const fs::path kBad = fs::path(WICK_BINARY_DIR) / "tests" / "bad";
const fs::path kGood = fs::path(WICK_TEST_PLUGIN_DIR);

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A config of the parts task and its probe hook; `extra` goes into [task].
// The run folder is DIR/run (output_dir is relative to the current directory, not the config).
std::string parts_toml(const fs::path& dir, const std::string& extra, int epochs = 2) {
  return "[trainer]\nepochs = " + std::to_string(epochs) +
         "\nbatch_size = 16\nlog_every = 1\noutput_dir = \"" + (dir / "run").string() +
         "\"\n"
         "[plugins]\npath = [\"" +
         kParts.string() + "\"]\n[task]\nplugin = \"parts_task\"\n" + extra +
         "\n[optimizer]\nname = \"sgd\"\nlr = 0.1\n[[hooks]]\nplugin = \"parts_probe\"\n";
}

// A TorchScript module made here, as torch.jit.script would: enc(x) = tanh(fc(x)) * scale,
// with fc a submodule holding weight and bias, and scale a buffer. Returns the sum of its
// parameters (what parts/jit_sum logs).
double make_script(const fs::path& file) {
  torch::manual_seed(3);
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  // Modules scripted in Python carry a "training" attribute; one built in C++ must add it.
  torch::jit::Module fc(c10::QualifiedName("__torch__.Fc"), cu);
  fc.register_attribute("training", c10::BoolType::get(), true);
  // requires_grad on, as nn.Parameter has it in Python.
  fc.register_parameter("weight", torch::randn({4, 4}).requires_grad_(), false);
  fc.register_parameter("bias", torch::randn({4}).requires_grad_(), false);
  fc.define("def forward(self, x):\n    return torch.matmul(x, self.weight) + self.bias\n");
  torch::jit::Module enc(c10::QualifiedName("__torch__.Enc"), cu);
  enc.register_attribute("training", c10::BoolType::get(), true);
  enc.register_module("fc", fc);
  enc.register_buffer("scale", torch::full({1}, 0.5));
  enc.define("def forward(self, x):\n    return torch.tanh(self.fc.forward(x)) * self.scale\n");
  enc.save(file.string());
  double s = 0;
  for (const auto& p : enc.named_parameters()) s += p.value.sum().item<double>();
  return s;
}

std::vector<nlohmann::json> step_records(const TempDir& dir) {
  std::vector<nlohmann::json> out;
  for (auto& r : read_jsonl(dir / "run" / "metrics.jsonl"))
    if (r["kind"] == "step") out.push_back(r);
  return out;
}

}  // namespace

TEST_CASE("a library of several plugins: each found by its name, listed with the library") {
  const auto lib = fs::canonical(kParts / "wicklib_parts.so").string();
  wick::PluginFinder finder({kGood.string(), kParts.string()});
  auto task = finder.find("parts_task");
  auto probe = finder.find("parts_probe");
  CHECK(task->info().kind == wick::PluginKind::task);
  CHECK(probe->info().kind == wick::PluginKind::hook);
  CHECK(task->info().path == lib);
  CHECK(probe->info().path == lib);
  CHECK(task->info().in_library);
  CHECK(task->info().library_size == 2);
  // Single-plugin libraries beside it are found as before.
  CHECK(finder.find("recorder")->info().path == fs::canonical(kGood / "wick_recorder.so").string());
  auto all = wick::load_plugin_libraries(lib);
  REQUIRE(all.size() == 2);
  CHECK(all[0] == task);  // loaded once
  CHECK(has(refused(Kind::not_a_plugin, [&] { wick::load_plugin_library(lib); }),
            "is a library of 2 plugins (parts_task, parts_probe)"));

  auto r = run_wick({"plugins", "--plugin-path", kParts.string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(has(r.out, "parts_task 1.0.0 (task, SDK"));
  CHECK(has(r.out, "parts_probe 1.0.0 (hook, order 0, SDK"));
  CHECK(has(r.out, "  " + lib + " (one of 2 plugins of this library)\n"));
  CHECK(has(r.out, "synthetic 1.0.0 (task"));  // the built-in ones still listed
}

TEST_CASE("a config uses the task and the hook of one library, the hook reaches the task typed") {
  TempDir dir;
  write_file(dir / "cfg.toml", parts_toml(dir.path(), ""));
  auto d = run_wick({"describe", (dir / "cfg.toml").string()});
  INFO(d.err << d.out);
  CHECK(d.exit_code == 0);
  CHECK(has(d.out, "task: " + fs::canonical(kParts / "wicklib_parts.so").string()));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto steps = step_records(dir);
  REQUIRE(steps.size() == 8);  // 2 epochs of 64 samples in batches of 16
  // parts/forwards: the task's own counter, read through ctx.task<parts::PartsTask>().
  CHECK(steps[0]["parts/forwards"] == 1.0);
  CHECK(steps[7]["parts/forwards"].get<double>() > 8.0);  // validation forwards counted too

  // With another task the typed access throws, naming what went wrong.
  write_file(dir / "other.toml", "[trainer]\noutput_dir = \"run2\"\n[plugins]\npath = [\"" +
                                     kParts.string() +
                                     "\"]\n[task]\nplugin = \"synthetic\"\nsamples = 64\n"
                                     "[[hooks]]\nplugin = \"parts_probe\"\n");
  r = run_wick({"fit", (dir / "other.toml").string()});
  CHECK(r.exit_code == 1);
  CHECK(has(r.err, "Context::task<parts::PartsTask>(): the run's task is not a parts::PartsTask"));
}

TEST_CASE("a plugin name declared twice across the path, or by a malformed list") {
  const auto twin = fs::canonical(kBad / "list_twin" / "wicklib_twin.so").string();
  wick::PluginFinder finder({kParts.string(), (kBad / "list_twin").string()});
  auto msg = refused(Kind::duplicate, [&] { finder.find("parts_probe"); });
  CHECK(msg ==
        "two plugins named 'parts_probe': " + fs::canonical(kParts / "wicklib_parts.so").string() +
            " and " + twin + "; remove one, or take its folder out of the plugin path");
  CHECK(finder.find("parts_task")->info().name == "parts_task");  // the other name is fine

  const auto null_name = fs::canonical(kBad / "list_null" / "wicklib_null.so").string();
  CHECK(refused(Kind::malformed, [&] { wick::load_plugin_libraries(null_name); }) ==
        "'" + null_name +
            "' (entry 0): malformed plugin record: its name is null (a bug in the plugin, or not "
            "built with <wick/plugin.hpp>)");
  const auto count = fs::canonical(kBad / "list_count" / "wicklib_count.so").string();
  CHECK(refused(Kind::malformed, [&] { wick::load_plugin_libraries(count); }) ==
        "'" + count +
            "': malformed plugin list: it declares 4000000000 plugins (1 to 1024 expected) (a "
            "bug in the library, or not built with WICK_PLUGINS from <wick/plugin.hpp>)");

  const auto data = fs::canonical(kBad / "list_data" / "wicklib_data.so").string();
  CHECK(refused(Kind::malformed, [&] { wick::load_plugin_libraries(data); }) ==
        "'" + data +
            "': malformed plugin list: entry 0's factory is not code of the library (a bug in the "
            "library, or not built with WICK_PLUGINS from <wick/plugin.hpp>)");

  // A broken list does not hide plugins found elsewhere; it is named when nothing is found.
  wick::PluginFinder mixed({kGood.string(), (kBad / "list_null").string()});
  CHECK(mixed.find("recorder")->info().name == "recorder");
  msg = refused(Kind::not_found, [&] { mixed.find("nosuch"); });
  CHECK(has(msg, "and in the plugin libraries wicklib_*.so\nskipped: '" + null_name + "'"));
  auto r = run_wick({"plugins", "--plugin-path", (kBad / "list_count").string()});
  CHECK(r.exit_code == 0);
  CHECK(has(r.err, "wick: skipped: '" + count + "': malformed plugin list"));
}

TEST_CASE(
    "TorchScript parts: frozen ones keep their weights and eval mode, trainable ones train and "
    "resume") {
  TempDir dir;
  const double initial = make_script(dir / "enc.pt");
  write_file(dir / "cfg.toml", parts_toml(dir.path(), "jit = \"enc.pt\""));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto steps = step_records(dir);
  REQUIRE(steps.size() == 8);
  for (const auto& s : steps) {
    CHECK(s["parts/jit_sum"].get<double>() == Approx(initial));  // frozen: never trained
    CHECK(s["parts/jit_training"] == 0.0);  // frozen: in eval mode while training too
  }
  auto summary = read_json(dir / "run" / "summary.json");
  CHECK(summary["status"] == "completed");
  CHECK(summary["valid/loss"].get<double>() < 1.0);

  // Trainable: the part's weights move, and a run resumed from a checkpoint ends where an
  // uninterrupted one does (its weights were saved and restored with the rest).
  TempDir t;
  make_script(t / "enc.pt");
  const std::string ck = "[[hooks]]\nplugin = \"checkpoint\"\n";
  write_file(t / "cfg.toml",
             parts_toml(t.path(), "jit = \"enc.pt\"\njit_mode = \"trainable\"", 2) + ck);
  r = run_wick({"fit", (t / "cfg.toml").string()});
  REQUIRE(r.exit_code == 0);
  steps = step_records(t);
  CHECK(steps.back()["parts/jit_sum"].get<double>() != Approx(initial));
  CHECK(steps.back()["parts/jit_training"] == 1.0);  // trainable: in training mode; the probe
                                                     // checks eval mode during validation
  const auto whole = read_json(t / "run" / "summary.json")["model_fingerprint"];

  TempDir u;
  make_script(u / "enc.pt");
  write_file(u / "cfg.toml",
             parts_toml(u.path(), "jit = \"enc.pt\"\njit_mode = \"trainable\"", 2) + ck);
  r = run_wick({"fit", (u / "cfg.toml").string(), "--set", "trainer.epochs=1"});
  REQUIRE(r.exit_code == 0);
  r = run_wick({"fit", (u / "cfg.toml").string(), "--resume", "latest"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(read_json(u / "run" / "summary.json")["model_fingerprint"] == whole);
}

TEST_CASE("a TorchScript part whose tensor is also another parameter of the model is refused") {
  TempDir dir;
  make_script(dir / "enc.pt");
  write_file(dir / "cfg.toml", parts_toml(dir.path(), "jit = \"enc.pt\"\nshare = true"));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  CHECK(r.exit_code != 0);
  CHECK(has(r.err,
            "the model's tensor 'head.stolen' is also 'enc.fc.weight' of a TorchScript "
            "part (wick::JitModule)"));
}

TEST_CASE("JitModule in process: moved as a submodule, train/eval forwarded, bare tensors") {
  TempDir dir;
  make_script(dir / "enc.pt");
  struct Net : torch::nn::Module {
    wick::JitModule enc{nullptr};
  };
  auto net = std::make_shared<Net>();
  net->enc = net->register_module(
      "enc",
      wick::JitModule(wick::JitModuleImpl::load((dir / "enc.pt").string()), wick::JitMode::frozen));
  CHECK(net->parameters().empty());
  auto names = net->named_buffers().keys();
  CHECK(names == std::vector<std::string>{"enc.scale", "enc.fc.weight", "enc.fc.bias"});
  // Frozen: in eval mode whatever the model's mode (its submodules too).
  net->train();
  CHECK_FALSE(net->enc->jit().is_training());
  CHECK_FALSE(net->enc->jit().attr("fc").toModule().is_training());
  // Trainable: follows the model's train() / eval().
  auto live = std::make_shared<Net>();
  live->enc = live->register_module(
      "enc", wick::JitModule(wick::JitModuleImpl::load((dir / "enc.pt").string()),
                             wick::JitMode::trainable));
  CHECK(live->parameters().size() == 2);
  live->eval();
  CHECK_FALSE(live->enc->jit().is_training());
  CHECK_FALSE(live->enc->jit().attr("fc").toModule().is_training());
  live->train();
  CHECK(live->enc->jit().is_training());
  CHECK(live->enc->jit().attr("fc").toModule().is_training());
  // A move is in place: the scripted module computes with the moved tensors.
  net->to(torch::kDouble);
  CHECK(net->enc->jit().attr("fc").toModule().attr("weight").toTensor().dtype() == torch::kDouble);
  CHECK(net->enc->forward(torch::ones({2, 4}, torch::kDouble)).dtype() == torch::kDouble);
  if (torch::cuda::is_available()) {
    net->to(torch::kCUDA);
    CHECK(net->enc->forward(torch::ones({2, 4}, torch::dtype(torch::kDouble).device(torch::kCUDA)))
              .is_cuda());
  }

  wick::TensorModule t;
  t->add("w", torch::zeros({3}));
  t->add("scale", torch::ones({1}), false);
  CHECK(t->parameters().size() == 1);
  CHECK(t->buffers().size() == 1);
  CHECK((*t)["w"].requires_grad());
  CHECK_FALSE((*t)["scale"].requires_grad());
  CHECK_THROWS_AS((*t)["nosuch"], std::out_of_range);
}

TEST_CASE("JitModule: a tied weight is one parameter stepped once, one frozen in the file stays") {
  // As torch.jit.script saves `head.weight = embed.weight` and a requires_grad_(False).
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  const auto w = torch::randn({3, 3}).requires_grad_();
  auto holder = [&](const char* name) {
    torch::jit::Module m(c10::QualifiedName(std::string("__torch__.") + name), cu);
    m.register_attribute("training", c10::BoolType::get(), true);
    m.register_parameter("weight", w, false);
    return m;
  };
  torch::jit::Module top(c10::QualifiedName("__torch__.Top"), cu);
  top.register_attribute("training", c10::BoolType::get(), true);
  top.register_parameter("scale", torch::full({3}, 2.0), false);  // requires_grad off
  top.register_module("embed", holder("Embed"));
  top.register_module("head", holder("Head"));
  top.define(
      "def forward(self, x):\n"
      "    return torch.matmul(torch.matmul(x, self.embed.weight), self.head.weight) * "
      "self.scale\n");
  wick::JitModule part(top, wick::JitMode::trainable);
  CHECK(part->named_parameters().keys() == std::vector<std::string>{"scale", "embed.weight"});
  CHECK_FALSE(part->named_parameters()["scale"].requires_grad());

  // One SGD step against autograd on a copy: w - lr * dL/dw, the gradient of both uses summed
  // once (stepped once per name, the update would be twice that).
  const auto x = torch::randn({4, 3});
  const auto w0 = w.detach().clone().requires_grad_();
  torch::matmul(torch::matmul(x, w0), w0).mul(2.0).sum().backward();
  const auto expected = w0.detach() - 0.1 * w0.grad();
  torch::optim::SGD sgd(part->parameters(), torch::optim::SGDOptions(0.1));
  part->forward(x).sum().backward();
  sgd.step();
  CHECK(torch::allclose(w.detach(), expected, 1e-6, 1e-6));
  CHECK(torch::equal(part->named_parameters()["scale"], torch::full({3}, 2.0)));
}

TEST_CASE(
    "activation_checkpointing takes whole TorchScript parts and refuses what it cannot reach") {
  TempDir dir;
  make_script(dir / "enc.pt");
  auto fit = [&](const std::string& task, const std::string& modules) {
    write_file(dir / "cfg.toml", parts_toml(dir.path(), task) +
                                     "[[hooks]]\nplugin = \"activation_checkpointing\"\n"
                                     "modules = [\"" +
                                     modules + "\"]\n");
    return run_wick({"fit", (dir / "cfg.toml").string()});
  };
  const std::string trainable = "jit = \"enc.pt\"\njit_mode = \"trainable\"";
  auto ok = fit(trainable, "enc");
  INFO(ok.err << ok.out);
  CHECK(ok.exit_code == 0);
  CHECK(has(ok.err, "activation_checkpointing: 1 segment(s) recomputed in backward: enc"));
  // Inside the part: the graph calls fc itself.
  auto inside = fit(trainable, "enc.fc");
  CHECK(inside.exit_code == 2);  // a config error
  CHECK(has(inside.err, "activation_checkpointing: 'enc.fc' is inside a TorchScript part"));
  // A frozen part keeps no activations for backward already.
  auto frozen = fit("jit = \"enc.pt\"", "enc");
  CHECK(frozen.exit_code == 2);
  CHECK(has(frozen.err, "activation_checkpointing: 'enc' is a frozen TorchScript part"));
  // The model's own forward calls head: nothing to reroute from outside.
  auto head = fit("", "head");
  CHECK(head.exit_code == 2);
  CHECK(has(head.err,
            "activation_checkpointing: 'head' is called by the forward of its parent "
            "'(the model)'"));
  CHECK(has(head.err, "Call wick::checkpointed(module, x) in that forward instead"));
}
