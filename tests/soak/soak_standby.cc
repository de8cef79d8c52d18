// The soak with a standby (docs/reliability.md, "Soak with a standby"; docs/standby.md): the cycles that
// act on the standby, and the checks that hold after every cycle. Faults for a standby go through
// $FR_SOAK_STANDBY_FAULTS, which fault-engine.sh hands only to a process started as a standby (the
// engine's queue only to one that is not), so a queued fault always reaches the start it was meant for.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "soak/proc_scan.h"
#include "soak/soak.h"

namespace fr::soak {

using nlohmann::json;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The standby path's entry in last_start.start_paths.
json standby_attempt(const json& s) {
  if (!s.contains("last_start") || !s["last_start"].is_object()) return json::object();
  for (const auto& a : s["last_start"].value("start_paths", json::array()))
    if (a.value("path", "") == "standby") return a;
  return json::object();
}

int failures_of(const json& s, const char* reason) {
  return s["standby"].is_object() && s["standby"]["failures"].is_object() ? s["standby"]["failures"].value(reason, 0) : 0;
}

}  // namespace

pid_t Soak::parked_standby() {
  json s = m_sup->status();
  if (!s["standby"].is_object() || s["standby"].value("state", "") != "parked") return 0;
  return s["standby"].value("pid", 0);
}

pid_t Soak::replace_standby(const std::string& what) {
  const pid_t old = parked_standby();
  EXPECT_GT(old, 0) << what << ": no standby parked";
  if (old <= 0) return 0;
  ::kill(old, SIGKILL);
  json s;
  const bool ok = m_sup->wait_for([&](const json& j) {
    return j["standby"].is_object() && j["standby"].value("state", "") == "parked" && j["standby"].value("pid", 0) != old;
  }, 60, &s);
  EXPECT_TRUE(ok) << what << ": no standby parked after " << old << " was killed; last status " << s["standby"].dump();
  if (!ok) return 0;
  const pid_t pid = s["standby"]["pid"];
  m_seen.insert(pid);
  return pid;
}

int Soak::push_new_threads(int* exit_code) {
  const std::string flags = m_sup->status()["flags"].dump();
  int threads = uniform(21, 30);  // the other cycles push 2..20
  while (flags.find("\"--threads\",\"" + std::to_string(threads) + "\"") != std::string::npos) threads = threads == 30 ? 21 : threads + 1;
  auto r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", m_ctl, "reload", "--add-flags", "--threads " + std::to_string(threads)});
  if (exit_code) *exit_code = r.exit_code;
  else EXPECT_EQ(r.exit_code, 0) << r.output;
  return threads;
}

void Soak::check_standby(const json& s, const std::string& what) {
  const pid_t engine = s["engine"].value("pid", -1), standby = s["standby"].value("pid", -1);
  EXPECT_NE(engine, standby) << what << ": the standby is reported as the engine";
  // Processes fastrestartd started as standbys (their exec'ed environment keeps FASTRESTART_STANDBY_FD
  // after a release): besides the engine, only the parked one.
  std::vector<pid_t> standbys;
  for (const auto& c : children_of(m_sup->pid()))
    if (c.state != 'Z' && c.pid != engine && started_with_env(c.pid, "FASTRESTART_STANDBY_FD")) standbys.push_back(c.pid);
  EXPECT_EQ(standbys.size(), 1u) << what << ": standby processes alive: " << json(standbys).dump() << ", status says " << standby;
  if (standbys.size() == 1) {
    EXPECT_EQ(standbys[0], standby) << what << ": status names another standby";
  }
  // Its own process group, not the engine's.
  EXPECT_EQ(::getpgid(standby), standby) << what << ": the parked standby does not lead its own process group";
  EXPECT_NE(::getpgid(standby), ::getpgid(engine)) << what << ": the standby is in the engine's process group";
  // One socket listens on the engine's port, and the engine holds it.
  int sockets = 0;
  const std::vector<pid_t> holders = listening_pids(m_engine_port, &sockets);
  EXPECT_EQ(sockets, 1) << what << ": " << sockets << " sockets listen on the engine's port " << m_engine_port;
  for (pid_t p : holders) {
    EXPECT_NE(::getpgid(p), standby) << what << ": pid " << p << " of the standby's group listens on the engine's port";
    EXPECT_EQ(::getpgid(p), ::getpgid(engine)) << what << ": pid " << p << ", not the engine's, listens on its port";
  }
}

