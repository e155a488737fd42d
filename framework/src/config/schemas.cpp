// The built-in config tables' keys, their types, defaults and one-line docs (what `wick
// describe` and error messages show).
#include "config/schemas.hpp"

#include "wick/loader.hpp"  // ParamInfo

namespace wick {

std::vector<ParamInfo> trainer_schema() {
  return {
      {"epochs", ParamType::integer, "1", "epochs to train"},
      {"seed", ParamType::integer, "0", "seed for initialisation and the sample order"},
      {"batch_size", ParamType::integer, "32",
       "training batch size per process, or \"auto\": the fastest power of two (CPU), the "
       "largest that fits (CUDA)"},
      {"max_batch_size", ParamType::integer, "1024", "batch_size = \"auto\": the largest tried"},
      {"valid_batch_size", ParamType::integer, "0", "validation batch size (0: batch_size)"},
      {"shuffle", ParamType::boolean, "true", "shuffle the training set each epoch"},
      {"drop_last", ParamType::boolean, "false", "drop the last, short training batch"},
      {"max_steps", ParamType::integer, "0", "stop after this many optimizer steps (0: off)"},
      {"log_every", ParamType::integer, "50", "write a step record every N batches (0: off)"},
      {"threads", ParamType::integer, "\"auto\"",
       "intra-op threads, or \"auto\": the cores free at the start, shared among this machine's "
       "ranks (OMP_NUM_THREADS when set); 0: LibTorch's default"},
      {"num_workers", ParamType::integer, "0", "threads loading batches ahead (0: none)"},
      {"steps_per_epoch", ParamType::integer, "0", "batches per epoch (0: from the data)"},
      {"device", ParamType::string, "\"cpu\"", "cpu, cuda, cuda:N or auto"},
      {"nan_policy",
       ParamType::choice,
       "\"error\"",
       "non-finite loss: error, skip or ignore",
       {"error", "skip", "ignore"}},
      {"output_dir", ParamType::string, "\"runs/default\"", "run directory"},
      {"save_model", ParamType::boolean, "true",
       "write the final weights to output_dir/model.pt when the fit ends"},
      {"flops", ParamType::boolean, "true",
       "count the FLOPs of a training step; log train/flops_per_s"},
      {"peak_gflops", ParamType::floating, "0.0",
       "peak GFLOP/s for train/flops_utilization (0: a probe measures it)"},
  };
}

std::vector<ParamInfo> optimizer_schema() {
  return {
      {"name", ParamType::choice, "\"adam\"", "adam, adamw or sgd", {"adam", "adamw", "sgd"}},
      {"lr", ParamType::floating, "0.001", "learning rate"},
      {"weight_decay", ParamType::floating, "0.0", "weight decay (adamw default 0.01)"},
      {"betas", ParamType::float_list, "[0.9, 0.999]", "adam/adamw: coefficients"},
      {"eps", ParamType::floating, "1e-08", "adam/adamw: denominator term"},
      {"amsgrad", ParamType::boolean, "false", "adam/adamw: AMSGrad variant"},
      {"fused", ParamType::boolean, "false",
       "adam, adamw: update each float32 parameter in one pass, CPU or CUDA (same formulas, "
       "faster)"},
      {"momentum", ParamType::floating, "0.0", "sgd: momentum"},
      {"dampening", ParamType::floating, "0.0", "sgd: dampening"},
      {"nesterov", ParamType::boolean, "false", "sgd: Nesterov momentum"},
  };
}

std::vector<ParamInfo> group_schema() {
  return {
      {"params", ParamType::string, std::nullopt, "glob over parameter names, e.g. \"backbone.*\""},
      {"lr", ParamType::floating, "0.0", "this group's learning rate (default: the optimizer's)"},
      {"weight_decay", ParamType::floating, "0.0",
       "this group's weight decay (default: the optimizer's)"},
  };
}

}  // namespace wick
