#include "tinyengine/kv_report.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "fastrestart/kv_stats.h"

namespace fr::te {
namespace {

// The prefix counters, from the cache's /stats (read under its lock).
struct PrefixCounters {
  uint64_t requests = 0, query_tokens = 0, hit_tokens = 0;
  bool operator==(const PrefixCounters&) const = default;
};

PrefixCounters kv_report_counters(const KvCache& kv) {
  const nlohmann::json p = kv.stats()["prefix"];
  return {p.value("requests", uint64_t{0}), p.value("query_tokens", uint64_t{0}), p.value("hit_tokens", uint64_t{0})};
}

fastrestart::KvStats kv_report_stats(const KvCache& kv, const PrefixCounters& c) {
  fastrestart::KvStats s;
  s.location = kv.on_arena() ? "arena" : "private";
  s.header = kv.recovery().header;
  s.blocks = kv.blocks();
  s.block_tokens = static_cast<uint64_t>(kv.block_tokens());
  s.recovered = kv.recovery().recovered;
  s.dropped = kv.recovery().dropped;
  s.requests = c.requests;
  s.query_tokens = c.query_tokens;
  s.hit_tokens = c.hit_tokens;
  return s;
}

class ReporterThread final : public KvReport {
 public:
  explicit ReporterThread(std::shared_ptr<KvCache> kv) : m_kv(std::move(kv)) {
    announce();
    m_thread = std::thread([this] { run(); });
  }
  ~ReporterThread() override {
    {
      std::lock_guard lk(m_mutex);
      m_stop = true;
    }
    m_cv.notify_all();
    m_thread.join();
  }
  void rebuilt() override {
    std::lock_guard lk(m_mutex);
    announce();
  }

 private:
  // The line, then the file (so that fastrestartd never reads this engine's file before its line).
  void announce() {
    m_last = kv_report_counters(*m_kv);
    const auto s = kv_report_stats(*m_kv, m_last);
    spdlog::info("{}", m_reporter.line(s));
    write(s);
  }
  void write(const fastrestart::KvStats& s) {
    if (auto st = m_reporter.write(s); !st.ok() && !m_warned) {
      spdlog::warn("kv cache: the counters file for fastrestartd: {}", st.error().message);
      m_warned = true;
    }
  }
  void run() {
    std::unique_lock lk(m_mutex);
    while (!m_cv.wait_for(lk, std::chrono::milliseconds(200), [this] { return m_stop; })) {
      const auto now = kv_report_counters(*m_kv);
      if (now == m_last) continue;
      m_last = now;
      write(kv_report_stats(*m_kv, now));
    }
  }

  std::shared_ptr<KvCache> m_kv;
  fastrestart::KvStatsReporter m_reporter;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_stop = false;
  bool m_warned = false;
  PrefixCounters m_last;
  std::thread m_thread;
};

}  // namespace

std::unique_ptr<KvReport> KvReport::start(std::shared_ptr<KvCache> kv) {
  if (!kv) return nullptr;
  return std::make_unique<ReporterThread>(std::move(kv));
}

}  // namespace fr::te
