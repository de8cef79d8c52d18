#include "tinyengine/loader.h"

#include <chrono>

#include <spdlog/spdlog.h>

namespace fr::te {
namespace {

class Stopwatch {
 public:
  double lap() {
    auto now = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(now - m_t).count();
    m_t = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point m_t = std::chrono::steady_clock::now();
};

}  // namespace

std::map<std::string, std::string> key_config(const CheckpointInfo& info) {
  return {{"arch", "tinyengine"},
          {"dtype", dtype_name(info.config.dtype)},
          {"engine", std::string("fastrestart-tinyengine ") + FR_TE_VERSION},
          {"tp_size", "1"},
          {"tp_rank", "0"}};
}

int cuda_ordinal(const std::string& device) {
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 8) return -1;
  int n = 0;
  for (char c : device.substr(5)) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

nlohmann::json LoadReport::to_json() const {
  nlohmann::json ph = nlohmann::json::object();
  double total = 0;
  for (const auto& [name, s] : phases) {
    ph[name + "_s"] = s;
    total += s;
  }
  nlohmann::json j = {{"format", format},
                      {"path", path},
                      {"weight_bytes", weight_bytes},
                      {"disk_bytes_read", disk_bytes_read},
                      {"phases", ph},
                      {"total_s", total}};
  if (format == "fastrestart") {
    j["reason"] = reason;
    j["differs"] = differs;
    j["mode"] = mode;
    j["published"] = published;
    j["publish_error"] = publish_error;
    j["fingerprint"] = fingerprint;
    j["digest"] = digest;
    j["attach_timings"] = attach_timings;
  }
  return j;
}

Result<LoadedModel> load_model(const std::string& path, const LoadOptions& options) {
  LoadedModel out;
  LoadReport& r = out.report;
  Stopwatch sw;
  FR_ASSIGN(out.info, inspect_checkpoint(path));
  r.phases.emplace_back("read_headers", sw.lap());
  r.disk_bytes_read = out.info.header_bytes;
  r.weight_bytes = total_weight_bytes(out.info.config);
  r.format = options.format == LoadFormat::kDisk ? "disk" : "fastrestart";

  bool have = false;
  std::shared_ptr<const PublishKey> key;
  if (options.format == LoadFormat::kFastrestart) {
    auto a = fastrestart_attach(out.info, options);
    r.phases.emplace_back("attach", sw.lap());
    if (!a) return a.error().context("fastrestart attach (fallback off)");
    if (a->hit && a->on_cuda != (cuda_ordinal(options.device) >= 0))
      return make_error(Errc::kInternal, "attached weights are not on the device asked for");
    key = a->key;
    if (a->hit) {
      r.path = "attach";
      r.mode = a->mode;
      r.fingerprint = a->fingerprint;
      r.digest = a->digest;
      r.attach_timings = a->timings;
      out.set = std::move(a->set);
      have = true;
    } else {
      r.path = "fallback";
      r.reason = a->reason;
      r.differs = a->differs;
      spdlog::info("fastrestart: miss ({}); loading from disk", a->reason);
    }
  } else {
    r.path = "disk";
  }
  const int ordinal = cuda_ordinal(options.device);
  if (!have) {
    FR_ASSIGN(auto d, load_from_disk(out.info));
    r.phases.emplace_back("disk_read", sw.lap());
    r.disk_bytes_read += d.bytes_read;
    out.set = std::move(d.set);
    if (ordinal >= 0) {
      FR_ASSIGN(out.set, upload_to_cuda(out.set, ordinal));  // the host copy is freed here
      r.phases.emplace_back("upload", sw.lap());
    }
  }
  if (ordinal >= 0) {
    auto m = bind_cuda_model(out.info.config, out.set.lookup(), ordinal);
    if (!m) return m.error().context(path);
    out.cuda = std::move(*m);
  } else {
    auto m = Model::bind(out.info.config, out.set.lookup());
    if (!m) return m.error().context(path);
    out.model = std::move(*m);
  }
  r.phases.emplace_back("bind", sw.lap());

  if (r.path == "fallback" && options.publish) {
    auto p = fastrestart_publish(key.get(), out.info, out.set, options);
    r.phases.emplace_back("publish", sw.lap());
    if (p) {
      r.published = true;
      r.fingerprint = p->fingerprint;
      r.digest = p->digest;
      spdlog::info("fastrestart: published {} bytes as {} (digest {})", p->bytes, p->fingerprint, p->digest);
    } else {
      r.publish_error = p.error().to_string();
      spdlog::warn("fastrestart: publish failed, serving anyway: {}", r.publish_error);
    }
  }
  return out;
}

}  // namespace fr::te
