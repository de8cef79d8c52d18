#include "tinyengine/tp.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/bounded_json.h"
#include "common/unix_socket.h"
#include "tinyengine/serve.h"

namespace fr::te {
namespace {

using json = nlohmann::json;

struct Header {
  uint32_t op;
  uint32_t arg;
};
constexpr size_t kMaxMessage = 128 * 1024;  // a partial of d_model 8192 floats is 32 KiB

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exited with code " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  return "ended (status " + std::to_string(st) + ")";
}

}  // namespace

Result<std::string> rank_device(int rank, int size, const std::string& fallback) {
  const char* env = std::getenv("FASTRESTART_DEVICES");
  if (!env || !*env) return fallback;
  const auto devices = split_commas(env);
  if (devices.front().rfind("host", 0) != 0) return fallback;  // GPUs: the CPU forward cannot use them
  if (static_cast<int>(devices.size()) < size)
    return make_error(Errc::kInvalidArgument, "--tensor-parallel-size " + std::to_string(size) + " needs " +
                                                  std::to_string(size) + " devices, FASTRESTART_DEVICES lists " +
                                                  std::to_string(devices.size()) + " (" + env + ")");
  return devices.at(static_cast<size_t>(rank));
}

double rank_memory_utilization(int rank, double fallback) {
  const char* env = std::getenv("FASTRESTART_GPU_MEMORY_UTILIZATION");
  if (!env || !*env) return fallback;
  const auto v = split_commas(env);
  if (rank >= static_cast<int>(v.size())) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v[static_cast<size_t>(rank)].c_str(), &end);
  return end && *end == '\0' && d > 0 && d <= 1 ? d : fallback;
}

// --- TpChannel ----------------------------------------------------------------------------------------

Status TpChannel::send(Op op, uint32_t arg, const void* data, size_t n) {
  if (n + sizeof(Header) > kMaxMessage) return make_error(Errc::kInternal, "tensor-parallel message too large");
  std::string buf(sizeof(Header) + n, '\0');
  const Header h{op, arg};
  std::memcpy(buf.data(), &h, sizeof h);
  if (n) std::memcpy(buf.data() + sizeof h, data, n);
  if (::send(m_fd.get(), buf.data(), buf.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(buf.size()))
    return sys_error("tensor-parallel send");
  return {};
}

Result<TpChannel::Message> TpChannel::recv(double timeout_s) {
  pollfd p{m_fd.get(), POLLIN, 0};
  const int ms = timeout_s < 0 ? -1 : static_cast<int>(timeout_s * 1000);
  int r;
  while ((r = ::poll(&p, 1, ms)) < 0 && errno == EINTR) {
  }
  if (r < 0) return sys_error("tensor-parallel poll");
  if (r == 0) return make_error(Errc::kTimeout, "no answer within " + std::to_string(timeout_s) + " s");
  std::string buf(kMaxMessage, '\0');
  ssize_t n;
  while ((n = ::recv(m_fd.get(), buf.data(), buf.size(), 0)) < 0 && errno == EINTR) {
  }
  if (n < 0) return sys_error("tensor-parallel recv");
  if (n == 0) return make_error(Errc::kIo, "the other rank closed its socket (it exited)");
  if (static_cast<size_t>(n) < sizeof(Header)) return make_error(Errc::kProtocol, "short tensor-parallel message");
  Header h;
  std::memcpy(&h, buf.data(), sizeof h);
  if (h.op < kLoaded || h.op > kPong) return make_error(Errc::kProtocol, "unknown tensor-parallel op " + std::to_string(h.op));
  return Message{static_cast<Op>(h.op), h.arg, buf.substr(sizeof h, static_cast<size_t>(n) - sizeof h)};
}

// --- TpGroup ------------------------------------------------------------------------------------------

Result<std::unique_ptr<TpGroup>> TpGroup::start(const std::vector<std::string>& argv, int size, double timeout_s,
                                                bool die_with_rank0) {
  auto g = std::make_unique<TpGroup>();
  g->m_timeout_s = timeout_s;
  const pid_t parent = ::getpid();
  for (int rank = 1; rank < size; ++rank) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return sys_error("socketpair");
    UniqueFd ours(sv[0]), theirs(sv[1]);
    std::vector<std::string> args = argv;
    args.insert(args.end(), {"--tp-rank", std::to_string(rank)});
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return sys_error("fork tensor-parallel rank");
    if (pid == 0) {
      // Dies with rank 0 (and checks it did not die already, before the request took effect).
      if (die_with_rank0) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      if (::dup2(theirs.get(), 3) < 0) ::_exit(1);  // dup2 clears FD_CLOEXEC on fd 3
      ::execv("/proc/self/exe", cargv.data());
      ::_exit(127);
    }
    theirs.reset();
    Rank r;
    r.rank = rank;
    r.pid = pid;
    r.channel = TpChannel(std::move(ours));
    g->m_ranks.push_back(std::move(r));
    spdlog::info("tensor parallel: started rank {} as pid {}", rank, pid);
  }
  // A rank's exit ends the engine: its ranks run as one, and a supervisor restarts them together.
  for (const auto& r : g->m_ranks) {
    std::thread([rank = r.rank, pid = r.pid, stopping = g->m_stopping] {
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      if (*stopping) return;
      spdlog::error("tensor-parallel rank {} (pid {}) {}: exiting, the engine's ranks run as one", rank, pid,
                    describe_status(st));
      std::fflush(nullptr);
      std::_Exit(kExitFailure);
    }).detach();
  }
  return g;
}

