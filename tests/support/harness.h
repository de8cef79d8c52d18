// Test support: temporary directories, synthetic checkpoints, and real fastrestart-weightd processes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>

#include <map>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/safetensors.h"

namespace fr::test {

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return m_path; }
  std::string operator/(const std::string& name) const { return m_path + "/" + name; }

 private:
  std::string m_path;
};

struct Checkpoint {
  std::vector<std::string> files;
  std::map<std::string, std::vector<std::byte>> tensors;  // name -> bytes as in the file
};
// `shards` files with `per_shard` F32 tensors of about `bytes` each, deterministic in `seed`.
Checkpoint make_checkpoint(const std::string& dir, int shards, int per_shard, size_t bytes, uint64_t seed);

// Checkpoint mutations a training job or an operator makes: a copy renamed over `path` (new inode, same
// bytes), and an in-place rewrite of the same size whose mtime is put back (only the ctime tells).
void replace_by_rename(const std::string& path);
void rewrite_in_place_keeping_mtime(const std::string& path);

struct RunResult {
  int exit_code = -1;  // or 128 + signal
  std::string output;  // stdout + stderr
};
// Runs a program to completion (argv[0] is the path), optionally as another uid/gid.
RunResult run(const std::vector<std::string>& argv, int as_uid = -1, int as_gid = -1);

// Starts argv (argv[0] a path) with stdout and stderr appended to `log` and `env` set on top of the test's
// environment; it gets SIGTERM when the test process dies (a test killed by ctest's timeout leaves nothing
// behind). Returns its pid; the caller waits for it.
pid_t spawn_logged(const std::vector<std::string>& argv, const std::string& log,
                   const std::map<std::string, std::string>& env = {});

// A running fastrestart-weightd. The destructor sends SIGTERM and reaps it.
class Daemon {
 public:
  // Starts `fastrestart-weightd --backend host --socket-dir <dir> <extra...>` and waits for its socket.
  // With `as_uid` the daemon runs under that uid/gid.
  Daemon(const std::string& socket_dir, const std::vector<std::string>& extra = {}, int as_uid = -1, int as_gid = -1);
  ~Daemon();
  pid_t pid() const { return m_pid; }
  std::string socket() const { return m_dir + "/weightd-host.sock"; }
  const std::string& dir() const { return m_dir; }
  // SIGTERM, wait; returns the exit code (or 128 + signal).
  int stop(int sig = 15);
  std::string log() const;

 private:
  std::string m_dir, m_log;
  pid_t m_pid = -1;
};

// A TCP port on 127.0.0.1 that was free a moment ago, for a server the test starts next. It comes from
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range): a port the server releases and binds
// again (an engine killed, then restored by CRIU) must not be taken meanwhile as the local port of some
// outgoing connection, which an ephemeral port can be on a busy machine. Another test may still pick the
// same port; tests live with that on a private machine.
uint16_t free_port();

// A TCP connection to 127.0.0.1:`port` whose reads give up after `recv_timeout_s` (SO_RCVTIMEO), or an
// invalid fd when connect(2) fails: the client side of tests that speak raw HTTP to a server.
UniqueFd connect_loopback(uint16_t port, int recv_timeout_s);

// How many descriptors process `pid` has open now (its /proc/<pid>/fd), or -1 when that cannot be read
// (the process is gone). Leak checks compare it before and after.
int open_fd_count(pid_t pid);
// How many of the process's descriptors are open on `path` (its /proc/PID/fd links). A test that sends a
// process descriptors of a file of its own counts exactly those, whatever else the process opens or closes
// meanwhile (an instrumented build still finishing its start, a probe's connection). `path` may go through
// symlinks; -1 when it cannot be resolved.
int fds_open_on(pid_t pid, const std::filesystem::path& path);

// A memory cgroup of the test's own, limited to `limit_bytes`: under /sys/fs/cgroup/memory (v1) or
// /sys/fs/cgroup (v2), whichever this machine lets us write. Without one, dir() is empty and skip_reason()
// says why (the test skips). Removed on destruction, retried while its last processes leave.
class MemoryCgroup {
 public:
  MemoryCgroup(const std::string& name, uint64_t limit_bytes);
  ~MemoryCgroup();
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;
  const std::string& dir() const { return m_dir; }
  const std::string& skip_reason() const { return m_skip; }

 private:
  std::string m_dir, m_skip;
};

// Paths of the binaries under test: the build tree's, or $FR_BIN_DIR/<name> when that is set.
std::string binary(const char* built, const char* name);
std::string weightctl();
std::string weightd();

}  // namespace fr::test
