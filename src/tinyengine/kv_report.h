// The tiny engine's word to fastrestartd on its prefix cache (engine_loader's fastrestart/kv_stats.h;
// docs/kv-survival.md, "In fastrestartd's status"): the `fastrestart-kv:` line once the cache is built (and
// again after a snapshot's resume rebuilt it), and the counters file ($FASTRESTART_KV_STATS_FILE) rewritten
// by a thread every 200 ms while the counters change. Built without engine_loader it does nothing.
#pragma once

#include <memory>

#include "tinyengine/kv_cache.h"

namespace fr::te {

class KvReport {
 public:
  // Prints the line and writes the file now; the thread runs until the report is destroyed.
  static std::unique_ptr<KvReport> start(std::shared_ptr<KvCache> kv);
  virtual ~KvReport() = default;
  // The cache was rebuilt (KvCache::resync): the line again, with what that recovery found.
  virtual void rebuilt() = 0;
};

}  // namespace fr::te
