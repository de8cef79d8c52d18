#include "front/status_writer.h"

#include "common/atomic_file.h"

namespace fr::front {

void StatusWriter::post(std::string text) {
  if (m_path.empty()) return;
  m_next = std::move(text);
  if (!m_in_flight) start();
}

void StatusWriter::start() {
  m_writing = std::move(*m_next);
  m_next.reset();
  m_in_flight = true;
  m_work.data = this;
  if (uv_queue_work(m_loop, &m_work, work, after) != 0) {
    // The thread pool refused (it does not, short of a loop being closed): write here instead.
    work(&m_work);
    m_in_flight = false;
  }
}

// On a thread-pool thread: touches only m_path and m_writing, which the loop leaves alone while in flight.
void StatusWriter::work(uv_work_t* w) {
  auto* self = static_cast<StatusWriter*>(w->data);
  // A failed write (a full disk, a removed directory) leaves the previous status; the next change retries.
  (void)write_file_replace(self->m_path, self->m_writing, 0644);
}

void StatusWriter::after(uv_work_t* w, int) {
  auto* self = static_cast<StatusWriter*>(w->data);
  self->m_in_flight = false;
  if (self->m_next) self->start();
}

}  // namespace fr::front
