// Config: one TOML file per served model (/etc/fastrestart/<name>.toml). Every key, its default and why:
// docs/config.md. Unknown keys, wrong types and impossible values are errors naming file:line and the key;
// fastrestartd then exits with kExitConfig and starts nothing.
#pragma once

#include <compare>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fastrestart/result.h"
#include "supervisor/flags.h"

namespace fr::supervisor {

// An engine kind (engine.kind), by its name. The kinds and what each does differently are listed in
// engines/registry.cc (engines/engine_kind.h): a new kind is its folder and an entry there, not a value here.
class EngineKind {
 public:
  constexpr EngineKind() = default;
  constexpr explicit EngineKind(const char* name) : m_name(name) {}
  static const EngineKind kGeneric;
  static const EngineKind kVllm;
  constexpr const char* name() const { return m_name; }
  friend bool operator==(EngineKind a, EngineKind b) { return std::string_view(a.m_name) == b.m_name; }

 private:
  const char* m_name = "generic";  // static storage: a registry entry's name
};
inline constexpr EngineKind EngineKind::kGeneric{"generic"};
inline constexpr EngineKind EngineKind::kVllm{"vllm"};
// The names engine.kind accepts, in the registry's order (engines/registry.cc).
std::span<const char* const> engine_kind_names();

enum class WeightsMode { kZeroCopy, kCopy, kOff };
enum class DaemonKind { kNative, kNone, kVllmPreload };
// A start path (restart.start), by its name. The paths are the rows of one table (start/paths.def): a new
// path is its folder and a line there, not a value here. These constants are the paths the Supervisor
// itself names; paths.cc checks at compile time that each is a row of the table.
class StartPath {
 public:
  constexpr explicit StartPath(const char* name) : m_name(name) {}
  static const StartPath kSnapshot;
  static const StartPath kWarm;
  static const StartPath kCold;
  static const StartPath kStandby;
  constexpr const char* name() const { return m_name; }
  friend constexpr bool operator==(StartPath a, StartPath b) { return std::string_view(a.m_name) == b.m_name; }
  friend constexpr auto operator<=>(StartPath a, StartPath b) { return std::string_view(a.m_name) <=> b.m_name; }

