// The soak of the restart loop (docs/reliability.md, "Soak"): a real fastrestartd supervising
// fastrestart-tinyengine with a real fastrestart-weightd (host backend), driven through hundreds of cycles
// of randomly chosen faults, each checked when it settles, with leak checks at the end.
//
// Sizes come from the environment so CI runs it small and a person large:
//   FR_SOAK_CYCLES (default 200)  FR_SOAK_SIZE (checkpoint, default 16M)  FR_SOAK_SEED (default: random;
//   always printed, and the same seed replays the same sequence of cycles and choices).
// With a standby (Params::standby, docs/reliability.md "Soak with a standby"): restart.start = standby,
// warm, cold, its own cycles (soak_standby.cc), and standby checks after each; FR_SOAK_CYCLES (default 80)
// and FR_SOAK_STANDBY_LEVEL (pre_gpu or warmed; default: from the seed, printed with it).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/supervised.h"
#include "support/harness.h"

namespace fr::soak {

using test::free_port;
using test::http_get;
using test::http_post;
using test::Supervised;

struct Params {
  int cycles = 200;
  uint64_t seed = 0;
  std::string size = "16M";
  bool standby = false;  // restart.start = ["standby", "warm", "cold"]; the standby cycles
  std::string level;     // [standby] level, with standby
  static Params from_env(bool standby = false);
};

// What a cycle expects of the exits it causes: each cause in `required` at least that many times, and
// nothing outside `required` and `allowed`.
struct Expect {
  std::map<std::string, int> required;
  std::set<std::string> allowed;
  bool new_engine = true;     // the engine's pid must change
  bool new_supervisor = false;  // fastrestartd was restarted: its counters start again
  pid_t released = 0;         // this parked standby must be the new engine (last_start.path "standby")
  bool not_released = false;  // no standby may be released: a later path (warm, or cold on a miss) starts it
};

class Soak {
 public:
  explicit Soak(const Params& p);
  ~Soak();
  // Runs every cycle, then the final checks. Failures are gtest failures naming the cycle and the seed.
  void run();

 private:
  struct Kind {
    const char* name;
    double weight;
    Expect (Soak::*fn)();
  };
  const std::vector<Kind>& kinds() const;

  // Setup.
  void make_oracle();
  void write_config();

  // The cycles (soak_cycles.cc).
  Expect kill9_engine();
  Expect sigterm_engine();
  Expect exit_after_requests();
  Expect abort_after_requests();
  Expect startup_fault();
  Expect start_timeout();
  Expect hang();
  Expect orphan_worker();
  Expect ignore_sigterm();
  Expect restart();
  Expect reload_during_restart();
  Expect kill9_daemon_during_attach();
  Expect kill9_supervisor();
  Expect control_disconnect();
  Expect garbage_to_every_socket();
  Expect stalled_half_requests();
  Expect malformed_control_requests();
  Expect replace_checkpoint_during_cold_start();
  // With a standby (soak_standby.cc).
  Expect kill9_standby();
  Expect standby_dies_while_parked();
  Expect kill9_standby_starting();
  Expect engine_dies_while_standby_starts();
  Expect flag_push();
  Expect startup_fault_after_push();
  Expect faulty_standby();

  // Helpers.
  void queue_faults(const std::string& flags);  // for the next engine start only (never a standby's)
  void queue_standby_faults(const std::string& flags);  // for the next standby only
  pid_t parked_standby();  // the parked standby's pid, or 0
  // SIGKILLs the parked standby and waits for the next one to park; returns its pid (0 on failure).
  pid_t replace_standby(const std::string& what);
  // Pushes `--threads N` with an N the engine does not run with; returns N. `exit_code`, when given,
  // gets fastrestartctl's (3: rolled back); otherwise it must be 0.
  int push_new_threads(int* exit_code = nullptr);
  // After each cycle with a standby: one engine and at most one standby process, which is not the
  // engine, leads its own process group and holds no port; one listener on the engine's port.
  void check_standby(const nlohmann::json& status, const std::string& what);
  void watch_port();  // the port monitor's thread: never two sockets listening on the engine's port
  Expect request_restart(Expect e = {});
  pid_t engine_pid();
  pid_t daemon_pid();
  // Waits for READY with a running engine, no reload in flight, ready daemons, and (new_engine) an engine
  // other than `old`. Returns the status.
  nlohmann::json settle(pid_t old, bool new_engine, const std::string& what);
  // A completion must equal the one the engine gave when loaded from disk alone.
  void check_oracle(const std::string& what);
  void check_classified(const std::map<std::string, int>& before, const nlohmann::json& after, const Expect& e,
                        const std::string& what);
  void check_no_zombies(const std::string& what);
  void sample(int cycle);
  void final_checks();
  std::string where(int cycle, const char* kind) const;
  int uniform(int lo, int hi);

  Params m_p;
  std::mt19937_64 m_rng;
  test::TempDir m_dir;
  std::string m_checkpoint, m_config, m_faults, m_run, m_ctl;
  uint16_t m_engine_port = 0, m_http_port = 0;
  double m_start_timeout_s = 3;    // readiness.startup_timeout_s: 3 s plus 15 s per GiB of checkpoint
  double m_check_timeout_s = 1.5;  // readiness.check_timeout_s (also the probe's): 1.5 s plus 2 s per GiB
  nlohmann::json m_oracle;       // choices[0] of the disk-only answer
  std::string m_oracle_text;     // its first token: the readiness oracle
  std::unique_ptr<Supervised> m_sup;
  std::set<pid_t> m_seen;        // every engine, worker, daemon and supervisor the soak met
  std::map<std::string, int> m_cycles_by_kind, m_exits_by_cause;
  std::map<std::string, double> m_seconds_by_kind;
  int m_rollbacks = 0;           // pushes rolled back (their engine's exit is not in the restart counters)
  nlohmann::json m_standby_end;  // the standby's status before the final stop
  uint64_t m_held_bytes = 0;
  int m_restarts = 0, m_faults_injected = 0, m_last_supervisor_kill = -1;
  std::string m_standby_faults;  // with a standby: FR_SOAK_STANDBY_FAULTS
  std::thread m_port_watch;
  std::atomic<bool> m_stop_watch{false};
  std::atomic<int> m_port_violations{0};
  std::mutex m_watch_mu;
  std::string m_port_violation;  // the first one (under m_watch_mu)
  std::map<std::string, int> m_paths;  // start paths of the new engines, over the run
  int m_disconnect_threads = 0;  // the --threads the last control_disconnect pushed (each push must differ)
  long m_rss_base = -1, m_rss_end = -1;
  int m_fds_base = -1, m_fds_end = -1, m_base_cycle = -1;
};

}  // namespace fr::soak
