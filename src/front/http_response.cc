#include "front/http_response.h"

namespace fr::front {
namespace {
// An engine's head is small; a larger one is treated as a broken answer.
constexpr size_t kMaxHeadBytes = 64 << 10;
}  // namespace

ResponseParser::ResponseParser(bool head_request, Sink sink) : m_head_request(head_request), m_sink(std::move(sink)) {
  // The callbacks not named are null, as http_parser_settings_init leaves them.
  m_settings = {.on_status = on_status, .on_header_field = on_header_field, .on_header_value = on_header_value,
                .on_headers_complete = on_headers_complete, .on_body = on_body, .on_message_complete = on_message_complete};
  http_parser_init(&m_parser, HTTP_RESPONSE);
  m_parser.data = this;
}

void ResponseParser::feed(const char* data, size_t n) {
  if (failed() || m_complete || n == 0) return;
  const size_t used = http_parser_execute(&m_parser, &m_settings, data, n);
  // Bytes past the end of the answer: nothing was asked for them, so the connection is not clean.
  if (m_complete && used < n) m_trailing = true;
  const auto err = HTTP_PARSER_ERRNO(&m_parser);
  if (err != HPE_OK && err != HPE_PAUSED && m_error.empty())
    m_error = std::string("malformed answer from the engine: ") + http_errno_description(err);
}

void ResponseParser::feed_eof() {
  if (failed() || m_complete) return;
  http_parser_execute(&m_parser, &m_settings, nullptr, 0);
  if (!m_complete && m_error.empty()) m_error = "the engine's connection ended before its answer did";
}

int ResponseParser::on_status(http_parser* p, const char* at, size_t n) {
  auto& self = *static_cast<ResponseParser*>(p->data);
  if ((self.m_head_bytes += n) > kMaxHeadBytes) return 1;
  self.m_reason.append(at, n);
  return 0;
}

int ResponseParser::on_header_field(http_parser* p, const char* at, size_t n) {
  auto& self = *static_cast<ResponseParser*>(p->data);
  if ((self.m_head_bytes += n) > kMaxHeadBytes) return 1;
  if (self.m_headers.empty() || self.m_in_value) self.m_headers.emplace_back();
  self.m_in_value = false;
  self.m_headers.back().first.append(at, n);
  return 0;
}

int ResponseParser::on_header_value(http_parser* p, const char* at, size_t n) {
  auto& self = *static_cast<ResponseParser*>(p->data);
  if ((self.m_head_bytes += n) > kMaxHeadBytes) return 1;
  if (self.m_headers.empty()) self.m_headers.emplace_back();
  self.m_in_value = true;
  self.m_headers.back().second.append(at, n);
  return 0;
}

int ResponseParser::on_headers_complete(http_parser* p) {
  auto& self = *static_cast<ResponseParser*>(p->data);
  self.m_status = static_cast<int>(p->status_code);
  if (self.m_status < 200) {
    // The front sends no Expect upstream, so an interim answer is not expected: refuse it rather than
    // take the final one's head for it.
    self.m_error = "the engine sent an interim (1xx) answer";
    return -1;  // an error: 1 would mean "no body follows" to http_parser
  }
  self.m_head_complete = true;
  if (const auto* ct = find_header(self.m_headers, "content-type")) {
    std::string_view t(*ct);
    self.m_event_stream = t.size() >= 17 && iequals(t.substr(0, 17), "text/event-stream");
  }
  return self.m_head_request ? 1 : 0;  // 1: no body follows (http_parser's convention)
}

int ResponseParser::on_body(http_parser* p, const char* at, size_t n) {
  auto& self = *static_cast<ResponseParser*>(p->data);
  if (!self.m_sink(std::string_view(at, n))) {
    if (self.m_error.empty()) self.m_error = "the answer was refused";
    return 1;
  }
  return 0;
}

int ResponseParser::on_message_complete(http_parser* p) {
  auto& self = *static_cast<ResponseParser*>(p->data);
  self.m_complete = true;
  self.m_keep_alive = http_should_keep_alive(p) != 0;
  http_parser_pause(p, 1);
  return 0;
}

}  // namespace fr::front
