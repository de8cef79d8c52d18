#include "common/secrets.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <mutex>

namespace fr {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// "--Api_Key" -> "api-key": the spelling extra names are compared in.
std::string normal_flag_name(std::string_view name) {
  while (!name.empty() && name.front() == '-') name.remove_prefix(1);
  std::string out = lower(name);
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

bool is_secret_part(const std::string& part) {
  // Whole parts only: "tokens" (--max-num-batched-tokens) and "tokenizer" are not secrets.
  static constexpr std::string_view kWhole[] = {"auth", "authorization", "credential", "credentials", "passphrase"};
  // A part that is, or ends with, one of these: --api-key, --api-keys, --apikey, --hftoken, --db-password.
  static constexpr std::string_view kSuffixes[] = {"key",      "keys",      "token",  "secret", "secrets",
                                                   "password", "passwords", "passwd", "pwd"};
  for (auto w : kWhole)
    if (part == w) return true;
  for (auto s : kSuffixes)
    if (part.ends_with(s)) return true;
  return false;
}

// A word that starts a flag: "-x", "--x", "--x=v". "-5" and "-" are values.
bool is_flag_word(std::string_view w) {
  return w.size() > 1 && w[0] == '-' && !std::isdigit(static_cast<unsigned char>(w[1])) && w[1] != '.';
}

enum class Pos : unsigned char { kNone, kWhole, kAfterEq };

std::vector<Pos> positions(const std::vector<std::string>& words, const std::vector<std::string>& extra) {
  std::vector<Pos> pos(words.size(), Pos::kNone);
  size_t i = 0;
  while (i < words.size()) {
    const std::string& w = words[i];
    if (!is_flag_word(w)) {
      ++i;
      continue;
    }
    const size_t eq = w.find('=');
    if (!is_secret_flag(std::string_view(w).substr(0, eq), extra)) {
      ++i;
      continue;
    }
    if (eq != std::string::npos) {
      // argparse gives "--api-key=V" exactly one value; the words after it are not the flag's.
      pos[i] = Pos::kAfterEq;
      ++i;
      continue;
    }
    size_t j = i + 1;
    // The value position: a value even when it begins with '-' (but not a long flag: "--api-key --port 1").
    if (j < words.size() && !words[j].starts_with("--")) pos[j++] = Pos::kWhole;
    // vLLM's --api-key takes several values (nargs='+'): every word up to the next flag.
    while (j < words.size() && !is_flag_word(words[j])) pos[j++] = Pos::kWhole;
    i = j;
  }
  return pos;
}

}  // namespace

bool is_secret_flag(std::string_view name, const std::vector<std::string>& extra) {
  const std::string n = normal_flag_name(name);
  if (n.empty()) return false;
  for (const auto& e : extra)
    if (normal_flag_name(e) == n) return true;
  size_t start = 0;
  while (start <= n.size()) {
    size_t end = n.find('-', start);
    if (end == std::string::npos) end = n.size();
    if (end > start && is_secret_part(n.substr(start, end - start))) return true;
    start = end + 1;
  }
  return false;
}

std::vector<std::string> map_secret_values(const std::vector<std::string>& words,
                                           const std::function<std::string(std::string_view)>& f,
                                           const std::vector<std::string>& extra) {
  auto pos = positions(words, extra);
  std::vector<std::string> out;
  out.reserve(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    switch (pos[i]) {
      case Pos::kNone: out.push_back(words[i]); break;
      case Pos::kWhole: out.push_back(f(words[i])); break;
      case Pos::kAfterEq: {
        const size_t eq = words[i].find('=');
        out.push_back(words[i].substr(0, eq + 1) + f(std::string_view(words[i]).substr(eq + 1)));
        break;
      }
    }
  }
  return out;
}

std::vector<std::string> redact_words(const std::vector<std::string>& words, const std::vector<std::string>& extra) {
  return map_secret_values(words, [](std::string_view) { return std::string(kRedacted); }, extra);
}

std::vector<std::string> secret_values(const std::vector<std::string>& words, const std::vector<std::string>& extra) {
  auto pos = positions(words, extra);
  std::vector<std::string> out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (pos[i] == Pos::kWhole) out.push_back(words[i]);
    if (pos[i] == Pos::kAfterEq) out.push_back(words[i].substr(words[i].find('=') + 1));
  }
  return out;
}

std::string secret_digest(std::string_view value) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(value.data(), value.size(), 0)));
  return std::string("<secret xxh64:") + hex + ">";
}

bool is_secret_digest(std::string_view s) {
  return s.size() == 31 && s.starts_with("<secret xxh64:") && s.ends_with(">");
}

void SecretScrubber::add(std::string_view value) {
  if (value.size() < kMinScrubBytes || value == kRedacted || is_secret_digest(value)) return;
  std::vector<std::string> forms{std::string(value)};
  // As it appears inside a JSON dump (a status reply logged, a persisted file quoted in an error).
  std::string dumped = nlohmann::json(std::string(value)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  dumped = dumped.substr(1, dumped.size() - 2);
  if (dumped != value) forms.push_back(std::move(dumped));
  std::unique_lock lock(m_mu);
  for (auto& f : forms) {
    if (std::find(m_values.begin(), m_values.end(), f) != m_values.end()) continue;
    m_values.push_back(std::move(f));
  }
  std::stable_sort(m_values.begin(), m_values.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
}

void SecretScrubber::add(const std::vector<std::string>& values) {
  for (const auto& v : values) add(v);
}

bool SecretScrubber::scrub_into(std::string& s) const {
  bool changed = false;
  for (const auto& v : m_values) {
    size_t at = 0;
    while ((at = s.find(v, at)) != std::string::npos) {
      s.replace(at, v.size(), kRedacted);
      at += kRedacted.size();
      changed = true;
    }
  }
  return changed;
}

std::string SecretScrubber::scrub(std::string_view text) const {
  std::string s(text);
  std::shared_lock lock(m_mu);
  scrub_into(s);
  return s;
}

void SecretScrubber::scrub(nlohmann::json& j) const {
  std::shared_lock lock(m_mu);
  if (m_values.empty()) return;
  auto walk = [this](auto& self, nlohmann::json& v) -> void {
    if (v.is_string()) {
      scrub_into(v.get_ref<std::string&>());
    } else if (v.is_structured()) {
      for (auto& child : v) self(self, child);
    }
  };
  walk(walk, j);
}

bool SecretScrubber::empty() const {
  std::shared_lock lock(m_mu);
  return m_values.empty();
}

SecretScrubber& process_scrubber() {
  static SecretScrubber s;
  return s;
}

}  // namespace fr
