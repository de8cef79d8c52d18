#include "engine_loader/key.h"

#include <algorithm>

namespace fr::loader {

Result<proto::Key> identify(const fastrestart::Key& key) {
  if (key.files.empty()) return make_error(Errc::kInvalidArgument, "key has no checkpoint files");
  proto::Key k;
  for (const auto& f : key.files) {
    FR_ASSIGN(FileIdentity id, identify_file(f));
    k.files.push_back(std::move(id));
  }
  std::sort(k.files.begin(), k.files.end(), [](const FileIdentity& a, const FileIdentity& b) { return a.path < b.path; });
  for (const auto& [name, value] : key.config) {
    if (name.empty() || name.size() > proto::kMaxConfigKey || value.size() > proto::kMaxConfigValue)
      return make_error(Errc::kInvalidArgument, "key config field '" + name.substr(0, 64) + "' has a bad length");
  }
  if (key.config.size() > proto::kMaxConfigFields) return make_error(Errc::kInvalidArgument, "key has too many config fields");
  k.config = key.config;
  return k;
}

}  // namespace fr::loader