void Soak::watch_port() {
  // Every 20 ms through the run: more than one socket listening on the engine's port means two serve (or
  // a standby bound it before its release). Who holds them is the settled check's: scanning every
  // process's descriptors is too slow to poll, so it runs only when there are two.
  while (!m_stop_watch) {
    const int n = listening_sockets(m_engine_port);
    if (n > 1) {
      int again = 0;
      const std::vector<pid_t> holders = listening_pids(m_engine_port, &again);
      std::lock_guard<std::mutex> l(m_watch_mu);
      if (m_port_violations++ == 0) m_port_violation = std::to_string(n) + " sockets, held by " + json(holders).dump();
    }
    sleep_ms(20);
  }
}

// A parked standby dies: no engine exit; it is classified as the standby's, and another one parks.
Expect Soak::kill9_standby() {
  const int died = failures_of(m_sup->status(), "died");
  replace_standby("kill9_standby");
  EXPECT_EQ(failures_of(m_sup->status(), "died"), died + 1) << "the standby's death was not counted";
  Expect e;
  e.new_engine = false;
  return e;
}

// A standby that dies while parked: the parked one is killed and the next parks and dies 0.2 s later
// (--fault-standby die-parked-after=0.2). Both deaths are counted, the one after them is spawned after the
// backoff and parks; the path stays on (the soak's standby.max_failures is above any streak a run makes).
Expect Soak::standby_dies_while_parked() {
  const int died = failures_of(m_sup->status(), "died");
  queue_standby_faults("--fault-standby die-parked-after=0.2");
  const pid_t old = parked_standby();
  EXPECT_GT(old, 0) << "standby_dies_while_parked: no standby parked";
  if (old > 0) ::kill(old, SIGKILL);
  std::set<pid_t> seen;
  json s;
  const bool ok = m_sup->wait_for([&](const json& j) {
    if (!j["standby"].is_object()) return false;
    if (const pid_t p = j["standby"].value("pid", 0); p > 0) seen.insert(p);
    return failures_of(j, "died") >= died + 2 && j["standby"].value("state", "") == "parked";
  }, 60, &s);
  m_seen.insert(seen.begin(), seen.end());
  EXPECT_TRUE(ok) << "standby_dies_while_parked: no standby parked after two deaths: " << s["standby"].dump();
  if (ok) {
    EXPECT_EQ(failures_of(s, "died"), died + 2) << s["standby"].dump();
    EXPECT_EQ(s["standby"].value("disabled", ""), "") << s["standby"].dump();
  }
  Expect e;
  e.new_engine = false;
  return e;
}

// A standby that is still starting (it does its GPU-free work for 30 s) is killed: it never held the
// port; the next one parks.
Expect Soak::kill9_standby_starting() {
  queue_standby_faults("--fault-startup-delay 30");
  const pid_t parked = parked_standby();
  ::kill(parked, SIGKILL);
  json s;
  EXPECT_TRUE(m_sup->wait_for([&](const json& j) {
    return j["standby"].value("state", "") == "starting" && j["standby"].value("pid", 0) > 0 && j["standby"].value("pid", 0) != parked;
  }, 30, &s)) << "no standby starting after " << parked << " was killed: " << s["standby"].dump();
  const pid_t starting = s["standby"].value("pid", 0);
  m_seen.insert(starting);
  EXPECT_EQ(s["standby"].value("state", ""), "starting");
  if (starting > 0) {
    sleep_ms(uniform(0, 200));
    ::kill(starting, SIGKILL);
  }
  Expect e;
  e.new_engine = false;
  return e;
}

// The engine dies while its standby is still starting (2 s of GPU-free work): the standby is not used,
// the next path starts the engine, and the standby parks behind it.
Expect Soak::engine_dies_while_standby_starts() {
  queue_standby_faults("--fault-startup-delay 2");
  const pid_t parked = parked_standby();
  ::kill(parked, SIGKILL);
  json s;
  EXPECT_TRUE(m_sup->wait_for([&](const json& j) {
    return j["standby"].value("state", "") == "starting" && j["standby"].value("pid", 0) > 0 && j["standby"].value("pid", 0) != parked;
  }, 30, &s)) << "no standby starting after " << parked << " was killed: " << s["standby"].dump();
  m_seen.insert(s["standby"].value("pid", 0));
  const bool sigkill = uniform(0, 1) == 0;
  const pid_t old = engine_pid();
  ::kill(old, sigkill ? SIGKILL : SIGTERM);
  Expect e;
  e.required[sigkill ? "crash" : "unexpected_exit_0"]++;
  e.not_released = true;
  s = settle(old, true, "engine_dies_while_standby_starts: the next engine");
  if (!s.empty()) {
    EXPECT_EQ(standby_attempt(s).value("reason", ""), "not_parked") << s["last_start"].dump();
  }
  return e;
}

