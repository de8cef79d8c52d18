// A vLLM release as fastrestart compares them. Below the config (engine.vllm_version's syntax is checked where
// the file is read) and the vLLM adapter (engines/vllm/: the rules of each release), so the config never
// includes an engine kind's folder.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace fr::supervisor {

// A vLLM release, "0.31.0" (also "0.31.0rc1", "v0.31.1.dev5+gabc": the leading numbers count).
struct VllmVersion {
  std::array<int, 3> parts{0, 0, 0};
  // nullopt unless `s` starts with at least two numbers ("0.31"); a missing third is 0.
  static std::optional<VllmVersion> parse(std::string_view s);
  std::string str() const;
  auto operator<=>(const VllmVersion&) const = default;
};

}  // namespace fr::supervisor
