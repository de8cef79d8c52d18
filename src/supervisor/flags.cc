// Engine flags: sh-like splitting, a flag list model (name + values), merging pushes, and the daemon-affecting
// classification (ARCHITECTURE.md, "Config pushes"). How pushes behave for users: docs/config.md, "Engine flags".
#include "supervisor/flags.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string_view>

#include "common/control_chars.h"
#include "common/secrets.h"

namespace fr::supervisor {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// "-5" and "-.5" are values (--seed -1), "-" alone is a value (stdin); anything else starting with '-' is a flag.
bool is_flag_word(std::string_view w) {
  if (w.size() < 2 || w[0] != '-') return false;
  return !(std::isdigit(static_cast<unsigned char>(w[1])) != 0 || w[1] == '.');
}

// The same flag however it is spelled: vLLM's short aliases, and '_' for '-' in long names (vLLM's argument
// parser accepts both). Applied for every engine kind: a generic engine is unlikely to give -tp a meaning
// different from --tensor-parallel-size while also accepting both.
std::string canonical_name(std::string_view name) {
  static const std::map<std::string_view, std::string_view> kAliases = {
      {"-tp", "--tensor-parallel-size"},   {"-pp", "--pipeline-parallel-size"},    {"-dp", "--data-parallel-size"},
      {"-dpr", "--data-parallel-rank"},    {"-dpl", "--data-parallel-size-local"}, {"-q", "--quantization"},
      {"-ep", "--enable-expert-parallel"},
  };
  if (auto it = kAliases.find(name); it != kAliases.end()) return std::string(it->second);
  std::string n(name);
  if (n.starts_with("--")) std::replace(n.begin() + 2, n.end(), '_', '-');
  return n;
}

// Effective values per canonical name; a repeated flag takes its last occurrence (argparse: last wins).
// A positional the kind reads as a flag (`vllm serve MODEL` sets args.model, over any --model) is that flag.
std::map<std::string, std::vector<std::string>> effective(const FlagList& list, const FlagRules& rules) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& f : list.flags()) out[canonical_name(f.name)] = f.values;
  if (!rules.positional.empty()) {
    if (auto it = out.find(""); it != out.end()) {
      out[rules.positional] = it->second;
      out.erase(it);
    }
  }
  return out;
}

}  // namespace

std::string canonical_flag_name(std::string_view name) { return canonical_name(name); }