TpGroup::~TpGroup() { *m_stopping = true; }

Error TpGroup::broken(std::string why) {
  if (m_broken.empty()) {
    m_broken = why;
    spdlog::error("tensor parallel: {}", why);
  }
  return Error{Errc::kIo, m_broken};
}

Result<TpAgreement> TpGroup::agree(bool hit, const std::string& reason, double timeout_s) {
  std::lock_guard lk(m_mutex);
  TpAgreement all{hit, hit ? "" : "rank 0 missed: " + reason};
  for (auto& r : m_ranks) {
    auto m = r.channel.recv(timeout_s);
    if (!m) return broken("rank " + std::to_string(r.rank) + " did not report its load: " + m.error().message);
    if (m->op == TpChannel::kFailed) return broken("rank " + std::to_string(r.rank) + " failed to load: " + m->payload);
    auto j = parse_json_or_discarded(m->payload, kFrameJsonLimits);
    if (m->op != TpChannel::kLoaded || !j.is_object()) return broken("rank " + std::to_string(r.rank) + ": unexpected message");
    if (!j.value("hit", false) && all.all_hit) {
      all.all_hit = false;
      all.reason = "rank " + std::to_string(r.rank) + " missed: " + j.value("reason", "");
    }
  }
  for (auto& r : m_ranks)
    if (auto s = r.channel.send_json(TpChannel::kDecision, {{"all_hit", all.all_hit}, {"reason", all.reason}}); !s)
      return broken("rank " + std::to_string(r.rank) + ": " + s.error().message);
  return all;
}

Status TpGroup::collect_ready(double timeout_s) {
  std::lock_guard lk(m_mutex);
  for (auto& r : m_ranks) {
    auto m = r.channel.recv(timeout_s);
    if (!m) return broken("rank " + std::to_string(r.rank) + " did not finish its load: " + m.error().message);
    if (m->op == TpChannel::kFailed) return broken("rank " + std::to_string(r.rank) + " failed to load: " + m->payload);
    r.report = parse_json_or_discarded(m->payload, kFrameJsonLimits);
    if (m->op != TpChannel::kReady || !r.report.is_object()) return broken("rank " + std::to_string(r.rank) + ": unexpected message");
  }
  return {};
}

Status TpGroup::reduce(int block, const float* a, float* out, int d_model) {
  std::lock_guard lk(m_mutex);
  if (!m_broken.empty()) return make_error(Errc::kIo, m_broken);
  const size_t n = static_cast<size_t>(d_model) * sizeof(float);
  for (auto& r : m_ranks)
    if (auto s = r.channel.send(TpChannel::kReduce, static_cast<uint32_t>(block), a, n); !s)
      return broken("rank " + std::to_string(r.rank) + ": " + s.error().message);
  std::vector<float> part(static_cast<size_t>(d_model));
  for (auto& r : m_ranks) {
    auto m = r.channel.recv(m_timeout_s);
    if (!m) return broken("rank " + std::to_string(r.rank) + " did not answer: " + m.error().message);
    if (m->op != TpChannel::kPartial || m->payload.size() != n)
      return broken("rank " + std::to_string(r.rank) + ": unexpected answer to a reduce");
    std::memcpy(part.data(), m->payload.data(), n);
    for (int i = 0; i < d_model; ++i) out[i] += part[static_cast<size_t>(i)];
  }
  return {};
}

std::string TpGroup::check() {
  std::unique_lock lk(m_mutex, std::defer_lock);
  if (!lk.try_lock_for(std::chrono::duration<double>(m_timeout_s)))
    return "the tensor-parallel ranks are busy for more than " + std::to_string(m_timeout_s) + " s";
  if (!m_broken.empty()) return m_broken;
  for (auto& r : m_ranks) {
    if (auto s = r.channel.send(TpChannel::kPing, 0, nullptr, 0); !s) return broken("rank " + std::to_string(r.rank) + ": " + s.error().message).message;
    auto m = r.channel.recv(m_timeout_s);
    if (!m || m->op != TpChannel::kPong)
      return broken("rank " + std::to_string(r.rank) + " did not answer a ping: " + (m ? "unexpected message" : m.error().message))
          .message;
  }
  return "";
}

