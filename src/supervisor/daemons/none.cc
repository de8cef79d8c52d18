// No weight daemons: weights.mode = "off" or weights.daemon = "none". Every engine loads from disk; the
// start paths that need daemons are skipped with `why`.
#include "supervisor/daemons/daemon_set.h"

namespace fr::supervisor {
namespace {

class NoDaemons final : public DaemonSet {
 public:
  NoDaemons(DaemonHost& host, std::string why) : m_host(host), m_why(std::move(why)) {}
  const char* kind() const override { return "none"; }
  void start() override { m_host.loop().post([this] { m_host.raise(Event::kDaemonsReady); }); }
  void stop() override { m_host.loop().post([this] { m_host.raise(Event::kDaemonsStopped); }); }
  bool stopping() const override { return false; }
  bool on_exit(pid_t, int) override { return false; }
  void close() override {}
  uint64_t held_bytes(const std::string&) const override { return 0; }
  void add_known_pids(std::set<pid_t>&) const override {}
  std::vector<status::DaemonRowStatus> rows() const override { return {}; }
  std::optional<StartRefusal> refusal() const override { return StartRefusal{"no_daemon", m_why}; }
  bool holds_old_weights() const override { return false; }

 private:
  DaemonHost& m_host;
  std::string m_why;
};

}  // namespace

std::unique_ptr<DaemonSet> make_no_daemons(DaemonHost& host, std::string why) {
  return std::make_unique<NoDaemons>(host, std::move(why));
}

}  // namespace fr::supervisor
