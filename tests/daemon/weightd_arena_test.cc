// KV arenas in fastrestart-weightd (docs/weightd.md, "KV arenas"): the real daemon, real holder processes,
// kill -9 and reaping.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <thread>

#include "daemon_client/daemon_client.h"
#include "fastrestart/arena.h"
#include "protocol/daemon_status.h"
#include "support/harness.h"

namespace fr {
namespace {

using proto::json;

constexpr uint64_t kMiB = 1u << 20;

Result<DaemonClient> connect(const test::Daemon& d) { return DaemonClient::connect(d.socket(), 5, "arena test"); }

json lease_req(const std::string& name, uint64_t bytes, double wait_s) {
  return {{"op", "arena_lease"}, {"name", name}, {"bytes", bytes}, {"wait_s", wait_s}};
}

proto::DaemonStatus status_of(const test::Daemon& d) {
  auto c = connect(d);
  EXPECT_TRUE(c.ok()) << c.error().message;
  auto r = c->call({{"op", "status"}}, 10);
  EXPECT_TRUE(r.ok()) << r.error().message;
  auto s = proto::daemon_status_from_json(*r);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return *s;
}

std::optional<proto::DaemonArenaStatus> arena_of(const test::Daemon& d, const std::string& name) {
  for (auto& a : status_of(d).arenas)
    if (a.name == name) return a;
  return std::nullopt;
}

// A holder process: leases `name`, closes its connection to the daemon (the lease is the process's, not the
// connection's), maps the arena read-write, runs `body` on the mapping and reports each of its lines on a
// pipe (the test reads them). It then stays alive until killed, unless `body` returns false.
struct Holder {
  pid_t pid = -1;
  UniqueFd out;  // the holder's report lines
};

template <typename Body>
Holder spawn_holder(const test::Daemon& d, const std::string& name, uint64_t bytes, double wait_s, Body body) {
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    auto say = [&](const std::string& line) { [[maybe_unused]] auto n = ::write(p[1], (line + "\n").data(), line.size() + 1); };
    UniqueFd fd;
    Result<json> r = json();
    {
      auto c = connect(d);
      if (!c.ok()) { say("error " + c.error().message); _exit(1); }
      r = c->call(lease_req(name, bytes, wait_s), wait_s + 30, &fd);
    }
    if (!r.ok()) { say("error " + r.error().message); _exit(1); }
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (m == MAP_FAILED) { say("error mmap"); _exit(1); }
    say("granted " + r->dump());
    if (!body(static_cast<volatile uint64_t*>(m), say)) _exit(0);
    for (;;) ::pause();
  }
  ::close(p[1]);
  return {pid, UniqueFd(p[0])};
}

// The holder's next report line; "" when it closed the pipe (exited) or after `timeout_ms`.
std::string next_line(const Holder& h, int timeout_ms = 30000) {
  std::string line;
  char ch;
  for (;;) {
    pollfd p{h.out.get(), POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) != 1) return line;
    if (::read(h.out.get(), &ch, 1) != 1 || ch == '\n') return line;
    line += ch;
  }
}

