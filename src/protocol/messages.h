// Typed views of the protocol's shared objects (docs/protocol.md, "Shared objects"): Key and Manifest,
// with validating JSON decoders whose errors name the field at fault ("key.files[2].size: ...").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/file_identity.h"
#include "common/result.h"
#include "protocol/frame.h"

namespace fr::proto {

inline constexpr size_t kMaxKeyFiles = 4096;
inline constexpr size_t kMaxConfigFields = 256;
inline constexpr size_t kMaxConfigKey = 256;
inline constexpr size_t kMaxConfigValue = 4096;
inline constexpr size_t kMaxTensors = 1u << 20;
inline constexpr size_t kMaxTensorName = 1024;
inline constexpr size_t kMaxRank = 16;
inline constexpr size_t kPoolAlignment = 256;
inline constexpr double kMaxWaitS = 86400;

struct Key {
  std::vector<FileIdentity> files;            // sorted by path
  std::map<std::string, std::string> config;  // free-form engine config fields
  bool operator==(const Key&) const = default;

  std::string canonical() const;    // canonical JSON
  std::string fingerprint() const;  // 16 hex digits
};

json to_json(const Key& k);
Result<Key> key_from_json(const json& j, const std::string& where);
// Fields of `want` that differ from `have`, named as in docs/protocol.md ("files[0].ctime_ns").
std::vector<std::string> key_differences(const Key& want, const Key& have);
// How alike two keys are (for choosing which entry a miss is explained against); higher is closer.
int key_similarity(const Key& want, const Key& have);

struct TensorSpec {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;
};

struct TensorSlot {
  TensorSpec spec;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
};

struct Manifest {
  std::string fingerprint;
  uint64_t pool_bytes = 0;
  uint64_t data_bytes = 0;
  std::optional<uint64_t> digest;
  uint64_t digest_chunk = 0;
  std::string source;  // "preload" | "publish"
  std::string backend;
  std::string gpu_uuid;
  std::vector<TensorSlot> tensors;
};

json to_json(const TensorSpec& t);
Result<TensorSpec> tensor_spec_from_json(const json& j, const std::string& where);
json to_json(const Manifest& m);
// Validates offsets: aligned, inside data_bytes <= pool_bytes, nbytes = shape x itemsize.
Result<Manifest> manifest_from_json(const json& j, const std::string& where);

// Lays tensors out back to back at kPoolAlignment; returns data_bytes.
uint64_t layout_tensors(const std::vector<TensorSpec>& specs, std::vector<TensorSlot>* out);

// Field accessors with errors that name the field.
Result<std::string> get_string(const json& j, const char* field, const std::string& where, size_t max_len = 4096);
Result<uint64_t> get_u64(const json& j, const char* field, const std::string& where);
Result<double> get_double(const json& j, const char* field, const std::string& where, double dflt);
Result<bool> get_bool(const json& j, const char* field, const std::string& where, bool dflt);

}  // namespace fr::proto
