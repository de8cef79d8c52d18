// What fastrestart knows about vLLM, read from data/vllm.toml (compiled in) and optionally from a file of
// the operator's (engine.vllm_rules, appended): the daemon-affecting flags, what `vllm preload` gets, the
// removals and renames of each release, the failure messages and the startup report lines. The format is
// documented in the data file itself and in docs/vllm.md.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fastrestart/result.h"
#include "supervisor/engine_progress.h"
#include "supervisor/vllm_version.h"

namespace fr::supervisor {

enum class Severity { kError, kWarning };

struct RemovedRule {
  std::string flag;            // canonical (--a-b); or
  std::string env;             // an environment variable; or
  std::string command;         // a word of engine.command (a Python module entry point)
  std::string value;           // only when the flag's value equals this
  std::string value_contains;  // only when the flag's value contains this
  VllmVersion version;
  Severity severity = Severity::kError;
  std::string what, use, ref;
};

struct GatedRule {
  std::vector<std::string> when_any;  // canonical flag names
  std::string unless;
  VllmVersion version;
  Severity severity = Severity::kWarning;
  std::string what, use, ref;
};

struct AddedRule {
  std::vector<std::string> flags;
  VllmVersion version;
};

// A flag `vllm preload`'s setup refuses. With `allow` or `allow_prefix`, values outside them are refused
// (an allowlist); else with `values`, those values; else the flag's presence.
struct PreloadRefusal {
  std::string flag;
  std::vector<std::string> values;
  std::vector<std::string> allow;         // values accepted as they are
  std::vector<std::string> allow_prefix;  // values accepted when they start with one of these
  std::string mode;                       // empty: any weights.mode; else only this one
  std::string why;
};

// The quantization methods the ipc_cache loader loads (an allowlist: every other method raises
// UnsupportedQuantForIPCError, fallback or not). Unquantized is always allowed.
struct PreloadQuantization {
  std::vector<std::string> allow;             // --quantization values
  std::vector<std::string> checkpoint_allow;  // config.json quantization_config.quant_method, or "method:quant_algo"
  std::vector<std::string> except_architectures;  // quantized checkpoints of these are refused all the same
  std::string why;
};

struct FailureRule {
  std::vector<std::string> contains;  // all in one line
  std::string cause;                  // an exit_cause_name()
};

struct ReportRule {
  std::string field;     // "version", "model_runner", "weight_cache"
  std::string after;     // the value is the word after this
  std::string contains;  // or: the line contains this and means `value`
  std::string value;
};

struct ReportDefault {
  std::string field;
  VllmVersion since;
  std::string value;
};

struct VllmRules {
  VllmVersion newest;
  std::vector<std::string> daemon_flags;   // canonical names
  std::vector<std::string> preload_pass;   // canonical names
  VllmVersion preload_since;
  std::vector<PreloadRefusal> preload_refuse;
  PreloadQuantization preload_quantization;
  std::vector<std::string> preload_extra_config_keys;  // what the ipc_cache loader accepts in its extra config
  std::vector<RemovedRule> removed;
  std::vector<GatedRule> gated;
  std::vector<AddedRule> added;
  std::vector<FailureRule> failures;
  std::vector<ReportRule> reports;
  std::vector<ReportDefault> report_defaults;
  std::vector<ProgressPattern> progress;  // the engine's load progress lines ([[progress]])
};

// Parses a rules file. Errors name "<path>:<line>: <key>: <what>" (Errc::kInvalidArgument). A file of
// the operator's may leave out `newest`, [daemon] and [preload] (the built-in ones apply).
Result<VllmRules> parse_vllm_rules(std::string_view toml_text, const std::string& path);

// The rules compiled in from data/vllm.toml (parsed once; a broken built-in file fails the build's tests).
const VllmRules& builtin_vllm_rules();

// The built-in rules with `extra_path`'s appended (lists concatenated; its `newest` wins when later).
// Empty path: the built-in rules.
Result<VllmRules> load_vllm_rules(const std::string& extra_path);

}  // namespace fr::supervisor
