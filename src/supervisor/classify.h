// Why an engine exited (ARCHITECTURE.md, "Restart policy and classification"). Pure: the wait status, what we asked for, the engine's last
// output lines and the cgroup's OOM-kill count decide.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fr::supervisor {

enum class ExitCause {
  kRequested,        // we stopped it (stop, restart, reload)
  kCrash,            // non-zero exit or a signal
  kUnexpectedExit0,  // exited 0 without being asked: a failure (vLLM's API server does this)
  kKernelOom,        // the kernel's OOM killer (cgroup memory events)
  kCudaOom,          // "CUDA out of memory" / torch.OutOfMemoryError in its output
  kMemoryUtilization,  // vLLM's "Free memory on device ... less than desired GPU memory utilization"
  kStartTimeout,     // never became ready in time (we killed it)
  kHung,             // stopped answering /health (we killed it)
  // From an engine's own words, through output rules (vLLM's: [[failure]] in data/vllm.toml):
  kKvCacheMemory,    // the weights fit, the KV cache does not ("No available memory for the cache blocks")
  kWeightCache,      // the weight cache refused it (vLLM ipc_cache with fallback false: key mismatch, no daemon)
  kBadFlags,         // the engine rejected its command line (argparse: unrecognized arguments, invalid choice)
};
inline constexpr int kExitCauseCount = 11;

const char* exit_cause_name(ExitCause c);
std::optional<ExitCause> exit_cause_from_name(std::string_view name);
std::string exit_cause_names();  // "requested, crash, ..." for messages
bool is_failure(ExitCause c);

// A line of an engine's output that names why it exited: every string of `contains` is in the line.
struct OutputRule {
  std::vector<std::string> contains;
  ExitCause cause;
};

struct ExitFacts {
  int wait_status = 0;            // from waitpid
  bool requested = false;         // we sent a stop for a restart/reload/stop
  bool killed_for_timeout = false;
  bool killed_for_hang = false;
  bool oom_kill_recorded = false; // the cgroup's oom_kill counter grew while the engine ran
  const std::deque<std::string>* last_lines = nullptr;  // the engine's recent output
  const std::vector<OutputRule>* rules = nullptr;        // engine-specific messages, checked before the built-in ones
};

struct Classification {
  ExitCause cause;
  std::string detail;  // "exit code 1", "signal 9 (Killed)", the matching output line, ...
};

Classification classify_exit(const ExitFacts& f);

// With engine.listen = "supervisor" (docs/listen-socket.md), an engine that ignores the socket handed down
// and binds the port itself fails with "address already in use" (strerror's words, Python's
// "[Errno 98] ...", uvicorn's lowercase ones, EADDRINUSE). The detail that says so, naming the option and
// quoting the engine's newest such line; nullopt when no line says it.
std::optional<std::string> listen_conflict_detail(const std::deque<std::string>* last_lines, int port);

// An engine process's exit (the live engine's or a standby's), classified alike: classify_exit over `f` with
// the engine's recent output and its kind's rules; with a listening socket handed down (`handed_port`, the
// port it serves), a failure gets listen_conflict_detail's words when its output has them.
Classification classify_engine_exit(ExitFacts f, const std::deque<std::string>& last_lines,
                                    const std::vector<OutputRule>& rules, std::optional<int> handed_port);

}  // namespace fr::supervisor
