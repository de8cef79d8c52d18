// libFuzzer target: a streamed completion followed across engines by fastrestart-front (src/front/splice.h;
// docs/front.md, "What is continued and what is not"). Input: the client's request body, a NUL byte, then an
// engine's text/event-stream body; the first byte picks after which event the engine dies (the events after
// it are the next engine's). Never a crash, a hang or an exception; an event passes unchanged or as one
// "data: <JSON object>" event; a continuation is a JSON object asking fewer tokens than the client and no
// larger than the body limit; a finished stream's tail ends with [DONE]; a refusal names its reason.
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

void check_event_out(std::string_view in, const std::string& out) {
  if (out == in) return;
  if (!out.starts_with("data: ") || !out.ends_with("\n\n")) __builtin_trap();
  auto j = nlohmann::json::parse(out.substr(6, out.size() - 8), nullptr, false);
  if (j.is_discarded() || !j.is_object()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const unsigned die_after = data[0] % 16;
  std::string_view s(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = s.find('\0');
  Request req;
  req.method = "POST";
  req.url = "/v1/completions";
  req.body = std::string(s.substr(0, nul));
  req.stream = true;
  constexpr size_t kMaxBody = 4096;
  StreamSplice splice(req, kMaxBody);
  if (!splice.continuable() && (splice.reason().empty() || splice.why().empty())) __builtin_trap();
  if (splice.continuable()) {
    auto f = nlohmann::json::parse(splice.forward_body(), nullptr, false);
    if (f.is_discarded() || !f.is_object()) __builtin_trap();
  }
  const int64_t asked = [&] {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    return j.is_object() && j.contains("max_tokens") && j["max_tokens"].is_number_integer() ? j["max_tokens"].get<int64_t>() : 0;
  }();
  if (nul == std::string_view::npos) return 0;
  SseSplitter sse(4096);
  sse.feed(s.substr(nul + 1));
  unsigned n = 0;
  while (auto ev = sse.next_event()) {
    check_event_out(*ev, splice.on_event(*ev));
    if (++n != die_after) continue;
    const bool was_continuable = splice.continuable();
    switch (splice.resume()) {
      case StreamSplice::Next::kResend: {
        if (!was_continuable) __builtin_trap();
        auto b = nlohmann::json::parse(splice.body(), nullptr, false);
        if (b.is_discarded() || !b.is_object() || splice.body().size() > kMaxBody) __builtin_trap();
        if (!b["max_tokens"].is_number_integer() || b["max_tokens"].get<int64_t>() < 1 || b["max_tokens"].get<int64_t>() > asked)
          __builtin_trap();
        if (!b["prompt"].is_string() && !b["prompt"].is_array()) __builtin_trap();
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
