// The Supervisor's snapshot side (docs/snapshot.md): the start path "snapshot" (restore through the
// helper, fall back to the next path on any failure), `snapshot create` (dump the live engine, then
// restore it at once as the live engine: the artifact is proven before the command returns), and the
// list/inspect/delete/restore control operations. CRIU and CUDA run only in the helper process
// (fastrestart-snapshot); here we spawn it, reap it and read its result file.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "common/io.h"
#include "common/bounded_json.h"
#include "snapshot/break_even.h"
#include "snapshot/criu.h"
#include "snapshot/identity.h"
#include "snapshot/store.h"
#include "supervisor/child.h"
#include "supervisor/engine_group_record.h"
#include "supervisor/redaction.h"
#include "supervisor/supervised_child.h"
#include "supervisor/supervisor.h"
#include "supervisor/supervisor_internal.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

json error(const std::string& code, const std::string& msg) {
  return {{"ok", false}, {"error", {{"code", code}, {"message", msg}}}};
}

std::string helper_binary(const Config& c) {
  return c.snapshot.helper_path.empty() ? find_companion("fastrestart-snapshot", "snapshot") : c.snapshot.helper_path;
}

bool lists_snapshot(const Config& c) {
  return std::find(c.restart.start.begin(), c.restart.start.end(), StartPath::kSnapshot) != c.restart.start.end();
}

