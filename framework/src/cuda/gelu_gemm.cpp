// cuBLASLt's GELU_AUX_BIAS epilogue behind gelu_gemm.hpp. Not its backward twin, DGELU_BGRAD:
// on an H200 (cuBLASLt 13, GPT-2's MLP, 16384 rows) it ran as a pass of its own after the
// product, 0.32 ms a call, where LibTorch's gelu_backward and a row sum take about 0.11.
// Row-major [rows, cols] is column-major [cols, rows] to cuBLASLt, so the product is written
// transposed: D^T = op(A) op(B) with the weight as A and the activations as B, and the bias and
// aux run along D^T's rows (the features).
#include "cuda/gelu_gemm.hpp"

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

namespace wick::cuda {
namespace {

// cuBLASLt's functions from the copy LibTorch's CUDA library loaded, whose handle this uses:
// linking cuBLASLt here could bind another copy (the CUDA toolkit's, of another version).
struct Lt {
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// Searched through LibTorch's CUDA library first: dlsym on its handle looks in the libraries
// it loaded, whatever their file names (a LibTorch whose bundled libraries carry renamed
// sonames); else cuBLASLt by its soname.
void* cublas_lt_library() {
  const std::string versioned = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  for (const char* name : {"libtorch_cuda.so", versioned.c_str()}) {
    void* lib = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (!lib) continue;
    // Only the major version wick was compiled for: another's structs and enums differ.
    const auto version =
        reinterpret_cast<decltype(&cublasLtGetVersion)>(dlsym(lib, "cublasLtGetVersion"));
    if (version && version() / 10000 == CUBLAS_VER_MAJOR) return lib;
  }
  return nullptr;
}

const Lt* lt() {
  static const Lt* const loaded = []() -> const Lt* {
    static Lt f;
    void* lib = cublas_lt_library();
    if (!lib) {
      // Not silent: without it wick::gelu_mlp runs unfused (linear, GELU, linear).
      std::fprintf(stderr,
                   "wick: LibTorch loaded no cuBLASLt %d.x, the version wick was built with; "
                   "wick::gelu_mlp runs its GELU outside the matrix products\n",
                   CUBLAS_VER_MAJOR);
      return nullptr;
    }
    const auto get = [lib](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      return fn != nullptr;
    };
    const bool all = get(f.desc_create, "cublasLtMatmulDescCreate") &&
                     get(f.desc_destroy, "cublasLtMatmulDescDestroy") &&
                     get(f.desc_set, "cublasLtMatmulDescSetAttribute") &&
                     get(f.layout_create, "cublasLtMatrixLayoutCreate") &&
                     get(f.layout_destroy, "cublasLtMatrixLayoutDestroy") &&
                     get(f.pref_create, "cublasLtMatmulPreferenceCreate") &&
                     get(f.pref_destroy, "cublasLtMatmulPreferenceDestroy") &&
                     get(f.pref_set, "cublasLtMatmulPreferenceSetAttribute") &&
                     get(f.heuristic, "cublasLtMatmulAlgoGetHeuristic") &&
                     get(f.matmul, "cublasLtMatmul");
    return all ? &f : nullptr;
  }();
  return loaded;
}

// A stored column-major bf16 matrix (ld = its rows) and whether the product transposes it.
struct Operand {
  const void* data;
  std::int64_t rows, cols;
  cublasOperation_t op;
};

// D [m, n] (column-major, bf16) = gelu_tanh(op(A) op(B) + bias), bias of m elements, and the
// sums before the GELU into aux ([m, n], leading dimension m): GELU_AUX_BIAS.
bool gelu_product(const Lt& f, const Operand& a, const Operand& b, void* d, std::int64_t m,
                  std::int64_t n, const void* bias, const void* aux) {
  struct Descriptors {
    const Lt& f;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~Descriptors() {
      if (pref) f.pref_destroy(pref);
      for (auto* l : {d, b, a})
        if (l) f.layout_destroy(l);
      if (op) f.desc_destroy(op);
    }
  } s{f};
  const auto ok = [](cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS; };
  const auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& value) {
    return ok(f.desc_set(s.op, attr, &value, sizeof(value)));
  };
  const std::int64_t aux_ld = m;
  const std::uint64_t workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
  if (!ok(f.desc_create(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
      !set(CUBLASLT_MATMUL_DESC_TRANSA, a.op) || !set(CUBLASLT_MATMUL_DESC_TRANSB, b.op) ||
      !set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS) ||
      !set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias) ||
      !set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux) ||
      !set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld) ||
      !ok(f.layout_create(&s.a, CUDA_R_16BF, a.rows, a.cols, a.rows)) ||
      !ok(f.layout_create(&s.b, CUDA_R_16BF, b.rows, b.cols, b.rows)) ||
      !ok(f.layout_create(&s.d, CUDA_R_16BF, m, n, m)) || !ok(f.pref_create(&s.pref)) ||
      !ok(f.pref_set(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                     sizeof(workspace_bytes))))
    return false;
  // The heuristic assumes 256-byte aligned matrices unless told: a row slice of a batch is
  // aligned less, and an algorithm chosen for 256 bytes would refuse it.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligned[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a.data},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b.data},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d}};
  for (const auto& [attr, ptr] : aligned) {
    std::uint32_t bytes = 256;
    while (reinterpret_cast<std::uintptr_t>(ptr) % bytes != 0) bytes /= 2;
    if (!ok(f.pref_set(s.pref, attr, &bytes, sizeof(bytes)))) return false;
  }
  const auto handle = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  if (!ok(f.heuristic(handle, s.op, s.a, s.b, s.d, s.d, s.pref, 1, &found, &count)) || count < 1)
    return false;
  const float alpha = 1, beta = 0;
  return ok(f.matmul(handle, s.op, &alpha, a.data, s.a, b.data, s.b, &beta, d, s.d, d, s.d,
                     &found.algo, at::cuda::getCUDABlasLtWorkspace(), workspace_bytes,
                     c10::cuda::getCurrentCUDAStream().stream()));
}

