#include "tinyengine/loader.h"

#include <chrono>
#include <cstring>
#include <new>

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

std::map<std::string, std::string> key_config(const CheckpointInfo& info, const TpPlan& tp) {
  return {{"arch", "tinyengine"},
          {"dtype", dtype_name(info.config.dtype)},
          {"engine", std::string("fastrestart-tinyengine ") + FR_TE_VERSION},
          {"tp_size", std::to_string(tp.size)},
          {"tp_rank", std::to_string(tp.rank)}};
}

Result<TensorSet> shard_tensors(const ModelConfig& config, const TensorSet& full, const TpPlan& tp) {
  FR_TRY(check_tp(config, tp));
  const auto specs = tensor_specs(config, tp);
  const uint64_t es = dtype_size(config.dtype);
  const auto [lo, hi] = extra_slice(config.extra_width, tp);
  auto align = [](uint64_t n) { return (n + 63) / 64 * 64; };
  uint64_t total = 0;
  for (const auto& s : specs) total += align(static_cast<uint64_t>(s.numel()) * es);
  auto buf = std::shared_ptr<std::byte[]>(new (std::align_val_t{64}) std::byte[std::max<uint64_t>(total, 1)],
                                          [](std::byte* p) { ::operator delete[](p, std::align_val_t{64}); });
  TensorSet out;
  uint64_t off = 0;
  for (const auto& s : specs) {
    auto it = full.tensors.find(s.name);
    if (it == full.tensors.end()) return make_error(Errc::kCorrupt, "tensor '" + s.name + "' is missing");
    const auto& src = it->second;
    const auto* from = static_cast<const std::byte*>(src.data);
    std::byte* to = buf.get() + off;
    const uint64_t n = static_cast<uint64_t>(s.numel()) * es;
    if (s.name.rfind("extra.", 0) == 0 && s.name.ends_with(".down")) {
      // [d_model, width] -> columns [lo, hi) of every row
      const auto w = static_cast<uint64_t>(config.extra_width), cols = static_cast<uint64_t>(hi - lo);
      for (uint64_t row = 0; row < static_cast<uint64_t>(config.d_model); ++row)
        std::memcpy(to + row * cols * es, from + (row * w + static_cast<uint64_t>(lo)) * es, cols * es);
    } else if (s.name.rfind("extra.", 0) == 0 && s.name.ends_with(".up")) {
      // [width, d_model] -> rows [lo, hi)
      std::memcpy(to, from + static_cast<uint64_t>(lo) * static_cast<uint64_t>(config.d_model) * es, n);
    } else {
      if (src.nbytes != n) return make_error(Errc::kCorrupt, "tensor '" + s.name + "' has the wrong size");
      std::memcpy(to, from, n);
    }
    out.tensors[s.name] = TensorView{config.dtype, s.shape, to, n};
    off += align(n);
  }
  out.owner = std::shared_ptr<void>(buf, buf.get());
  return out;
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
    j["adopted"] = adopted;
    if (!adopt_error.empty()) j["adopt_error"] = adopt_error;
    j["fingerprint"] = fingerprint;
    j["digest"] = digest;
    j["attach_timings"] = attach_timings;
  }
  return j;
}

namespace {

// zero_copy after a publish: attach what was just published and re-bind the model to it, so the own copy
// (freed when the old set goes) and the daemon's are not both held for the engine's whole first life. On
// any failure the engine keeps serving its own copy and says why (load.adopt_error).
void adopt_published(LoadedModel& out, const PublishKey* key, const LoadOptions& options, const TpReduce& reduce) {
  LoadReport& r = out.report;
  auto fail = [&](const std::string& why) {
    r.adopt_error = why;
    spdlog::warn("fastrestart: serving this engine's own copy of the weights, not the daemon's: {}", why);
  };
  auto a = fastrestart_attach_published(key, options);
  if (!a) return fail(a.error().to_string());
  if (!a->hit) return fail("the attach after the publish missed: " + a->reason);
  if (a->mode != "zero_copy" || a->on_cuda != (cuda_ordinal(options.device) >= 0))
    return fail("the daemon's copy is not a zero_copy mapping on this engine's device");
  if (out.cuda) {
    auto m = bind_cuda_model(out.info.config, a->set.lookup(), cuda_ordinal(options.device));
    if (!m) return fail(m.error().to_string());
    out.cuda = std::move(*m);
  } else {
    auto m = Model::bind(out.info.config, a->set.lookup(), options.tp, reduce);
    if (!m) return fail(m.error().to_string());
    out.model = std::move(*m);
  }
  out.set = std::move(a->set);  // the own copy is freed here
  r.adopted = true;
  r.mode = "zero_copy";
  spdlog::info("fastrestart: adopted the daemon's copy ({}); this engine's own copy is freed", a->fingerprint);
}

}  // namespace

Result<LoadedModel> load_model(const std::string& path, const LoadOptions& options, const TpAgree& agree,
                               TpReduce reduce) {
  const TpPlan& tp = options.tp;
  if (tp.size > 1 && cuda_ordinal(options.device) >= 0)
    return make_error(Errc::kInvalidArgument, "tensor parallel runs on the CPU forward only (--device cpu)");
  LoadedModel out;
  LoadReport& r = out.report;
  Stopwatch sw;
  FR_ASSIGN(out.info, inspect_checkpoint(path));
  r.phases.emplace_back("read_headers", sw.lap());
  r.disk_bytes_read = out.info.header_bytes;
  FR_TRY(check_tp(out.info.config, tp));
  r.weight_bytes = rank_weight_bytes(out.info.config, tp);
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
    if (tp.size > 1 && agree) {
      FR_ASSIGN(const TpAgreement all, agree(a->hit, a->reason));
      if (!all.all_hit && have) {
        // Another rank missed: this rank's attached shard is dropped, every rank loads from disk.
        spdlog::info("fastrestart: {}; this rank's attached shard is not used, loading from disk", all.reason);
        out.set = {};
        have = false;
        r.path = "fallback";
        r.reason = all.reason;
        r.mode.clear();
      }
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
    if (tp.size > 1) {
      FR_ASSIGN(out.set, shard_tensors(out.info.config, out.set, tp));  // the whole checkpoint is freed here
      r.phases.emplace_back("shard", sw.lap());
    }
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
    auto m = Model::bind(out.info.config, out.set.lookup(), tp, reduce);
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
      if (options.zero_copy) {
        adopt_published(out, key.get(), options, reduce);
        r.phases.emplace_back("adopt", sw.lap());
      }
    } else {
      r.publish_error = p.error().to_string();
      spdlog::warn("fastrestart: publish failed, serving anyway: {}", r.publish_error);
    }
  }
  // Read and published: the descriptors would only keep a replaced checkpoint's disk space in use.
  out.info.fds.reset();
  return out;
}

}  // namespace fr::te
