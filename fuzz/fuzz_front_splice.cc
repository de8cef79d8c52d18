// libFuzzer target: a streamed completion or chat completion followed across engines by fastrestart-front
// (src/front/splice.h; docs/front.md, "What is continued and what is not"). Input: the client's request
// body, a NUL byte, then an engine's text/event-stream body; the first byte picks after which event the
// engine dies (the events after it are the next engine's) and whether the request is a chat. Never a crash,
// a hang or an exception; an event passes unchanged, as one "data: <JSON object>" event, or (a chat
// continuation's role chunk) not at all; a continuation is a JSON object asking no more tokens than the
// client and at least one, no larger than the body limit, with a prompt (completions) or messages (chat);
// a finished stream's tail ends with [DONE]; a refusal names its reason.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "front/http_request.h"
#include "front/splice.h"
#include "front/sse.h"

using namespace fr::front;

namespace {

void check_event_out(std::string_view in, const std::string& out, bool chat) {
  if (out == in || (chat && out.empty())) return;
  if (!out.starts_with("data: ") || !out.ends_with("\n\n")) __builtin_trap();
  auto j = nlohmann::json::parse(out.substr(6, out.size() - 8), nullptr, false);
  if (j.is_discarded() || !j.is_object()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const unsigned die_after = data[0] % 16;
  const bool chat = (data[0] & 0x10) != 0;
  std::string_view s(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = s.find('\0');
  Request req;
  req.method = "POST";
  req.url = chat ? "/v1/chat/completions" : "/v1/completions";
  req.body = std::string(s.substr(0, nul));
  req.stream = true;
  constexpr size_t kMaxBody = 4096;
  StreamSplice splice(req, kMaxBody);
  if (!splice.continuable() && (splice.reason().empty() || splice.why().empty())) __builtin_trap();
  if (splice.continuable()) {
    auto f = nlohmann::json::parse(splice.forward_body(), nullptr, false);
    if (f.is_discarded() || !f.is_object()) __builtin_trap();
  }
  // The limit the engine reads: chat's max_completion_tokens first.
  const char* limit = chat && [&] {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    return j.is_object() && j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null();
  }() ? "max_completion_tokens" : "max_tokens";
  const int64_t asked = [&] {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    return j.is_object() && j.contains(limit) && j[limit].is_number_integer() ? j[limit].get<int64_t>() : 0;
  }();
  if (nul == std::string_view::npos) return 0;
  SseSplitter sse(4096);
  sse.feed(s.substr(nul + 1));
  unsigned n = 0;
  while (auto ev = sse.next_event()) {
    check_event_out(*ev, splice.on_event(*ev), chat);
    if (++n != die_after) continue;
    const bool was_continuable = splice.continuable();
    switch (splice.resume()) {
      case StreamSplice::Next::kResend: {
        if (!was_continuable) __builtin_trap();
        auto b = nlohmann::json::parse(splice.body(), nullptr, false);
        if (b.is_discarded() || !b.is_object() || splice.body().size() > kMaxBody) __builtin_trap();
        if (!b[limit].is_number_integer() || b[limit].get<int64_t>() < 1 || b[limit].get<int64_t>() > asked)
          __builtin_trap();
        if (chat ? !b["messages"].is_array() : (!b["prompt"].is_string() && !b["prompt"].is_array())) __builtin_trap();
        // Fastrestart-Generated-Tokens: ids at the end of a prompt of ids; never on a text or chat continuation.
        if (const uint64_t k = splice.generated_tokens(); k > 0 && (chat || !b["prompt"].is_array() || b["prompt"].size() < k))
          __builtin_trap();
        break;
      }
      case StreamSplice::Next::kFinish:
        if (!splice.tail().empty() && !splice.tail().ends_with("data: [DONE]\n\n")) __builtin_trap();
        return 0;
      case StreamSplice::Next::kCannot:
        if (splice.reason().empty() || splice.why().empty()) __builtin_trap();
        return 0;
    }
  }
  return 0;
}