bool has_line(const Holder& h) {
  pollfd p{h.out.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

json grant_of(const std::string& line) {
  EXPECT_EQ(line.rfind("granted ", 0), 0u) << line;
  return line.rfind("granted ", 0) == 0 ? json::parse(line.substr(8)) : json::object();
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
}

// Pattern of holder 1 in words [1, n): word 0 is the one its writer loop keeps changing.
uint64_t pattern(size_t i) { return 0x9e3779b97f4a7c15ull * (i + 1); }

TEST(WeightdArena, TheNextLeaseWaitsForTheKilledWritersExitAndSeesItsBytes) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run");
  const uint64_t bytes = 4 * kMiB, words = bytes / 8;

  // Holder 1 fills the arena, then keeps writing word 0 until it is killed.
  auto h1 = spawn_holder(daemon, "kv", bytes, 5, [&](volatile uint64_t* p, auto say) {
    for (size_t i = 1; i < words; ++i) p[i] = pattern(i);
    say("filled");
    for (uint64_t n = 0;; ++n) p[0] = n;
    return true;
  });
  json g1 = grant_of(next_line(h1));
  EXPECT_TRUE(g1["created"].get<bool>());
  EXPECT_EQ(g1["leases"], 1);
  EXPECT_TRUE(g1["previous_holder_pid"].is_null());
  ASSERT_EQ(next_line(h1), "filled");

  // Holder 2 asks while holder 1 lives: it waits (the daemon counts it as waiting) and is not granted.
  constexpr uint64_t kCanary = 0xc0ffee00c0ffee00ull;
  auto h2 = spawn_holder(daemon, "kv", bytes, 60, [&](volatile uint64_t* p, auto say) {
    size_t bad = 0;
    for (size_t i = 1; i < words; ++i) bad += p[i] != pattern(i);
    say("pattern mismatches " + std::to_string(bad));
    p[0] = kCanary;
    uint64_t changed = 0;
    for (int round = 0; round < 200; ++round) {  // a dead writer can no longer move it
      changed += p[0] != kCanary;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    say("canary changed " + std::to_string(changed));
    return true;
  });
  for (int i = 0; i < 3000; ++i) {
    auto a = arena_of(daemon, "kv");
    if (a && a->waiting == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto before = arena_of(daemon, "kv");
  ASSERT_TRUE(before);
  EXPECT_EQ(before->waiting, 1u);
  EXPECT_EQ(before->holder_pid, h1.pid);
  EXPECT_EQ(before->leases, 1u);
  EXPECT_EQ(before->generation, 1u);
  EXPECT_FALSE(has_line(h2)) << "granted while the holder lives: " << next_line(h2);

  kill_and_reap(h1.pid);
  json g2 = grant_of(next_line(h2));
  EXPECT_FALSE(g2["created"].get<bool>());
  EXPECT_FALSE(g2["resized"].get<bool>());
  EXPECT_EQ(g2["leases"], 2);
  EXPECT_EQ(g2["generation"], 2);
  EXPECT_EQ(g2["previous_holder_pid"], h1.pid);
  EXPECT_GT(g2["waited_s"].get<double>(), 0.0);
  EXPECT_EQ(next_line(h2), "pattern mismatches 0") << "holder 1's bytes must survive its death and the next lease";
  EXPECT_EQ(next_line(h2), "canary changed 0");

  auto after = arena_of(daemon, "kv");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->holder_pid, h2.pid);
  EXPECT_EQ(after->leases, 2u);
  EXPECT_EQ(after->generation, 2u);  // status says the last grant's generation
  EXPECT_EQ(after->waiting, 0u);
  ASSERT_TRUE(after->last_wait_s);
  EXPECT_DOUBLE_EQ(*after->last_wait_s, g2["waited_s"].get<double>());
  EXPECT_EQ(after->bytes, bytes);
  EXPECT_EQ(status_of(daemon).arena_bytes, after->pool_bytes);
  auto ctl = test::run({test::weightctl(), "--socket-dir", dir / "run", "status"});
  EXPECT_EQ(ctl.exit_code, 0) << ctl.output;
  EXPECT_NE(ctl.output.find("arena kv  4.0 MiB, holder pid " + std::to_string(h2.pid) + ", 2 lease(s), 0 waiting"),
            std::string::npos) << ctl.output;

  kill_and_reap(h2.pid);
  auto unheld = arena_of(daemon, "kv");
  ASSERT_TRUE(unheld);
  EXPECT_FALSE(unheld->holder_pid) << "an exited holder is reported as none";
  EXPECT_EQ(daemon.stop(), 0);
}

TEST(WeightdArena, TheLeaseOutlivesItsConnectionAndWaitsEndAtTimeoutHangUpOrStop) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run");
  // Holder 1 leases, then closes its connection (the client goes out of scope) but keeps living and mapping.
  auto h1 = spawn_holder(daemon, "kv", kMiB, 5, [](volatile uint64_t*, auto) { return true; });
  grant_of(next_line(h1));
  auto c = connect(daemon);
  ASSERT_TRUE(c.ok());
  UniqueFd fd;
  auto r = c->call(lease_req("kv", kMiB, 0.2), 30, &fd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kTimeout);
  EXPECT_NE(r.error().message.find("arena_lease.wait_s"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("pid " + std::to_string(h1.pid)), std::string::npos) << r.error().message;
  EXPECT_FALSE(fd.valid());

  // A waiter that dies while waiting is forgotten (its wait ends with its connection), the holder kept.
  auto gone = spawn_holder(daemon, "kv", kMiB, 3600, [](volatile uint64_t*, auto) { return true; });
  auto wait_for_waiting = [&](uint64_t n) {
    for (int i = 0; i < 3000; ++i) {
      auto a = arena_of(daemon, "kv");
      if (a && a->waiting == n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  wait_for_waiting(1);
  EXPECT_EQ(arena_of(daemon, "kv")->waiting, 1u);
  kill_and_reap(gone.pid);
  wait_for_waiting(0);
  EXPECT_EQ(arena_of(daemon, "kv")->waiting, 0u);
  EXPECT_EQ(arena_of(daemon, "kv")->holder_pid, h1.pid);

  // A lease waiting when the daemon stops ends at once, and the daemon exits cleanly.
  auto h2 = spawn_holder(daemon, "kv", kMiB, 3600, [](volatile uint64_t*, auto) { return true; });
  wait_for_waiting(1);
  EXPECT_EQ(arena_of(daemon, "kv")->waiting, 1u);
  EXPECT_EQ(daemon.stop(), 0);
  EXPECT_EQ(next_line(h2).rfind("error", 0), 0u);
  int st = 0;
  EXPECT_EQ(::waitpid(h2.pid, &st, 0), h2.pid);
  kill_and_reap(h1.pid);
}

// The pidfd is readable once the holder has exited (its memory and descriptors released), a zombie included:
// the lease does not wait for its parent to reap it.
TEST(WeightdArena, AnExitedHolderNotYetReapedNoLongerHoldsTheLease) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run");
  auto h1 = spawn_holder(daemon, "kv", kMiB, 5, [](volatile uint64_t*, auto) { return true; });
  grant_of(next_line(h1));
  ::kill(h1.pid, SIGKILL);
  siginfo_t si{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(h1.pid), &si, WEXITED | WNOWAIT), 0);  // a zombie, not reaped
  auto c = connect(daemon);
  ASSERT_TRUE(c.ok());
  UniqueFd fd;
  auto r = c->call(lease_req("kv", kMiB, 0), 30, &fd);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE((*r)["created"].get<bool>());
  EXPECT_TRUE((*r)["previous_holder_pid"].is_null()) << "the holder was gone before the lease was asked";
  int st = 0;
  EXPECT_EQ(::waitpid(h1.pid, &st, 0), h1.pid);
}

TEST(WeightdArena, AnotherSizeMakesANewArenaOnceUnleased) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run");
  auto h1 = spawn_holder(daemon, "kv", kMiB, 5, [](volatile uint64_t* p, auto) {
    p[0] = 42;
    return false;  // exits
  });
  grant_of(next_line(h1));
  int st = 0;
  ASSERT_EQ(::waitpid(h1.pid, &st, 0), h1.pid);

  // This process leases the new size: a new zero-filled arena, and the reply says what it replaced.
  auto c = connect(daemon);
  ASSERT_TRUE(c.ok());
  UniqueFd fd;
  auto r = c->call(lease_req("kv", 2 * kMiB, 5), 30, &fd);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE((*r)["resized"].get<bool>());
  EXPECT_TRUE((*r)["created"].get<bool>());
  EXPECT_EQ((*r)["previous_bytes"], kMiB);
  EXPECT_EQ((*r)["bytes"], 2 * kMiB);
  EXPECT_EQ((*r)["leases"], 1);
  void* m = ::mmap(nullptr, 2 * kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_EQ(static_cast<uint64_t*>(m)[0], 0u) << "a new arena is zero-filled";

  // The holder again, same size: the same memory through a second descriptor.
  UniqueFd fd2;
  auto again = c->call(lease_req("kv", 2 * kMiB, 0), 30, &fd2);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_FALSE((*again)["created"].get<bool>());
  void* m2 = ::mmap(nullptr, 2 * kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd2.get(), 0);
  ASSERT_NE(m2, MAP_FAILED);
  static_cast<uint64_t*>(m)[7] = 7;
  EXPECT_EQ(static_cast<uint64_t*>(m2)[7], 7u);

  // The holder asking another size is refused: its mappings are of this one.
  auto other = c->call(lease_req("kv", 3 * kMiB, 0), 30);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, Errc::kBusy);
  EXPECT_NE(other.error().message.find("arena_lease.bytes"), std::string::npos) << other.error().message;

  auto a = arena_of(daemon, "kv");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->bytes, 2 * kMiB);
  EXPECT_EQ(a->holder_pid, ::getpid());
  EXPECT_EQ(a->leases, 2u);
  EXPECT_FALSE(a->last_wait_s) << "no lease waited for a live holder";
  ::munmap(m, 2 * kMiB);
  ::munmap(m2, 2 * kMiB);
}

TEST(WeightdArena, BadRequestsGetErrorsNamingTheField) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run", {"--max-arenas", "1"});
  auto c = connect(daemon);
  ASSERT_TRUE(c.ok());
  ASSERT_NE(std::find(c->hello()["capabilities"].begin(), c->hello()["capabilities"].end(), "arena_lease"),
            c->hello()["capabilities"].end());
  struct Case {
    json req;
    const char* field;
  };
  const std::vector<Case> cases = {
      {{{"op", "arena_lease"}, {"bytes", 4096}}, "arena_lease.name: missing"},
      {{{"op", "arena_lease"}, {"name", "kv/x"}, {"bytes", 4096}}, "arena_lease.name:"},
      {{{"op", "arena_lease"}, {"name", std::string(65, 'a')}, {"bytes", 4096}}, "arena_lease.name:"},
      {{{"op", "arena_lease"}, {"name", 3}, {"bytes", 4096}}, "arena_lease.name:"},
      {{{"op", "arena_lease"}, {"name", "kv"}}, "arena_lease.bytes: missing"},
      {{{"op", "arena_lease"}, {"name", "kv"}, {"bytes", 0}}, "arena_lease.bytes:"},
      {{{"op", "arena_lease"}, {"name", "kv"}, {"bytes", -5}}, "arena_lease.bytes:"},
      {{{"op", "arena_lease"}, {"name", "kv"}, {"bytes", "4096"}}, "arena_lease.bytes:"},
      {{{"op", "arena_lease"}, {"name", "kv"}, {"bytes", uint64_t{1} << 51}}, "arena_lease.bytes:"},
      {{{"op", "arena_lease"}, {"name", "kv"}, {"bytes", 4096}, {"wait_s", -1}}, "arena_lease.wait_s:"},
      {{{"op", "arena_lease"}, {"name", "kv"}, {"bytes", 4096}, {"wait_s", "soon"}}, "arena_lease.wait_s"},
  };
  for (const auto& k : cases) {
    auto r = c->call(k.req, 10);
    ASSERT_FALSE(r.ok()) << k.req.dump();
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << k.req.dump();
    EXPECT_NE(r.error().message.find(k.field), std::string::npos) << k.req.dump() << ": " << r.error().message;
  }
  EXPECT_TRUE(status_of(daemon).arenas.empty()) << "no bad request made an arena";

  UniqueFd fd;
  ASSERT_TRUE(c->call(lease_req("kv", 4096, 0), 10, &fd).ok());
  auto full = c->call(lease_req("other", 4096, 0), 10);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().code, Errc::kBusy);
  EXPECT_NE(full.error().message.find("--max-arenas"), std::string::npos) << full.error().message;
  EXPECT_EQ(status_of(daemon).arenas.size(), 1u);
}

