// libFuzzer target: the KV-arena requests and the lease reply (docs/protocol.md, "arena_lease",
// "arena_release"). Whatever the payload, the decoders must not crash or hang, must accept only what the
// protocol allows (a name by the arena-name rule, bytes in 1..kMaxArenaBytes, wait_s in 0..kMaxWaitS), and
// what they accept must encode and decode to the same request (the engine's library encodes with the
// same codec the daemon decodes with).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "protocol/arena.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

using namespace fr::proto;

void check_lease(const json& j) {
  auto r = arena_lease_from_json(j);
  if (!r.ok()) {
    if (r.error().message.rfind("arena_lease.", 0) != 0) __builtin_trap();  // errors name the field
    return;
  }
  if (!valid_arena_name(r->name) || r->bytes == 0 || r->bytes > kMaxArenaBytes) __builtin_trap();
  if (!(r->wait_s >= 0 && r->wait_s <= kMaxWaitS)) __builtin_trap();
  auto back = arena_lease_from_json(to_json(*r));
  if (!back.ok() || back->name != r->name || back->bytes != r->bytes || back->wait_s != r->wait_s) __builtin_trap();
}

void check_release(const json& j) {
  auto r = arena_release_from_json(j);
  if (!r.ok()) return;
  if (!valid_arena_name(r->name)) __builtin_trap();
  auto back = arena_release_from_json(to_json(*r));
  if (!back.ok() || back->name != r->name) __builtin_trap();
}

void check_lease_reply(const json& j) {
  auto r = arena_lease_reply_from_json(j);
  if (!r.ok()) return;
  if (r->pool_bytes < r->bytes) __builtin_trap();
  auto back = arena_lease_reply_from_json(to_json(*r));
  if (!back.ok() || back->bytes != r->bytes || back->pool_bytes != r->pool_bytes || back->created != r->created ||
      back->previous_holder_pid != r->previous_holder_pid || back->generation != r->generation)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  auto j = decode_payload(s);  // as the daemon reads a frame: bounded, then parsed
  if (!j.ok()) return 0;
  check_lease(*j);
  check_release(*j);
  check_lease_reply(*j);
  // The arena-name rule alone, on the raw bytes (a name from a flag or an engine's options).
  if (valid_arena_name(s) != check_arena_name(s, "name").ok()) __builtin_trap();
  return 0;
}
