#include <signal.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>

#include "snapshot/criu.h"
#include "snapshot/exchange.h"
#include "snapshot/listen_image.h"
#include "snapshot/ops.h"
#include "snapshot/oracle.h"
#include "snapshot/store.h"

namespace fr::snapshot {
namespace {

using nlohmann::json;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Puts the GPU state back and unlocks it after a failed dump, so the engine keeps serving.
void resume_gpu(GpuCheckpointer& gpu, const std::vector<pid_t>& pids, bool checkpointed) {
  for (pid_t p : pids) {
    if (checkpointed) (void)gpu.restore(p);
    (void)gpu.unlock(p);
  }
}

// Whether a process of the tree has `name` ("socket:[inode]") open.
bool tree_holds(pid_t root, const std::string& name) {
  for (pid_t p : process_tree(root)) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(p) + "/fd", ec)) {
      std::error_code link_ec;
      if (std::filesystem::read_symlink(e.path(), link_ec).string() == name) return true;
    }
  }
  return false;
}

std::string env_of(const EngineSpec& s, const char* name) {
  auto it = s.env.find(name);
  return it == s.env.end() ? "" : it->second;
}

}  // namespace

Result<Manifest> create_snapshot(const CreateRequest& r, GpuCheckpointer& gpu) {
  const double t0 = now_s();
  Store store(r.dir);
  FR_TRY(store.ensure());
  FR_ASSIGN(CriuInfo criu, probe_criu(r.criu));
  Manifest m;
  m.id = r.id.empty() ? store.new_id() : r.id;
  if (!valid_id(m.id)) return make_error(Errc::kInvalidArgument, "invalid snapshot id \"" + m.id + "\"");
  m.fastrestart_version = r.version;
  m.stdout_pipe = r.stdout_pipe;
  std::optional<uint64_t> listen_inode;
  if (!r.listen_socket.empty()) {
    listen_inode = parse_socket_name(r.listen_socket);
    if (!listen_inode)
      return make_error(Errc::kInvalidArgument, "invalid listening socket \"" + r.listen_socket + "\" (expected socket:[<inode>])");
  }
  m.host = r.spec.host;
  m.port = r.spec.port;
  FR_ASSIGN(m.identity, collect_identity(r.spec, criu.version));

  double t = now_s();
  FR_ASSIGN(m.oracle, request_oracle(r.spec.host, r.spec.port, r.spec.prompt, r.spec.model, r.spec.oracle_tokens, 60));
  m.timings["oracle_s"] = now_s() - t;

  // Checked before anything stops: the images of an engine that closed fastrestartd's socket could not be
  // given it back, and such an engine cannot serve on the port anyway.
  if (listen_inode && !tree_holds(r.pid, r.listen_socket))
    return make_error(Errc::kInvalidArgument, "the engine does not hold fastrestartd's listening socket " + r.listen_socket +
                                                  " (engine.listen = \"supervisor\"): it must accept on the descriptor "
                                                  "it was handed (LISTEN_FDS; docs/listen-socket.md)");

  // A process holds CUDA state when it has the NVIDIA devices open or mapped, or when the driver knows it
  // (a sandbox such as gVisor may not show device mappings in /proc). Without a driver, neither.
  std::vector<pid_t> gpu_pids;
  for (pid_t p : process_tree(r.pid)) {
    auto st = holds_gpu(p) ? Result<std::string>(std::string("device open")) : gpu.state(p);
    if (st.ok()) gpu_pids.push_back(p);
  }
  m.identity.cuda = !gpu_pids.empty();
  if (m.identity.cuda) {
    FR_ASSIGN(m.identity.gpu, gpu.identity());
  }

  // zero_copy: the engine maps the daemon's pools, which the driver cannot checkpoint (and a checkpoint
  // taken anyway never restores: the process stays checkpointed). It must release them first, through
  // the exchange fastrestartd gave it; one that does not answer is refused here, before anything stops.
  const std::string exchange_socket = env_of(r.spec, kExchangeEnv);
  const bool zero_copy = env_of(r.spec, kWeightsModeEnv) == "zero_copy";
  if (zero_copy && exchange_socket.empty())
    return make_error(Errc::kUnsupported, "weights.mode is zero_copy and the engine has no snapshot exchange socket ($" +
                                              std::string(kExchangeEnv) + "): it cannot release the daemon's pools before a dump");

  FR_ASSIGN(std::string tmp, store.begin(m.id));
  bool prepared = false;
  auto fail = [&](Error e, bool checkpointed) -> Error {
    resume_gpu(gpu, gpu_pids, checkpointed);
    if (prepared) {
      // The engine serves again only once it has re-attached; one that cannot is killed, so that
      // fastrestartd restarts it instead of keeping an engine without weights.
      if (auto x = exchange(exchange_socket, "resume", 120); !x.ok()) {
        ::kill(r.pid, SIGKILL);
        e.message += "; the engine could not resume (" + x.error().message + ") and was killed";
      }
    }
    store.abandon(m.id);
    return e;
  };
  // Taken before the engine is frozen, so waiting for another dump on this host never stalls it.
  auto dump_lock = DumpLock::acquire();
  if (!dump_lock.ok()) return fail(dump_lock.error(), false);
  if (!exchange_socket.empty()) {
    t = now_s();
    auto x = exchange(exchange_socket, "prepare", 120);
    if (!x.ok()) {
      Error e = x.error();
      if (zero_copy) e.message = "cannot snapshot an engine in weights.mode zero_copy: " + e.message;
      return fail(e, false);
    }
    prepared = true;
    m.timings["release_s"] = now_s() - t;
    json entries = json::array();
    for (const auto& w : (*x)["weights"]) entries.push_back(w);
    const json arenas = (*x)["arenas"];
    // Checked, not trusted: a pool or arena still mapped would be checkpointed and never restored.
    for (pid_t p : process_tree(r.pid))
      if (auto s = verify_released(p, p == r.pid ? entries : json::array(), p == r.pid ? arenas : json::array()); !s.ok())
        return fail(make_error(s.error().code, "the engine answered prepare but " + s.error().message), false);
    m.weights = {{"excluded", !entries.empty()}, {"exchange", exchange_socket}, {"entries", entries}, {"arenas", arenas}};
  }
  t = now_s();
  for (pid_t p : gpu_pids)
    if (auto s = gpu.lock(p, 30'000); !s.ok()) return fail(s.error(), false);
  m.timings["cuda_lock_s"] = now_s() - t;
  t = now_s();
  for (pid_t p : gpu_pids)
    if (auto s = gpu.checkpoint(p); !s.ok()) return fail(s.error(), true);
  m.timings["cuda_checkpoint_s"] = now_s() - t;

  // --tcp-established: a client may hold a connection at this moment; the restore closes them
  // (--tcp-close). --external mnt[]: the engine's mount namespace holds the host's mounts plus its own
  // /proc (supervisor/child.h); CRIU records the host's as external, so no tmpfs content (/dev/shm, /run)
  // goes into the images and the restore binds the host's mounts again. The tree is killed once its
  // images are written. --skip-in-flight with fastrestartd's listening socket: connections waiting in its
  // accept queue (clients keep connecting during the dump) would fail the dump; they stay queued in
  // fastrestartd's socket, which is the one the restore hands back.
  t = now_s();
  const std::string images = tmp + "/images";
  std::vector<std::string> dump{criu.path, "dump", "-t", std::to_string(r.pid), "-D", images, "-o", "dump.log",
                                "--tcp-established", "--external", "mnt[]"};
  if (listen_inode) dump.push_back("--skip-in-flight");
  auto st = run_program(dump, images + "/criu-dump.out");
  if (!st.ok()) return fail(st.error(), true);
  if (*st != 0) {
    // The images go with the failed artifact, but the log is kept beside the artifacts (read into memory
    // first: a full disk is one reason a dump fails, and abandoning the images is what frees it).
    const std::string errors = log_errors(images + "/dump.log");
    std::string log_text;
    {
      std::ifstream in(images + "/dump.log");
      log_text.assign(std::istreambuf_iterator<char>(in), {});
    }
    Error e = fail(make_error(Errc::kIo, "criu dump failed (" + describe_status(*st) + "): " + errors), true);
    const std::string kept = std::filesystem::path(tmp).parent_path() / "last-failed-dump.log";
    if (std::ofstream out(kept, std::ios::trunc); out << log_text)
      e.message += " (log: " + kept + ")";
    return e;
  }
  m.timings["criu_dump_s"] = now_s() - t;
  if (listen_inode) {
    // The dump ended the engine: a failure here leaves no artifact, and fastrestartd restarts the engine.
    auto rewritten = hand_down_listen_socket(images, *listen_inode);
    if (!rewritten.ok()) {
      store.abandon(m.id);
      return make_error(rewritten.error().code,
                        "cannot make the images take fastrestartd's listening socket: " + rewritten.error().message);
    }
    m.listen_socket = r.listen_socket;
  }
  m.image_bytes = tree_bytes(images);
  m.created_unix = static_cast<double>(std::time(nullptr));
  m.create_s = now_s() - t0;
  m.timings["total_s"] = m.create_s;
  if (auto s = write_manifest(tmp, m); !s.ok()) {
    store.abandon(m.id);
    return s.error();
  }
  if (auto s = store.commit(m.id); !s.ok()) {
    store.abandon(m.id);
    return s.error();
  }
  return m;
}

}  // namespace fr::snapshot
