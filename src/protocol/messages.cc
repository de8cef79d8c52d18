#include "protocol/messages.h"

#include <xxhash.h>

#include <algorithm>

#include "common/digest.h"

namespace fr::proto {
namespace {

Error field_error(const std::string& where, const std::string& what) {
  return make_error(Errc::kInvalidArgument, where + ": " + what);
}

Result<int64_t> get_i64(const json& j, const char* field, const std::string& where) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number_integer()) return field_error(where + "." + field, "not an integer");
  return it->get<int64_t>();
}

}  // namespace

Result<std::string> get_string(const json& j, const char* field, const std::string& where, size_t max_len) {
  auto it = j.find(field);
  if (it == j.end()) return field_error(where + "." + field, "missing");
  if (!it->is_string()) return field_error(where + "." + field, "not a string");
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > max_len) return field_error(where + "." + field, "longer than " + std::to_string(max_len) + " bytes");
  return s;
}

Result<uint64_t> get_u64(const json& j, const char* field, const std::string& where) {
  auto it = j.find(field);
  if (it == j.end()) return field_error(where + "." + field, "missing");
  if (!it->is_number_unsigned()) return field_error(where + "." + field, "not an unsigned integer");
  return it->get<uint64_t>();
}

Result<double> get_double(const json& j, const char* field, const std::string& where, double dflt) {
  auto it = j.find(field);
  if (it == j.end()) return dflt;
  if (!it->is_number()) return field_error(where + "." + field, "not a number");
  return it->get<double>();
}

Result<bool> get_bool(const json& j, const char* field, const std::string& where, bool dflt) {
  auto it = j.find(field);
  if (it == j.end()) return dflt;
  if (!it->is_boolean()) return field_error(where + "." + field, "not a boolean");
  return it->get<bool>();
}

// ---- Key ----

json to_json(const Key& k) {
  json files = json::array();
  for (const auto& f : k.files)
    files.push_back({{"path", f.path}, {"dev", f.dev}, {"ino", f.ino}, {"size", f.size},
                     {"mtime_ns", f.mtime_ns}, {"ctime_ns", f.ctime_ns}});
  return json{{"files", files}, {"config", k.config}};
}

std::string Key::canonical() const { return to_json(*this).dump(); }  // std::map keys: sorted

std::string Key::fingerprint() const {
  std::string c = canonical();
  return digest_hex(XXH64(c.data(), c.size(), 0));
}

Result<Key> key_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return field_error(where, "not an object");
  Key k;
  auto files = j.find("files");
  if (files == j.end() || !files->is_array()) return field_error(where + ".files", "missing or not an array");
  if (files->size() > kMaxKeyFiles) return field_error(where + ".files", "more than " + std::to_string(kMaxKeyFiles) + " files");
  for (size_t i = 0; i < files->size(); ++i) {
    const json& f = (*files)[i];
    std::string w = where + ".files[" + std::to_string(i) + "]";
    if (!f.is_object()) return field_error(w, "not an object");
    FileIdentity id;
    FR_ASSIGN(id.path, get_string(f, "path", w));
    FR_ASSIGN(id.dev, get_u64(f, "dev", w));
    FR_ASSIGN(id.ino, get_u64(f, "ino", w));
    FR_ASSIGN(id.size, get_u64(f, "size", w));
    FR_ASSIGN(id.mtime_ns, get_i64(f, "mtime_ns", w));
    FR_ASSIGN(id.ctime_ns, get_i64(f, "ctime_ns", w));
    k.files.push_back(std::move(id));
  }
  auto cfg = j.find("config");
  if (cfg != j.end()) {
    if (!cfg->is_object()) return field_error(where + ".config", "not an object");
    if (cfg->size() > kMaxConfigFields) return field_error(where + ".config", "more than " + std::to_string(kMaxConfigFields) + " fields");
    for (const auto& [name, v] : cfg->items()) {
      if (name.empty() || name.size() > kMaxConfigKey) return field_error(where + ".config", "a field name of bad length");
      if (!v.is_string()) return field_error(where + ".config." + name, "not a string");
      if (v.get_ref<const std::string&>().size() > kMaxConfigValue) return field_error(where + ".config." + name, "too long");
      k.config[name] = v.get<std::string>();
    }
  }
  return k;
}

std::vector<std::string> key_differences(const Key& want, const Key& have) {
  std::vector<std::string> d;
  if (want.files.size() != have.files.size()) d.push_back("files.count");
  for (size_t i = 0; i < std::min(want.files.size(), have.files.size()); ++i) {
    const auto& a = want.files[i];
    const auto& b = have.files[i];
    std::string p = "files[" + std::to_string(i) + "].";
    if (a.path != b.path) d.push_back(p + "path");
    if (a.dev != b.dev) d.push_back(p + "dev");
    if (a.ino != b.ino) d.push_back(p + "ino");
    if (a.size != b.size) d.push_back(p + "size");
    if (a.mtime_ns != b.mtime_ns) d.push_back(p + "mtime_ns");
    if (a.ctime_ns != b.ctime_ns) d.push_back(p + "ctime_ns");
  }
  for (const auto& [k, v] : want.config) {
    auto it = have.config.find(k);
    if (it == have.config.end() || it->second != v) d.push_back("config." + k);
  }
  for (const auto& [k, v] : have.config)
    if (!want.config.count(k)) d.push_back("config." + k);
  return d;
}

