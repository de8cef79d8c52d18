#include "soak/soak.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "soak/proc_scan.h"
#include "support/fastrestartd_config.h"

namespace fr::soak {

using nlohmann::json;

Params Params::from_env(bool standby) {
  Params p;
  p.standby = standby;
  if (standby) p.cycles = 80;  // under a minute on a loaded 2-core machine
  if (const char* c = std::getenv("FR_SOAK_CYCLES"); c && *c) p.cycles = std::atoi(c);
  if (const char* s = std::getenv("FR_SOAK_SIZE"); s && *s) p.size = s;
  if (const char* s = std::getenv("FR_SOAK_SEED"); s && *s) p.seed = std::strtoull(s, nullptr, 10);
  else p.seed = std::random_device{}() ^ (static_cast<uint64_t>(::getpid()) << 32);
  if (standby) {
    p.level = p.seed % 2 ? "warmed" : "pre_gpu";  // both levels over the runs; the seed replays the level
    if (const char* l = std::getenv("FR_SOAK_STANDBY_LEVEL"); l && *l) p.level = l;
  }
  return p;
}

Soak::Soak(const Params& p) : m_p(p), m_rng(p.seed) {
  // Orphans of a SIGKILLed fastrestartd come to us rather than to PID 1, so the leak check sees them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  m_checkpoint = m_dir / "model";
  m_config = m_dir / "soak.toml";
  m_faults = m_dir / "faults";
  m_standby_faults = m_dir / "standby-faults";
  m_run = m_dir / "run";
  m_ctl = m_dir / "ctl/soak.ctl";
  auto gen = test::run({FR_TINYENGINE_BIN, "gen", "--out", m_checkpoint, "--size", m_p.size, "--seed", "7"});
  if (gen.exit_code != 0) throw std::runtime_error("tinyengine gen: " + gen.output);
  // A cold start reads and publishes the whole checkpoint: give it time in proportion (a 1 GiB start
  // took 4 s on a loaded 2-core machine; with 3 s it never became ready and never filled the cache).
  // The base is 5 s: with 3 s, one start of a 16 MiB checkpoint (a reload pushed during a restart, seed
  // 120182293584840 in a CI run with other tests beside it) was not ready in time; not reproduced since.
  // The base is 10 s: with 5 s the same case (seed 44109899680117, in scripts/test.sh with the sanitizer
  // builds and the fresh-root check beside it) was not ready in time either; that seed alone passes. Both
  // times it was a reload pushed during a restart: docs/reliability.md, "Soak", keeps it as an open question.
  double gib = std::strtod(m_p.size.c_str(), nullptr);
  const char unit = m_p.size.empty() ? 'M' : m_p.size.back();
  gib /= unit == 'T' ? 1.0 / 1024 : unit == 'G' ? 1 : unit == 'M' ? 1024 : unit == 'K' ? 1024.0 * 1024 : 1024.0 * 1024 * 1024;
  m_start_timeout_s = 10 + 15 * gib;
  m_check_timeout_s = 1.5 + 2 * gib;  // a completion reads every weight once per token
  make_oracle();
  write_config();
  m_sup = std::make_unique<Supervised>(FR_FASTRESTARTD_BIN, m_config, m_ctl, m_dir / "fastrestartd.log");
}

Soak::~Soak() {
  m_stop_watch = true;
  if (m_port_watch.joinable()) m_port_watch.join();
  if (::testing::Test::HasFailure() && m_sup) {
    std::string log = m_sup->log();
    std::fprintf(stderr, "soak: fastrestartd log (last 6000 bytes):\n%s\n",
                 log.substr(log.size() > 6000 ? log.size() - 6000 : 0).c_str());
  }
}

// The oracle: the answer of the engine loading from disk alone, with no supervisor and no daemon.
void Soak::make_oracle() {
  const std::string port_file = m_dir / "oracle.port";
  test::TempDir scratch;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(FR_TINYENGINE_BIN, FR_TINYENGINE_BIN, "serve", m_checkpoint.c_str(), "--port", "0", "--port-file",
            port_file.c_str(), "--served-model-name", "soak", nullptr);
    _exit(127);
  }
  uint16_t port = 0;
  for (int i = 0; i < 3000 && !port; ++i) {
    std::ifstream f(port_file);
    int p = 0;
    if (f >> p) port = static_cast<uint16_t>(p);
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int i = 0; i < 3000 && port && http_get(port, "/health").status != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto a = http_post(port, "/v1/completions",
                     {{"model", "soak"}, {"prompt", "The soak test asks"}, {"max_tokens", 8}, {"logprobs", 2}, {"temperature", 0}});
  auto one = http_post(port, "/v1/completions",
                       {{"model", "soak"}, {"prompt", "The capital of France is"}, {"max_tokens", 1}, {"temperature", 0}});
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  if (a.status != 200 || one.status != 200) throw std::runtime_error("the oracle engine did not answer: " + a.body);
  auto j = json::parse(a.body);
  m_oracle = {{"text", j["choices"][0]["text"]}, {"token_ids", j["choices"][0]["token_ids"]},
              {"logprobs", j["choices"][0]["logprobs"]}};
  m_oracle_text = json::parse(one.body)["choices"][0]["text"].get<std::string>();
}

// Consecutive failed health checks (0.2 s apart) before an engine is hung. A SIGTERMed engine stops
// answering /health as it shuts down; under ASan its exit (LeakSanitizer's check included) can take longer
// than two checks, and the hang's SIGKILL then lands first: an exit the cycles expect as unexpected_exit_0
// was classified hung (seen on CI's two cores). The hang cycle still finds a hang, a second later.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kHangAfterFailures = 8;
#else
constexpr int kHangAfterFailures = 2;
#endif

void Soak::write_config() {
  m_engine_port = free_port();
  m_http_port = free_port();
  test::FastrestartdConfig c(m_dir.path());
  c.set("", "gpus", "[]")
      .tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_checkpoint, .port = m_engine_port, .host = "127.0.0.1", .name = "soak",
                    .wrapper = {FR_SOAK_ENGINE_WRAPPER},
                    .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir", m_run, "--shutdown-grace", "1",
                              "--fastrestart-connect-timeout", "1"}})
      .number("engine", "stop_grace_s", 1)
      .set("engine", "env", "{FR_SOAK_FAULTS = " + c.quote(m_faults) + ", FR_SOAK_STANDBY_FAULTS = " + c.quote(m_standby_faults) + "}")
      .text("weights", "mode", "zero_copy").host_weights(m_checkpoint, m_run)
      .text("readiness", "model", "soak").text("readiness", "expect_text", m_oracle_text)
      .number("readiness", "startup_timeout_s", m_start_timeout_s)
      // Health checks: generous timeouts, so a loaded CI machine is not taken for a hung engine.
      .number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.2)
      .number("readiness", "check_timeout_s", m_check_timeout_s).number("readiness", "hang_after_failures", kHangAfterFailures)
      .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
      .number("restart", "crash_loop_limit", 100000).number("restart", "crash_loop_window_s", 1)
      .number("restart", "reset_after_s", 5).number("restart", "warm_failures_before_cold", 0)
      .control_socket(m_ctl).text("control", "state_dir", m_dir / "state")
      .http(m_http_port);
  // Every standby death counts toward standby.max_failures until one stays parked reset_after_s (5 s)
  // or is released, and the standby cycles kill one or two in a row: the default (3) would disable the
  // path in most runs, and every later cycle would test a supervisor without a standby.
  if (m_p.standby)
    c.words("restart", "start", {"standby", "warm", "cold"}).text("standby", "level", m_p.level).number("standby", "max_failures", 1000);
  c.write(m_config);
}

