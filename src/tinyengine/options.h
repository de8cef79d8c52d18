// Every option of `fastrestart-tinyengine serve`, with its default (docs/tinyengine.md, "Flags").
#pragma once

#include <string>
#include <vector>

#include "tinyengine/loader.h"

namespace fr::te {

// How a standby misbehaves (--fault-standby; acts only in a process started as a standby, docs/tinyengine.md).
enum class StandbyFault { kNone, kNeverPark, kBindEarly, kExitAfterRelease, kDieParkedAfter };

// Test-only fault injection, all off by default (docs/tinyengine.md, "Faults").
struct FaultOptions {
  double startup_delay_s = 0;       // sleep before loading (/health answers 503 meanwhile)
  int exit_code = 1;                // the code for exit_after_*
  bool exit_after_startup = false;  // exit(exit_code) as soon as ready
  int exit_after_requests = 0;      // exit(exit_code) after answering this many completions (0: off)
  int abort_after_requests = 0;     // abort() after answering this many completions (0: off)
  bool cuda_oom = false;            // print PyTorch's CUDA OOM error after loading, exit 1
  bool vllm_free_memory = false;    // print vLLM's free-memory startup error before loading, exit 1
  int hang_after_requests = -1;     // stop answering after this many completions (0: once ready; -1: off)
  bool grow_memory = false;         // once ready, allocate and touch host memory until killed
  double grow_memory_mib_per_s = 1024;
  double ignore_sigterm_s = 0;      // after the first SIGTERM, keep serving this long before shutting down
  bool spawn_worker = false;        // fork a worker that outlives a SIGKILLed parent
  double token_delay_s = 0;         // extra time per generated token (makes requests slow, for drain tests)
  StandbyFault standby = StandbyFault::kNone;
  double standby_die_after_s = 0;   // kDieParkedAfter: seconds after reaching the gate
  int tp_hang_rank = -1;            // tensor parallel: this rank (>= 1) stops answering at its second ping
  double tp_linger_s = 0;           // tensor parallel: ranks >= 1 outlive rank 0 by this long
  bool any() const;
};

struct ServeOptions {
  std::string model;              // checkpoint file or directory
  std::string served_model_name;  // empty: `model` as given
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (see port_file)
  std::string port_file;          // written with the bound port once listening
  std::string device = "cpu";     // cpu | cuda:N (the CUDA forward; weights in device memory)
  double gpu_memory_utilization = 0.9;  // accepted and reported (the CPU forward uses no GPU)
  int max_model_len = 0;          // 0: the checkpoint's max_seq
  int tensor_parallel_size = 1;   // ranks, one process each (docs/tinyengine.md, "Tensor parallel")
  int tp_rank = 0;                // set by rank 0 for the processes it starts (ranks 1..N-1)
  double tp_timeout_s = 10;       // a rank that does not answer within this long breaks the engine
  std::vector<std::string> argv;  // this process's command line (rank 0 starts the other ranks with it)
  std::string dtype = "auto";     // auto | float32 | bfloat16: must match the checkpoint
  double shutdown_grace_s = 30;   // SIGTERM: how long in-flight requests may take
  int threads = 8;                // HTTP worker threads
  bool snapshot_agent = true;
  bool cuda_graph_check = false;  // capture a CUDA graph over the weights; check it replays the same after a resume     // serve the snapshot exchange when $FASTRESTART_SNAPSHOT_SOCKET is set
  // A KV arena of this many bytes leased from the weight daemon before serving (0: none; docs/tinyengine.md,
  // "KV arena"). The CPU forward's prefix cache lives in a host arena (docs/kv-survival.md).
  uint64_t kv_arena_bytes = 0;
  double kv_arena_wait_s = 30;  // how long the lease may wait for the previous holder's exit
  bool kv_arena_touch = false;  // write every page of a leased host arena, as a KV cache in use would
  bool enable_prefix_caching = true;  // the CPU forward's paged KV cache with automatic prefix caching
  int block_size = 16;                // tokens per KV cache block
  int kv_cache_blocks = 1024;         // blocks in private memory (without a host KV arena)
  LoadOptions load;
  FaultOptions faults;
};

}  // namespace fr::te
