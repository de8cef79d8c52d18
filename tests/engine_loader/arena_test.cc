// KV arenas from the engine's side (fastrestart/arena.h) on the host backend: the range reserved with its
// placeholder, the leased arena swapped in at the same address, against the real daemon.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/unix_socket.h"
#include "fastrestart/arena.h"
#include "fastrestart/engine_loader.h"
#include "fastrestart/engine_loader_c.h"
#include "support/harness.h"

namespace fr {
namespace {

constexpr uint64_t kBytes = 4u << 20;

fastrestart::ArenaOptions opts(const std::string& dir, double wait_s = 10) {
  fastrestart::ArenaOptions o;
  o.name = "kv";
  o.bytes = kBytes;
  o.wait_s = wait_s;
  o.socket_dir = dir;
  return o;
}

uint64_t word(size_t i) { return 0x2545f4914f6cdd1dull * (i + 3); }

// The C ABI's options for kBytes on the daemon at `dir` (which must outlive them).
fr_arena_options_t c_arena_options(const std::string& dir) {
  fr_arena_options_t o;
  fr_arena_options_init(&o);
  o.bytes = kBytes;
  o.socket_dir = dir.c_str();
  return o;
}

// A process that leases the arena, fills it with word(i) and exits.
void fill_in_another_process(const std::string& dir) {
  pid_t pid = ::fork();
  if (pid == 0) {
    auto a = fastrestart::lease_arena(opts(dir));
    if (!a.ok()) _exit(1);
    auto* p = static_cast<uint64_t*>((*a)->base());
    for (size_t i = 0; i < kBytes / 8; ++i) p[i] = word(i);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(Arena, ThePlaceholderAliasesAndTheSwapKeepsTheAddress) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  fill_in_another_process(d / "run");

  auto a = fastrestart::reserve_arena(opts(d / "run"));
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto& arena = **a;
  EXPECT_FALSE(arena.leased());
  EXPECT_EQ(arena.bytes(), kBytes);
  const uint64_t chunk = arena.placeholder_bytes();
  ASSERT_GT(chunk, 0u);
  ASSERT_LT(chunk, arena.bytes());
  auto* p = static_cast<volatile uint64_t*>(arena.base());
  void* const before = arena.base();

  // Every chunk of the placeholder is the same memory: what is written at one offset is read at another.
  // This is why only memory rewritten before it is read after the swap may live there.
  p[0] = 7;
  EXPECT_EQ(p[chunk / 8], 7u);
  p[arena.bytes() / 8 - chunk / 8] = 9;
  EXPECT_EQ(p[0], 9u);

  auto l = arena.swap_in();
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_FALSE(l->created) << "the filler made it";
  EXPECT_EQ(l->leases, 2u);
  EXPECT_EQ(l->previous_holder_pid, -1) << "the filler had exited before this lease was asked";
  EXPECT_EQ(arena.base(), before);
  EXPECT_TRUE(arena.leased());
  EXPECT_EQ(arena.placeholder_bytes(), 0u);
  // The arena's bytes, through the pointer the engine had before it had the memory.
  size_t bad = 0;
  for (size_t i = 0; i < kBytes / 8; ++i) bad += p[i] != word(i);
  EXPECT_EQ(bad, 0u);
  p[0] = 1;
  EXPECT_EQ(p[chunk / 8], word(chunk / 8)) << "no aliasing once the arena is mapped";
  auto again = arena.swap_in();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::kBusy);
}

TEST(Arena, FindArenaReportsTheDaemonsArenaWithoutLeasingIt) {
  test::TempDir d;
  {
    auto none = fastrestart::find_arena(opts(d / "run"));
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.error().code, Errc::kNotFound) << none.error().message;
    EXPECT_NE(none.error().message.find("arena 'kv'"), std::string::npos) << none.error().message;
  }
  test::Daemon daemon(d / "run");
  auto before = fastrestart::find_arena(opts(d / "run"));
  ASSERT_TRUE(before.ok()) << before.error().message;
  EXPECT_FALSE(before->has_value()) << "no lease has made it yet";

  auto a = fastrestart::lease_arena(opts(d / "run"));
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto found = fastrestart::find_arena(opts(d / "run"));
  ASSERT_TRUE(found.ok()) << found.error().message;
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->bytes, (*a)->bytes());
  EXPECT_EQ((*found)->holder_pid, ::getpid());
  EXPECT_EQ((*found)->leases, 1u);
  EXPECT_EQ((*found)->waiting, 0u);
  auto other = opts(d / "run");
  other.name = "other";
  auto missing = fastrestart::find_arena(other);
  ASSERT_TRUE(missing.ok()) << missing.error().message;
  EXPECT_FALSE(missing->has_value());
  // Asking leased nothing: still the one lease.
  auto again = fastrestart::find_arena(opts(d / "run"));
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->leases, 1u);
}

