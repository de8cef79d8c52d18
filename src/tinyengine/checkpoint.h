// The checkpoint generator and reader (docs/tinyengine.md, "Checkpoints").
//
// A checkpoint is one safetensors file or a directory of them ("model-00001-of-00003.safetensors", ...).
// Every file carries the model config as JSON in its "__metadata__" under kConfigKey. The generator is
// deterministic: each tensor is filled from a SplitMix64 stream seeded by (seed, tensor name), so the same
// options write byte-identical files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/safetensors.h"
#include "fastrestart/result.h"
#include "tinyengine/model.h"

namespace fr::te {

inline constexpr const char* kConfigKey = "tinyengine.config";

struct GenOptions {
  ModelConfig config;
  uint64_t seed = 1;
  uint64_t shard_bytes = 1ull << 30;  // a shard holds tensors up to this many bytes (one tensor may exceed)
  // lm_head's rows of every token but printable ASCII (0x20..0x7e) scaled by 1/64, so that greedy output is
  // printable text: answers a client can read back and send again as text (a chat continued by the front).
  bool printable = false;
};

// The config whose weights take about `target_bytes`: `base` plus extra wide blocks (each tensor at most
// 256 MiB). A target at or below the base size returns `base` with no extra blocks.
ModelConfig config_for_size(const ModelConfig& base, uint64_t target_bytes);

// "2G", "512M", "64K", "1000" (powers of 1024) -> bytes.
Result<uint64_t> parse_size(const std::string& text);

// Writes the checkpoint into directory `out_dir` (created if absent); returns the files written.
Result<std::vector<std::string>> generate_checkpoint(const GenOptions& options, const std::string& out_dir);

// A checkpoint's files, headers and config, read from the headers only.
// Every file is opened once, here, and everything after (headers, the disk load, the key a publish goes
// under) reads or identifies that descriptor, never the path again: a symlink retargeted during the load
// (`current -> v2`) cannot mix two versions or publish one version's bytes under another's identity.
struct CheckpointInfo {
  std::vector<std::string> files;  // absolute paths, sorted
  std::shared_ptr<const std::vector<UniqueFd>> fds;  // fds->at(i) is files[i], open for reading
  std::vector<int> fd_numbers() const;
  std::vector<SafetensorsHeader> headers;
  ModelConfig config;
  uint64_t header_bytes = 0;  // bytes read to learn this
};
// `path`: a .safetensors file or a directory holding *.safetensors files.
Result<CheckpointInfo> inspect_checkpoint(const std::string& path);

// Tensors by name, and whatever keeps their memory alive.
struct TensorSet {
  std::map<std::string, TensorView> tensors;
  std::shared_ptr<void> owner;
  TensorLookup lookup() const;
};

// Reads every tensor's bytes into memory this process owns (one aligned buffer per file). The buffers are
// writable through `mutable_data` (tests perturb weights there).
struct DiskLoad {
  TensorSet set;
  uint64_t bytes_read = 0;
  std::byte* mutable_data(const std::string& name) const;
};
Result<DiskLoad> load_from_disk(const CheckpointInfo& info);

}  // namespace fr::te
