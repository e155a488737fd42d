// wick's own CUDA kernels (framework/src/cuda/*.cu) run on the CPU by the emulator in
// cuda_emulator/ (a block's threads as threads, its barriers and warp shuffles as barriers),
// against references in double: the layer norm forward and backward (both the registers' and
// the general kernels, every row type, the weight and bias sums over chunks of rows), the
// column sums of bias gradients (and GELU's gradient with them; 16-byte and single loads, one
// chunk of rows and several), the batched Adam (several launches, aligned and not, tails, a tensor
// listed twice), and cross-entropy (packed and element-wise rows, an ignored and an invalid
// target, masked (-inf) and infinite logits). What the emulator checks beyond the values: a
// launch's configuration, a shuffle from a lane that has returned, threads that do not all reach a
// barrier; in the sanitizer build, every read and write of the kernels is one of host memory,
// bounds-checked; built with ThreadSanitizer (test_cuda_emulated_tsan), no location is touched by
// two blocks of one launch, one writing. It cannot check what only a GPU does: the memory model
// between warps, timing, the compiler's device code (test_cuda does, on a GPU).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/adam_kernel.hpp"
#include "cuda/column_sum_kernel.hpp"
#include "cuda/cross_entropy_kernel.hpp"
#include "cuda/layer_norm_kernel.hpp"

namespace {

using wick::cuda::RowType;

// Values of one row type, kept as floats that the type holds exactly.
struct Rows {
  RowType type;
  std::vector<float> f;          // the values (rounded to the type's)
  std::vector<__nv_bfloat16> b;  // their bf16 storage, for a bf16 type
  void* data() { return type == RowType::bf16 ? static_cast<void*>(b.data()) : f.data(); }
  // What a kernel wrote, as floats.
  std::vector<float> read() const {
    if (type == RowType::f32) return f;
    std::vector<float> v(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) v[i] = __bfloat162float(b[i]);
    return v;
  }
};

Rows make_rows(RowType type, std::size_t n, std::mt19937& gen, float scale, float shift = 0) {
  std::normal_distribution<float> dist(shift, scale);
  Rows r{type, std::vector<float>(n), {}};
  for (auto& v : r.f) v = dist(gen);
  if (type == RowType::bf16) {
    r.b.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      r.b[i] = __float2bfloat16(r.f[i]);
      r.f[i] = __bfloat162float(r.b[i]);
    }
  }
  return r;
}

Rows empty_rows(RowType type, std::size_t n) {
  Rows r{type, std::vector<float>(n, std::nanf("")), {}};
  if (type == RowType::bf16) r.b.assign(n, __float2bfloat16(std::nanf("")));
  return r;
}

const char* name(RowType t) {
  return t == RowType::bf16 ? "bf16" : "f32";
}

// |got - want| within what the output type and float sums allow: a bf16 result is rounded
// once (half a unit in the last of its 8 bits), float sums lose a few units of `scale`.
bool close(double got, double want, RowType out, double scale) {
  const double rounding = out == RowType::bf16 ? std::abs(want) / 256 : 0;
  return std::abs(got - want) <= rounding + 2e-5 * scale + 1e-6;
}

// The widths that take each kernel: the registers' (multiples of 32 up to 1024, each of
// their register counts: 8, 16, 24, 32 a lane) and the general one (below 32, not a
// multiple of 32, above 1024).
const std::vector<std::int64_t> kWidths = {16, 64, 96, 100, 768, 1024, 1056};

struct Forward {
  std::vector<float> s, y, mean, rstd;
};

// The forward in double: s = x + branch (in float, as the kernel adds), its rows' statistics,
// y = (s - mean) rstd w + b.
Forward forward_reference(const std::vector<float>& x, const std::vector<float>* branch,
                          const std::vector<float>& w, const std::vector<float>& b, float eps,
                          std::int64_t rows, std::int64_t width) {
  Forward f{x, std::vector<float>(x.size()), std::vector<float>(rows), std::vector<float>(rows)};
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum = 0, sq = 0;
    for (std::int64_t j = 0; j < width; ++j) {
      if (branch) f.s[r * width + j] = x[r * width + j] + (*branch)[r * width + j];
      sum += f.s[r * width + j];
    }
    const double m = sum / width;
    for (std::int64_t j = 0; j < width; ++j)
      sq += (f.s[r * width + j] - m) * (f.s[r * width + j] - m);
    const double rs = 1 / std::sqrt(sq / width + eps);
    f.mean[r] = static_cast<float>(m);
    f.rstd[r] = static_cast<float>(rs);
    for (std::int64_t j = 0; j < width; ++j)
      f.y[r * width + j] = static_cast<float>((f.s[r * width + j] - m) * rs * w[j] + b[j]);
  }
  return f;
}