// "pipe:[inode]" of the pipe whose read end we hold (the engine's stdout and stderr).
std::string pipe_name(int read_fd) {
  struct stat st{};
  if (read_fd < 0 || ::fstat(read_fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return "";
  return "pipe:[" + std::to_string(st.st_ino) + "]";
}

double mean(const json& h) {
  const double n = h.value("count", 0.0);
  return n > 0 ? h.value("sum", 0.0) / n : 0.0;
}

}  // namespace

void Supervisor::snapshot_init() {
  Snapshots& s = *m_snap;
  s.wanted = lists_snapshot(m_cfg);
  s.dir = m_cfg.snapshot.dir.empty() ? state_dir(m_cfg) + "/snapshots" : m_cfg.snapshot.dir;
  s.helper = helper_binary(m_cfg);
  if (!s.wanted) {
    s.problem = "restart.start does not list \"snapshot\"";
    return;
  }
  // Checked once, before the loop runs (a blocking fork/exec here cannot race the SIGCHLD reaper).
  s.criu = find_program(m_cfg.snapshot.criu);
  auto criu = snapshot::probe_criu(s.criu);
  if (!criu.ok()) {
    s.problem = criu.error().message;
    spdlog::error("snapshots disabled: {}", s.problem);
    return;
  }
  if (::access(s.helper.c_str(), X_OK) != 0) {
    s.problem = "the helper fastrestart-snapshot was not found (" + s.helper + "; set snapshot.helper_path)";
    spdlog::error("snapshots disabled: {}", s.problem);
    return;
  }
  if (auto st = snapshot::Store(s.dir).ensure(); !st.ok()) {
    s.problem = st.error().message;
    spdlog::error("snapshots disabled: {}", s.problem);
    return;
  }
  s.criu_version = criu->version;
  s.usable = true;
  spdlog::info("snapshots: criu {} ({}), artifacts in {}", s.criu_version, s.criu, s.dir);
}

// Writes the engine spec and starts the helper with `args`; its output is read like an engine's.
bool Supervisor::spawn_helper(const std::string& job, std::vector<std::string> args) {
  Snapshots& s = *m_snap;
  snapshot::EngineSpec spec;
  spec.argv = engine_argv();
  spec.argv[0] = find_program(spec.argv[0]);
  spec.env = engine_env();
  spec.files = checkpoint_files(m_cfg);
  spec.host = m_cfg.engine.host;
  spec.port = m_cfg.engine.port;
  spec.prompt = m_cfg.readiness.prompt;
  spec.model = m_cfg.readiness.model;
  spec.oracle_tokens = m_cfg.snapshot.oracle_tokens;
  spec.secret_flags = m_cfg.engine.secret_flags;
  spec.public_env = public_env_names(m_cfg.engine, spec.env);
  const std::string spec_path = s.dir + "/.spec.json", text = snapshot::to_json(spec).dump(2);
  s.result_path = s.dir + "/.result.json";
  ::unlink(s.result_path.c_str());
  {
    UniqueFd fd(::open(spec_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd || !write_full(fd.get(), text.data(), text.size(), spec_path).ok()) {
      spdlog::error("snapshot {}: cannot write {}", job, spec_path);
      return false;
    }
  }
  SpawnSpec hs;
  hs.argv = {s.helper, job, "--dir", s.dir, "--criu", s.criu, "--spec", spec_path, "--result", s.result_path};
  hs.argv.insert(hs.argv.end(), args.begin(), args.end());
  if (m_listen_fd >= 0) {
    // fastrestartd's listening socket (docs/listen-socket.md, "Snapshots"): a create names it, so that the
    // images take it from the restore; a restore is handed it (as fd 3) for the restored engine.
    if (job == "create") hs.argv.insert(hs.argv.end(), {"--listen-socket", "socket:[" + std::to_string(m_listen_inode) + "]"});
    if (job == "restore") hs.listen_fd = m_listen_fd, hs.argv.insert(hs.argv.end(), {"--listen-fd", "3"});
  }
  hs.env = spec.env;  // CUDA_VISIBLE_DEVICES: the helper sees the engine's GPU as device 0
  auto child = spawn_child(hs);
  if (!child.ok()) {
    spdlog::error("snapshot {}: {}", job, child.error().message);
    return false;
  }
  s.helper_pid = child->pid;
  s.job = job;
  s.job_started = m_loop.now_s();
  if (!s.job_timer) s.job_timer = std::make_unique<Timer>(m_loop);
  s.job_timer->start(m_cfg.snapshot.timeout_s, [this] {
    Snapshots& sn = *m_snap;
    if (sn.helper_pid <= 0) return;
    spdlog::error("snapshot {}: the helper ran past snapshot.timeout_s ({} s): killing it", sn.job, m_cfg.snapshot.timeout_s);
    signal_group(sn.helper_pid, -1, SIGKILL);
    // A tree it already restored would outlive it (reparented to us): CRIU wrote its pid here.
    if (sn.job == "restore" && m_engine) {
      auto pid = read_file(sn.dir + "/" + m_engine->snapshot_id + "/images/restored.pid", 64);
      if (pid.ok() && std::atoi(pid->c_str()) > 0) ::kill(std::atoi(pid->c_str()), SIGKILL);
    }
  });
  spdlog::info("snapshot {}: helper pid {}: {}", job, s.helper_pid, [&] {
    std::string c;
    for (const auto& a : hs.argv) c += (c.empty() ? "" : " ") + a;
    return c;
  }());
  if (job == "restore") {
    // The helper's output pipe becomes the restored engine's stdout/stderr (criu --inherit-fd): read as any
    // engine's (its tail, progress, and the arena line of the lease its resume takes).
    read_child_output(m_loop, std::move(child->output), "engine", engine_line_handler(m_engine.get()), *m_engine);
  } else {
    s.helper_output = std::move(child->output);
    s.helper_reader = std::make_unique<LineReader>(
        m_loop, s.helper_output.get(), [](const std::string& l) { spdlog::info("[snapshot] {}", l); }, [] {});
  }
  return true;
}

// The artifact the path "snapshot" restores next: the one asked for, else the newest not failed here.
std::string Supervisor::next_snapshot_id() const {
  const Snapshots& s = *m_snap;
  if (!s.force_id.empty()) return s.force_id;
  for (const auto& a : snapshot::Store(s.dir).ids())
    if (!s.failed_ids.count(a)) return a;
  return {};
}

std::optional<StartRefusal> Supervisor::snapshot_refusal() const {
  const Snapshots& s = *m_snap;
  if (!s.usable) return StartRefusal{"unavailable", "snapshots are not available: " + s.problem};
  if (s.helper_pid > 0) return StartRefusal{"busy", "a snapshot " + s.job + " is running"};
  if (next_snapshot_id().empty())
    return StartRefusal{"no_artifact", s.failed_ids.empty() ? "no snapshot in " + s.dir
                                                            : "no snapshot in " + s.dir + " that has not failed here"};
  return std::nullopt;
}

// The start path "snapshot": the restore runs in the helper (m_engine exists, pid -1 until it reports).
Status Supervisor::restore_snapshot() {
  Snapshots& s = *m_snap;
  const std::string id = next_snapshot_id();
  s.force_id.clear();
  m_engine = std::make_unique<Engine>();
  Engine& e = *m_engine;
  e.flags = m_flags;
  e.report = m_kind->new_report();
  e.in_pid_ns = true;
  e.snapshot_id = id;
  e.spawned_at = m_loop.now_s();
  e.oom_before = m_oom.read();
  set_status("Restoring the engine from snapshot " + id);
  if (!spawn_helper("restore", {"--id", id, "--oracle-timeout", std::to_string(m_cfg.readiness.check_timeout_s * 6)})) {
    m_engine.reset();
    return Error{Errc::kInternal, "cannot start the snapshot helper to restore " + id};
  }
  arm_readiness(false);
  return {};
}

void Supervisor::on_helper_exit(int status) {
  Snapshots& s = *m_snap;
  const std::string job = std::exchange(s.job, std::string());
  s.helper_pid = -1;
  if (s.job_timer) s.job_timer->stop();
  s.helper_reader.reset();
  s.helper_output.reset();
  json result;
  auto text = read_file(s.result_path, 1 << 20);
  if (text.ok()) result = parse_json_or_discarded(*text, kSmallJsonLimits);
  if (!result.is_object()) {
    result = {{"ok", false},
              {"error", "fastrestart-snapshot " + job + " exited with " + snapshot::describe_status(status) +
                            " and left no result"}};
  }
  result["seconds"] = m_loop.now_s() - s.job_started;
  if (job == "restore") after_restore_job(result);
  else after_create_job(result);
}

void Supervisor::after_restore_job(const json& result) {
  Snapshots& s = *m_snap;
  if (!m_engine) return;
  Engine& e = *m_engine;
  if (result.value("ok", false)) {
    e.pid = result.value("pid", -1);
    e.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, e.pid, 0)));
    // A restored engine leases its KV arena again in the helper's resume, before its pid is known here.
    if (e.arena) e.arena->pid = e.pid;
    if (e.arena && m_engine.get() == &e) m_arena_outcome = e.arena;
    // As for a spawned engine: if fastrestartd dies, the next one kills what is left of this group
    // (a restored engine leads its own session, as it did when it was dumped).
    if (auto st = write_private_file(state_path(m_cfg, "engine.pgid"), engine_group_record(e.pid)); !st.ok())
      spdlog::warn("could not record the engine's process group: {}", st.error().message);
    s.restored++;
    s.last_restore = {{"id", e.snapshot_id}, {"unix_time", std::time(nullptr)}, {"helper_s", result["seconds"]},
                      {"timings", result.value("timings", json::object())}, {"pid", e.pid}};
    spdlog::info("snapshot {} restored as pid {} in {:.3f} s (oracle matched)", e.snapshot_id, e.pid,
                 result["seconds"].get<double>());
    if (auto it = s.orphans.find(e.pid); it != s.orphans.end()) {
      const int st = it->second;
      s.orphans.clear();
      on_engine_exit(st);
      return;
    }
    s.orphans.clear();
    if (e.stop_requested) {
      signal_group(e.pid, e.pidfd.get(), SIGKILL);
      return;
    }
    m_poll_timer.start(0.0, [this] { poll_readiness(); });
    return;
  }
  const std::string why = result.value("error", std::string("restore failed"));
  s.fallbacks++;
  s.failed_ids.insert(e.snapshot_id);
  s.last_failure = {{"id", e.snapshot_id}, {"reason", why}, {"unix_time", std::time(nullptr)}};
  spdlog::error("snapshot {} not restored: {}; falling back to a normal start", e.snapshot_id, why);
  if (e.stop_requested) {
    // Stopped while restoring: nothing runs; finish like an exit we asked for.
    e.exited = true;
    e.died_at = m_loop.now_s();
    m_last_exit = {{"cause", "requested"}, {"detail", "stopped while restoring a snapshot"},
                   {"unix_time", std::time(nullptr)}, {"died_at_s", e.died_at}};
    raise(Event::kEngineExited);
    return;
  }
  m_deadline_timer.stop();
  m_engine.reset();
  record_start_attempt(StartPath::kSnapshot, "failed", {"failed", "snapshot " + s.last_failure.value("id", std::string()) + " not restored: " + why});
  walk_start_paths(m_start_index + 1);
}