const std::vector<Soak::Kind>& Soak::kinds() const {
  // With a standby: the cycles whose next start is the standby's release or that act on the standby;
  // engine faults only where a start on another path is sure to take them (after a flag push).
  static const std::vector<Kind> standby = {
      {"kill9_engine", 3, &Soak::kill9_engine},
      {"sigterm_engine", 1, &Soak::sigterm_engine},
      {"restart", 1.5, &Soak::restart},
      {"kill9_standby", 1.5, &Soak::kill9_standby},
      {"kill9_standby_starting", 0.7, &Soak::kill9_standby_starting},
      {"standby_dies_while_parked", 1, &Soak::standby_dies_while_parked},
      {"engine_dies_while_standby_starts", 1, &Soak::engine_dies_while_standby_starts},
      {"flag_push", 1, &Soak::flag_push},
      {"startup_fault_after_push", 1, &Soak::startup_fault_after_push},
      {"faulty_standby", 1, &Soak::faulty_standby},
      {"kill9_supervisor", 0.4, &Soak::kill9_supervisor},
      {"kill9_daemon_during_attach", 0.7, &Soak::kill9_daemon_during_attach},
      {"reload_during_restart", 0.7, &Soak::reload_during_restart},
      {"control_disconnect", 0.7, &Soak::control_disconnect},
      {"garbage_to_every_socket", 0.5, &Soak::garbage_to_every_socket},
      {"stalled_half_requests", 0.3, &Soak::stalled_half_requests},
      {"malformed_control_requests", 0.3, &Soak::malformed_control_requests},
  };
  if (m_p.standby) return standby;
  static const std::vector<Kind> k = {
      {"kill9_engine", 3, &Soak::kill9_engine},
      {"sigterm_engine", 1, &Soak::sigterm_engine},
      {"exit_after_requests", 2, &Soak::exit_after_requests},
      {"abort_after_requests", 1, &Soak::abort_after_requests},
      {"startup_fault", 2, &Soak::startup_fault},
      {"start_timeout", 0.3, &Soak::start_timeout},
      {"hang", 1, &Soak::hang},
      {"orphan_worker", 1, &Soak::orphan_worker},
      {"ignore_sigterm", 0.5, &Soak::ignore_sigterm},
      {"restart", 1.5, &Soak::restart},
      {"reload_during_restart", 1, &Soak::reload_during_restart},
      {"kill9_daemon_during_attach", 1, &Soak::kill9_daemon_during_attach},
      {"kill9_supervisor", 0.4, &Soak::kill9_supervisor},
      {"control_disconnect", 1, &Soak::control_disconnect},
      {"garbage_to_every_socket", 1, &Soak::garbage_to_every_socket},
      {"stalled_half_requests", 0.5, &Soak::stalled_half_requests},
      {"malformed_control_requests", 0.5, &Soak::malformed_control_requests},
      {"replace_checkpoint_during_cold_start", 1, &Soak::replace_checkpoint_during_cold_start},
  };
  return k;
}

