// fastrestartctl: the operator's CLI for fastrestartd. Commands and exit codes: docs/supervisor.md.
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <ctime>
#include <cstdio>
#include <iostream>
#include <thread>

#include "common/control_chars.h"
#include "common/unix_socket.h"
#include "protocol/frame.h"
#include "supervisor/config.h"
#include "supervisor/control.h"
#include "supervisor/memory_share.h"
#include "supervisor/control_discovery.h"
#include "supervisor/kv_stats.h"
#include "supervisor/engines/check.h"
#include "status/status.h"

namespace {

using fr::supervisor::gb_text;
using nlohmann::json;
constexpr int kOk = 0, kFail = 1, kUsage = 2, kRolledBack = 3, kCheckFailed = 4;

fr::Result<json> call(const std::string& sock, const json& req, double timeout_s) {
  FR_ASSIGN(fr::UniqueFd fd, fr::connect_unix(sock, fr::deadline_in(2)));
  auto sent = fr::proto::write_frame(fd.get(), req, -1, fr::deadline_in(5));
  if (!sent.ok()) {
    // A refused peer gets its reason and the connection closed, maybe before our request went out: the
    // reason is then already waiting to be read, and says more than "Broken pipe".
    auto why = fr::proto::read_frame(fd.get(), fr::deadline_in(1));
    if (why.ok() && why->body.is_object() && why->body.contains("error")) return std::move(why->body);
    return sent.error();
  }
  FR_ASSIGN(fr::proto::Frame f, fr::proto::read_frame(fd.get(), fr::deadline_in(timeout_s)));
  return std::move(f.body);
}

std::string bar(double done, double total, int width = 30) {
  int n = total > 0 ? static_cast<int>(width * done / total) : width;
  return "[" + std::string(static_cast<size_t>(n), '#') + std::string(static_cast<size_t>(width - n), '.') + "]";
}

// Prints the decoded status; a status that does not decode is reported with the field at fault.
bool print_status(const json& j) {
  using namespace fr::supervisor;
  auto decoded = fr::status::supervisor_status_from_json(j);
  if (!decoded.ok()) {
    std::fprintf(stderr, "fastrestartctl: unreadable status: %s\n", decoded.error().message.c_str());
    return false;
  }
  const fr::status::SupervisorStatus& s = *decoded;
  std::printf("%-18s %s\n", "model", s.name.c_str());
  std::printf("%-18s %s  (%s)\n", "state", s.state.c_str(), s.status_text.c_str());
  if (s.engine) {
    const fr::status::EngineStatus& e = *s.engine;
    std::printf("%-18s pid %lld, up %.1f s, path %s\n", "engine", static_cast<long long>(e.pid), e.uptime_s,
                e.path.c_str());
    if (!e.readiness_endpoint.empty()) std::printf("%-18s %s\n", "checks", e.readiness_endpoint.c_str());
    if (e.vllm.is_object()) {
      const json& v = e.vllm;
      auto field = [&](const char* k) {
        return v.contains(k) && v[k].is_object() ? v[k].value("value", std::string("-")) : std::string("-");
      };
      std::printf("%-18s version %s, model runner %s, weight cache %s\n", "vllm", field("version").c_str(),
                  field("model_runner").c_str(), field("weight_cache").c_str());
      for (const auto& l : v.value("loader", json::array()))
        std::printf("%-18s %s %s attach_ms %s%s%s\n", "loader", l.value("result", "").c_str(), l.value("device", "-").c_str(),
                    l.value("attach_ms", "-").c_str(), l.value("reason", "").empty() ? "" : ": ",
                    l.value("reason", "").c_str());
    }
  }
  std::string flags;
  for (const auto& f : s.flags) flags += (flags.empty() ? "" : " ") + f;
  std::printf("%-18s %s\n", "flags", flags.c_str());
  std::string r;
  for (const auto& [k, v] : s.restarts) r += (r.empty() ? "" : ", ") + k + " " + std::to_string(v);
  std::printf("%-18s %s\n", "restarts", r.empty() ? "none" : r.c_str());
  if (s.last_exit)
    std::printf("%-18s %s: %s\n", "last exit", s.last_exit->cause.c_str(), s.last_exit->detail.c_str());
  if (s.last_start) {
    std::printf("%-18s %s in %.2f s\n", "last start", s.last_start->path.c_str(), s.last_start->time_to_ready_s);
    if (s.last_start->warm_miss) std::printf("%-18s %s\n", "warm miss", s.last_start->warm_miss->c_str());
  }
  // Each start path of restart.start that was skipped or failed at the current (or last) start, with why.
  for (const auto& a : s.start_paths)
    if (a.outcome == "skipped" || a.outcome == "failed")
      std::printf("%-18s %s %s: %s\n", "start path", a.path.c_str(), a.outcome.c_str(), a.detail.c_str());
  if (s.rollbacks.count > 0) {
    const json last = s.rollbacks.recent.empty() ? json::object() : s.rollbacks.recent.back();
    std::printf("%-18s %llu (not counted as restarts); last: %s: %s\n", "rollbacks",
                static_cast<unsigned long long>(s.rollbacks.count), last.value("cause", "").c_str(),
                last.value("detail", "").c_str());
  }
  for (const auto& d : s.daemons) {
    const auto& p = d.progress;
    const double done = double(p.done_bytes), total = double(p.total_bytes), rate = p.rate_bytes_per_s;
    std::printf("%-18s pid %lld %-8s held %s", ("daemon " + d.gpu).c_str(), static_cast<long long>(d.pid), d.state.c_str(),
                gb_text(double(d.held_bytes)).c_str());
    if (d.state == "loading" && total > 0)
      std::printf("  %s %s / %s, %.2f GB/s, ETA %.0f s", bar(done, total).c_str(), gb_text(done).c_str(), gb_text(total).c_str(),
                  rate / 1e9, rate > 0 ? (total - done) / rate : 0.0);
    if (!d.error.empty()) std::printf("  error: %s", d.error.c_str());
    std::printf("\n");
    // Its KV arenas: the engine's memory, exact bytes (docs/supervisor.md, "KV arenas").
    for (const auto& a : d.arenas) {
      std::printf("%-18s %s %llu bytes (%s), ", ("arena " + d.gpu).c_str(), a.name.c_str(),
                  static_cast<unsigned long long>(a.pool_bytes), gb_text(double(a.pool_bytes)).c_str());
      if (a.holder_pid) std::printf("held by pid %lld", static_cast<long long>(*a.holder_pid));
      else std::printf("unheld");
      std::printf(", %llu lease(s), generation %llu", static_cast<unsigned long long>(a.leases),
                  static_cast<unsigned long long>(a.generation));
      if (a.last_wait_s) std::printf(", last lease waited %.3f s", *a.last_wait_s);
      if (a.waiting) std::printf(", %llu waiting", static_cast<unsigned long long>(a.waiting));
      std::printf("\n");
    }
  }
  if (const auto& o = s.arena_outcome) {
    if (o->outcome == "leased")
      std::printf("%-18s pid %lld leased %s, %llu bytes, generation %llu, waited %.3f s, swap %.3f s\n", "engine arena",
                  static_cast<long long>(o->pid), o->name.c_str(), static_cast<unsigned long long>(o->bytes),
                  static_cast<unsigned long long>(o->generation), o->waited_s, o->swap_s);
    else
      std::printf("%-18s pid %lld fallback: %s\n", "engine arena", static_cast<long long>(o->pid),
                  fr::escape_control_chars(o->reason).c_str());
  }
  // The engine's KV cache survival (docs/kv-survival.md, "In fastrestartd's status").
  if (auto it = j.find("kv_cache"); it != j.end() && !it->is_null()) {
    fr::status::KvCacheStatus k;
    if (auto read = fr::status::read_kv_cache_status(*it, "status.kv_cache", k); read.ok())
      std::printf("%-18s %s\n", "engine kv cache", fr::escape_control_chars(fr::supervisor::kv_cache_text(k)).c_str());
    else
      std::printf("%-18s %s\n", "engine kv cache", fr::escape_control_chars(read.error().message).c_str());
  }
  for (const auto& m : s.memory) {
    if (m.error) {
      std::printf("%-18s %s\n", ("gpu " + m.gpu).c_str(), m.error->c_str());
      continue;
    }
    std::printf("%-18s used %s of %s, budget %s, daemons hold %s%s%s%s\n", ("gpu " + m.gpu).c_str(),
                gb_text(double(m.used_bytes)).c_str(), gb_text(double(m.total_bytes)).c_str(), gb_text(double(m.budget_bytes)).c_str(),
                gb_text(double(m.daemon_held_bytes)).c_str(),
                m.arena_bytes ? (" + KV arenas " + gb_text(double(m.arena_bytes)) + " (the engine's)").c_str() : "",
                m.standby_reserve_bytes ? (", standby reserve " + gb_text(double(m.standby_reserve_bytes))).c_str() : "",
                m.engine_share ? (", engine share " + std::to_string(*m.engine_share).substr(0, 6)).c_str() : "");
  }
  if (s.engine_share_refused) std::printf("%-18s %s\n", "engine refused", s.engine_share_refused->c_str());
  if (s.snapshot.is_object()) {
    const json& sn = s.snapshot;
    if (sn.value("enabled", false)) {
      std::printf("%-18s %zu artifact(s), created %d, restored %d, fallbacks %d%s\n", "snapshots",
                  sn.value("artifacts", json::array()).size(), sn.value("created", 0), sn.value("restored", 0),
                  sn.value("fallbacks", 0), sn.contains("job") && sn["job"].is_string() ? (", " + sn["job"].get<std::string>() + " running").c_str() : "");
      if (sn.contains("last_failure") && sn["last_failure"].is_object())
        std::printf("%-18s %s: %s\n", "snapshot failure", sn["last_failure"].value("id", "").c_str(),
                    sn["last_failure"].value("reason", "").c_str());
    } else if (sn.value("problem", "").find("does not list") == std::string::npos) {
      std::printf("%-18s unavailable: %s\n", "snapshots", sn.value("problem", "").c_str());
    }
  }
  if (s.standby) {
    const fr::status::StandbyStatus& sb = *s.standby;
    std::printf("%-18s %s at %s", "standby", sb.state.c_str(), sb.level.c_str());
    if (sb.pid > 0) std::printf(", pid %lld, age %.1f s", static_cast<long long>(sb.pid), sb.age_s);
    if (sb.state == "parked") std::printf(", holds %s of GPU memory", gb_text(double(sb.gpu_bytes)).c_str());
    std::printf(", %llu spawn(s), %llu release(s)", static_cast<unsigned long long>(sb.spawns),
                static_cast<unsigned long long>(sb.releases));
    if (sb.failures_in_row > 0) std::printf(", %lld failure(s) in a row", static_cast<long long>(sb.failures_in_row));
    if (sb.state == "backoff") std::printf(", next in %.2f s", sb.backoff_s);
    if (sb.release_to_ready_s) {
      std::printf("; last release: ");
      if (sb.death_to_release_s) std::printf("death +%.3f s released, ", *sb.death_to_release_s);
      std::printf("+%.3f s ready", *sb.release_to_ready_s);
      if (sb.death_to_ready_s) std::printf(" (%.3f s from the death)", *sb.death_to_ready_s);
    }
    std::printf("\n");
    if (!sb.disabled.empty()) std::printf("%-18s %s\n", "standby disabled", sb.disabled.c_str());
    else if (!sb.last_failure.empty()) std::printf("%-18s %s\n", "standby failure", sb.last_failure.c_str());
  }
  if (s.front) {
    const fr::status::FrontStatus& f = *s.front;
    const auto& req = f.requests;
    auto u = [](uint64_t n) { return static_cast<unsigned long long>(n); };
    std::printf("%-18s %s", "front", f.state.c_str());
    if (f.pid > 0) std::printf(", pid %lld", static_cast<long long>(f.pid));
    std::printf(", to %s, %llu restart(s)", f.upstream.c_str(), u(f.restarts));
    if (!f.last_exit.empty()) std::printf(" (last exit: %s)", f.last_exit.c_str());
    std::printf(", %llu connection(s)\n", u(f.connections));
    std::printf("%-18s %llu received, %llu answered, %llu held now, %llu held, %llu re-sent, %llu continued, "
                "%llu lost in dead fronts\n", "front requests", u(req.received), u(req.answered), u(req.held_now), u(req.held),
                u(req.resent), u(req.continued), u(req.lost));
    std::string failed, rejected;
    for (const auto& [k, n] : req.failed)
      if (n) failed += (failed.empty() ? "" : ", ") + k + " " + std::to_string(n);
    for (const auto& [k, n] : req.rejected)
      if (n) rejected += (rejected.empty() ? "" : ", ") + k + " " + std::to_string(n);
    std::printf("%-18s %s; rejected: %s\n", "front failed", failed.empty() ? "none" : failed.c_str(),
                rejected.empty() ? "none" : rejected.c_str());
  }
  if (!s.failure.empty()) std::printf("%-18s %s\n", "failure", s.failure.c_str());
  return true;
}

// `check` without a running fastrestartd: the config file's flags (and the push) against the rules.
fr::Result<json> check_offline(const std::string& config, const json& req) {
  using namespace fr::supervisor;
  if (config.empty()) return fr::make_error(fr::Errc::kInvalidArgument, "check --offline needs --config FILE");
  FR_ASSIGN(Config c, load_config(config));
  FR_TRY(check_engine_config(c));
  FR_ASSIGN(FlagList next, pushed_flags(req, c.engine.flags, "check"));
  FR_ASSIGN(auto kind, make_engine_adapter(c));
  // No engine report, and fastrestartd's own environment is not this command's: only engine.env is checked.
  // No "would": what a push does depends on the running flags, which only fastrestartd knows.
  return check_reply({c, *kind, c.engine.flags, /*own_environment=*/false}, next, /*with_would=*/false);
}

int print_check(const json& r, bool as_json) {
  const auto findings = r.value("findings", json::array());
  bool errors = false;
  for (const auto& f : findings) errors |= f.value("severity", "") == "error";
  if (as_json) {
    std::cout << r.dump(2) << "\n";
    return errors ? kCheckFailed : kOk;
  }
  if (r["checked_against"].is_object())
    std::printf("checked against vLLM %s (%s)\n", r["checked_against"].value("version", "").c_str(),
                r["checked_against"].value("source", "").c_str());
  else
    std::printf("engine.kind = \"%s\": no vLLM rules apply\n", r.value("kind", "").c_str());
  for (const auto& f : findings) std::printf("%s: %s\n", f.value("severity", "").c_str(), f.value("message", "").c_str());
  std::string aff;
  for (const auto& a : r.value("daemon_affecting", json::array())) aff += (aff.empty() ? "" : ", ") + a.get<std::string>();
  if (!aff.empty()) std::printf("changes what the weight daemons hold: %s (a push reloads them cold)\n", aff.c_str());
  if (r.contains("would")) std::printf("a push would: %s\n", r.value("would", "").c_str());
  std::printf("%s\n", errors ? "FAIL: vLLM would not start with these flags" : "ok");
  return errors ? kCheckFailed : kOk;
}

void print_snapshot(const std::string& action, const json& r) {
  if (action == "list") {
    std::printf("%-22s %-20s %10s %10s %s\n", "ID", "CREATED (UTC)", "SIZE", "CREATE", "NOTE");
    for (const auto& s : r.value("snapshots", json::array())) {
      char when[32] = "-";
      if (s.contains("created_unix")) {
        std::time_t t = static_cast<std::time_t>(s["created_unix"].get<double>());
        std::tm tm{};
        ::gmtime_r(&t, &tm);
        std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
      }
      std::string note = s.contains("error") ? s["error"].get<std::string>()
                         : s.value("failed_here", false) ? "restore failed here" : s.value("cuda", false) ? "gpu" : "cpu";
      std::printf("%-22s %-20s %10s %8.2f s %s\n", s.value("id", "").c_str(), when, gb_text(s.value("image_bytes", 0.0)).c_str(),
                  s.value("create_s", 0.0), note.c_str());
    }
    return;
  }
  if (action == "inspect") {
    std::cout << r["manifest"].dump(2) << "\n";
    const json& be = r["break_even"];
    if (be["restores"].is_number())
      std::printf("break-even: %lld restore(s) pay back the %.2f s creation (restore %.2f s vs %s start %.2f s)\n",
                  static_cast<long long>(be["restores"].get<int64_t>()), be.value("create_s", 0.0), be.value("restore_s", 0.0),
                  be.value("normal_path", "").c_str(), be.value("normal_start_s", 0.0));
    else
      std::printf("break-even: unknown (%s)\n", be.value("note", "").c_str());
    return;
  }
  if (action == "create" && (!r.contains("restore") || r["restore"].is_null())) {
    std::printf("%s\n", r.value("message", "created").c_str());  // created, not restored: the reply says why
    return;
  }
  if (action == "create") {
    const json& c = r["created"];
    std::printf("created snapshot %s in %.2f s (%s); restored as the live engine in %.2f s (oracle matched)\n",
                c.value("id", "").c_str(), c.value("create_s", 0.0), gb_text(c.value("image_bytes", 0.0)).c_str(),
                r["start"].value("time_to_ready_s", 0.0));
    return;
  }
  std::printf("%s\n", r.value("message", "done").c_str());
}

int report(const fr::Result<json>& r, bool as_json) {
  if (!r.ok()) {
    std::fprintf(stderr, "fastrestartctl: %s\n", r.error().message.c_str());
    return kFail;
  }
  if (as_json) std::cout << r->dump(2) << "\n";
  if (!r->value("ok", false)) {
    const auto& e = (*r)["error"];
    if (!as_json) std::fprintf(stderr, "fastrestartctl: %s\n", e.value("message", "failed").c_str());
    return e.value("code", "") == "rolled_back" ? kRolledBack : kFail;
  }
  return kOk;
}

// "unknown subcommand 'X' (valid: ...)" when the first word after the global options names no subcommand;
// "" otherwise (CLI11 alone says only "A subcommand is required").
template <typename Subs>
std::string unknown_subcommand(int argc, char** argv, const Subs& subs) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--socket" || a == "--config" || a == "--name") {
      ++i;  // its value
      continue;
    }
    if (a.starts_with("-")) continue;
    std::string valid;
    for (const auto& s : subs) {
      if (a == s.name) return "";
      valid += (valid.empty() ? "" : ", ") + std::string(s.name);
    }
    return "unknown subcommand '" + a + "' (valid: " + valid + ")";
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fastrestartctl: control fastrestartd (docs/supervisor.md)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("fastrestartctl ") + FASTRESTART_VERSION, "print the version and exit");
  std::string sock, config, name;
  app.add_option("--socket", sock, "control socket of fastrestartd");
  app.add_option("--config", config, "derive the socket from this model config");
  app.add_option("--name", name, "derive the default socket from the model name");
  bool as_json = false, no_wait = false, offline = false;
  std::string flags, add_flags, remove_flags;
  double interval = 1.0;
  std::string snap_action, snap_id;
  int rc = kOk;
  auto socket_path = [&]() -> std::string {
    if (!sock.empty()) return sock;
    if (!config.empty()) {
      auto c = fr::supervisor::load_config(config);
      if (c.ok()) return c->control.socket.empty() ? fr::supervisor::default_control_socket(c->name) : c->control.socket;
      std::fprintf(stderr, "fastrestartctl: %s\n", c.error().message.c_str());
      std::exit(kUsage);
    }
    if (!name.empty()) return fr::supervisor::default_control_socket(name);
    // No target: the one instance on this machine, if there is exactly one.
    const auto dirs = fr::supervisor::control_socket_dirs();
    const auto live = fr::supervisor::live_control_sockets(dirs);
    if (live.size() == 1) return live[0];
    auto list = [](const std::vector<std::string>& v) {
      std::string out;
      for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
      return out;
    };
    if (live.empty())
      std::fprintf(stderr, "fastrestartctl: no fastrestartd found (no live control socket in %s); give --socket, --config or --name\n",
                   list(dirs).c_str());
    else
      std::fprintf(stderr, "fastrestartctl: %zu fastrestartd instances (%s); choose one with --name NAME, --config or --socket\n",
                   live.size(), list(live).c_str());
    std::exit(kUsage);
  };
  struct Sub {
    const char* name;
    const char* help;
    std::function<void(CLI::App*)> setup;
    std::function<int()> run;
  };
  auto simple = [&](const char* op) {
    return [&, op] { return report(call(socket_path(), {{"op", op}}, 30), as_json); };
  };
  std::vector<Sub> subs = {
      {"status", "state, engine, restarts, daemons, memory", [&](CLI::App* s) { s->add_flag("--json", as_json); },
       [&] {
         auto r = call(socket_path(), {{"op", "status"}}, 10);
         if (r.ok() && r->value("ok", false) && !as_json) {
           return print_status((*r)["status"]) ? kOk : kFail;
         }
         if (r.ok() && as_json && r->value("ok", false)) {
           std::cout << (*r)["status"].dump(2) << "\n";
           return kOk;
         }
         return report(r, as_json);
       }},
      {"watch", "refresh the status table until interrupted", [&](CLI::App* s) { s->add_option("--interval", interval); },
       [&] {
         for (;;) {
           auto r = call(socket_path(), {{"op", "status"}}, 10);
           std::printf("\033[H\033[2J");
           if (!r.ok() || !r->value("ok", false)) return report(r, false);
           if (!print_status((*r)["status"])) return kFail;
           std::fflush(stdout);
           std::this_thread::sleep_for(std::chrono::duration<double>(interval));
         }
       }},
      {"reload", "push engine flags; waits and reports the path taken (exit 3: rolled back)",
       [&](CLI::App* s) {
         s->add_option("--flags", flags, "replace the engine flags with these (none of the three: re-read the config file)");
         s->add_option("--add-flags", add_flags, "override or append these flags");
         s->add_option("--remove-flags", remove_flags, "drop these flags (names)");
         s->add_flag("--no-wait", no_wait, "return once the reload has started");
         s->add_flag("--wait", [&](int64_t) { no_wait = false; }, "wait until ready (default; for ExecReload=)");
         s->add_flag("--json", as_json);
       },
       [&] {
         json req{{"op", "reload"}, {"wait", !no_wait}};
         if (!remove_flags.empty()) req["flags"] = remove_flags, req["mode"] = "remove";
         else if (!add_flags.empty()) req["flags"] = add_flags, req["mode"] = "add";
         else if (!flags.empty()) req["flags"] = flags, req["mode"] = "replace";
         // No flags at all: the supervisor re-reads its config file (systemctl reload).
         auto r = call(socket_path(), req, 7 * 86400.0);
         int code = report(r, as_json);
         if (code == kOk && !as_json && no_wait && !r->contains("path")) {
           // Accepted, not done: say so, and how to see the outcome.
           std::printf("reload accepted (%s): fastrestartd is restarting the engine on the new flags; follow it with "
                       "`fastrestartctl status` or `watch` (ready again: done; a rollback shows in the log and in "
                       "metrics.reloads.rolled_back)\n",
                       r->value("cold", false) ? "cold: the weight daemons reload" : "warm");
           return code;
         }
         if (r.ok() && !as_json && r->contains("path")) {
           std::string f;
           for (const auto& w : r->value("flags", json::array())) f += (f.empty() ? "" : " ") + w.get<std::string>();
           std::printf("%s: path %s in %.2f s%s\neffective flags: %s\n", code == kOk ? "reloaded" : "ROLLED BACK",
                       r->value("path", "").c_str(), r->value("time_to_ready_s", 0.0),
                       r->value("cold_reload", false) ? " (daemons reloaded cold)" : "", f.c_str());
         }
         return code;
       }},
      {"check", "would vLLM start with these flags? (no change is made; exit 4: it would not)",
       [&](CLI::App* s) {
         s->add_option("--flags", flags, "check these flags in place of the current ones");
         s->add_option("--add-flags", add_flags, "check the current flags with these overridden or appended");
         s->add_option("--remove-flags", remove_flags, "check the current flags without these");
         s->add_flag("--offline", offline, "check the config file (--config) without asking fastrestartd");
         s->add_flag("--json", as_json);
       },
       [&] {
         json req{{"op", "check"}};
         if (!remove_flags.empty()) req["flags"] = remove_flags, req["mode"] = "remove";
         else if (!add_flags.empty()) req["flags"] = add_flags, req["mode"] = "add";
         else if (!flags.empty()) req["flags"] = flags, req["mode"] = "replace";
         fr::Result<json> r = offline ? check_offline(config, req) : call(socket_path(), req, 30);
         if (!r.ok() || !r->value("ok", false)) return report(r, as_json);
         return print_check(*r, as_json);
       }},
      {"restart", "restart the engine (warm)", [&](CLI::App* s) { s->add_flag("--json", as_json); }, simple("restart")},
      {"stop-engine", "stop the engine and keep it stopped", [&](CLI::App* s) { s->add_flag("--json", as_json); }, simple("stop-engine")},
      {"start-engine", "start a stopped engine", [&](CLI::App* s) { s->add_flag("--json", as_json); }, simple("start-engine")},
      {"snapshot", "engine snapshots: create | list | inspect [ID] | restore [ID] | delete ID (docs/snapshot.md)",
       [&](CLI::App* s) {
         s->require_subcommand(1);
         for (const char* a : {"create", "list", "inspect", "restore", "delete"}) {
           CLI::App* x = s->add_subcommand(a, std::string(a) + " a snapshot");
           if (std::string(a) != "list") x->add_option("id", snap_id, "artifact id (create: optional name; default: newest)");
           x->add_flag("--json", as_json);
           x->callback([&snap_action, a] { snap_action = a; });
         }
       },
       [&] {
         json req{{"op", "snapshot"}, {"action", snap_action}};
         if (!snap_id.empty()) req["id"] = snap_id;
         auto r = call(socket_path(), req, snap_action == "create" ? 7 * 86400.0 : 60);
         if (as_json || !r.ok() || !r->value("ok", false)) return report(r, as_json);
         print_snapshot(snap_action, *r);
         return kOk;
       }},
      {"daemons", "the weight daemons (JSON)", [](CLI::App*) {}, [&] { return report(call(socket_path(), {{"op", "daemons"}}, 30), true); }},
  };
  for (auto& s : subs) {
    CLI::App* sub = app.add_subcommand(s.name, s.help);
    s.setup(sub);
    sub->callback([&rc, &s] { rc = s.run(); });
  }
  if (auto unknown = unknown_subcommand(argc, argv, subs); !unknown.empty()) {
    std::fprintf(stderr, "fastrestartctl: %s\n", unknown.c_str());
    return kUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kOk : kUsage;
  }
  return rc;
}
