// What is secret in an engine's command line and environment, and the one redaction applied wherever text
// leaves fastrestartd (docs/reliability.md, "Secrets").
//
// The rule: a flag is secret when a '-'/'_'-separated part of its name is, or ends with, key(s), token,
// secret(s), password(s), passwd, credential(s), or is auth/authorization (--api-key, --api-keys, --apikey,
// --hf-token, --db_password), or when its canonical spelling is one of `extra` (the config's
// engine.secret_flags). --tokenizer, --max-tokens or --ssl-keyfile are not. Every value of a secret flag is
// secret: "--api-key=V", and "--api-key V1 V2 ..." up to the next flag (vLLM's --api-key takes several);
// the first value after the name is a value even when it begins with a single '-'.
//
// Values found by the rule feed a SecretScrubber, which replaces every occurrence of each in any text: the
// values are then gone from text the rule cannot parse (an engine's output, an error message, a JSON dump).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

namespace fr {

inline constexpr std::string_view kRedacted = "<redacted>";

// True when the flag `name` ("--api-key", "api_key"; leading dashes ignored) names a secret.
bool is_secret_flag(std::string_view name, const std::vector<std::string>& extra = {});

// `words` with every secret value replaced by "<redacted>" ("--api-key=<redacted>" for the inline form).
std::vector<std::string> redact_words(const std::vector<std::string>& words, const std::vector<std::string>& extra = {});

// The secret values of `words` (for a SecretScrubber).
std::vector<std::string> secret_values(const std::vector<std::string>& words, const std::vector<std::string>& extra = {});

// `words` with every secret value v replaced by f(v) (redact_words is f = "<redacted>").
std::vector<std::string> map_secret_values(const std::vector<std::string>& words,
                                           const std::function<std::string(std::string_view)>& f,
                                           const std::vector<std::string>& extra = {});

// A stand-in for a secret that still tells two values apart: "<secret xxh64:0123456789abcdef>". Used where
// a difference must be shown (a snapshot's recorded identity against the current one).
std::string secret_digest(std::string_view value);
bool is_secret_digest(std::string_view s);

// The secret values known to this process, and their removal from text. Values shorter than
// kMinScrubBytes are not scrubbed from free text (they would rewrite common words and numbers); the rule
// still redacts them where it parses flags. Thread-safe: the log sink and the HTTP thread read it.
class SecretScrubber {
 public:
  static constexpr size_t kMinScrubBytes = 6;

  void add(std::string_view value);
  void add(const std::vector<std::string>& values);
  // `text` with every known secret replaced by "<redacted>".
  std::string scrub(std::string_view text) const;
  // Every string value of `j` scrubbed, in place (object keys are fastrestartd's own names).
  void scrub(nlohmann::json& j) const;
  bool empty() const;

 private:
  bool scrub_into(std::string& s) const;  // with the lock held
  mutable std::shared_mutex m_mu;
  std::vector<std::string> m_values;  // longest first, so a secret holding another is replaced whole
};

// The process's scrubber: what fastrestartd registers (config, pushes) and every exit applies.
SecretScrubber& process_scrubber();

}  // namespace fr
