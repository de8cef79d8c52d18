#include "supervisor/standby/stale.h"

#include <nlohmann/json.hpp>

#include "supervisor/standby/model_files.h"

namespace fr::supervisor {

std::map<std::string, std::string> standby_launch_config(const Config& c) {
  using nlohmann::json;
  return {{"engine.command", json(c.engine.command).dump()}, {"engine.env", json(c.engine.env).dump()},
          {"engine.working_dir", c.engine.working_dir},      {"engine.cgroup", c.engine.cgroup},
          {"memory.utilization", json(c.memory.utilization).dump()}};
}

std::string standby_stale_reason(const FlagList& flags, const std::map<std::string, std::string>& launch,
                                 const std::map<std::string, FileIdentity>& files, const FlagList& flags_now,
                                 const Config& cfg_now, const std::function<std::map<std::string, FileIdentity>()>& files_now) {
  if (flags != flags_now) return "the standby was started on other flags";
  const auto now = standby_launch_config(cfg_now);
  for (const auto& [key, value] : launch)
    if (now.at(key) != value) return key + " changed since the standby started (the config was re-read)";
  if (auto c = model_files_change(files, files_now()); !c.empty())
    return "the checkpoint changed since the standby started (" + c + ")";
  return {};
}

}  // namespace fr::supervisor
