// libFuzzer target: a control-socket request as fastrestartd receives it (src/supervisor/control.cc): the
// frame payload, the request's validation, then the flag handling a reload performs (sh-like splitting,
// merging into the current flags, deciding warm or cold). Never a crash, a hang or an exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "json_attacks.h"
#include "common/control_chars.h"
#include "protocol/frame.h"
#include "supervisor/control_request.h"
#include "supervisor/engines/engine_kind.h"
#include "supervisor/flags.h"

using namespace fr::supervisor;

// Deep nesting, tiny values, brackets in strings (fuzz/json_attacks.h) one mutation in eight.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fr::fuzz::mutate_with_json_attacks(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  auto j = fr::proto::decode_payload(s, fr::proto::kControlFrameLimits.json);
  if (!j.ok()) return 0;
  if (fr::fuzz::json_depth(*j) > fr::kSmallJsonLimits.max_depth) __builtin_trap();
  auto r = parse_control_request(*j);
  if (!r.ok()) {
    // The error reply must be encodable (valid UTF-8 or replaced).
    if (!fr::proto::encode_frame(fr::proto::error_reply(r.error())).ok()) __builtin_trap();
    return 0;
  }
  // Round trip: what we accept, a client can send again and mean the same.
  auto back = parse_control_request(to_json(*r));
  if (!back.ok() || back->op != r->op || back->flags != r->flags || back->mode != r->mode || back->wait != r->wait)
    __builtin_trap();
  if (r->flags) {
    // What fastrestartd keeps is the words it was given, and they parse back to them.
    const auto& words = r->flags->words();
    if (to_words(parse_flag_list(words)) != words) __builtin_trap();
    for (const auto& w : words)
      if (fr::find_control_char(w)) __builtin_trap();
    static const FlagList current =
        FlagList::from_words({"--host", "127.0.0.1", "--port", "8000", "--dtype=bfloat16", "-tp", "2"}, "current").value();
    const FlagList next = current.merged(*r->flags, r->mode);
    for (const auto& w : next.words())
      if (fr::find_control_char(w)) __builtin_trap();
    (void)daemon_affecting_changes(builtin_engine_adapter(EngineKind::kVllm).flag_rules(), current, next);
    (void)daemon_affecting_changes(builtin_engine_adapter(EngineKind::kGeneric).flag_rules(), current, next, {"--model"});
    if (r->mode == PushKind::kReplace && next != *r->flags) __builtin_trap();
  }
  return 0;
}
