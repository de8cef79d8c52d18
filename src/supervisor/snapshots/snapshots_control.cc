// The snapshots part's control op `snapshot` (docs/snapshot.md, "Control"): list, inspect (with the
// break-even from measured times), delete, restore (the next start restores the artifact), create (the
// dump through the helper; answered at the next READY, once the artifact was restored as the live engine).
#include <sys/stat.h>

#include <filesystem>
#include <spdlog/spdlog.h>

#include "snapshot/break_even.h"
#include "snapshot/store.h"
#include "supervisor/snapshots/snapshots.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

json snapshot_error(const std::string& code, const std::string& msg) {
  return {{"ok", false}, {"error", {{"code", code}, {"message", msg}}}};
}

// "pipe:[inode]" of the pipe whose read end we hold (the engine's stdout and stderr).
std::string pipe_name(int read_fd) {
  struct stat st{};
  if (read_fd < 0 || ::fstat(read_fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return "";
  return "pipe:[" + std::to_string(st.st_ino) + "]";
}

double histogram_mean(const json& h) {
  const double n = h.value("count", 0.0);
  return n > 0 ? h.value("sum", 0.0) / n : 0.0;
}

}  // namespace

json Snapshots::inspect(const std::string& which) const {
  snapshot::Store store(m_dir);
  if (which.empty()) return snapshot_error("not_found", "no snapshot in " + m_dir);
  if (!snapshot::valid_id(which)) return snapshot_error("invalid_argument", "invalid snapshot id \"" + which + "\"");
  auto m = snapshot::read_manifest(store.path(which));
  if (!m.ok()) return snapshot_error(errc_name(m.error().code), m.error().message);
  // Break-even: restores needed before the time saved pays back the creation, from measured times.
  json hist = json::object();
  for (const auto& [path, h] : m_stats.time_to_ready()) hist[path] = h.to_json();
  const double restore = hist.contains("snapshot") ? histogram_mean(hist["snapshot"]) : 0.0;
  double normal = 0;
  std::string normal_path;
  for (const char* p : {"warm", "cold"})
    if (hist.contains(p) && histogram_mean(hist[p]) > 0 && normal_path.empty()) normal = histogram_mean(hist[p]), normal_path = p;
  json be{{"create_s", m->create_s}, {"restore_s", restore}, {"normal_start_s", normal}, {"normal_path", normal_path}};
  const auto b = snapshot::break_even(m->create_s, restore, normal, normal_path);
  be["restores"] = b.restores ? json(*b.restores) : json(nullptr);
  if (!b.note.empty()) be["note"] = b.note;
  return {{"ok", true}, {"manifest", snapshot::to_json(*m)}, {"break_even", be}};
}

json Snapshots::handle(const json& req, std::shared_ptr<std::promise<json>> reply) {
  const std::string action = req.value("action", "");
  const std::string id = req.value("id", "");
  snapshot::Store store(m_dir);
  if (!m_usable) return snapshot_error("unsupported", "snapshots are not available: " + m_problem);
  if (action == "list") {
    json out = json::array();
    for (const auto& a : store.list()) {
      json row{{"id", a.id}};
      if (a.manifest.ok()) {
        row.update({{"created_unix", a.manifest->created_unix}, {"create_s", a.manifest->create_s},
                    {"image_bytes", a.manifest->image_bytes}, {"cuda", a.manifest->identity.cuda},
                    {"failed_here", m_failed_ids.count(a.id) > 0}});
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
  if (action == "inspect") return inspect(id_or_newest());
  if (action == "delete") {
    if (id.empty()) return snapshot_error("invalid_argument", "snapshot delete needs an id");
    if (auto st = store.remove(id); !st.ok()) return snapshot_error(errc_name(st.error().code), st.error().message);
    m_failed_ids.erase(id);
    return {{"ok", true}, {"message", "deleted snapshot " + id}};
  }
  if (action != "create" && action != "restore") return snapshot_error("invalid_argument", "unknown snapshot action \"" + action + "\"");
  if (!m_host.engine_serving())
    return snapshot_error("busy", std::string("snapshot ") + action + " needs a ready engine (the supervisor is " +
                                      m_host.reported_state() + ")");
  if (m_helper_pid > 0) return snapshot_error("busy", "a snapshot " + m_job + " is already running");
  if (m_host.reload_running()) return snapshot_error("busy", "a reload is in progress");
  if (action == "restore") {
    const std::string which = id_or_newest();
    if (which.empty()) return snapshot_error("not_found", "no snapshot in " + m_dir);
    if (!snapshot::valid_id(which) || !std::filesystem::is_directory(store.path(which)))
      return snapshot_error("not_found", "no snapshot \"" + which + "\" in " + m_dir);
    m_failed_ids.erase(which);
    m_force_id = which;
    m_host.raise(Event::kRestartRequested);
    return {{"ok", true}, {"message", "restarting the engine from snapshot " + which}};
  }
  // create
  const DumpTarget engine = m_host.dump_target();
  if (!engine.in_pid_ns) return snapshot_error("unsupported", "the engine was not started in its own PID namespace");
  // zero_copy: the helper asks the engine to release the daemon's pools first (and refuses, with the
  // reason, when the engine does not answer).
  if (m_cfg.gpus.size() > 1) return snapshot_error("unsupported", "snapshots are tensor-parallel 1 only (gpus lists more than one)");
  std::vector<std::string> args{"--pid", std::to_string(engine.pid), "--stdout-pipe", pipe_name(engine.output_fd)};
  if (!id.empty()) args.insert(args.end(), {"--id", id});
  // The dump ends the engine: that exit is ours, and the next start restores the new artifact.
  m_host.dump_begins();
  if (!spawn_helper("create", args)) {
    m_host.dump_failed();
    return snapshot_error("internal", "cannot start the snapshot helper");
  }
  m_host.set_status("Creating a snapshot of the engine");
  m_create_waiters.push_back(std::move(reply));
  return nullptr;
}

void Snapshots::after_create_job(const json& result) {
  if (result.value("ok", false)) {
    const json& m = result["manifest"];
    m_created++;
    m_last_create = {{"id", m.value("id", "")}, {"create_s", m.value("create_s", 0.0)},
                     {"image_bytes", m.value("image_bytes", uint64_t{0})}, {"unix_time", std::time(nullptr)}};
    m_force_id = m.value("id", "");
    spdlog::info("snapshot {} created in {:.3f} s ({:.1f} MB); restoring it as the live engine", m_force_id,
                 m.value("create_s", 0.0), static_cast<double>(m.value("image_bytes", uint64_t{0})) / 1e6);
  } else {
    m_create_failures++;
    const std::string why = result.value("error", std::string("create failed"));
    spdlog::error("snapshot create failed: {}", why);
    for (auto& w : m_create_waiters) w->set_value(snapshot_error("snapshot_failed", why));
    m_create_waiters.clear();
    // The dump failed before it ended the engine (CRIU resumes it; the helper unlocked CUDA): keep serving.
    m_host.dump_failed();
  }
  m_host.create_finished();
}

// Called at every READY: answers `snapshot create` once its artifact has been restored (or not).
void Snapshots::after_ready(const std::string& path, const std::string& restore_outcome, const std::string& restore_detail,
                            const json& last_start) {
  if (m_create_waiters.empty()) return;
  const std::string id = m_last_create.value("id", std::string("?"));
  // What the start did with the new artifact: restored it, tried and failed, or never tried (skipped).
  json reply;
  if (path == "snapshot") {
    reply = {{"ok", true}, {"message", "created snapshot " + id + " and restored it as the live engine"},
             {"created", m_last_create}, {"restore", m_last_restore}, {"start", last_start}};
  } else if (restore_outcome == "failed") {
    reply = snapshot_error("snapshot_failed", "snapshot " + id + " was created but its restore failed (" +
                                                  m_last_failure.value("reason", std::string("?")) + "); the engine started " + path);
  } else {
    // Created: the create succeeded even though this start did not restore it; say what happened instead.
    reply = {{"ok", true},
             {"message", "created snapshot " + id + "; it was not restored (" +
                             (restore_detail.empty() ? std::string("the start did not try it") : restore_detail) +
                             "): the engine started " + path},
             {"created", m_last_create}, {"restore", nullptr}, {"start", last_start}};
  }
  for (auto& w : m_create_waiters) w->set_value(reply);
  m_create_waiters.clear();
}

void Snapshots::after_ready(const ReadyFacts& ready) {
  after_ready(ready.path, ready.restore_outcome, ready.restore_detail, ready.last_start ? status::to_json(*ready.last_start) : json());
}

void Snapshots::fill_status(status::SupervisorStatus& st) const {
  st.metrics.snapshots = counts();
  st.snapshot = status();
}

}  // namespace fr::supervisor
