// Config parsing: a table of sections, each a table of keys with a setter that type-checks and range-checks
// one value; then the rules that span keys. Every key, its default and why: docs/config.md.
#include "supervisor/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <span>

#include "supervisor/flags.h"
#include "supervisor/vllm_version.h"  // engine.vllm_version's syntax

namespace fr::supervisor {
namespace {

constexpr size_t kMaxSocketPath = 107;  // sizeof(sockaddr_un::sun_path) - 1

std::string fmt_number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string in_quotes(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string join(std::span<const char* const> names, const char* sep = ", ") {
  std::string out;
  for (const char* n : names) {
    if (!out.empty()) out += sep;
    out += in_quotes(n);
  }
  return out;
}

int64_t line_of(const toml::source_region& r) { return std::max<int64_t>(1, r.begin.line); }

// What the user wrote, for messages: `string "abc"`, `integer 5`, `an array`.
std::string describe(const toml::node& n) {
  if (auto s = n.as_string()) return "string " + in_quotes(s->get());
  if (auto i = n.as_integer()) return "integer " + std::to_string(i->get());
  if (auto f = n.as_floating_point()) return "float " + fmt_number(f->get());
  if (auto b = n.as_boolean()) return std::string("boolean ") + (b->get() ? "true" : "false");
  if (n.is_array()) return "an array";
  if (n.is_table()) return "a table";
  return "a date or time";
}

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}
bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "GPU-" then a UUID: 8-4-4-4-12 hex digits (what nvidia-smi -L and NVML print).
bool is_gpu_uuid(std::string_view s) {
  if (!s.starts_with("GPU-")) return false;
  s.remove_prefix(4);
  static constexpr size_t kGroups[] = {8, 4, 4, 4, 12};
  for (size_t i = 0; i < 5; ++i) {
    if (s.size() < kGroups[i] || !is_hex(s.substr(0, kGroups[i]))) return false;
    s.remove_prefix(kGroups[i]);
    if (i < 4) {
      if (s.empty() || s[0] != '-') return false;
      s.remove_prefix(1);
    }
  }
  return s.empty();
}

// A name that is safe inside file names (<name>.ctl, /var/lib/fastrestart/<name>).
bool is_safe_name(std::string_view s) {
  if (s.empty() || s.size() > 100 || s[0] == '.' || s[0] == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
  });
}

bool is_env_name(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])) != 0) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; });
}

// "host:port", "[v6]:port" or "none".
bool is_listen_address(std::string_view s) {
  if (s == "none") return true;
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = s.substr(0, colon), port = s.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return false;
  } else if (host.find(':') != std::string_view::npos) {
    return false;  // an IPv6 address needs brackets
  }
  if (!is_digits(port) || port.size() > 5) return false;
  int p = std::stoi(std::string(port));
  return p >= 1 && p <= 65535;
}

// One value in the file and its dotted key ("engine.port", "gpus[1]"); errors carry path:line and the key.
class Value {
 public:
  Value(const std::string& path, std::string key, const toml::node& node)
      : m_path(path), m_key(std::move(key)), m_node(node) {}

  const toml::node& node() const { return m_node; }
  const std::string& path() const { return m_path; }
  int64_t line() const { return line_of(m_node.source()); }

  Error fail(const std::string& what) const {
    return make_error(Errc::kInvalidArgument, m_path + ":" + std::to_string(line()) + ": " + m_key + ": " + what);
  }
  Error type_error(const char* expected) const {
    return fail(std::string("expected ") + expected + ", got " + describe(m_node));
  }
  Value element(size_t i, const toml::node& n) const { return Value(m_path, m_key + "[" + std::to_string(i) + "]", n); }
  Value member(std::string_view k, const toml::node& n) const { return Value(m_path, m_key + "." + std::string(k), n); }

  Result<std::string> string() const {
    if (auto s = m_node.as_string()) return s->get();
    return type_error("a string");
  }
  Result<bool> boolean() const {
    if (auto b = m_node.as_boolean()) return b->get();
    return type_error("a boolean (true or false)");
  }
  Result<int64_t> integer() const {
    if (auto i = m_node.as_integer()) return i->get();
    return type_error("an integer");
  }
  Result<double> number() const {
    double v = 0;
    if (auto i = m_node.as_integer()) {
      v = static_cast<double>(i->get());
    } else if (auto f = m_node.as_floating_point()) {
      v = f->get();
    } else {
      return type_error("a number");
    }
    if (!std::isfinite(v)) return fail("must be a finite number, got " + fmt_number(v));
    return v;
  }