std::vector<float> floats(std::size_t n, std::mt19937& gen, float scale, float shift = 0) {
  return make_rows(RowType::f32, n, gen, scale, shift).f;
}

}  // namespace

TEST_CASE("The layer norm forward kernels, emulated, match a reference in double",
          "[cuda-emulated]") {
  std::mt19937 gen(1);
  const float eps = 1e-5f;
  for (const std::int64_t width : kWidths)
    for (const std::int64_t rows : {1, 9, 37})
      for (const bool with_branch : {false, true})
        for (const RowType x_type : {RowType::f32, RowType::bf16})
          for (const RowType branch_type : {RowType::f32, RowType::bf16})
            for (const RowType y_type : {RowType::f32, RowType::bf16}) {
              // A branch comes with a float x (the residual stream); without one its type
              // is unused.
              if (with_branch && x_type != RowType::f32) continue;
              if (!with_branch && branch_type == RowType::bf16) continue;
              const auto n = static_cast<std::size_t>(rows * width);
              // Rows off zero: the variance of a shifted row is where one-pass sums lose.
              Rows x = make_rows(x_type, n, gen, 1.5f, 3.f);
              Rows branch = make_rows(branch_type, n, gen, 0.5f);
              const auto w = floats(width, gen, 0.3f, 1.f), b = floats(width, gen, 0.2f);
              std::vector<float> s(n, std::nanf("")), mean(rows), rstd(rows);
              Rows y = empty_rows(y_type, n);
              wick::cuda::launch_layer_norm_forward(
                  x.data(), x_type, with_branch ? branch.data() : nullptr, branch_type,
                  with_branch ? s.data() : nullptr, y.data(), y_type, w.data(), b.data(), eps, rows,
                  width, mean.data(), rstd.data(), nullptr);
              const auto want =
                  forward_reference(x.f, with_branch ? &branch.f : nullptr, w, b, eps, rows, width);
              INFO("width " << width << ", rows " << rows << ", x " << name(x_type)
                            << (with_branch ? std::string(", branch ") + name(branch_type) : "")
                            << ", y " << name(y_type));
              const auto got = y.read();
              std::size_t bad = 0;
              for (std::size_t i = 0; i < n; ++i) {
                if (!close(got[i], want.y[i], y_type, 8)) ++bad;
                if (with_branch && s[i] != want.s[i]) ++bad;  // one float add: exact
              }
              for (std::int64_t r = 0; r < rows; ++r)
                if (!close(mean[r], want.mean[r], RowType::f32, 4) ||
                    !close(rstd[r], want.rstd[r], RowType::f32, 1))
                  ++bad;
              CHECK(bad == 0);
            }
}

TEST_CASE("The layer norm forward kernels, emulated, give the bias for rows of one value",
          "[cuda-emulated]") {
  // As on the CPU: the first pass's mean, off by its rounding, is corrected before the variance.
  std::mt19937 gen(3);
  for (const std::int64_t width : kWidths)
    for (const float value : {1000.f, 3.f, -0.1f}) {
      INFO("width " << width << ", value " << value);
      const std::int64_t rows = 3;
      const auto n = static_cast<std::size_t>(rows * width);
      Rows x{RowType::f32, std::vector<float>(n, value), {}};
      const auto w = floats(width, gen, 0.3f, 1.f), b = floats(width, gen, 0.2f);
      std::vector<float> mean(rows), rstd(rows);
      Rows y = empty_rows(RowType::f32, n);
      wick::cuda::launch_layer_norm_forward(x.data(), RowType::f32, nullptr, RowType::f32, nullptr,
                                            y.data(), RowType::f32, w.data(), b.data(), 1e-12f,
                                            rows, width, mean.data(), rstd.data(), nullptr);
      const auto got = y.read();
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (got[i] != b[i % static_cast<std::size_t>(width)]) ++bad;
      CHECK(bad == 0);
    }
}

