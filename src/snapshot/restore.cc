#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "common/fd.h"
#include "snapshot/criu.h"
#include "snapshot/exchange.h"
#include "snapshot/ops.h"
#include "snapshot/oracle.h"
#include "snapshot/store.h"

namespace fr::snapshot {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The state letter of /proc/<pid>/stat ('R', 'S', 'D', 'T', 'Z', ...), or 0 when gone.
char proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), {});
  auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() ? s[close + 2] : 0;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

Result<std::string> newest_id(const Store& store) {
  auto all = store.ids();
  if (all.empty()) return make_error(Errc::kNotFound, "no snapshot in " + store.dir());
  return all.front();
}

}  // namespace

Result<Restored> restore_snapshot(const RestoreRequest& r, GpuCheckpointer& gpu) {
  const double t0 = now_s();
  Store store(r.dir);
  Restored out;
  out.timings = nlohmann::json::object();
  // Checked at every restore, not only where fastrestartd created the directory: its owner or mode may
  // have changed since, and CRIU restores whatever the images hold.
  FR_TRY(store.check());
  if (r.id.empty()) {
    FR_ASSIGN(out.id, newest_id(store));
  } else {
    out.id = r.id;
  }
  if (!valid_id(out.id)) return make_error(Errc::kInvalidArgument, "invalid snapshot id \"" + out.id + "\"");
  FR_TRY(store.check(out.id));
  FR_ASSIGN(LockFile held, store.lock(out.id));
  const std::string dir = store.path(out.id);
  FR_ASSIGN(Manifest m, read_manifest(dir));
  // The listening socket, before anything else runs: an artifact made with fastrestartd's socket must be
  // given it (its images hold no socket of their own), and one made without it would bind the engine's
  // port, which fastrestartd's socket holds (EADDRINUSE).
  if (!m.listen_socket.empty() && r.listen_fd < 0)
    return make_error(Errc::kInvalidArgument,
                      "snapshot " + out.id + " was made with fastrestartd's listening socket (engine.listen = \"supervisor\") "
                      "and this fastrestartd hands none (engine.listen = \"engine\"): the restored engine would have "
                      "no socket to accept on; create a new snapshot");
  if (m.listen_socket.empty() && r.listen_fd >= 0)
    return make_error(Errc::kInvalidArgument,
                      "snapshot " + out.id + " was made with the engine binding its own port (engine.listen = \"engine\"); "
                      "with engine.listen = \"supervisor\" its restore would bind " + m.host + ":" + std::to_string(m.port) +
                      " again, where fastrestartd's socket listens (address in use); create a new snapshot");

  // Identity first: nothing runs when anything differs.
  FR_ASSIGN(CriuInfo criu, probe_criu(r.criu));
  FR_ASSIGN(Identity now, collect_identity(r.spec, criu.version));
  if (m.identity.cuda) {
    now.cuda = true;
    auto g = gpu.identity();
    if (!g.ok()) return make_error(Errc::kUnsupported, "snapshot " + out.id + " holds GPU state: " + g.error().message);
    now.gpu = *g;
  }
  if (auto diff = first_difference(m.identity, now, r.spec.secret_flags, r.spec.public_env))
    return make_error(Errc::kInvalidArgument, "snapshot " + out.id + " does not match this engine: " + *diff);
  // The weights the snapshot left out: the daemon must hold them now, or CRIU never runs.
  const bool weightless = m.weights.is_object() && m.weights.value("excluded", false);
  if (weightless)
    for (const auto& e : m.weights["entries"])
      if (auto s = daemon_holds(e, 10); !s.ok()) return make_error(Errc::kNotFound, "snapshot " + out.id + ": " + s.error().message);
  out.timings["identity_s"] = now_s() - t0;

  // CRIU: the tree comes back as our child (--restore-sibling), PID 1 of a new PID namespace, in a new
  // mount namespace rooted at / whose mounts are the host's, bound again (--ext-mount-map auto: the dump
  // recorded them as external), with a fresh /proc; its stdout/stderr pipe is replaced by ours;
  // connections that were open at the dump come back closed; fastrestartd's listening socket, when the
  // artifact holds it, is ours, duplicated at each descriptor the engine had it on (listen_image.h).
  const std::string images = dir + "/images";
  const std::string pidfile = images + "/restored.pid";
  ::unlink(pidfile.c_str());
  std::vector<std::string> argv{criu.path, "restore", "-D", images, "-o", "restore.log", "--restore-detached",
                                "--restore-sibling", "--tcp-close", "--root", "/", "--ext-mount-map", "auto",
                                "--pidfile", pidfile};
  UniqueFd out_fd;
  std::vector<int> keep;
  if (!m.stdout_pipe.empty()) {
    out_fd.reset(::fcntl(r.stdout_fd, F_DUPFD_CLOEXEC, 10));
    if (!out_fd) return sys_error("dup stdout");
    argv.insert(argv.end(), {"--inherit-fd", "fd[" + std::to_string(out_fd.get()) + "]:" + m.stdout_pipe});
    keep.push_back(out_fd.get());
  }
  UniqueFd listen_fd;
  if (!m.listen_socket.empty()) {
    listen_fd.reset(::fcntl(r.listen_fd, F_DUPFD_CLOEXEC, 10));
    if (!listen_fd) return sys_error("dup the listening socket");
    argv.insert(argv.end(), {"--inherit-fd", "fd[" + std::to_string(listen_fd.get()) + "]:" + m.listen_socket});
    keep.push_back(listen_fd.get());
  }
  double t = now_s();
  FR_ASSIGN(int st, run_program(argv, images + "/criu-restore.out", keep));
  out.timings["criu_restore_s"] = now_s() - t;
  if (st != 0)
    return make_error(Errc::kIo, "criu restore of " + out.id + " failed (" + describe_status(st) + "): " +
                                     log_errors(images + "/restore.log") + " (log: " + images + "/restore.log)");
  {
    std::ifstream pf(pidfile);
    if (!(pf >> out.pid) || out.pid <= 0)
      return make_error(Errc::kIo, "criu restore of " + out.id + " wrote no pid to " + pidfile);
  }
  auto fail = [&](const std::string& why) -> Error {
    kill_and_reap(out.pid);
    return make_error(Errc::kCorrupt, "snapshot " + out.id + ": " + why + " (the restored engine was killed)");
  };

  t = now_s();
  if (m.identity.cuda) {
    // A checkpointed process has closed its /dev/nvidia descriptors, so the driver, not /proc, says which
    // processes of the tree hold CUDA state to restore.
    std::vector<pid_t> gpu_pids;
    for (pid_t p : process_tree(out.pid)) {
      auto cuda_state = gpu.state(p);
      if (cuda_state.ok() && *cuda_state == "checkpointed") gpu_pids.push_back(p);
    }
    for (pid_t p : gpu_pids) {
      if (auto s = gpu.restore(p); !s.ok()) return fail(s.error().message);
      if (auto s = gpu.unlock(p); !s.ok()) return fail(s.error().message);
      // The driver reports a failed restore only through the state (CRIU's plugin logs it at debug level).
      auto state = gpu.state(p);
      if (!state.ok()) return fail(state.error().message);
      if (*state != "running") return fail("CUDA state of pid " + std::to_string(p) + " is " + *state + ", not running");
    }
    if (gpu_pids.empty()) return fail("the manifest records GPU state but no restored process is checkpointed in the driver");
  }
  out.timings["cuda_restore_s"] = now_s() - t;
  const char state = proc_state(out.pid);
  if (state == 0 || state == 'Z' || state == 'X' || state == 'T' || state == 't')
    return fail(std::string("the restored process is not running (state ") + (state ? std::string(1, state) : "gone") + ")");

  if (m.weights.is_object()) {
    // The engine was dumped prepared: it re-attaches (at the same addresses) and serves again.
    t = now_s();
    auto x = exchange(m.weights.value("exchange", std::string()), "resume", r.oracle_timeout_s);
    if (!x.ok()) return fail(x.error().message);
    out.timings["reattach_s"] = now_s() - t;
    // The KV arenas' leases waited for the dumped engine's exit: that wait, and the leases' own time.
    double waited = 0, lease = 0;
    for (const auto& a : (*x)["arenas"]) {
      waited = std::max(waited, a.value("waited_s", 0.0));
      lease += a.value("seconds", 0.0);
    }
    if (!(*x)["arenas"].empty()) {
      out.timings["arena_wait_s"] = waited;
      out.timings["arena_lease_s"] = lease;
    }
  }
  t = now_s();
  auto got = request_oracle(m.host, m.port, m.oracle.prompt, m.oracle.model, m.oracle.max_tokens, r.oracle_timeout_s);
  if (!got.ok()) return fail(got.error().message);
  if (auto why = oracle_mismatch(m.oracle, *got)) return fail(*why);
  out.timings["oracle_s"] = now_s() - t;
  out.timings["total_s"] = now_s() - t0;
  return out;
}

}  // namespace fr::snapshot
