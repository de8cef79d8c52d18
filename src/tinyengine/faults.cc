#include "tinyengine/faults.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace fr::te {

Status parse_standby_fault(const std::string& mode, FaultOptions* f) {
  static constexpr std::pair<const char*, StandbyFault> kModes[] = {
      {"never-park", StandbyFault::kNeverPark}, {"bind-early", StandbyFault::kBindEarly},
      {"exit-after-release", StandbyFault::kExitAfterRelease}};
  for (const auto& [name, v] : kModes)
    if (mode == name) {
      f->standby = v;
      return {};
    }
  const std::string die = "die-parked-after=";
  if (mode.rfind(die, 0) == 0) {
    char* end = nullptr;
    const std::string s = mode.substr(die.size());
    const double v = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0' && v >= 0) {
      f->standby = StandbyFault::kDieParkedAfter;
      f->standby_die_after_s = v;
      return {};
    }
  }
  return make_error(Errc::kInvalidArgument, "--fault-standby " + mode +
                                                ": expected never-park, bind-early, exit-after-release or die-parked-after=S");
}

void print_cuda_oom() {
  std::fputs(
      "Traceback (most recent call last):\n"
      "  File \"/usr/lib/python3/dist-packages/vllm/worker/model_runner.py\", line 1032, in load_model\n"
      "    self.model = get_model(vllm_config=self.vllm_config)\n"
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
      "79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in "
      "use. Of the allocated memory 76.50 GiB is allocated by PyTorch, and 1.12 GiB is reserved by PyTorch but "
      "unallocated. If reserved but unallocated memory is large try setting "
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
      "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n",
      stderr);
  std::fflush(stderr);
}

void print_vllm_free_memory(double utilization) {
  const double total = 79.19, free = 1.06;
  std::fprintf(stderr,
               "Traceback (most recent call last):\n"
               "  File \"/usr/lib/python3/dist-packages/vllm/v1/worker/gpu_worker.py\", line 171, in "
               "init_device\n"
               "    raise ValueError(\n"
               "ValueError: Free memory on device (%.2f/%.2f GiB) on startup is less than desired GPU memory "
               "utilization (%g, %.2f GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
               "processes.\n",
               free, total, utilization, utilization * total);
  std::fflush(stderr);
}

pid_t spawn_worker() {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  // The child: default signal handling, its own name, and nothing else to do but exist.
  ::prctl(PR_SET_NAME, "tinyengine-wkr", 0, 0, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
  for (;;) ::pause();
}

void start_memory_growth(double mib_per_s) {
  std::thread([mib_per_s] {
    constexpr size_t kChunk = 16u << 20;
    const auto interval = std::chrono::duration<double>(16.0 / (mib_per_s > 0 ? mib_per_s : 1024));
    std::vector<void*> held;  // never freed: the point is to grow
    for (;;) {
      void* p = std::malloc(kChunk);
      if (p) std::memset(p, 0x5a, kChunk);
      held.push_back(p);
      std::this_thread::sleep_for(interval);
    }
  }).detach();
}

}  // namespace fr::te