  Result<int> int_in(int64_t lo, int64_t hi) const {
    FR_ASSIGN(int64_t v, integer());
    if (v < lo || v > hi) {
      std::string range =
          hi == INT32_MAX ? ">= " + std::to_string(lo) : "in " + std::to_string(lo) + ".." + std::to_string(hi);
      return fail("must be an integer " + range + ", got " + std::to_string(v));
    }
    return static_cast<int>(v);
  }
  Result<int> int_at_least(int64_t lo) const { return int_in(lo, INT32_MAX); }
  // A byte count in lo..hi (wider than int_in's int).
  Result<int64_t> integer_in(int64_t lo, int64_t hi) const {
    FR_ASSIGN(int64_t v, integer());
    if (v < lo || v > hi)
      return fail("must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
    return v;
  }
  Result<double> positive() const {
    FR_ASSIGN(double v, number());
    if (!(v > 0)) return fail("must be a number > 0, got " + fmt_number(v));
    return v;
  }
  Result<double> non_negative() const {
    FR_ASSIGN(double v, number());
    if (v < 0) return fail("must be a number >= 0, got " + fmt_number(v));
    return v;
  }
  Result<double> at_least(double lo) const {
    FR_ASSIGN(double v, number());
    if (v < lo) return fail("must be a number >= " + fmt_number(lo) + ", got " + fmt_number(v));
    return v;
  }
  // Index into `allowed` of the string value.
  Result<size_t> choice(std::span<const char* const> allowed) const {
    FR_ASSIGN(std::string s, string());
    size_t i = 0;
    for (const char* a : allowed) {
      if (s == a) return i;
      ++i;
    }
    return fail("must be one of " + join(allowed) + ", got " + in_quotes(s));
  }
  Result<std::vector<std::string>> strings() const {
    auto arr = m_node.as_array();
    if (!arr) return type_error("an array of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < arr->size(); ++i) {
      FR_ASSIGN(std::string s, element(i, *arr->get(i)).string());
      out.push_back(std::move(s));
    }
    return out;
  }
  Result<std::map<std::string, std::string>> string_table() const {
    auto t = m_node.as_table();
    if (!t) return type_error("a table of strings");
    std::map<std::string, std::string> out;
    for (auto&& [k, n] : *t) {
      Value v = member(k.str(), n);
      if (k.str().empty()) return v.fail("empty key");
      FR_ASSIGN(std::string s, v.string());
      out.emplace(std::string(k.str()), std::move(s));
    }
    return out;
  }
  Result<std::string> nonempty_string() const {
    FR_ASSIGN(std::string s, string());
    if (s.empty()) return fail("must not be empty");
    return s;
  }
  Result<double> fraction() const {
    FR_ASSIGN(double u, number());
    if (!(u > 0 && u <= 1)) return fail("must be a fraction in (0, 1], got " + fmt_number(u));
    return u;
  }
  Result<std::string> vllm_version() const {
    FR_ASSIGN(std::string s, string());
    if (!s.empty() && !VllmVersion::parse(s)) return fail("must be a vLLM version like \"0.31.0\" (or empty), got " + in_quotes(s));
    return s;
  }
  Result<std::vector<std::string>> command() const {
    FR_ASSIGN(auto argv, strings());
    if (argv.empty()) return fail("must not be empty: the program and its base arguments");
    if (argv[0].empty()) return fail("the program (first element) is empty");
    return argv;
  }
  Result<std::string> file_name() const {
    FR_ASSIGN(std::string s, string());
    if (!is_safe_name(s)) {
      return fail(
          "must be 1..100 of letters, digits, '.', '_', '-', not starting with '.' or '-' (it names "
          "files), got " +
          in_quotes(s));
    }
    return s;
  }
  Result<std::string> url_path() const {
    FR_ASSIGN(std::string s, string());
    if (!s.starts_with('/')) return fail("must start with '/', got " + in_quotes(s));
    return s;
  }
  Result<std::string> url_path_or_empty() const {
    FR_ASSIGN(std::string s, string());
    if (!s.empty() && !s.starts_with('/')) return fail("must be empty or start with '/', got " + in_quotes(s));
    return s;
  }
  Result<std::string> listen_address() const {
    FR_ASSIGN(std::string s, string());
    if (!is_listen_address(s)) {
      return fail("must be \"host:port\" (port 1..65535, IPv6 as \"[::1]:9400\") or \"none\", got " + in_quotes(s));
    }
    return s;
  }
  Result<std::string> socket_path() const {
    FR_ASSIGN(std::string s, absolute_path());
    if (s.size() > kMaxSocketPath) {
      return fail("a Unix socket path has at most " + std::to_string(kMaxSocketPath) + " bytes, got " +
                  std::to_string(s.size()));
    }
    return s;
  }
  // "" or an absolute path.
  Result<std::string> absolute_path() const {
    FR_ASSIGN(std::string s, string());
    if (!s.empty() && s[0] != '/')
      return fail("must be an absolute path (or empty for the default), got " + in_quotes(s));
    return s;
  }

 private:
  const std::string& m_path;
  std::string m_key;
  const toml::node& m_node;
};

// The allowed strings of each choice, in enum order.
constexpr const char* kModes[] = {"zero_copy", "copy", "off"};
constexpr const char* kDaemons[] = {"native", "none", "vllm-preload"};
constexpr const char* kBackends[] = {"cuda", "host"};
constexpr const char* kStandbyLevels[] = {"pre_gpu", "warmed"};
constexpr const char* kLevels[] = {"trace", "debug", "info", "warn", "error"};
constexpr const char* kListens[] = {"engine", "supervisor", "front"};
constexpr const char* kEndpoints[] = {"public", "private"};
// A table one name short of its enum would read past its end: each covers its enum to the last enumerator.
template <typename E>
constexpr bool covers(size_t names, E last) { return names == static_cast<size_t>(last) + 1; }
static_assert(covers(std::size(kModes), WeightsMode::kOff));
static_assert(covers(std::size(kDaemons), DaemonKind::kVllmPreload));
static_assert(covers(std::size(kStandbyLevels), StandbyLevel::kWarmed));
static_assert(covers(std::size(kListens), EngineListen::kFront));
static_assert(covers(std::size(kEndpoints), ReadinessEndpoint::kPrivate));

Status set_gpus(const Value& v, Config& c) {
  auto arr = v.node().as_array();
  if (!arr) return v.type_error("an array of GPU indexes or \"GPU-<uuid>\" strings");
  c.gpus.clear();
  for (size_t i = 0; i < arr->size(); ++i) {
    Value e = v.element(i, *arr->get(i));
    std::string id;
    if (auto n = e.node().as_integer()) {
      if (n->get() < 0) return e.fail("a GPU index must be >= 0, got " + std::to_string(n->get()));
      id = std::to_string(n->get());
    } else if (auto s = e.node().as_string()) {
      id = s->get();
      if (!is_digits(id) && !is_gpu_uuid(id)) {
        return e.fail(
            "must be a GPU index (\"0\") or a GPU UUID (\"GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\", as "
            "nvidia-smi -L prints), got " +
            in_quotes(id));
      }
    } else {
      return e.type_error("a GPU index or a \"GPU-<uuid>\" string");
    }
    if (std::find(c.gpus.begin(), c.gpus.end(), id) != c.gpus.end())
      return e.fail("GPU " + in_quotes(id) + " listed twice");
    c.gpus.push_back(std::move(id));
  }
  return {};
}

constexpr const char* kReservedEnv[] = {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID",
                                        "LISTEN_FDS",    "LISTEN_PID",    "LISTEN_FDNAMES"};

Status set_env(const Value& v, Config& c) {
  FR_ASSIGN(auto env, v.string_table());
  auto t = v.node().as_table();
  for (const auto& [name, value] : env) {
    Value e = v.member(name, *t->get(name));
    if (!is_env_name(name)) return e.fail("not a valid environment variable name (letters, digits, _)");
    for (const char* r : kReservedEnv) {
      if (name == r) return e.fail("is never passed to the engine (it belongs to fastrestartd's systemd unit)");
    }
    if (name == "CUDA_VISIBLE_DEVICES") return e.fail("is set by fastrestartd from gpus: list the GPUs in gpus");
  }
  c.engine.env = std::move(env);
  return {};
}

Status set_checkpoint(const Value& v, Config& c) {
  std::vector<std::string> files;
  if (auto s = v.node().as_string()) {
    files.push_back(s->get());
  } else if (v.node().is_array()) {
    FR_ASSIGN(files, v.strings());
  } else {
    return v.type_error("a path or an array of paths");
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i].empty())
      return (v.node().is_array() ? v.element(i, *v.node().as_array()->get(i)) : v).fail("empty path");
  }
  c.weights.checkpoint = std::move(files);
  return {};
}

