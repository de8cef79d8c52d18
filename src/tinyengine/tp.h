// Tensor parallel on the host: one process per rank (docs/tinyengine.md, "Tensor parallel").
//
// Rank 0 is the process fastrestartd started; it serves HTTP and starts ranks 1..N-1 as child processes
// of the same binary (same process group), each with one end of a SOCK_SEQPACKET socketpair on fd 3. Over
// it the ranks agree on the load (every shard attached, or every rank from disk) and rank 0 asks each
// other rank for its partial output of every extra block: the all-reduce of a real tensor-parallel
// engine, done by rank 0 in rank order so the sum is deterministic.
//
// Failure rules, as a multi-process engine has them: a rank that exits makes rank 0 exit at once (exit 1,
// the rank and its status in the log), so its supervisor restarts the engine as a whole; rank 0's death
// kills the others (PR_SET_PDEATHSIG, and EOF on their socket); a rank that stops answering makes every
// request and /health fail after --tp-timeout, so the engine is seen as hung.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "tinyengine/loader.h"
#include "tinyengine/options.h"

namespace fr::te {

// The engine_loader device rank `rank` attaches through: entry `rank` of $FASTRESTART_DEVICES when that
// names host devices ("host:0,host:1", exported by fastrestartd for a host-backend `gpus` list), else
// `fallback` (the --device's own).
Result<std::string> rank_device(int rank, int size, const std::string& fallback);
// Entry `rank` of $FASTRESTART_GPU_MEMORY_UTILIZATION (the rank's own budget), else `fallback`.
double rank_memory_utilization(int rank, double fallback);

// One end of a rank's socketpair: whole messages (op, an argument, a payload).
class TpChannel {
 public:
  enum Op : uint32_t { kLoaded = 1, kDecision, kReady, kFailed, kReduce, kPartial, kPing, kPong };
  struct Message {
    Op op{};
    uint32_t arg = 0;
    std::string payload;
  };
  TpChannel() = default;
  explicit TpChannel(UniqueFd fd) : m_fd(std::move(fd)) {}
  int fd() const { return m_fd.get(); }
  Status send(Op op, uint32_t arg, const void* data, size_t n);
  Status send_json(Op op, const nlohmann::json& j) {
    const std::string s = j.dump();
    return send(op, 0, s.data(), s.size());
  }
  // timeout_s < 0: wait for ever. Errc::kTimeout, or Errc::kIo on EOF (the peer is gone).
  Result<Message> recv(double timeout_s);

 private:
  UniqueFd m_fd;
};

// Rank 0's view of the other ranks.
class TpGroup {
 public:
  // Starts ranks 1..size-1 as `argv` (rank 0's own command line) plus --tp-rank R, and a thread per rank
  // that ends this process when the rank exits (unless shutting_down()). `die_with_rank0` false only for
  // the linger fault (a rank that outlives rank 0).
  static Result<std::unique_ptr<TpGroup>> start(const std::vector<std::string>& argv, int size, double timeout_s,
                                                bool die_with_rank0 = true);
  ~TpGroup();

  // Rank 0's part of the load agreement (TpAgree): gathers every rank's attach outcome, tells them all.
  Result<TpAgreement> agree(bool hit, const std::string& reason, double timeout_s);
  // After the load: every rank's report (path, bytes, device, pid), for /stats.
  Status collect_ready(double timeout_s);
  // Adds every other rank's partial output of extra block `block` for `a` to `out` (TpReduce).
  Status reduce(int block, const float* a, float* out, int d_model);
  // Every rank answers within the timeout, and none has failed before: "" or why not (for /health).
  std::string check();
  nlohmann::json ranks_json() const;
  void set_rank0(nlohmann::json j) { m_rank0 = std::move(j); }
  void shutting_down() { *m_stopping = true; }

 private:
  struct Rank {
    int rank = 0;
    pid_t pid = -1;
    TpChannel channel;
    nlohmann::json report;
  };
  Error broken(std::string why);

  double m_timeout_s = 10;
  std::vector<Rank> m_ranks;  // ranks 1..size-1
  nlohmann::json m_rank0 = nlohmann::json::object();
  std::timed_mutex m_mutex;   // one exchange at a time on the channels
  std::string m_broken;       // set once: the channels are out of step after a rank failed to answer
  // Shared with the threads that wait for the ranks, which may outlive this object at exit.
  std::shared_ptr<std::atomic<bool>> m_stopping = std::make_shared<std::atomic<bool>>(false);
};

// The whole life of ranks 1..N-1 (`serve --tp-rank R`, started by rank 0): load the shard through the
// agreement, report, answer reduce and ping until rank 0 closes the socket. Returns the exit code.
int run_tp_worker(const ServeOptions& o);

}  // namespace fr::te
