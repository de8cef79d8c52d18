// fastrestart-front under fastrestartd (engine.listen = "front"; docs/front.md, "Running it"). fastrestartd
// owns the public listening socket and hands it to the front as fd 3 (LISTEN_FDS, name fastrestart-engine);
// the front forwards to the engines' loopback socket (`--upstream 127.0.0.1:<front.bound_upstream_port>`).
//
// Contract
// - start(): spawns the front (before the first engine, so the port answers from fastrestartd's start).
//   A front that exits without being asked to is logged with its exit (code or signal) and spawned again
//   after a backoff (0.1 s doubling to 5 s; back to 0.1 s after a run of 30 s), counted in `restarts`. The
//   public socket stays open in fastrestartd meanwhile: connections made then wait in its accept queue.
// - Counters: the front rewrites its --status-file (<state_dir>/front.status.json) when they change.
//   status() reads it (only when it names the running front's pid); at each exit the file's last counters
//   are added to those of the fronts before, and the file removed, so the totals span restarts. Requests
//   the dead front had received and not yet answered, rejected or failed are counted `lost` (what its last
//   file knew: a request received after its last write is not known).
// - stop(done): SIGTERM (the front closes its copy of the socket and lets requests in flight finish for
//   front.stop_grace_s), SIGKILL 5 s after that grace; `done` runs on the loop once it is gone (at once when
//   none runs). No respawn after stop(). kill_now(): SIGKILL and reap, for fastrestartd's exit.
// - Loop thread only; on_exit() is called from the supervisor's reaper with every reaped pid.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "status/status.h"
#include "supervisor/config.h"
#include "supervisor/loop.h"
#include "supervisor/supervised_child.h"

namespace fr::supervisor {

// The front's program: front.path, else fastrestart-front beside fastrestartd (as fastrestart-weightd), else $PATH.
std::string front_binary(const Config& c);
// Its argv for `listen`'s config (front.*) and the status file.
std::vector<std::string> front_argv(const Config& c, const std::string& status_file);
// The status file's counters (docs/front.md, "Status") into `into`; false when the text is not one (a
// half-written file cannot happen: the front renames it into place).
bool read_front_counters(const std::string& text, status::FrontRequestsStatus& into, int64_t* pid, uint64_t* connections);

class FrontProcess {
 public:
  FrontProcess(Loop& loop, const Config& cfg, int listen_fd, std::string status_file);
  ~FrontProcess();
  FrontProcess(const FrontProcess&) = delete;
  FrontProcess& operator=(const FrontProcess&) = delete;

  void start();
  bool on_exit(pid_t pid, int status);  // true when `pid` was the front's
  void stop(std::function<void()> done);
  void kill_now();
  // At fastrestartd's exit, off the loop: SIGTERM, wait (front.stop_grace_s + 5 s), then kill_now().
  void stop_blocking();
  pid_t pid() const { return m_running ? m_child.pid : 0; }
  bool stopping() const { return m_stopping; }
  status::FrontStatus status() const;

 private:
  void spawn();
  // Adds the status file's counters to m_past (and the in-flight ones to `lost` when `died`); removes it.
  void collect(bool died);

  Loop& m_loop;
  const Config& m_cfg;
  int m_listen_fd;
  std::string m_status_file;
  SupervisedChild m_child;
  bool m_running = false;
  bool m_stopping = false;
  double m_spawned_at = 0;
  double m_backoff_s = 0;
  uint64_t m_restarts = 0;
  std::string m_last_exit;
  status::FrontRequestsStatus m_past;  // the fronts that exited, summed
  std::function<void()> m_on_stopped;
  Timer m_respawn_timer, m_kill_timer;
};

}  // namespace fr::supervisor
