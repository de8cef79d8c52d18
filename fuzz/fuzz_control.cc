// libFuzzer target: a control-socket request as fastrestartd receives it (src/supervisor/control.cc): the
// frame payload, the request's validation, then the flag handling a reload performs (sh-like splitting,
// merging into the current flags, deciding warm or cold). Never a crash, a hang or an exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "protocol/frame.h"
#include "supervisor/control_request.h"
#include "supervisor/flags.h"

using namespace fr::supervisor;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  auto j = fr::proto::decode_payload(s);
  if (!j.ok()) return 0;
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
    const std::vector<std::string> current{"--host", "127.0.0.1", "--port", "8000", "--dtype=bfloat16", "-tp", "2"};
    auto next = merge_flags(current, *r->flags, r->mode);
    (void)daemon_affecting_changes(EngineKind::kVllm, current, next);
    (void)daemon_affecting_changes(EngineKind::kGeneric, current, next, {"--model"});
    if (r->mode == PushKind::kReplace && next != *r->flags) __builtin_trap();
  }
  return 0;
}
