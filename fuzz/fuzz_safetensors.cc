// libFuzzer target: safetensors header validation on hostile input (first 8 bytes: the claimed file size).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t file_size;
  std::memcpy(&file_size, data, 8);
  std::string_view header(reinterpret_cast<const char*>(data + 8), size - 8);
  file_size = header.size() + 8 + (file_size % (1ull << 40));
  auto h = fr::parse_safetensors_header(header, header.size(), file_size, "fuzz.safetensors");
  if (h.ok())
    for (const auto& t : h->tensors)
      if (t.end > file_size || t.begin > t.end) __builtin_trap();
  return 0;
}
