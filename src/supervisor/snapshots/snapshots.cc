// The snapshots part's state and the helper's jobs: the check at start, the helper's spawn and exit, the
// restore that serves the path "snapshot", and status. The control op is snapshots_control.cc.
#include "supervisor/snapshots/snapshots.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>

#include "common/bounded_json.h"
#include "common/io.h"
#include "snapshot/criu.h"
#include "snapshot/identity.h"
#include "snapshot/store.h"
#include "supervisor/checkpoint_files.h"
#include "supervisor/child.h"
#include "supervisor/redaction.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

std::string snapshot_helper_binary(const Config& c) {
  return c.snapshot.helper_path.empty() ? find_companion("fastrestart-snapshot", "snapshot") : c.snapshot.helper_path;
}

bool lists_snapshot(const Config& c) {
  return std::find(c.restart.start.begin(), c.restart.start.end(), StartPath::kSnapshot) != c.restart.start.end();
}

}  // namespace

Snapshots::Snapshots(SnapshotHost& host, RestoreHost& restore_host, const PartBasics& basics, const Stats& stats)
    : m_host(host), m_restore_host(restore_host), m_loop(basics.loop), m_cfg(basics.config), m_listen(basics.listen), m_stats(stats) {}

Snapshots::~Snapshots() = default;

void Snapshots::init() {
  const Config& cfg = m_cfg;
  m_wanted = lists_snapshot(cfg);
  m_dir = cfg.snapshot.dir.empty() ? state_dir(cfg) + "/snapshots" : cfg.snapshot.dir;
  m_helper = snapshot_helper_binary(cfg);
  if (!m_wanted) {
    m_problem = "restart.start does not list \"snapshot\"";
    return;
  }
  m_criu = find_program(cfg.snapshot.criu);
  auto criu = snapshot::probe_criu(m_criu);
  if (!criu.ok()) {
    m_problem = criu.error().message;
    spdlog::error("snapshots disabled: {}", m_problem);
    return;
  }
  if (::access(m_helper.c_str(), X_OK) != 0) {
    m_problem = "the helper fastrestart-snapshot was not found (" + m_helper + "; set snapshot.helper_path)";
    spdlog::error("snapshots disabled: {}", m_problem);
    return;
  }
  if (auto st = snapshot::Store(m_dir).ensure(); !st.ok()) {
    m_problem = st.error().message;
    spdlog::error("snapshots disabled: {}", m_problem);
    return;
  }
  m_criu_version = criu->version;
  m_usable = true;
  spdlog::info("snapshots: criu {} ({}), artifacts in {}", m_criu_version, m_criu, m_dir);
}

void Snapshots::close() {
  if (m_helper_pid > 0) signal_group(m_helper_pid, -1, SIGKILL);  // a job cut short by the stop
  m_helper_reader.reset();
  m_job_timer.reset();
}

void Snapshots::add_engine_env(std::map<std::string, std::string>& env) const {
  if (!m_wanted) return;
  // A snapshottable engine must not use io_uring, which CRIU cannot dump (libuv/uvloop turn it on).
  env["UV_USE_IO_URING"] = "0";
  // A snapshottable engine in zero_copy must release the daemon's pools before a dump: the helper asks it
  // there (docs/snapshot.md, "The prepare/resume exchange").
  if (m_cfg.weights.mode == WeightsMode::kZeroCopy) env["FASTRESTART_SNAPSHOT_SOCKET"] = m_dir + "/.engine.sock";
}

