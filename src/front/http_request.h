// RequestParser: one client's HTTP/1.x requests, parsed by node's http_parser (libhttp-parser), one
// request at a time, with the front's limits.
//
// Contract
// - feed(data, n) consumes bytes until one request is complete, the input ends, or an error; it returns
//   how many bytes it took. Bytes past a complete request are left to the caller, who feeds them again
//   after reset() (HTTP/1.1 pipelining keeps its order: the front answers one request before it reads the
//   next).
// - An error is final for the connection (the stream is no longer in step): error_status() is the status
//   the front answers with (400 malformed, 413 body over max_body_bytes, 431 head over max_head_bytes) and
//   error() says what was wrong; the front answers it and closes.
// - The body is de-chunked; the request's own framing headers (Content-Length, Transfer-Encoding) and
//   hop-by-hop headers are not forwarded by the front (http_forward.h).
// - check_request() adds the front's rules on a complete request: no Upgrade or CONNECT, a body only as
//   application/json, a JSON body that parses (bounded), and reads the completion fields the front needs
//   (stream, n).
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fr::front {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;
  std::string url;
  Headers headers;
  std::string body;
  unsigned short http_major = 1, http_minor = 1;
  bool keep_alive = true;
  bool expect_continue = false;  // "Expect: 100-continue": the front answers 100 before the body
  // From check_request(): a JSON body's "stream": true, and its "n" (1 when absent).
  bool stream = false;
  long long n = 1;
};

struct RequestLimits {
  size_t max_body_bytes = 1 << 20;
  size_t max_head_bytes = 32 << 10;  // request line and headers together
};

class RequestParser {
 public:
  explicit RequestParser(RequestLimits limits);
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  size_t feed(const char* data, size_t n);
  bool complete() const { return m_complete; }
  // The head is in (for "Expect: 100-continue"); reset by reset().
  bool head_complete() const { return m_head_complete; }
  bool failed() const { return m_status != 0; }
  int error_status() const { return m_status; }
  const std::string& error() const { return m_error; }
  Request& request() { return m_req; }
  // Ready for the next request on the same connection.
  void reset();

 private:
  static int on_message_begin(http_parser* p);
  static int on_url(http_parser* p, const char* at, size_t n);
  static int on_header_field(http_parser* p, const char* at, size_t n);
  static int on_header_value(http_parser* p, const char* at, size_t n);
  static int on_headers_complete(http_parser* p);
  static int on_body(http_parser* p, const char* at, size_t n);
  static int on_message_complete(http_parser* p);
  bool count_head(size_t n);
  void fail(int status, std::string why);

  RequestLimits m_limits;
  http_parser m_parser{};
  http_parser_settings m_settings{};
  Request m_req;
  size_t m_head_bytes = 0;
  bool m_in_value = false;
  bool m_complete = false;
  bool m_head_complete = false;
  int m_status = 0;
  std::string m_error;
};

// The front's rules on a complete request; fills req.stream and req.n. An error: {status, message}.
std::optional<std::pair<int, std::string>> check_request(Request& req);

// Case-insensitive header lookup; nullptr when absent.
const std::string* find_header(const Headers& h, std::string_view name);
bool iequals(std::string_view a, std::string_view b);

}  // namespace fr::front
