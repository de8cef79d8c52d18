#include "supervisor/reload/flags_file.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/io.h"
#include "common/atomic_file.h"

namespace fr::supervisor {

using nlohmann::json;

Status save_pushed_flags(const std::string& path, const FlagList& flags, const FlagList& config_flags) {
  const std::string text = json{{"flags", flags.words()}, {"config_flags", config_flags.words()}}.dump(2) + "\n";
  if (auto st = write_private_file(path, text); !st.ok()) {
    spdlog::error("could not persist the flags to {}: {}", path, st.error().message);
    return st.error().context("cannot persist the pushed flags to " + path);
  }
  return {};
}

std::optional<FlagList> load_pushed_flags(const std::string& path, const FlagList& config_flags) {
  auto text = read_file(path, 1 << 20);
  if (!text.ok()) return std::nullopt;
  auto j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.contains("flags") || !j["flags"].is_array()) {
    spdlog::warn("{}: not a flags file; ignoring it", path);
    return std::nullopt;
  }
  // Overrides apply to the config they were pushed on; a config whose own flags changed since wins.
  if (j.value("config_flags", json::array()) != json(config_flags.words())) {
    spdlog::info("{}: the config's flags changed since the last push; using the config", path);
    return std::nullopt;
  }
  // The file is read like a push: every word a string of printable text. One that is not is named, and the
  // file stays as it is (the config's flags run until the next push rewrites it).
  std::vector<std::string> words;
  const json& list = j["flags"];
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) {
      spdlog::warn("{}: flags[{}] is not a string; using the config's flags", path, i);
      return std::nullopt;
    }
    words.push_back(list[i].get<std::string>());
  }
  auto flags = FlagList::from_words(std::move(words), "flags");
  if (!flags.ok()) {
    spdlog::warn("{}: {}; using the config's flags", path, flags.error().message);
    return std::nullopt;
  }
  return std::move(*flags);
}

}  // namespace fr::supervisor
