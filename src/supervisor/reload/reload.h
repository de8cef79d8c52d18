// The engine's flags and their reload (docs/supervisor.md, "Config pushes"): the flags a start runs now,
// the last flags an engine was ready on, the pending reload with the requests waiting for its end, the
// pushed flags on disk (flags.json, flags_file.h) and the rollback rule. It owns no process and no timer:
// the Supervisor tells it what happened (a reload begins, an engine is ready, an engine that failed is
// drained, the loop ends) and does what it answers (counts it, restarts the engine), so every decision
// here is tested without a process (tests/supervisor/reload/). Loop thread only.
//
// The rule: a reload's new flags run until an engine is ready on them, and are then written to flags.json;
// a failed engine before that rolls them back to the last flags that were ready, once (the restart on the
// old flags is not a trial of the new ones). New flags that cannot be written are rolled back as well: a
// fastrestartd started later would run what flags.json holds.
#pragma once

#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/flags.h"

namespace fr::supervisor {

// A rolled-back push: what the Supervisor counts (Stats::rollback) and how it restarts the engine.
struct Rollback {
  std::string cause;   // the rejected engine's exit cause, or "unpersisted"
  std::string detail;  // its detail, or why flags.json could not be written
  std::vector<std::string> rejected_flags;  // the new flags, redacted
  bool cold = false;   // the daemons were reloaded for the new flags: the old ones reload them again
};

// What READY ended (Reload::ready): nothing, a reload (answered; `outcome` is counted, Stats::reload), or a
// reload whose flags could not be persisted (rolled back; the reload stays pending until the next READY).
struct ReadyOutcome {
  std::optional<std::string> outcome;  // warm | cold | rolled_back
  std::optional<Rollback> rollback;
};

class Reload {
 public:
  // A control request waiting for the reload's end (`reload --wait`).
  using Waiter = std::shared_ptr<std::promise<nlohmann::json>>;

  // `flags_path`: flags.json. Starts on the pushed flags it holds when they were pushed on `config_flags`
  // (load_pushed_flags), else on `config_flags`; they count as the last ready ones until an engine is.
  Reload(std::string flags_path, const FlagList& config_flags);

  const FlagList& flags() const { return m_flags; }  // what the next engine starts with
  const FlagList& last_ready_flags() const { return m_last_ready; }
  bool pending() const { return m_pending != nullptr; }
  bool cold() const;  // the pending reload changes what the daemons hold (false when none is pending)
  // The pending reload's new flags are on trial: no engine was ready on them and none was rolled back. An
  // engine's failure now rejects the push; it is not a failure of the running configuration.
  bool on_trial() const;

  // Begins a reload from the running flags to `next` (cold: they change what the daemons hold; `now`, the
  // loop's clock, times it). The flags are `next` from here on. `waiter` (may be null) is answered at its end.
  void begin(FlagList next, bool cold, double now, Waiter waiter);
  // The reply to the request that began it, when it does not wait: null when a waiter will be answered.
  nlohmann::json started_reply() const;

  // READY of an engine started on `engine_flags`, on the start path `path` at `now`: they are the last
  // ready flags. A pending reload ends: its flags (unless rolled back) are written with the config's
  // `config_flags` and its waiters answered; or, when the write fails, it rolls back (the outcome says so).
  ReadyOutcome ready(const FlagList& engine_flags, const std::string& path, double now, const FlagList& config_flags);
  // An engine exited and was drained, a failure when `failure` (its cause and detail): the rollback rule.
  // A rollback puts the last ready flags back; the Supervisor restarts on them at once.
  std::optional<Rollback> after_exit(bool failure, const std::string& cause, const std::string& detail);
  // The loop ends: a pending reload's waiters are told it was cancelled.
  void close();

 private:
  struct Pending {
    FlagList new_flags, old_flags;
    bool cold = false;
    double started = 0;
    bool rolled_back = false;
    bool unpersisted = false;  // rolled back because the new flags could not be written to flags.json
    std::string rollback_reason;
    std::vector<Waiter> waiters;
  };
  void answer(const nlohmann::json& reply);

  std::string m_path;
  FlagList m_flags;
  FlagList m_last_ready;
  std::unique_ptr<Pending> m_pending;
};

}  // namespace fr::supervisor