TEST(Arena, ALeaseHeldByALiveProcessTimesOutNamingWaitSAndThePid) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t holder = ::fork();
  if (holder == 0) {
    auto a = fastrestart::lease_arena(opts(d / "run"));
    char c = a.ok() ? 'y' : 'n';
    [[maybe_unused]] auto n = ::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');

  auto a = fastrestart::reserve_arena(opts(d / "run", 0.2));
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto l = (*a)->swap_in();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code, Errc::kTimeout);
  EXPECT_NE(l.error().message.find("wait_s"), std::string::npos) << l.error().message;
  EXPECT_NE(l.error().message.find("pid " + std::to_string(holder)), std::string::npos) << l.error().message;
  EXPECT_FALSE((*a)->leased()) << "the placeholder stays after a failed lease";

  ::kill(holder, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(holder, &st, 0), holder);
  auto retry = (*a)->swap_in();
  ASSERT_TRUE(retry.ok()) << retry.error().message;
  EXPECT_EQ(retry->previous_holder_pid, -1) << "the holder was reaped before this lease was asked";
}

TEST(Arena, BadOptionsAreErrorsNamingTheField) {
  auto o = opts("/nonexistent");
  o.bytes = 0;
  auto a = fastrestart::reserve_arena(o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("ArenaOptions.bytes"), std::string::npos);
  o = opts("/nonexistent");
  o.name = "kv cache";
  a = fastrestart::reserve_arena(o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("ArenaOptions.name"), std::string::npos);
  o = opts("/nonexistent");
  a = fastrestart::reserve_arena(o);
  ASSERT_TRUE(a.ok()) << "reserving needs no daemon: " << a.error().message;
  auto l = (*a)->swap_in();
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.error().message.find("no daemon"), std::string::npos) << l.error().message;
}

// The engine's arena line (docs/supervisor.md, "The engine's arena line"): engine_loader's writer, in C++
// and through the C ABI, names the arena's last lease; the fallback line is one quoted line.
TEST(Arena, TheArenaLineNamesTheLastLease) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  auto r = fastrestart::reserve_arena(opts(d / "run"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  fastrestart::Arena& a = **r;
  EXPECT_EQ(fastrestart::arena_line(a), "") << "no lease yet";
  auto l = a.swap_in();
  ASSERT_TRUE(l.ok()) << l.error().message;
  char numbers[128];
  std::snprintf(numbers, sizeof numbers, "waited_s=%.6f swap_s=%.6f generation=%llu", l->waited_s, l->seconds,
                static_cast<unsigned long long>(l->generation));
  const std::string want = "fastrestart-arena: leased name=kv bytes=" + std::to_string(a.bytes()) + " " + numbers;
  EXPECT_EQ(fastrestart::arena_line(a), want);

  EXPECT_EQ(fastrestart::arena_fallback_line("no \"arena\"\n\t here\\ "),
            "fastrestart-arena: fallback reason=\"no \\\"arena\\\" here\\\\\"");
  const std::string cut = fastrestart::arena_fallback_line(std::string(600, 'x') + "\xc3\xa9");
  EXPECT_EQ(cut, "fastrestart-arena: fallback reason=\"" + std::string(512, 'x') + "\"");
  const std::string utf8 = fastrestart::arena_fallback_line(std::string(511, 'x') + "\xc3\xa9");
  EXPECT_EQ(utf8, "fastrestart-arena: fallback reason=\"" + std::string(511, 'x') + "\"") << "not cut inside a character";

  // The C ABI: snprintf's contract (this arena gone first: the C one leases it again, at once).
  const uint64_t bytes = a.bytes();
  r->reset();
  const std::string dir = d / "run";
  fr_arena_options_t o = c_arena_options(dir);
  o.bytes = bytes;
  fr_arena_t* c = nullptr;
  char err[256] = {};
  ASSERT_EQ(fr_arena_reserve(&o, &c, err, sizeof err), FR_OK) << err;
  char line[512] = {};
  EXPECT_EQ(fr_arena_line(c, line, sizeof line), 0u);
  EXPECT_STREQ(line, "");
  ASSERT_EQ(fr_arena_swap_in(c, nullptr, nullptr, err, sizeof err), FR_OK) << err;
  const size_t n = fr_arena_line(c, line, sizeof line);
  EXPECT_EQ(n, std::strlen(line));
  EXPECT_EQ(std::string(line).rfind("fastrestart-arena: leased name=kv bytes=" + std::to_string(bytes) + " ", 0), 0u) << line;
  char small[8] = {};
  EXPECT_EQ(fr_arena_line(c, small, sizeof small), n);
  EXPECT_STREQ(small, "fastres");
  EXPECT_EQ(fr_arena_line(nullptr, line, sizeof line), 0u);
  fr_arena_release(c);
  const std::string fb = fastrestart::arena_fallback_line("a \"b\"");
  EXPECT_EQ(fr_arena_fallback_line("a \"b\"", line, sizeof line), fb.size());
  EXPECT_EQ(line, fb);
}

TEST(Arena, TheCAbiReservesAndSwapsAtTheSameAddress) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  fill_in_another_process(d / "run");
  const std::string dir = d / "run";
  fr_arena_options_t o = c_arena_options(dir);
  fr_arena_t* a = nullptr;
  char err[256] = {};
  ASSERT_EQ(fr_arena_reserve(&o, &a, err, sizeof err), FR_OK) << err;
  void* base = fr_arena_base(a);
  EXPECT_EQ(fr_arena_leased(a), 0);
  int created = -1;
  double waited = -1;
  ASSERT_EQ(fr_arena_swap_in(a, &created, &waited, err, sizeof err), FR_OK) << err;
  EXPECT_EQ(created, 0);
  EXPECT_EQ(waited, 0.0);
  EXPECT_EQ(fr_arena_base(a), base);
  EXPECT_EQ(fr_arena_leased(a), 1);
  EXPECT_EQ(static_cast<uint64_t*>(base)[5], word(5));
  fr_arena_release(a);
  o.bytes = 0;
  EXPECT_EQ(fr_arena_reserve(&o, &a, err, sizeof err), FR_EINVAL);
  EXPECT_NE(std::strstr(err, "ArenaOptions.bytes"), nullptr) << err;
}


