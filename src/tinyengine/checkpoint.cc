#include "tinyengine/checkpoint.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/fd.h"
#include "common/io.h"

#include <spdlog/spdlog.h>

namespace fr::te {
namespace {

namespace fs = std::filesystem;

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even (values here are finite)
  return static_cast<uint16_t>(bits >> 16);
}

std::vector<std::byte> fill_tensor(const TensorSpec& spec, const ModelConfig& c, uint64_t seed, bool printable) {
  const auto n = static_cast<size_t>(spec.numel());
  const size_t es = dtype_size(c.dtype);
  std::vector<std::byte> out(n * es);
  uint64_t state = seed ^ fnv1a(spec.name);
  double a = std::sqrt(3.0 / static_cast<double>(spec.fan_in));
  double center = 0;
  switch (spec.init) {
    case TensorSpec::Init::kUniform: break;
    case TensorSpec::Init::kOnes: a = 0.1, center = 1.0; break;
    case TensorSpec::Init::kSmallUniform: a = 0.5 * a / std::sqrt(std::max(1, c.extra_blocks)); break;
  }
  for (size_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    auto v = static_cast<float>(center + (2 * u - 1) * a);
    if (printable && spec.name == "lm_head") {
      const size_t token = i / static_cast<size_t>(spec.shape[1]);
      if (token < 0x20 || token > 0x7e) v *= 1.0f / 64;
    }
    if (c.dtype == DType::kBF16) {
      const uint16_t b = f32_to_bf16(v);
      std::memcpy(out.data() + i * 2, &b, 2);
    } else {
      std::memcpy(out.data() + i * 4, &v, 4);
    }
  }
  return out;
}

struct AlignedFree {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, AlignedFree>;
struct Buffers {
  std::vector<AlignedBuffer> bufs;
};

}  // namespace

ModelConfig config_for_size(const ModelConfig& base, uint64_t target_bytes) {
  ModelConfig c = base;
  c.extra_blocks = 0;
  const uint64_t b = total_weight_bytes(c);
  if (target_bytes <= b) return base;
  const uint64_t es = dtype_size(c.dtype);
  const uint64_t per_width = 2ull * static_cast<uint64_t>(c.d_model) * es;  // bytes per unit of width
  const uint64_t max_width = (256ull << 20) / (static_cast<uint64_t>(c.d_model) * es);
  const uint64_t need = target_bytes - b;
  const uint64_t blocks = (need + per_width * max_width - 1) / (per_width * max_width);
  c.extra_blocks = static_cast<int>(blocks);
  c.extra_width = static_cast<int64_t>(std::max<uint64_t>(1, need / (blocks * per_width)));
  return c;
}

Result<uint64_t> parse_size(const std::string& text) {
  if (text.empty()) return make_error(Errc::kInvalidArgument, "empty size");
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 15) return make_error(Errc::kInvalidArgument, "bad size '" + text + "'");
  uint64_t v = std::stoull(text.substr(0, pos));
  std::string suffix = text.substr(pos);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix == "i" || (suffix.size() == 2 && suffix[1] == 'i')) suffix = suffix.substr(0, suffix.size() - 1);
  int shift = 0;
  if (suffix.empty()) shift = 0;
  else if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (suffix == "T" || suffix == "t") shift = 40;
  else return make_error(Errc::kInvalidArgument, "bad size suffix in '" + text + "' (use K, M, G or T)");
  if (v > (UINT64_MAX >> shift)) return make_error(Errc::kInvalidArgument, "size '" + text + "' too large");
  return v << shift;
}

Result<std::vector<std::string>> generate_checkpoint(const GenOptions& options, const std::string& out_dir) {
  FR_TRY(options.config.validate());
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return make_error(Errc::kIo, "create " + out_dir + ": " + ec.message());
  const auto specs = tensor_specs(options.config);
  const uint64_t es = dtype_size(options.config.dtype);
  // Group tensors into shards in order.
  std::vector<std::vector<const TensorSpec*>> shards(1);
  uint64_t in_shard = 0;
  for (const auto& s : specs) {
    const uint64_t nb = static_cast<uint64_t>(s.numel()) * es;
    if (in_shard > 0 && in_shard + nb > options.shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&s);
    in_shard += nb;
  }
  const std::map<std::string, std::string> meta = {{kConfigKey, options.config.to_json()}, {"format", "pt"}};
  std::vector<std::string> files;
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = "model.safetensors";
    if (shards.size() > 1) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      name = buf;
    }
    std::vector<std::vector<std::byte>> data;
    std::vector<TensorData> tensors;
    data.reserve(shards[i].size());
    for (const TensorSpec* s : shards[i]) {
      data.push_back(fill_tensor(*s, options.config, options.seed, options.printable));
      tensors.push_back({s->name, options.config.dtype, s->shape, data.back()});
    }
    const std::string path = (fs::path(out_dir) / name).string();
    FR_TRY(write_safetensors(path, tensors, meta));
    files.push_back(path);
  }
  return files;
}

