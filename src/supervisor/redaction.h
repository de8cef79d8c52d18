// fastrestartd's side of the secrets rule (common/secrets.h; docs/reliability.md, "Secrets"): what it
// registers with fr::process_scrubber, and the exits that apply it (the log, STATUS=, control replies,
// hence /status and /metrics).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "supervisor/config.h"

namespace fr::supervisor {

// The secret values of `words` (the rule, and `secret_flags`: engine.secret_flags) into process_scrubber.
void register_secret_words(const std::vector<std::string>& words, const std::vector<std::string>& secret_flags);
// A control request's pushed flags, before anything reads it: a refusal, a rollback or the engine's own
// output may quote them. Read as leniently as possible (the request may be invalid).
void register_pushed_secrets(const nlohmann::json& req, const std::vector<std::string>& secret_flags);
// An engine config's: its command and flags by the rule, and every engine.env value not in public_env.
void register_secrets(const EngineConfig& engine);

// The variables of `env` whose values are not secret: engine.public_env, and those fastrestartd sets
// itself (any name not in engine.env: CUDA_VISIBLE_DEVICES, FASTRESTART_*).
std::vector<std::string> public_env_names(const EngineConfig& engine, const std::map<std::string, std::string>& env);

// Wraps the default logger's sinks so that every line is scrubbed before it is written: fastrestartd's
// own lines, and the engine's, the daemons' and the helper's output it copies in. Once, at startup.
void install_log_redaction();

}  // namespace fr::supervisor
