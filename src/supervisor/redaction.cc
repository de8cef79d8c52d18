#include "supervisor/redaction.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "common/secrets.h"
#include "supervisor/flags.h"

namespace fr::supervisor {

void register_secret_words(const std::vector<std::string>& words, const std::vector<std::string>& secret_flags) {
  process_scrubber().add(secret_values(words, secret_flags));
}

void register_pushed_secrets(const nlohmann::json& req, const std::vector<std::string>& secret_flags) {
  if (!req.is_object() || !req.contains("flags")) return;
  const nlohmann::json& f = req["flags"];
  std::vector<std::string> words;
  if (f.is_string()) {
    // An unsplittable one (an open quote) is refused with a message that does not quote it.
    if (auto split = split_flags(f.get<std::string>()); split.ok()) words = std::move(*split);
  } else if (f.is_array()) {
    for (const auto& w : f)
      if (w.is_string()) words.push_back(w.get<std::string>());
  }
  register_secret_words(words, secret_flags);
}

void register_secrets(const EngineConfig& engine) {
  register_secret_words(engine.command, engine.secret_flags);
  register_secret_words(engine.flags.words(), engine.secret_flags);
  for (const auto& [name, value] : engine.env)
    if (std::find(engine.public_env.begin(), engine.public_env.end(), name) == engine.public_env.end())
      process_scrubber().add(value);
}

std::vector<std::string> public_env_names(const EngineConfig& engine, const std::map<std::string, std::string>& env) {
  std::vector<std::string> out = engine.public_env;
  for (const auto& [name, value] : env)
    if (!engine.env.count(name)) out.push_back(name);
  return out;
}

namespace {

// Scrubs each message, then hands it to the sinks it wraps (which format it: the pattern is theirs).
class RedactingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit RedactingSink(std::vector<spdlog::sink_ptr> inner) : m_inner(std::move(inner)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string text = process_scrubber().scrub(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(text.data(), text.size());
    for (auto& s : m_inner)
      if (s->should_log(copy.level)) s->log(copy);
  }
  void flush_() override {
    for (auto& s : m_inner) s->flush();
  }
  void set_pattern_(const std::string& pattern) override {
    for (auto& s : m_inner) s->set_pattern(pattern);
  }
  void set_formatter_(std::unique_ptr<spdlog::formatter> f) override {
    for (auto& s : m_inner) s->set_formatter(f->clone());
  }

 private:
  std::vector<spdlog::sink_ptr> m_inner;
};

}  // namespace

void install_log_redaction() {
  auto logger = spdlog::default_logger();
  auto& sinks = logger->sinks();
  auto wrapped = std::make_shared<RedactingSink>(sinks);
  sinks = {wrapped};
}

}  // namespace fr::supervisor
