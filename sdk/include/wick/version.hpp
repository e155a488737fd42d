// SDK API version and symbol-export macros. A plugin records the version it was built
// against; the host loads it when the majors are equal and the plugin's minor is not newer.
// A minor adds to the API without changing what exists (sdk/README.md lists the additions);
// a major breaks it.
//   1.0  the first SDK
//   1.1  Params::get_path
//   2.0  host services through Context only (no Trainer), typed run facts, collectives,
//        framework-built checkpoints, forward/loss task contract, forward stage, task state
//   2.1  metric plugins (wick/metric.hpp)
//   2.2  Metric::rows, wick/tensor_files.hpp, wick/rendezvous.hpp
//   2.3  Registrar::request_profile, Context::profile (wick/profile.hpp)
//   2.4  Context::recompute_loss
//   2.5  the LibTorch build record (wick/build_record.hpp), checked before a plugin is loaded;
//        wick/torch_compat.hpp
//   2.6  wick/checkpointed.hpp (activation checkpointing), Context::memory_profile,
//        wick/sharded_state.hpp (Context::set_sharded_state: optimizer state sharded over ranks)
//   2.7  wick/interrupt.hpp (interrupt_requested: a stop signal came)
//   2.8  wick::Capability (the built-in capabilities as an enum, for Registrar::provides/needs)
//   2.9  CpuFeatures::hidden and kCpuFeatureNames (WICK_CPU_DISABLE); float parameters finite
//        and within float32's range, PluginDef::param_float_inf (ParamType::floating_inf)
//   2.10 nccl_group (wick/rendezvous.hpp: NCCL from LibTorch's CUDA side, which wick loads)
//   2.11 wick/data_parallel.hpp (DataParallelStrategy, Context::set_data_parallel: the whole
//        model gathered through the strategy, its own rows of the memory estimate)
//   2.12 wick/losses.hpp (cross_entropy: one fused CUDA kernel each way on a GPU)
//   2.13 wick/activations.hpp (gelu_tanh: a vectorised kernel of wick's own on the CPU), and
//        cross_entropy's own CPU kernel for float32
//   2.14 wick/attention.hpp (scaled_dot_product_attention: a kernel of wick's own on the CPU
//        for short sequences)
//   2.15 wick/normalization.hpp (layer_norm, add_layer_norm: kernels of wick's own on the CPU
//        and on a GPU, the residual add in the same pass)
//   2.16 gelu_mlp (wick/activations.hpp: on a GPU in bf16, the GELU and its gradient in
//        cuBLASLt's epilogues)
//   2.17 wick/linear.hpp (linear: on a GPU in bf16, the parameters' gradients made in their
//        own type by the products)
//   2.18 wick/autocast.hpp (AutocastScope: autocast for a scope, the weights' casts kept
//        while it lives)
//   2.19 Registrar::request_profile_on (ProfileClock: a CUDA run's steps on the host's clock)
//   2.20 Context::configured_lr (the lr the config gives a parameter group: what a schedule
//        scales, this run's config's on a resume)
//   2.21 JitModule keeps the file's requires_grad and registers tied tensors once;
//        PluginDef::one_instance
//   2.22 Params::get_output_file (a file a plugin writes in the run)
//   2.23 Context::whole_epoch_batches (an epoch's batches at this run's geometry, for a
//        schedule resumed on another world size or batch size)
//   2.24 lock_folder (a folder a plugin writes, held as a fit holds its output folder);
//        number_text and toml_float (numbers in the C locale); float defaults whatever the
//        locale;
//        the build record's debugstl (a plugin compiled with _GLIBCXX_DEBUG)
#pragma once

#define WICK_API_MAJOR 2
#define WICK_API_MINOR 24

// "WICK" in ASCII: tells a wick plugin's info record from an unrelated symbol of that name.
#define WICK_INFO_MAGIC 0x5749434Bu
// "WKLS": the same for the plugin list of a multi-plugin library (WICK_PLUGINS).
#define WICK_LIST_MAGIC 0x574B4C53u

// libwick is compiled with hidden visibility: what the public headers (the SDK's and the
// framework's) declare between WICK_PUBLIC_BEGIN and WICK_PUBLIC_END is its interface and is
// exported; its internals are not, among them a public class's nested Impl, declared
// WICK_INTERNAL (clang wants its declaration and its definition to agree). In plugins and host
// programs the three do nothing.
#if defined(WICK_BUILDING_LIBWICK) && !defined(_WIN32)
#define WICK_PUBLIC_BEGIN _Pragma("GCC visibility push(default)")
#define WICK_PUBLIC_END _Pragma("GCC visibility pop")
#define WICK_INTERNAL __attribute__((visibility("hidden")))
#else
#define WICK_PUBLIC_BEGIN
#define WICK_PUBLIC_END
#define WICK_INTERNAL
#endif

#if defined(_WIN32)
#define WICK_EXPORT __declspec(dllexport)
#else
#define WICK_EXPORT __attribute__((visibility("default")))
#endif