Status set_start(const Value& v, Config& c) {
  auto arr = v.node().as_array();
  if (!arr) return v.type_error(("an array of " + join(start_path_names())).c_str());
  if (arr->empty()) return v.fail("must name at least one start path (" + join(start_path_names()) + ")");
  std::vector<StartPath> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    Value e = v.element(i, *arr->get(i));
    FR_ASSIGN(size_t k, e.choice(start_path_names()));
    const StartPath p(start_path_names()[k]);
    if (std::find(out.begin(), out.end(), p) != out.end()) {
      return e.fail(in_quotes(start_path_name(p)) + " listed twice");
    }
    out.push_back(p);
  }
  c.restart.start = std::move(out);
  return {};
}

using Setter = Status (*)(const Value&, Config&);
struct KeySpec {
  const char* name;
  Setter set;
};
struct SectionSpec {
  const char* name;
  std::span<const KeySpec> keys;
};

// clang-format off
// One line per key: which Value check it passes and where it goes. Capture-less lambdas, so the tables are
// plain data.
#define FR_KEY(name, body) {name, [](const Value& v, Config& c) -> Status { body; return {}; }}

const KeySpec kModelKeys[] = {
    FR_KEY("name", FR_ASSIGN(c.name, v.file_name())),
};

const KeySpec kEngineKeys[] = {
    FR_KEY("command", FR_ASSIGN(c.engine.command, v.command())),
    FR_KEY("flags", FR_ASSIGN(auto words, v.strings()); auto flags = FlagList::from_words(std::move(words), "engine.flags");
           if (!flags.ok()) return make_error(Errc::kInvalidArgument, v.path() + ":" + std::to_string(v.line()) + ": " + flags.error().message);
           c.engine.flags = std::move(*flags)),
    FR_KEY("kind", FR_ASSIGN(size_t k, v.choice(engine_kind_names())); c.engine.kind = EngineKind(engine_kind_names()[k])),
    FR_KEY("host", FR_ASSIGN(c.engine.host, v.nonempty_string())),
    FR_KEY("port", FR_ASSIGN(int p, v.int_in(1, 65535)); c.engine.port = static_cast<uint16_t>(p)),
    FR_KEY("listen", FR_ASSIGN(size_t k, v.choice(kListens)); c.engine.listen = static_cast<EngineListen>(k)),
    FR_KEY("listen_backlog", FR_ASSIGN(c.engine.listen_backlog, v.int_in(1, 65535))),
    {"env", set_env},
    FR_KEY("secret_flags", FR_ASSIGN(c.engine.secret_flags, v.strings())),
    FR_KEY("public_env", FR_ASSIGN(c.engine.public_env, v.strings())),
    FR_KEY("working_dir", FR_ASSIGN(c.engine.working_dir, v.absolute_path())),
    FR_KEY("cgroup", FR_ASSIGN(c.engine.cgroup, v.absolute_path())),
    FR_KEY("stop_grace_s", FR_ASSIGN(c.engine.stop_grace_s, v.positive())),
    FR_KEY("vllm_version", FR_ASSIGN(c.engine.vllm_version, v.vllm_version())),
    FR_KEY("vllm_rules", FR_ASSIGN(c.engine.vllm_rules, v.absolute_path())),
};