int key_similarity(const Key& want, const Key& have) {
  int s = 0;
  for (const auto& [k, v] : want.config) {
    auto it = have.config.find(k);
    if (it != have.config.end() && it->second == v) s += 4;
  }
  for (size_t i = 0; i < std::min(want.files.size(), have.files.size()); ++i)
    if (want.files[i].path == have.files[i].path) s += 2;
  if (want.files.size() == have.files.size()) s += 1;
  return s;
}

// ---- Tensors and manifests ----

uint64_t TensorSpec::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (auto d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

json to_json(const TensorSpec& t) { return json{{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}}; }

Result<TensorSpec> tensor_spec_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return field_error(where, "not an object");
  TensorSpec t;
  FR_ASSIGN(t.name, get_string(j, "name", where, kMaxTensorName));
  if (t.name.empty()) return field_error(where + ".name", "empty");
  FR_ASSIGN(std::string dt, get_string(j, "dtype", where, 16));
  auto d = dtype_from_name(dt);
  if (!d) return field_error(where + ".dtype", "unknown dtype '" + dt + "'");
  t.dtype = *d;
  auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array() || sh->size() > kMaxRank)
    return field_error(where + ".shape", "missing, not an array, or more than " + std::to_string(kMaxRank) + " dimensions");
  uint64_t elems = 1;
  for (const auto& v : *sh) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) return field_error(where + ".shape", "holds a non-integer or negative size");
    if (__builtin_mul_overflow(elems, v.get<uint64_t>(), &elems) || elems > (uint64_t{1} << 50))
      return field_error(where + ".shape", "too many elements");
    t.shape.push_back(static_cast<int64_t>(v.get<uint64_t>()));
  }
  return t;
}

uint64_t layout_tensors(const std::vector<TensorSpec>& specs, std::vector<TensorSlot>* out) {
  uint64_t off = 0;
  out->clear();
  out->reserve(specs.size());
  for (const auto& s : specs) {
    off = (off + kPoolAlignment - 1) / kPoolAlignment * kPoolAlignment;
    out->push_back(TensorSlot{s, off, s.nbytes()});
    off += s.nbytes();
  }
  return off;
}

json to_json(const Manifest& m) {
  json tensors = json::array();
  for (const auto& t : m.tensors) {
    json e = to_json(t.spec);
    e["offset"] = t.offset;
    e["nbytes"] = t.nbytes;
    tensors.push_back(std::move(e));
  }
  json j{{"fingerprint", m.fingerprint}, {"pool_bytes", m.pool_bytes}, {"data_bytes", m.data_bytes},
         {"digest_chunk", m.digest_chunk}, {"source", m.source}, {"backend", m.backend},
         {"gpu_uuid", m.gpu_uuid}, {"tensors", std::move(tensors)}};
  j["digest"] = m.digest ? json(digest_hex(*m.digest)) : json(nullptr);
  return j;
}

Result<Manifest> manifest_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return field_error(where, "not an object");
  Manifest m;
  FR_ASSIGN(m.fingerprint, get_string(j, "fingerprint", where, 64));
  FR_ASSIGN(m.pool_bytes, get_u64(j, "pool_bytes", where));
  FR_ASSIGN(m.data_bytes, get_u64(j, "data_bytes", where));
  FR_ASSIGN(m.digest_chunk, get_u64(j, "digest_chunk", where));
  FR_ASSIGN(m.source, get_string(j, "source", where, 32));
  FR_ASSIGN(m.backend, get_string(j, "backend", where, 32));
  FR_ASSIGN(m.gpu_uuid, get_string(j, "gpu_uuid", where, 128));
  if (m.data_bytes > m.pool_bytes) return field_error(where + ".data_bytes", "larger than pool_bytes");
  auto dg = j.find("digest");
  if (dg != j.end() && !dg->is_null()) {
    if (!dg->is_string() || dg->get_ref<const std::string&>().size() != 16)
      return field_error(where + ".digest", "not 16 hex digits");
    m.digest = std::stoull(dg->get<std::string>(), nullptr, 16);
  }
  auto ts = j.find("tensors");
  if (ts == j.end() || !ts->is_array()) return field_error(where + ".tensors", "missing or not an array");
  if (ts->size() > kMaxTensors) return field_error(where + ".tensors", "too many tensors");
  for (size_t i = 0; i < ts->size(); ++i) {
    std::string w = where + ".tensors[" + std::to_string(i) + "]";
    FR_ASSIGN(TensorSpec spec, tensor_spec_from_json((*ts)[i], w));
    TensorSlot s{std::move(spec), 0, 0};
    FR_ASSIGN(s.offset, get_u64((*ts)[i], "offset", w));
    FR_ASSIGN(s.nbytes, get_u64((*ts)[i], "nbytes", w));
    if (s.nbytes != s.spec.nbytes()) return field_error(w + ".nbytes", "does not equal shape x itemsize");
    if (s.offset % kPoolAlignment != 0) return field_error(w + ".offset", "not aligned to " + std::to_string(kPoolAlignment));
    if (s.offset > m.data_bytes || s.nbytes > m.data_bytes - s.offset) return field_error(w, "lies outside data_bytes");
    m.tensors.push_back(std::move(s));
  }
  return m;
}

}  // namespace fr::proto
