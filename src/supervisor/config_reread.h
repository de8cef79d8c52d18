// A re-read config file (SIGHUP, `systemctl reload`, `fastrestartctl reload` without flags) applied to the
// running one (docs/config.md, "Reload"). Pure: the Supervisor reads the file, checks it, and does what
// this answers.
#pragma once

#include <string>

#include "fastrestart/result.h"
#include "supervisor/config.h"

namespace fr::supervisor {

struct Reread {
  // The running config with the re-read [engine], [readiness] and [memory]. engine.kind and
  // engine.vllm_rules stay the running ones: the engine kind's adapter reads the running engines' output.
  Config config;
  bool flags_changed = false;  // engine.flags differ: the Supervisor starts a reload on them
  // engine.kind or engine.vllm_rules changed: they take effect at fastrestartd's next start (logged).
  bool kind_deferred = false;
};

// Refused whole (Errc::kInvalidArgument, address_change's or front_change's words) when where the engine
// serves or the front's settings changed: the socket fastrestartd holds, the probes and the running
// front's requests all follow fastrestartd's start; nothing of `next` is applied then.
Result<Reread> reread(const Config& running, const Config& next);

}  // namespace fr::supervisor
