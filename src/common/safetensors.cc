#include "common/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/fd.h"
#include "common/io.h"

namespace fr {
namespace {

Error bad(const std::string& path, const std::string& what) {
  return make_error(Errc::kCorrupt, path + ": invalid safetensors header: " + what);
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::string_view text, uint64_t header_len,
                                                   uint64_t file_size, const std::string& path) {
  // A checkpoint may come from anywhere: its header is bounded like a peer's message. Values: a tensor is
  // about a dozen, and kMaxTensorsPerFile of them fit.
  auto parsed = parse_json_bounded(text, {32, size_t{1} << 24, "header"});
  if (!parsed.ok()) return bad(path, parsed.error().message.ends_with("not valid JSON") ? "header is not valid JSON" : parsed.error().message);
  const nlohmann::json j = std::move(*parsed);
  if (!j.is_object()) return bad(path, "header is not a JSON object");
  if (j.size() > kMaxTensorsPerFile) return bad(path, "too many tensors (" + std::to_string(j.size()) + ")");

  SafetensorsHeader h;
  h.path = path;
  h.file_size = file_size;
  h.data_start = 8 + header_len;
  const uint64_t data_len = file_size - h.data_start;

  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return bad(path, "__metadata__ is not an object");
      for (const auto& [k, mv] : v.items()) {
        if (!mv.is_string()) return bad(path, "__metadata__." + k + " is not a string");
        h.metadata[k] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (name.empty() || name.size() > kMaxTensorName) return bad(path, "tensor name of bad length");
    if (!v.is_object()) return bad(path, where + " is not an object");
    if (v.size() != 3) return bad(path, where + " must have exactly dtype, shape and data_offsets");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto of = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return bad(path, where + ": missing or non-string dtype");
    auto dtype = dtype_from_name(dt->get<std::string>());
    if (!dtype) return bad(path, where + ": unknown dtype '" + dt->get<std::string>() + "'");
    if (sh == v.end() || !sh->is_array() || sh->size() > kMaxRank)
      return bad(path, where + ": shape must be an array of at most " + std::to_string(kMaxRank) + " sizes");
    if (of == v.end() || !of->is_array() || of->size() != 2 || !(*of)[0].is_number_unsigned() ||
        !(*of)[1].is_number_unsigned())
      return bad(path, where + ": data_offsets must be two unsigned integers");

    TensorInfo t;
    t.name = name;
    t.dtype = *dtype;
    uint64_t elems = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return bad(path, where + ": shape holds a non-integer or negative size");
      uint64_t n = d.get<uint64_t>();
      if (n > (1ull << 62)) return bad(path, where + ": shape size too large");
      if (__builtin_mul_overflow(elems, n, &elems)) return bad(path, where + ": shape overflows");
      t.shape.push_back(static_cast<int64_t>(n));
    }
    uint64_t b = (*of)[0].get<uint64_t>(), e = (*of)[1].get<uint64_t>();
    if (b > e) return bad(path, where + ": data_offsets begin > end");
    if (e > data_len)
      return bad(path, where + ": data_offsets end " + std::to_string(e) + " past the end of the data (" +
                           std::to_string(data_len) + " bytes)");
    uint64_t expect = 0;
    if (__builtin_mul_overflow(elems, dtype_size(*dtype), &expect)) return bad(path, where + ": shape overflows");
    if (expect != e - b)
      return bad(path, where + ": shape x itemsize = " + std::to_string(expect) +
                           " bytes but data_offsets span " + std::to_string(e - b));
    t.begin = h.data_start + b;
    t.end = h.data_start + e;
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    const auto& p = h.tensors[i - 1];
    const auto& c = h.tensors[i];
    if (c.begin < p.end && c.nbytes() > 0 && p.nbytes() > 0)
      return bad(path, "tensors '" + p.name + "' and '" + c.name + "' overlap");
  }
  return h;
}

Result<SafetensorsHeader> read_safetensors_header(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_error("open " + path);
  return read_safetensors_header_fd(fd.get(), path);
}

Result<SafetensorsHeader> read_safetensors_header_fd(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return sys_error("stat " + path);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) return bad(path, "file is shorter than 8 bytes");
  unsigned char lenbuf[8];
  FR_TRY(pread_full(fd, lenbuf, 8, 0, path));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | lenbuf[i];
  if (n > kMaxSafetensorsHeader) return bad(path, "header length " + std::to_string(n) + " exceeds the limit");
  if (n > size - 8) return bad(path, "header length " + std::to_string(n) + " runs past the end of the file");
  std::string text(n, '\0');
  FR_TRY(pread_full(fd, text.data(), n, 8, path));
  return parse_safetensors_header(text, n, size, path);
}

Status write_safetensors(const std::string& path, std::span<const TensorData> tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::json j = nlohmann::json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    uint64_t expect = dtype_size(t.dtype);
    for (auto d : t.shape) expect *= static_cast<uint64_t>(d);
    if (expect != t.bytes.size())
      return make_error(Errc::kInvalidArgument, "tensor '" + t.name + "': shape does not match its bytes");
    j[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + expect}}};
    off += expect;
  }
  std::string header = j.dump();
  while ((header.size() + 8) % 8 != 0) header.push_back(' ');  // safetensors pads with spaces
  std::string tmp = path + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return sys_error("create " + tmp);
  unsigned char lenbuf[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) lenbuf[i] = static_cast<unsigned char>(n >> (8 * i));
  FR_TRY(write_full(fd.get(), lenbuf, 8, tmp));
  FR_TRY(write_full(fd.get(), header.data(), header.size(), tmp));
  for (const auto& t : tensors) FR_TRY(write_full(fd.get(), t.bytes.data(), t.bytes.size(), tmp));
  if (::fsync(fd.get()) != 0) return sys_error("fsync " + tmp);
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("rename " + tmp + " to " + path);
  return {};
}

}  // namespace fr