Result<CheckpointInfo> inspect_checkpoint(const std::string& path) {
  CheckpointInfo info;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".safetensors" && e.is_regular_file())
        info.files.push_back(fs::absolute(e.path()).string());
    if (ec) return make_error(Errc::kIo, "list " + path + ": " + ec.message());
    if (info.files.empty()) return make_error(Errc::kNotFound, "no .safetensors files in " + path);
    std::sort(info.files.begin(), info.files.end());
  } else if (fs::exists(path, ec)) {
    info.files.push_back(fs::absolute(path).string());
  } else {
    return make_error(Errc::kNotFound, "checkpoint " + path + " does not exist");
  }
  auto fds = std::make_shared<std::vector<UniqueFd>>();
  for (const auto& f : info.files) {
    UniqueFd fd(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return sys_error("open " + f);
    fds->push_back(std::move(fd));
  }
  info.fds = fds;
  std::string config_json;
  std::map<std::string, int> seen;
  for (size_t i = 0; i < info.files.size(); ++i) {
    const std::string& f = info.files[i];
    FR_ASSIGN(auto h, read_safetensors_header_fd((*fds)[i].get(), f));
    info.header_bytes += h.data_start;
    for (const auto& t : h.tensors)
      if (seen[t.name]++) return make_error(Errc::kCorrupt, "tensor '" + t.name + "' appears twice in " + path);
    auto it = h.metadata.find(kConfigKey);
    if (it != h.metadata.end()) {
      if (!config_json.empty() && config_json != it->second)
        return make_error(Errc::kCorrupt, f + ": its model config differs from the other files'");
      config_json = it->second;
    }
    info.headers.push_back(std::move(h));
  }
  if (config_json.empty())
    return make_error(Errc::kCorrupt, path + ": no '" + std::string(kConfigKey) + "' in the safetensors metadata");
  auto c = ModelConfig::from_json(config_json);
  if (!c) return c.error().context(path);
  info.config = *c;
  return info;
}

std::vector<int> CheckpointInfo::fd_numbers() const {
  std::vector<int> out;
  if (fds)
    for (const auto& fd : *fds) out.push_back(fd.get());
  return out;
}

TensorLookup TensorSet::lookup() const {
  return [this](const std::string& name) -> const TensorView* {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  };
}

std::byte* DiskLoad::mutable_data(const std::string& name) const {
  auto it = set.tensors.find(name);
  // The buffers are ours (Buffers, allocated below), so writing is fine.
  return it == set.tensors.end() ? nullptr : static_cast<std::byte*>(const_cast<void*>(it->second.data));
}

namespace {
// Tests only (docs/tinyengine.md): FASTRESTART_TEST_READ_DELAY_MS=N pauses N ms after each shard but the
// last, announcing it on stderr, so a test can change the checkpoint while the engine reads the next shard.
void test_pause_after(const std::string& path, bool more) {
  const char* e = std::getenv("FASTRESTART_TEST_READ_DELAY_MS");
  const int ms = e ? std::atoi(e) : 0;
  if (ms <= 0 || !more) return;
  std::fprintf(stderr, "test: read %s; pausing %d ms before the next shard\n", path.c_str(), ms);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}
}  // namespace

Result<DiskLoad> load_from_disk(const CheckpointInfo& info) {
  auto bufs = std::make_shared<Buffers>();
  DiskLoad out;
  // Progress for fastrestartd's status (docs/supervisor.md, "Engine progress"): a line at most every 0.5 s
  // and one at the end.
  uint64_t total = 0;
  for (const auto& h : info.headers) total += h.file_size - h.data_start;
  auto last = std::chrono::steady_clock::now();
  auto progress = [&](uint64_t done) {
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last < std::chrono::milliseconds(500)) return;
    last = now;
    spdlog::info("fastrestart-progress: phase=disk_read done={} total={} unit=bytes", done, total);
  };
  constexpr uint64_t kChunk = 64ull << 20;
  if (!info.fds || info.fds->size() != info.headers.size())
    return make_error(Errc::kInvalidArgument, "load_from_disk: the checkpoint's files are not open");
  for (size_t i = 0; i < info.headers.size(); ++i) {
    const SafetensorsHeader& h = info.headers[i];
    const UniqueFd& fd = (*info.fds)[i];
    const uint64_t n = h.file_size - h.data_start;
    auto* p = static_cast<std::byte*>(std::aligned_alloc(64, std::max<uint64_t>(64, (n + 63) / 64 * 64)));
    if (!p) return make_error(Errc::kIo, "out of memory reading " + h.path);
    bufs->bufs.emplace_back(p);
    for (uint64_t at = 0; at < n; at += kChunk) {
      const uint64_t len = std::min(kChunk, n - at);
      FR_TRY(pread_full(fd.get(), p + at, len, h.data_start + at, h.path));
      progress(out.bytes_read + at + len);
    }
    out.bytes_read += n;
    for (const auto& t : h.tensors)
      out.set.tensors[t.name] = TensorView{t.dtype, t.shape, p + (t.begin - h.data_start), t.nbytes()};
    test_pause_after(h.path, i + 1 < info.headers.size());
  }
  out.set.owner = bufs;
  return out;
}

}  // namespace fr::te
