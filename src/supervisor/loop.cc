#include "supervisor/loop.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

namespace fr::supervisor {

void guard(const char* where, const std::function<void()>& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    spdlog::error("{}: unexpected exception: {}", where, e.what());
  } catch (...) {
    spdlog::error("{}: unexpected exception", where);
  }
}

Loop::Loop() {
  uv_loop_init(&m_loop);
  m_loop.data = this;  // run_work's completions look for m_closed here
  uv_async_init(&m_loop, &m_async, &Loop::on_async);
  m_async.data = this;
}

Loop::~Loop() {
  m_closed = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&m_async), nullptr);
  // Let every pending close callback run, then close the loop. A stop() called while the loop was not
  // running (an event raised from outside a callback) makes the next uv_run return before it runs the
  // close callbacks, and uv_loop_close then fails with UV_EBUSY, leaking every handle: run it again.
  for (int i = 0; i < 4; ++i) {
    uv_run(&m_loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&m_loop) == 0) return;
  }
}

void Loop::post(std::function<void()> fn) {
  {
    std::lock_guard lk(m_mu);
    m_queue.push_back(std::move(fn));
  }
  uv_async_send(&m_async);
}

void Loop::on_async(uv_async_t* a) {
  auto* self = static_cast<Loop*>(a->data);
  std::deque<std::function<void()>> q;
  {
    std::lock_guard lk(self->m_mu);
    q.swap(self->m_queue);
  }
  for (auto& f : q) guard("posted task", f);
}

// ---- Timer ----

struct Timer::H {
  uv_timer_t t{};
  std::function<void()> fn;
};

Timer::Timer(Loop& loop) : m_h(new H) {
  uv_timer_init(loop.get(), &m_h->t);
  m_h->t.data = m_h;
}

Timer::~Timer() {
  uv_timer_stop(&m_h->t);
  uv_close(reinterpret_cast<uv_handle_t*>(&m_h->t), [](uv_handle_t* h) { delete static_cast<H*>(h->data); });
}

void Timer::start(double after_s, std::function<void()> fn, double repeat_s) {
  m_h->fn = std::move(fn);
  auto ms = [](double s) { return static_cast<uint64_t>(s > 0 ? s * 1000 + 0.5 : 0); };
  uv_timer_start(&m_h->t, [](uv_timer_t* t) {
    auto* h = static_cast<H*>(t->data);
    auto callback = h->fn;  // the callback may restart or destroy the timer
    guard("timer", callback);
  }, ms(after_s), ms(repeat_s));
}

void Timer::stop() { uv_timer_stop(&m_h->t); }
bool Timer::active() const { return uv_is_active(reinterpret_cast<const uv_handle_t*>(&m_h->t)) != 0; }

// ---- Signal ----

struct Signal::H {
  uv_signal_t s{};
  std::function<void()> fn;
};

Signal::Signal(Loop& loop, int signum, std::function<void()> fn) : m_h(new H) {
  m_h->fn = std::move(fn);
  uv_signal_init(loop.get(), &m_h->s);
  m_h->s.data = m_h;
  uv_signal_start(&m_h->s, [](uv_signal_t* s, int) { guard("signal", static_cast<H*>(s->data)->fn); }, signum);
}

Signal::~Signal() {
  uv_signal_stop(&m_h->s);
  uv_close(reinterpret_cast<uv_handle_t*>(&m_h->s), [](uv_handle_t* h) { delete static_cast<H*>(h->data); });
}

// ---- LineReader ----

struct LineReader::H {
  uv_poll_t p{};
  int fd;
  std::string buf;
  std::function<void(const std::string&)> on_line;
  std::function<void()> on_eof;
  bool done = false;
};

LineReader::LineReader(Loop& loop, int fd, std::function<void(const std::string&)> on_line, std::function<void()> on_eof)
    : m_h(new H) {
  m_h->fd = fd;
  m_h->on_line = std::move(on_line);
  m_h->on_eof = std::move(on_eof);
  uv_poll_init(loop.get(), &m_h->p, fd);
  m_h->p.data = m_h;
  uv_poll_start(&m_h->p, UV_READABLE | UV_DISCONNECT, [](uv_poll_t* p, int, int) { pump(static_cast<H*>(p->data)); });
}

// Reads until the pipe is empty (EAGAIN) or at its end, handing each complete line on. At the end, what
// is left of a last line without its newline is handed on too, and the reader stops.
void LineReader::pump(H* h) {
  if (h->done) return;
  char chunk[16384];
  for (;;) {
    ssize_t n = ::read(h->fd, chunk, sizeof chunk);
    if (n > 0) {
      h->buf.append(chunk, static_cast<size_t>(n));
      size_t pos;
      while ((pos = h->buf.find('\n')) != std::string::npos) {
        std::string line = h->buf.substr(0, pos);
        h->buf.erase(0, pos + 1);
        guard("output line", [&] { h->on_line(line); });
      }
      if (h->buf.size() > 65536) {
        guard("output line", [&] { h->on_line(h->buf); });
        h->buf.clear();
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // EOF or error: flush what is left.
    if (!h->buf.empty()) guard("output line", [&] { h->on_line(h->buf); });
    h->buf.clear();
    uv_poll_stop(&h->p);
    h->done = true;
    guard("output eof", h->on_eof);
    return;
  }
}

// The child is reaped: a last line without its newline is its last word, handed on now (a worker that
// still holds the pipe would otherwise hold it back until EOF); what a worker writes later is a new line.
void LineReader::drain() {
  pump(m_h);
  if (m_h->done || m_h->buf.empty()) return;
  std::string rest;
  rest.swap(m_h->buf);
  guard("output line", [&] { m_h->on_line(rest); });
}

LineReader::~LineReader() {
  uv_poll_stop(&m_h->p);
  uv_close(reinterpret_cast<uv_handle_t*>(&m_h->p), [](uv_handle_t* h) { delete static_cast<H*>(h->data); });
}

// ---- work ----

namespace {
struct Work {
  uv_work_t req{};
  std::function<void()> work, done;
};
}  // namespace

void run_work(Loop& loop, std::function<void()> work, std::function<void()> done) {
  auto* w = new Work;
  w->work = std::move(work);
  w->done = std::move(done);
  w->req.data = w;
  uv_queue_work(
      loop.get(), &w->req, [](uv_work_t* r) { guard("pool work", static_cast<Work*>(r->data)->work); },
      [](uv_work_t* r, int) {
        auto* item = static_cast<Work*>(r->data);
        // Work still in the pool when the Loop is destroyed completes in its destructor's last run, after
        // its owner (the Supervisor, a daemon set) is gone: `done` would act on freed memory.
        if (static_cast<Loop*>(r->loop->data)->closed())
          spdlog::info("a thread-pool result that came back after its loop ended is dropped");
        else
          guard("pool work done", item->done);
        delete item;
      });
}

}  // namespace fr::supervisor