// --- Who may use an arena (docs/protocol.md, "Arena security") ---

constexpr int kOtherUid = 65534;  // the other uid; the daemon's --group is nobody's group, joined by setgroups

int exit_code_of(pid_t pid) {
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Runs `body` in a child running as uid nobody, a member of the daemon's group (as a member of
// control.group would be); returns its exit code (126: could not become nobody). `body` reports with its
// exit code: 0 is what the test expects.
template <typename Body>
pid_t fork_group_member(Body body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    const gid_t g = kOtherUid;
    if (::setgroups(1, &g) != 0 || ::setgid(kOtherUid) != 0 || ::setuid(kOtherUid) != 0) _exit(126);
    try {
      _exit(body());
    } catch (...) {
      _exit(125);  // never back into the test runner in a forked child
    }
  }
  return pid;
}

// Kills (and, if it is our child, reaps) a process when the test ends, also on a failed ASSERT.
struct KillAtEnd {
  pid_t pid;
  ~KillAtEnd() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int st = 0;
    ::waitpid(pid, &st, 0);
  }
};

int fail_with(int code, const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  return code;
}

TEST(WeightdArena, AnotherUidInTheGroupCanNeitherLeaseNorReleaseTheEnginesArena) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as nobody";
  test::TempDir dir;
  test::Daemon daemon(dir / "run", {"--group", std::to_string(kOtherUid)});
  // The engine (this uid) fills the arena and exits: its KV cache waits for the next engine.
  auto h1 = spawn_holder(daemon, "kv", kMiB, 5, [](volatile uint64_t* p, auto) {
    for (size_t i = 0; i < kMiB / 8; ++i) p[i] = pattern(i);
    return false;
  });
  grant_of(next_line(h1));
  ASSERT_EQ(exit_code_of(h1.pid), 0);

  const int rc = exit_code_of(fork_group_member([&] {
    auto c = connect(daemon);
    if (!c.ok()) return fail_with(10, "connect: " + c.error().message);
    if (auto st = c->call({{"op", "status"}}, 10); !st.ok()) return fail_with(11, "status: " + st.error().message);
    UniqueFd fd;
    auto r = c->call(lease_req("kv", kMiB, 0), 10, &fd);
    if (r.ok() || fd) return fail_with(1, "another uid was granted the engine's arena");
    if (r.error().code != Errc::kPermissionDenied || r.error().message.find("--arena-uid") == std::string::npos)
      return fail_with(2, "unexpected refusal: " + r.error().message);
    if (c->call(lease_req("junk", kMiB, 0), 10).ok()) return fail_with(3, "another uid made an arena");
    if (c->call({{"op", "arena_release"}, {"name", "kv"}}, 10).ok()) return fail_with(4, "another uid released the arena");
    return 0;
  }));
  EXPECT_EQ(rc, 0) << daemon.log();
  auto st = status_of(daemon);
  ASSERT_EQ(st.arenas.size(), 1u) << "nobody's requests made no arena and dropped none";
  EXPECT_EQ(st.arenas[0].leases, 1u);

  // The engine's next lease (same uid: the warm path) finds its bytes, not cleared.
  auto c = connect(daemon);
  ASSERT_TRUE(c.ok());
  UniqueFd fd;
  auto r = c->call(lease_req("kv", kMiB, 0), 10, &fd);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE((*r)["zeroed"].get<bool>());
  void* m = ::mmap(nullptr, kMiB, PROT_READ, MAP_SHARED, fd.get(), 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_EQ(static_cast<uint64_t*>(m)[5], pattern(5));
  ::munmap(m, kMiB);
}

