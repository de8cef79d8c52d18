// fastrestartd: the restart supervisor of one served model. Usage and exit codes: docs/supervisor.md.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <chrono>
#include <optional>
#include <thread>
#include <spdlog/spdlog.h>

#include "common/private_dir.h"
#include "common/secrets.h"
#include "health/health_server.h"
#include "supervisor/control.h"
#include "supervisor/daemons/daemon_set.h"
#include "supervisor/engine_group_record.h"
#include "supervisor/instance_claims.h"
#include "supervisor/instance_lock.h"
#include "supervisor/listen_socket.h"
#include "supervisor/redaction.h"
#include "supervisor/supervisor.h"
#include "supervisor/engines/engine_kind.h"

using namespace fr::supervisor;

int main(int argc, char** argv) {
  CLI::App app{"fastrestartd: restart supervisor for one served model (docs/supervisor.md)"};
  std::string config_path, log_level;
  bool check = false, syntax_only = false;
  app.add_option("--config,-c", config_path, "the model's TOML config (/etc/fastrestart/<name>.toml)")->required();
  app.add_flag("--check", check, "validate the config and exit (0 valid, 2 invalid)");
  app.add_flag("--syntax-only", syntax_only,
               "with --check: the file alone, not what a start on this host needs (files, programs, socket directory)");
  app.add_option("--log-level", log_level, "override [logging] level");
  app.set_version_flag("--version", std::string("fastrestartd ") + FASTRESTART_VERSION, "print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitConfig;
  }
  // Before anything else and before any thread: a SIGTERM during startup waits for run()'s handlers
  // (supervisor.h). `--check` stays interruptible.
  if (!check) block_handled_signals();
  spdlog::set_pattern(std::getenv("INVOCATION_ID") ? "[%l] %v" : "[%Y-%m-%d %H:%M:%S.%e] [fastrestartd] [%l] %v");
  // Every log line scrubbed of the secrets the config and pushes carry (docs/reliability.md, "Secrets").
  install_log_redaction();
  auto cfg = load_config(config_path);
  if (!cfg.ok()) {
    spdlog::error("{}", cfg.error().message);
    return kExitConfig;
  }
  register_secrets(cfg->engine);
  // The engine kind's checks of the flags (vLLM: flags it would refuse), part of the file's own check.
  if (auto kind = check_engine_config(*cfg); !kind.ok()) {
    spdlog::error("{}", kind.error().message);
    return kExitConfig;
  }
  // What the start would hit (socket directory, checkpoint files, the engine's program): before anything starts.
  if (!(check && syntax_only))
    if (auto host = check_host(*cfg); !host.ok()) {
      spdlog::error("{}", host.error().message);
      return kExitConfig;
    }
  if (check) {
    // Warnings of the kind's checks (vLLM: it starts, but behaves differently: docs/vllm.md); errors failed above.
    if (auto kind = make_engine_adapter(*cfg); kind.ok())
      for (const auto& w : (*kind)->config_warnings(*cfg))
        std::printf("%s: warning: %s\n", config_path.c_str(), fr::process_scrubber().scrub(w).c_str());
    std::printf("%s: valid\n", config_path.c_str());
    return kExitOk;
  }
  spdlog::set_level(spdlog::level::from_str(log_level.empty() ? cfg->logging.level : log_level));
  std::signal(SIGPIPE, SIG_IGN);
  // One fastrestartd per state directory, before anything touches it, the sockets or processes (the other
  // shared resources are claimed below, once the control socket's path and group are known).
  auto instance = acquire_instance_lock(*cfg);
  if (!instance.ok()) {
    spdlog::error("{}", instance.error().message);
    return instance.error().code == fr::Errc::kBusy ? kExitAlreadyRunning : kExitFailure;
  }

  std::unique_ptr<GpuProbe> gpus;
  if (const char* fake = std::getenv("FASTRESTART_FAKE_NVML"); fake && *fake) gpus = make_file_probe(fake);
  else gpus = make_nvml_probe();
  std::optional<gid_t> group;
  if (!cfg->control.group.empty()) {
    auto g = fr::resolve_group(cfg->control.group);
    if (!g.ok()) {
      spdlog::error("{}: control.group: {}", config_path, g.error().message);
      return kExitConfig;
    }
    group = *g;
  }
  std::string sock = cfg->control.socket.empty() ? default_control_socket(cfg->name) : cfg->control.socket;
  // What another instance with another state directory could share: the control socket, the weight daemons'
  // sockets (the same GPUs), the engine's port. Claimed before the socket is unlinked or anything starts.
  auto claims = claim_instance(*cfg, sock, group, claimed_daemon_sockets(*cfg, *gpus));
  if (!claims.ok()) {
    spdlog::error("{}", claims.error().message);
    return claims.error().code == fr::Errc::kBusy ? kExitAlreadyRunning : kExitFailure;
  }
  // engine.listen = "supervisor": the engine's port is ours from here to the exit (docs/listen-socket.md).
  // Bound before anything starts and before READY=1, so an address in use ends the start here.
  // engine.listen = "front": the same for the front's port, and the engines' loopback socket beside it.
  std::optional<ListenSocket> listen, front;
  Supervisor sup(*cfg, std::move(gpus), make_sd_notifier());
  const bool front_mode = cfg->engine.listen == EngineListen::kFront;
  if (cfg->engine.listen != EngineListen::kEngine) {
    // An engine a SIGKILLed fastrestartd left behind (its workers) may still hold the last socket: its
    // group goes first, and the bind is retried while its processes exit.
    const bool killed = kill_left_engine_groups(*cfg) > 0;
    auto bind_retrying = [&](const std::string& host, uint16_t port, const char* fields) {
      auto l = ListenSocket::open(host, port, cfg->engine.listen_backlog, fields);
      for (int i = 0; killed && !l.ok() && l.error().code == fr::Errc::kBusy && i < 100; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        l = ListenSocket::open(host, port, cfg->engine.listen_backlog, fields);
      }
      return l;
    };
    auto l = front_mode ? bind_retrying("127.0.0.1", cfg->front.upstream_port, kUpstreamFields)
                        : bind_retrying(cfg->engine.host, cfg->engine.port, kEngineFields);
    if (l.ok() && front_mode) {
      auto f = bind_retrying(cfg->engine.host, cfg->engine.port, kFrontFields);
      if (!f.ok()) {
        spdlog::error("{}: {}", config_path, f.error().message);
        return f.error().code == fr::Errc::kBusy ? kExitAlreadyRunning : kExitFailure;
      }
      front = std::move(*f);
    }
    if (!l.ok()) {
      spdlog::error("{}: {}", config_path, l.error().message);
      return l.error().code == fr::Errc::kBusy ? kExitAlreadyRunning : kExitFailure;
    }
    listen = std::move(*l);
    if (front_mode) {
      spdlog::info("listening on {} for fastrestart-front and on {} for the engine (engine.listen = \"front\", backlog {})",
                   front->address(), listen->address(), cfg->engine.listen_backlog);
    } else {
      spdlog::info("listening on {} for the engine (engine.listen = \"supervisor\", backlog {})", listen->address(),
                   cfg->engine.listen_backlog);
    }
  }
  if (listen) sup.use_listen_socket(listen->fd(), listen->inode());
  if (front) sup.use_front_socket(front->fd(), listen->port());
  auto ctl = ControlServer::start(sock, group, [&sup](const nlohmann::json& req) { return sup.request(req); });
  if (!ctl.ok()) {
    spdlog::error("control socket {}: {}", sock, ctl.error().message);
    return kExitConfig;
  }
  spdlog::info("control socket {}", sock);
  // Probes and metrics over HTTP (docs/health.md): the same status JSON as fastrestartctl status --json.
  std::unique_ptr<fr::health::HealthServer> http;
  if (cfg->http.listen != "none") {
    auto h = fr::health::HealthServer::start(cfg->http.listen, {[&sup]() -> nlohmann::json {
                                               auto r = sup.request({{"op", "status"}});
                                               if (!r.value("ok", false)) return nullptr;
                                               return r["status"];
                                             }});
    if (!h.ok()) {
      spdlog::error("{}: http.listen: {}", config_path, h.error().message);
      return kExitConfig;
    }
    http = std::move(*h);
    spdlog::info("HTTP probes and metrics on http://{}:{}/", cfg->http.listen.substr(0, cfg->http.listen.rfind(':')), http->port());
  }
  int rc = sup.run();
  return rc;
}
