// libFuzzer target: the TOML config loader (src/supervisor/config.cc) on hostile files. It must never
// crash, hang or throw; a rejected file has a message "<path>:<line>: ..." naming where; an accepted one
// satisfies the invariants the supervisor relies on.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "supervisor/config.h"
#include "supervisor/engines/engine_kind.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = fr::supervisor::parse_config(text, "/fuzz/model.toml");
  if (!c.ok()) {
    if (!c.error().message.starts_with("/fuzz/model.toml:")) __builtin_trap();
    return 0;
  }
  if (c->engine.command.empty() || c->engine.port == 0) __builtin_trap();
  if (!(c->memory.utilization > 0 && c->memory.utilization <= 1)) __builtin_trap();
  if (c->restart.backoff_initial_s > c->restart.backoff_max_s) __builtin_trap();
  if (c->name.empty()) __builtin_trap();
  // The engine kind's checks, where fastrestartd runs them after the parse: the same form of message.
  if (auto kind = fr::supervisor::check_engine_config(*c); !kind.ok() && !kind.error().message.starts_with("/fuzz/model.toml:"))
    __builtin_trap();
  return 0;
}
