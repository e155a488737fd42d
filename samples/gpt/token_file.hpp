// Token files in nanoGPT's layout (a flat array of little-endian uint16 token ids, no header),
// memory-mapped read-only, and the two wick data sets cut from them: random training windows
// (a stream) and fixed validation windows.
#pragma once

#include <wick/task.hpp>

#include <cstdint>
#include <memory>
#include <string>

// A named namespace, not an anonymous one: wick's unity build may compile this file's source
// and gpt.cpp as one translation unit.
namespace wick_gpt {

// The mapped file. Opening checks what needs no pass over the tokens (exists, not empty, an
// even size, at least min_tokens tokens); each window is checked against the vocabulary as it
// is copied out (window()), so a 9 GB file costs nothing to open.
class TokenFile {
 public:
  TokenFile(const std::string& path, std::int64_t min_tokens);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  std::int64_t size() const { return tokens_; }
  // A CRC-32 of the file's first and last 64 KiB and of 64 blocks of 4 KiB spread between:
  // what tells a resume that its file was replaced (its windows would differ), without a pass
  // over a file of gigabytes.
  std::uint32_t fingerprint() const { return fingerprint_; }
  // Tokens [start, start + n) into out as int64; throws, naming the file and the offset, on a
  // token >= vocab.
  void window(std::int64_t start, std::int64_t n, std::int64_t vocab, std::int64_t* out) const;

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;  // bytes, so that reads need no alignment
  std::size_t bytes_ = 0;
  std::int64_t tokens_ = 0;
  std::uint32_t fingerprint_ = 0;
};

// Training data: a stream (size() is wick::kUnsized; an epoch is trainer.steps_per_epoch
// batches). Each sample is a window at a random start drawn from the batch's Fetch generator,
// so a resumed run draws the same windows: input tokens[s, s+T), target tokens[s+1, s+T+1).
class RandomWindows : public wick::Dataset {
 public:
  RandomWindows(std::shared_ptr<const TokenFile> file, std::int64_t context, std::int64_t vocab)
      : file_(std::move(file)), context_(context), vocab_(vocab) {}
  std::int64_t size() const override { return wick::kUnsized; }
  wick::Batch get(const at::Tensor& indices, wick::Fetch& fetch) override;

 private:
  std::shared_ptr<const TokenFile> file_;
  std::int64_t context_, vocab_;
};

// Validation data: `count` windows at fixed starts spread evenly over the file, the same in
// every run, so valid/loss compares across runs and configs with the same context.
class FixedWindows : public wick::Dataset {
 public:
  FixedWindows(std::shared_ptr<const TokenFile> file, std::int64_t context, std::int64_t vocab,
               std::int64_t count)
      : file_(std::move(file)), context_(context), vocab_(vocab), count_(count) {}
  std::int64_t size() const override { return count_; }
  wick::Batch get(const at::Tensor& indices, wick::Fetch& fetch) override;
  // The start of window i.
  std::int64_t start(std::int64_t i) const;

 private:
  std::shared_ptr<const TokenFile> file_;
  std::int64_t context_, vocab_, count_;
};

}  // namespace wick_gpt