Result<std::vector<std::string>> split_flags(const std::string& s) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  auto unterminated = [&](const char* what, size_t at) {
    return make_error(Errc::kInvalidArgument, std::string("unterminated ") + what + " starting at character " +
                                                  std::to_string(at + 1) + " of: " + s);
  };
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    if (is_space(ch)) {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else if (ch == '\'') {
      size_t end = s.find('\'', i + 1);
      if (end == std::string::npos) return unterminated("single quote", i);
      cur.append(s, i + 1, end - i - 1);
      in_word = true;
      i = end;
    } else if (ch == '"') {
      size_t start = i++;
      for (;; ++i) {
        if (i >= s.size()) return unterminated("double quote", start);
        if (s[i] == '"') break;
        // Inside double quotes a backslash escapes only $ ` " \ and newline, as in sh.
        if (s[i] == '\\' && i + 1 < s.size() && std::string_view("$`\"\\\n").find(s[i + 1]) != std::string_view::npos) {
          ++i;
          if (s[i] == '\n') continue;
        }
        cur += s[i];
      }
      in_word = true;
    } else if (ch == '\\') {
      // The string is not quoted: it may hold a secret that cannot be split out of it.
      if (i + 1 >= s.size())
        return make_error(Errc::kInvalidArgument, "a backslash ends the string (character " + std::to_string(i) + ")");
      ++i;
      if (s[i] == '\n') continue;  // line continuation
      cur += s[i];
      in_word = true;
    } else {
      cur += ch;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

std::vector<Flag> parse_flag_list(const std::vector<std::string>& words) {
  std::vector<Flag> flags;
  for (const auto& w : words) {
    if (is_flag_word(w)) {
      Flag f;
      size_t eq = w.find('=');
      if (eq != std::string::npos) {
        f.name = w.substr(0, eq);
        f.values.push_back(w.substr(eq + 1));
        f.inline_value = true;
      } else {
        f.name = w;
      }
      flags.push_back(std::move(f));
    } else if (flags.empty()) {
      flags.push_back(Flag{"", {w}, false});  // positional before any flag (vllm serve MODEL)
    } else {
      flags.back().values.push_back(w);
    }
  }
  return flags;
}

std::vector<std::string> to_words(const std::vector<Flag>& flags) {
  std::vector<std::string> words;
  for (const auto& f : flags) {
    if (f.name.empty()) {
      words.insert(words.end(), f.values.begin(), f.values.end());
    } else if (f.inline_value && !f.values.empty()) {
      // "--x=1 2" keeps its shape: the words after the first belong to it too.
      words.push_back(f.name + "=" + f.values[0]);
      words.insert(words.end(), f.values.begin() + 1, f.values.end());
    } else {
      words.push_back(f.name);
      words.insert(words.end(), f.values.begin(), f.values.end());
    }
  }
  return words;
}

FlagList::FlagList(std::vector<Flag> flags) : m_flags(std::move(flags)), m_words(to_words(m_flags)) {}

Result<FlagList> FlagList::from_words(std::vector<std::string> words, const std::string& what) {
  FR_TRY(check_flag_words(words, what));
  FlagList out;
  out.m_flags = parse_flag_list(words);
  out.m_words = std::move(words);
  return out;
}

bool FlagList::has(std::string_view canonical) const {
  return std::any_of(m_flags.begin(), m_flags.end(), [&](const Flag& f) { return canonical_name(f.name) == canonical; });
}

std::string FlagList::value(std::string_view canonical) const { return last_flag_value(m_flags, canonical); }

std::string FlagList::positional() const {
  if (!m_flags.empty() && m_flags.front().name.empty() && !m_flags.front().values.empty()) return m_flags.front().values.front();
  return {};
}

FlagList FlagList::without(std::string_view canonical) const {
  std::vector<Flag> flags = m_flags;
  std::erase_if(flags, [&](const Flag& f) { return !f.name.empty() && canonical_name(f.name) == canonical; });
  return FlagList(std::move(flags));
}

FlagList FlagList::with(Flag f) const {
  std::vector<Flag> flags = m_flags;
  flags.push_back(std::move(f));
  return FlagList(std::move(flags));
}

std::vector<std::string> FlagList::redacted() const { return redact_flags(m_words); }

std::string FlagList::for_log() const { return words_for_log(m_words); }

FlagList FlagList::merged(const FlagList& push, PushKind kind) const {
  if (kind == PushKind::kReplace) return push;
  std::vector<Flag> flags = m_flags;
  auto same = [](const Flag& f, const std::string& name) { return canonical_name(f.name) == name; };
  if (kind == PushKind::kRemove) {
    // Names only: values in the push are ignored, and so are bare words (the positional model is changed
    // by --flags or --add-flags, never removed by accident).
    for (const auto& p : push.flags()) {
      if (p.name.empty()) continue;
      std::string name = canonical_name(p.name);
      std::erase_if(flags, [&](const Flag& f) { return same(f, name); });
    }
    return FlagList(std::move(flags));
  }
  for (auto p : push.flags()) {
    std::string name = canonical_name(p.name);
    auto it = std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return same(f, name); });
    if (it == flags.end()) {
      // A positional must stay in front, or it would read as the value of the flag before it.
      if (p.name.empty()) {
        flags.insert(flags.begin(), std::move(p));
      } else {
        flags.push_back(std::move(p));
      }
      continue;
    }
    *it = std::move(p);
    // Later occurrences of the same flag would win over the pushed one: drop them.
    size_t first = static_cast<size_t>(it - flags.begin());
    for (size_t i = flags.size(); i-- > first + 1;) {
      if (same(flags[i], name)) flags.erase(flags.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return FlagList(std::move(flags));
}

std::string last_flag_value(const std::vector<Flag>& flags, std::string_view canonical) {
  std::string v;
  for (const auto& f : flags)
    if (canonical_name(f.name) == canonical && !f.values.empty()) v = f.values.back();
  return v;
}

std::vector<std::string> daemon_affecting_changes(const FlagRules& rules, const FlagList& a, const FlagList& b,
                                                  const std::vector<std::string>& extra_daemon_flags) {
  // What a kind's daemon flags say: which checkpoint, how it is converted and how it is sharded. A positional
  // ("") the kind reads as a flag is folded into it.
  std::vector<std::string> watched = rules.daemon_flags;
  for (const auto& e : extra_daemon_flags) {
    std::string name = canonical_name(e);
    if (name.empty()) name = rules.positional;
    if (std::find(watched.begin(), watched.end(), name) == watched.end()) watched.push_back(std::move(name));
  }
  auto ea = effective(a, rules), eb = effective(b, rules);
  std::vector<std::string> changed;
  for (const auto& name : watched) {
    auto ia = ea.find(name), ib = eb.find(name);
    bool in_a = ia != ea.end(), in_b = ib != eb.end();
    if (in_a != in_b || (in_a && ia->second != ib->second)) changed.push_back(name);
  }
  return changed;
}

Status check_flag_words(const std::vector<std::string>& words, const std::string& what) {
  for (size_t i = 0; i < words.size(); ++i) {
    auto at = find_control_char(words[i]);
    if (!at) continue;
    // The word is quoted as redacted and escaped: it may be a secret's value, and it is about to be logged.
    // In context: the word may be the value of the flag before it.
    const std::string shown = escape_control_chars(redact_flags(words)[i].substr(0, 80));
    return make_error(Errc::kInvalidArgument,
                      what + "[" + std::to_string(i) + "] \"" + shown + "\": holds a control character (" +
                          control_char_name(words[i][*at]) + " at byte " + std::to_string(*at) +
                          "); flags must be printable text (a NUL would cut the argument short, a newline would start a "
                          "new log line)");
  }
  return {};
}

std::string words_for_log(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : redact_flags(words)) s += (s.empty() ? "" : " ") + w;
  return escape_control_chars(s);
}

std::vector<std::string> redact_flags(const std::vector<std::string>& words) {
  // The rule (common/secrets.h), then every value known to be secret (engine.secret_flags, engine.env): one
  // redaction for every exit.
  auto out = redact_words(words);
  for (auto& w : out) w = process_scrubber().scrub(w);
  return out;
}

}  // namespace fr::supervisor