namespace {

// The status's restart counters by cause.
std::map<std::string, int> restarts_of(const json& status) {
  std::map<std::string, int> out;
  if (status.contains("restarts") && status["restarts"].is_object())
    for (const auto& [cause, n] : status["restarts"].items()) out[cause] = n.get<int>();
  return out;
}

}  // namespace

int Soak::uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(m_rng); }

std::string Soak::where(int cycle, const char* kind) const {
  return "cycle " + std::to_string(cycle) + " (" + kind + "), FR_SOAK_SEED=" + std::to_string(m_p.seed);
}

void Soak::run() {
  std::printf("soak: seed %llu (FR_SOAK_SEED=%llu reproduces this run), %d cycles, checkpoint %s%s%s\n",
              static_cast<unsigned long long>(m_p.seed), static_cast<unsigned long long>(m_p.seed), m_p.cycles,
              m_p.size.c_str(), m_p.standby ? ", standby level " : "", m_p.level.c_str());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  m_sup->start();
  m_seen.insert(m_sup->pid());
  json s = settle(-1, false, "first start");
  ASSERT_FALSE(s.empty()) << "fastrestartd never became ready\n" << m_sup->log();
  check_oracle("first start");
  // The daemon's cache once the engine has published (or attached): the figure every cycle must keep.
  ASSERT_TRUE(m_sup->wait_for([](const json& j) { return j["daemons"][0].value("held_bytes", uint64_t{0}) > 0; }, 30, &s));
  m_held_bytes = s["daemons"][0]["held_bytes"].get<uint64_t>();
  if (m_p.standby) {
    check_standby(s, "first start");
    m_port_watch = std::thread([this] { watch_port(); });
  }

  // Every kind once, in a random order; then by weight.
  const auto& k = kinds();
  std::vector<size_t> order(k.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), m_rng);
  std::vector<double> weights;
  for (const auto& kind : k) weights.push_back(kind.weight);
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  for (int c = 0; c < m_p.cycles; ++c) {
    size_t i = c < static_cast<int>(order.size()) ? order[static_cast<size_t>(c)] : pick(m_rng);
    // A supervisor kill restarts the memory baseline: keep them out of the measured second half.
    if (std::string(k[i].name) == "kill9_supervisor" && c >= m_p.cycles / 2) i = 0;
    const Kind& kind = k[i];
    const std::string what = where(c, kind.name);
    const auto c0 = std::chrono::steady_clock::now();
    std::printf("soak: [%.1f s] %s\n", std::chrono::duration<double>(c0 - t0).count(), what.c_str());
    std::fflush(stdout);
    std::map<std::string, int> before = restarts_of(m_sup->status());
    const pid_t old = engine_pid();
    Expect e = (this->*kind.fn)();
    m_cycles_by_kind[kind.name]++;
    if (e.new_supervisor) before.clear();
    // Some exits come after a delay (a hang is found by failed health checks): wait for them first.
    m_sup->wait_for([&](const json& j) {
      auto now = restarts_of(j);
      for (const auto& [cause, n] : e.required)
        if (now[cause] - before[cause] < n) return false;
      return true;
    }, 60);
    json after = settle(e.new_engine ? old : -1, e.new_engine, what);
    ASSERT_FALSE(after.empty()) << what << ": fastrestartd did not settle\n" << m_sup->log();
    check_classified(before, after, e, what);
    // last_start is null for a moment after a new fastrestartd's first READY (its path is decided after).
    const std::string path = after["last_start"].is_object() ? after["last_start"].value("path", "") : "";
    if (after["engine"].value("pid", -1) != old) m_paths[path]++;  // the cycle's last start
    if (e.released > 0) {
      EXPECT_EQ(path, "standby") << what << ": a standby was parked; " << after["last_start"].dump();
      EXPECT_EQ(after["engine"].value("pid", -1), e.released) << what << ": the engine is not the former standby";
    }
    if (e.not_released) {
      EXPECT_NE(path, "standby") << what << ": " << after["last_start"].dump();
    }
    if (m_p.standby) check_standby(after, what);
    check_oracle(what);
    check_no_zombies(what);
    reap_children(m_sup->pid());
    if (::testing::Test::HasFatalFailure()) return;
    m_seconds_by_kind[kind.name] += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    sample(c);
  }
  final_checks();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json report{{"seed", m_p.seed}, {"cycles", m_p.cycles}, {"checkpoint", m_p.size}, {"seconds", secs},
              {"engine_exits", m_restarts}, {"faults_injected", m_faults_injected}, {"cycles_by_kind", m_cycles_by_kind},
              {"seconds_by_kind", m_seconds_by_kind}, {"rollbacks", m_rollbacks},
              {"exits_by_cause", m_exits_by_cause}, {"supervisor_rss_kib", {{"baseline", m_rss_base}, {"end", m_rss_end}}},
              {"supervisor_fds", {{"baseline", m_fds_base}, {"end", m_fds_end}}}, {"baseline_cycle", m_base_cycle},
              {"daemon_held_bytes", m_held_bytes}, {"start_paths", m_paths}};
  if (m_p.standby) {
    report["standby_level"] = m_p.level;
    report["standby"] = m_standby_end;
  }
  std::printf("soak: report %s\n", report.dump().c_str());
  if (const char* out = std::getenv("FR_SOAK_REPORT"); out && *out) std::ofstream(out) << report.dump(2) << "\n";
}

