// attach(): the warm path of an engine start. Contract: fastrestart/engine_loader.h.
#include <chrono>

#include "common/digest.h"
#include "common/host_device.h"
#include "common/private_dir.h"
#include "daemon_client/daemon_client.h"
#include "engine_loader/device.h"
#include "engine_loader/key.h"
#include "engine_loader/remap.h"

namespace fastrestart {
namespace {

using fr::DaemonClient;
using fr::loader::DeviceApi;
using fr::loader::MappedPool;
using SteadyClock = std::chrono::steady_clock;

double since(SteadyClock::time_point t) { return std::chrono::duration<double>(SteadyClock::now() - t).count(); }

class AttachedWeights final : public Weights {
 public:
  // Member order matters: the pool is released before the device (CUDA context) it lives on.
  std::shared_ptr<DeviceApi> device;
  std::unique_ptr<MappedPool> pool;
  std::vector<Tensor> list;
  Mode m = Mode::kZeroCopy;
  std::string fp, dg;
  fr::proto::Key key;  // what reattach() asks for again
  Options opts;

  ~AttachedWeights() override { pool.reset(); }
  const std::vector<Tensor>& tensors() const override { return list; }
  const Tensor* find(const std::string& name) const override {
    for (const auto& t : list)
      if (t.name == name) return &t;
    return nullptr;
  }
  Mode mode() const override { return m; }
  bool on_cuda() const override { return device->is_cuda(); }
  uint64_t pool_bytes() const override { return pool->size(); }
  std::string fingerprint() const override { return fp; }
  std::string digest() const override { return dg; }
  Result<MappingInfo> release_mapping() override { return fr::loader::release_weights(as_attached()); }
  Result<MappingInfo> reattach() override { return fr::loader::reattach_weights(as_attached()); }

