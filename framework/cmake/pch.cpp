// Builds the precompiled <torch/torch.h> that plugins, tests and benchmarks reuse.