// /proc/self/maps' line for the mapping that starts at `p` ("" when none does).
std::string arena_maps_line(const void* p) {
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)));
  std::ifstream maps("/proc/self/maps");
  for (std::string l; std::getline(maps, l);)
    if (l.rfind(start, 0) == 0) return l;
  return "";
}

// One request line on the snapshot exchange at `sock`, its reply parsed.
nlohmann::json arena_exchange(const std::string& sock, const std::string& op) {
  auto fd = connect_unix(sock, deadline_in(5));
  if (!fd.ok()) return {{"connect", fd.error().message}};
  const std::string line = nlohmann::json{{"op", op}}.dump() + "\n";
  if (!send_all(fd->get(), line.data(), line.size(), {}, deadline_in(5)).ok()) return {{"send", false}};
  std::string reply;
  char c = 0;
  while (recv_exact(fd->get(), &c, 1, nullptr, deadline_in(30)).ok() && c != '\n') reply += c;
  return nlohmann::json::parse(reply, nullptr, false);
}

// What a snapshot's prepare does to a KV arena: the memory goes, the address stays reserved; the next
// swap_in maps the daemon's arena there again, with what was written before.
TEST(Arena, UnmapKeepsTheRangeReservedAndSwapInMapsTheSameMemoryAgain) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  auto a = fastrestart::lease_arena(opts(d / "run"));
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto& arena = **a;
  auto* p = static_cast<volatile uint64_t*>(arena.base());
  for (size_t i = 0; i < kBytes / 8; ++i) p[i] = word(i);
  const std::string mapped = arena_maps_line(arena.base());
  EXPECT_NE(mapped.find("memfd:fastrestart-pool"), std::string::npos) << mapped;

  ASSERT_TRUE(arena.unmap().ok());
  EXPECT_FALSE(arena.leased());
  EXPECT_TRUE(arena.unmapped());
  EXPECT_EQ(arena.placeholder_bytes(), 0u);
  const std::string reserved = arena_maps_line(arena.base());
  EXPECT_EQ(reserved.find("memfd"), std::string::npos) << reserved;
  EXPECT_NE(reserved.find(" ---p "), std::string::npos) << "inaccessible, still reserved: " << reserved;

  auto l = arena.swap_in();  // this process still holds the lease: granted at once
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_FALSE(l->created);
  EXPECT_EQ(l->waited_s, 0.0);
  EXPECT_EQ(arena.base(), static_cast<void*>(const_cast<uint64_t*>(p)));
  EXPECT_FALSE(arena.unmapped());
  ASSERT_TRUE(arena.last_lease().has_value());
  EXPECT_EQ(arena.last_lease()->generation, l->generation);
  size_t bad = 0;
  for (size_t i = 0; i < kBytes / 8; ++i) bad += p[i] != word(i);
  EXPECT_EQ(bad, 0u) << "the daemon's memory, not a copy";

  // From the placeholder too (a standby that is snapshotted before its release).
  auto b = fastrestart::reserve_arena([&] { auto o = opts(d / "run"); o.name = "kv2"; return o; }());
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_TRUE((*b)->unmap().ok());
  EXPECT_EQ(arena_maps_line((*b)->base()).find("memfd"), std::string::npos);
  ASSERT_TRUE((*b)->swap_in().ok());
  EXPECT_TRUE((*b)->leased());
}

