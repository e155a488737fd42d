// ddp's rows of `wick describe`'s memory estimate: plain, ZeRO-1 and ZeRO-2, the parameters
// split between ranks as zero.hpp splits them.
#pragma once

#include <cstdint>
#include <vector>

#include <wick/data_parallel.hpp>

namespace wick_ddp {

std::vector<wick::MemoryRow> memory_rows(const std::vector<wick::ParamBytes>& trainable,
                                         std::int64_t other_bytes, int ranks);

}  // namespace wick_ddp
