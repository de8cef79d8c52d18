#include "support/harness.h"

#include "common/fd.h"
#include "common/unix_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace fr::test {

MemoryCgroup::MemoryCgroup(const std::string& name, uint64_t limit_bytes) {
  std::string dir, limit;
  if (::access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0) {
    dir = "/sys/fs/cgroup/memory/" + name;
    limit = "memory.limit_in_bytes";
  } else if (::access("/sys/fs/cgroup/cgroup.subtree_control", W_OK) == 0) {
    dir = "/sys/fs/cgroup/" + name;
    limit = "memory.max";
  } else {
    m_skip = "no writable memory cgroup on this machine";
    return;
  }
  if (::mkdir(dir.c_str(), 0755) != 0) {
    m_skip = "cannot create a memory cgroup at " + dir;
    return;
  }
  m_dir = dir;
  std::ofstream(m_dir + "/" + limit) << limit_bytes;
}

MemoryCgroup::~MemoryCgroup() {
  if (m_dir.empty()) return;
  for (int i = 0; i < 100 && ::rmdir(m_dir.c_str()) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

std::string binary(const char* built, const char* name) {
  // FR_BIN_DIR: run the tests against installed or bundled binaries (the GPU machine's .bundle/bin).
  if (const char* dir = std::getenv("FR_BIN_DIR"); dir && *dir) return std::string(dir) + "/" + name;
  return built;
}
std::string weightctl() { return binary(FR_WEIGHTCTL_BIN, "fastrestart-weightctl"); }
std::string weightd() { return binary(FR_WEIGHTD_BIN, "fastrestart-weightd"); }

TempDir::TempDir() {
  char tmpl[] = "/tmp/fr-test-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  m_path = tmpl;
  ::chmod(m_path.c_str(), 0755);  // tests hand paths to other uids
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(m_path, ec);
}

Checkpoint make_checkpoint(const std::string& dir, int shards, int per_shard, size_t bytes, uint64_t seed) {
  Checkpoint ck;
  std::mt19937_64 rng(seed);
  for (int s = 0; s < shards; ++s) {
    std::vector<TensorData> td;
    std::vector<std::string> names;
    for (int t = 0; t < per_shard; ++t) {
      std::string name = "model.layers." + std::to_string(s * per_shard + t) + ".weight";
      int64_t cols = 64, rows = static_cast<int64_t>(bytes / 4 / 64) + t;  // uneven sizes: real padding
      std::vector<std::byte> b(static_cast<size_t>(rows * cols * 4));
      for (size_t i = 0; i + 8 <= b.size(); i += 8) {
        uint64_t v = rng();
        std::memcpy(&b[i], &v, 8);
      }
      ck.tensors[name] = std::move(b);
      names.push_back(name);
      td.push_back({name, DType::kF32, {rows, cols}, ck.tensors[name]});
    }
    std::string file = dir + "/model-" + std::to_string(s + 1) + ".safetensors";
    auto st = write_safetensors(file, td);
    if (!st.ok()) throw std::runtime_error(st.error().message);
    ck.files.push_back(file);
  }
  return ck;
}

void replace_by_rename(const std::string& path) {
  const std::string tmp = path + ".next";
  std::filesystem::copy_file(path, tmp, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(tmp, path);
}

void rewrite_in_place_keeping_mtime(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("stat " + path);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  if (bytes.empty()) throw std::runtime_error("empty " + path);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x5a);  // the last data byte: the header stays valid
  {
    std::ofstream out(path, std::ios::binary | std::ios::in | std::ios::out);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const timespec times[2] = {st.st_atim, st.st_mtim};
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) throw std::runtime_error("utimensat " + path);
}

namespace {

struct SpawnOptions {
  int uid = -1, gid = -1;
  bool append = false;  // to the log, else truncate it
  bool die_with_test = false;
  const std::map<std::string, std::string>* env = nullptr;
};

pid_t spawn(const std::vector<std::string>& argv, const std::string& log, const SpawnOptions& o) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (o.die_with_test) ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (o.append ? O_APPEND : O_TRUNC), 0644);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
  }
  if (o.env)
    for (const auto& [k, v] : *o.env) ::setenv(k.c_str(), v.c_str(), 1);
  const int uid = o.uid, gid = o.gid;
  if (gid >= 0 && (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(gid)) != 0)) _exit(126);
  if (uid >= 0 && ::setuid(static_cast<uid_t>(uid)) != 0) _exit(126);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  _exit(127);
}

