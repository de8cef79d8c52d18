// Built when the engine_loader library is not part of this build: --load-format fastrestart reports that.
#include "tinyengine/loader.h"

namespace fr::te {

Result<AttachOutcome> fastrestart_attach(const CheckpointInfo&, const LoadOptions& options) {
  if (!options.fallback) return make_error(Errc::kUnsupported, "built without engine_loader");
  AttachOutcome out;
  out.reason = "built without engine_loader";
  return out;
}

Result<PublishOutcome> fastrestart_publish(const PublishKey*, const CheckpointInfo&, const TensorSet&, const LoadOptions&) {
  return make_error(Errc::kUnsupported, "built without engine_loader");
}

Result<AttachOutcome> fastrestart_attach_published(const PublishKey*, const LoadOptions&) {
  return make_error(Errc::kUnsupported, "built without engine_loader");
}

Result<std::string> daemon_socket_of(const LoadOptions&) {
  return make_error(Errc::kUnsupported, "built without engine_loader");
}

Result<KvArenaLease> lease_kv_arena(uint64_t, double, const LoadOptions&) {
  return make_error(Errc::kUnsupported, "built without engine_loader");
}

uint64_t kv_arena_generation(const KvArenaLease& lease) { return lease.generation; }
std::string kv_arena_line(const KvArenaLease&) { return {}; }
std::string kv_arena_fallback_line(const std::string&) { return {}; }
Result<bool> standby_gate(const std::string&) { return false; }
bool is_standby() { return false; }
Result<InheritedSockets> inherited_listen_sockets() { return InheritedSockets{}; }

Result<std::shared_ptr<void>> start_snapshot_agent(const LoadedModel&, const KvArenaLease*, std::function<Status()>,
                                                   std::function<Status()>) {
  return std::shared_ptr<void>();
}

}  // namespace fr::te
