// A thin C++ layer over libuv: timers, signals, line readers and a cross-thread post, each an owner
// whose destructor closes its handle. Callbacks never throw (they are noexcept lambdas' callers): an
// exception escaping into libuv would be undefined behaviour, so `guard` logs and swallows it.
#pragma once

#include <uv.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace fr::supervisor {

// Runs fn, logging (never propagating) an exception.
void guard(const char* where, const std::function<void()>& fn) noexcept;

class Loop {
 public:
  Loop();
  ~Loop();
  uv_loop_t* get() { return &m_loop; }
  void run() { uv_run(&m_loop, UV_RUN_DEFAULT); }
  void stop() { uv_stop(&m_loop); }
  double now_s() const { return static_cast<double>(uv_hrtime()) / 1e9; }

  // Thread-safe: runs fn on the loop thread soon.
  void post(std::function<void()> fn);
  // The destructor has begun: what still completes in its last run is dropped (run_work).
  bool closed() const { return m_closed; }

 private:
  static void on_async(uv_async_t* a);
  // Set by the destructor: posted tasks and thread-pool completions that arrive after it are dropped, not
  // run (their owners, destroyed before the Loop they were built on, are gone).
  bool m_closed = false;
  uv_loop_t m_loop{};
  uv_async_t m_async{};
  std::mutex m_mu;
  std::deque<std::function<void()>> m_queue;
};

// A one-shot or repeating timer. start() replaces any pending schedule.
class Timer {
 public:
  explicit Timer(Loop& loop);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void start(double after_s, std::function<void()> fn, double repeat_s = 0);
  void stop();
  bool active() const;

 private:
  struct H;
  H* m_h;  // closed asynchronously: owned by libuv until its close callback
};

class Signal {
 public:
  Signal(Loop& loop, int signum, std::function<void()> fn);
  ~Signal();
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;

 private:
  struct H;
  H* m_h;
};

// Reads a non-blocking fd until EOF, calling on_line for each line (without the newline; overlong lines
// are cut at 64 KiB) and on_eof once.
class LineReader {
 public:
  LineReader(Loop& loop, int fd, std::function<void(const std::string&)> on_line, std::function<void()> on_eof);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Reads now, without waiting for the loop, whatever the pipe holds, and hands on each line, a last one
  // without its newline included. Called when a child is reaped: SIGCHLD can be handled before the poll
  // has read the child's last lines (its dying words, which classify its exit), and a worker that keeps
  // the pipe open means no EOF is coming to flush them.
  void drain();

 private:
  struct H;
  static void pump(H* h);
  H* m_h;
};

// Runs `work` on libuv's thread pool and `done` on the loop thread with its result; `done` is dropped
// when the Loop is being destroyed by then (the work itself always runs to its end).
template <typename T>
void run_in_pool(Loop& loop, std::function<T()> work, std::function<void(T)> done);

void run_work(Loop& loop, std::function<void()> work, std::function<void()> done);

template <typename T>
void run_in_pool(Loop& loop, std::function<T()> work, std::function<void(T)> done) {
  auto result = std::make_shared<std::unique_ptr<T>>();
  run_work(
      loop, [result, work = std::move(work)] { *result = std::make_unique<T>(work()); },
      [result, done = std::move(done)] { done(std::move(**result)); });
}

}  // namespace fr::supervisor
