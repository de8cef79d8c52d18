// libFuzzer target: a line an engine writes on its standby gate (src/supervisor/standby/gate_message.cc,
// docs/standby.md "The gate protocol"), as fastrestartd reads it. Never a crash, a hang or an exception;
// an error names the message without a raw control character; what parses re-parses the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "json_attacks.h"
#include "supervisor/standby/gate_message.h"

using namespace fr::supervisor;

// Deep nesting, tiny values, brackets in strings (fuzz/json_attacks.h) one mutation in eight.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fr::fuzz::mutate_with_json_attacks(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  auto m = parse_gate_message(s);
  if (!m.ok()) {
    for (char c : m.error().message)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) __builtin_trap();
    return 0;
  }
  if (m->pid <= 0 || (m->level != "pre_gpu" && m->level != "warmed")) __builtin_trap();
  const std::string again = nlohmann::json{{"op", "parked"}, {"v", kGateVersion}, {"level", m->level}, {"pid", m->pid}}.dump();
  auto back = parse_gate_message(again);
  if (!back.ok() || back->level != m->level || back->pid != m->pid) __builtin_trap();
  return 0;
}
