#include "supervisor/classify.h"

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace fr::supervisor {
namespace {
constexpr const char* kNames[kExitCauseCount] = {"requested",     "crash",           "unexpected_exit_0", "kernel_oom",
                                                 "cuda_oom",      "memory_utilization", "start_timeout",  "hung",
                                                 "kv_cache_memory", "weight_cache",  "bad_flags"};
}  // namespace

const char* exit_cause_name(ExitCause c) {
  return kNames[static_cast<int>(c)];
}

std::optional<ExitCause> exit_cause_from_name(std::string_view name) {
  for (int i = 0; i < kExitCauseCount; ++i)
    if (name == kNames[i]) return static_cast<ExitCause>(i);
  return std::nullopt;
}

std::string exit_cause_names() {
  std::string out;
  for (const char* n : kNames) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

bool is_failure(ExitCause c) { return c != ExitCause::kRequested; }

namespace {

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// The engine's own words, newest first: they name a CUDA OOM more precisely than the exit code.
const std::string* find_line(const std::deque<std::string>* lines, bool (*match)(const std::string&)) {
  if (!lines) return nullptr;
  for (auto it = lines->rbegin(); it != lines->rend(); ++it)
    if (match(*it)) return &*it;
  return nullptr;
}

bool is_cuda_oom(const std::string& l) {
  return contains(l, "CUDA out of memory") || contains(l, "torch.OutOfMemoryError") ||
         contains(l, "torch.cuda.OutOfMemoryError") || contains(l, "CUDA_ERROR_OUT_OF_MEMORY") ||
         contains(l, "cudaErrorMemoryAllocation");
}

bool is_mem_util(const std::string& l) {
  return contains(l, "Free memory on device") && contains(l, "less than desired GPU memory utilization");
}

}  // namespace

Classification classify_exit(const ExitFacts& f) {
  std::string status;
  if (WIFEXITED(f.wait_status)) {
    status = "exit code " + std::to_string(WEXITSTATUS(f.wait_status));
  } else if (WIFSIGNALED(f.wait_status)) {
    int sig = WTERMSIG(f.wait_status);
    status = "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  } else {
    status = "status " + std::to_string(f.wait_status);
  }
  if (f.killed_for_timeout) return {ExitCause::kStartTimeout, "not ready in time; " + status};
  // A hang is answered with SIGKILL. An engine that exited by itself before that kill landed (one shutting
  // down stops answering /health first) is classified by its own exit below, not as hung (found by the
  // soak under ASan, whose leak check at exit makes a SIGTERMed engine's exit take longer than two checks).
  const bool exited_by_itself = WIFEXITED(f.wait_status);
  if (f.killed_for_hang && !exited_by_itself) return {ExitCause::kHung, "stopped answering /health; " + status};
  if (f.requested) return {ExitCause::kRequested, status};
  if (f.oom_kill_recorded && WIFSIGNALED(f.wait_status) && WTERMSIG(f.wait_status) == SIGKILL)
    return {ExitCause::kKernelOom, "killed by the kernel OOM killer; " + status};
  if (f.rules && f.last_lines) {
    for (auto it = f.last_lines->rbegin(); it != f.last_lines->rend(); ++it)
      for (const auto& r : *f.rules)
        if (std::all_of(r.contains.begin(), r.contains.end(), [&](const std::string& c) { return contains(*it, c.c_str()); }))
          return {r.cause, *it};
  }
  if (const auto* l = find_line(f.last_lines, is_mem_util)) return {ExitCause::kMemoryUtilization, *l};
  if (const auto* l = find_line(f.last_lines, is_cuda_oom)) return {ExitCause::kCudaOom, *l};
  if (f.oom_kill_recorded) return {ExitCause::kKernelOom, "the cgroup recorded an OOM kill; " + status};
  if (WIFEXITED(f.wait_status) && WEXITSTATUS(f.wait_status) == 0)
    return {ExitCause::kUnexpectedExit0, "exited 0 without being asked to"};
  return {ExitCause::kCrash, status};
}

namespace {

bool is_address_in_use(const std::string& l) {
  std::string lower(l);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return contains(lower, "address already in use") || contains(l, "EADDRINUSE");
}

}  // namespace

Classification classify_engine_exit(ExitFacts f, const std::deque<std::string>& last_lines,
                                    const std::vector<OutputRule>& rules, std::optional<int> handed_port) {
  f.last_lines = &last_lines;
  f.rules = rules.empty() ? nullptr : &rules;
  Classification c = classify_exit(f);
  if (handed_port && is_failure(c.cause))
    if (auto conflict = listen_conflict_detail(&last_lines, *handed_port)) c.detail = *conflict;
  return c;
}

std::optional<std::string> listen_conflict_detail(const std::deque<std::string>* last_lines, int port) {
  const auto* l = find_line(last_lines, is_address_in_use);
  if (!l) return std::nullopt;
  return "engine.listen = \"supervisor\" is set but the engine binds port " + std::to_string(port) +
         " itself (\"" + l->substr(0, 300) + "\"): fastrestartd already listens there; the engine must accept on "
         "the socket it is passed as fd 3 (LISTEN_FDS, docs/listen-socket.md), or set engine.listen = \"engine\"";
}

}  // namespace fr::supervisor
