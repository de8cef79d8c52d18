// The native weight daemons (daemons/native.cc): one fastrestart-weightd per GPU, its socket and its
// command line, and what the set answers before its daemons run.
#include <unistd.h>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <functional>
#include <string>

#include "common/private_dir.h"
#include "supervisor/daemons/daemon_set.h"
#include "supervisor/daemons/native.h"
#include "fake_host.h"
#include "support/harness.h"

namespace fr::supervisor {
namespace {

using testing::FakeGpus;
using testing::FakeHost;

std::string layout_text(const Config& c, GpuProbe& gpus) {
  std::string s;
  for (const auto& d : native_daemon_layout(c, gpus)) s += (s.empty() ? "" : " ") + ("[" + d.gpu + "]") + d.socket;
  return s;
}

bool has(const std::vector<std::string>& argv, const std::vector<std::string>& words) {
  return std::search(argv.begin(), argv.end(), words.begin(), words.end()) != argv.end();
}

TEST(NativeDaemons, TheHostBackendWithoutGpusRunsOneDaemonNamedHost) {
  Config c;
  FakeGpus gpus;
  c.weights.backend = "host";
  c.weights.socket_dir = "/run/fr";
  EXPECT_EQ(layout_text(c, gpus), "[]/run/fr/weightd-host.sock");
  const auto argv = native_daemon_argv(c, "");
  EXPECT_TRUE(has(argv, {"--backend", "host"}));
  EXPECT_FALSE(has(argv, {"--gpu"})) << "the host daemon stands for no GPU";
  EXPECT_TRUE(has(argv, {"--socket-dir", "/run/fr"}));
  EXPECT_TRUE(has(argv, {"--arena-uid", std::to_string(::geteuid())})) << "the engine's uid alone leases KV arenas";
}

TEST(NativeDaemons, TheHostBackendRunsOneDaemonPerListedGpu) {
  Config c;
  FakeGpus gpus;
  c.weights.backend = "host";
  c.weights.socket_dir = "/run/fr";
  c.gpus = {"0", "1"};
  EXPECT_EQ(layout_text(c, gpus), "[0]/run/fr/weightd-host-0.sock [1]/run/fr/weightd-host-1.sock");
  EXPECT_TRUE(has(native_daemon_argv(c, "1"), {"--gpu", "1"}));
}

TEST(NativeDaemons, ACudaGpuIsNamedByItsUuid) {
  Config c;
  FakeGpus gpus;
  gpus.uuids["0"] = "GPU-aaaa";
  c.gpus = {"0", "GPU-bbbb", "7"};
  const std::string dir = default_socket_dir();
  EXPECT_EQ(layout_text(c, gpus), "[0]" + dir + "/weightd-GPU-aaaa.sock [GPU-bbbb]" + dir +
                                      "/weightd-GPU-bbbb.sock [7]" + dir + "/weightd-7.sock")
      << "the probe's UUID for an index; a UUID as given; an index the probe does not know as given";
  const auto argv = native_daemon_argv(c, "0");
  EXPECT_TRUE(has(argv, {"--backend", "cuda"}));
  EXPECT_TRUE(has(argv, {"--gpu", "0"}));
  EXPECT_FALSE(has(argv, {"--socket-dir"})) << "the daemon's default is the same directory";
}

// weights.host_arenas: one host-memory daemon after the CUDA ones, on the socket engines look for host
// arenas on (weightd-host.sock); it preloads nothing and is never asked for weights.
TEST(NativeDaemons, HostArenasAddOneHostDaemonBesideTheCudaOnes) {
  Config c;
  FakeGpus gpus;
  c.gpus = {"GPU-aaaa"};
  c.weights.socket_dir = "/run/fr";
  c.weights.checkpoint = {"/models/a.safetensors"};
  c.weights.key = {{"arch", "tiny"}};
  EXPECT_EQ(layout_text(c, gpus), "[GPU-aaaa]/run/fr/weightd-GPU-aaaa.sock") << "off by default";
  c.weights.host_arenas = true;
  const auto layout = native_daemon_layout(c, gpus);
  EXPECT_EQ(layout_text(c, gpus), "[GPU-aaaa]/run/fr/weightd-GPU-aaaa.sock []/run/fr/weightd-host.sock");
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_FALSE(layout[0].arenas_only);
  EXPECT_TRUE(layout[1].arenas_only);
  const auto argv = native_daemon_argv(c, "");
  EXPECT_TRUE(has(argv, {"--backend", "host"}));
  EXPECT_FALSE(has(argv, {"--gpu"}));
  EXPECT_FALSE(has(argv, {"--preload"})) << "it holds no weights";
  EXPECT_TRUE(has(argv, {"--arena-uid", std::to_string(::geteuid())}));
  EXPECT_TRUE(has(native_daemon_argv(c, "GPU-aaaa"), {"--preload", "/models/a.safetensors"}));
}

TEST(NativeDaemons, ItsCommandLineCarriesThePreloadTheGroupAndTheSettings) {
  Config c;
  c.weights.daemon_path = "/opt/fr/fastrestart-weightd";
  c.weights.reader_threads = 3;
  c.logging.level = "debug";
  c.control.group = "fastrestart";
  c.weights.checkpoint = {"/models/a.safetensors", "/models/b.safetensors"};
  EXPECT_FALSE(has(native_daemon_argv(c, "0"), {"--preload"})) << "no preload without weights.key";
  c.weights.key = {{"arch", "tiny"}};
  const auto argv = native_daemon_argv(c, "0");
  EXPECT_EQ(argv.front(), "/opt/fr/fastrestart-weightd");
  EXPECT_TRUE(has(argv, {"--reader-threads", "3", "--log-level", "debug"}));
  EXPECT_TRUE(has(argv, {"--group", "fastrestart"}));
  EXPECT_TRUE(has(argv, {"--preload", "/models/a.safetensors", "--preload", "/models/b.safetensors"}));
  EXPECT_TRUE(has(argv, {"--config", "arch=tiny"}));
}

TEST(NativeDaemons, BeforeTheyRunNothingServesAndNothingIsHeld) {
  FakeHost host;
  host.cfg.gpus = {"0"};
  auto set = make_daemon_set(host);
  ASSERT_STREQ(set->kind(), "native");
  EXPECT_TRUE(set->loader_protocol());
  EXPECT_FALSE(set->engine_report_decides());
  EXPECT_FALSE(set->preload_use().has_value());
  auto r = set->refusal();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, "no_daemon");
  EXPECT_FALSE(set->holds_old_weights());
  set->engine_ready();
  EXPECT_FALSE(set->holds_old_weights()) << "used, but no daemon is alive";
  EXPECT_EQ(set->held_bytes("0"), 0u);
  EXPECT_FALSE(set->stopping());
  EXPECT_TRUE(set->rows().empty());
  set->stop();  // nothing runs: stopped at once
  host.event_loop.run();
  ASSERT_EQ(host.events.size(), 1u);
  EXPECT_EQ(host.events[0], Event::kDaemonsStopped);
  set->close();
}

// Runs the loop until `done` holds (checked every 20 ms, reaping the set's children as fastrestartd's
// SIGCHLD handler does), at most 60 s: a hang fails the test instead of the run.
bool run_until(Loop& loop, DaemonSet& set, const std::function<bool()>& done) {
  Timer check(loop), limit(loop);
  check.start(0.02, [&] {
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) set.on_exit(pid, status);
    if (done()) loop.stop();
  }, 0.02);
  limit.start(60, [&] { loop.stop(); });
  loop.run();
  return done();
}

