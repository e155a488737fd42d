#include "memory.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "zero.hpp"

namespace wick_ddp {

std::vector<wick::MemoryRow> memory_rows(const std::vector<wick::ParamBytes>& trainable,
                                         std::int64_t other_bytes, int ranks) {
  const int n = std::max(1, ranks);
  // ddp's order: last layer first.
  const std::vector<wick::ParamBytes> ps(trainable.rbegin(), trainable.rend());
  std::vector<std::int64_t> numels;
  for (const auto& p : ps) numels.push_back(p.numel);
  const auto segs = even_segments(numels, n);
  std::int64_t params = other_bytes, grads = 0, states = 0;
  std::vector<std::int64_t> grad_share(static_cast<std::size_t>(n)), state_share(grad_share);
  for (std::size_t i = 0; i < ps.size(); ++i) {
    params += ps[i].bytes;
    grads += ps[i].bytes;
    states += ps[i].state_bytes;
    for (const auto& s : segs[i])
      if (ps[i].numel > 0)
        state_share[static_cast<std::size_t>(s.owner)] +=
            ps[i].state_bytes * s.length / ps[i].numel;
    // ZeRO-2 keeps a gradient on its owner alone, unless a cut splits it.
    for (int r = 0; r < n; ++r)
      if (segs[i].size() != 1 || segs[i][0].owner == r)
        grad_share[static_cast<std::size_t>(r)] += ps[i].bytes;
  }
  const auto most = [](const std::vector<std::int64_t>& v) {
    return *std::max_element(v.begin(), v.end());
  };
  return {{"ddp", params, grads, states},
          {"ddp, shard_optimizer (ZeRO-1)", params, grads, most(state_share)},
          {"ddp, shard_optimizer + shard_gradients (ZeRO-2)", params, most(grad_share),
           most(state_share)}};
}

}  // namespace wick_ddp
