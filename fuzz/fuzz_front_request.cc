// libFuzzer target: what a client sends fastrestart-front, and what an engine streams back to it
// (src/front/http_request.h, src/front/sse.h; docs/front.md). The first byte picks the parser and the
// piece size. Never a crash, a hang or an exception; the request parser consumes the same request whether the
// bytes come whole or in pieces; every rejection is one of the front's statuses with a message; an SSE
// event ends with a blank line, and the events and what is left pending are exactly the bytes fed.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "front/http_request.h"
#include "front/sse.h"

using namespace fr::front;

namespace {

struct Outcome {
  bool complete = false;
  int status = 0;
  std::string method, url, body;
  size_t used = 0;
};

Outcome parse_in_pieces(std::string_view s, size_t piece) {
  RequestParser p({4096, 2048});
  Outcome o;
  while (o.used < s.size() && !p.complete() && !p.failed()) {
    const size_t n = std::min(piece, s.size() - o.used);
    const size_t used = p.feed(s.data() + o.used, n);
    if (used > n) __builtin_trap();
    o.used += used;
    if (used < n && !p.complete() && !p.failed()) __builtin_trap();  // stops early only at an end or error
  }
  o.complete = p.complete();
  o.status = p.error_status();
  if (p.failed() && (p.error().empty() || (o.status != 400 && o.status != 413 && o.status != 431))) __builtin_trap();
  if (o.complete) {
    Request& r = p.request();
    o.method = r.method;
    o.url = r.url;
    o.body = r.body;
    if (r.body.size() > 4096) __builtin_trap();
    if (auto bad = check_request(r); bad && (bad->first != 400 || bad->second.empty())) __builtin_trap();
    // The next request on the connection parses after a reset.
    p.reset();
    const std::string next = "GET / HTTP/1.1\r\n\r\n";
    p.feed(next.data(), next.size());
    if (!p.complete()) __builtin_trap();
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const unsigned sel = data[0];
  std::string_view s(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t piece = 1 + (sel >> 1) % 17;
  if ((sel & 1) == 0) {
    const Outcome whole = parse_in_pieces(s, s.size() + 1);
    const Outcome cut = parse_in_pieces(s, piece);
    if (whole.complete != cut.complete || whole.status != cut.status) __builtin_trap();
    if (whole.complete && (whole.method != cut.method || whole.url != cut.url || whole.body != cut.body ||
                           whole.used != cut.used))
      __builtin_trap();
    return 0;
  }
  SseSplitter sse(1024);
  std::string out;
  for (size_t at = 0; at < s.size(); at += piece) {
    sse.feed(s.substr(at, piece));
    while (auto ev = sse.next_event()) {
      const std::string& e = *ev;
      if (!(e.ends_with("\n\n") || e.ends_with("\r\r") || e.ends_with("\r\n\r\n") || e.ends_with("\n\r\n") ||
            e.ends_with("\r\n\n") || e.ends_with("\n\r") || e.ends_with("\r\r\n") || e.ends_with("\r\n\r")))
        __builtin_trap();
      (void)data_of(e);
      out += e;
    }
    if (sse.failed()) return 0;
  }
  // What was handed out, plus what is pending, is what was fed less the blank lines skipped between events.
  if (out.size() + sse.pending() > s.size()) __builtin_trap();
  return 0;
}
