// Private: a checkpoint folder on disk. Written atomically (a hidden temporary folder, every
// file fsynced, a manifest of sizes and sha256 hashes written last, renamed into place);
// read as untrusted input (see read_checkpoint).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "wick/checkpoint.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

namespace wick {

// What a checkpoint must match to be continued by a run: the data order depends on these.
struct RunIdentity {
  std::int64_t seed = 0, batch_size = 0, world_size = 1;
  bool shuffle = true, drop_last = false;
  // The run's own name: 32 random hex digits drawn when it starts afresh, kept by its resumes
  // ("" in checkpoints written before wick had it). state.pt records it too, so a folder that
  // mixes two runs' files is refused even when its hashes were rewritten to match.
  std::string id;
  // The intra-op threads it trained with (0 in checkpoints written before wick had them): a
  // resume with trainer.threads = "auto" takes the same count, as reductions split over
  // threads round differently with another.
  std::int64_t threads = 0;
  // Micro-batches per optimizer step (grad_accum; 0 in checkpoints written before wick
  // recorded it): a resume inside an accumulation window needs the same windows.
  std::int64_t grad_accum_steps = 0;
  // The training data's samples and trainer.steps_per_epoch (-1: a stream's unsized data, or
  // a checkpoint written before wick recorded them): the epoch's order and length follow.
  std::int64_t train_samples = -1, steps_per_epoch = -1;
};

struct Manifest {
  std::string reason;
  Position position;
  // Where the epoch's dealing of its order began (data/sampler.hpp EpochStart): a batch and
  // the order's position there; 0, 0 unless the run resumed in this epoch on another geometry.
  std::int64_t dealt_from_batch = 0, dealt_from_sample = 0;
  std::int64_t optimizer_step = 0, micro_step = 0, samples_seen = 0, records = 0;
  RunIdentity run;
  // Each file's sha256 as read_checkpoint verified it (name, hex); empty when written.
  std::vector<std::pair<std::string, std::string>> verified_sha256;
};

// A new run's RunIdentity::id.
std::string new_run_id();

// name -> bytes, in the order written.
using Files = std::vector<std::pair<std::string, std::string>>;

// The files every checkpoint has.
inline const char* const kCheckpointFiles[] = {"model.pt", "optimizer.pt", "state.pt"};

// Exported for its test (tests/test_checkpoint.cpp).
WICK_PUBLIC_BEGIN

// Writes `files` and the manifest into `dir` atomically; replaces an existing folder of that
// name only once the new one is complete. Returns the bytes written. Throws
// std::runtime_error naming the folder and the cause; nothing else in the parent is touched.
// `between_renames` runs when a replaced folder has been moved aside and the new one is not yet
// in place: a test's way in, to make the second rename fail.
std::uint64_t write_checkpoint_folder(const std::filesystem::path& dir, const Manifest& m,
                                      const Files& files,
                                      const std::function<void()>& between_renames = {});

WICK_PUBLIC_END

// Reads a checkpoint folder as untrusted input: manifest.json a regular file of bounded size
// with the expected JSON types; each listed file a plain name among kCheckpointFiles, a
// regular file (no symlink, FIFO or device) whose real size equals the manifest's and whose
// sha256 matches; counts and position non-negative. Throws CheckpointError with the reason.
// `files` receives the verified bytes (nullptr: verify only).
Manifest read_checkpoint(const std::filesystem::path& dir, Files* files);

// What the Context and the Trainer tell of a checkpoint folder (absolute path, position,
// counts); `bytes` of its files.
CheckpointInfo checkpoint_info(const std::filesystem::path& dir, const Manifest& m,
                               std::uint64_t bytes);

}  // namespace wick