const KeySpec kWeightsKeys[] = {
    FR_KEY("mode", FR_ASSIGN(size_t k, v.choice(kModes)); c.weights.mode = static_cast<WeightsMode>(k)),
    FR_KEY("daemon", FR_ASSIGN(size_t k, v.choice(kDaemons)); c.weights.daemon = static_cast<DaemonKind>(k)),
    {"checkpoint", set_checkpoint},
    FR_KEY("key", FR_ASSIGN(c.weights.key, v.string_table())),
    FR_KEY("backend", FR_ASSIGN(size_t k, v.choice(kBackends)); c.weights.backend = kBackends[k]),
    FR_KEY("daemon_path", FR_ASSIGN(c.weights.daemon_path, v.string())),
    FR_KEY("socket_dir", FR_ASSIGN(c.weights.socket_dir, v.absolute_path())),
    FR_KEY("reader_threads", FR_ASSIGN(c.weights.reader_threads, v.int_in(1, 64))),
    FR_KEY("host_arenas", FR_ASSIGN(c.weights.host_arenas, v.boolean())),
    FR_KEY("load_timeout_s", FR_ASSIGN(c.weights.load_timeout_s, v.positive())),
    FR_KEY("fallback", FR_ASSIGN(c.weights.fallback, v.boolean())),
    FR_KEY("health_port", FR_ASSIGN(c.weights.health_port, v.int_in(0, 65535))),
    FR_KEY("watch_interval_s", FR_ASSIGN(c.weights.watch_interval_s, v.positive())),
};

const KeySpec kMemoryKeys[] = {
    FR_KEY("utilization", FR_ASSIGN(c.memory.utilization, v.fraction())),
    FR_KEY("check_free", FR_ASSIGN(c.memory.check_free, v.boolean())),
    FR_KEY("leak_tolerance_mib", FR_ASSIGN(c.memory.leak_tolerance_mib, v.non_negative())),
    FR_KEY("settle_timeout_s", FR_ASSIGN(c.memory.settle_timeout_s, v.positive())),
    FR_KEY("min_share", FR_ASSIGN(c.memory.min_share, v.fraction())),
};

const KeySpec kReadinessKeys[] = {
    FR_KEY("health_path", FR_ASSIGN(c.readiness.health_path, v.url_path())),
    FR_KEY("request_path", FR_ASSIGN(c.readiness.request_path, v.url_path_or_empty())),
    FR_KEY("model", FR_ASSIGN(c.readiness.model, v.string())),
    FR_KEY("prompt", FR_ASSIGN(c.readiness.prompt, v.string())),
    FR_KEY("max_tokens", FR_ASSIGN(c.readiness.max_tokens, v.int_at_least(1))),
    FR_KEY("expect_text", FR_ASSIGN(c.readiness.expect_text, v.string())),
    FR_KEY("startup_timeout_s", FR_ASSIGN(c.readiness.startup_timeout_s, v.positive())),
    FR_KEY("poll_interval_s", FR_ASSIGN(c.readiness.poll_interval_s, v.positive())),
    FR_KEY("check_interval_s", FR_ASSIGN(c.readiness.check_interval_s, v.positive())),
    FR_KEY("check_timeout_s", FR_ASSIGN(c.readiness.check_timeout_s, v.positive())),
    FR_KEY("hang_after_failures", FR_ASSIGN(c.readiness.hang_after_failures, v.int_at_least(1))),
    FR_KEY("endpoint", FR_ASSIGN(size_t k, v.choice(kEndpoints)); c.readiness.endpoint = static_cast<ReadinessEndpoint>(k)),
};

