// The engine's pushed flags on disk (<state_dir>/flags.json, docs/supervisor.md "Config pushes"): a push
// that became ready is written there, and the next fastrestartd starts on it, as long as the config's own
// flags are still those it was pushed on. The file may hold secrets (--api-key): it is private (0600).
#pragma once

#include <optional>
#include <string>

#include "fastrestart/result.h"
#include "supervisor/flags.h"

namespace fr::supervisor {

// Writes `flags` with the config's flags they were pushed on (atomically; the error names the file).
Status save_pushed_flags(const std::string& path, const FlagList& flags, const FlagList& config_flags);
// The pushed flags the file holds, when they were pushed on `config_flags`; nullopt without the file, or
// when it is not a flags file, holds a word that is not a printable string, or the config's flags changed
// since (each but the first logged with the reason: the config's flags run).
std::optional<FlagList> load_pushed_flags(const std::string& path, const FlagList& config_flags);

}  // namespace fr::supervisor
