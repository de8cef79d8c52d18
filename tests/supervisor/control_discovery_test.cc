// live_control_sockets(): what fastrestartctl finds with no target (docs/supervisor.md, "Which instance").
#include "supervisor/control_discovery.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "common/unix_socket.h"
#include "support/harness.h"

namespace fr::supervisor {
namespace {

TEST(ControlDiscovery, OnlySocketsThatAcceptAreInstances) {
  test::TempDir a, b;
  auto live = listen_unix(a / "llama.ctl", 0600);
  ASSERT_TRUE(live.ok()) << live.error().message;
  auto other = listen_unix(b / "qwen.ctl", 0600);
  ASSERT_TRUE(other.ok()) << other.error().message;
  {
    auto stale = listen_unix(a / "dead.ctl", 0600);  // closed at once: the file of a killed fastrestartd
    ASSERT_TRUE(stale.ok());
  }
  std::ofstream(a / "notes.ctl") << "not a socket";
  EXPECT_EQ(live_control_sockets({a.path()}), (std::vector<std::string>{a / "llama.ctl"}));
  std::vector<std::string> both = {a / "llama.ctl", b / "qwen.ctl"};
  std::sort(both.begin(), both.end());
  EXPECT_EQ(live_control_sockets({b.path(), a.path(), "/nonexistent"}), both);
  EXPECT_TRUE(live_control_sockets({"/nonexistent"}).empty());
}

TEST(ControlDiscovery, TheDirectoriesAreTheDocumentedOnes) {
  auto dirs = control_socket_dirs();
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs.front(), "/run/fastrestart");
  EXPECT_EQ(dirs.back(), "/tmp/fastrestart-" + std::to_string(::geteuid()));
}

}  // namespace
}  // namespace fr::supervisor
