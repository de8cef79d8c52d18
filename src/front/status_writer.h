// StatusWriter: the front's status file, written off the event loop.
//
// Contract
// - post(text) asks for `path` to hold `text`. The write runs on libuv's thread pool, so the loop that
//   serves requests never waits on the file system; at most one write is in flight, and a text posted
//   meanwhile replaces any earlier one still waiting: the file ends with the last text posted, and
//   successive contents appear in the order they were posted.
// - The file is replaced atomically for readers (write_file_replace: never half written; not fsync'ed, so
//   it survives the front's death but not the machine's).
// - A write in flight keeps the loop alive (uv_run returns after it), so the last text posted before the
//   loop ends is written.
// - An empty path: post() does nothing.
#pragma once

#include <uv.h>

#include <optional>
#include <string>

namespace fr::front {

class StatusWriter {
 public:
  StatusWriter(uv_loop_t* loop, std::string path) : m_loop(loop), m_path(std::move(path)) {}
  StatusWriter(const StatusWriter&) = delete;
  StatusWriter& operator=(const StatusWriter&) = delete;

  void post(std::string text);

 private:
  void start();
  static void work(uv_work_t* w);
  static void after(uv_work_t* w, int status);

  uv_loop_t* m_loop;
  std::string m_path;
  uv_work_t m_work{};
  bool m_in_flight = false;
  std::string m_writing;               // read by the worker thread while m_in_flight
  std::optional<std::string> m_next;   // posted while a write was in flight
};

}  // namespace fr::front
