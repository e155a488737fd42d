// Private: fused Adam's pass over one float32 CPU parameter (fused_adam.cpp), apart from
// LibTorch: it is compiled with its own flags (-O3 -fno-math-errno, so that the loop
// vectorises) and for three instruction sets. Torch-free.
#pragma once

#include <cstdint>

namespace wick {

// p, m, v updated in place from g; decay != 0 adds decay * p to the gradient (Adam's L2),
// shrink != 1 scales the parameter by it before the update (AdamW's decoupled decay,
// 1 - lr * weight_decay), in the same pass.
void adam_pass(float* p, const float* g, float* m, float* v, std::int64_t n, float beta1,
               float beta2, float step_size, float bc2_sqrt, float eps, float decay, float shrink);

}  // namespace wick
