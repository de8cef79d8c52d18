// spawn_child's snapshottable mode against real children: PID 1 of a new PID namespace whose /proc is its
// own (the CUDA driver needs getpid() and /proc/self to agree: docs/snapshot.md), while every other mount
// is still the host's, and a failed step before exec is an error that names the step.
#include "supervisor/child.h"
#include "supervisor/listen_socket.h"
#include "supervisor/private_endpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "common/fd.h"

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

// engine.listen = "supervisor": the socket arrives as descriptor 3 with systemd's variables, LISTEN_PID
// being the child's own pid (1 in a PID namespace of its own); a child not told to get it sees neither
// the descriptor nor the variables, even when fastrestartd's own environment had them.
TEST(SpawnChild, TheListeningSocketArrivesAsDescriptor3WithTheChildsPid) {
  auto l = ListenSocket::open("127.0.0.1", 0, 16);
  ASSERT_TRUE(l.ok()) << l.error().message;
  ::setenv("LISTEN_FDS", "7", 1);  // as if fastrestartd itself had been socket-activated
  const std::string script =
      "echo pid=$$ env=$LISTEN_PID fds=$LISTEN_FDS names=$LISTEN_FDNAMES; readlink /proc/self/fd/3";
  for (bool pid_ns : {false, true}) {
    if (pid_ns && ::geteuid() != 0) continue;  // new PID and mount namespaces need root
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.listen_fd = l->fd();
    spec.listen_fd_name = kListenFdName;
    spec.new_pid_namespace = pid_ns;
    auto s = spawn_child(spec);
    ASSERT_TRUE(s.ok()) << s.error().message;
    const std::string out = run_to_end(*s);
    const std::string pid = pid_ns ? "1" : std::to_string(s->pid);
    EXPECT_NE(out.find("pid=" + pid + " env=" + pid + " fds=1 names=fastrestart-engine\n"), std::string::npos) << out;
    EXPECT_NE(out.find("socket:[" + std::to_string(l->inode()) + "]"), std::string::npos) << out;
  }
  SpawnSpec other;
  other.argv = {"/bin/sh", "-c", script};
  auto s = spawn_child(other);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const std::string out = run_to_end(*s);
  ::unsetenv("LISTEN_FDS");
  EXPECT_NE(out.find(" env= fds= names=\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("socket:[" + std::to_string(l->inode()) + "]"), std::string::npos) << "inherited: " << out;
}

// The descriptors a shell child holds, as its own child `ls` reads them from /proc/<the shell>/fd (a glob
// in the shell itself would list the descriptor it reads the directory with).
std::set<int> child_fds(SpawnSpec spec) {
  spec.argv = {"/bin/sh", "-c", "ls -m /proc/$$/fd"};
  auto s = spawn_child(spec);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return {};
  std::string out = run_to_end(*s);
  std::replace(out.begin(), out.end(), ',', ' ');
  std::istringstream in(out);
  std::set<int> fds;
  for (int fd; in >> fd;) fds.insert(fd);
  return fds;
}

// A child holds exactly 0, 1, 2 and what it is passed: not a descriptor fastrestartd inherited without
// close-on-exec (here: the test's, as a shell or a test runner leaves them), nor the /dev/null that became
// its standard input, on every spawn path (plain, a passed descriptor, the listening socket, a PID
// namespace of its own).
TEST(SpawnChild, AChildHoldsOnlyItsOwnDescriptors) {
  UniqueFd stray(::open("/dev/null", O_RDONLY));  // inherited without close-on-exec
  ASSERT_TRUE(stray);
  ASSERT_EQ(::dup2(stray.get(), 40), 40);
  UniqueFd stray40(40);
  UniqueFd gate(::dup3(stray.get(), 9, O_CLOEXEC));  // a descriptor passed on purpose (a standby's gate)
  ASSERT_EQ(gate.get(), 9);
  auto l = ListenSocket::open("127.0.0.1", 0, 16);
  ASSERT_TRUE(l.ok()) << l.error().message;
  for (bool pid_ns : {false, true}) {
    if (pid_ns && ::geteuid() != 0) continue;  // new PID and mount namespaces need root
    SpawnSpec spec;
    spec.new_pid_namespace = pid_ns;
    EXPECT_EQ(child_fds(spec), (std::set<int>{0, 1, 2})) << "pid namespace: " << pid_ns;
    spec.pass_fd = gate.get();
    EXPECT_EQ(child_fds(spec), (std::set<int>{0, 1, 2, 9})) << "pid namespace: " << pid_ns;
    spec.listen_fd = l->fd();
    EXPECT_EQ(child_fds(spec), (std::set<int>{0, 1, 2, 3, 9})) << "pid namespace: " << pid_ns;
    spec.pass_fd = -1;
    EXPECT_EQ(child_fds(spec), (std::set<int>{0, 1, 2, 3})) << "pid namespace: " << pid_ns;
    if (pid_ns) continue;  // a snapshottable engine gets no private endpoint
    auto e = open_private_endpoint();
    ASSERT_TRUE(e.ok()) << e.error().message;
    spec.probe_fd = e->fd.get();
    EXPECT_EQ(child_fds(spec), (std::set<int>{0, 1, 2, 3, 4})) << "with the private endpoint";
  }
}

// readiness.endpoint = "private": the private endpoint arrives as descriptor 4 beside the socket at 3, with
// LISTEN_FDS=2 and both names; a gate at 4 is refused, and so is an endpoint for a snapshottable engine.
TEST(SpawnChild, ThePrivateEndpointArrivesAsDescriptor4) {
  auto l = ListenSocket::open("127.0.0.1", 0, 16);
  ASSERT_TRUE(l.ok()) << l.error().message;
  auto e = open_private_endpoint();
  ASSERT_TRUE(e.ok()) << e.error().message;
  struct stat st {};
  ASSERT_EQ(::fstat(e->fd.get(), &st), 0);
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo fds=$LISTEN_FDS names=$LISTEN_FDNAMES; readlink /proc/self/fd/3 /proc/self/fd/4"};
  spec.listen_fd = l->fd();
  spec.listen_fd_name = kListenFdName;
  spec.probe_fd = e->fd.get();
  spec.probe_fd_name = kProbeFdName;
  auto s = spawn_child(spec);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const std::string out = run_to_end(*s);
  EXPECT_NE(out.find("fds=2 names=fastrestart-engine:fastrestart-probe\nsocket:[" + std::to_string(l->inode()) +
                     "]\nsocket:[" + std::to_string(st.st_ino) + "]\n"),
            std::string::npos) << out;
  spec.pass_fd = 4;
  s = spawn_child(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("descriptor 4 is both the private endpoint and the passed descriptor"), std::string::npos)
      << s.error().message;
  spec.pass_fd = -1;
  spec.new_pid_namespace = true;
  s = spawn_child(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("a snapshottable engine gets no private endpoint"), std::string::npos) << s.error().message;
}

// The standby's gate and the listening socket cannot both be descriptor 3.
TEST(SpawnChild, APassedDescriptorAt3BesideTheListeningSocketIsRefused) {
  auto l = ListenSocket::open("127.0.0.1", 0, 16);
  ASSERT_TRUE(l.ok()) << l.error().message;
  SpawnSpec spec;
  spec.argv = {"/bin/true"};
  spec.listen_fd = l->fd();
  spec.pass_fd = 3;
  auto s = spawn_child(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("descriptor 3 is both the listening socket and the passed descriptor"), std::string::npos)
      << s.error().message;
}

// The address is taken: the error names it, the fields, and the cause.
TEST(ListenSocket, AnAddressInUseIsBusyAndNamed) {
  auto first = ListenSocket::open("127.0.0.1", 0, 16);
  ASSERT_TRUE(first.ok()) << first.error().message;
  const std::string port = first->address().substr(first->address().rfind(':') + 1);
  auto second = ListenSocket::open("127.0.0.1", static_cast<uint16_t>(std::stoi(port)), 16);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::kBusy);
  EXPECT_NE(second.error().message.find("cannot listen on 127.0.0.1:" + port +
                                        " (engine.host, engine.port; engine.listen = \"supervisor\"): bind: Address already in use"),
            std::string::npos) << second.error().message;
  auto v6 = ListenSocket::open("::1", 0, 16);
  if (v6.ok()) {  // a host without IPv6 has no ::1
    EXPECT_EQ(v6->address().rfind("[::1]:", 0), 0u) << v6->address();
  }
  auto unknown = ListenSocket::open("no-such-host.invalid", 8000, 16);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::kInvalidArgument);
  EXPECT_NE(unknown.error().message.find("cannot listen on no-such-host.invalid:8000"), std::string::npos) << unknown.error().message;
}

}  // namespace
}  // namespace fr::supervisor