TEST_CASE("The layer norm backward kernels, emulated, match a reference in double",
          "[cuda-emulated]") {
  std::mt19937 gen(2);
  struct Shape {
    std::int64_t width, rows;
    bool every_type;  // else the GPT's: float rows, bf16 dy, ds, a bf16 d_branch (its time)
  };
  // Every combination of types on 9 rows (2 blocks of the row kernels, 9 chunks of one row);
  // one row, and 37 (5 blocks, the last short of rows). Past 512 rows the weight and bias sums
  // take chunks of several rows: 1200 rows are 400 chunks of 3 (the last block's warps short of
  // rows), 4500 rows 500 chunks of 9 (a warp takes a second row of its chunk).
  std::vector<Shape> shapes;
  for (const std::int64_t width : kWidths) {
    shapes.push_back({width, 9, true});
    shapes.push_back({width, 1, false});
    shapes.push_back({width, 37, false});
  }
  shapes.push_back({768, 1200, false});
  shapes.push_back({100, 1200, false});
  shapes.push_back({64, 4500, false});
  for (const auto& [width, rows, every_type] : shapes)
    for (const RowType s_type : {RowType::f32, RowType::bf16})
      for (const RowType dy_type : {RowType::f32, RowType::bf16})
        for (const bool with_ds : {false, true})
          for (const int branch : {0, 1, 2}) {  // no d_branch, an f32 one, a bf16 one
            if (!every_type &&
                (s_type != RowType::f32 || dy_type != RowType::bf16 || !with_ds || branch != 2))
              continue;
            const auto n = static_cast<std::size_t>(rows * width);
            const RowType branch_type = branch == 2 ? RowType::bf16 : RowType::f32;
            Rows s = make_rows(s_type, n, gen, 1.f, 0.5f);
            Rows dy = make_rows(dy_type, n, gen, 0.1f);
            Rows ds = make_rows(s_type, n, gen, 0.05f);
            const auto w = floats(width, gen, 0.3f, 1.f);
            // The statistics the forward would have kept (any values would do).
            std::vector<float> mean(rows), rstd(rows);
            for (std::int64_t r = 0; r < rows; ++r) {
              double sum = 0, sq = 0;
              for (std::int64_t j = 0; j < width; ++j) sum += s.f[r * width + j];
              for (std::int64_t j = 0; j < width; ++j)
                sq += (s.f[r * width + j] - sum / width) * (s.f[r * width + j] - sum / width);
              mean[r] = static_cast<float>(sum / width);
              rstd[r] = static_cast<float>(1 / std::sqrt(sq / width + 1e-5));
            }
            Rows dx = empty_rows(s_type, n), d_branch = empty_rows(branch_type, n);
            std::vector<float> dw(width, std::nanf("")), db(width, std::nanf(""));
            std::vector<float> partial(
                static_cast<std::size_t>(wick::cuda::layer_norm_partials(rows, width)),
                std::nanf(""));
            wick::cuda::launch_layer_norm_backward(s.data(), s_type, dy.data(), dy_type,
                                                   with_ds ? ds.data() : nullptr, w.data(),
                                                   mean.data(), rstd.data(), rows, width, dx.data(),
                                                   branch ? d_branch.data() : nullptr, branch_type,
                                                   dw.data(), db.data(), partial.data(), nullptr);
            INFO("width " << width << ", rows " << rows << ", s " << name(s_type) << ", dy "
                          << name(dy_type) << (with_ds ? ", ds" : "")
                          << (branch ? std::string(", d_branch ") + name(branch_type) : ""));
            std::vector<double> want_dw(width, 0), want_db(width, 0), abs_dw(width, 0),
                abs_db(width, 0);
            const auto got_dx = dx.read(), got_branch = d_branch.read();
            std::size_t bad = 0;
            for (std::int64_t r = 0; r < rows; ++r) {
              double a = 0, c = 0, scale = 0;
              std::vector<double> xh(width);
              for (std::int64_t j = 0; j < width; ++j) {
                const std::size_t i = r * width + j;
                xh[j] = (static_cast<double>(s.f[i]) - mean[r]) * rstd[r];
                const double g = static_cast<double>(dy.f[i]) * w[j];
                a += g;
                c += g * xh[j];
                scale += std::abs(g) * (1 + std::abs(xh[j]));
                want_dw[j] += dy.f[i] * xh[j];
                want_db[j] += dy.f[i];
                abs_dw[j] += std::abs(dy.f[i] * xh[j]);
                abs_db[j] += std::abs(dy.f[i]);
              }
              a /= width;
              c /= width;
              for (std::int64_t j = 0; j < width; ++j) {
                const std::size_t i = r * width + j;
                const double want =
                    rstd[r] * (dy.f[i] * w[j] - a - xh[j] * c) + (with_ds ? ds.f[i] : 0.0);
                const double tol = rstd[r] * scale / width * 4 + 1;
                if (!close(got_dx[i], want, s_type, tol)) ++bad;
                if (branch && !close(got_branch[i], want, branch_type, tol)) ++bad;
              }
            }
            for (std::int64_t j = 0; j < width; ++j)
              if (!close(dw[j], want_dw[j], RowType::f32, abs_dw[j]) ||
                  !close(db[j], want_db[j], RowType::f32, abs_db[j]))
                ++bad;
            CHECK(bad == 0);
          }
}

