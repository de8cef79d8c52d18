// ResponseParser: the engine's answer to one forwarded request, parsed by http_parser.
//
// Contract
// - feed(data, n) parses bytes as they arrive; feed_eof() tells it the connection ended (a body delimited by
//   the close completes there). failed() after either means the answer is unusable (malformed, or cut
//   before its end): the front treats that like the engine's death.
// - The head is in once head_complete(): status(), reason(), headers(), event_stream() (Content-Type
//   text/event-stream: the body is passed on as it arrives instead of buffered).
// - Body bytes (de-chunked) go to the sink given to the constructor; complete() once the message ended.
// - A response to HEAD has no body: construct with head_request = true.
// - reusable(): the answer is complete, framed by its length or chunks (not by the connection's end), the
//   engine did not ask to close (Connection: close, or HTTP/1.0 without keep-alive), and no byte followed
//   it: the connection may carry the next request.
#pragma once

#include <http_parser.h>

#include <functional>
#include <string>
#include <string_view>

#include "front/http_request.h"  // Headers

namespace fr::front {

class ResponseParser {
 public:
  using Sink = std::function<bool(std::string_view)>;  // false: stop (the caller failed the exchange)
  ResponseParser(bool head_request, Sink sink);
  ResponseParser(const ResponseParser&) = delete;
  ResponseParser& operator=(const ResponseParser&) = delete;

  void feed(const char* data, size_t n);
  void feed_eof();
  bool head_complete() const { return m_head_complete; }
  bool complete() const { return m_complete; }
  bool failed() const { return !m_error.empty(); }
  const std::string& error() const { return m_error; }
  int status() const { return m_status; }
  const std::string& reason() const { return m_reason; }
  const Headers& headers() const { return m_headers; }
  bool event_stream() const { return m_event_stream; }
  bool reusable() const { return m_complete && m_keep_alive && !m_trailing && !failed(); }

 private:
  static int on_status(http_parser* p, const char* at, size_t n);
  static int on_header_field(http_parser* p, const char* at, size_t n);
  static int on_header_value(http_parser* p, const char* at, size_t n);
  static int on_headers_complete(http_parser* p);
  static int on_body(http_parser* p, const char* at, size_t n);
  static int on_message_complete(http_parser* p);

  bool m_head_request;
  Sink m_sink;
  http_parser m_parser{};
  http_parser_settings m_settings{};
  Headers m_headers;
  std::string m_reason, m_error;
  size_t m_head_bytes = 0;
  int m_status = 0;
  bool m_in_value = false, m_head_complete = false, m_complete = false, m_event_stream = false;
  bool m_keep_alive = false, m_trailing = false;
};

}  // namespace fr::front