// Writes the engine spec and starts the helper with `args`; its output is read like an engine's.
bool Snapshots::spawn_helper(const std::string& job, std::vector<std::string> args) {
  const Config& cfg = m_cfg;
  snapshot::EngineSpec spec;
  EngineCommand command = m_host.engine_command(/*for_standby=*/false);
  spec.argv = std::move(command.argv);
  spec.argv[0] = find_program(spec.argv[0]);
  spec.env = std::move(command.env);
  spec.files = checkpoint_files(cfg);
  spec.host = engine_serve_host(cfg);
  spec.port = engine_serve_port(cfg);
  spec.prompt = cfg.readiness.prompt;
  spec.model = cfg.readiness.model;
  spec.oracle_tokens = cfg.snapshot.oracle_tokens;
  spec.secret_flags = cfg.engine.secret_flags;
  spec.public_env = public_env_names(cfg.engine, spec.env);
  const std::string spec_path = m_dir + "/.spec.json", text = snapshot::to_json(spec).dump(2);
  m_result_path = m_dir + "/.result.json";
  ::unlink(m_result_path.c_str());
  {
    UniqueFd fd(::open(spec_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd || !write_full(fd.get(), text.data(), text.size(), spec_path).ok()) {
      spdlog::error("snapshot {}: cannot write {}", job, spec_path);
      return false;
    }
  }
  SpawnSpec hs;
  hs.argv = {m_helper, job, "--dir", m_dir, "--criu", m_criu, "--spec", spec_path, "--result", m_result_path};
  hs.argv.insert(hs.argv.end(), args.begin(), args.end());
  if (const int listen = m_listen.fd; listen >= 0) {
    // fastrestartd's listening socket (docs/listen-socket.md, "Snapshots"): a create names it, so that the
    // images take it from the restore; a restore is handed it (as fd 3) for the restored engine.
    if (job == "create") hs.argv.insert(hs.argv.end(), {"--listen-socket", "socket:[" + std::to_string(m_listen.inode) + "]"});
    if (job == "restore") hs.listen_fd = listen, hs.argv.insert(hs.argv.end(), {"--listen-fd", "3"});
  }
  hs.env = spec.env;  // CUDA_VISIBLE_DEVICES: the helper sees the engine's GPU as device 0
  auto child = spawn_child(hs);
  if (!child.ok()) {
    spdlog::error("snapshot {}: {}", job, child.error().message);
    return false;
  }
  m_helper_pid = child->pid;
  m_job = job;
  m_job_started = m_loop.now_s();
  if (!m_job_timer) m_job_timer = std::make_unique<Timer>(m_loop);
  m_job_timer->start(cfg.snapshot.timeout_s, [this] {
    if (m_helper_pid <= 0) return;
    spdlog::error("snapshot {}: the helper ran past snapshot.timeout_s ({} s): killing it", m_job, m_cfg.snapshot.timeout_s);
    signal_group(m_helper_pid, -1, SIGKILL);
    // A tree it already restored would outlive it (reparented to us): CRIU wrote its pid here.
    if (m_job == "restore" && m_restore_host.engine_present()) {
      auto pid = read_file(m_dir + "/" + m_restoring + "/images/restored.pid", 64);
      if (pid.ok() && std::atoi(pid->c_str()) > 0) ::kill(std::atoi(pid->c_str()), SIGKILL);
    }
  });
  spdlog::info("snapshot {}: helper pid {}: {}", job, m_helper_pid, [&] {
    std::string c;
    for (const auto& a : hs.argv) c += (c.empty() ? "" : " ") + a;
    return c;
  }());
  if (job == "restore") {
    // The helper's output pipe becomes the restored engine's stdout/stderr (criu --inherit-fd).
    m_restore_host.restore_spawned(std::move(child->output));
  } else {
    m_helper_output = std::move(child->output);
    m_helper_reader = std::make_unique<LineReader>(
        m_loop, m_helper_output.get(), [](const std::string& l) { spdlog::info("[snapshot] {}", l); }, [] {});
  }
  return true;
}

// The artifact the path "snapshot" restores next: the one asked for, else the newest not failed here.
std::string Snapshots::next_id() const {
  if (!m_force_id.empty()) return m_force_id;
  for (const auto& a : snapshot::Store(m_dir).ids())
    if (!m_failed_ids.count(a)) return a;
  return {};
}

std::optional<StartRefusal> Snapshots::refusal() const {
  if (!m_usable) return StartRefusal{"unavailable", "snapshots are not available: " + m_problem};
  if (m_helper_pid > 0) return StartRefusal{"busy", "a snapshot " + m_job + " is running"};
  if (next_id().empty())
    return StartRefusal{"no_artifact", m_failed_ids.empty() ? "no snapshot in " + m_dir
                                                            : "no snapshot in " + m_dir + " that has not failed here"};
  return std::nullopt;
}

// The start path "snapshot": the restore runs in the helper (the engine's record has no pid until it reports).
Status Snapshots::start() {
  const std::string id = next_id();
  m_force_id.clear();
  m_restoring = id;
  m_restore_host.restoring_engine(id);
  if (!spawn_helper("restore", {"--id", id, "--oracle-timeout", std::to_string(m_cfg.readiness.check_timeout_s * 6)})) {
    m_restore_host.restore_not_spawned();
    return Error{Errc::kInternal, "cannot start the snapshot helper to restore " + id};
  }
  return {};
}

bool Snapshots::on_exit(pid_t pid, int status) {
  if (m_helper_pid <= 0 || pid != m_helper_pid) return false;
  const std::string job = std::exchange(m_job, std::string());
  m_helper_pid = -1;
  if (m_job_timer) m_job_timer->stop();
  m_helper_reader.reset();
  m_helper_output.reset();
  json result;
  auto text = read_file(m_result_path, 1 << 20);
  if (text.ok()) result = parse_json_or_discarded(*text, kSmallJsonLimits);
  if (!result.is_object()) {
    result = {{"ok", false},
              {"error", "fastrestart-snapshot " + job + " exited with " + snapshot::describe_status(status) +
                            " and left no result"}};
  }
  result["seconds"] = m_loop.now_s() - m_job_started;
  if (job == "restore") after_restore_job(result);
  else after_create_job(result);
  return true;
}

void Snapshots::keep_exit(pid_t pid, int status) {
  // Possibly a restored engine that died before its helper's result was read: kept for after_restore_job.
  if (m_orphans.size() < 64) m_orphans[pid] = status;
}

void Snapshots::add_known_pids(std::set<pid_t>& known) const {
  if (m_helper_pid > 0) known.insert(m_helper_pid);
}

void Snapshots::after_restore_job(const json& result) {
  if (!m_restore_host.engine_present()) return;
  const std::string id = m_restoring;
  if (result.value("ok", false)) {
    const pid_t pid = result.value("pid", -1);
    m_restored++;
    m_last_restore = {{"id", id}, {"unix_time", std::time(nullptr)}, {"helper_s", result["seconds"]},
                      {"timings", result.value("timings", json::object())}, {"pid", pid}};
    spdlog::info("snapshot {} restored as pid {} in {:.3f} s (oracle matched)", id, pid, result["seconds"].get<double>());
    std::optional<int> exited;
    if (auto it = m_orphans.find(pid); it != m_orphans.end()) exited = it->second;
    m_orphans.clear();
    m_restore_host.restored(pid, exited);
    return;
  }
  const std::string why = result.value("error", std::string("restore failed"));
  m_fallbacks++;
  m_failed_ids.insert(id);
  m_last_failure = {{"id", id}, {"reason", why}, {"unix_time", std::time(nullptr)}};
  spdlog::error("snapshot {} not restored: {}; falling back to a normal start", id, why);
  m_restore_host.restore_failed("snapshot " + id + " not restored: " + why);
}

json Snapshots::status() const {
  json artifacts = json::array();
  if (m_wanted)
    for (const auto& id : snapshot::Store(m_dir).ids()) artifacts.push_back(id);
  return {{"enabled", m_usable},
          {"problem", m_usable ? "" : m_problem},
          {"criu", m_criu},
          {"criu_version", m_criu_version},
          {"dir", m_dir},
          {"artifacts", artifacts},
          {"job", m_helper_pid > 0 ? json(m_job) : json(nullptr)},
          {"created", m_created},
          {"create_failures", m_create_failures},
          {"restored", m_restored},
          {"fallbacks", m_fallbacks},
          {"last_create", m_last_create},
          {"last_restore", m_last_restore},
          {"last_failure", m_last_failure}};
}

status::SnapshotCounts Snapshots::counts() const { return {m_created, m_create_failures, m_restored, m_fallbacks}; }

}  // namespace fr::supervisor
