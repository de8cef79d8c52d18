// The engine side of KV arenas (fastrestart/arena.h): a reserved range on this process's device, and the
// arena_lease request to the daemon serving that device (docs/protocol.md, "arena_lease").
#include "fastrestart/arena.h"

#include <chrono>
#include <cstdio>

#include "daemon_client/daemon_client.h"
#include "protocol/arena.h"
#include "protocol/daemon_status.h"
#include "engine_loader/device.h"

namespace fastrestart {
namespace {

using fr::UniqueFd;
using fr::loader::ArenaRange;
using fr::DaemonClient;
using fr::loader::DeviceApi;

class ArenaImpl final : public Arena {
 public:
  ArenaImpl(ArenaOptions o, std::unique_ptr<DeviceApi> dev, std::unique_ptr<ArenaRange> range)
      : m_opts(std::move(o)), m_dev(std::move(dev)), m_range(std::move(range)) {}
  ~ArenaImpl() override { m_range.reset(); }  // before the device, which holds the CUDA context

  void* base() const override { return m_range->base(); }
  uint64_t bytes() const override { return m_range->size(); }
  bool leased() const override { return m_range->swapped(); }
  uint64_t placeholder_bytes() const override { return m_range->placeholder_bytes(); }
  bool unmapped() const override { return m_range->unmapped(); }
  const ArenaOptions& options() const override { return m_opts; }
  std::string daemon_socket() const override { return fr::loader::daemon_socket(*m_dev, m_opts.socket_dir); }
  std::optional<ArenaLease> last_lease() const override { return m_lease; }
  Status unmap() override {
    if (auto s = m_range->unmap(); !s.ok())
      return Error{s.error().code, "arena '" + m_opts.name + "': " + s.error().message};
    return {};
  }

  Result<ArenaLease> swap_in() override {
    if (m_range->swapped()) return Error{Errc::kBusy, "arena '" + m_opts.name + "' is already leased and mapped"};
    const auto t0 = std::chrono::steady_clock::now();
    const std::string path = daemon_socket();
    auto fail = [&](const Error& e) { return Error{e.code, "arena '" + m_opts.name + "' from " + path + ": " + e.message}; };
    auto c = DaemonClient::connect(path, m_opts.connect_timeout_s, "engine_loader " FASTRESTART_VERSION);
    if (!c.ok()) return fail(c.error());
    if (c->gpu_uuid() != m_dev->gpu_uuid())
      return fail(Error{Errc::kInvalidArgument, "the daemon serves " + c->gpu_uuid() + ", this range is on " + m_dev->gpu_uuid()});
    // The daemon rounds to the same page or granule on this device: ask for the whole range.
    UniqueFd fd;
    auto r = c->call(fr::proto::to_json(fr::proto::ArenaLeaseRequest{m_opts.name, m_range->size(), m_opts.wait_s}),
                     m_opts.wait_s + 30, &fd);
    if (!r.ok()) return fail(r.error());
    auto reply = fr::proto::arena_lease_reply_from_json(*r);
    if (!reply.ok()) return fail(reply.error());
    if (!fd) return fail(Error{Errc::kProtocol, "arena_lease granted without a descriptor"});
    ArenaLease l;
    l.created = reply->created;
    l.resized = reply->resized;
    l.previous_bytes = reply->previous_bytes.value_or(0);
    l.previous_holder_pid = reply->previous_holder_pid.value_or(-1);
    l.waited_s = reply->waited_s;
    l.leases = reply->leases;
    l.generation = reply->generation;
    if (auto s = m_range->swap_in(std::move(fd), reply->pool_bytes); !s.ok()) return fail(s.error());
    l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m_lease = l;
    return l;
  }

 private:
  ArenaOptions m_opts;
  std::unique_ptr<DeviceApi> m_dev;
  std::unique_ptr<ArenaRange> m_range;
  std::optional<ArenaLease> m_lease;
};

}  // namespace

Result<std::unique_ptr<Arena>> reserve_arena(const ArenaOptions& o) {
  if (o.bytes == 0) return Error{Errc::kInvalidArgument, "ArenaOptions.bytes: 0"};
  if (auto s = fr::proto::check_arena_name(o.name, "ArenaOptions.name"); !s.ok()) return s.error();
  if (auto s = fr::proto::check_arena_wait(o.wait_s, "ArenaOptions.wait_s"); !s.ok()) return s.error();
  FR_ASSIGN(auto dev, fr::loader::open_device(o.device));
  FR_ASSIGN(auto range, dev->reserve_arena(o.bytes));
  return std::unique_ptr<Arena>(new ArenaImpl(o, std::move(dev), std::move(range)));
}

Result<std::optional<ArenaInfo>> find_arena(const ArenaOptions& o) {
  FR_ASSIGN(auto dev, fr::loader::open_device(o.device));
  const std::string path = fr::loader::daemon_socket(*dev, o.socket_dir);
  auto fail = [&](const Error& e) { return Error{e.code, "arena '" + o.name + "' at " + path + ": " + e.message}; };
  auto c = DaemonClient::connect(path, o.connect_timeout_s, "engine_loader " FASTRESTART_VERSION);
  if (!c.ok()) return fail(c.error());
  auto r = c->call(fr::proto::json{{"op", "status"}}, o.connect_timeout_s + 30);
  if (!r.ok()) return fail(r.error());
  auto st = fr::proto::daemon_status_from_json(*r);
  if (!st.ok()) return fail(Error{Errc::kProtocol, "malformed status reply: " + st.error().message});
  for (const auto& a : st->arenas) {
    if (a.name != o.name) continue;
    ArenaInfo info;
    info.bytes = a.bytes;
    info.holder_pid = a.holder_pid.value_or(-1);
    info.leases = a.leases;
    info.waiting = a.waiting;
    return std::optional<ArenaInfo>(info);
  }
  return std::optional<ArenaInfo>();
}

std::string arena_line(const Arena& arena) {
  const auto l = arena.last_lease();
  if (!l) return {};
  char numbers[160];
  std::snprintf(numbers, sizeof numbers, " bytes=%llu waited_s=%.6f swap_s=%.6f generation=%llu",
                static_cast<unsigned long long>(arena.bytes()), l->waited_s, l->seconds,
                static_cast<unsigned long long>(l->generation));
  return "fastrestart-arena: leased name=" + arena.options().name + numbers;
}

std::string arena_fallback_line(std::string_view reason) {
  constexpr size_t kMaxReason = 512;  // fastrestartd keeps at most this much of it (supervisor/arena_line.h)
  std::string one;  // one line: whitespace runs as one space, none at either end
  for (char c : reason) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
      if (!one.empty() && one.back() != ' ') one += ' ';
    } else {
      one += c;
    }
  }
  if (!one.empty() && one.back() == ' ') one.pop_back();
  if (one.size() > kMaxReason) {
    one.resize(kMaxReason);
    while (!one.empty() && (static_cast<unsigned char>(one.back()) & 0xC0) == 0x80) one.pop_back();  // continuation
    if (!one.empty() && static_cast<unsigned char>(one.back()) >= 0xC0) one.pop_back();  // a cut lead byte
  }
  std::string line = "fastrestart-arena: fallback reason=\"";
  for (char c : one) {
    if (c == '"' || c == '\\') line += '\\';
    line += c;
  }
  return line + '"';
}

Result<std::unique_ptr<Arena>> lease_arena(const ArenaOptions& o, ArenaLease* lease) {
  FR_ASSIGN(auto a, reserve_arena(o));
  FR_ASSIGN(ArenaLease l, a->swap_in());
  if (lease) *lease = l;
  return a;
}

}  // namespace fastrestart
