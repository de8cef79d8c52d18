// The snapshots part (docs/snapshot.md): the CRIU artifacts, the jobs of the helper process
// (fastrestart-snapshot) and what they counted. It serves the start path "snapshot" as its StartPart (a
// restore through the helper; a restore that fails falls back to the next listed path), answers the
// control op `snapshot` (list, inspect, delete, restore, create: dump the live engine, then restore it at
// once as the live engine, so the artifact is proven before the command returns) and fills status's
// "snapshot". CRIU and CUDA run only in the helper: here it is spawned, reaped and its result file read.
// It reaches the supervisor only through its SnapshotHost. At most one helper runs at a time.
// Loop thread only.
#pragma once

#include <sys/types.h>

#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/fd.h"
#include "status/status.h"
#include "supervisor/loop.h"
#include "supervisor/snapshots/snapshot_host.h"
#include "supervisor/start/part.h"

namespace fr::supervisor {

class Snapshots final : public Part {
 public:
  // basics.listen: the socket a restored engine gets and a dump names (kNoListen: none).
  // `stats`: what status and /metrics counted (the break-even of `snapshot inspect` reads the times to
  // ready); it outlives the part.
  Snapshots(SnapshotHost& host, RestoreHost& restore_host, const PartBasics& basics, const Stats& stats);
  ~Snapshots() override;

  // Reads the config and checks criu, the helper and the artifacts' directory once, before the loop
  // runs (it forks criu: a blocking call that must not race the loop's SIGCHLD reaper). Snapshots are
  // unusable, with the reason in status, when any is missing.
  void init();
  // The loop ends: a job cut short is killed, and every handle goes.
  void close() override;

  // StartPart: the path "snapshot".
  std::optional<StartRefusal> refusal() const override;
  Status start() override;  // begins a restore; an error when the helper cannot be started

  // restart.start lists "snapshot": engines start in their own PID namespace, without io_uring.
  bool wanted() const { return m_wanted; }
  // What a snapshottable engine's environment gets besides the engine's own (UV_USE_IO_URING, and in
  // zero_copy the socket the helper asks it to release the daemons' pools on).
  void add_engine_env(std::map<std::string, std::string>& env) const;
  bool creating() const { return m_helper_pid > 0 && m_job == "create"; }  // no restart, reload or stop meanwhile
  // An explicit request (`snapshot restore`, or the artifact a create just wrote) for the next start.
  bool requested() const { return !m_force_id.empty(); }
  void drop_request() { m_force_id.clear(); }

  // A reaped child: true when it was the helper (its job is then finished). keep_exit: another pid that
  // none claimed, perhaps a restored engine that died before the helper's result named it.
  bool on_exit(pid_t pid, int status) override;
  void keep_exit(pid_t pid, int status);
  void add_known_pids(std::set<pid_t>& known) const override;

  // The control op `snapshot`: the reply, or null when it comes later through `reply` (a create answers
  // once its artifact was restored, or not).
  nlohmann::json handle(const nlohmann::json& req, std::shared_ptr<std::promise<nlohmann::json>> reply);
  // At every READY on `path`: answers a pending create. `restore_outcome` and `restore_detail` are the
  // start's attempt on the path "snapshot" (empty when it made none); `last_start` is status's.
  void after_ready(const std::string& path, const std::string& restore_outcome, const std::string& restore_detail,
                   const nlohmann::json& last_start);

  nlohmann::json status() const;  // status "snapshot"
  status::SnapshotCounts counts() const;

  // Part: the path tag; at every READY, after_ready above with the start's facts; status "snapshot" and
  // its /metrics counts.
  StartPath path() const override { return StartPath::kSnapshot; }
  void after_ready(const ReadyFacts& ready) override;
  void fill_status(status::SupervisorStatus& st) const override;

 private:
  std::string next_id() const;  // the artifact the path would restore ("" none)
  bool spawn_helper(const std::string& job, std::vector<std::string> args);
  void after_restore_job(const nlohmann::json& result);
  void after_create_job(const nlohmann::json& result);
  nlohmann::json inspect(const std::string& which) const;

  SnapshotHost& m_host;
  RestoreHost& m_restore_host;
  Loop& m_loop;
  const Config& m_cfg;
  const ListenHandoff& m_listen;
  const Stats& m_stats;
  bool m_wanted = false;         // restart.start lists "snapshot"
  bool m_usable = false;         // and criu is there and new enough
  std::string m_criu;            // resolved path
  std::string m_criu_version;
  std::string m_problem;         // why snapshots are unusable, for status
  std::string m_dir, m_helper;
  pid_t m_helper_pid = -1;
  std::string m_job;             // "create" | "restore" while m_helper_pid > 0
  std::string m_restoring;       // the artifact of the restore under way
  std::string m_result_path;
  double m_job_started = 0;
  std::string m_force_id;        // restore this artifact next (a fresh create, or `snapshot restore ID`)
  std::set<std::string> m_failed_ids;  // artifacts whose restore failed: not tried again
  std::map<pid_t, int> m_orphans;      // exits reaped before the restored pid was known
  nlohmann::json m_last_create, m_last_restore, m_last_failure;
  uint64_t m_created = 0, m_restored = 0, m_fallbacks = 0, m_create_failures = 0;
  std::vector<std::shared_ptr<std::promise<nlohmann::json>>> m_create_waiters;
  UniqueFd m_helper_output;      // a create helper's output (a restore's becomes the engine's)
  std::unique_ptr<LineReader> m_helper_reader;  // declared after m_helper_output: destroyed before it
  std::unique_ptr<Timer> m_job_timer;           // snapshot.timeout_s
};

}  // namespace fr::supervisor