namespace {

// Adam's update of one element, the kernel's formulas in double. Each value's scale (the sum of
// its terms' sizes) is added to: a float result is within a few units of it, the result
// itself may be near 0.
struct AdamValue {
  double p, m, v, p_scale = 0, m_scale = 0, v_scale = 0;
};

void adam_reference(const wick::cuda::AdamTensor& t, AdamValue& x, double g) {
  if (t.decay != 0) g += t.decay * x.p;
  x.m_scale += std::abs(x.m * t.beta1) + std::abs((1 - t.beta1) * g);
  x.m = x.m * t.beta1 + (1 - t.beta1) * g;
  x.v_scale += std::abs(x.v * t.beta2) + std::abs((1 - t.beta2) * g * g);
  x.v = x.v * t.beta2 + (1 - t.beta2) * g * g;
  const double step = t.step_size * x.m / (std::sqrt(x.v) / t.bc2_sqrt + t.eps);
  x.p_scale += std::abs(x.p * t.shrink) + std::abs(step);
  x.p = x.p * t.shrink - step;
}

// A finite float rounded to bf16's nearest (ties to even), as its bits.
std::uint16_t bf16_nearest(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace

TEST_CASE("The batched Adam kernel, emulated, updates every tensor as a reference in double",
          "[cuda-emulated]") {
  std::mt19937 gen(3);
  // 45 tensors (two launches of up to 40), of every size about a chunk (8192) and a vector
  // (4), some a float off 16 bytes (the element-wise path), with Adam's L2 decay and AdamW's
  // shrink; the first listed twice (tied weights: updated twice, in order). Two in three write
  // a bf16 copy, some of those a value off 8 bytes (the element-wise path again).
  const std::vector<std::int64_t> sizes = {20003, 1,    3,    4,     5, 4096, 8191, 8192,
                                           8193,  8196, 9000, 16384, 0, 7,    64};
  struct Tensor {
    std::vector<float> p, g, m, v;
    std::size_t offset;               // floats into the storage: 0 aligned, 1 not
    std::vector<std::uint16_t> copy;  // empty: none written
    std::size_t copy_offset;          // values into the copy: 0 aligned, 1 not
  };
  constexpr std::uint16_t kUnwritten = 0xabcd;
  std::vector<Tensor> store;
  std::vector<wick::cuda::AdamTensor> args;
  for (int k = 0; k < 45; ++k) {
    const std::int64_t n = sizes[k % sizes.size()];
    const std::size_t offset = k % 3 == 2 ? 1 : 0;
    const auto size = static_cast<std::size_t>(n) + offset + 4;
    const bool copy = k % 3 != 1;
    const std::size_t copy_offset = k % 5 == 3 ? 1 : 0;
    store.push_back({floats(size, gen, 1.f), floats(size, gen, 0.1f), floats(size, gen, 0.01f),
                     floats(size, gen, 0.001f), offset,
                     std::vector<std::uint16_t>(copy ? size + 1 : 0, kUnwritten), copy_offset});
    for (auto& v : store.back().v) v = std::abs(v);
  }
  for (int k = 0; k < 45; ++k) {
    Tensor& t = store[k];
    const float decay = k % 4 == 1 ? 0.01f : 0.f, shrink = k % 4 == 2 ? 1 - 1e-3f * 0.1f : 1.f;
    args.push_back({t.p.data() + t.offset, t.g.data() + t.offset, t.m.data() + t.offset,
                    t.v.data() + t.offset, sizes[k % sizes.size()], 0.9f, 0.999f, 1e-3f / 0.1f,
                    std::sqrt(1 - 0.999f), 1e-8f, decay, shrink,
                    t.copy.empty() ? nullptr : t.copy.data() + t.copy_offset});
  }
  // The first tensor listed again within the first 40 (tied weights): the kernel launches what
  // it has before the second, or two blocks of one launch would update the same values
  // together (a race, which the ThreadSanitizer build reports).
  std::vector<std::size_t> listed(store.size());
  std::iota(listed.begin(), listed.end(), 0);
  listed.insert(listed.begin() + 6, 0);
  args.insert(args.begin() + 6, args.front());
  // Their values before, in double, updated as the kernel should.
  std::vector<std::vector<AdamValue>> want;
  for (const auto& t : store) {
    want.emplace_back();
    for (std::size_t e = 0; e < t.p.size(); ++e) want.back().push_back({t.p[e], t.m[e], t.v[e]});
  }
  for (std::size_t k = 0; k < args.size(); ++k) {
    const std::size_t which = listed[k];
    for (std::int64_t i = 0; i < args[k].n; ++i) {
      const std::size_t e = store[which].offset + static_cast<std::size_t>(i);
      adam_reference(args[k], want[which][e], store[which].g[e]);
    }
  }
  wick::cuda::launch_adam(args.data(), args.size(), nullptr);
  // Elements outside a tensor (before its offset, past its end) keep their values: exactly.
  std::size_t bad = 0, checked = 0;
  const auto close_to = [](double got, double w, double scale) {
    return std::abs(got - w) <= 1e-6 * scale;
  };
  for (std::size_t k = 0; k < store.size(); ++k)
    for (std::size_t e = 0; e < store[k].p.size(); ++e) {
      const auto& t = store[k];
      const auto& w = want[k][e];
      if (!close_to(t.p[e], w.p, w.p_scale) || !close_to(t.m[e], w.m, w.m_scale) ||
          !close_to(t.v[e], w.v, w.v_scale))
        ++bad;
      ++checked;
    }
  INFO(bad << " of " << checked << " values differ");
  CHECK(bad == 0);
  // Each copy is its tensor's updated values rounded, bit for bit; nothing around it written.
  std::size_t bad_copies = 0, copies = 0;
  for (std::size_t k = 0; k < store.size(); ++k) {
    const auto& t = store[k];
    const auto n = static_cast<std::size_t>(sizes[k % sizes.size()]);
    for (std::size_t e = 0; e < t.copy.size(); ++e) {
      const bool inside = e >= t.copy_offset && e < t.copy_offset + n;
      const auto want = inside ? bf16_nearest(t.p[t.offset + e - t.copy_offset]) : kUnwritten;
      bad_copies += t.copy[e] != want;
      copies += inside;
    }
  }
  INFO(bad_copies << " of the copies' values differ");
  CHECK(copies > 50000);
  CHECK(bad_copies == 0);
}

TEST_CASE("The cross-entropy kernels, emulated, match a reference in double", "[cuda-emulated]") {
  std::mt19937 gen(4);
  using wick::cuda::LogitType;
  // Vocabularies packed 16 bytes at a time (a multiple of 4 floats, 8 halves) and not; one
  // row's logits past the block's 512 threads' loads.
  for (const std::int64_t vocab : {1, 7, 64, 100, 5000})
    for (const LogitType type : {LogitType::f32, LogitType::bf16, LogitType::f16}) {
      const std::int64_t rows = 6;
      const auto n = static_cast<std::size_t>(rows * vocab);
      std::vector<float> x = floats(n, gen, 2.f);
      std::vector<std::int64_t> target(rows);
      for (std::int64_t r = 0; r < rows; ++r) target[r] = (r * 37) % vocab;
      target[1] = -100;   // ignored
      target[2] = vocab;  // outside the vocabulary: a NaN loss
      // Row 3 starts with masked logits (-inf: nothing to the sum; a whole 16-byte pack of them
      // at 64 and more); row 4 holds a +inf (a NaN loss).
      const bool infinities = vocab >= 16;
      if (infinities) {
        for (std::int64_t j = 0; j < 8; ++j)
          if (j != target[3]) x[3 * vocab + j] = -INFINITY;
        x[4 * vocab + (target[4] + 1) % vocab] = INFINITY;
      }
      // The logits in the type, and the floats they hold.
      std::vector<__nv_bfloat16> xb(n);
      std::vector<__half> xh(n);
      for (std::size_t i = 0; i < n; ++i) {
        if (type == LogitType::bf16) {
          xb[i] = __float2bfloat16(x[i]);
          x[i] = __bfloat162float(xb[i]);
        } else if (type == LogitType::f16) {
          xh[i] = __float2half(x[i]);
          x[i] = __half2float(xh[i]);
        }
      }
      const void* logits = type == LogitType::f32    ? static_cast<const void*>(x.data())
                           : type == LogitType::bf16 ? static_cast<const void*>(xb.data())
                                                     : static_cast<const void*>(xh.data());
      std::vector<float> loss(rows, std::nanf("")), lse(rows, std::nanf(""));
      wick::cuda::launch_cross_entropy_forward(logits, type, target.data(), rows, vocab, -100,
                                               loss.data(), lse.data(), nullptr);
      const float scale = 0.25f;
      std::vector<float> gf(n);
      std::vector<__nv_bfloat16> gb(n);
      std::vector<__half> gh(n);
      void* grad = type == LogitType::f32    ? static_cast<void*>(gf.data())
                   : type == LogitType::bf16 ? static_cast<void*>(gb.data())
                                             : static_cast<void*>(gh.data());
      wick::cuda::launch_cross_entropy_backward(logits, grad, type, target.data(), lse.data(),
                                                &scale, rows, vocab, -100, nullptr);
      INFO("vocab " << vocab << ", type " << static_cast<int>(type));
      std::size_t bad = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        double mx = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < vocab; ++j) mx = std::max<double>(mx, x[r * vocab + j]);
        for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(x[r * vocab + j] - mx);
        const bool infinite = infinities && r == 4;
        const double l = mx + std::log(sum);
        const bool ignored = target[r] == -100, invalid = target[r] == vocab;
        if (infinite) {  // NaN, as LibTorch's log_softmax gives (inf - inf)
          if (!std::isnan(lse[r]) || !std::isnan(loss[r])) ++bad;
          continue;
        }
        // Written so that a NaN fails them.
        if (!(std::abs(lse[r] - l) <= 1e-5 * (1 + std::abs(l)))) ++bad;
        if (invalid ? !std::isnan(loss[r])
                    : !(std::abs(loss[r] - (ignored ? 0 : l - x[r * vocab + target[r]])) <=
                        1e-5 * (1 + std::abs(l))))
          ++bad;
        if (invalid) continue;  // its gradient is not defined
        for (std::int64_t j = 0; j < vocab; ++j) {
          const std::size_t i = r * vocab + j;
          const double want = ignored ? 0 : (std::exp(x[i] - l) - (j == target[r] ? 1 : 0)) * scale;
          const double got = type == LogitType::f32    ? gf[i]
                             : type == LogitType::bf16 ? __bfloat162float(gb[i])
                                                       : __half2float(gh[i]);
          const double rounding = type == LogitType::bf16  ? std::abs(want) / 256
                                  : type == LogitType::f16 ? std::abs(want) / 2048
                                                           : 0;
          if (!(std::abs(got - want) <= rounding + 1e-6)) ++bad;
        }
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("The column sums and GELU gradient kernels, emulated, match a reference in double",
          "[cuda-emulated]") {
  std::mt19937 gen(5);
  struct Shape {
    std::int64_t rows, width;
    std::size_t offset;  // values the rows start past their storage's first: 16-byte loads or not
  };
  // Widths a multiple of 8 (a lane's 16-byte loads) and not, or rows not 16-byte aligned; one
  // chunk of rows (the sums written at once), 3 chunks of 128 (the last short), 10 of 128; no
  // rows (zeros); a tile of 256 columns with 3 lanes' worth.
  const std::vector<Shape> shapes = {{1, 8, 0},     {37, 768, 0},   {37, 100, 0},
                                     {300, 768, 0}, {300, 24, 0},   {300, 64, 1},
                                     {1200, 40, 0}, {129, 3072, 0}, {0, 16, 0}};
  for (const auto& [rows, width, offset] : shapes)
    for (const RowType g_type : {RowType::f32, RowType::bf16})
      for (const RowType out_type : {RowType::f32, RowType::bf16}) {
        const auto n = static_cast<std::size_t>(rows * width);
        INFO("rows " << rows << ", width " << width << ", offset " << offset << ", g "
                     << name(g_type) << ", sums " << name(out_type));
        Rows g = make_rows(g_type, n + offset, gen, 1.f, 0.25f);
        std::vector<float> partial(
            static_cast<std::size_t>(wick::cuda::column_sum_partials(rows, width)), std::nanf(""));
        Rows out = empty_rows(out_type, static_cast<std::size_t>(width));
        const void* g_rows = g_type == RowType::bf16
                                 ? static_cast<const void*>(g.b.data() + offset)
                                 : static_cast<const void*>(g.f.data() + offset);
        wick::cuda::launch_column_sums(g_rows, g_type, rows, width, out.data(), out_type,
                                       partial.data(), nullptr);
        const auto got = out.read();
        std::size_t bad = 0;
        for (std::int64_t j = 0; j < width; ++j) {
          double want = 0, scale = 0;
          for (std::int64_t r = 0; r < rows; ++r) {
            want += g.f[offset + r * width + j];
            scale += std::abs(g.f[offset + r * width + j]);
          }
          if (!close(got[j], want, out_type, scale)) ++bad;
        }
        CHECK(bad == 0);

        if (g_type != RowType::bf16) continue;  // GELU's gradient: bf16 rows
        Rows dh = make_rows(RowType::bf16, n + offset, gen, 0.5f);
        Rows pre = make_rows(RowType::bf16, n + offset, gen, 2.f);
        Rows d = empty_rows(RowType::bf16, n + offset);
        Rows sums = empty_rows(out_type, static_cast<std::size_t>(width));
        wick::cuda::launch_gelu_backward_sums(dh.b.data() + offset, pre.b.data() + offset, rows,
                                              width, d.b.data() + offset, sums.data(), out_type,
                                              partial.data(), nullptr);
        const auto got_d = d.read(), got_sums = sums.read();
        for (std::int64_t j = 0; j < width; ++j) {
          double sum = 0, scale = 0;
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::size_t i = offset + r * width + j;
            // gelu(x) = x (1 + tanh(k (x + 0.044715 x^3))) / 2, k = sqrt(2 / pi), derived.
            const double x = pre.f[i], k = std::sqrt(2 / M_PI);
            const double t = std::tanh(k * (x + 0.044715 * x * x * x));
            const double want =
                dh.f[i] * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x));
            if (!close(got_d[i], want, RowType::bf16, std::abs(dh.f[i]))) ++bad;
            sum += got_d[i];  // the values as written
            scale += std::abs(got_d[i]);
          }
          if (!close(got_sums[j], sum, out_type, scale)) ++bad;
        }
        // Nothing written outside the rows.
        for (std::size_t i = 0; i < offset; ++i)
          if (!std::isnan(got_d[i])) ++bad;
        CHECK(bad == 0);
      }
}
