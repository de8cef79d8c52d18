// How the engine gets its weights: from disk, or through fastrestart (attach, or load from disk and
// publish on a miss). Reports the path taken, the bytes and each phase's time (docs/tinyengine.md,
// "Loading" and "/stats").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fastrestart/result.h"
#include "tinyengine/checkpoint.h"
#include "tinyengine/cuda_model.h"
#include "tinyengine/model.h"

namespace fr::te {

enum class LoadFormat { kDisk, kFastrestart };

struct LoadOptions {
  LoadFormat format = LoadFormat::kDisk;
  // fastrestart only; the same meaning as fastrestart::Options (engine_loader.h).
  bool zero_copy = true;
  bool fallback = true;
  bool verify = false;
  bool publish = true;  // publish after a disk load on a miss
  std::string socket_dir;
  std::string device = "host";  // engine_loader's device: "host" (CPU forward) or "cuda:N" (CUDA forward)
  double connect_timeout_s = 5.0;
  double state_timeout_s = 300.0;
  TpPlan tp;  // the rank this process is (docs/tinyengine.md, "Tensor parallel")
};

// Tensor parallel: what all ranks decided after each tried to attach its shard. One rank's miss makes
// every rank load from disk, so the engine never runs some ranks on attached and others on disk weights.
struct TpAgreement {
  bool all_hit = true;
  std::string reason;  // the first missing rank's: "rank 1 missed: ..."
};
// Called by load_model between the attach and the disk load, with this rank's outcome.
using TpAgree = std::function<Result<TpAgreement>(bool hit, const std::string& reason)>;

struct LoadReport {
  std::string format;  // "disk" | "fastrestart"
  std::string path;    // "disk" | "attach" | "fallback"
  std::string reason;  // fallback: why the attach missed
  std::vector<std::string> differs;
  std::string mode;    // attach: "zero_copy" | "copy"
  uint64_t weight_bytes = 0;     // bytes of tensors the model reads
  uint64_t disk_bytes_read = 0;  // headers + data read from the checkpoint files
  bool published = false;
  std::string publish_error;
  // zero_copy, after a publish: the engine re-bound its model to the daemon's pool and freed its own copy,
  // so the weights are held once, not twice, for the rest of its life (docs/tinyengine.md, "Loading").
  bool adopted = false;
  std::string adopt_error;
  std::string fingerprint, digest;
  std::vector<std::pair<std::string, double>> phases;  // in order: name, seconds
  nlohmann::json attach_timings;                       // engine_loader's Timings, on attach
  nlohmann::json to_json() const;
};

struct LoadedModel {
  CheckpointInfo info;
  TensorSet set;  // owns (or keeps mapped) the memory the model points into
  Model model;    // the CPU forward (device "host")
  std::shared_ptr<CudaModel> cuda;  // the CUDA forward (device "cuda:N")
  LoadReport report;
  // The CPU forward's paged prefix cache (docs/kv-survival.md); null with --no-enable-prefix-caching or on
  // the CUDA forward, which keeps its own per-request KV rows.
  std::shared_ptr<KvCache> kv_cache;

