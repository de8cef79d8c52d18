// Safetensors: header parsing with full validation, and a small writer.
//
// Format: u64 little-endian header length N, N bytes of JSON header, then the data. The header maps
// tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data) and may
// hold "__metadata__" (string -> string). A checkpoint is untrusted input: every field is checked
// (limits below) and an error names the file and the tensor at fault. Nothing is ever executed.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/result.h"

namespace fr {

inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;  // safetensors' own limit
inline constexpr size_t kMaxTensorsPerFile = 1u << 20;
inline constexpr size_t kMaxTensorName = 1024;
inline constexpr size_t kMaxRank = 16;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // absolute offset in the file
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::string path;
  uint64_t file_size = 0;
  uint64_t data_start = 0;              // 8 + N
  std::vector<TensorInfo> tensors;      // in data order (by begin offset)
  std::map<std::string, std::string> metadata;
};

// Validates `json` as the header of a file of `file_size` bytes whose header is `header_len` bytes long.
Result<SafetensorsHeader> parse_safetensors_header(std::string_view json, uint64_t header_len,
                                                   uint64_t file_size, const std::string& path);
// Opens `path`, reads and validates its header. Reads only the header, never the data.
Result<SafetensorsHeader> read_safetensors_header(const std::string& path);
// The same from a file already open as `fd` (`path` names it in errors and becomes the header's path).
Result<SafetensorsHeader> read_safetensors_header_fd(int fd, const std::string& path);

struct TensorData {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // shape x itemsize bytes
};
// Writes a safetensors file atomically (temp file + rename). Tensors are laid out in the given order.
Status write_safetensors(const std::string& path, std::span<const TensorData> tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace fr