const KeySpec kRestartKeys[] = {
    FR_KEY("backoff_initial_s", FR_ASSIGN(c.restart.backoff_initial_s, v.non_negative())),
    FR_KEY("backoff_max_s", FR_ASSIGN(c.restart.backoff_max_s, v.non_negative())),
    FR_KEY("backoff_multiplier", FR_ASSIGN(c.restart.backoff_multiplier, v.at_least(1))),
    FR_KEY("reset_after_s", FR_ASSIGN(c.restart.reset_after_s, v.positive())),
    FR_KEY("crash_loop_limit", FR_ASSIGN(c.restart.crash_loop_limit, v.int_at_least(1))),
    FR_KEY("crash_loop_window_s", FR_ASSIGN(c.restart.crash_loop_window_s, v.positive())),
    FR_KEY("warm_failures_before_cold", FR_ASSIGN(c.restart.warm_failures_before_cold, v.int_at_least(0))),
    {"start", set_start},
};

const KeySpec kControlKeys[] = {
    FR_KEY("socket", FR_ASSIGN(c.control.socket, v.socket_path())),
    FR_KEY("group", FR_ASSIGN(c.control.group, v.string())),
    FR_KEY("state_dir", FR_ASSIGN(c.control.state_dir, v.absolute_path())),
};

const KeySpec kSnapshotKeys[] = {
    FR_KEY("dir", FR_ASSIGN(c.snapshot.dir, v.absolute_path())),
    FR_KEY("criu", FR_ASSIGN(c.snapshot.criu, v.string())),
    FR_KEY("helper_path", FR_ASSIGN(c.snapshot.helper_path, v.absolute_path())),
    FR_KEY("oracle_tokens", FR_ASSIGN(c.snapshot.oracle_tokens, v.int_in(1, 64))),
    FR_KEY("timeout_s", FR_ASSIGN(c.snapshot.timeout_s, v.positive())),
};

const KeySpec kStandbyKeys[] = {
    FR_KEY("level", FR_ASSIGN(size_t k, v.choice(kStandbyLevels)); c.standby.level = static_cast<StandbyLevel>(k)),
    FR_KEY("reserve_mib", FR_ASSIGN(int mib, v.int_at_least(0)); c.standby.reserve_mib = static_cast<uint64_t>(mib)),
    FR_KEY("park_timeout_s", FR_ASSIGN(c.standby.park_timeout_s, v.positive())),
    FR_KEY("max_failures", FR_ASSIGN(c.standby.max_failures, v.int_at_least(1))),
};

const KeySpec kFrontKeys[] = {
    FR_KEY("hold_s", FR_ASSIGN(c.front.hold_s, v.positive())),
    FR_KEY("max_held_requests", FR_ASSIGN(c.front.max_held_requests, v.int_at_least(1))),
    FR_KEY("max_body_bytes", FR_ASSIGN(int64_t n, v.integer_in(1, int64_t{1} << 40)); c.front.max_body_bytes = static_cast<uint64_t>(n)),
    FR_KEY("max_response_bytes", FR_ASSIGN(int64_t n, v.integer_in(1, int64_t{1} << 40)); c.front.max_response_bytes = static_cast<uint64_t>(n)),
    FR_KEY("stop_grace_s", FR_ASSIGN(c.front.stop_grace_s, v.positive())),
    FR_KEY("max_idle_connections", FR_ASSIGN(c.front.max_idle_connections, v.int_in(0, 65536))),
    FR_KEY("path", FR_ASSIGN(c.front.path, v.absolute_path())),
    FR_KEY("upstream_port", FR_ASSIGN(int p, v.int_in(0, 65535)); c.front.upstream_port = static_cast<uint16_t>(p)),
};

const KeySpec kHttpKeys[] = {
    FR_KEY("listen", FR_ASSIGN(c.http.listen, v.listen_address())),
};

const KeySpec kLoggingKeys[] = {
    FR_KEY("level", FR_ASSIGN(size_t k, v.choice(kLevels)); c.logging.level = kLevels[k]),
};

#undef FR_KEY
// clang-format on

const SectionSpec kSections[] = {
    {"model", kModelKeys},     {"engine", kEngineKeys},       {"weights", kWeightsKeys},
    {"memory", kMemoryKeys},   {"readiness", kReadinessKeys}, {"restart", kRestartKeys},
    {"control", kControlKeys}, {"http", kHttpKeys},           {"logging", kLoggingKeys},
    {"snapshot", kSnapshotKeys}, {"standby", kStandbyKeys}, {"front", kFrontKeys},
};