void Soak::queue_faults(const std::string& flags) {
  std::ofstream(m_faults) << flags << "\n";
  ++m_faults_injected;
}

void Soak::queue_standby_faults(const std::string& flags) {
  std::ofstream(m_standby_faults) << flags << "\n";
  ++m_faults_injected;
}

pid_t Soak::engine_pid() {
  json s = m_sup->status();
  return s.contains("engine") && s["engine"].is_object() ? s["engine"].value("pid", -1) : -1;
}

pid_t Soak::daemon_pid() {
  json s = m_sup->status();
  return s.contains("daemons") && !s["daemons"].empty() ? s["daemons"][0].value("pid", -1) : -1;
}

Expect Soak::request_restart(Expect e) {
  auto r = m_sup->request({{"op", "restart"}});
  EXPECT_TRUE(r.ok() && r->value("ok", false)) << (r.ok() ? r->dump() : r.error().message);
  e.required["requested"]++;
  return e;
}

json Soak::settle(pid_t old, bool new_engine, const std::string& what) {
  json s;
  bool ok = m_sup->wait_for(
      [&](const json& j) {
        if (j.value("state", "") != "ready" || j.value("reload_in_progress", true)) return false;
        if (!j["engine"].is_object() || !j["engine"].value("running", false)) return false;
        if (new_engine && j["engine"].value("pid", -1) == old) return false;
        for (const auto& d : j["daemons"])
          if (d.value("state", "") != "ready") return false;
        // With a standby: settled once the next one has parked behind the engine.
        if (m_p.standby && (!j["standby"].is_object() || j["standby"].value("state", "") != "parked" ||
                            j["standby"].value("pid", -1) == j["engine"].value("pid", -1)))
          return false;
        return true;
      },
      60, &s);
  if (!ok) {
    ADD_FAILURE() << what << ": not ready with a new engine within 60 s; last status " << s.dump();
    return json::object();
  }
  m_seen.insert(s["engine"]["pid"].get<pid_t>());
  for (const auto& d : s["daemons"]) m_seen.insert(d["pid"].get<pid_t>());
  if (m_p.standby) m_seen.insert(s["standby"]["pid"].get<pid_t>());
  return s;
}

