// Shared pieces of the GPU tests: skipping without a GPU, deterministic data, and running the helper
// binary (cuda_helper.cc) as a fresh exec'ed process. CUDA state does not survive fork(), so every
// "other process" in these tests is a new exec of the helper, with descriptors passed on fixed numbers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fr::cuda_test {

// Empty when a driver and at least one GPU are present, else why not.
std::string why_no_gpu();

#define FR_SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                      \
    std::string why = ::fr::cuda_test::why_no_gpu();                                        \
    if (!why.empty()) GTEST_SKIP() << "no CUDA driver/GPU on this machine: " << why;        \
  } while (0)

// `n` bytes from a seeded generator.
std::vector<unsigned char> random_bytes(size_t n, uint64_t seed);

struct ChildResult {
  int exit_code = -1;  // or 128 + signal
  std::string out;     // stdout and stderr together
};

// Runs cuda_helper (found beside the test binary) with `args`; `fds[i]` becomes descriptor 10 + i in the
// child. Waits for it unless `pid_out` is set, in which case it returns at once with the pid and the
// caller later calls wait_child(pid).
ChildResult run_helper(const std::vector<std::string>& args, const std::vector<int>& fds = {});
pid_t start_helper(const std::vector<std::string>& args, const std::vector<int>& fds, int* out_fd);
ChildResult wait_child(pid_t pid, int out_fd);

}  // namespace fr::cuda_test
