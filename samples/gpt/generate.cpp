// Text from a trained GPT sample (wick_gpt_generate): the run's weights, a prompt, and one new
// token at a time, each drawn from the model's next-token distribution, as nanoGPT's sample.py
// draws them: the logits divided by a temperature, cut to the top k, then sampled with a seeded
// generator (or the most likely token at temperature 0).
//
// The model is the task's (gpt_model.hpp, built from the config's [task] keys) on the run's
// weights, as the Trainer loads them. It decodes from cached keys and values: the prompt in
// one pass, then one token a pass. Once the text is longer than the context, each token is a
// pass over the text's last `context` tokens (GPT-2's positions are absolute: the cache cannot
// slide).
//
//   build/bin/wick_gpt_generate samples/gpt/gpt.toml --prompt "This License" --tokens 200
#include <wick/autocast.hpp>
#include <wick/checkpoint.hpp>
#include <wick/config.hpp>
#include <wick/hardware.hpp>
#include <wick/loader.hpp>
#include <wick/params.hpp>
#include <wick/run.hpp>
#include <wick/run_weights.hpp>
#include <wick/trainer.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "gpt_model.hpp"

namespace {

constexpr const char* kUsage =
    "usage: wick_gpt_generate CONFIG [options]\n"
    "Continues a prompt with the GPT sample trained by `wick fit CONFIG`.\n"
    "  --weights W         the weights, as wick predict's --checkpoint names them: final\n"
    "                      (default: RUN_DIR/model.pt, the weights the fit ended with),\n"
    "                      latest, best, a checkpoint folder or the path of a model.pt\n"
    "  --prompt TEXT       the text to continue, a token per byte (default: a newline)\n"
    "  --ids               --prompt is token ids separated by spaces (and must be given),\n"
    "                      and the output is ids too (a model of more than 256 ids, e.g.\n"
    "                      GPT-2's BPE)\n"
    "  --tokens N          tokens to generate (default 200)\n"
    "  --temperature T     logits divided by T (finite) before sampling; 0: the most likely\n"
    "                      token every time (default 0.8)\n"
    "  --top-k K           sample among the K most likely tokens only; 0: all (default 40)\n"
    "  --seed S            the sampling generator's seed (default 1)\n"
    "  --dtype D           auto, bf16 or fp32: the forward under bf16 autocast or in fp32;\n"
    "                      auto: bf16 where the device runs it natively (a CPU with AMX or\n"
    "                      AVX512-BF16, a GPU of compute capability 8.0+), else fp32\n"
    "  --set SECTION.KEY=VALUE   a config override, as for wick fit\n"
    "The config's task is built as for the fit, so its token files must be there; plugins\n"
    "are found as wick finds them ([plugins] path, WICK_PLUGIN_PATH). Writes the prompt and\n"
    "its continuation to stdout. Exit 2: bad arguments, config, plugin or weights (the\n"
    "message says which); exit 1: a failure while generating.\n";

struct Args {
  std::string config, weights = "final", prompt;
  bool prompt_given = false;
  bool ids = false;
  std::int64_t tokens = 200, top_k = 40, seed = 1;
  double temperature = 0.8;
  std::string dtype = "auto";
  std::vector<std::string> sets;
};

std::int64_t to_int(const std::string& flag, const std::string& v) {
  std::size_t end = 0;
  std::int64_t x = 0;
  try {
    x = std::stoll(v, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  if (end == 0 || end != v.size() || x < 0)
    throw std::invalid_argument(flag + " " + v + ": give a whole number >= 0");
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--ids") {
      a.ids = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) {
      if (!a.config.empty())
        throw std::invalid_argument("one CONFIG only; '" + flag + "' is another");
      a.config = flag;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--weights") {
      a.weights = v;
    } else if (flag == "--prompt") {
      a.prompt = v;
      a.prompt_given = true;
    } else if (flag == "--tokens") {
      a.tokens = to_int(flag, v);
    } else if (flag == "--top-k") {
      a.top_k = to_int(flag, v);
    } else if (flag == "--seed") {
      a.seed = to_int(flag, v);
    } else if (flag == "--temperature") {
      char* end = nullptr;
      a.temperature = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(a.temperature >= 0) ||
          !std::isfinite(a.temperature))
        throw std::invalid_argument("--temperature " + v + ": give a finite number >= 0");
    } else if (flag == "--dtype") {
      if (v != "auto" && v != "bf16" && v != "fp32")
        throw std::invalid_argument("--dtype " + v + ": give auto, bf16 or fp32");
      a.dtype = v;
    } else if (flag == "--set") {
      a.sets.push_back(v);
    } else {
      throw std::invalid_argument("unknown option " + flag + " (--help lists them)");
    }
  }
  if (a.config.empty()) throw std::invalid_argument("give the CONFIG the model was trained with");
  return a;
}

std::vector<std::int64_t> prompt_tokens(const Args& a, std::int64_t vocab) {
  std::vector<std::int64_t> out;
  if (a.ids) {
    if (!a.prompt_given)
      throw std::invalid_argument("--ids needs --prompt: the token ids to continue");
    std::istringstream in(a.prompt);
    std::string word;
    while (in >> word) out.push_back(to_int("--prompt", word));
  } else {
    const std::string text = a.prompt_given ? a.prompt : "\n";
    for (const unsigned char c : text) out.push_back(c);
  }
  if (out.empty()) throw std::invalid_argument("--prompt is empty; give at least one token");
  for (const auto t : out)
    if (t >= vocab)
      throw std::invalid_argument("--prompt holds token " + std::to_string(t) +
                                  ", outside the model's vocabulary (" + std::to_string(vocab) +
                                  " ids)");
  return out;
}