  Generation generate(const std::vector<int>& prompt, int max_tokens, int top_k) const {
    return cuda ? cuda->generate(prompt, max_tokens, top_k) : model.generate(prompt, max_tokens, top_k, kv_cache.get());
  }
  std::string device() const { return cuda ? cuda->device_name() : "cpu"; }
};

// `agree` (tensor parallel, size > 1): see TpAgree; `reduce`: rank 0's Model::bind argument.
Result<LoadedModel> load_model(const std::string& path, const LoadOptions& options, const TpAgree& agree = {},
                               TpReduce reduce = {});
// Rank tp.rank's shard of a whole checkpoint's tensors (tensor_specs(config, tp)), in memory it owns.
Result<TensorSet> shard_tensors(const ModelConfig& config, const TensorSet& full, const TpPlan& tp);

// The fastrestart side (loader_fastrestart.cc; loader_fastrestart_none.cc when engine_loader is absent).
// The key's file identities, taken by the attach before the files are read; a publish goes under it, so
// the daemon can refuse one whose files changed in between (docs/protocol.md, "publish").
struct PublishKey;
struct AttachOutcome {
  bool hit = false;
  std::string reason;
  std::vector<std::string> differs;
  TensorSet set;
  std::string mode, fingerprint, digest;
  bool on_cuda = false;
  nlohmann::json timings;
  std::shared_ptr<const PublishKey> key;  // null when the files could not be identified
};
Result<AttachOutcome> fastrestart_attach(const CheckpointInfo& info, const LoadOptions& options);
struct PublishOutcome {
  std::string fingerprint, digest;
  uint64_t bytes = 0;
};
Result<PublishOutcome> fastrestart_publish(const PublishKey* key, const CheckpointInfo& info, const TensorSet& set,
                                           const LoadOptions& options);
// Attaches under the key a publish just went under (zero_copy): the daemon's copy of what this engine
// read, to adopt in place of its own.
Result<AttachOutcome> fastrestart_attach_published(const PublishKey* key, const LoadOptions& options);
// The snapshot exchange (docs/snapshot.md, "The prepare/resume exchange"): serves prepare/resume on
// $FASTRESTART_SNAPSHOT_SOCKET, releasing and re-attaching `m`'s weights when they were attached in
// zero_copy (weights loaded from disk or copied are private memory: nothing to release). nullptr when the
// variable is unset. The hooks run on the exchange's thread (fastrestart::SnapshotHooks).
struct KvArenaLease;
// With `kv_arena` (a lease_kv_arena() result, or nullptr) the exchange unmaps that arena too and leases it
// again at the same address before `resume`, logging a new fastrestart-arena: line for it.
Result<std::shared_ptr<void>> start_snapshot_agent(const LoadedModel& m, const KvArenaLease* kv_arena,
                                                   std::function<Status()> quiesce, std::function<Status()> resume);
// The standby gate (docs/standby.md, "The gate protocol") through engine_loader: true when released, false
// when it passed (not a standby, another level; also in a build without engine_loader, which cannot park).
// Exits the process when told to exit or when fastrestartd is gone.
Result<bool> standby_gate(const std::string& level);
bool is_standby();
// The listening sockets a supervisor handed down (LISTEN_FDS; docs/listen-socket.md) through engine_loader:
// the public one and the private endpoint, each -1 when not passed (both in a build without engine_loader).
struct InheritedSockets {
  int serve = -1;
  int probe = -1;
};
Result<InheritedSockets> inherited_listen_sockets();
// The socket of the weight daemon `options.device` attaches through.
Result<std::string> daemon_socket_of(const LoadOptions& options);

// --kv-arena-bytes (docs/tinyengine.md, "KV arena"): a KV arena of `bytes` leased from the weight daemon of
// `options.device` (engine_loader's lease_arena, waiting at most `wait_s` for its previous holder's exit).
// `arena` keeps it mapped; the lease itself is this process's until it exits. What the lease reply said
// beyond what the KV cache needs (the wait, the swap) stays with the Arena: kv_arena_line prints it.
struct KvArenaLease {
  std::shared_ptr<void> arena;  // the fastrestart::Arena
  void* base = nullptr;         // the range's address
  bool host = false;            // host memory (the host backend): base is readable here
  uint64_t bytes = 0;  // as leased: the mapped range's size (the request rounded up), the daemon's `bytes`
  uint64_t generation = 0;
};
Result<KvArenaLease> lease_kv_arena(uint64_t bytes, double wait_s, const LoadOptions& options);
// The generation of the arena's latest lease (after a snapshot resume leased it again), or `lease.generation`.
uint64_t kv_arena_generation(const KvArenaLease& lease);
// The engine's arena line (docs/supervisor.md, "The engine's arena line"), written by engine_loader
// (fastrestart::arena_line, arena_fallback_line): the leased line of `lease`'s last lease, and the fallback
// line for `reason`. Both empty in a build without engine_loader (no fastrestartd reads it then).
std::string kv_arena_line(const KvArenaLease& lease);
std::string kv_arena_fallback_line(const std::string& reason);
// The config half of the key: arch, dtype, engine version, tp size/rank.
std::map<std::string, std::string> key_config(const CheckpointInfo& info, const TpPlan& tp = {});

}  // namespace fr::te