std::string key_names(std::span<const KeySpec> keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

std::string section_names() {
  std::string out = "gpus";
  for (const auto& s : kSections) out += std::string(", [") + s.name + "]";
  return out;
}

// Lines of the sections and keys present, for errors about keys that are absent or that span keys.
class Lines {
 public:
  void set(std::string key, int64_t line) { m_lines[std::move(key)] = line; }
  bool has(const std::string& key) const { return m_lines.count(key) != 0; }
  const std::map<std::string, int64_t>& all() const { return m_lines; }
  // The line of the first of `keys` present in the file; 1 when none is.
  int64_t first(std::initializer_list<const char*> keys) const {
    for (const char* k : keys) {
      auto it = m_lines.find(k);
      if (it != m_lines.end()) return it->second;
    }
    return 1;
  }

 private:
  std::map<std::string, int64_t> m_lines;
};

Error fail_at(const std::string& path, int64_t line, const std::string& key, const std::string& what) {
  return make_error(Errc::kInvalidArgument, path + ":" + std::to_string(line) + ": " + key + ": " + what);
}

Status check_cross_fields(const Config& c, const Lines& lines) {
  const auto& w = c.weights;
  if (!c.engine.command.size()) {
    return fail_at(c.path, lines.first({"engine"}), "engine.command",
                   "required: the engine's program and base arguments, e.g. [\"vllm\", \"serve\"]");
  }
  if (w.mode != WeightsMode::kOff && w.daemon == DaemonKind::kNative && w.checkpoint.empty()) {
    return fail_at(c.path, lines.first({"weights.mode", "weights.daemon", "weights"}), "weights.checkpoint",
                   std::string("required with weights.mode = \"") + weights_mode_name(w.mode) +
                       "\" and weights.daemon = \"native\": the safetensors files or directories the daemons "
                       "preload (or set weights.mode = \"off\")");
  }
  if (w.backend == "cuda" && w.mode != WeightsMode::kOff && c.gpus.empty()) {
    return fail_at(c.path, lines.first({"gpus", "weights.backend", "weights.mode", "weights"}), "gpus",
                   std::string("at least one GPU is needed with weights.backend = \"cuda\" and weights.mode = \"") +
                       weights_mode_name(w.mode) +
                       "\": list GPU indexes or UUIDs, or set weights.backend = \"host\" or weights.mode = \"off\"");
  }
  if (w.backend == "host") {
    for (const auto& g : c.gpus) {
      if (!is_gpu_uuid(g)) continue;
      return fail_at(c.path, lines.first({"gpus"}), "gpus",
                     "GPU " + in_quotes(g) + " with weights.backend = \"host\": the host backend keeps the weights "
                     "in host memory and never resolves GPU UUIDs; use weights.backend = \"cuda\", or a GPU index");
    }
  }
  if (w.host_arenas && (w.daemon != DaemonKind::kNative || w.backend != "cuda")) {
    return fail_at(c.path, lines.first({"weights.host_arenas", "weights"}), "weights.host_arenas",
                   w.daemon != DaemonKind::kNative
                       ? "needs weights.daemon = \"native\": the host-memory daemon is one of fastrestartd's native daemons"
                       : "needs weights.backend = \"cuda\": with the host backend the one daemon already keeps host "
                         "arenas; remove the key");
  }
  if (w.mode != WeightsMode::kOff && w.daemon == DaemonKind::kNative) {
    // A native daemon preloads the whole checkpoint under one key; a tensor-parallel rank asks for its own
    // shard, which each rank publishes on the first start.
    if (auto tp = w.key.find("tp_size"); tp != w.key.end() && tp->second != "1")
      return fail_at(c.path, lines.first({"weights.key", "weights"}), "weights.key",
                     "tp_size = " + in_quotes(tp->second) +
                         ": the daemons would each preload the whole checkpoint, which no rank of a tensor-parallel "
                         "engine attaches (each publishes its own shard on the first start); remove [weights] key");
  }
  if (!c.readiness.request_path.empty() && c.readiness.prompt.empty()) {
    return fail_at(c.path, lines.first({"readiness.prompt", "readiness"}), "readiness.prompt",
                   "must not be empty: engines refuse a completion without a prompt (HTTP 400), so readiness would "
                   "never pass; set a prompt, or readiness.request_path = \"\" for a health-only check");
  }
  if (c.engine.listen != EngineListen::kFront) {
    // Keys of a front that would not run: a mistake (a listen mode changed back, a key in the wrong file).
    // The first key of [front] in the file, else the section itself (an empty [front]).
    std::string at = lines.has("front") ? "[front]" : "";
    int64_t at_line = at.empty() ? 0 : lines.first({"front"});
    bool key_seen = false;
    for (const auto& [key, line] : lines.all()) {
      if (!key.starts_with("front.") || (key_seen && line >= at_line)) continue;
      at = key, at_line = line, key_seen = true;
    }
    if (!at.empty())
      return fail_at(c.path, at_line, at,
                     "applies to engine.listen = \"front\" only (fastrestart-front in front of the engine), got "
                       "engine.listen = \"" + std::string(engine_listen_name(c.engine.listen)) +
                           "\": set engine.listen = \"front\" or remove [front]");
  } else {
    if (c.front.upstream_port != 0 && c.front.upstream_port == c.engine.port &&
        (c.engine.host == "127.0.0.1" || c.engine.host == "0.0.0.0" || c.engine.host == "localhost"))
      return fail_at(c.path, lines.first({"front.upstream_port"}), "front.upstream_port",
                     std::to_string(c.front.upstream_port) + " is engine.port, where the front listens: the engines' "
                     "socket needs a port of its own (or 0: the kernel picks one)");
  }
  if (c.readiness.endpoint == ReadinessEndpoint::kPrivate && !supervisor_owns_socket(c.engine)) {
    return fail_at(c.path, lines.first({"readiness.endpoint", "readiness"}), "readiness.endpoint",
                   "\"private\" needs engine.listen = \"supervisor\" or \"front\" (the private endpoint is passed beside the "
                   "listening socket fastrestartd owns), got engine.listen = \"" +
                       std::string(engine_listen_name(c.engine.listen)) + "\"");
  }
  const auto& start = c.restart.start;
  if (std::find(start.begin(), start.end(), StartPath::kSnapshot) != start.end()) {
    if (c.gpus.size() > 1) {
      return fail_at(c.path, lines.first({"restart.start", "restart"}), "restart.start",
                     "\"snapshot\" needs at most one GPU (snapshots are tensor-parallel 1 only), gpus lists " +
                         std::to_string(c.gpus.size()));
    }
  }
  if (c.memory.min_share >= c.memory.utilization) {
    return fail_at(c.path, lines.first({"memory.min_share", "memory.utilization"}), "memory.min_share",
                   "must be below memory.utilization (" + fmt_number(c.memory.utilization) + "), got " +
                       fmt_number(c.memory.min_share) + ": no engine could ever start");
  }
  if (c.standby.reserve_mib > 0 && c.standby.level == StandbyLevel::kPreGpu) {
    return fail_at(c.path, lines.first({"standby.reserve_mib"}), "standby.reserve_mib",
                   "applies to level = \"warmed\" only: a \"pre_gpu\" standby holds no GPU memory while parked");
  }
  if (w.daemon == DaemonKind::kVllmPreload) {
    const int64_t line = lines.first({"weights.daemon"});
    if (c.engine.kind != EngineKind::kVllm)
      return fail_at(c.path, line, "weights.daemon", "\"vllm-preload\" needs engine.kind = \"vllm\"");
    if (w.mode == WeightsMode::kOff)
      return fail_at(c.path, line, "weights.daemon", "\"vllm-preload\" needs weights.mode \"zero_copy\" or \"copy\" (the ipc_cache loader's modes), got \"off\"");
    if (std::find(c.engine.command.begin(), c.engine.command.end(), "serve") == c.engine.command.end())
      return fail_at(c.path, lines.first({"engine.command", "engine"}), "engine.command",
                     "with weights.daemon = \"vllm-preload\" it must hold the `serve` subcommand (e.g. [\"vllm\", \"serve\"]): "
                     "fastrestartd runs the same command with `preload` in its place");
  }
  if (c.restart.backoff_max_s < c.restart.backoff_initial_s) {
    return fail_at(c.path, lines.first({"restart.backoff_max_s", "restart.backoff_initial_s", "restart"}),
                   "restart.backoff_max_s",
                   "must be >= restart.backoff_initial_s (" + fmt_number(c.restart.backoff_initial_s) + "), got " +
                       fmt_number(c.restart.backoff_max_s));
  }
  return {};
}

// Relative checkpoint paths are relative to the config file's directory, not to wherever fastrestartd runs.
void resolve_checkpoints(Config& c) {
  namespace fs = std::filesystem;
  fs::path base = fs::path(c.path).parent_path();
  for (auto& p : c.weights.checkpoint) {
    fs::path fp(p);
    if (fp.is_absolute()) continue;
    fs::path joined = base / fp;
    std::error_code ec;
    if (joined.is_relative()) {
      fs::path abs = fs::absolute(joined, ec);
      if (!ec) joined = abs;
    }
    p = joined.lexically_normal().string();
  }
}

// A table's entries in the order they appear in the file (toml::table iterates by key), so the first
// error reported is the first in the file.
std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& t) {
  std::vector<std::pair<const toml::key*, const toml::node*>> out;
  for (const auto& [k, n] : t) out.emplace_back(&k, &n);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto &pa = a.first->source().begin, &pb = b.first->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return out;
}

