// libFuzzer target: the engine's answer to the readiness request (src/supervisor/readiness.cc,
// judge_completion). First byte: the HTTP status class; the rest: the body. Whatever the engine says, the
// verdict's detail is one line of valid UTF-8 (it goes to the log and the status JSON).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "json_attacks.h"
#include "supervisor/readiness.h"

// Deep nesting, tiny values, brackets in strings (fuzz/json_attacks.h) one mutation in eight.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fr::fuzz::mutate_with_json_attacks(data, size, max_size, seed, /*keep=*/1);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static constexpr int kStatus[] = {200, 200, 200, 200, 503, 500, 404, 302};
  const int status = kStatus[data[0] % 8];
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  fr::supervisor::ReadinessConfig rc;
  if (data[0] & 0x80) rc.expect_text = " Paris";
  auto r = fr::supervisor::judge_completion(status, body, rc);
  if (r.ok && status != 200) __builtin_trap();
  if (r.ok && rc.expect_text && r.detail != *rc.expect_text) __builtin_trap();
  if (!r.ok) {
    if (r.detail.empty() || r.detail.find('\n') != std::string::npos) __builtin_trap();
    try {
      (void)nlohmann::json(r.detail).dump();  // strict: throws on invalid UTF-8
    } catch (const nlohmann::json::exception&) {
      __builtin_trap();
    }
  }
  return 0;
}