// The holder is the process that sent the lease request: a connection handed to a child (fork) names the
// child, and the engine's next lease waits for the child's exit.
TEST(WeightdArena, TheHolderIsTheProcessThatSentTheRequestNotTheOneThatConnected) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run");
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const pid_t connector = ::fork();
  if (connector == 0) {
    auto c = connect(daemon);
    if (!c.ok()) _exit(10);
    const pid_t child = ::fork();
    if (child != 0) _exit(0);  // the connecting process exits; its child keeps the connection
    while (::getppid() == connector) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    UniqueFd fd;
    auto r = c->call(lease_req("kv", kMiB, 0), 10, &fd);
    std::string line = r.ok() ? "granted " + std::to_string(::getpid()) + "\n" : "error " + r.error().message + "\n";
    [[maybe_unused]] auto n = ::write(p[1], line.data(), line.size());
    if (r.ok()) ::mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    for (;;) ::pause();
  }
  ::close(p[1]);
  Holder child{-1, UniqueFd(p[0])};
  ASSERT_EQ(exit_code_of(connector), 0);
  const std::string line = next_line(child);
  ASSERT_EQ(line.rfind("granted ", 0), 0u) << line;
  child.pid = static_cast<pid_t>(std::stol(line.substr(8)));
  KillAtEnd child_end{child.pid};  // not our child (init reaps it): killed only

  auto a = arena_of(daemon, "kv");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->holder_pid, child.pid) << "the holder is the sender, not the connector (pid " << connector << ")";
  auto c = connect(daemon);
  ASSERT_TRUE(c.ok());
  auto r = c->call(lease_req("kv", kMiB, 0.2), 10);
  ASSERT_FALSE(r.ok()) << "granted while the child that leased still maps the arena";
  EXPECT_EQ(r.error().code, Errc::kTimeout);
  EXPECT_NE(r.error().message.find("pid " + std::to_string(child.pid)), std::string::npos) << r.error().message;
  ::kill(child.pid, SIGKILL);  // not our child: reaped by init; its pidfd says it exited all the same
  child_end.pid = -1;
  UniqueFd fd;
  auto after = c->call(lease_req("kv", kMiB, 30), 40, &fd);
  EXPECT_TRUE(after.ok()) << after.error().message;
}