void reap(DaemonSet& set, pid_t pid) {
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(set.on_exit(pid, status));
}

// The real fastrestart-weightd, two host daemons standing for GPUs 0 and 1 (as the tensor-parallel tests).
TEST(NativeDaemons, RealDaemonsGetReadyRespawnAfterADeathAndStopAsOne) {
  fr::test::TempDir tmp;
  const std::string dir = tmp / "sockets";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);  // the daemons refuse a directory more open than 0700
  FakeHost host;
  host.cfg.weights.backend = "host";
  host.cfg.weights.daemon_path = fr::test::weightd();
  host.cfg.weights.socket_dir = dir;
  host.cfg.gpus = {"0", "1"};
  auto set = make_daemon_set(host);
  set->start();
  ASSERT_TRUE(run_until(host.event_loop, *set, [&] { return !host.events.empty(); }));
  ASSERT_EQ(host.events.size(), 1u);
  ASSERT_EQ(host.events[0], Event::kDaemonsReady);
  auto rows = set->rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].gpu, "0");
  EXPECT_EQ(rows[0].socket, dir + "/weightd-host-0.sock");
  EXPECT_EQ(rows[1].socket, dir + "/weightd-host-1.sock");
  EXPECT_EQ(rows[0].state, "ready");
  EXPECT_EQ(set->attach_sockets().size(), 2u);
  std::set<pid_t> known;
  set->add_known_pids(known);
  EXPECT_EQ(known, (std::set<pid_t>{static_cast<pid_t>(rows[0].pid), static_cast<pid_t>(rows[1].pid)}));
  auto r = set->refusal();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, "nothing_held") << r->detail;
  set->engine_ready();  // an engine loaded and published: now they hold what it used
  EXPECT_EQ(set->refusal(), std::nullopt);
  EXPECT_TRUE(set->holds_old_weights());
  set->expect_fresh();
  EXPECT_FALSE(set->holds_old_weights());
  set->engine_ready();

  // A death while an engine runs: respawned (the backoff's first step), and ready again.
  host.awaiting = false;
  const pid_t first = static_cast<pid_t>(rows[0].pid);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  reap(*set, first);
  EXPECT_EQ(set->rows()[0].state, "dead");
  EXPECT_EQ(set->refusal()->code, "daemons_not_ready");
  ASSERT_TRUE(run_until(host.event_loop, *set, [&] {
    auto now = set->rows();
    return now[0].pid != first && now[0].state == "ready";
  })) << set->rows()[0].state << " " << set->rows()[0].error;
  EXPECT_EQ(host.events.size(), 1u) << "a respawn raises nothing";

  // Stop: SIGTERM to both; kDaemonsStopped once the last is gone, not before.
  rows = set->rows();
  set->stop();
  EXPECT_TRUE(set->stopping());
  reap(*set, static_cast<pid_t>(rows[0].pid));
  EXPECT_EQ(host.events.size(), 1u) << "one daemon is still alive";
  reap(*set, static_cast<pid_t>(rows[1].pid));
  ASSERT_EQ(host.events.size(), 2u);
  EXPECT_EQ(host.events[1], Event::kDaemonsStopped);
  EXPECT_FALSE(set->stopping());
  EXPECT_EQ(set->rows()[0].state, "stopped");
  EXPECT_FALSE(set->holds_old_weights()) << "no daemon is alive";
  set->close();
}

