// spawn_child's snapshottable mode against real children: PID 1 of a new PID namespace whose /proc is its
// own (the CUDA driver needs getpid() and /proc/self to agree: docs/snapshot.md), while every other mount
// is still the host's, and a failed step before exec is an error that names the step.
#include "supervisor/child.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

namespace fr::supervisor {
namespace {

// Everything the child wrote until it exited.
std::string run_to_end(Spawned& s) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(s.output.get(), buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    else if (n == 0) break;
    else if (errno == EAGAIN || errno == EINTR) ::usleep(1000);
    else break;
  }
  ::waitpid(s.pid, nullptr, 0);
  return out;
}

TEST(SpawnChild, ASnapshottableChildIsPidOneWithItsOwnProcAndTheHostsOtherMounts) {
  if (::geteuid() != 0) GTEST_SKIP() << "new PID and mount namespaces need root";
  char dir[] = "/tmp/fr-child-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  SpawnSpec spec;
  spec.new_pid_namespace = true;
  // $$ is the shell's pid in its namespace; /proc/1/cmdline is the shell's own only with a /proc of that
  // namespace; the directory made by the host is visible; the mount table holds exactly one more /proc.
  spec.argv = {"/bin/sh", "-c",
               std::string("echo pid=$$; tr '\\0' ' ' </proc/1/cmdline; echo; test -d ") + dir +
                   " && echo host-dir; grep -c ' /proc ' /proc/self/mountinfo"};
  auto s = spawn_child(spec);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const std::string out = run_to_end(*s);
  EXPECT_NE(out.find("pid=1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("/bin/sh -c echo pid=$$"), std::string::npos) << out;
  EXPECT_NE(out.find("host-dir\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\n2\n"), std::string::npos) << "the host's /proc and the child's own: " << out;
  // Nothing leaked out: the host's mount table still has one /proc.
  EXPECT_EQ(::system("test $(grep -c ' /proc ' /proc/self/mountinfo) -eq 1"), 0);
  ::rmdir(dir);
}

TEST(SpawnChild, AStepBeforeExecThatFailsIsNamed) {
  SpawnSpec spec;
  spec.argv = {"/bin/true"};
  spec.working_dir = "/nonexistent/fr-dir";
  auto s = spawn_child(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "cannot run /bin/true: cannot enter /nonexistent/fr-dir: No such file or directory");
  spec.working_dir.clear();
  spec.argv = {"/nonexistent/engine"};
  s = spawn_child(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "cannot run /nonexistent/engine: No such file or directory");
}

}  // namespace
}  // namespace fr::supervisor
