#include "supervisor/standby/model_files.h"

#include <algorithm>
#include <filesystem>

namespace fr::supervisor {

std::vector<std::string> model_files(const std::vector<std::string>& roots, const ModelFileLimits& limits) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& root : roots) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
      out.push_back(root);
      continue;
    }
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
    for (; !ec && it != end && out.size() < limits.max_files; it.increment(ec)) {
      const fs::directory_entry& e = *it;
      const bool hidden = e.path().filename().string().starts_with(".");
      std::error_code te;
      if (e.is_directory(te) && !e.is_symlink(te)) {
        if (hidden || it.depth() + 1 >= limits.max_depth) it.disable_recursion_pending();
        continue;
      }
      if (!hidden && e.is_regular_file(te)) out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::map<std::string, FileIdentity> identify_model_files(const std::vector<std::string>& files) {
  std::map<std::string, FileIdentity> out;
  for (const auto& f : files) {
    auto id = identify_file(f);
    out[f] = id.ok() ? *id : FileIdentity{f};
  }
  return out;
}

std::string model_files_change(const std::map<std::string, FileIdentity>& was, const std::map<std::string, FileIdentity>& now) {
  for (const auto& [path, w] : was) {
    auto it = now.find(path);
    if (it == now.end() || (it->second.ino == 0 && w.ino != 0)) return path + " is gone";
    if (it->second == w) continue;
    if (w.ino == 0) return path + " appeared";
    return path + ": " + identity_change(w, it->second);
  }
  for (const auto& [path, n] : now)
    if (!was.contains(path)) return path + " appeared";
  return {};
}

}  // namespace fr::supervisor