// A daemon that died while an engine ran waits out its respawn backoff; the set stopped meanwhile (a cold
// reload: fastrestartd is not stopping) must not respawn it while the others stop. Respawned then, it was a
// daemon nobody had stopped, and kDaemonsStopped never came: the reload hung in loading.
TEST(NativeDaemons, ADeadDaemonIsNotRespawnedOnceTheSetIsStopping) {
  fr::test::TempDir tmp;
  const std::string dir = tmp / "sockets";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  FakeHost host;
  host.cfg.weights.backend = "host";
  host.cfg.weights.daemon_path = fr::test::weightd();
  host.cfg.weights.socket_dir = dir;
  host.cfg.gpus = {"0", "1"};
  auto set = make_daemon_set(host);
  set->start();
  ASSERT_TRUE(run_until(host.event_loop, *set, [&] { return !host.events.empty(); }));
  ASSERT_EQ(host.events.back(), Event::kDaemonsReady);
  host.awaiting = false;  // an engine runs
  const auto rows = set->rows();
  const pid_t dead = static_cast<pid_t>(rows[0].pid), other = static_cast<pid_t>(rows[1].pid);
  ASSERT_EQ(::kill(dead, SIGKILL), 0);
  reap(*set, dead);  // its respawn is due in 0.5 s (the backoff's first step)
  set->stop();       // SIGTERM to the other; its exit is reaped only below
  // Run the loop past the respawn's due time: libuv fires timers in the order they fall due, so this one,
  // armed later for longer, comes after the respawn would have.
  Timer past(host.event_loop);
  past.start(1.0, [&] { host.event_loop.stop(); });
  host.event_loop.run();
  const auto now = set->rows();
  EXPECT_EQ(static_cast<pid_t>(now[0].pid), dead) << "the dead daemon was respawned while the set stopped";
  if (static_cast<pid_t>(now[0].pid) != dead) ::kill(static_cast<pid_t>(now[0].pid), SIGKILL);
  reap(*set, other);
  ASSERT_EQ(host.events.size(), 2u) << "the last daemon's exit ends the stop";
  EXPECT_EQ(host.events[1], Event::kDaemonsStopped);
  set->close();
}

}  // namespace
}  // namespace fr::supervisor
