#include "support/fastrestartd_config.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

namespace fr::test {

FastrestartdConfig::FastrestartdConfig(std::string dir) : m_dir(std::move(dir)), m_control(m_dir + "/ctl/t.ctl") {
  m_sections.push_back({"", {}, {}});
}

FastrestartdConfig& FastrestartdConfig::set(const std::string& section, const std::string& key, std::string value) {
  Section& s = this->section(section);
  for (auto& [k, v] : s.keys)
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  s.keys.emplace_back(key, std::move(value));
  return *this;
}

FastrestartdConfig& FastrestartdConfig::lines(const std::string& section, const std::string& toml) {
  this->section(section).lines += toml;
  return *this;
}

FastrestartdConfig::Section& FastrestartdConfig::section(const std::string& name) {
  for (auto& each : m_sections)
    if (each.name == name) return each;
  return m_sections.emplace_back(Section{name, {}, {}});
}

FastrestartdConfig& FastrestartdConfig::tiny_engine(const TinyEngine& e) {
  std::vector<std::string> command = e.wrapper;
  command.insert(command.end(), {e.binary, "serve", e.model});
  std::vector<std::string> flags{"--port", std::to_string(e.port)};
  if (!e.host.empty()) flags.insert(flags.begin(), {"--host", e.host});
  if (!e.name.empty()) {
    text("model", "name", e.name);
    flags.insert(flags.end(), {"--served-model-name", e.name});
  }
  flags.insert(flags.end(), e.flags.begin(), e.flags.end());
  words("engine", "command", command);
  std::string rendered = array(flags);
  rendered.insert(rendered.size() - 1, e.more_flags);
  set("engine", "flags", rendered);
  if (!e.host.empty()) text("engine", "host", e.host);
  return number("engine", "port", e.port);
}

FastrestartdConfig& FastrestartdConfig::host_weights(const std::string& checkpoint, const std::string& socket_dir) {
  text("weights", "backend", "host");
  text("weights", "checkpoint", checkpoint);
  return text("weights", "socket_dir", socket_dir);
}

std::string FastrestartdConfig::toml() const {
  // The defaults go last, after what the test named: error messages name a key by its line, and a test
  // that asserts one counts lines from the top.
  FastrestartdConfig all = *this;
  auto fill = [&all](const std::string& section, const std::string& key, const std::string& value) {
    auto& s = all.section(section);
    for (const auto& [k, v] : s.keys)
      if (k == key) return;
    s.keys.emplace_back(key, quote(value));
  };
  fill("control", "socket", m_control);
  fill("control", "state_dir", m_dir + "/state");
  fill("http", "listen", "none");
  std::string out;
  for (const auto& s : all.m_sections) {
    if (s.name.empty() && s.keys.empty() && s.lines.empty()) continue;
    if (!s.name.empty()) out += "[" + s.name + "]\n";
    for (const auto& [k, v] : s.keys) out += k + " = " + v + "\n";
    out += s.lines;
  }
  return out + m_tail;
}

std::string FastrestartdConfig::write(const std::string& path) const {
  const std::string to = path.empty() ? m_dir + "/t.toml" : path;
  std::ofstream(to, std::ios::trunc) << toml();
  return to;
}

// A JSON string is a TOML basic string for everything a test writes (paths, names, flags).
std::string FastrestartdConfig::quote(const std::string& s) { return nlohmann::json(s).dump(); }

std::string FastrestartdConfig::array(const std::vector<std::string>& words) {
  std::string out = "[";
  for (size_t i = 0; i < words.size(); ++i) out += (i ? ", " : "") + quote(words[i]);
  return out + "]";
}

std::unique_ptr<Supervised> start_fastrestartd(const std::string& binary, const FastrestartdConfig& config,
                                               const std::string& log, const std::string& fake_nvml) {
  auto sup = std::make_unique<Supervised>(binary, config.write(), config.control(), config.dir() + "/" + log);
  if (!fake_nvml.empty()) ::setenv("FASTRESTART_FAKE_NVML", fake_nvml.c_str(), 1);
  sup->start();
  if (!fake_nvml.empty()) ::unsetenv("FASTRESTART_FAKE_NVML");
  return sup;
}

}  // namespace fr::test
