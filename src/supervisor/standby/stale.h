// When a standby no longer matches the start it would serve (docs/standby.md): it was started on other
// flags, on another config besides them (a re-read config changes these under the running engine, which
// keeps them until its next start: a standby must start as that next engine would), or the model's files
// changed (it read their config, tokenizer and chat template, and warmed mapped its weights).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "common/file_identity.h"
#include "supervisor/config.h"
#include "supervisor/flags.h"

namespace fr::supervisor {

// What shapes a start besides the flags, by config key (engine.command, engine.env, engine.working_dir,
// engine.cgroup, memory.utilization): recorded at a standby's spawn.
std::map<std::string, std::string> standby_launch_config(const Config& c);

// Why a standby started on `flags`, `launch` (standby_launch_config then) and `files` (the model's
// identities then) no longer matches a start on `flags_now` and `cfg_now`; "" when it does. `files_now`
// reads the disk: it is called only once the flags and config match.
std::string standby_stale_reason(const FlagList& flags, const std::map<std::string, std::string>& launch,
                                 const std::map<std::string, FileIdentity>& files, const FlagList& flags_now,
                                 const Config& cfg_now, const std::function<std::map<std::string, FileIdentity>()>& files_now);

}  // namespace fr::supervisor