 private:
  fr::loader::Attached as_attached() { return {device, pool.get(), list, m, fp, dg, key, opts}; }
};

Result<AttachResult> attach_strict(const fr::proto::Key& pkey, const Options& o, SteadyClock::time_point t0) {
  AttachResult r;
  FR_ASSIGN(std::shared_ptr<DeviceApi> dev, fr::loader::open_device(o.device));
  const std::string path = fr::loader::daemon_socket(*dev, o.socket_dir);
  FR_ASSIGN(DaemonClient c, DaemonClient::connect(path, o.connect_timeout_s, "engine_loader " FASTRESTART_VERSION));
  r.daemon_gpu_uuid = c.gpu_uuid();
  r.timings.connect_s = since(t0);
  if (c.gpu_uuid() != dev->gpu_uuid())
    return Error{Errc::kInvalidArgument, "the daemon at " + path + " serves " + c.gpu_uuid() + ", this engine runs on " + dev->gpu_uuid()};

  const auto t1 = SteadyClock::now();
  fr::proto::json req{{"op", "attach"}, {"key", fr::proto::to_json(pkey)}, {"wait_s", o.state_timeout_s},
                      {"mode", o.mode == Mode::kZeroCopy ? "zero_copy" : "copy"}};
  fr::UniqueFd fd;
  FR_ASSIGN(auto reply, c.call(req, o.state_timeout_s + 30, &fd));
  r.timings.request_s = since(t1);
  if (reply.value("result", "") != "hit") {
    r.reason = reply.value("reason", "miss");
    if (auto d = reply.find("differs"); d != reply.end() && d->is_array())
      for (const auto& f : *d)
        if (f.is_string()) r.differs.push_back(f.get<std::string>());
    r.timings.total_s = since(t0);
    return r;
  }
  FR_ASSIGN(fr::proto::Manifest m, fr::proto::manifest_from_json(reply.value("manifest", fr::proto::json()), "manifest"));
  if (!fd) return Error{Errc::kProtocol, "hit without a pool descriptor"};
  if (m.gpu_uuid != dev->gpu_uuid())
    return Error{Errc::kInvalidArgument, "the daemon's entry lives on " + m.gpu_uuid + ", this engine runs on " + dev->gpu_uuid()};

  const auto t2 = SteadyClock::now();
  auto w = std::make_shared<AttachedWeights>();
  w->device = dev;
  w->m = o.mode;
  w->fp = m.fingerprint;
  w->dg = m.digest ? fr::digest_hex(*m.digest) : "";
  w->key = pkey;
  w->opts = o;
  FR_ASSIGN(w->pool, dev->map_read_only(std::move(fd), m.pool_bytes));
  r.timings.map_s = since(t2);
  if (o.mode == Mode::kCopy) {
    const auto t3 = SteadyClock::now();
    FR_ASSIGN(auto copy, dev->copy_of(*w->pool, m.data_bytes));
    w->pool = std::move(copy);  // the daemon's memory is no longer referenced by us
    r.timings.copy_s = since(t3);
  }
  if (o.verify) {
    const auto t4 = SteadyClock::now();
    if (!m.digest) return Error{Errc::kProtocol, "the daemon's manifest has no digest to verify against"};
    FR_ASSIGN(uint64_t got, dev->digest(*w->pool, m.data_bytes));
    r.timings.verify_s = since(t4);
    if (got != *m.digest)
      return Error{Errc::kCorrupt, "verify: the mapped bytes hash to " + fr::digest_hex(got) + " but the daemon recorded " + fr::digest_hex(*m.digest)};
  }
  for (const auto& s : m.tensors) {
    Tensor t;
    t.name = s.spec.name;
    t.dtype = fr::dtype_name(s.spec.dtype);
    t.itemsize = fr::dtype_size(s.spec.dtype);
    t.shape = s.spec.shape;
    t.strides.assign(t.shape.size(), 1);
    for (size_t i = t.shape.size(); i-- > 1;) t.strides[i - 1] = t.strides[i] * t.shape[i];
    t.data = w->pool->base() + s.offset;
    t.nbytes = s.nbytes;
    w->list.push_back(std::move(t));
  }
  r.hit = true;
  r.weights = std::move(w);
  r.timings.total_s = since(t0);
  return r;
}

}  // namespace

Result<std::string> daemon_socket_path(const std::string& device, const std::string& socket_dir) {
  FR_ASSIGN(auto dev, fr::loader::open_device(device));
  return fr::loader::daemon_socket(*dev, socket_dir);
}

Result<AttachResult> attach(const IdentifiedKey& key, const Options& o) {
  if (!(o.connect_timeout_s >= 0) || !(o.state_timeout_s >= 0) || o.state_timeout_s > 86400)
    return Error{Errc::kInvalidArgument, "attach: connect_timeout_s and state_timeout_s must be within 0..86400"};
  // Argument errors are the caller's to fix and stay errors even with fallback on.
  const auto t0 = SteadyClock::now();
  auto pkey = fr::loader::to_proto(key);
  if (!pkey.ok()) return pkey.error().context("attach");
  const bool cuda = o.device.rfind("cuda:", 0) == 0 && o.device.size() > 5 &&
                    o.device.find_first_not_of("0123456789", 5) == std::string::npos;
  const bool host_n = o.device.rfind("host:", 0) == 0 && o.device.size() > 5 && fr::host_device_uuid(o.device.substr(5)).ok();
  if (o.device != "host" && !host_n && !cuda)
    return Error{Errc::kInvalidArgument, "attach: device '" + o.device + "': expected host, host:<name> or cuda:<ordinal>"};
  auto r = attach_strict(*pkey, o, t0);
  if (r.ok()) {
    if (!r->hit && !o.fallback) return Error{Errc::kNotFound, "attach missed and fallback is off: " + r->reason};
    r->key = key;
    return r;
  }
  if (!o.fallback) return r;
  AttachResult miss;
  miss.reason = r.error().message;
  miss.key = key;
  miss.timings.total_s = since(t0);
  return miss;
}

Result<AttachResult> attach(const Key& key, const Options& o) {
  auto k = identify(key);
  if (!k.ok()) return k.error().context("attach");
  return attach(*k, o);
}

}  // namespace fastrestart