// The snapshot exchange with a KV arena: prepare unmaps it (after quiesce) and reports where; resume
// leases it again, maps it at the same address and only then calls the resume hook.
TEST(Arena, TheSnapshotAgentUnmapsItsArenaAndLeasesItAgainBeforeTheResumeHook) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  auto a = fastrestart::lease_arena(opts(d / "run"));
  ASSERT_TRUE(a.ok()) << a.error().message;
  std::shared_ptr<fastrestart::Arena> arena(std::move(*a));
  auto* p = static_cast<volatile uint64_t*>(arena->base());
  p[3] = word(3);
  bool leased_at_resume = false;
  const std::string sock = d / "ex.sock";
  auto agent = fastrestart::SnapshotAgent::start(
      {}, {nullptr, [&]() -> fastrestart::Status { leased_at_resume = arena->leased(); return {}; }}, sock, {arena});
  ASSERT_TRUE(agent.ok()) << agent.error().message;

  const auto prepared = arena_exchange(sock, "prepare");
  ASSERT_TRUE(prepared.value("ok", false)) << prepared.dump();
  ASSERT_EQ(prepared["arenas"].size(), 1u) << prepared.dump();
  const auto& e = prepared["arenas"][0];
  EXPECT_EQ(e["name"], "kv");
  EXPECT_EQ(e["device"], "host");
  EXPECT_EQ(e["mapped"], false);
  EXPECT_EQ(e["base"].get<uintptr_t>(), reinterpret_cast<uintptr_t>(arena->base()));
  EXPECT_EQ(e["bytes"].get<uint64_t>(), arena->bytes());
  EXPECT_EQ(e["daemon_socket"].get<std::string>().rfind(std::string(d / "run"), 0), 0u) << e.dump();
  EXPECT_NE(arena_maps_line(arena->base()).find(" ---p "), std::string::npos);
  EXPECT_TRUE((*agent)->prepared());
  const auto again = arena_exchange(sock, "prepare");
  EXPECT_EQ(again.value("already", false), true) << again.dump();

  const auto resumed = arena_exchange(sock, "resume");
  ASSERT_TRUE(resumed.value("ok", false)) << resumed.dump();
  ASSERT_EQ(resumed["arenas"].size(), 1u);
  EXPECT_EQ(resumed["arenas"][0]["mapped"], true);
  EXPECT_EQ(resumed["arenas"][0]["created"], false);
  EXPECT_TRUE(resumed["arenas"][0].contains("waited_s"));
  EXPECT_TRUE(leased_at_resume) << "the hook ran before the arena was back";
  EXPECT_EQ(p[3], word(3));
  EXPECT_FALSE((*agent)->prepared());
}

TEST(Arena, TheCAbiSnapshotAgentTakesArenas) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  const std::string dir = d / "run";
  fr_arena_options_t o = c_arena_options(dir);
  fr_arena_t* a = nullptr;
  char err[256] = {};
  ASSERT_EQ(fr_arena_reserve(&o, &a, err, sizeof err), FR_OK) << err;
  ASSERT_EQ(fr_arena_swap_in(a, nullptr, nullptr, err, sizeof err), FR_OK) << err;
  const std::string sock = d / "c.sock";
  fr_snapshot_agent_t* agent = nullptr;
  fr_arena_t* const* none = nullptr;
  EXPECT_EQ(fr_snapshot_agent_start_arenas(nullptr, 0, none, 1, nullptr, nullptr, nullptr, sock.c_str(), &agent, err, sizeof err),
            FR_EINVAL);
  EXPECT_NE(std::strstr(err, "arenas is NULL"), nullptr) << err;
  ASSERT_EQ(fr_snapshot_agent_start_arenas(nullptr, 0, &a, 1, nullptr, nullptr, nullptr, sock.c_str(), &agent, err, sizeof err),
            FR_OK) << err;
  void* base = fr_arena_base(a);
  fr_arena_release(a);  // the agent keeps the range
  const auto prepared = arena_exchange(sock, "prepare");
  ASSERT_EQ(prepared["arenas"].size(), 1u) << prepared.dump();
  EXPECT_EQ(prepared["arenas"][0]["base"].get<uintptr_t>(), reinterpret_cast<uintptr_t>(base));
  const auto resumed = arena_exchange(sock, "resume");
  EXPECT_EQ(resumed["arenas"][0]["mapped"], true) << resumed.dump();
  fr_snapshot_agent_stop(agent);
}

}  // namespace
}  // namespace fr
