// fastrestart-weightctl: talk to a fastrestart-weightd (status, preload, attach, evict, shutdown) and make
// test checkpoints. Usage and exit codes: docs/weightd.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>

#include "common/safetensors.h"
#include "daemon_client/daemon_client.h"
#include "fastrestart/engine_loader.h"
#include "protocol/arena.h"
#include "protocol/daemon_status.h"

namespace {

using fr::proto::json;
constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitMiss = 5;

struct Common {
  std::string socket_dir;
  std::string device = "host";
  double timeout_s = 5;
};

fr::Result<fr::DaemonClient> connect(const Common& c) {
  FR_ASSIGN(std::string path, fastrestart::daemon_socket_path(c.device, c.socket_dir));
  return fr::DaemonClient::connect(path, c.timeout_s, "fastrestart-weightctl");
}

int fail(const fr::Error& e) {
  std::fprintf(stderr, "fastrestart-weightctl: %s\n", e.message.c_str());
  return e.code == fr::Errc::kInvalidArgument ? kExitUsage : kExitFailure;
}

std::string human_bytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, u[i]);
  return buf;
}

int cmd_status(const Common& c, bool as_json) {
  auto cl = connect(c);
  if (!cl.ok()) return fail(cl.error());
  auto r = cl->call({{"op", "status"}}, 10);
  if (!r.ok()) return fail(r.error());
  if (as_json) {
    std::cout << r->dump(2) << "\n";
    return kExitOk;
  }
  auto st = fr::proto::daemon_status_from_json(*r);
  if (!st.ok()) return fail(fr::make_error(fr::Errc::kProtocol, "unreadable status: " + st.error().message));
  std::printf("daemon pid %lld, backend %s, gpu %s, held %s, %llu client(s)\n", static_cast<long long>(st->pid),
              st->backend.c_str(), st->gpu_uuid.c_str(), human_bytes(double(st->held_bytes)).c_str(),
              static_cast<unsigned long long>(st->clients));
  for (const auto& e : st->entries) {
    const double done = double(e.progress.done_bytes), total = double(e.progress.total_bytes);
    std::printf("  %s  %-7s %-7s %s / %s (%.0f%%, %.2f GB/s)  %llu tensors, digest %s, %zu attach(es)\n",
                e.fingerprint.c_str(), e.state.c_str(), e.source.c_str(), human_bytes(done).c_str(),
                human_bytes(total).c_str(), total > 0 ? 100 * done / total : 100.0, e.progress.rate_bytes_per_s / 1e9,
                static_cast<unsigned long long>(e.tensors), e.digest ? e.digest->c_str() : "-", e.attaches.size());
    if (e.error) std::printf("    error: %s\n", e.error->c_str());
  }
  for (const auto& a : st->arenas) {
    const std::string holder = a.holder_pid ? "pid " + std::to_string(*a.holder_pid) : "none";
    const std::string wait = a.last_wait_s ? std::to_string(*a.last_wait_s) + " s" : "-";
    std::printf("  arena %s  %s, holder %s, %llu lease(s), %llu waiting, last wait for a holder's exit %s\n",
                a.name.c_str(), human_bytes(double(a.pool_bytes)).c_str(), holder.c_str(),
                static_cast<unsigned long long>(a.leases), static_cast<unsigned long long>(a.waiting), wait.c_str());
  }
  return kExitOk;
}

