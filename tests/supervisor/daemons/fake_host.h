// A DaemonHost for the daemon sets' unit tests: a real loop, the events raised recorded in order.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "supervisor/daemons/daemon_set.h"

namespace fr::supervisor::testing {

class FakeGpus final : public GpuProbe {
 public:
  std::map<std::string, std::string> uuids;  // index -> UUID; others are unknown
  Result<GpuMemory> memory(const std::string& gpu) override {
    auto it = uuids.find(gpu);
    if (it == uuids.end()) return make_error(Errc::kNotFound, "no GPU " + gpu);
    GpuMemory m;
    m.uuid = it->second;
    m.total = 80ull << 30;
    return m;
  }
};

class FakeHost final : public DaemonHost {
 public:
  Config cfg;
  FakeGpus probe;
  Loop event_loop;
  std::vector<Event> events;
  bool awaiting = true, stopping_for_good = false;
  std::string text;

  Loop& loop() override { return event_loop; }
  const Config& config() const override { return cfg; }
  GpuProbe& gpus() override { return probe; }
  void raise(Event e) override {
    events.push_back(e);
    event_loop.stop();  // the test looks at it
  }
  bool awaiting_daemons() const override { return awaiting; }
  bool terminal() const override { return stopping_for_good; }
  void set_status(const std::string& s, const std::string&) override { text = s; }
  const std::string& status_text() const override { return text; }
  const FlagList& engine_flags() const override { return cfg.engine.flags; }
  const EngineAdapter& engine_kind() const override { return builtin_engine_adapter(cfg.engine.kind); }
};

}  // namespace fr::supervisor::testing
