// Private: wick::linear's autograd function taken directly, on any device and in any floating
// type (wick::linear takes it on a GPU in bf16 only), so that the white-box tests check its
// backward on the CPU.
#pragma once

#include <ATen/core/Tensor.h>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// linear computed in `type` (the inputs cast to it), the result in `type`, each gradient in
// its input's type; bias may be undefined.
at::Tensor linear_in(at::ScalarType type, const at::Tensor& x, const at::Tensor& weight,
                     const at::Tensor& bias);

}  // namespace wick

WICK_PUBLIC_END
