#include "front/http_request.h"

#include <cctype>

#include "common/bounded_json.h"

namespace fr::front {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

const std::string* find_header(const Headers& h, std::string_view name) {
  for (const auto& [k, v] : h)
    if (iequals(k, name)) return &v;
  return nullptr;
}

RequestParser::RequestParser(RequestLimits limits) : m_limits(limits) {
  // The callbacks not named are null, as http_parser_settings_init leaves them.
  m_settings = {.on_message_begin = on_message_begin, .on_url = on_url, .on_header_field = on_header_field,
                .on_header_value = on_header_value, .on_headers_complete = on_headers_complete, .on_body = on_body,
                .on_message_complete = on_message_complete};
  http_parser_init(&m_parser, HTTP_REQUEST);
  m_parser.data = this;
}

void RequestParser::reset() {
  m_req = Request{};
  m_head_bytes = 0;
  m_in_value = false;
  m_complete = false;
  m_head_complete = false;
  // After a complete message the parser is paused (on_message_complete) and ready for the next one.
  http_parser_pause(&m_parser, 0);
}

void RequestParser::fail(int status, std::string why) {
  if (m_status == 0) {
    m_status = status;
    m_error = std::move(why);
  }
}

size_t RequestParser::feed(const char* data, size_t n) {
  if (failed() || m_complete || n == 0) return 0;
  const size_t used = http_parser_execute(&m_parser, &m_settings, data, n);
  const auto err = HTTP_PARSER_ERRNO(&m_parser);
  if (err == HPE_PAUSED || err == HPE_OK) return used;
  // A callback's own error (over a limit) was recorded by fail(); anything else is the parser's word.
  fail(400, std::string("malformed HTTP request: ") + http_errno_description(err));
  return used;
}

bool RequestParser::count_head(size_t n) {
  m_head_bytes += n;
  if (m_head_bytes <= m_limits.max_head_bytes) return true;
  fail(431, "the request line and headers are over " + std::to_string(m_limits.max_head_bytes) + " bytes");
  return false;
}

int RequestParser::on_message_begin(http_parser* p) {
  auto& self = *static_cast<RequestParser*>(p->data);
  self.m_req = Request{};
  return 0;
}

int RequestParser::on_url(http_parser* p, const char* at, size_t n) {
  auto& self = *static_cast<RequestParser*>(p->data);
  if (!self.count_head(n)) return 1;
  self.m_req.url.append(at, n);
  return 0;
}

int RequestParser::on_header_field(http_parser* p, const char* at, size_t n) {
  auto& self = *static_cast<RequestParser*>(p->data);
  if (!self.count_head(n)) return 1;
  auto& h = self.m_req.headers;
  if (h.empty() || self.m_in_value) h.emplace_back();
  self.m_in_value = false;
  h.back().first.append(at, n);
  return 0;
}

int RequestParser::on_header_value(http_parser* p, const char* at, size_t n) {
  auto& self = *static_cast<RequestParser*>(p->data);
  if (!self.count_head(n)) return 1;
  auto& h = self.m_req.headers;
  if (h.empty()) h.emplace_back();
  self.m_in_value = true;
  h.back().second.append(at, n);
  return 0;
}

int RequestParser::on_headers_complete(http_parser* p) {
  // An error is any value but 0, 1 and 2: to http_parser, 1 means "no body follows" and 2 "upgrade".
  auto& self = *static_cast<RequestParser*>(p->data);
  auto& r = self.m_req;
  r.method = http_method_str(static_cast<http_method>(p->method));
  r.http_major = p->http_major;
  r.http_minor = p->http_minor;
  r.keep_alive = http_should_keep_alive(p) != 0;
  if (p->upgrade || p->method == HTTP_CONNECT) {
    self.fail(400, "the front does not forward CONNECT or Upgrade requests");
    return -1;
  }
  // http_parser sets content_length to ULLONG_MAX when the request has none (chunked or no body).
  if (p->content_length != ULLONG_MAX && p->content_length > self.m_limits.max_body_bytes) {
    self.fail(413, "the request body (" + std::to_string(p->content_length) + " bytes) is over front.max_body_bytes = " +
                       std::to_string(self.m_limits.max_body_bytes));
    return -1;
  }
  if (const auto* e = find_header(r.headers, "expect")) {
    if (!iequals(*e, "100-continue")) {
      self.fail(400, "unsupported Expect header: " + *e);
      return -1;
    }
    r.expect_continue = true;
  }
  self.m_head_complete = true;
  return 0;
}

int RequestParser::on_body(http_parser* p, const char* at, size_t n) {
  auto& self = *static_cast<RequestParser*>(p->data);
  if (self.m_req.body.size() + n > self.m_limits.max_body_bytes) {
    self.fail(413, "the request body is over front.max_body_bytes = " + std::to_string(self.m_limits.max_body_bytes));
    return 1;
  }
  self.m_req.body.append(at, n);
  return 0;
}

int RequestParser::on_message_complete(http_parser* p) {
  auto& self = *static_cast<RequestParser*>(p->data);
  self.m_complete = true;
  http_parser_pause(p, 1);
  return 0;
}

std::optional<std::pair<int, std::string>> check_request(Request& req) {
  const auto* ct = find_header(req.headers, "content-type");
  if (req.body.empty()) return std::nullopt;
  std::string_view type = ct ? std::string_view(*ct) : std::string_view();
  if (auto semi = type.find(';'); semi != std::string_view::npos) type = type.substr(0, semi);
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  if (!iequals(type, "application/json"))
    return std::pair{400, "a request body must be application/json (Content-Type: " + (ct ? *ct : std::string("none")) + ")"};
  auto parsed = parse_json_bounded(req.body, {32, 65536, "the request body"});
  if (!parsed) return std::pair{400, parsed.error().message};
  const auto& j = *parsed;
  if (!j.is_object()) return std::nullopt;  // the engine answers what it makes of it
  if (auto it = j.find("stream"); it != j.end() && it->is_boolean()) req.stream = it->get<bool>();
  if (auto it = j.find("n"); it != j.end() && it->is_number_integer()) req.n = it->get<long long>();
  return std::nullopt;
}

}  // namespace fr::front