// A contiguous bf16 [rows, cols] (cols: a multiple of 8) on `like`'s GPU, 16-byte aligned: what
// cuBLASLt's epilogue asks of its matrices, bias and aux.
bool fits(const at::Tensor& t, const at::Tensor& like, std::int64_t rows, std::int64_t cols) {
  return t.defined() && t.is_cuda() && t.device() == like.device() &&
         t.scalar_type() == at::kBFloat16 && t.is_contiguous() && t.numel() == rows * cols &&
         cols % 8 == 0 && reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Each of a product's dimensions in (1, 65535 x 32): the range in which LibTorch itself takes
// cuBLASLt's bias epilogues (outside it some cuBLASLt versions fail at launch).
bool lt_dims(std::initializer_list<std::int64_t> dims) {
  for (const auto d : dims)
    if (d <= 1 || d >= 65535 * 32) return false;
  return true;
}

// Sizes and types the epilogue takes, but cuBLASLt ran none (no algorithm offered, or a
// failure): said once a process, not silently slower.
void say_unfused(std::int64_t rows, std::int64_t in, std::int64_t out) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::fprintf(stderr,
               "wick: cuBLASLt ran no GELU epilogue for gelu_mlp's first product (%lld rows, "
               "%lld -> %lld features); gelu_mlp runs its GELU outside the matrix products\n",
               static_cast<long long>(rows), static_cast<long long>(in),
               static_cast<long long>(out));
}

}  // namespace

bool lt_gelu_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                     const at::Tensor& out, const at::Tensor& pre) {
  const Lt* f = lt();
  if (!f || x.dim() != 2 || w.dim() != 2) return false;
  const auto rows = x.size(0), in = x.size(1), features = w.size(0);
  if (!lt_dims({rows, in, features}) || !fits(x, x, rows, in) || !fits(w, x, features, in) ||
      !fits(b, x, 1, features) || !fits(out, x, rows, features) || !fits(pre, x, rows, features))
    return false;
  const c10::cuda::CUDAGuard guard(x.device());
  // out^T [features, rows] = w [in, features]^T (stored as w's rows) x^T [in, rows].
  if (gelu_product(*f, {w.data_ptr(), in, features, CUBLAS_OP_T},
                   {x.data_ptr(), in, rows, CUBLAS_OP_N}, out.data_ptr(), features, rows,
                   b.data_ptr(), pre.data_ptr()))
    return true;
  say_unfused(rows, in, features);
  return false;
}

}  // namespace wick::cuda