// The engine's library maps a leased arena MADV_DONTFORK: a process the engine forks does not keep it.
TEST(WeightdArena, AForkOfTheHolderDoesNotInheritTheArena) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run");
  const pid_t engine = ::fork();
  if (engine == 0) {
    fastrestart::ArenaOptions o;
    o.name = "kv";
    o.bytes = kMiB;
    o.wait_s = 5;
    o.socket_dir = dir / "run";
    auto arena = fastrestart::lease_arena(o);
    if (!arena.ok()) _exit(10);
    auto* base = static_cast<char*>((*arena)->base());
    base[0] = 1;
    const pid_t child = ::fork();
    if (child == 0) {
      // msync on an address range with nothing mapped fails with ENOMEM.
      _exit(::msync(base, kMiB, MS_ASYNC) != 0 && errno == ENOMEM ? 0 : 1);
    }
    _exit(exit_code_of(child));
  }
  EXPECT_EQ(exit_code_of(engine), 0) << "the forked child still mapped the arena";
}

// A holder can neither shrink, grow nor seal the arena (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL at creation),
// and a stale waiting lease is superseded by the next request, which gets the arena at the holder's exit.
TEST(WeightdArena, AHolderCannotResizeOrSealTheArenaAndAStaleWaiterIsSuperseded) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run");
  auto c = connect(daemon);
  ASSERT_TRUE(c.ok());
  UniqueFd fd;
  ASSERT_TRUE(c->call(lease_req("sealed", kMiB, 0), 10, &fd).ok());
  EXPECT_NE(::ftruncate(fd.get(), 0), 0) << "a holder shrank the arena: the next engine's mapping would SIGBUS";
  EXPECT_NE(::ftruncate(fd.get(), 2 * kMiB), 0) << "a holder grew the arena";
  EXPECT_NE(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE), 0) << "a holder sealed the arena against every later lease";
  UniqueFd again;
  EXPECT_TRUE(c->call(lease_req("sealed", kMiB, 0), 10, &again).ok());

  auto h0 = spawn_holder(daemon, "kv", kMiB, 5, [](volatile uint64_t*, auto) { return true; });
  grant_of(next_line(h0));
  auto stale = spawn_holder(daemon, "kv", kMiB, 3600, [](volatile uint64_t*, auto) { return true; });
  for (int i = 0; i < 3000; ++i) {
    auto a = arena_of(daemon, "kv");
    if (a && a->waiting == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(arena_of(daemon, "kv")->waiting, 1u);
  auto engine = spawn_holder(daemon, "kv", kMiB, 10, [](volatile uint64_t*, auto) { return true; });
  const std::string superseded = next_line(stale, 10000);  // it notices within a second
  EXPECT_EQ(superseded.rfind("error", 0), 0u) << superseded;
  EXPECT_NE(superseded.find("superseded"), std::string::npos) << superseded;
  kill_and_reap(h0.pid);
  json g = grant_of(next_line(engine));
  EXPECT_EQ(g["previous_holder_pid"], h0.pid);
  EXPECT_EQ(arena_of(daemon, "kv")->holder_pid, engine.pid);
  kill_and_reap(engine.pid);
  kill_and_reap(stale.pid);  // exited already, unless it was granted
}

TEST(WeightdArena, ArenasAreBoundedByBytesAndNamesAndCanBeReleasedAndEvicted) {
  test::TempDir dir;
  test::Daemon daemon(dir / "run", {"--max-arena-bytes", std::to_string(8 * kMiB), "--arena-name", "kv", "--arena-name", "kv2"});
  auto c = connect(daemon);
  ASSERT_TRUE(c.ok());
  auto huge = c->call(lease_req("kv", uint64_t{1} << 46, 0), 10);
  ASSERT_FALSE(huge.ok()) << "a 64 TiB virtual arena was made";
  EXPECT_EQ(huge.error().code, Errc::kBusy);
  EXPECT_NE(huge.error().message.find("--max-arena-bytes"), std::string::npos) << huge.error().message;
  auto junk = c->call(lease_req("junk", 4096, 0), 10);
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.error().code, Errc::kPermissionDenied);
  EXPECT_NE(junk.error().message.find("--arena-name"), std::string::npos) << junk.error().message;
  EXPECT_TRUE(status_of(daemon).arenas.empty());

  auto h1 = spawn_holder(daemon, "kv", 4 * kMiB, 5, [](volatile uint64_t*, auto) { return false; });
  grant_of(next_line(h1));
  ASSERT_EQ(exit_code_of(h1.pid), 0);
  auto over = c->call(lease_req("kv2", 6 * kMiB, 0), 10);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("--max-arena-bytes"), std::string::npos) << over.error().message;

  // evict --all drops arenas no live process holds.
  auto ev = test::run({test::weightctl(), "--socket-dir", dir / "run", "evict", "--all"});
  EXPECT_EQ(ev.exit_code, 0) << ev.output;
  EXPECT_NE(ev.output.find("\"arenas_evicted\":1"), std::string::npos) << ev.output;
  EXPECT_TRUE(status_of(daemon).arenas.empty());

  // arena_release: refused while another live process holds it; the holder itself may.
  UniqueFd fd;
  ASSERT_TRUE(c->call(lease_req("kv", 4 * kMiB, 0), 10, &fd).ok());
  const pid_t other = ::fork();
  if (other == 0) {
    auto o = connect(daemon);
    if (!o.ok()) _exit(10);
    auto r = o->call(json{{"op", "arena_release"}, {"name", "kv"}}, 10);
    _exit(!r.ok() && r.error().code == Errc::kBusy ? 0 : 1);
  }
  EXPECT_EQ(exit_code_of(other), 0) << "released under its live holder";
  auto rel = test::run({test::weightctl(), "--socket-dir", dir / "run", "arena-release", "kv"});
  EXPECT_NE(rel.exit_code, 0) << rel.output;
  auto mine = c->call(json{{"op", "arena_release"}, {"name", "kv"}}, 10);
  ASSERT_TRUE(mine.ok()) << mine.error().message;
  EXPECT_EQ((*mine)["freed_bytes"], 4 * kMiB);
  EXPECT_TRUE(status_of(daemon).arenas.empty());
  auto none = test::run({test::weightctl(), "--socket-dir", dir / "run", "arena-release", "kv"});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("no arena 'kv'"), std::string::npos) << none.output;
}

