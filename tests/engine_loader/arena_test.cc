// KV arenas from the engine's side (fastrestart/arena.h) on the host backend: the range reserved with its
// placeholder, the leased arena swapped in at the same address, against the real daemon.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "fastrestart/arena.h"
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

TEST(Arena, TheCAbiReservesAndSwapsAtTheSameAddress) {
  test::TempDir d;
  test::Daemon daemon(d / "run");
  fill_in_another_process(d / "run");
  const std::string dir = d / "run";
  fr_arena_options_t o;
  fr_arena_options_init(&o);
  o.bytes = kBytes;
  o.socket_dir = dir.c_str();
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

}  // namespace
}  // namespace fr
