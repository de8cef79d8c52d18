#include "engine_loader/key.h"

#include <algorithm>

namespace fr::loader {
namespace {

Status check_config(const std::map<std::string, std::string>& config) {
  for (const auto& [name, value] : config) {
    if (name.empty() || name.size() > proto::kMaxConfigKey || value.size() > proto::kMaxConfigValue)
      return make_error(Errc::kInvalidArgument, "key config field '" + name.substr(0, 64) + "' has a bad length");
  }
  if (config.size() > proto::kMaxConfigFields) return make_error(Errc::kInvalidArgument, "key has too many config fields");
  return {};
}

// Identifies key.files[i] with `one(i)` and sorts the result by path (docs/protocol.md).
template <class One>
Result<proto::Key> identify_each(const fastrestart::Key& key, One one) {
  if (key.files.empty()) return make_error(Errc::kInvalidArgument, "key has no checkpoint files");
  FR_TRY(check_config(key.config));
  proto::Key k;
  for (size_t i = 0; i < key.files.size(); ++i) {
    FR_ASSIGN(FileIdentity id, one(i));
    k.files.push_back(std::move(id));
  }
  std::sort(k.files.begin(), k.files.end(), [](const FileIdentity& a, const FileIdentity& b) { return a.path < b.path; });
  k.config = key.config;
  return k;
}

}  // namespace

Result<proto::Key> identify(const fastrestart::Key& key) {
  return identify_each(key, [&](size_t i) { return identify_file(key.files[i]); });
}

Result<proto::Key> identify_fds(const fastrestart::Key& key, const std::vector<int>& fds) {
  if (fds.size() != key.files.size())
    return make_error(Errc::kInvalidArgument, "identify_fds: " + std::to_string(fds.size()) + " descriptors for " +
                                                  std::to_string(key.files.size()) + " files");
  return identify_each(key, [&](size_t i) { return identify_fd(fds[i], key.files[i]); });
}

Result<proto::Key> to_proto(const fastrestart::IdentifiedKey& key) {
  if (key.files.empty()) return make_error(Errc::kInvalidArgument, "key has no checkpoint files");
  if (key.files.size() > proto::kMaxKeyFiles) return make_error(Errc::kInvalidArgument, "key has too many files");
  FR_TRY(check_config(key.config));
  proto::Key k;
  for (const auto& f : key.files) {
    if (!k.files.empty() && !(k.files.back().path < f.path))
      return make_error(Errc::kInvalidArgument, "key files are not sorted by path, or repeat one: " + f.path);
    k.files.push_back(FileIdentity{f.path, f.dev, f.ino, f.size, f.mtime_ns, f.ctime_ns});
  }
  k.config = key.config;
  return k;
}

fastrestart::IdentifiedKey from_proto(const proto::Key& key) {
  fastrestart::IdentifiedKey k;
  for (const auto& f : key.files) k.files.push_back({f.path, f.dev, f.ino, f.size, f.mtime_ns, f.ctime_ns});
  k.config = key.config;
  return k;
}

}  // namespace fr::loader

namespace fastrestart {

Result<IdentifiedKey> identify(const Key& key) {
  FR_ASSIGN(fr::proto::Key k, fr::loader::identify(key));
  return fr::loader::from_proto(k);
}

Result<IdentifiedKey> identify_fds(const Key& key, const std::vector<int>& fds) {
  FR_ASSIGN(fr::proto::Key k, fr::loader::identify_fds(key, fds));
  return fr::loader::from_proto(k);
}

std::string IdentifiedKey::fingerprint() const {
  auto k = fr::loader::to_proto(*this);
  return k.ok() ? k->fingerprint() : std::string();
}

}  // namespace fastrestart