// A push that changes the flags: the engine restarts on another path (the standby runs the old flags),
// the old standby is stopped, and the next one that parks runs the new flags.
Expect Soak::flag_push() {
  const pid_t old_standby = parked_standby(), old = engine_pid();
  const int threads = push_new_threads();
  Expect e;
  e.required["requested"]++;
  e.not_released = true;
  json s = settle(old, true, "flag_push: the engine on the new flags");
  if (s.empty()) return e;
  const pid_t standby = s["standby"]["pid"];
  EXPECT_EQ(standby_attempt(s).value("detail", ""), "the standby was started on other flags") << s["last_start"].dump();
  EXPECT_NE(standby, old_standby);
  EXPECT_FALSE(running(old_standby)) << "flag_push: the standby on the old flags " << old_standby << " still runs";
  const std::string argv = cmdline(standby);
  EXPECT_NE(argv.find(std::string("--threads") + '\0' + std::to_string(threads) + '\0'), std::string::npos)
      << "flag_push: the new standby " << standby << " does not run --threads " << threads;
  return e;
}

// An engine fault for the start after a flag push (the standby cannot take it: its flags are the old
// ones), so the fault reaches the start on the next path. An engine that never became ready on the new
// flags rolls the push back (fastrestartctl exits 3; counted in status rollbacks, not in restarts).
Expect Soak::startup_fault_after_push() {
  static const std::pair<const char*, const char*> kFaults[] = {
      {"--fault-cuda-oom", "cuda_oom"},
      {"--fault-vllm-free-memory", "memory_utilization"},
      {"--fault-exit-after-startup --fault-exit-code 5", "crash"},
  };
  const auto& [flags, cause] = kFaults[uniform(0, 2)];
  queue_faults(flags);
  const json before = m_sup->status()["rollbacks"];
  int rc = -1;
  push_new_threads(&rc);
  Expect e;
  e.required["requested"]++;
  if (rc == 3) {
    const json after = m_sup->status()["rollbacks"];
    EXPECT_EQ(after.value("count", 0), before.value("count", 0) + 1) << after.dump();
    EXPECT_EQ(after["by_cause"].value(cause, 0), before["by_cause"].value(cause, 0) + 1) << after.dump();
    ++m_rollbacks;
  } else {
    EXPECT_EQ(rc, 0) << "startup_fault_after_push: fastrestartctl reload";
    e.required[cause]++;
  }
  return e;
}

// The standby fails after its release: it exits at once (exit-after-release), or serves the readiness
// probe and one request and exits 3. Either way the next path restarts the engine.
Expect Soak::faulty_standby() {
  const bool at_once = uniform(0, 1) == 0;
  queue_standby_faults(at_once ? "--fault-standby exit-after-release" : "--fault-exit-after-requests 2 --fault-exit-code 3");
  const pid_t standby = replace_standby("faulty_standby");
  const pid_t old = engine_pid();
  Expect e;
  if (uniform(0, 1) == 0) {
    ::kill(old, SIGKILL);
    e.required["crash"]++;
  } else {
    e = request_restart();
  }
  e.required["crash"]++;
  if (!at_once && standby > 0) {
    json s;
    const bool ok = m_sup->wait_for([&](const json& j) {
      return j.value("state", "") == "ready" && j["engine"].is_object() && j["engine"].value("pid", 0) == standby &&
             j["last_start"].is_object() && j["last_start"].value("pid", 0) == standby;
    }, 60, &s);
    EXPECT_TRUE(ok) << "faulty_standby: the released standby " << standby << " never became ready: " << s.dump();
    if (ok) {
      EXPECT_EQ(s["last_start"].value("path", ""), "standby") << s["last_start"].dump();
      check_oracle("faulty_standby: the released standby's one request");
    }
  }
  return e;
}

}  // namespace fr::soak
