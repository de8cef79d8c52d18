// The inherited listening socket (fastrestart/listen_socket.h) with real sockets: each case runs in a
// forked child that sets up descriptor 3 and the LISTEN_* variables as a supervisor would, calls the
// helper (C++ and C ABI) and reports what it got through a pipe.
#include "fastrestart/listen_socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "common/fd.h"
#include "fastrestart/engine_loader_c.h"

namespace {

using fr::UniqueFd;

UniqueFd tcp_socket(bool listening) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  if (listening) {
    EXPECT_EQ(::listen(fd.get(), 8), 0);
  }
  return fd;
}

// Forks; the child puts `fd` at descriptor 3 (-1: closes 3), sets LISTEN_PID to its own pid (or to
// `pid_text` when not empty), LISTEN_FDS and LISTEN_FDNAMES (nullptr: unset), runs `body` and writes what
// it returns to the parent, which returns it.
std::string in_child(int fd, const std::string& pid_text, const char* fds, const char* names,
                     const std::function<std::string()>& body) {
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::fcntl(p[1], F_DUPFD_CLOEXEC, 10);  // off descriptor 3, which the case takes over
    if (fd >= 0) ::dup2(fd, 3);
    else ::close(3);
    ::setenv("LISTEN_PID", pid_text.empty() ? std::to_string(::getpid()).c_str() : pid_text.c_str(), 1);
    if (fds) ::setenv("LISTEN_FDS", fds, 1);
    else ::unsetenv("LISTEN_FDS");
    if (names) ::setenv("LISTEN_FDNAMES", names, 1);
    else ::unsetenv("LISTEN_FDNAMES");
    const std::string result = body();
    (void)!::write(out, result.data(), result.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  ::waitpid(pid, nullptr, 0);
  return out;
}

// What the helper returned, whether the variables are gone, and whether the fd is close-on-exec.
std::string take() {
  auto r = fastrestart::inherited_listen_socket();
  std::string s = r.ok() ? "fd=" + std::to_string(*r) : "error: " + r.error().message;
  if (r.ok() && *r >= 0) s += (::fcntl(*r, F_GETFD) & FD_CLOEXEC) ? " cloexec" : " inheritable";
  const bool gone = !std::getenv("LISTEN_PID") && !std::getenv("LISTEN_FDS") && !std::getenv("LISTEN_FDNAMES");
  return s + (gone ? " unset" : " still-set");
}

// The public socket and the private endpoint (readiness.endpoint = "private") in one call: descriptors 3
// and 4 by their names, either order; the one-name call still finds the public socket; the C ABI agrees.
TEST(ListenSocket, TakesTheSocketAndThePrivateEndpointTogether) {
  UniqueFd l = tcp_socket(true), probe = tcp_socket(true), closed = tcp_socket(false);
  const int probe_fd = probe.get(), closed_fd = closed.get();
  auto both = [](int at4) {
    return [at4] {
      if (at4 >= 0) ::dup2(at4, 4);
      auto r = fastrestart::inherited_listen_sockets();
      if (!r.ok()) return "error: " + r.error().message;
      const bool gone = !std::getenv("LISTEN_PID") && !std::getenv("LISTEN_FDS") && !std::getenv("LISTEN_FDNAMES");
      return "serve=" + std::to_string(r->serve) + " probe=" + std::to_string(r->probe) +
             ((::fcntl(4, F_GETFD) & FD_CLOEXEC) ? " cloexec" : " inheritable") + (gone ? " unset" : " still-set");
    };
  };
  EXPECT_EQ(in_child(l.get(), "", "2", "fastrestart-engine:fastrestart-probe", both(probe_fd)), "serve=3 probe=4 cloexec unset");
  EXPECT_EQ(in_child(l.get(), "", "2", "fastrestart-probe:fastrestart-engine", both(probe_fd)), "serve=4 probe=3 cloexec unset");
  // Only the public socket passed: no endpoint.
  EXPECT_EQ(in_child(l.get(), "", "1", "fastrestart-engine", both(-1)).substr(0, 17), "serve=3 probe=-1 ");
  // An endpoint that is no listening socket is an error naming it.
  EXPECT_EQ(in_child(l.get(), "", "2", "fastrestart-engine:fastrestart-probe", both(closed_fd)),
            "error: LISTEN_FDS=2: descriptor 4 is a non-listening IPv4 (AF_INET) TCP stream socket, not a listening TCP socket");
  // The one-name call of an engine that knows nothing of the endpoint still finds its socket.
  EXPECT_EQ(in_child(l.get(), "", "2", "fastrestart-engine:fastrestart-probe", [probe_fd] {
              ::dup2(probe_fd, 4);
              return take();
            }),
            "fd=3 cloexec unset");
  EXPECT_EQ(in_child(l.get(), "", "2", "fastrestart-engine:fastrestart-probe", [probe_fd] {
              ::dup2(probe_fd, 4);
              int serve = -2, p = -2;
              char err[256];
              const int rc = fr_listen_sockets(&serve, &p, err, sizeof err);
              return std::to_string(rc) + " " + std::to_string(serve) + " " + std::to_string(p);
            }),
            "0 3 4");
}

TEST(ListenSocket, TakesTheSocketPassedAsDescriptor3) {
  UniqueFd l = tcp_socket(true);
  EXPECT_EQ(in_child(l.get(), "", "1", "fastrestart-engine", take), "fd=3 cloexec unset");
  // Without names (a plain systemd socket unit with one socket), fd 3 is it too.
  EXPECT_EQ(in_child(l.get(), "", "1", nullptr, take), "fd=3 cloexec unset");
  // A second call finds nothing: the variables are gone.
  EXPECT_EQ(in_child(l.get(), "", "1", "fastrestart-engine", [] { (void)take(); return take(); }), "fd=-1 unset");
}

TEST(ListenSocket, PicksItsNameAmongSeveral) {
  UniqueFd l = tcp_socket(true);
  const std::string got = in_child(l.get(), "", "2", "other:fastrestart-engine", [] {
    ::dup2(3, 4);  // descriptor 4: the named one
    return take();
  });
  EXPECT_EQ(got, "fd=4 cloexec unset");
}

TEST(ListenSocket, IgnoresVariablesMeantForAnotherProcess) {
  UniqueFd l = tcp_socket(true);
  EXPECT_EQ(in_child(l.get(), "1", "1", "fastrestart-engine", take), "fd=-1 unset");          // LISTEN_PID mismatch
  EXPECT_EQ(in_child(l.get(), "", "1", "something-else", take), "fd=-1 unset");              // another name
  EXPECT_EQ(in_child(l.get(), "", "0", "", take), "fd=-1 unset");                            // none passed
  EXPECT_EQ(in_child(l.get(), "", nullptr, nullptr, take), "fd=-1 unset");                   // LISTEN_FDS unset
}

TEST(ListenSocket, RefusesWhatIsNotAListeningSocketNamingTheVariable) {
  UniqueFd l = tcp_socket(true);
  UniqueFd bound = tcp_socket(false);
  auto error = [](const std::string& s) { return s.rfind("error: ", 0) == 0 && s.find(" unset") != std::string::npos; };
  std::string s = in_child(bound.get(), "", "1", "fastrestart-engine", take);
  EXPECT_TRUE(error(s)) << s;
  EXPECT_NE(s.find("LISTEN_FDS=1: descriptor 3 is a non-listening IPv4 (AF_INET) TCP stream socket, not a listening TCP socket"),
            std::string::npos) << s;
  s = in_child(-1, "", "1", "fastrestart-engine", take);
  EXPECT_NE(s.find("LISTEN_FDS=1: descriptor 3 is not open"), std::string::npos) << s;
  s = in_child(l.get(), "", "x", nullptr, take);
  EXPECT_NE(s.find("LISTEN_FDS=x: not a descriptor count"), std::string::npos) << s;
  s = in_child(l.get(), "abc", "1", nullptr, take);
  EXPECT_NE(s.find("LISTEN_PID=abc: not a process id"), std::string::npos) << s;
  s = in_child(l.get(), "", "1", "a:b", take);
  EXPECT_NE(s.find("LISTEN_FDNAMES=a:b: 2 names for LISTEN_FDS=1"), std::string::npos) << s;
}

// What `body` returns, then " | " and what it wrote on its standard error.
std::string with_stderr(const std::function<std::string()>& body) {
  char path[] = "/tmp/fr-listen-stderr-XXXXXX";
  const int f = ::mkstemp(path);
  ::unlink(path);
  ::dup2(f, 2);
  std::string s = body() + " | ";
  char buf[1024];
  ssize_t n;
  ::lseek(f, 0, SEEK_SET);
  while ((n = ::read(f, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

// A listening socket of another family than TCP's (a Unix socket a socket unit or a wrapper passed): the
// error names what descriptor 3 is, in one line.
TEST(ListenSocket, RefusesAListeningUnixSocketNamingItsFamily) {
  char dir[] = "/tmp/fr-listen-unix-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/s";
  UniqueFd u(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(u.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(u.get(), 8), 0);
  const std::string s = in_child(u.get(), "", "1", "fastrestart-engine", take);
  ::unlink(path.c_str());
  ::rmdir(dir);
  EXPECT_EQ(s, "error: LISTEN_FDS=1: descriptor 3 is a listening Unix (AF_UNIX) stream socket, not a listening TCP socket unset");
  // A datagram socket of the right family is not it either.
  UniqueFd udp(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  const std::string d = in_child(udp.get(), "", "1", nullptr, take);
  EXPECT_NE(d.find("descriptor 3 is a non-listening IPv4 (AF_INET) UDP datagram socket, not a listening TCP socket"),
            std::string::npos) << d;
}

// LISTEN_PID of another process (a wrapper that forked instead of exec'ing the engine): no socket, and one
// line on stderr says why.
TEST(ListenSocket, ALISTENPIDOfAnotherProcessIsNamedInOneLine) {
  UniqueFd l = tcp_socket(true);
  const std::string s = in_child(l.get(), "1", "1", "fastrestart-engine", [] { return with_stderr(take); });
  EXPECT_EQ(s.rfind("fd=-1 unset | fastrestart: LISTEN_PID=1 is not this process (pid ", 0), 0u) << s;
  EXPECT_NE(s.find("the passed socket (LISTEN_FDS) is another process's; not using it"), std::string::npos) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;
}

TEST(ListenSocket, TheCAbiReturnsItAndAMissWhenNoneWasPassed) {
  UniqueFd l = tcp_socket(true);
  auto c_take = [] {
    int fd = -7;
    char err[256] = "unset";
    const int rc = fr_listen_socket(nullptr, &fd, err, sizeof err);
    return std::to_string(rc) + " " + std::to_string(fd) + " " + err;
  };
  EXPECT_EQ(in_child(l.get(), "", "1", "fastrestart-engine", c_take), "0 3 ");
  EXPECT_EQ(in_child(l.get(), "1", "1", "fastrestart-engine", c_take), "1 -1 no listening socket was passed to this process");
  const std::string bad = in_child(l.get(), "", "x", nullptr, c_take);
  EXPECT_EQ(bad.rfind("-1 -1 LISTEN_FDS=x", 0), 0u) << bad;
}

}  // namespace
