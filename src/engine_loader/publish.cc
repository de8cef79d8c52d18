// publish(): fill a daemon pool with an engine's final tensors. Contract: fastrestart/engine_loader.h.
#include <chrono>

#include "daemon_client/daemon_client.h"
#include "engine_loader/device.h"
#include "engine_loader/key.h"

namespace fastrestart {

Result<PublishResult> publish(const IdentifiedKey& key, std::span<const PublishTensor> tensors, const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (tensors.empty()) return Error{Errc::kInvalidArgument, "publish: no tensors"};
  // The identities were taken before the engine read the files; the daemon re-checks them (never here:
  // identifying now would vouch for files the engine may not have read).
  auto pkey = fr::loader::to_proto(key);
  if (!pkey.ok()) return pkey.error().context("publish");
  FR_ASSIGN(std::shared_ptr<fr::loader::DeviceApi> dev, fr::loader::open_device(o.device));
  fr::proto::json specs = fr::proto::json::array();
  for (const auto& t : tensors) {
    auto dt = fr::dtype_from_name(t.dtype);
    if (!dt) return Error{Errc::kInvalidArgument, "publish: tensor '" + t.name + "' has unknown dtype '" + t.dtype + "'"};
    if (!t.data) return Error{Errc::kInvalidArgument, "publish: tensor '" + t.name + "' has no data"};
    specs.push_back(fr::proto::to_json(fr::proto::TensorSpec{t.name, *dt, t.shape}));
  }
  const std::string path = fr::loader::daemon_socket(*dev, o.socket_dir);
  FR_ASSIGN(auto c, fr::DaemonClient::connect(path, o.connect_timeout_s, "engine_loader " FASTRESTART_VERSION));
  if (c.gpu_uuid() != dev->gpu_uuid())
    return Error{Errc::kInvalidArgument, "the daemon at " + path + " serves " + c.gpu_uuid() + ", this engine runs on " + dev->gpu_uuid()};
  fr::UniqueFd fd;
  FR_ASSIGN(auto begun, c.call({{"op", "publish_begin"}, {"key", fr::proto::to_json(*pkey)}, {"tensors", specs}}, 60, &fd));
  FR_ASSIGN(auto m, fr::proto::manifest_from_json(begun.value("manifest", fr::proto::json()), "manifest"));
  if (m.tensors.size() != tensors.size()) return Error{Errc::kProtocol, "publish: the daemon laid out a different tensor count"};
  {
    FR_ASSIGN(auto pool, dev->map_writable(std::move(fd), m.pool_bytes));
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (m.tensors[i].spec.name != tensors[i].name) return Error{Errc::kProtocol, "publish: the daemon reordered the tensors"};
      FR_TRY(dev->copy_in(*pool, m.tensors[i].offset, tensors[i].data, m.tensors[i].nbytes));
    }
    FR_TRY(dev->sync());
  }  // unmapped here: the daemon can only seal a pool nobody maps writable
  FR_ASSIGN(auto done, c.call({{"op", "publish_commit"}, {"fingerprint", m.fingerprint}}, 600));
  PublishResult r;
  r.fingerprint = m.fingerprint;
  r.digest = done.value("digest", "");
  r.bytes = m.data_bytes;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace fastrestart
