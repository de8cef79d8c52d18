// The fastrestart side of loading, through engine_loader's public API (fastrestart/engine_loader.h).
#include <memory>

#include <spdlog/spdlog.h>

#include "fastrestart/arena.h"
#include "fastrestart/engine_loader.h"
#include "fastrestart/listen_socket.h"
#include "fastrestart/standby.h"
#include "tinyengine/loader.h"

namespace fr::te {

struct PublishKey {
  fastrestart::IdentifiedKey key;
};

namespace {

fastrestart::Options to_options(const LoadOptions& o) {
  return {.mode = o.zero_copy ? fastrestart::Mode::kZeroCopy : fastrestart::Mode::kCopy, .fallback = o.fallback,
          .connect_timeout_s = o.connect_timeout_s, .state_timeout_s = o.state_timeout_s, .verify = o.verify,
          .socket_dir = o.socket_dir, .device = o.device};
}

fastrestart::Key to_key(const CheckpointInfo& info, const TpPlan& tp) { return {info.files, key_config(info, tp)}; }

}  // namespace

namespace {

Result<AttachOutcome> attach_key(fastrestart::IdentifiedKey key, const LoadOptions& options) {
  FR_ASSIGN(auto r, fastrestart::attach(key, to_options(options)));
  AttachOutcome out;
  out.key = std::make_shared<const PublishKey>(PublishKey{std::move(key)});
  out.hit = r.hit;
  out.reason = r.reason;
  out.differs = r.differs;
  const auto& t = r.timings;
  out.timings = {{"connect_s", t.connect_s}, {"request_s", t.request_s}, {"map_s", t.map_s},
                 {"copy_s", t.copy_s},       {"verify_s", t.verify_s},   {"total_s", t.total_s}};
  if (!r.hit) return out;
  if (!r.weights) return make_error(Errc::kInternal, "attach hit without weights");
  out.on_cuda = r.weights->on_cuda();
  out.mode = r.weights->mode() == fastrestart::Mode::kZeroCopy ? "zero_copy" : "copy";
  out.fingerprint = r.weights->fingerprint();
  out.digest = r.weights->digest();
  for (const auto& tensor : r.weights->tensors()) {
    auto dt = dtype_from_name(tensor.dtype);
    if (!dt) return make_error(Errc::kCorrupt, "attached tensor '" + tensor.name + "' has dtype " + tensor.dtype);
    out.set.tensors[tensor.name] = TensorView{*dt, tensor.shape, tensor.data, tensor.nbytes};
  }
  out.set.owner = r.weights;  // keeps the mapping (or copy) alive as long as the model
  return out;
}

}  // namespace

Result<AttachOutcome> fastrestart_attach(const CheckpointInfo& info, const LoadOptions& options) {
  // Identified here, before load_from_disk reads a byte, by the descriptors it reads through: the key a
  // publish after a miss goes under is what the engine read, whatever the paths lead to by then.
  FR_ASSIGN(auto key, fastrestart::identify_fds(to_key(info, options.tp), info.fd_numbers()));
  return attach_key(std::move(key), options);
}

Result<AttachOutcome> fastrestart_attach_published(const PublishKey* key, const LoadOptions& options) {
  if (!key) return make_error(Errc::kInvalidArgument, "adopt: no key was published");
  return attach_key(key->key, options);
}

Result<PublishOutcome> fastrestart_publish(const PublishKey* key, const CheckpointInfo& info, const TensorSet& set,
                                           const LoadOptions& options) {
  if (!key) return make_error(Errc::kInvalidArgument, "publish: no key was identified before the load");
  std::vector<fastrestart::PublishTensor> tensors;
  // Publish in the checkpoint's own order, so a pool's layout follows the files.
  // A tensor-parallel rank's set holds its shard only: the tensors it lacks are skipped.
  for (const auto& h : info.headers)
    for (const auto& t : h.tensors) {
      auto it = set.tensors.find(t.name);
      if (it == set.tensors.end()) continue;
      const auto& v = it->second;
      tensors.push_back({t.name, dtype_name(v.dtype), v.shape, v.data});
    }
  FR_ASSIGN(auto r, fastrestart::publish(key->key, tensors, to_options(options)));
  return PublishOutcome{r.fingerprint, r.digest, r.bytes};
}

Result<std::string> daemon_socket_of(const LoadOptions& options) {
  return fastrestart::daemon_socket_path(options.device, options.socket_dir);
}

Result<bool> standby_gate(const std::string& level) {
  FR_ASSIGN(const auto r, fastrestart::standby_gate(level));
  return r == fastrestart::GateResult::kReleased;
}

bool is_standby() { return fastrestart::is_standby(); }

Result<KvArenaLease> lease_kv_arena(uint64_t bytes, double wait_s, const LoadOptions& options) {
  fastrestart::ArenaOptions a;
  a.name = "kv";
  a.bytes = bytes;
  a.wait_s = wait_s;
  a.connect_timeout_s = options.connect_timeout_s;
  a.socket_dir = options.socket_dir;
  a.device = options.device;
  fastrestart::ArenaLease lease;
  FR_ASSIGN(auto arena, fastrestart::lease_arena(a, &lease));
  KvArenaLease out;
  out.bytes = arena->bytes();  // as leased: the range, rounded up to the page or granule (the daemon's `bytes`)
  out.generation = lease.generation;
  out.base = arena->base();
  out.host = a.device == "host" || a.device.rfind("host:", 0) == 0;
  out.arena = std::shared_ptr<fastrestart::Arena>(std::move(arena));
  return out;
}

uint64_t kv_arena_generation(const KvArenaLease& lease) {
  if (lease.arena)
    if (auto l = std::static_pointer_cast<fastrestart::Arena>(lease.arena)->last_lease()) return l->generation;
  return lease.generation;
}

std::string kv_arena_line(const KvArenaLease& lease) {
  return lease.arena ? fastrestart::arena_line(*std::static_pointer_cast<fastrestart::Arena>(lease.arena)) : std::string();
}

std::string kv_arena_fallback_line(const std::string& reason) { return fastrestart::arena_fallback_line(reason); }

Result<InheritedSockets> inherited_listen_sockets() {
  auto r = fastrestart::inherited_listen_sockets();
  if (!r) return r.error();
  return InheritedSockets{r->serve, r->probe};
}

Result<std::shared_ptr<void>> start_snapshot_agent(const LoadedModel& m, const KvArenaLease* kv_arena,
                                                   std::function<Status()> quiesce, std::function<Status()> resume) {
  std::vector<std::shared_ptr<fastrestart::Weights>> weights;
  // set.owner is the attached Weights whenever the path is "attach" (fastrestart_attach put it there).
  if ((m.report.path == "attach" || m.report.adopted) && m.report.mode == "zero_copy" && m.set.owner)
    weights.push_back(std::static_pointer_cast<fastrestart::Weights>(m.set.owner));
  std::vector<std::shared_ptr<fastrestart::Arena>> arenas;
  if (kv_arena && kv_arena->arena) {
    auto arena = std::static_pointer_cast<fastrestart::Arena>(kv_arena->arena);
    arenas.push_back(arena);
    // A restored engine is another process holding a new lease: fastrestartd's record of it follows this
    // line (docs/supervisor.md, "The engine's arena line").
    resume = [arena, inner = std::move(resume)]() -> Status {
      if (const std::string line = fastrestart::arena_line(*arena); !line.empty()) spdlog::info("{}", line);
      return inner ? inner() : Status{};
    };
  }
  FR_ASSIGN(auto agent, fastrestart::SnapshotAgent::start(std::move(weights), {std::move(quiesce), std::move(resume)}, "",
                                                          std::move(arenas)));
  return std::shared_ptr<void>(std::move(agent));
}

}  // namespace fr::te