// toml++ reports a string left open at the end of its line as "unescaped control characters" (the newline
// it then reads); say what the user did instead.
std::string syntax_error(std::string_view text, const toml::parse_error& e) {
  std::string what(e.description());
  if (what.find("control characters") == std::string::npos) return what;
  const auto& at = e.source().begin;
  size_t pos = 0;
  for (uint32_t line = 1; line < at.line && pos != std::string_view::npos; ++line) {
    pos = text.find('\n', pos);
    if (pos != std::string_view::npos) ++pos;
  }
  if (pos == std::string_view::npos) return what;
  pos += at.column - 1;
  if (pos < text.size() && text[pos] != '\n' && text[pos] != '\r') return what;
  return "unterminated string: a quoted value on this line has no closing quote before the end of the line "
         "(close it; a value spanning lines needs \"\"\" ... \"\"\")";
}

Status parse_section(const SectionSpec& spec, const Value& v, Config& c, Lines& lines) {
  auto table = v.node().as_table();
  if (!table) return v.fail(std::string("must be a table ([") + spec.name + "]), got " + describe(v.node()));
  lines.set(spec.name, line_of(table->source()));
  for (const auto& [k, node] : in_file_order(*table)) {
    std::string name(k->str());
    auto key = spec.keys.begin();
    while (key != spec.keys.end() && name != key->name) ++key;
    if (key == spec.keys.end()) {
      std::string hint = name == "gpus" ? "; gpus is a top-level key: put it before the first [section]" : "";
      return fail_at(v.path(), line_of(k->source()), std::string(spec.name) + "." + name,
                     "unknown key (allowed in [" + std::string(spec.name) + "]: " + key_names(spec.keys) + ")" + hint);
    }
    Value kv = v.member(name, *node);
    FR_TRY(key->set(kv, c));
    lines.set(std::string(spec.name) + "." + name, kv.line());
  }
  return {};
}

}  // namespace

