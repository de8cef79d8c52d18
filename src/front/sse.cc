#include "front/sse.h"

#include <nlohmann/json.hpp>

namespace fr::front {

void SseSplitter::feed(std::string_view bytes) {
  if (failed()) return;
  // Drop what was handed out before growing, so a long stream does not keep every event.
  if (m_pos > 0 && m_pos == m_buf.size()) {
    m_buf.clear();
    m_scan = m_pos = m_line = 0;
  } else if (m_pos > (1 << 16)) {
    m_buf.erase(0, m_pos);
    m_scan -= m_pos;
    m_line -= m_pos;
    m_pos = 0;
  }
  m_buf.append(bytes);
}

std::optional<std::string> SseSplitter::next_event() {
  if (failed()) return std::nullopt;
  // Line by line from where the last call stopped: an event ends at an empty line. "\r\n", "\n" and "\r"
  // each end a line; a "\r" at the end of the input waits for the next byte ("\r\n" is one line end).
  size_t i = m_scan;
  while (i < m_buf.size()) {
    const char c = m_buf[i];
    if (c != '\n' && c != '\r') {
      ++i;
      continue;
    }
    size_t len = 1;
    if (c == '\r') {
      if (i + 1 >= m_buf.size()) break;
      if (m_buf[i + 1] == '\n') len = 2;
    }
    const bool empty_line = i == m_line;
    m_line = i + len;
    i += len;
    if (!empty_line) continue;
    if (i - len == m_pos) {  // a blank line with no event before it: nothing to hand out
      m_pos = i;
      continue;
    }
    std::string ev = m_buf.substr(m_pos, i - m_pos);
    m_pos = m_scan = i;
    return ev;
  }
  m_scan = i;
  if (m_buf.size() - m_pos > m_max)
    m_error = "an event of the engine's stream is over " + std::to_string(m_max) + " bytes";
  return std::nullopt;
}

std::optional<std::string> data_of(std::string_view event) {
  std::optional<std::string> out;
  size_t pos = 0;
  while (pos < event.size()) {
    size_t end = event.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) end = event.size();
    std::string_view line = event.substr(pos, end - pos);
    if (line.substr(0, 5) == "data:") {
      std::string_view v = line.substr(5);
      if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      if (out) out->push_back('\n');
      else out.emplace();
      out->append(v);
    }
    pos = end;
    if (pos < event.size() && event[pos] == '\r') ++pos;
    if (pos < event.size() && event[pos] == '\n') ++pos;
  }
  return out;
}

std::string error_event(std::string_view message) {
  nlohmann::json j = {{"error", {{"message", std::string(message)}, {"type", "ServiceUnavailableError"}, {"code", 503}}}};
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

std::string done_event() { return "data: [DONE]\n\n"; }

}  // namespace fr::front
