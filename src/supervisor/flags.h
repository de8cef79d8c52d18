// Engine flags: the checked, parsed list fastrestartd keeps (FlagList), merging a push (`fastrestartctl
// reload --flags/--add-flags/--remove-flags`) into it, and deciding whether the change touches what the
// weight daemons hold (ARCHITECTURE.md, "Config pushes").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fastrestart/result.h"

namespace fr::supervisor {

// Splits a shell-like string ("--max-num-seqs 128 --dtype 'bfloat16'") into words; quotes and
// backslashes as in sh, no expansion. Errc::kInvalidArgument for an unterminated quote.
Result<std::vector<std::string>> split_flags(const std::string& s);

// One flag: "--name" with its values ("--x=1" is name "--x", value "1"; "--flag" alone has no value). A
// positional before any flag (`vllm serve MODEL`) is a Flag with an empty name.
struct Flag {
  std::string name;
  std::vector<std::string> values;
  bool inline_value = false;  // written as --name=value
};
std::vector<Flag> parse_flag_list(const std::vector<std::string>& words);
// The words of `flags`; to_words(parse_flag_list(w)) == w for every w.
std::vector<std::string> to_words(const std::vector<Flag>& flags);
// The last value of the flag named `canonical` (its last occurrence: argparse's rule), or "".
std::string last_flag_value(const std::vector<Flag>& flags, std::string_view canonical);

// The same flag however it is spelled: vLLM's short aliases (-tp, -q, ...) expanded, '_' -> '-' in long
// names ("--max_num_seqs" is "--max-num-seqs"). "" (a positional) stays "".
std::string canonical_flag_name(std::string_view name);

// How a push changes the flags (FlagList::merged): --flags, --add-flags, --remove-flags.
enum class PushKind { kReplace, kAdd, kRemove };

// An engine's flags, read once where they enter fastrestartd (engine.flags of the config, a push on the
// control socket, the persisted flags.json) and kept in this form from there on: every word is printable
// text (check_flag_words), and the list is held both as the words the engine is given, exactly as written,
// and as parsed Flags for lookups, merging and comparisons. Equal lists have equal words.
class FlagList {
 public:
  FlagList() = default;
  // Errc::kInvalidArgument naming `what`[i] for a word with a control character (check_flag_words).
  static Result<FlagList> from_words(std::vector<std::string> words, const std::string& what);

  const std::vector<std::string>& words() const { return m_words; }
  const std::vector<Flag>& flags() const { return m_flags; }
  bool empty() const { return m_words.empty(); }

  // By canonical name (canonical_flag_name), however the list spells it.
  bool has(std::string_view canonical) const;
  std::string value(std::string_view canonical) const;  // last_flag_value
  // The leading positional's first word (`vllm serve MODEL`), or "".
  std::string positional() const;

  // The push applied (kReplace: `push` itself; kAdd: each pushed flag overrides the same name or is
  // appended, a positional stays in front; kRemove: every flag named in `push` is dropped, its values and
  // a positional ignored).
  FlagList merged(const FlagList& push, PushKind kind) const;
  // Every occurrence of the flag `canonical` dropped.
  FlagList without(std::string_view canonical) const;
  // `f` appended. Its words are fastrestartd's own (a number, a JSON dump): printable by construction.
  FlagList with(Flag f) const;

  // For /status, /metrics and logs: redact_flags and words_for_log of words().
  std::vector<std::string> redacted() const;
  std::string for_log() const;

  friend bool operator==(const FlagList& a, const FlagList& b) { return a.m_words == b.m_words; }

 private:
  explicit FlagList(std::vector<Flag> flags);
  std::vector<Flag> m_flags;
  std::vector<std::string> m_words;
};

// How an engine kind reads its flags for the weight daemons (EngineAdapter::flag_rules).
struct FlagRules {
  std::vector<std::string> daemon_flags;  // canonical names whose change reloads the daemons cold
  std::string positional;                 // the flag a leading positional word is ("--model": `vllm serve MODEL`); "": none
};

// Names of flags whose value differs between a and b and that change what the daemons hold: rules'
// daemon_flags and `extra_daemon_flags` (canonical or not; "" is the positional). vllm's are data
// ([daemon] flags in data/vllm.toml: the model and its positional, --revision, --dtype, --quantization, the
// parallel sizes, --load-format, ...); generic has none. Empty: only the engine needs a restart (warm).
std::vector<std::string> daemon_affecting_changes(const FlagRules& rules, const FlagList& a, const FlagList& b,
                                                  const std::vector<std::string>& extra_daemon_flags = {});

// Refuses words holding a raw control character (0x00-0x1f, 0x7f): a NUL would cut the exec argument
// short without a word, a newline or carriage return would forge log lines. Errc::kInvalidArgument
// naming the word by position: "<what>[2] \"--x\\ny\": holds a control character (\\n at byte 4) ...".
Status check_flag_words(const std::vector<std::string>& words, const std::string& what);

// The words for a log line: secrets redacted (redact_flags), joined by spaces, control characters escaped.
std::string words_for_log(const std::vector<std::string>& words);

// The words with every value of every secret flag replaced by "<redacted>" (fr::redact_words, the rule of
// common/secrets.h: --api-key, --api-keys, --apikey, --hf-token=V, every value of "--api-key A B"), then
// every secret the process knows (fr::process_scrubber: engine.secret_flags, engine.env) scrubbed, for
// /status, /metrics and logs (docs/reliability.md, "Secrets").
std::vector<std::string> redact_flags(const std::vector<std::string>& words);

}  // namespace fr::supervisor
