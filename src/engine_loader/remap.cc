#include "engine_loader/remap.h"

#include <chrono>

#include "common/digest.h"
#include "daemon_client/daemon_client.h"

namespace fr::loader {
namespace {

using SteadyClock = std::chrono::steady_clock;

double since(SteadyClock::time_point t) { return std::chrono::duration<double>(SteadyClock::now() - t).count(); }

fastrestart::MappingInfo info_of(const Attached& a) {
  fastrestart::MappingInfo i;
  i.fingerprint = a.fingerprint;
  i.digest = a.digest;
  i.device = a.options.device;
  i.daemon_socket = daemon_socket(*a.device, a.options.socket_dir);
  i.key_json = proto::to_json(a.key).dump();
  i.base = reinterpret_cast<uintptr_t>(a.pool->base());
  i.bytes = a.pool->size();
  i.mapped = !a.pool->released();
  return i;
}

}  // namespace

Result<fastrestart::MappingInfo> release_weights(const Attached& a) {
  if (a.mode != fastrestart::Mode::kZeroCopy)
    return make_error(Errc::kUnsupported, "weights attached in copy mode hold no imported memory to release");
  const auto t0 = SteadyClock::now();
  FR_TRY(a.pool->release());
  auto i = info_of(a);
  i.seconds = since(t0);
  return i;
}

Result<fastrestart::MappingInfo> reattach_weights(const Attached& a) {
  if (a.mode != fastrestart::Mode::kZeroCopy)
    return make_error(Errc::kUnsupported, "weights attached in copy mode were never released");
  const auto t0 = SteadyClock::now();
  if (!a.pool->released()) {
    auto i = info_of(a);
    i.seconds = since(t0);
    return i;
  }
  const std::string path = daemon_socket(*a.device, a.options.socket_dir);
  auto fail = [&](const std::string& why) { return make_error(Errc::kNotFound, "re-attach from " + path + ": " + why); };
  auto c = DaemonClient::connect(path, a.options.connect_timeout_s, "engine_loader " FASTRESTART_VERSION);
  if (!c.ok()) return fail(c.error().message);
  if (c->gpu_uuid() != a.device->gpu_uuid())
    return fail("the daemon serves " + c->gpu_uuid() + ", this engine runs on " + a.device->gpu_uuid());
  proto::json req{{"op", "attach"}, {"key", proto::to_json(a.key)}, {"wait_s", a.options.state_timeout_s}, {"mode", "zero_copy"}};
  UniqueFd fd;
  auto reply = c->call(req, a.options.state_timeout_s + 30, &fd);
  if (!reply.ok()) return fail(reply.error().message);
  if (reply->value("result", "") != "hit") return fail("the daemon no longer holds the weights: " + reply->value("reason", std::string("miss")));
  auto m = proto::manifest_from_json(reply->value("manifest", proto::json()), "manifest");
  if (!m.ok()) return fail(m.error().message);
  if (!fd) return fail("hit without a pool descriptor");
  const std::string dg = m->digest ? digest_hex(*m->digest) : "";
  if (m->fingerprint != a.fingerprint) return fail("fingerprint " + m->fingerprint + ", the released weights were " + a.fingerprint);
  if (dg != a.digest) return fail("digest " + dg + ", the released weights had " + a.digest);
  if (m->pool_bytes != a.pool->size())
    return fail("pool of " + std::to_string(m->pool_bytes) + " bytes, the released one had " + std::to_string(a.pool->size()));
  if (m->tensors.size() != a.tensors.size()) return fail("another tensor count");
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    const auto& t = a.tensors[i];
    const auto off = static_cast<uint64_t>(static_cast<std::byte*>(t.data) - a.pool->base());
    if (m->tensors[i].spec.name != t.name || m->tensors[i].offset != off || m->tensors[i].nbytes != t.nbytes)
      return fail("tensor " + std::to_string(i) + " ('" + t.name + "') moved in the pool");
  }
  FR_TRY(a.pool->remap(std::move(fd)));
  auto i = info_of(a);
  i.seconds = since(t0);
  return i;
}

}  // namespace fr::loader
