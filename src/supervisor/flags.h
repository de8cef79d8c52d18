// Engine flags: merging a push (`fastrestartctl reload --flags/--add-flags/--remove-flags`) into the
// current flags, and deciding whether the change touches what the weight daemons hold (ARCHITECTURE.md, "Config pushes").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fastrestart/result.h"
#include "supervisor/config.h"

namespace fr::supervisor {

// Splits a shell-like string ("--max-num-seqs 128 --dtype 'bfloat16'") into words; quotes and
// backslashes as in sh, no expansion. Errc::kInvalidArgument for an unterminated quote.
Result<std::vector<std::string>> split_flags(const std::string& s);

// One flag: "--name" with its values ("--x=1" is name "--x", value "1"; "--flag" alone has no value).
struct Flag {
  std::string name;
  std::vector<std::string> values;
  bool inline_value = false;  // written as --name=value
};
std::vector<Flag> parse_flag_list(const std::vector<std::string>& words);
std::vector<std::string> to_words(const std::vector<Flag>& flags);
// The last value of the flag named `canonical` (its last occurrence: argparse's rule), or "".
std::string last_flag_value(const std::vector<Flag>& flags, const std::string& canonical);

// The same flag however it is spelled: vLLM's short aliases (-tp, -q, ...) expanded, '_' -> '-' in long
// names ("--max_num_seqs" is "--max-num-seqs"). "" (a positional) stays "".
std::string canonical_flag_name(std::string_view name);

enum class PushKind { kReplace, kAdd, kRemove };
// kReplace: `flags` replace the whole list. kAdd: each flag in `flags` overrides the same name or is
// appended. kRemove: every flag whose name is in `flags` is dropped.
std::vector<std::string> merge_flags(const std::vector<std::string>& current, const std::vector<std::string>& push, PushKind kind);

// How an engine kind reads its flags for the weight daemons (EngineAdapter::flag_rules).
struct FlagRules {
  std::vector<std::string> daemon_flags;  // canonical names whose change reloads the daemons cold
  std::string positional;                 // the flag a leading positional word is ("--model": `vllm serve MODEL`); "": none
};

// Names of flags whose value differs between a and b and that change what the daemons hold: rules'
// daemon_flags and `extra_daemon_flags` (canonical or not; "" is the positional). vllm's are data
// ([daemon] flags in data/vllm.toml: the model and its positional, --revision, --dtype, --quantization, the
// parallel sizes, --load-format, ...); generic has none. Empty: only the engine needs a restart (warm).
std::vector<std::string> daemon_affecting_changes(const FlagRules& rules, const std::vector<std::string>& a,
                                                  const std::vector<std::string>& b,
                                                  const std::vector<std::string>& extra_daemon_flags = {});
// The same with `kind`'s built-in rules (engines/engine_kind.h).
std::vector<std::string> daemon_affecting_changes(EngineKind kind, const std::vector<std::string>& a,
                                                  const std::vector<std::string>& b,
                                                  const std::vector<std::string>& extra_daemon_flags = {});

// Refuses words holding a raw control character (0x00-0x1f, 0x7f): a NUL would cut the exec argument
// short without a word, a newline or carriage return would forge log lines. Errc::kInvalidArgument
// naming the word by position: "<what>[2] \"--x\\ny\": holds a control character (\\n at byte 4) ...".
Status check_flag_words(const std::vector<std::string>& words, const std::string& what);

// The words for a log line: secrets redacted (redact_flags), joined by spaces, control characters escaped.
std::string words_for_log(const std::vector<std::string>& words);

// The words with the value of every secret-bearing flag replaced by "<redacted>", for /status, /metrics
// and logs (docs/reliability.md, "Secrets"). A flag is secret when a '-'/'_'-separated part of its name
// is key, token, secret, password, passwd, credential(s) or auth (--api-key, --hf-token, --db_password);
// --tokenizer or --max-num-batched-tokens are not. Both "--api-key V" and "--api-key=V" are covered.
std::vector<std::string> redact_flags(const std::vector<std::string>& words);

}  // namespace fr::supervisor
