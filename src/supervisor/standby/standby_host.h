// What the standby part (standby.h) needs from the supervisor (the loop and the config come with its
// construction: part.h's PartBasics, and the GPU probe): the
// engine's command line and flags as a start would run them now, whether an engine serves, the daemons'
// generation (a warmed standby maps one's weights), the memory floor, and the hand-over of a released
// standby as the live engine. Implemented by Supervisor; tests give their own. Loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/classify.h"
#include "supervisor/config.h"
#include "supervisor/engine.h"
#include "supervisor/engine_launch.h"
#include "supervisor/engines/engine_kind.h"
#include "supervisor/flags.h"
#include "supervisor/host_probe.h"
#include "supervisor/loop.h"

namespace fr::supervisor {

class StandbyHost {
 public:
  virtual ~StandbyHost() = default;
  virtual const FlagList& engine_flags() const = 0;  // the engine's current flags
  // The engine kind: its failure lines classify a standby's exit as an engine's.
  virtual const EngineAdapter& engine_kind() const = 0;
  // A new engine record on the current flags, with the kind's report.
  virtual std::unique_ptr<Engine> new_engine_record() = 0;
  // An engine serves and fastrestartd is neither stopping nor failed: only then is a standby started.
  virtual bool engine_steady() const = 0;
  // Counts the daemons' (re)starts: a standby started on an earlier generation is of no use at warmed.
  virtual uint64_t daemon_generation() const = 0;
  // The standby's command line, environment and PID namespace (engine_launch.h; for_standby: only a
  // warmed standby's reserve is checked against free memory). The listening socket comes with the part's
  // construction (part.h's ListenHandoff).
  virtual EngineCommand engine_command(bool for_standby) = 0;
  // Why no engine (nor standby) may start on the GPUs' shares now; "" when it may.
  virtual std::string engine_share_refusal() = 0;
  // When the last engine died (loop time), for the release's timeline; nullopt when none died yet.
  virtual std::optional<double> engine_died_at() const = 0;
  // The release: the standby's process becomes the live engine. The host reads its output as the
  // engine's from now on, records its group, and runs readiness as for any start.
  virtual void adopt_engine(std::unique_ptr<Engine> engine) = 0;
  // The standby's group is gone after stop_before_daemons (standby.h): the daemons may stop now.
  virtual void standby_gone() = 0;
};

}  // namespace fr::supervisor