void Supervisor::after_create_job(const json& result) {
  Snapshots& s = *m_snap;
  if (result.value("ok", false)) {
    const json& m = result["manifest"];
    s.created++;
    s.last_create = {{"id", m.value("id", "")}, {"create_s", m.value("create_s", 0.0)},
                     {"image_bytes", m.value("image_bytes", uint64_t{0})}, {"unix_time", std::time(nullptr)}};
    s.force_id = m.value("id", "");
    spdlog::info("snapshot {} created in {:.3f} s ({:.1f} MB); restoring it as the live engine", s.force_id,
                 m.value("create_s", 0.0), static_cast<double>(m.value("image_bytes", uint64_t{0})) / 1e6);
  } else {
    s.create_failures++;
    const std::string why = result.value("error", std::string("create failed"));
    spdlog::error("snapshot create failed: {}", why);
    for (auto& w : s.create_waiters) w->set_value(error("snapshot_failed", why));
    s.create_waiters.clear();
    if (m_engine && !m_engine->exited && !m_engine->path.empty()) {
      // The dump failed before it ended the engine (CRIU resumes it; the helper unlocked CUDA): keep serving.
      m_engine->stop_requested = false;
      m_health_timer.start(m_cfg.readiness.check_interval_s, [this] { check_health(); }, m_cfg.readiness.check_interval_s);
    }
  }
  if (walk_waiting("snapshot_create")) raise(Event::kSnapshotCreated);
}

