#include "supervisor/child.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/close_fds.h"
#include "common/io.h"

extern char** environ;

namespace fr::supervisor {
namespace {

bool is_supervisor_var(const std::string& kv) {
  static const char* const kDrop[] = {"NOTIFY_SOCKET=", "WATCHDOG_PID=", "WATCHDOG_USEC=", "LISTEN_FDS=",
                                      "LISTEN_PID=", "LISTEN_FDNAMES="};
  for (const char* d : kDrop)
    if (kv.rfind(d, 0) == 0) return true;
  return false;
}

// What a child that never reached exec reports through the CLOEXEC pipe: the step and its errno.
struct ChildFailure {
  int step;
  int err;
};
enum : int { kStepExec, kStepChdir, kStepSlave, kStepProc, kStepPassFd, kStepListenFd };

// systemd's first passed descriptor (sd_listen_fds(3): SD_LISTEN_FDS_START).
constexpr int kListenFdsStart = 3;

// Writes `v` in decimal at `out` (room for 11 characters and the NUL): async-signal-safe, no allocation.
void write_decimal(char* out, long v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && n < 20);
  while (n > 0) *out++ = digits[--n];
  *out = '\0';
}

}  // namespace

std::vector<std::string> child_environment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (is_supervisor_var(kv)) continue;
    auto eq = kv.find('=');
    if (eq != std::string::npos && extra.count(kv.substr(0, eq))) continue;
    env.push_back(std::move(kv));
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::string find_companion(const std::string& name, const std::string& build_dir) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
    const auto dir = std::filesystem::path(self).parent_path();
    for (const auto& cand : {dir / name, dir.parent_path() / build_dir / name})
      if (std::filesystem::exists(cand)) return cand.string();
  }
  return find_program(name);
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string cand = p.substr(start, end - start) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return name;
}