std::map<std::string, std::string> parse_config(const std::vector<std::string>& kvs) {
  std::map<std::string, std::string> m;
  for (const auto& kv : kvs) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw CLI::ValidationError("--config", kv + ": expected key=value");
    m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

int cmd_preload(const Common& c, const std::vector<std::string>& files, const std::vector<std::string>& cfg,
                const std::vector<std::string>& tensors, const std::string& dtype, bool wait) {
  auto cl = connect(c);
  if (!cl.ok()) return fail(cl.error());
  std::vector<std::string> abs;
  for (const auto& f : files) {
    char buf[PATH_MAX];
    abs.push_back(::realpath(f.c_str(), buf) ? buf : f);
  }
  json req{{"op", "preload"}, {"files", abs}, {"config", parse_config(cfg)}, {"wait", wait}};
  if (!tensors.empty()) req["tensors"] = tensors;
  if (!dtype.empty()) req["dtype"] = dtype;
  auto r = cl->call(req, wait ? 86400 : 60);
  if (!r.ok()) return fail(r.error());
  std::printf("%s %s\n", r->value("fingerprint", "").c_str(), r->value("state", "").c_str());
  return kExitOk;
}

int cmd_attach(const Common& c, const std::vector<std::string>& files, const std::vector<std::string>& cfg,
               const std::string& mode, bool verify, double state_timeout, bool as_json) {
  fastrestart::Options o;
  o.socket_dir = c.socket_dir;
  o.device = c.device;
  o.connect_timeout_s = c.timeout_s;
  o.state_timeout_s = state_timeout;
  o.mode = mode == "copy" ? fastrestart::Mode::kCopy : fastrestart::Mode::kZeroCopy;
  o.verify = verify;
  auto r = fastrestart::attach({files, parse_config(cfg)}, o);
  if (!r.ok()) return fail(r.error());
  const auto& t = r->timings;
  json out{{"hit", r->hit},
           {"reason", r->reason},
           {"differs", r->differs},
           {"timings", {{"connect_s", t.connect_s}, {"request_s", t.request_s}, {"map_s", t.map_s},
                        {"copy_s", t.copy_s}, {"verify_s", t.verify_s}, {"total_s", t.total_s}}}};
  if (r->hit) {
    uint64_t bytes = 0;
    for (const auto& x : r->weights->tensors()) bytes += x.nbytes;
    out["fingerprint"] = r->weights->fingerprint();
    out["digest"] = r->weights->digest();
    out["tensors"] = r->weights->tensors().size();
    out["bytes"] = bytes;
    out["pool_bytes"] = r->weights->pool_bytes();
  }
  if (as_json) {
    std::cout << out.dump() << "\n";
  } else if (r->hit) {
    std::printf("hit %s: %zu tensors, %s, digest %s%s; connect %.3f ms, request %.3f ms, map %.3f ms, total %.3f ms\n",
                r->weights->fingerprint().c_str(), r->weights->tensors().size(),
                human_bytes(out["bytes"].get<double>()).c_str(), r->weights->digest().c_str(),
                verify ? " (verified)" : "", t.connect_s * 1e3, t.request_s * 1e3, t.map_s * 1e3, t.total_s * 1e3);
  } else {
    std::printf("miss: %s\n", r->reason.c_str());
  }
  return r->hit ? kExitOk : kExitMiss;
}

int cmd_simple(const Common& c, json req) {
  auto cl = connect(c);
  if (!cl.ok()) return fail(cl.error());
  auto r = cl->call(req, 60);
  if (!r.ok()) return fail(r.error());
  r->erase("ok");
  std::cout << r->dump() << "\n";
  return kExitOk;
}

// A deterministic synthetic checkpoint for tests and the demo: `shards` files of `tensors` F32/BF16 tensors.
int cmd_make_checkpoint(const std::string& dir, int shards, int tensors, uint64_t tensor_bytes, uint64_t seed,
                        const std::string& dtype_name) {
  auto dt = fr::dtype_from_name(dtype_name);
  if (!dt) return fail({fr::Errc::kInvalidArgument, "unknown dtype " + dtype_name});
  const size_t item = fr::dtype_size(*dt);
  const int64_t cols = 256;
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(tensor_bytes / item / cols));
  std::error_code ec;  // DIR and its parents are created as needed (mkdir -p)
  if (std::filesystem::create_directories(dir, ec); ec)
    return fail({fr::Errc::kIo, "create " + dir + ": " + ec.message()});
  std::mt19937_64 rng(seed);
  for (int s = 0; s < shards; ++s) {
    std::vector<std::vector<std::byte>> bufs;
    std::vector<fr::TensorData> td;
    for (int t = 0; t < tensors; ++t) {
      // Vary shapes a little so offsets are not all aligned.
      int64_t r = rows + (t % 3);
      std::vector<std::byte> b(static_cast<size_t>(r * cols) * item);
      for (size_t i = 0; i + 8 <= b.size(); i += 8) {
        uint64_t v = rng();
        std::memcpy(&b[i], &v, 8);
      }
      bufs.push_back(std::move(b));
      char name[64];
      std::snprintf(name, sizeof name, "layers.%d.w%d", s * tensors + t, t % 4);
      td.push_back({name, *dt, {r, cols}, bufs.back()});
    }
    char file[64];
    std::snprintf(file, sizeof file, "/model-%05d-of-%05d.safetensors", s + 1, shards);
    if (auto st = fr::write_safetensors(dir + file, td, {{"format", "pt"}}); !st.ok()) return fail(st.error());
    std::printf("%s%s\n", dir.c_str(), file);
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fastrestart-weightctl: control a fastrestart-weightd (docs/weightd.md)"};
  app.require_subcommand(1);
  Common c;
  app.add_option("--socket-dir", c.socket_dir, "the daemon's socket directory");
  app.add_option("--device", c.device, "host or cuda:<ordinal> (selects the daemon by the GPU's UUID)");
  app.add_option("--timeout", c.timeout_s, "connect timeout in seconds");
  bool as_json = false;
  std::vector<std::string> files, cfg, tensors;
  std::string dtype, ck_dtype = "F32", mode = "zero_copy", fp, dir, arena_name;
  bool wait = false, verify = false, all = false;
  double state_timeout = 300;
  int shards = 2, ntensors = 8;
  uint64_t tensor_bytes = 1 << 20, seed = 1;
  int rc = kExitOk;

  // Subcommands are a table: name, help, setup, action.
  struct Sub {
    const char* name;
    const char* help;
    std::function<void(CLI::App*)> setup;
    std::function<int()> run;
  };
  std::vector<Sub> subs = {
      {"status", "show held bytes, entries, load progress, attaches and KV arenas",
       [&](CLI::App* s) { s->add_flag("--json", as_json); }, [&] { return cmd_status(c, as_json); }},
      {"preload", "ask the daemon to load safetensors files",
       [&](CLI::App* s) {
         s->add_option("files", files)->required();
         s->add_option("--config", cfg, "key=value (repeat)");
         s->add_option("--tensors", tensors);
         s->add_option("--dtype", dtype);
         s->add_flag("--wait", wait, "return when loaded");
       },
       [&] { return cmd_preload(c, files, cfg, tensors, dtype, wait); }},
      {"attach", "attach as an engine would and report timings (exit 5 on a miss)",
       [&](CLI::App* s) {
         s->add_option("files", files)->required();
         s->add_option("--config", cfg, "key=value (repeat)");
         s->add_option("--mode", mode)->check(CLI::IsMember({"zero_copy", "copy"}));
         s->add_flag("--verify", verify);
         s->add_option("--state-timeout", state_timeout);
         s->add_flag("--json", as_json);
       },
       [&] { return cmd_attach(c, files, cfg, mode, verify, state_timeout, as_json); }},
      {"evict", "drop an entry (--all: every entry and every KV arena no live process holds)",
       [&](CLI::App* s) {
         s->add_option("fingerprint", fp);
         s->add_flag("--all", all);
       },
       [&] { return cmd_simple(c, all ? json{{"op", "evict"}, {"all", true}} : json{{"op", "evict"}, {"fingerprint", fp}}); }},
      {"arena-release", "drop a KV arena no other live process holds (as the arenas' uid)",
       [&](CLI::App* s) { s->add_option("name", arena_name)->required(); },
       [&] { return cmd_simple(c, fr::proto::to_json(fr::proto::ArenaReleaseRequest{arena_name})); }},
      {"shutdown", "stop the daemon", [](CLI::App*) {}, [&] { return cmd_simple(c, {{"op", "shutdown"}}); }},
      {"make-checkpoint", "write a deterministic synthetic safetensors checkpoint",
       [&](CLI::App* s) {
         s->add_option("dir", dir)->required();
         s->add_option("--shards", shards)->check(CLI::Range(1, 1000));
         s->add_option("--tensors", ntensors)->check(CLI::Range(1, 100000));
         s->add_option("--tensor-bytes", tensor_bytes);
         s->add_option("--seed", seed);
         s->add_option("--dtype", ck_dtype, "F32, BF16, ...");
       },
       [&] { return cmd_make_checkpoint(dir, shards, ntensors, tensor_bytes, seed, ck_dtype); }},
  };
  for (auto& s : subs) {
    CLI::App* sub = app.add_subcommand(s.name, s.help);
    s.setup(sub);
    sub->callback([&rc, &s] { rc = s.run(); });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int r = app.exit(e);
    return r == 0 ? kExitOk : kExitUsage;
  }
  return rc;
}
