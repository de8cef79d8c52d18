#include "supervisor/notifier.h"

#include <systemd/sd-daemon.h>

#include "common/secrets.h"

namespace fr::supervisor {
namespace {

class SdNotifier final : public Notifier {
 public:
  void notify(const std::string& state) override { sd_notify(0, state.c_str()); }
};

class ScrubbingNotifier final : public Notifier {
 public:
  explicit ScrubbingNotifier(std::unique_ptr<Notifier> inner) : m_inner(std::move(inner)) {}
  void notify(const std::string& state) override {
    if (m_inner) m_inner->notify(process_scrubber().scrub(state));
  }

 private:
  std::unique_ptr<Notifier> m_inner;
};

}  // namespace

std::unique_ptr<Notifier> make_sd_notifier() { return std::make_unique<SdNotifier>(); }

std::unique_ptr<Notifier> make_scrubbing_notifier(std::unique_ptr<Notifier> inner) {
  return std::make_unique<ScrubbingNotifier>(std::move(inner));
}

}  // namespace fr::supervisor
