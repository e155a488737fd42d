// Private: reading what torch.save (or LibTorch's pickle_save) wrote, as torch.load does, with
// its map_location.
#pragma once

#include <ATen/core/ivalue.h>

#include <optional>
#include <string>

namespace wick {

// The archive's object, its tensors onto `device`; with none, back onto the device each was
// saved from, as torch.load without map_location does (a GPU's tensors then need CUDA in use in
// this process). Throws c10::Error for what is not such an archive.
c10::IValue load_pickle(const std::string& bytes, std::optional<c10::Device> device);

}  // namespace wick