// Called at every READY: answers `snapshot create` once its artifact has been restored (or not).
void Supervisor::snapshot_after_ready(const std::string& path) {
  Snapshots& s = *m_snap;
  if (s.create_waiters.empty()) return;
  const std::string id = s.last_create.value("id", std::string("?"));
  // What the start did with the new artifact: restored it, tried and failed, or never tried (skipped).
  std::string restore_outcome, restore_detail;
  for (const auto& a : m_start_attempts)
    if (a.path == StartPath::kSnapshot) restore_outcome = a.outcome, restore_detail = a.why.detail;
  json reply;
  if (path == "snapshot") {
    reply = {{"ok", true}, {"message", "created snapshot " + id + " and restored it as the live engine"},
             {"created", s.last_create}, {"restore", s.last_restore}, {"start", m_last_start}};
  } else if (restore_outcome == "failed") {
    reply = error("snapshot_failed", "snapshot " + id + " was created but its restore failed (" +
                                         s.last_failure.value("reason", std::string("?")) + "); the engine started " + path);
  } else {
    // Created: the create succeeded even though this start did not restore it; say what happened instead.
    reply = {{"ok", true},
             {"message", "created snapshot " + id + "; it was not restored (" +
                             (restore_detail.empty() ? std::string("the start did not try it") : restore_detail) +
                             "): the engine started " + path},
             {"created", s.last_create}, {"restore", nullptr}, {"start", m_last_start}};
  }
  for (auto& w : s.create_waiters) w->set_value(reply);
  s.create_waiters.clear();
}

json Supervisor::snapshot_status() {
  const Snapshots& s = *m_snap;
  json artifacts = json::array();
  if (s.wanted)
    for (const auto& id : snapshot::Store(s.dir).ids()) artifacts.push_back(id);
  return {{"enabled", s.usable},
          {"problem", s.usable ? "" : s.problem},
          {"criu", s.criu},
          {"criu_version", s.criu_version},
          {"dir", s.dir},
          {"artifacts", artifacts},
          {"job", s.helper_pid > 0 ? json(s.job) : json(nullptr)},
          {"created", s.created},
          {"create_failures", s.create_failures},
          {"restored", s.restored},
          {"fallbacks", s.fallbacks},
          {"last_create", s.last_create},
          {"last_restore", s.last_restore},
          {"last_failure", s.last_failure}};
}