Result<Spawned> spawn_child(const SpawnSpec& spec) {
  if (spec.argv.empty()) return make_error(Errc::kInvalidArgument, "empty command");
  const std::string prog = find_program(spec.argv[0]);
  std::vector<std::string> env = child_environment(spec.env);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The listening socket's variables. LISTEN_PID is the child's own pid, known only after the fork: the
  // buffer is prepared here and the child writes the digits into its copy.
  const bool passes_listen = spec.listen_fd >= 0;
  if (passes_listen && spec.pass_fd == kListenFdsStart)
    return make_error(Errc::kInvalidArgument, "cannot run " + spec.argv[0] + ": descriptor 3 is both the listening socket and the passed descriptor");
  const bool passes_probe = passes_listen && spec.probe_fd >= 0;
  if (passes_probe && spec.pass_fd == kListenFdsStart + 1)
    return make_error(Errc::kInvalidArgument, "cannot run " + spec.argv[0] + ": descriptor 4 is both the private endpoint and the passed descriptor");
  if (passes_probe && spec.new_pid_namespace)
    return make_error(Errc::kInvalidArgument, "cannot run " + spec.argv[0] + ": a snapshottable engine gets no private endpoint");
  char listen_pid[32] = "LISTEN_PID=";
  constexpr size_t kListenPidPrefix = sizeof "LISTEN_PID=" - 1;
  const std::string listen_fds = passes_probe ? "LISTEN_FDS=2" : "LISTEN_FDS=1",
                    listen_names = "LISTEN_FDNAMES=" + spec.listen_fd_name + (passes_probe ? ":" + spec.probe_fd_name : "");
  for (const auto& e : env)
    if (!passes_listen || !is_supervisor_var(e)) envp.push_back(const_cast<char*>(e.c_str()));
  if (passes_listen) {
    envp.push_back(const_cast<char*>(listen_fds.c_str()));
    if (!spec.listen_fd_name.empty()) envp.push_back(const_cast<char*>(listen_names.c_str()));
    envp.push_back(listen_pid);
  }
  envp.push_back(nullptr);

  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return sys_error("pipe");
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return sys_error("pipe");
  UniqueFd err_r(err[0]), err_w(err[1]);

  const pid_t parent = ::getpid();
  // clone() without a stack behaves as fork(2), the child being PID 1 of the new PID namespace. The new
  // mount namespace is for a /proc of that PID namespace: with the host's /proc, getpid() (1) and
  // /proc/self disagree, and the CUDA driver's cuInit fails (CUDA_ERROR_OPERATING_SYSTEM, seen on the
  // H200; docs/snapshot.md). Every other mount stays the host's (a slave copy; CRIU binds them again).
  constexpr unsigned long kNamespaces = CLONE_NEWPID | CLONE_NEWNS;
  pid_t pid = spec.new_pid_namespace
                  ? static_cast<pid_t>(::syscall(SYS_clone, kNamespaces | SIGCHLD, nullptr, nullptr, nullptr, nullptr))
                  : ::fork();
  if (pid < 0) return sys_error(spec.new_pid_namespace ? "clone(CLONE_NEWPID|CLONE_NEWNS)" : "fork");
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    int err_fd = err_w.get();
    auto fail = [&](int step) {
      const ChildFailure f{step, errno};
      (void)!::write(err_fd, &f, sizeof f);
      _exit(127);
    };
    if (spec.new_pid_namespace) {
      ::setsid();
      // Slave, not private: mounts the host makes later still appear here; ours never leak out.
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) fail(kStepSlave);
      if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) fail(kStepProc);
    } else {
      ::setpgid(0, 0);
    }
    // Dies with fastrestartd (SIGKILL included): otherwise a restarted fastrestartd finds the old engine
    // on its port and the old daemon holding its lock (found by the soak, tests/soak). The signal follows
    // the forking thread: spawn_child runs on the loop thread, which lives as long as the process.
    // Not for a snapshottable engine (its own PID namespace): CRIU would restore the setting, and the
    // restored engine's parent, criu itself, exits at once. For those, the next fastrestartd kills the
    // recorded process group instead (kill_recorded_group).
    if (!spec.new_pid_namespace) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(127);  // the parent died before prctl
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    if (!spec.cgroup_procs.empty()) {
      int fd = ::open(spec.cgroup_procs.c_str(), O_WRONLY);
      if (fd >= 0) {
        (void)!::write(fd, "0\n", 2);  // "0" = the writing process
        ::close(fd);
      }
    }
    ::dup2(out_w.get(), 1);
    ::dup2(out_w.get(), 2);
    // dup2 onto itself keeps close-on-exec (fastrestartd started without a stdout): clear it either way.
    ::fcntl(1, F_SETFD, 0);
    ::fcntl(2, F_SETFD, 0);
    // Standard input is /dev/null; the descriptor that opened it goes at once (close-on-exec, and closed
    // here unless it is 0 itself: fastrestartd started without a standard input).
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull > 0) {
      ::dup2(devnull, 0);
      ::close(devnull);
    } else if (devnull == 0) {
      ::fcntl(0, F_SETFD, 0);
    }
    if (passes_listen) {
      // fd 3 becomes the listening socket: the exec-error pipe moves off it first (the other pipe ends are
      // copies already made, or close-on-exec).
      // With the private endpoint, fd 4 is taken too: the pipe and the endpoint's descriptor move above it.
      const int last = passes_probe ? kListenFdsStart + 1 : kListenFdsStart;
      if (err_fd <= last && err_fd >= kListenFdsStart) {
        const int moved = ::fcntl(err_fd, F_DUPFD_CLOEXEC, last + 1);
        if (moved < 0) _exit(127);
        err_fd = moved;
      }
      int probe_fd = spec.probe_fd;
      if (passes_probe && probe_fd == kListenFdsStart && (probe_fd = ::fcntl(probe_fd, F_DUPFD_CLOEXEC, last + 1)) < 0)
        fail(kStepListenFd);
      if (spec.listen_fd != kListenFdsStart) {
        if (::dup2(spec.listen_fd, kListenFdsStart) < 0) fail(kStepListenFd);  // the copy is not close-on-exec
      } else if (::fcntl(kListenFdsStart, F_SETFD, 0) != 0) {
        fail(kStepListenFd);
      }
      if (passes_probe) {
        if (probe_fd != kListenFdsStart + 1) {
          if (::dup2(probe_fd, kListenFdsStart + 1) < 0) fail(kStepListenFd);
        } else if (::fcntl(probe_fd, F_SETFD, 0) != 0) {
          fail(kStepListenFd);
        }
      }
      write_decimal(listen_pid + kListenPidPrefix, static_cast<long>(::getpid()));
    }
    // A child holds exactly what it is given: 0, 1, 2, the descriptor passed on purpose (spec.pass_fd), the
    // listening socket at fd 3 and the private endpoint at fd 4. Anything else open here came from fastrestartd's own parent without
    // close-on-exec (a shell's or a test runner's descriptors, a socket) or from a library of ours, and
    // would be held by every engine and daemon: a file never closed, a port never freed, and for a
    // snapshottable engine files CRIU's restore would depend on. The exec-error pipe (close-on-exec) stays
    // open until exec.
    const int keep[4] = {err_fd, spec.pass_fd, passes_listen ? kListenFdsStart : -1,
                         passes_probe ? kListenFdsStart + 1 : -1};
    close_fds_except(keep, 4);
    if (spec.pass_fd >= 0 && ::fcntl(spec.pass_fd, F_SETFD, 0) != 0) fail(kStepPassFd);
    if (!spec.working_dir.empty() && ::chdir(spec.working_dir.c_str()) != 0) fail(kStepChdir);
    ::execve(prog.c_str(), argv.data(), envp.data());
    fail(kStepExec);
  }
  if (!spec.new_pid_namespace) ::setpgid(pid, pid);  // also from the parent: no race with an early signal to the group
  out_w.reset();
  err_w.reset();
  ChildFailure failure{};
  ssize_t n;
  while ((n = ::read(err_r.get(), &failure, sizeof failure)) < 0 && errno == EINTR) {
  }
  if (n == sizeof failure) {
    ::waitpid(pid, nullptr, 0);
    std::string why = std::strerror(failure.err);
    if (failure.step == kStepChdir) why = "cannot enter " + spec.working_dir + ": " + why;
    if (failure.step == kStepSlave) why = "making the mounts of its mount namespace slaves: " + why;
    if (failure.step == kStepProc) why = "mounting /proc for its PID namespace: " + why;
    if (failure.step == kStepPassFd) why = "passing it descriptor " + std::to_string(spec.pass_fd) + ": " + why;
    if (failure.step == kStepListenFd) why = std::string("passing it the listening socket as descriptor 3") + (passes_probe ? " and its private endpoint as 4" : "") + ": " + why;
    return make_error(Errc::kInvalidArgument, "cannot run " + spec.argv[0] + ": " + why);
  }
  Spawned s;
  s.pid = pid;
  s.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  s.output = std::move(out_r);
  return s;
}

void signal_group(pid_t pgid, int pidfd, int sig) {
  if (pgid <= 0) return;
  ::kill(-pgid, sig);
  if (pidfd >= 0) ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0);
}

bool group_alive(pid_t pgid) { return pgid > 0 && (::kill(-pgid, 0) == 0 || errno == EPERM); }

// kill_recorded_group: engine_group_record.cc (it reads the record written there).

}  // namespace fr::supervisor
