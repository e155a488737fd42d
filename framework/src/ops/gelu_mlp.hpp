// Private: wick::gelu_mlp's autograd function taken directly, on any device and in any
// floating type (wick::gelu_mlp takes it on a GPU in bf16 only), so that the white-box tests
// check its backward on the CPU; cuBLASLt's epilogue only on a GPU in bf16.
#pragma once

#include <ATen/core/Tensor.h>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// gelu_mlp computed in `type` (the inputs cast to it), the result in `type`, each gradient in
// its input's type.
at::Tensor gelu_mlp_in(at::ScalarType type, const at::Tensor& x, const at::Tensor& fc_weight,
                       const at::Tensor& fc_bias, const at::Tensor& proj_weight,
                       const at::Tensor& proj_bias);

}  // namespace wick

WICK_PUBLIC_END