 private:
  const char* m_name;  // static storage: a row's name
};
inline constexpr StartPath StartPath::kSnapshot{"snapshot"};
inline constexpr StartPath StartPath::kWarm{"warm"};
inline constexpr StartPath StartPath::kCold{"cold"};
inline constexpr StartPath StartPath::kStandby{"standby"};
enum class StandbyLevel { kPreGpu, kWarmed };

enum class EngineListen { kEngine, kSupervisor, kFront };
const char* engine_listen_name(EngineListen l);
// Where readiness and health checks reach the engine (docs/listen-socket.md, "The private endpoint").
enum class ReadinessEndpoint { kPublic, kPrivate };
const char* readiness_endpoint_name(ReadinessEndpoint e);

struct EngineConfig {
  std::vector<std::string> command;            // argv: program and its base arguments (required)
  FlagList flags;                              // engine flags, appended after command; reload changes these
  EngineKind kind = EngineKind::kGeneric;
  std::string host = "127.0.0.1";              // where the engine serves (readiness talks to it)
  uint16_t port = 8000;
  // Who owns the listening socket on host:port (docs/listen-socket.md). Engine: the engine binds it itself.
  // Supervisor: fastrestartd binds it once at startup and hands it to every engine it starts (fd 3,
  // LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES), so connections made during a restart wait instead of failing.
  // Front: fastrestartd binds host:port for fastrestart-front (docs/front.md), which it starts and supervises,
  // and hands every engine a loopback socket it keeps (front.upstream_port) the same way.
  EngineListen listen = EngineListen::kEngine;
  int listen_backlog = 4096;                   // listen(2)'s backlog of the sockets fastrestartd owns (somaxconn caps it)
  std::map<std::string, std::string> env;      // added to the supervisor's environment (minus NOTIFY_SOCKET...)
  // Secrets (docs/reliability.md, "Secrets"): flag names whose values are secret beyond the built-in rule
  // (common/secrets.h), and the variables of env whose values are not (every other one is).
  std::vector<std::string> secret_flags;
  std::vector<std::string> public_env;
  std::string working_dir;                     // empty: the supervisor's
  std::string cgroup;                          // a memory cgroup directory (v1 or v2) to run the engine in;
                                               // empty: ours. Its OOM-kill counter classifies kernel OOMs.
  double stop_grace_s = 30;                    // SIGTERM -> SIGKILL of the engine's process group
  std::string vllm_version;                    // kind vllm: the version flags are checked against until the
                                               // engine reports its own; empty: the rules' newest
  std::string vllm_rules;                      // kind vllm: a rules file appended to data/vllm.toml's
};

struct WeightsConfig {
  WeightsMode mode = WeightsMode::kZeroCopy;
  DaemonKind daemon = DaemonKind::kNative;
  std::vector<std::string> checkpoint;         // safetensors files, or directories (all *.safetensors in them)
  std::map<std::string, std::string> key;      // config fields of the cache key (arch, dtype, ...)
  std::string backend = "cuda";                // "cuda" | "host" (host: CPU engines and tests)
  std::string daemon_path;                     // empty: fastrestart-weightd beside fastrestartd, then $PATH
  std::string socket_dir;                      // empty: the daemons' default
  int reader_threads = 8;
  // With backend "cuda": also run one host-memory daemon (weightd-host.sock) for the engine's host arenas,
  // such as a KV prefix index that must outlive the engine (docs/kv-survival.md). It holds no weights.
  bool host_arenas = false;
  double load_timeout_s = 3600;                // a preload making no progress for this long fails
  // daemon = "vllm-preload" (docs/vllm.md):
  bool fallback = true;                        // ipc_cache "fallback" after the first start (which is strict)
  int health_port = 0;                         // vllm preload's /health on 127.0.0.1; 0: a free port per start
  double watch_interval_s = 10;                // how often the checkpoint files' identities are compared
};

struct MemoryConfig {
  double utilization = 0.9;                    // budget per GPU = utilization x total (ARCHITECTURE.md)
  bool check_free = true;                      // refuse to start an engine whose share does not fit
  double min_share = 0.05;                     // no engine starts on a GPU whose share is below this
  double leak_tolerance_mib = 512;             // used - held after an engine exit above this is a leak
  double settle_timeout_s = 30;                // wait for GPU memory to return before restarting
};

struct ReadinessConfig {
  std::string health_path = "/health";
  std::string request_path = "/v1/completions";  // empty: health only (not recommended)
  std::string model;                           // "model" field of the request; empty: omitted
  std::string prompt = "The capital of France is";
  int max_tokens = 1;
  std::optional<std::string> expect_text;      // oracle: the completion text must equal this
  double startup_timeout_s = 900;              // exec -> ready; beyond: readiness timeout (a failure)
  double poll_interval_s = 0.2;                // while starting
  double check_interval_s = 5;                 // while running: /health liveness
  double check_timeout_s = 5;
  int hang_after_failures = 3;                 // consecutive failed checks -> hung -> restart
  // Public: engine.host:engine.port, the clients' port. Private (needs engine.listen = "supervisor"): a
  // loopback socket fastrestartd opens per engine process and passes as fd 4, which clients never queue on.
  ReadinessEndpoint endpoint = ReadinessEndpoint::kPublic;
};

struct RestartConfig {
  double backoff_initial_s = 1;
  double backoff_max_s = 60;
  double backoff_multiplier = 2;
  double reset_after_s = 600;                  // running this long resets the backoff
  int crash_loop_limit = 5;                    // failures within the window before giving up
  double crash_loop_window_s = 600;
  int warm_failures_before_cold = 2;           // consecutive failed warm starts -> one cold daemon reload
  std::vector<StartPath> start = {StartPath::kWarm, StartPath::kCold};
};

struct ControlConfig {
  std::string socket;                          // empty: /run/fastrestart/<name>.ctl (root) or the user dir
  std::string group;                           // also allow this group (socket 0660)
  std::string state_dir;                       // empty: /var/lib/fastrestart/<name>; pushed flags persist here
};

struct HttpConfig {
  std::string listen = "127.0.0.1:9400";       // "none": off (issue 5: /health /ready /metrics /status)
};

// CRIU snapshots of the engine (docs/snapshot.md); used when restart.start lists "snapshot".
struct SnapshotConfig {
  std::string dir;                             // empty: <control.state_dir>/snapshots
  std::string criu = "criu";                   // a path, or a name looked up in $PATH; must be >= 4.1
  std::string helper_path;                     // empty: fastrestart-snapshot beside fastrestartd, then $PATH
  int oracle_tokens = 4;                       // tokens of the oracle completion recorded and replayed
  double timeout_s = 600;                      // a create or restore helper running longer is killed
};

// A standby engine parked at a gate (docs/standby.md); used when restart.start lists "standby".
struct StandbyConfig {
  StandbyLevel level = StandbyLevel::kPreGpu;
  uint64_t reserve_mib = 0;                    // warmed: GPU memory set aside for it; 0: measured at its first park
  double park_timeout_s = 900;                 // spawn -> "parked"; beyond: it does not speak the gate protocol
  int max_failures = 3;                        // standbys in a row that failed (at any stage) before the path is disabled
};

// fastrestart-front under fastrestartd (engine.listen = "front"; docs/front.md, "Running it"). The keys are
// the front's flags; they are an error with any other engine.listen.
struct FrontConfig {
  double hold_s = 30;                          // --hold-s: how long a request waits for an engine
  int max_held_requests = 1024;                // --max-held-requests
  uint64_t max_body_bytes = 1 << 20;           // --max-body-bytes: a larger request body is answered 413
  uint64_t max_response_bytes = 16 << 20;      // --max-response-bytes: a larger buffered answer is 503
  double stop_grace_s = 10;                    // --stop-grace-s: at fastrestartd's stop, requests in flight finish
  int max_idle_connections = 0;                // --max-idle-connections: kept-alive connections to the engine
  std::string path;                            // empty: fastrestart-front beside fastrestartd, then $PATH
  // The engines' loopback listening socket (127.0.0.1); 0: a port the kernel picks at fastrestartd's start.
  uint16_t upstream_port = 0;
  // Not a key: the port that socket was bound to (set by fastrestartd's main before the supervisor starts).
  uint16_t bound_upstream_port = 0;
};

struct LoggingConfig {
  std::string level = "info";
};

struct Config {
  std::string path;                            // the file it came from
  std::string name;                            // [model] name; default: file stem
  EngineConfig engine;
  std::vector<std::string> gpus;               // indexes or GPU UUIDs; empty: no GPU (host backend)
  WeightsConfig weights;
  MemoryConfig memory;
  ReadinessConfig readiness;
  RestartConfig restart;
  ControlConfig control;
  HttpConfig http;
  LoggingConfig logging;
  SnapshotConfig snapshot;
  StandbyConfig standby;
  FrontConfig front;
  std::map<std::string, int64_t> key_lines;    // "section.key" (and "section", "gpus") -> line, for errors
                                               // found after parsing (check_host)
};

// Parses and validates the file itself. Errors: Errc::kInvalidArgument, message "<path>:<line>: <key>: <what>".
// The engine kind's checks of the flags (vLLM's rules) are not run here but where fastrestartd checks a
// config (check_engine_config, engines/engine_kind.h), so a config of any kind reads without its rules.
Result<Config> parse_config(std::string_view toml_text, const std::string& path);
Result<Config> load_config(const std::string& path);

// What a start would hit on this host, beyond the file itself (fastrestartd runs it for --check and before a
// start; parse_config and load_config do not, so a config can be read on another machine): the control
// socket's directory is private or can be made so, every weights.checkpoint exists (a directory holds
// *.safetensors), engine.command's program is executable (a bare name: on $PATH; fastrestart's own
// programs, e.g. fastrestart-tinyengine, also beside fastrestartd, and command[0] is then set to the path
// found). Errors: Errc::kInvalidArgument, "<path>:<line>: <key>: <what>", the first problem found.
Status check_host(Config& c);

// The error of a check after parsing (check_host, an engine kind's checks): Errc::kInvalidArgument,
// "<path>:<line>: <key>: <what>", the line of the first of `keys` the file has (1 when none), as parse_config's.
Error config_error_at(const Config& c, std::initializer_list<const char*> keys, const std::string& key,
                      const std::string& what);

// A re-read config (SIGHUP, `fastrestartctl reload` without flags) against the running one: the fields
// of where the engine serves that only fastrestartd's start applies (engine.host, engine.port,
// engine.listen, and engine.listen_backlog while fastrestartd owns the socket), each named with its old and
// new value, and that a restart of fastrestartd is what applies them (docs/config.md, "Reload"). Empty
// when none changed.
std::string address_change(const EngineConfig& running, const EngineConfig& next);

// A re-read config's [front] against the running one: each key that changed with its old and new value, and
// that a restart of fastrestartd applies them (docs/config.md, "Reload"). Empty when none changed.
std::string front_change(const FrontConfig& running, const FrontConfig& next);

// Where the engine itself serves and fastrestartd's checks reach it: engine.host:engine.port, except with
// engine.listen = "front", where the engine serves on fastrestartd's loopback socket (127.0.0.1 and
// front.bound_upstream_port) and engine.host:engine.port is the front's.
std::string engine_serve_host(const Config& c);
uint16_t engine_serve_port(const Config& c);
// fastrestartd owns the engine's listening socket (engine.listen "supervisor" or "front").
inline bool supervisor_owns_socket(const EngineConfig& e) { return e.listen != EngineListen::kEngine; }

const char* engine_kind_name(EngineKind k);
const char* weights_mode_name(WeightsMode m);
const char* daemon_kind_name(DaemonKind d);
// The start paths' names, from their table (start/paths.def): one path's, and all in the table's order.
inline const char* start_path_name(StartPath p) { return p.name(); }
std::span<const char* const> start_path_names();
const char* standby_level_name(StandbyLevel l);

}  // namespace fr::supervisor
