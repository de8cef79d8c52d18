#include "supervisor/checkpoint_files.h"

#include <algorithm>
#include <filesystem>

namespace fr::supervisor {

std::vector<std::string> checkpoint_files(const Config& c) { return expand_checkpoint_paths(c.weights.checkpoint); }

std::vector<std::string> expand_checkpoint_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::string> v;
      for (const auto& e : std::filesystem::directory_iterator(p, ec))
        if (e.path().extension() == ".safetensors") v.push_back(e.path().string());
      std::sort(v.begin(), v.end());
      out.insert(out.end(), v.begin(), v.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace fr::supervisor
