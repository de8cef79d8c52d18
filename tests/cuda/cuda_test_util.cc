#include "cuda_test_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <random>

#include "cuda/device.h"
#include "cuda/driver.h"

extern char** environ;

namespace fr::cuda_test {

std::string why_no_gpu() {
  auto d = cuda::load_driver();
  if (!d.ok()) return d.error().message;
  int n = 0;
  if ((*d)->cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) return "the driver sees no device";
  return "";
}

std::vector<unsigned char> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<unsigned char>(rng());
  return v;
}

namespace {
std::string helper_path() {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "cuda_helper";
  std::string p(self, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/') + 1) + "fr_cuda_helper";
}
}  // namespace

pid_t start_helper(const std::vector<std::string>& args, const std::vector<int>& fds, int* out_fd) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  // dup2 clears close-on-exec on the target, which is how the descriptors reach the child.
  for (size_t i = 0; i < fds.size(); ++i) posix_spawn_file_actions_adddup2(&fa, fds[i], 10 + static_cast<int>(i));
  std::string path = helper_path();
  std::vector<char*> argv{path.data()};
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return -1;
  }
  *out_fd = pipefd[0];
  return pid;
}

ChildResult wait_child(pid_t pid, int out_fd) {
  ChildResult r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out_fd, buf, sizeof buf)) > 0) r.out.append(buf, static_cast<size_t>(n));
  ::close(out_fd);
  int st = 0;
  if (::waitpid(pid, &st, 0) == pid) r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

ChildResult run_helper(const std::vector<std::string>& args, const std::vector<int>& fds) {
  int out = -1;
  pid_t pid = start_helper(args, fds, &out);
  if (pid < 0) return ChildResult{-1, "cannot start fr_cuda_helper"};
  return wait_child(pid, out);
}

}  // namespace fr::cuda_test