Result<Config> parse_config(std::string_view toml_text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(toml_text, path);
  } catch (const toml::parse_error& e) {
    return make_error(Errc::kInvalidArgument, path + ":" + std::to_string(line_of(e.source())) +
                                                  ": TOML syntax: " + syntax_error(toml_text, e));
  }

  Config c;
  c.path = path;
  c.name = std::filesystem::path(path).stem().string();
  Lines lines;
  for (const auto& [k, node] : in_file_order(root)) {
    std::string section(k->str());
    if (section == "gpus") {
      FR_TRY(set_gpus(Value(path, "gpus", *node), c));
      lines.set("gpus", line_of(node->source()));
      continue;
    }
    auto spec = std::find_if(std::begin(kSections), std::end(kSections),
                             [&](const SectionSpec& s) { return section == s.name; });
    if (spec == std::end(kSections)) {
      return fail_at(path, line_of(k->source()), section,
                     "unknown section or top-level key (allowed: " + section_names() + ")");
    }
    FR_TRY(parse_section(*spec, Value(path, section, *node), c, lines));
  }

  if (!lines.has("model.name") && !is_safe_name(c.name)) {
    return fail_at(path, lines.first({"model"}), "model.name",
                   "the default (the file name's stem " + in_quotes(c.name) +
                       ") is not a usable name: set [model] name (letters, digits, '.', '_', '-')");
  }
  FR_TRY(check_cross_fields(c, lines));
  resolve_checkpoints(c);
  c.key_lines = lines.all();
  return c;
}

Result<Config> load_config(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return sys_error("cannot read config " + path);
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err != 0) return sys_error("cannot read config " + path, err);
  return parse_config(text, path);
}

const char* engine_kind_name(EngineKind k) { return k.name(); }

const char* weights_mode_name(WeightsMode m) { return kModes[static_cast<int>(m)]; }

const char* daemon_kind_name(DaemonKind d) { return kDaemons[static_cast<int>(d)]; }

std::string address_change(const EngineConfig& running, const EngineConfig& next) {
  std::string changed;
  auto note = [&](const char* field, const std::string& was, const std::string& now) {
    if (was != now) changed += (changed.empty() ? "" : ", ") + std::string(field) + " " + was + " -> " + now;
  };
  note("engine.host", "\"" + running.host + "\"", "\"" + next.host + "\"");
  note("engine.port", std::to_string(running.port), std::to_string(next.port));
  note("engine.listen", std::string("\"") + engine_listen_name(running.listen) + "\"",
       std::string("\"") + engine_listen_name(next.listen) + "\"");
  if (supervisor_owns_socket(running))
    note("engine.listen_backlog", std::to_string(running.listen_backlog), std::to_string(next.listen_backlog));
  if (changed.empty()) return {};
  return changed + ": where the engine serves changes only with a restart of fastrestartd (systemctl restart), "
                   "not by a reload; the engine keeps serving as before";
}

std::string front_change(const FrontConfig& running, const FrontConfig& next) {
  std::string changed;
  auto note = [&](const char* field, const std::string& was, const std::string& now) {
    if (was != now) changed += (changed.empty() ? "" : ", ") + std::string(field) + " " + was + " -> " + now;
  };
  note("front.hold_s", fmt_number(running.hold_s), fmt_number(next.hold_s));
  note("front.max_held_requests", std::to_string(running.max_held_requests), std::to_string(next.max_held_requests));
  note("front.max_body_bytes", std::to_string(running.max_body_bytes), std::to_string(next.max_body_bytes));
  note("front.max_response_bytes", std::to_string(running.max_response_bytes), std::to_string(next.max_response_bytes));
  note("front.stop_grace_s", fmt_number(running.stop_grace_s), fmt_number(next.stop_grace_s));
  note("front.max_idle_connections", std::to_string(running.max_idle_connections), std::to_string(next.max_idle_connections));
  note("front.path", "\"" + running.path + "\"", "\"" + next.path + "\"");
  note("front.upstream_port", std::to_string(running.upstream_port), std::to_string(next.upstream_port));
  if (changed.empty()) return {};
  return changed + ": the front's settings change only with a restart of fastrestartd (systemctl restart), not by "
                   "a reload; the front keeps its requests and settings";
}

std::string engine_serve_host(const Config& c) {
  return c.engine.listen == EngineListen::kFront ? std::string("127.0.0.1") : c.engine.host;
}

uint16_t engine_serve_port(const Config& c) {
  return c.engine.listen == EngineListen::kFront ? c.front.bound_upstream_port : c.engine.port;
}

const char* engine_listen_name(EngineListen l) { return kListens[static_cast<int>(l)]; }
const char* readiness_endpoint_name(ReadinessEndpoint e) { return kEndpoints[static_cast<int>(e)]; }
const char* standby_level_name(StandbyLevel l) { return kStandbyLevels[static_cast<int>(l)]; }

}  // namespace fr::supervisor