json Supervisor::handle_snapshot(const json& req, std::shared_ptr<std::promise<json>> reply) {
  Snapshots& s = *m_snap;
  const std::string action = req.value("action", "");
  const std::string id = req.value("id", "");
  snapshot::Store store(s.dir);
  if (!s.usable) return error("unsupported", "snapshots are not available: " + s.problem);
  if (action == "list") {
    json out = json::array();
    for (const auto& a : store.list()) {
      json row{{"id", a.id}};
      if (a.manifest.ok()) {
        row.update({{"created_unix", a.manifest->created_unix}, {"create_s", a.manifest->create_s},
                    {"image_bytes", a.manifest->image_bytes}, {"cuda", a.manifest->identity.cuda},
                    {"failed_here", s.failed_ids.count(a.id) > 0}});
      } else {
        row["error"] = a.manifest.error().message;
      }
      out.push_back(row);
    }
    return {{"ok", true}, {"snapshots", out}};
  }
  // The id asked for, else the newest artifact ("" when there is none).
  auto id_or_newest = [&]() -> std::string {
    if (!id.empty()) return id;
    auto all = store.list();
    return all.empty() ? std::string() : all.front().id;
  };
  if (action == "inspect") {
    const std::string which = id_or_newest();
    if (which.empty()) return error("not_found", "no snapshot in " + s.dir);
    if (!snapshot::valid_id(which)) return error("invalid_argument", "invalid snapshot id \"" + which + "\"");
    auto m = snapshot::read_manifest(store.path(which));
    if (!m.ok()) return error(errc_name(m.error().code), m.error().message);
    // Break-even: restores needed before the time saved pays back the creation, from measured times.
    json hist = json::object();
    for (const auto& [path, h] : m_stats.time_to_ready()) hist[path] = h.to_json();
    const double restore = hist.contains("snapshot") ? mean(hist["snapshot"]) : 0.0;
    double normal = 0;
    std::string normal_path;
    for (const char* p : {"warm", "cold"})
      if (hist.contains(p) && mean(hist[p]) > 0 && normal_path.empty()) normal = mean(hist[p]), normal_path = p;
    json be{{"create_s", m->create_s}, {"restore_s", restore}, {"normal_start_s", normal}, {"normal_path", normal_path}};
    const auto b = snapshot::break_even(m->create_s, restore, normal, normal_path);
    be["restores"] = b.restores ? json(*b.restores) : json(nullptr);
    if (!b.note.empty()) be["note"] = b.note;
    return {{"ok", true}, {"manifest", snapshot::to_json(*m)}, {"break_even", be}};
  }
  if (action == "delete") {
    if (id.empty()) return error("invalid_argument", "snapshot delete needs an id");
    if (auto st = store.remove(id); !st.ok()) return error(errc_name(st.error().code), st.error().message);
    s.failed_ids.erase(id);
    return {{"ok", true}, {"message", "deleted snapshot " + id}};
  }
  if (action != "create" && action != "restore") return error("invalid_argument", "unknown snapshot action \"" + action + "\"");
  if (!engine_serving())
    return error("busy", std::string("snapshot ") + action + " needs a ready engine (the supervisor is " +
                             reported_state_name(m_state) + ")");
  if (s.helper_pid > 0) return error("busy", "a snapshot " + s.job + " is already running");
  if (m_reload) return error("busy", "a reload is in progress");
  if (action == "restore") {
    const std::string which = id_or_newest();
    if (which.empty()) return error("not_found", "no snapshot in " + s.dir);
    if (!snapshot::valid_id(which) || !std::filesystem::is_directory(store.path(which)))
      return error("not_found", "no snapshot \"" + which + "\" in " + s.dir);
    s.failed_ids.erase(which);
    s.force_id = which;
    raise(Event::kRestartRequested);
    return {{"ok", true}, {"message", "restarting the engine from snapshot " + which}};
  }
  // create
  if (!m_engine->in_pid_ns) return error("unsupported", "the engine was not started in its own PID namespace");
  // zero_copy: the helper asks the engine to release the daemon's pools first (and refuses, with the
  // reason, when the engine does not answer).
  if (m_cfg.gpus.size() > 1) return error("unsupported", "snapshots are tensor-parallel 1 only (gpus lists more than one)");
  std::vector<std::string> args{"--pid", std::to_string(m_engine->pid), "--stdout-pipe", pipe_name(m_engine->output.get())};
  if (!id.empty()) args.insert(args.end(), {"--id", id});
  // The dump ends the engine: that exit is ours, and the next start restores the new artifact.
  m_health_timer.stop();
  m_engine->stop_requested = true;
  if (!spawn_helper("create", args)) {
    m_engine->stop_requested = false;
    m_health_timer.start(m_cfg.readiness.check_interval_s, [this] { check_health(); }, m_cfg.readiness.check_interval_s);
    return error("internal", "cannot start the snapshot helper");
  }
  set_status("Creating a snapshot of the engine");
  s.create_waiters.push_back(std::move(reply));
  return nullptr;
}

}  // namespace fr::supervisor
