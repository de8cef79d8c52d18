// The config file of a fastrestartd under test, built by section and rendered as TOML, and the start of a
// fastrestartd on it: what the end-to-end fixtures share instead of each writing the TOML by hand.
#pragma once

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/supervised.h"

namespace fr::test {

// The tiny engine as fastrestartd's engine (FastrestartdConfig::tiny_engine).
struct TinyEngine {
  std::string binary{};               // fastrestart-tinyengine
  std::string model{};                // the checkpoint it serves
  uint16_t port = 0;                  // --port and engine.port
  std::string host{};                 // --host (before --port) and engine.host; empty: neither is set
  std::string name = "t";             // model.name and --served-model-name; empty: neither is set
  std::vector<std::string> wrapper{}; // words engine.command runs the tiny engine through
  std::vector<std::string> flags{};   // more flags, after --port and --served-model-name
  std::string more_flags{};           // TOML array items after `flags`, each led by ", " (a fixture's option)
};

// Keys by section ("" is the top level, "engine.env" a sub-table), each key set once: a later set of the same
// key replaces its value in place. Rendered with the top-level keys first, then the sections in the order
// they were first named, one `key = value` line each (so a test can count the line an error names). The
// control socket is <dir>/ctl/t.ctl, the state directory <dir>/state and the HTTP listener "none" unless
// set otherwise; those defaults are written last.
class FastrestartdConfig {
 public:
  explicit FastrestartdConfig(std::string dir);

  // `value` as TOML writes it (a number, an array, an inline table, a quoted string).
  FastrestartdConfig& set(const std::string& section, const std::string& key, std::string value);
  // A string, quoted and escaped.
  FastrestartdConfig& text(const std::string& section, const std::string& key, const std::string& value) {
    return set(section, key, quote(value));
  }
  // A number, written as an ostream writes it (0.05, 50).
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>>>
  FastrestartdConfig& number(const std::string& section, const std::string& key, T value) {
    std::ostringstream s;
    s << value;
    return set(section, key, s.str());
  }
  // An array of strings.
  FastrestartdConfig& words(const std::string& section, const std::string& key, const std::vector<std::string>& value) {
    return set(section, key, array(value));
  }
  // `toml` (whole `key = value` lines, each ending in a newline) written as is at the end of `section`:
  // a fixture's option that holds lines of a section.
  FastrestartdConfig& lines(const std::string& section, const std::string& toml);
  // TOML written as is after every section (array tables such as [[weights.daemons]]).
  FastrestartdConfig& append(const std::string& toml) {
    m_tail += toml;
    return *this;
  }

  // model.name, engine.command, engine.flags and engine.port for the tiny engine.
  FastrestartdConfig& tiny_engine(const TinyEngine& e);
  // weights.backend = "host" holding `checkpoint`, its socket in `socket_dir`.
  FastrestartdConfig& host_weights(const std::string& checkpoint, const std::string& socket_dir);
  // control.socket at `path` (what start_fastrestartd speaks to).
  FastrestartdConfig& control_socket(const std::string& path) {
    m_control = path;
    return text("control", "socket", path);
  }
  // http.listen on 127.0.0.1:`port`.
  FastrestartdConfig& http(uint16_t port) { return text("http", "listen", "127.0.0.1:" + std::to_string(port)); }

  const std::string& dir() const { return m_dir; }
  const std::string& control() const { return m_control; }
  std::string toml() const;
  // Writes toml() to `path` (default <dir>/t.toml) and returns the path.
  std::string write(const std::string& path = "") const;

  static std::string quote(const std::string& s);
  static std::string array(const std::vector<std::string>& words);

 private:
  struct Section {
    std::string name;
    std::vector<std::pair<std::string, std::string>> keys;
    std::string lines;
  };
  Section& section(const std::string& name);
  std::string m_dir, m_control;
  std::vector<Section> m_sections;  // [0] is the top level
  std::string m_tail;
};

// Writes `config` (to <dir>/t.toml) and starts `binary` (fastrestartd) on it, its log in <dir>/`log`; with
// `fake_nvml`, fastrestartd reads its GPUs from that file (FASTRESTART_FAKE_NVML, set for its start only).
std::unique_ptr<Supervised> start_fastrestartd(const std::string& binary, const FastrestartdConfig& config,
                                               const std::string& log = "d.log", const std::string& fake_nvml = "");

}  // namespace fr::test