// The model of the task's shape, for inference, checked before the run's weights are read: the
// trainer's model (the task's) must have each of its parameters, of its shape. A task plugin of
// another kind that is also named `gpt` has other ones.
wick_gpt::Gpt decoder(const wick_gpt::GptShape& shape, wick::Trainer& t,
                      const std::string& plugin_path) {
  wick_gpt::Gpt model(shape);
  const auto trained = t.model().named_parameters();
  for (const auto& p : model->named_parameters()) {
    const auto* w = trained.find(p.key());
    if (!w || !w->sizes().equals(p.value().sizes()))
      throw std::invalid_argument(
          "the task plugin 'gpt' (" + plugin_path + ") is not the GPT sample's: its model has " +
          "no parameter " + p.key() + " of the decoder's shape; give the folder of the sample's " +
          "wick_gpt.so in [plugins] path instead");
  }
  model->eval();
  return model;
}

// The decoder on the trainer's weights (shared, not copied), once they are loaded.
void share_weights(wick_gpt::Gpt& model, wick::Trainer& t) {
  const auto trained = t.model().named_parameters();
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) p.value().set_data(*trained.find(p.key()));
}

// bf16 autocast on `device` while it lives (the weights' casts kept for every token), or
// nothing (fp32); whether it is on.
class Precision {
 public:
  Precision(const std::string& dtype, const at::Device& device) {
    if (dtype == "bf16" ||
        (dtype == "auto" &&
         wick::native_bf16(wick::Device{
             device.is_cuda() ? wick::DeviceType::cuda : wick::DeviceType::cpu, device.index()})))
      autocast_.emplace(device.type(), at::kBFloat16);
  }
  bool bf16() const { return autocast_.has_value(); }

 private:
  std::optional<wick::AutocastScope> autocast_;
};

// The next token from the logits after the text, [vocab].
std::int64_t next_token(const at::Tensor& after, const Args& a, at::Generator& gen) {
  const at::Tensor logits = after.to(at::kCPU, at::kDouble);
  if (a.temperature == 0) return logits.argmax().item<std::int64_t>();
  // Less the largest first: a small temperature then makes the others -inf, not the largest
  // inf (whose softmax is no number).
  at::Tensor scaled = (logits - logits.max()) / a.temperature;
  if (a.top_k > 0 && a.top_k < scaled.size(0)) {
    // Ties with the k-th largest stay in, as in nanoGPT.
    const double kth = std::get<0>(scaled.topk(a.top_k))[a.top_k - 1].item<double>();
    scaled = scaled.masked_fill(scaled < kth, -INFINITY);
  }
  return at::multinomial(scaled.softmax(0), 1, /*replacement=*/false, gen).item<std::int64_t>();
}

int generate(const Args& a) {
  const auto cfg = wick::Config::load(a.config, a.sets);
  if (cfg.has_task() && cfg.task_plugin() != "gpt")
    throw std::invalid_argument("CONFIG's task is '" + cfg.task_plugin() +
                                "', not the GPT sample's ([task] plugin = \"gpt\")");
  wick::PluginFinder finder(cfg.search_path());
  auto trainer = wick::make_trainer(cfg, finder, {}, /*probe_batch_size=*/false);
  const auto shape = wick_gpt::read_shape(cfg.task_params(finder));
  const std::int64_t vocab = shape.vocab, context = shape.context;
  if (!a.ids && vocab > 256)
    throw std::invalid_argument("the model has " + std::to_string(vocab) +
                                " token ids, more than a byte holds: give --ids (the prompt "
                                "and the output as token ids)");
  auto text = prompt_tokens(a, vocab);
  auto model = decoder(shape, *trainer, finder.find(cfg.task_plugin())->info().path);
  const std::string used =
      wick::load_run_weights(cfg, finder, *trainer, a.weights, /*evaluation=*/false, "--weights")
          .describe();
  std::fprintf(stderr, "wick_gpt_generate: using %s\n", used.c_str());
  share_weights(model, *trainer);
  const auto device = model->wte->weight.device();
  c10::InferenceMode inference;
  const Precision precision(a.dtype, device);
  std::fprintf(stderr, "wick_gpt_generate: decoding in %s on %s, keys and values cached\n",
               precision.bf16() ? "bf16 (autocast)" : "fp32", device.str().c_str());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(a.seed));
  wick_gpt::KvCache cache;
  for (std::int64_t i = 0; i < a.tokens; ++i) {
    // The new token on the cache; the text (its last `context` tokens) on a cleared one at
    // the start and once the text is longer than the context.
    const auto n = static_cast<std::int64_t>(text.size());
    std::int64_t from = n - 1;
    if (cache.length() == 0 || n > context) {
      cache.clear();
      from = std::max<std::int64_t>(0, n - context);
    }
    const auto in =
        at::tensor(std::vector<std::int64_t>(text.begin() + from, text.end()), at::kLong)
            .view({1, n - from})
            .to(device);
    text.push_back(next_token(model->decode(in, cache)[0], a, gen));
  }
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i)
    out += a.ids ? (i ? " " : "") + std::to_string(text[i])
                 : std::string(1, static_cast<char>(text[i]));
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto fail = [](const char* message, int code) {
    std::fprintf(stderr, "wick_gpt_generate: %s\n", message);
    return code;
  };
  try {
    return generate(parse(argc, argv));
  } catch (const std::invalid_argument& e) {
    return fail(e.what(), 2);
  } catch (const wick::ConfigError& e) {
    return fail(e.what(), 2);
  } catch (const wick::PluginError& e) {
    return fail(e.what(), 2);
  } catch (const wick::CheckpointError& e) {
    return fail(e.what(), 2);
  } catch (const c10::Error& e) {
    return fail(e.what_without_backtrace(), 1);  // LibTorch's message without its backtrace
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}
