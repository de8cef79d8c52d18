// How fastrestartd tells its service manager about itself: READY=1, STATUS=, EXTEND_TIMEOUT_USEC=,
// WATCHDOG=1 (sd_notify(3)). An interface so tests can read what it says.
#pragma once

#include <memory>
#include <string>

namespace fr::supervisor {

class Notifier {
 public:
  virtual ~Notifier() = default;
  virtual void notify(const std::string& state) = 0;  // "READY=1\nSTATUS=..."
};
std::unique_ptr<Notifier> make_sd_notifier();  // sd_notify(3); a no-op without NOTIFY_SOCKET

// STATUS= is read by anyone who may run systemctl status: `inner` (may be null: says nothing) is told
// every state with every known secret scrubbed first (common/secrets.h).
std::unique_ptr<Notifier> make_scrubbing_notifier(std::unique_ptr<Notifier> inner);

}  // namespace fr::supervisor
