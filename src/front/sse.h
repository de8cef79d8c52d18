// SseSplitter: a text/event-stream body cut into whole events, so the front passes an engine's stream on
// event by event and, should the engine die mid-stream, ends it on an event boundary with an error event
// the client can parse.
//
// Contract
// - feed(bytes) appends; next_event() returns the next complete event (its lines and the blank line that
//   ends it, "\n", "\r\n" or "\r" line ends as the SSE grammar allows) or nullopt until one is complete.
// - An event larger than max_event_bytes is an error (failed(), error() says so): the stream is cut.
// - data_of(event) joins the event's "data:" fields with "\n" (the grammar's rule); nullopt without one.
// - error_event(message) and done_event() are what the front writes at an interrupted stream's end.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fr::front {

class SseSplitter {
 public:
  explicit SseSplitter(size_t max_event_bytes = 1 << 20) : m_max(max_event_bytes) {}
  void feed(std::string_view bytes);
  std::optional<std::string> next_event();
  bool failed() const { return !m_error.empty(); }
  const std::string& error() const { return m_error; }
  // Bytes held that do not make a whole event yet.
  size_t pending() const { return m_buf.size() - m_pos; }

 private:
  std::string m_buf;
  size_t m_pos = 0, m_scan = 0, m_line = 0;  // event start, scan point, current line start
  size_t m_max;
  std::string m_error;
};

std::optional<std::string> data_of(std::string_view event);
std::string error_event(std::string_view message);
std::string done_event();

}  // namespace fr::front
