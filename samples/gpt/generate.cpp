// Text from a trained GPT sample (wick_gpt_generate): the run's weights, a prompt, and one new
// token at a time, each drawn from the model's next-token distribution, as nanoGPT's sample.py
// draws them: the logits divided by a temperature, cut to the top k, then sampled with a seeded
// generator (or the most likely token at temperature 0).
//
// The model reads windows of exactly `context` tokens (Trainer::predict checks rows against
// the task's own data). A shorter text goes at the start of the window, padded after it: the
// attention is causal, so the padding changes no logit up to the text's last position, which
// is the one read. A longer text keeps its last `context` tokens.
//
//   build/bin/wick_gpt_generate samples/gpt/gpt.toml --prompt "This License" --tokens 200
#include <wick/checkpoint.hpp>
#include <wick/config.hpp>
#include <wick/loader.hpp>
#include <wick/params.hpp>
#include <wick/run_weights.hpp>
#include <wick/trainer.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

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
    } else if (flag == "--set") {
      a.sets.push_back(v);
    } else {
      throw std::invalid_argument("unknown option " + flag + " (--help lists them)");
    }
  }
  if (a.config.empty()) throw std::invalid_argument("give the CONFIG the model was trained with");
  return a;
}

// The size of a parameter's first dimension, by name: the model's vocabulary (wte) and
// context (wpe).
std::int64_t rows_of(wick::Trainer& t, const std::string& name) {
  for (const auto& p : t.model().named_parameters())
    if (p.key() == name) return p.value().size(0);
  throw std::invalid_argument("the model has no parameter " + name +
                              ": CONFIG's task is not the GPT sample ([task] plugin = \"gpt\")");
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

// The next token after `text`: its logits at the text's last position, one window's predict.
std::int64_t next_token(wick::Trainer& t, const std::vector<std::int64_t>& text,
                        std::int64_t context, const Args& a, at::Generator& gen) {
  const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(text.size()), context);
  auto window = at::zeros({1, context}, at::kLong);
  auto* w = window.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) w[i] = text[text.size() - n + i];
  const at::Tensor logits = t.predict(window)[0][n - 1].to(at::kDouble);
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
  wick::PluginFinder finder(cfg.search_path());
  auto trainer = wick::make_trainer(cfg, finder, {}, /*probe_batch_size=*/false);
  const std::int64_t vocab = rows_of(*trainer, "wte.weight");
  const std::int64_t context = rows_of(*trainer, "wpe.weight");
  if (!a.ids && vocab > 256)
    throw std::invalid_argument("the model has " + std::to_string(vocab) +
                                " token ids, more than a byte holds: give --ids (the prompt "
                                "and the output as token ids)");
  auto text = prompt_tokens(a, vocab);
  const std::string used =
      wick::load_run_weights(cfg, finder, *trainer, a.weights, /*evaluation=*/false, "--weights")
          .describe();
  std::fprintf(stderr, "wick_gpt_generate: using %s\n", used.c_str());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(a.seed));
  for (std::int64_t i = 0; i < a.tokens; ++i)
    text.push_back(next_token(*trainer, text, context, a, gen));
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