// 256 lease requests from a group member that would wait an hour take no connection slot the engine or
// fastrestartd's status poll needs.
TEST(WeightdArena, WaitingLeasesLeaveTheConnectionSlotsToTheEngine) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as nobody";
  test::TempDir dir;
  test::Daemon daemon(dir / "run", {"--group", std::to_string(kOtherUid)});
  auto h1 = spawn_holder(daemon, "kv", kMiB, 5, [](volatile uint64_t*, auto) { return true; });
  grant_of(next_line(h1));
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const pid_t flood = fork_group_member([&] {
    std::vector<DaemonClient> conns;
    for (int i = 0; i < 256; ++i) {
      auto c = connect(daemon);
      if (!c.ok()) break;
      if (!proto::write_frame(c->fd(), lease_req("kv", kMiB, 3600), -1, deadline_in(5)).ok()) break;
      conns.push_back(std::move(*c));
    }
    // Each request has its answer (a refusal) or has reached the daemon and waits: the bound only ends
    // the wait for answers that do not come.
    const Deadline until = deadline_in(5);
    for (auto& c : conns) (void)proto::read_frame(c.fd(), until);
    [[maybe_unused]] auto n = ::write(p[1], "sent\n", 5);
    for (;;) ::pause();
    return 0;
  });
  ::close(p[1]);
  KillAtEnd flood_end{flood}, h1_end{h1.pid};
  Holder f{flood, UniqueFd(p[0])};
  ASSERT_EQ(next_line(f), "sent");
  auto st = connect(daemon);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_TRUE(st->call({{"op", "status"}}, 10).ok());
  auto ctl = test::run({test::weightctl(), "--socket-dir", dir / "run", "status"});
  EXPECT_EQ(ctl.exit_code, 0) << ctl.output;
  EXPECT_EQ(arena_of(daemon, "kv")->waiting, 0u);
}

}  // namespace
}  // namespace fr