int wait_code(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

pid_t spawn_logged(const std::vector<std::string>& argv, const std::string& log,
                   const std::map<std::string, std::string>& env) {
  return spawn(argv, log, {.append = true, .die_with_test = true, .env = &env});
}

RunResult run(const std::vector<std::string>& argv, int as_uid, int as_gid) {
  char tmpl[] = "/tmp/fr-run-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ::close(fd);
  ::chmod(tmpl, 0666);
  pid_t pid = spawn(argv, tmpl, {.uid = as_uid, .gid = as_gid});
  RunResult r;
  r.exit_code = wait_code(pid);
  r.output = slurp(tmpl);
  ::unlink(tmpl);
  return r;
}

Daemon::Daemon(const std::string& dir, const std::vector<std::string>& extra, int as_uid, int as_gid) : m_dir(dir) {
  char tmpl[] = "/tmp/fr-weightd-log-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ::close(fd);
  ::chmod(tmpl, 0666);
  m_log = tmpl;
  std::vector<std::string> argv{weightd(), "--backend", "host", "--socket-dir", dir, "--log-level", "debug"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  m_pid = spawn(argv, m_log, {.uid = as_uid, .gid = as_gid});
  for (int i = 0; i < 500; ++i) {
    // Ready once it accepts: a stale socket file from a killed daemon exists before the new one binds.
    if (connect_unix(socket(), deadline_in(0)).ok()) return;
    int status;
    if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
      m_pid = -1;
      throw std::runtime_error("fastrestart-weightd exited at start: " + log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("fastrestart-weightd did not create its socket: " + log());
}

Daemon::~Daemon() {
  if (m_pid > 0) stop();
  ::unlink(m_log.c_str());
}

int Daemon::stop(int sig) {
  if (m_pid <= 0) return -1;
  ::kill(m_pid, sig);
  int rc = wait_code(m_pid);
  m_pid = -1;
  return rc;
}

std::string Daemon::log() const { return slurp(m_log); }

namespace {

// The low end of the kernel's ephemeral port range, or Linux's default where it cannot be read.
int ephemeral_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (in >> low >> high && low > 1024) return low;
  return 32768;
}

bool bindable(UniqueFd& s, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

}  // namespace

uint16_t free_port() {
  const int low = 10000, high = ephemeral_low();  // [low, high)
  thread_local std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  if (high - low >= 1000) {
    std::uniform_int_distribution<int> pick(low, high - 1);
    for (int attempt = 0; attempt < 200; ++attempt) {
      UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!s) throw std::runtime_error(std::string("free_port: socket: ") + std::strerror(errno));
      const auto port = static_cast<uint16_t>(pick(rng));
      if (bindable(s, port)) return port;
    }
  }
  // A machine whose ephemeral range starts low: let the kernel pick.
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) throw std::runtime_error(std::string("free_port: socket: ") + std::strerror(errno));
  sockaddr_in a{};
  socklen_t n = sizeof a;
  if (!bindable(s, 0) || ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &n) != 0)
    throw std::runtime_error(std::string("free_port: bind/getsockname: ") + std::strerror(errno));
  return ntohs(a.sin_port);
}

UniqueFd connect_loopback(uint16_t port, int recv_timeout_s) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fd;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return UniqueFd();
  timeval tv{recv_timeout_s, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

int open_fd_count(pid_t pid) {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec);
  if (ec) return -1;
  int n = 0;
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) ++n;
  return n;
}

int fds_open_on(pid_t pid, const std::filesystem::path& path) {
  std::error_code ec;
  // /proc's links name the file by its resolved path: a path through a symlink would never match.
  const std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  if (ec) return -1;
  int n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code link_ec;
    if (std::filesystem::read_symlink(it->path(), link_ec) == target) ++n;
  }
  return n;
}

}  // namespace fr::test