json TpGroup::ranks_json() const {
  json ranks = json::array({m_rank0});
  for (const auto& r : m_ranks) {
    json j = r.report.is_object() ? r.report : json::object();
    j["rank"] = r.rank;
    j["pid"] = r.pid;
    ranks.push_back(std::move(j));
  }
  return ranks;
}

// --- ranks 1..N-1 -------------------------------------------------------------------------------------

int run_tp_worker(const ServeOptions& o) {
  const int rank = o.tp_rank;
  // The supervisor's SIGTERM goes to the whole group; rank 0 drains its requests (which need this rank)
  // and then closes the socket, which ends this rank.
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  TpChannel ch{UniqueFd(3)};
  auto fail = [&](const std::string& why) {
    spdlog::error("tensor-parallel rank {}: {}", rank, why);
    (void)ch.send(TpChannel::kFailed, 0, why.data(), why.size());
    std::fflush(nullptr);
    return kExitFailure;
  };
  LoadOptions lo = o.load;
  lo.tp = {o.tensor_parallel_size, rank};
  auto dev = rank_device(rank, o.tensor_parallel_size, lo.device);
  if (!dev) return fail(dev.error().message);
  lo.device = *dev;
  TpAgree agree = [&](bool hit, const std::string& reason) -> Result<TpAgreement> {
    FR_TRY(ch.send_json(TpChannel::kLoaded, {{"hit", hit}, {"reason", reason}}));
    FR_ASSIGN(auto m, ch.recv(-1));
    auto j = parse_json_or_discarded(m.payload, kFrameJsonLimits);
    if (m.op != TpChannel::kDecision || !j.is_object()) return make_error(Errc::kProtocol, "expected the load decision");
    return TpAgreement{j.value("all_hit", false), j.value("reason", "")};
  };
  auto loaded = load_model(o.model, lo, agree);
  if (!loaded) return fail("load " + o.model + ": " + loaded.error().to_string());
  const auto& r = loaded->report;
  spdlog::info("tensor-parallel rank {}: load path={} device={} weight_bytes={}{}", rank, r.path, lo.device, r.weight_bytes,
               r.reason.empty() ? "" : " reason=\"" + r.reason + "\"");
  json report = r.to_json();
  report["device"] = lo.device;
  report["memory_utilization"] = rank_memory_utilization(rank, o.gpu_memory_utilization);
  if (auto s = ch.send_json(TpChannel::kReady, report); !s) return kExitFailure;
  const Model& model = loaded->model;
  const int d = model.config().d_model;
  std::vector<float> out(static_cast<size_t>(d));
  const bool hang = o.faults.tp_hang_rank == rank;
  int pings = 0;
  for (;;) {
    auto m = ch.recv(-1);
    if (!m) break;  // rank 0 is gone or done
    if (m->op == TpChannel::kPing && hang && ++pings == 2) {  // the first /health of a ready engine passes
      spdlog::warn("fault: tensor-parallel rank {} stops answering", rank);
      for (;;) ::pause();
    }
    if (m->op == TpChannel::kPing) {
      if (!ch.send(TpChannel::kPong, 0, nullptr, 0)) break;
    } else if (m->op == TpChannel::kReduce && m->payload.size() == static_cast<size_t>(d) * sizeof(float) &&
               static_cast<int>(m->arg) < model.config().extra_blocks) {
      std::vector<float> a(static_cast<size_t>(d));
      std::memcpy(a.data(), m->payload.data(), m->payload.size());
      model.extra_partial(static_cast<int>(m->arg), a.data(), out.data());
      if (!ch.send(TpChannel::kPartial, m->arg, out.data(), out.size() * sizeof(float))) break;
    } else {
      return fail("unexpected message from rank 0 (op " + std::to_string(m->op) + ")");
    }
  }
  if (o.faults.tp_linger_s > 0) {
    spdlog::warn("fault: tensor-parallel rank {} lingers {} s after rank 0", rank, o.faults.tp_linger_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(o.faults.tp_linger_s));
    // What a supervisor's stop order must guarantee: this rank may still map its daemon's memory, so the
    // daemon must outlive it (tests read this line).
    auto sock = daemon_socket_of(lo);
    const bool up = sock && fr::connect_unix(*sock, fr::deadline_in(0)).ok();
    spdlog::info("tensor-parallel rank {}: at its exit its weight daemon is {}", rank, up ? "still running" : "gone");
  }
  spdlog::info("tensor-parallel rank {}: rank 0 is gone, exiting", rank);
  return kExitOk;
}

}  // namespace fr::te
