// The daemon kinds: weights.daemon picks one (daemon_set.h). A new kind is one file and one line here.
#include "supervisor/daemons/daemon_set.h"

#include "supervisor/daemons/native.h"

namespace fr::supervisor {

std::unique_ptr<DaemonSet> make_daemon_set(DaemonHost& host) {
  const WeightsConfig& w = host.config().weights;
  if (w.mode == WeightsMode::kOff) return make_no_daemons(host, "weights.mode is off");
  switch (w.daemon) {
    case DaemonKind::kNative: return make_native_daemons(host);
    case DaemonKind::kVllmPreload: return make_vllm_preload(host);
    case DaemonKind::kNone: break;
  }
  return make_no_daemons(host, "weights.daemon is none");
}

std::vector<std::string> claimed_daemon_sockets(const Config& c, GpuProbe& gpus) {
  std::vector<std::string> sockets;
  if (c.weights.mode != WeightsMode::kOff && c.weights.daemon == DaemonKind::kNative)
    for (const auto& d : native_daemon_layout(c, gpus)) sockets.push_back(d.socket);
  return sockets;
}

}  // namespace fr::supervisor
