// Checks before a flag push (issue 8, part 3): would vLLM start with these flags and this environment?
// Pure: the rules (vllm_rules.h), the version checked against, and the engine's command, flags and
// environment decide. Used by `fastrestartctl check`, by every reload before anything restarts, and by the
// config check (fastrestartd --check).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "supervisor/config.h"
#include "supervisor/engines/vllm/vllm_rules.h"

namespace fr::supervisor {

struct LintFinding {
  Severity severity = Severity::kError;
  std::string subject;  // what is at fault, as written: "--tokenizer-mode slow", "VLLM_PLE_CPU_OFFLOAD", ...
  std::string message;  // one line: the subject, what changed in which vLLM version, what to use instead
};

// The version a check is made against, and why that one.
struct LintTarget {
  VllmVersion version;
  std::string source;  // "reported by the engine at its last start", "engine.vllm_version", "assumed: ..."
};

// What the checkpoint's own files say that vLLM acts on without a flag: its quantization (config.json
// quantization_config, or ModelOpt's hf_quant_config.json) and architectures. Empty `source`: not read
// (the model is not a local directory, or it has no config.json).
struct CheckpointFacts {
  std::string source;        // the file the quantization was read from, for messages
  std::string quant_method;  // "" when unquantized
  std::string quant_algo;    // ModelOpt's quant_algo ("NVFP4"), else ""
  std::vector<std::string> architectures;
};

// Reads the facts of the model `flags` name (the positional model or --model, when a local directory).
// Unreadable or malformed files give empty facts: vLLM itself reports those when it starts.
CheckpointFacts read_checkpoint_facts(const FlagList& flags);

struct LintInput {
  std::vector<std::string> command;            // engine.command
  FlagList flags;                              // the engine flags to check
  std::map<std::string, std::string> env;      // engine.env
  std::map<std::string, std::string> inherited;  // VLLM_* of fastrestartd's own environment (reach the engine too)
  DaemonKind daemon = DaemonKind::kNative;
  WeightsMode mode = WeightsMode::kZeroCopy;
  CheckpointFacts checkpoint;                  // with vllm-preload: read_checkpoint_facts(flags)
};

// Picks the version: the engine's own report wins, then engine.vllm_version, then the rules' newest.
LintTarget lint_target(const VllmRules& rules, const std::string& reported, const std::string& configured);

// Every finding, errors first, in the order of the flags.
std::vector<LintFinding> lint_vllm(const VllmRules& rules, const LintTarget& target, const LintInput& in);

// A config's own command, flags and engine.env, against `engine.vllm_version` (or the rules' newest).
std::vector<LintFinding> lint_config(const Config& c, const VllmRules& rules);

bool has_errors(const std::vector<LintFinding>& findings);

// "refused: 2 problems (vLLM 0.31.0, reported by the engine ...): <message>; <message>" for replies and logs.
std::string describe_findings(const std::vector<LintFinding>& findings, const LintTarget& target);

// The VLLM_* variables of this process's environment.
std::map<std::string, std::string> vllm_environment();

}  // namespace fr::supervisor
