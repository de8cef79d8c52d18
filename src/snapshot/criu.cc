#include "snapshot/criu.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <fstream>

#include "common/close_fds.h"
#include "common/fd.h"

namespace fr::snapshot {

Result<int> run_program(const std::vector<std::string>& argv, const std::string& log_path,
                        const std::vector<int>& keep_fds) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return sys_error("open " + log_path);
  pid_t pid = ::fork();
  if (pid < 0) return sys_error("fork");
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull > 0) ::dup2(devnull, 0);
    ::dup2(log.get(), 1);
    ::dup2(log.get(), 2);
    // CRIU gets 0, 1, 2 and the descriptors it is told about (--inherit-fd), nothing the helper inherited:
    // a restored tree must not depend on (or keep open) files of whoever started fastrestartd.
    close_fds_except(keep_fds.data(), keep_fds.size());
    for (int fd : keep_fds) ::fcntl(fd, F_SETFD, 0);  // keep across exec
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed\n", args[0]);
    _exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return sys_error("waitpid");
  return st;
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exit code " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "signal " + std::to_string(WTERMSIG(st));
  return "status " + std::to_string(st);
}

std::string log_errors(const std::string& path, size_t n) {
  std::ifstream f(path);
  std::deque<std::string> last;
  for (std::string line; std::getline(f, line);) {
    if (line.find("Error") == std::string::npos) continue;
    last.push_back(line);
    if (last.size() > n) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += (out.empty() ? "" : " | ") + l;
  return out;
}

Result<DumpLock> DumpLock::acquire(const std::string& path) {
  std::string p = path;
  UniqueFd fd(::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd && errno == ENOENT) {  // no /run/lock here
    p = "/tmp/fastrestart-criu-dump.lock";
    fd.reset(::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  }
  if (!fd) return sys_error("open " + p);
  while (::flock(fd.get(), LOCK_EX) != 0)
    if (errno != EINTR) return sys_error("flock " + p);
  return DumpLock(std::move(fd));
}

Result<CriuInfo> probe_criu(const std::string& path) {
  const std::string hint = " (build it with scripts/build-criu.sh and set snapshot.criu; docs/snapshot.md)";
  if (path.find('/') == std::string::npos || ::access(path.c_str(), X_OK) != 0)
    return make_error(Errc::kNotFound, "criu not found at " + path + hint);
  char tmpl[] = "/tmp/fastrestart-criu-version-XXXXXX";
  UniqueFd tmp(::mkstemp(tmpl));
  if (!tmp) return sys_error("mkstemp");
  ::unlink(tmpl);
  // The version goes to a private file, then is read back through the still-open descriptor.
  const std::string fd_path = "/proc/self/fd/" + std::to_string(tmp.get());
  FR_ASSIGN(int st, run_program({path, "--version"}, fd_path));
  std::string out(4096, '\0');
  ssize_t n = ::pread(tmp.get(), out.data(), out.size(), 0);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return make_error(Errc::kUnsupported, path + " --version failed (" + describe_status(st) + "): " + out.substr(0, 200));
  auto at = out.find("Version: ");
  if (at == std::string::npos) return make_error(Errc::kUnsupported, path + " --version printed no \"Version: \" line");
  std::string version = out.substr(at + 9);
  version = version.substr(0, version.find_first_of(" \n"));
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) < 1)
    return make_error(Errc::kUnsupported, path + ": cannot read the version \"" + version + "\"");
  if (major < kCriuMinMajor || (major == kCriuMinMajor && minor < kCriuMinMinor))
    return make_error(Errc::kUnsupported, "criu at " + path + " is " + version + ", snapshots need >= " +
                                              std::to_string(kCriuMinMajor) + "." + std::to_string(kCriuMinMinor) + hint);
  return CriuInfo{path, version};
}

}  // namespace fr::snapshot