void Soak::check_oracle(const std::string& what) {
  auto a = http_post(m_engine_port, "/v1/completions",
                     {{"model", "soak"}, {"prompt", "The soak test asks"}, {"max_tokens", 8}, {"logprobs", 2}, {"temperature", 0}});
  ASSERT_EQ(a.status, 200) << what << ": " << a.body;
  auto j = json::parse(a.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << what << ": " << a.body;
  json got{{"text", j["choices"][0]["text"]}, {"token_ids", j["choices"][0]["token_ids"]},
           {"logprobs", j["choices"][0]["logprobs"]}};
  ASSERT_EQ(got, m_oracle) << what << ": the engine answers with other weights";
}

void Soak::check_classified(const std::map<std::string, int>& before, const json& after, const Expect& e,
                            const std::string& what) {
  std::map<std::string, int> delta;
  for (const auto& [cause, n] : restarts_of(after)) {
    auto it = before.find(cause);
    int d = n - (it == before.end() ? 0 : it->second);
    if (d > 0) delta[cause] = d;
  }
  for (const auto& [cause, n] : delta) {
    EXPECT_TRUE(e.required.count(cause) || e.allowed.count(cause))
        << what << ": " << n << " unexpected exit(s) classified " << cause << "; last exit " << after["last_exit"].dump();
    m_exits_by_cause[cause] += n;
    m_restarts += n;
  }
  for (const auto& [cause, n] : e.required)
    EXPECT_GE(delta[cause], n) << what << ": expected " << n << " exit(s) classified " << cause << "; got "
                               << json(delta).dump() << "; last exit " << after["last_exit"].dump();
}

void Soak::check_no_zombies(const std::string& what) {
  // A child that just exited is a zombie until fastrestartd's SIGCHLD handler reaps it: allow a moment.
  std::vector<ProcInfo> z;
  for (int i = 0; i < 100; ++i) {
    z.clear();
    for (const auto& c : children_of(m_sup->pid()))
      if (c.state == 'Z') z.push_back(c);
    if (z.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << what << ": fastrestartd leaves zombie " << z[0].pid << " (" << z[0].comm << ")";
}

void Soak::sample(int cycle) {
  // The baseline is taken halfway (the supervisor's allocator and thread pool have warmed up by then).
  const pid_t pid = m_sup->pid();
  if (cycle == m_p.cycles / 2 || m_rss_base < 0) {
    m_rss_base = rss_kib(pid);
    m_fds_base = test::open_fd_count(pid);
    m_base_cycle = cycle;
  }
  m_rss_end = rss_kib(pid);
  m_fds_end = test::open_fd_count(pid);
}

void Soak::final_checks() {
  // One more restart so the daemon's cache is what an engine publishes or attaches, then compare.
  const pid_t old = engine_pid();
  request_restart();
  json s = settle(old, true, "final restart");
  ASSERT_FALSE(s.empty());
  ASSERT_TRUE(m_sup->wait_for([&](const json& j) { return j["daemons"][0].value("held_bytes", uint64_t{0}) == m_held_bytes; }, 10, &s))
      << "the daemon holds " << s["daemons"][0].value("held_bytes", uint64_t{0}) << " bytes, " << m_held_bytes << " at the start";
  check_oracle("final restart");

  // Supervisor memory and descriptors flat over the second half of the run. Connections a cycle has just
  // dropped (stalled_half_requests leaves hundreds) are closed by the health server when a worker next reads
  // them, later under ASan: wait up to 10 s for that; a leaked descriptor stays and fails the check.
  for (int i = 0; i < 100 && test::open_fd_count(m_sup->pid()) > m_fds_base + 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  sample(m_p.cycles);
  std::printf("soak: fastrestartd RSS %ld KiB at cycle %d, %ld KiB at the end; fds %d -> %d\n", m_rss_base, m_base_cycle,
              m_rss_end, m_fds_base, m_fds_end);
  EXPECT_LE(m_fds_end, m_fds_base + 2) << "fastrestartd's descriptors grew over the run";
#if defined(__SANITIZE_ADDRESS__)
  // Under ASan (scripts/sanitize.sh) the allocator's quarantine keeps freed memory resident: RSS grows by
  // design. LeakSanitizer checks fastrestartd's memory there instead, at its exit.
  std::printf("soak: ASan build: the RSS check is LeakSanitizer's at exit\n");
#else
  EXPECT_LE(m_rss_end, m_rss_base + 8 * 1024) << "fastrestartd's memory grew over the run";
#endif

  // Every exit logged with its class (fastrestartd's log accumulates across the supervisor restarts), and
  // as many as the status counters added up over the cycles, plus the final restart.
  std::istringstream log(m_sup->log());
  int lines = 0;
  for (std::string line; std::getline(log, line);) {
    const size_t at = line.find("] engine pid ");
    if (at == std::string::npos) continue;
    const size_t ex = line.find(" exited", at);
    lines += ex != std::string::npos &&
             (line.compare(ex, 9, " exited: ") == 0 || line.compare(ex, 21, " exited as requested ") == 0);
  }
  // A rolled-back push's engine exit is logged but counted apart (docs/supervisor.md, status rollbacks).
  EXPECT_EQ(lines, m_restarts + m_rollbacks + 1) << "every exit is logged with its class and counted once";
  if (m_p.standby) m_standby_end = m_sup->status()["standby"];

  if (m_p.standby) {
    m_stop_watch = true;
    if (m_port_watch.joinable()) m_port_watch.join();
    std::lock_guard<std::mutex> l(m_watch_mu);
    EXPECT_EQ(m_port_violations.load(), 0) << "two sockets listened on the engine's port at once, first: " << m_port_violation;
  }

  // Stop: exit 0, nothing left running, no socket file left behind.
  const pid_t sup = m_sup->pid();
  EXPECT_EQ(m_sup->stop(SIGTERM), 0);
  for (int i = 0; i < 200 && !children_of(::getpid()).empty(); ++i) {
    reap_children(-1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const auto& c : children_of(::getpid())) ADD_FAILURE() << "left running: pid " << c.pid << " (" << c.comm << ")";
  for (pid_t p : m_seen) EXPECT_FALSE(running(p)) << "pid " << p << " (supervisor " << sup << ") still runs";
  EXPECT_FALSE(std::filesystem::exists(m_ctl)) << "the control socket was left behind";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(m_run, ec))
    EXPECT_NE(e.path().extension(), ".sock") << e.path() << " was left behind";
}

}  // namespace fr::soak
