// Engine kinds (engine.kind): what the supervisor does differently for a kind of engine lives behind one
// interface, EngineAdapter, implemented once per kind in its own folder (generic/, vllm/) and listed in
// registry.cc. The Supervisor holds one adapter, made from its config, and asks it instead of testing the
// kind: which flags change what the weight daemons hold, its checks of the flags (at the config's check
// and before a push), what its output says (version, load progress, its own attach result, exit causes),
// the flag it takes its GPU memory share by, the model name readiness asks for, and what its own weight
// daemon (vLLM's `vllm preload`) is given. ARCHITECTURE.md, "How to add an engine kind".
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fastrestart/result.h"
#include "supervisor/classify.h"
#include "supervisor/config.h"
#include "supervisor/engine_progress.h"
#include "supervisor/flags.h"

namespace fr::supervisor {

// One problem a kind's flag check found.
struct FlagFinding {
  bool error = true;    // false: a warning (it starts, but behaves differently)
  std::string subject;  // as written: "--tokenizer-mode slow", "VLLM_PLE_CPU_OFFLOAD"
  std::string message;  // one line
};

struct FlagCheck {
  nlohmann::json checked_against = nullptr;  // {"version", "source"}; null: the kind has no rules
  std::vector<FlagFinding> findings;         // errors first
  std::string refusal;                       // with an error: every problem in one line, for replies and logs
  bool has_errors() const { return !refusal.empty(); }
};

// The engine's own word on its weights at readiness (EngineReport::attach_word).
struct AttachWord {
  std::string path;                 // "warm" | "cold"; "" when the engine said nothing
  std::string counted;              // the attach counter it feeds: hit | fallback | none
  std::vector<std::string> misses;  // miss reasons to count (bounded: 80 characters each)
  std::string miss_reason;          // why it did not attach, for status ("" when it did)
};

// What one engine process says about itself, read from its output lines (made by EngineAdapter::new_report).
class EngineReport {
 public:
  virtual ~EngineReport() = default;
  virtual void observe(const std::string& line) { (void)line; }
  // At readiness, before attach_word and to_json: fill in what the engine says nothing about.
  virtual void finish() {}
  virtual AttachWord attach_word() const { return {"", "none", {}, {}}; }
  // status engine.<kind> ("vllm": version, model runner, weight cache, loader results); null: nothing.
  virtual nlohmann::json to_json() const { return nullptr; }
};

// How the engine is to use its kind's own weight daemon for one start.
struct PreloadUse {
  bool serving = false;   // the daemon is up and ready
  bool strict = false;    // the first start on it: a mismatch fails instead of loading from disk
  bool fallback = true;   // weights.fallback
  WeightsMode mode = WeightsMode::kZeroCopy;
  std::string socket_dir;
};

class EngineAdapter {
 public:
  virtual ~EngineAdapter() = default;
  virtual EngineKind kind() const = 0;

  // Flags: which change what the daemons hold. The rules of an operator's file (vLLM: engine.vllm_rules)
  // are in them when the adapter was made from the config.
  virtual const FlagRules& flag_rules() const = 0;
  // The flag the engine's GPU memory fraction is passed by (engine_argv replaces any the flags hold).
  virtual std::string memory_flag() const { return "--gpu-memory-utilization"; }

  // The config's engine flags and environment, where fastrestartd checks a config (its start, --check, a
  // re-read on reload): errors as "<path>:<line>: <key>: <what>" (Errc::kInvalidArgument).
  virtual Status check_config(const Config& c) const {
    (void)c;
    return {};
  }
  // What --check prints as warnings (it starts, but behaves differently).
  virtual std::vector<std::string> config_warnings(const Config& c) const {
    (void)c;
    return {};
  }
  // Would the engine start with `flags`? `own_environment`: fastrestartd's own environment reaches the
  // engine (false for `fastrestartctl check --offline`). Uses what the engines reported (new_report).
  virtual FlagCheck check_flags(const Config& c, const FlagList& flags, bool own_environment) const {
    (void)c, (void)flags, (void)own_environment;
    return {};
  }

  // Output: a report per engine process (it may tell the adapter what it learned, e.g. its version, which
  // later checks use); the kind's own load progress lines; its exit messages for classify_exit.
  virtual std::unique_ptr<EngineReport> new_report() { return std::make_unique<EngineReport>(); }
  virtual std::optional<EngineProgress> progress(const std::string& line) const {
    (void)line;
    return std::nullopt;
  }
  virtual std::vector<OutputRule> failure_rules() const { return {}; }

  // Readiness: true when the engine's own report says whether it attached (consulted when no daemon
  // recorded its attach); the "model" of the readiness request when readiness.model is empty.
  virtual bool reports_attach() const { return false; }
  virtual std::string readiness_model(const FlagList& flags) const {
    (void)flags;
    return {};
  }

  // The model's directory or file on this host that the engine reads at its start, from its flags ("" when
  // the flags name none, or name a hub id): what a standby is checked against when weights.checkpoint is empty.
  virtual std::string local_model_path(const FlagList& flags) const {
    (void)flags;
    return {};
  }

  // The kind's own weight daemon (weights.daemon = "vllm-preload"): whether a flag of the engine (by its
  // canonical name) is passed to it, and the engine's flags for a start with it.
  virtual bool passes_to_preload(const std::string& canonical) const {
    (void)canonical;
    return false;
  }
  virtual void flags_for_preload(FlagList& flags, const PreloadUse& use) const { (void)flags, (void)use; }
};

// The registry (registry.cc): one entry per kind.
struct EngineKindEntry {
  EngineKind kind;
  // With the config's own rules files (vLLM: engine.vllm_rules); errors name the key.
  Result<std::unique_ptr<EngineAdapter>> (*make)(const Config& c);
  // With the built-in rules only.
  std::unique_ptr<EngineAdapter> (*make_builtin)();
};
std::span<const EngineKindEntry> engine_kinds();

// The adapter of c.engine.kind, with c's rules files. Errors: "<path>:<line>: <key>: <what>".
Result<std::unique_ptr<EngineAdapter>> make_engine_adapter(const Config& c);
// The adapter of `k` with its built-in rules: a new one, or the one made once (pure uses:
// daemon_affecting_changes).
std::unique_ptr<EngineAdapter> make_builtin_engine_adapter(EngineKind k);
const EngineAdapter& builtin_engine_adapter(EngineKind k);

// The kind's checks of a parsed config (EngineAdapter::check_config, after its rules files are read),
// run where fastrestartd checks a config: parse_config leaves them out, so it reads a config of any kind
// without its rules.
Status check_engine_config(const Config& c);

}  // namespace fr::supervisor
