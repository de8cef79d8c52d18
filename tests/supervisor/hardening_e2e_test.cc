// What an operator hits around a running fastrestartd, end to end with the real binaries (docs/supervisor.md,
// docs/operations.md): a second instance on the same config, engine processes that left the engine's group,
// a state directory that cannot be written, a stale engine.pgid, control characters in pushed flags, and the
// CLI's messages. Each test failed before its fix.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/unix_socket.h"
#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

// A tiny-engine checkpoint shared by every test of this file.
const std::string& model_dir() {
  static test::TempDir* dir = new test::TempDir;
  static std::string path = [] {
    std::string d = *dir / "model";
    auto r = test::run({FR_TINYENGINE_BIN, "gen", "--out", d, "--size", "4M"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d;
  }();
  return path;
}

// Waits until `pid` is gone (reaping what reparents to this test meanwhile); false on timeout.
bool gone(pid_t pid, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (::kill(pid, 0) != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The pid in the first log line holding `prefix` followed by a number; 0 when there is none.
pid_t pid_after(const std::string& log, const std::string& prefix) {
  auto at = log.find(prefix);
  return at == std::string::npos ? 0 : static_cast<pid_t>(std::strtol(log.c_str() + at + prefix.size(), nullptr, 10));
}

struct ModelSetup {
  std::string command;        // TOML array body of engine.command; default: the tiny engine
  std::string http = "none";  // http.listen
  std::string state_dir;      // default: <dir>/state
  std::string control;        // control.socket; default: <dir>/ctl/t.ctl
  uint16_t port = 0;          // engine.port; default: a free port
  std::string socket_dir;     // set: the weights through a native weight daemon (host backend) there
};

// One model: the tiny engine loading from disk (no weight daemons), fast polls, a control socket and a
// state directory in a temporary directory.
class Model {
 public:
  explicit Model(const ModelSetup& s = {}, std::string binary = FR_FASTRESTARTD_BIN)
      : m_port(s.port ? s.port : test::free_port()) {
    m_state = s.state_dir.empty() ? m_dir / "state" : s.state_dir;
    m_control = s.control.empty() ? m_dir / "ctl/t.ctl" : s.control;
    std::vector<std::string> flags{"--shutdown-grace", "1"};
    if (!s.socket_dir.empty()) flags.insert(flags.end(), {"--load-format", "fastrestart", "--fastrestart-socket-dir", s.socket_dir});
    test::FastrestartdConfig c(m_dir.path());
    c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = model_dir(), .port = m_port, .host = "127.0.0.1", .flags = flags})
        .number("engine", "stop_grace_s", 3)
        .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05).number("readiness", "check_interval_s", 0.5)
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
        .control_socket(control()).text("control", "state_dir", m_state).text("http", "listen", s.http);
    if (!s.command.empty()) c.set("engine", "command", "[" + s.command + "]");
    if (s.socket_dir.empty()) c.text("weights", "mode", "off");
    else c.host_weights(model_dir(), s.socket_dir);
    c.write(config());
    m_sup = std::make_unique<test::Supervised>(binary, config(), control(), m_dir / "fastrestartd.log");
  }
  test::Supervised& sup() { return *m_sup; }
  std::string config() const { return m_dir / "t.toml"; }
  const std::string& control() const { return m_control; }
  const std::string& state() const { return m_state; }
  uint16_t port() const { return m_port; }
  const test::TempDir& dir() const { return m_dir; }
  test::RunResult ctl(std::vector<std::string> args) {
    std::vector<std::string> argv{FR_FASTRESTARTCTL_BIN, "--socket", control()};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run(argv);
  }
  json ready(double timeout_s = 60) {
    json s;
    EXPECT_TRUE(m_sup->wait_for([](const json& j) { return j.value("state", "") == "ready"; }, timeout_s, &s)) << m_sup->log();
    return s;
  }

 private:
  test::TempDir m_dir;
  uint16_t m_port;
  std::string m_state;
  std::string m_control;
  std::unique_ptr<test::Supervised> m_sup;
};

// ---------------------------------------------------------------------------------------------------
// 1. One fastrestartd per state directory.

void expect_second_instance_refused(Model& m, const json& first) {
  const pid_t engine = first["engine"]["pid"];
  auto second = test::run({"/usr/bin/timeout", "30", FR_FASTRESTARTD_BIN, "--config", m.config()});
  EXPECT_EQ(second.exit_code, 4) << second.output;
  EXPECT_NE(second.output.find("another fastrestartd (pid " + std::to_string(m.sup().pid()) + ")"), std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find("fastrestartd.lock"), std::string::npos) << second.output;
  // The first one is untouched: its engine, its control socket, its record of the engine's group.
  EXPECT_EQ(::kill(engine, 0), 0) << "the second instance killed the first one's engine";
  json s = m.sup().status();
  EXPECT_EQ(s.value("state", ""), "ready") << s.dump();
  EXPECT_EQ(s["engine"].value("pid", 0), engine);
  EXPECT_EQ(test::http_get(m.port(), "/health").status, 200);
  EXPECT_EQ(::access((m.state() + "/engine.pgid").c_str(), F_OK), 0) << "the second instance removed engine.pgid";
}

TEST(SecondInstance, WithTheHttpPortBusyExits4AndLeavesTheFirstsControlSocket) {
  const uint16_t http = test::free_port();
  ModelSetup setup;
  setup.http = "127.0.0.1:" + std::to_string(http);
  Model m(setup);
  m.sup().start();
  json first = m.ready();
  expect_second_instance_refused(m, first);
  EXPECT_EQ(test::http_get(http, "/ready").status, 200) << "the first one's HTTP listener";
  EXPECT_EQ(m.sup().stop(SIGTERM), 0) << m.sup().log();
}

TEST(SecondInstance, WithoutHttpExits4AndDoesNotKillTheFirstsEngine) {
  Model m;
  m.sup().start();
  json first = m.ready();
  expect_second_instance_refused(m, first);
  EXPECT_EQ(m.sup().log().find("killed process group"), std::string::npos) << m.sup().log();
  EXPECT_EQ(m.sup().stop(SIGTERM), 0) << m.sup().log();
}

// ---------------------------------------------------------------------------------------------------
// 1b. Two instances with different state directories sharing a control socket, an engine port or a weight
// daemon's socket: the second is refused with a line naming the first; the first keeps working.

void expect_refused_for_sharing(Model& second, Model& first, const json& first_status, const std::string& what) {
  auto r = test::run({"/usr/bin/timeout", "20", FR_FASTRESTARTD_BIN, "--config", second.config()});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("another fastrestartd (pid " + std::to_string(first.sup().pid()) + ", state directory " +
                          first.state()),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(what), std::string::npos) << r.output;
  const pid_t engine = first_status["engine"]["pid"];
  EXPECT_EQ(::kill(engine, 0), 0) << "the second instance killed the first one's engine";
  json s = first.sup().status();  // over the first one's control socket
  EXPECT_EQ(s.value("state", ""), "ready") << s.dump();
  EXPECT_EQ(s["engine"].value("pid", 0), engine);
  EXPECT_EQ(test::http_get(first.port(), "/health").status, 200);
}

TEST(SecondInstance, OnTheSameControlSocketExits4NamingTheFirst) {
  Model first;
  first.sup().start();
  json s = first.ready();
  ModelSetup setup;
  setup.control = first.control();
  Model second(setup);
  expect_refused_for_sharing(second, first, s, "control socket " + first.control());
  EXPECT_EQ(first.ctl({"status"}).exit_code, 0) << "the first one's control socket was unlinked";
  EXPECT_EQ(first.sup().stop(SIGTERM), 0) << first.sup().log();
}

TEST(SecondInstance, OnTheSameEnginePortExits4NamingTheFirst) {
  Model first;
  first.sup().start();
  json s = first.ready();
  ModelSetup setup;
  setup.port = first.port();
  Model second(setup);
  expect_refused_for_sharing(second, first, s, "port " + std::to_string(first.port()));
  EXPECT_EQ(first.sup().status()["restarts"].value("crash", 0), 0) << first.sup().status().dump();
  EXPECT_EQ(first.sup().stop(SIGTERM), 0) << first.sup().log();
}

TEST(SecondInstance, OnTheSameWeightDaemonSocketExits4NamingTheFirst) {
  test::TempDir shared;
  const std::string run = shared / "run";
  ModelSetup a;
  a.socket_dir = run;
  Model first(a);
  first.sup().start();
  json s = first.ready();
  ASSERT_FALSE(s["daemons"].empty()) << s.dump();
  const pid_t daemon = s["daemons"][0].value("pid", 0);
  ModelSetup b;
  b.socket_dir = run;
  Model second(b);
  expect_refused_for_sharing(second, first, s, "weight daemon on " + run + "/weightd-host.sock");
  json after = first.sup().status();
  EXPECT_EQ(after["daemons"][0].value("pid", 0), daemon) << after.dump();
  EXPECT_EQ(after["daemons"][0].value("state", ""), "ready") << after.dump();
  EXPECT_EQ(first.sup().stop(SIGTERM), 0) << first.sup().log();
}

// A live control socket whose server took no lock (a fastrestartd from before the claim, another program):
// refused naming the listener's pid, and the socket is not unlinked.
TEST(SecondInstance, OnALiveControlSocketWithoutALockExits4AndLeavesIt) {
  test::TempDir d;
  ModelSetup setup;
  setup.control = d / "ctl/t.ctl";
  ASSERT_EQ(::mkdir((d / "ctl").c_str(), 0700), 0);
  auto listener = listen_unix(setup.control, 0600);
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  Model m(setup);
  auto r = test::run({"/usr/bin/timeout", "20", FR_FASTRESTARTD_BIN, "--config", m.config()});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("the control socket " + setup.control + " is live (pid " + std::to_string(::getpid())),
            std::string::npos)
      << r.output;
  struct stat st {};
  EXPECT_EQ(::stat(setup.control.c_str(), &st), 0) << "the live socket was unlinked";
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
}

// ---------------------------------------------------------------------------------------------------
// 4. Engine processes that left the engine's process group.

TEST(EngineLeftovers, ASetsidChildHoldingThePortIsKilledBeforeTheNextStartAndOneAtStop) {
  test::TempDir d;
  // First start: a setsid'ed tiny engine serves the port (its own session, out of the engine's group) while
  // the script waits. Second: a setsid'ed sleeper, and the engine itself. A leftover prints its pid.
  const std::string script = d / "engine.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                        << "if [ ! -e " << (d / "first") << " ]; then\n  touch " << (d / "first") << "\n"
                        << "  setsid \"$0.bin\" \"$@\" &\n  echo \"leftover-port $!\"\n  wait\n  exit 1\nfi\n"
                        << "setsid sleep 1000 &\necho \"leftover-sleeper $!\"\nexec \"$0.bin\" \"$@\"\n";
  ::chmod(script.c_str(), 0755);
  ASSERT_EQ(::symlink(FR_TINYENGINE_BIN, (script + ".bin").c_str()), 0);
  ModelSetup setup;
  setup.command = "\"" + script + "\", \"serve\", \"" + model_dir() + "\"";
  Model m(setup);
  m.sup().start();
  json s = m.ready();
  const pid_t engine = s["engine"]["pid"];
  const pid_t holder = pid_after(m.sup().log(), "leftover-port ");
  ASSERT_GT(holder, 0) << m.sup().log();

  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  ASSERT_TRUE(m.sup().wait_for([&](const json& j) {
    return j.value("state", "") == "ready" && j["engine"].value("pid", 0) != engine;
  }, 60, &s)) << m.sup().log();
  EXPECT_TRUE(gone(holder, 10)) << "the leftover holding the port outlived the engine";
  const std::string log = m.sup().log();
  EXPECT_NE(log.find("killing an engine leftover pid " + std::to_string(holder)), std::string::npos) << log;
  EXPECT_EQ(s["restarts"].value("crash", 0), 1) << "the next engine must get the port at once: " << s.dump();

  const pid_t sleeper = pid_after(m.sup().log(), "leftover-sleeper ");
  ASSERT_GT(sleeper, 0) << m.sup().log();
  ASSERT_EQ(::kill(sleeper, 0), 0);
  EXPECT_EQ(m.sup().stop(SIGTERM), 0) << m.sup().log();
  EXPECT_TRUE(gone(sleeper, 10)) << "a leftover survived the stop";
  EXPECT_NE(m.sup().log().find("killing an engine leftover pid " + std::to_string(sleeper) + " (sleep: sleep 1000) at stop"),
            std::string::npos)
      << m.sup().log();
}

// ---------------------------------------------------------------------------------------------------
// 5. The state directory.

// A process group of our uid that is not an engine: the leader of its own group, sleeping.
pid_t unrelated_group() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  ::setpgid(pid, pid);
  return pid;
}

TEST(StaleEnginePgid, AnUnrelatedGroupOfTheSameUidIsNotKilled) {
  Model m;
  const pid_t other = unrelated_group();
  ASSERT_GT(other, 0);
  ::mkdir(m.state().c_str(), 0700);
  // A record from another boot, or of a group long gone whose id now leads someone else's group.
  std::ofstream(m.state() + "/engine.pgid") << other << " 12345\n";
  m.sup().start();
  m.ready();
  EXPECT_EQ(::waitpid(other, nullptr, WNOHANG), 0) << "fastrestartd killed an unrelated process group";
  const std::string log = m.sup().log();
  EXPECT_EQ(log.find("killed process group"), std::string::npos) << log;
  EXPECT_NE(log.find("process group " + std::to_string(other) + " is not the engine recorded there"), std::string::npos) << log;
  EXPECT_EQ(m.sup().stop(SIGTERM), 0);
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
}

// fastrestartd in a private mount namespace whose state directory is a tiny tmpfs the test fills.
TEST(StateDirectory, AFullStateDirFailsTheReloadWithTheReasonAndRollsBack) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a tmpfs in a private mount namespace)";
  test::TempDir d;
  const std::string state = d / "state";
  ASSERT_EQ(::mkdir(state.c_str(), 0700), 0);
  const std::string wrapper = d / "fastrestartd-ns.sh";
  std::ofstream(wrapper) << "#!/bin/sh\nexec /usr/bin/unshare -m --propagation private /bin/sh -c "
                         << "'mount -t tmpfs -o size=64k,mode=0700 fr-state " << state << " && exec \"$0\" \"$@\"' "
                         << FR_FASTRESTARTD_BIN << " \"$@\"\n";
  ::chmod(wrapper.c_str(), 0755);
  ModelSetup setup;
  setup.state_dir = state;
  Model m(setup, wrapper);
  m.sup().start();
  json s = m.ready();
  const std::string pid = std::to_string(m.sup().pid());
  auto in_ns = [&](const std::string& cmd) { return test::run({"/usr/bin/nsenter", "-t", pid, "-m", "/bin/sh", "-c", cmd}); };
  ASSERT_EQ(in_ns("grep -q ' " + state + " tmpfs' /proc/mounts").exit_code, 0) << "the state dir is not the private tmpfs";
  in_ns("dd if=/dev/zero of=" + state + "/fill bs=4k 2>/dev/null; true");

  auto r = m.ctl({"reload", "--add-flags", "--threads 3"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find(state + "/flags.json.tmp: No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rolled back to the last flags that were ready"), std::string::npos) << r.output;
  s = m.ready();
  EXPECT_EQ(s["flags"].dump().find("--threads"), std::string::npos) << "the engine runs flags that are not on disk: " << s["flags"];
  EXPECT_EQ(s["engine"]["flags"].dump().find("--threads"), std::string::npos) << s["engine"];
  EXPECT_NE(in_ns("test -e " + state + "/flags.json.tmp").exit_code, 0) << "a stray flags.json.tmp was left";
  EXPECT_EQ(m.sup().stop(SIGTERM), 0) << m.sup().log();
}

// ---------------------------------------------------------------------------------------------------
// 6. Control characters in pushed flags.

TEST(PushedFlags, ANulOrANewlineIsRefusedAndNothingRestarts) {
  Model m;
  m.sup().start();
  json s = m.ready();
  const pid_t engine = s["engine"]["pid"];
  auto nul = m.sup().request({{"op", "reload"}, {"mode", "add"}, {"flags", json::array({"--threads", std::string("3\0 9", 3)})}});
  ASSERT_TRUE(nul.ok()) << nul.error().message;
  EXPECT_EQ((*nul)["error"].value("code", ""), "invalid_argument") << nul->dump();
  EXPECT_NE((*nul)["error"].value("message", "").find("flags[1] \"3\\0 \": holds a control character (\\0 at byte 1)"),
            std::string::npos)
      << nul->dump();
  const std::string forged = "[2026-01-01 00:00:00.000] [fastrestartd] [info] READY: path warm";
  auto nl = m.ctl({"reload", "--add-flags", "--served-model-name 't\n" + forged + "'"});
  EXPECT_EQ(nl.exit_code, 1) << nl.output;
  EXPECT_NE(nl.output.find("flags[1] \"t\\n[2026-01-01"), std::string::npos) << nl.output;
  EXPECT_NE(nl.output.find("(\\n at byte 1)"), std::string::npos) << nl.output;
  s = m.sup().status();
  EXPECT_EQ(s["engine"].value("pid", 0), engine) << "nothing restarts";
  EXPECT_TRUE(s["restarts"].empty()) << s.dump();
  EXPECT_EQ(m.sup().log().find("\n" + forged), std::string::npos) << "a forged log line:\n" << m.sup().log();
  EXPECT_EQ(m.sup().stop(SIGTERM), 0);
}

// flags.json is read like a push: a word with a control character (a hand-edited or damaged file) is named,
// the file is left as it is, and the config's flags run.
TEST(PushedFlags, APersistedFileWithAControlCharacterIsNamedAndTheConfigsFlagsRun) {
  Model m;
  m.sup().start();
  const json first = m.ready();
  const json config_flags = first["flags"];
  EXPECT_EQ(m.sup().stop(SIGTERM), 0) << m.sup().log();
  json bad_flags = config_flags;
  bad_flags.push_back("--served-model-name");
  bad_flags.push_back("t\n[info] READY");
  const std::string file = m.state() + "/flags.json";
  const std::string text = json{{"flags", bad_flags}, {"config_flags", config_flags}}.dump(2) + "\n";
  std::ofstream(file) << text;
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);

  m.sup().start();
  const json s = m.ready();
  EXPECT_EQ(s["flags"], config_flags) << "the config's flags run";
  EXPECT_NE(m.sup().log().find(file + ": flags[" + std::to_string(bad_flags.size() - 1) + "] \"t\\n[info] READY\": holds a control character"),
            std::string::npos)
      << m.sup().log();
  std::ifstream in(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text) << "the file is left as it is";
  EXPECT_EQ(m.sup().stop(SIGTERM), 0);
}

TEST(PushedFlags, AControlCharacterInTheConfigsFlagsIsAConfigError) {
  test::TempDir d;
  const std::string cfg = d / "c.toml";
  std::ofstream(cfg) << "[engine]\ncommand = [\"x\"]\nflags = [\"--a\", \"b\\nc\"]\nport = 8000\n";
  auto r = test::run({FR_FASTRESTARTD_BIN, "--check", "--config", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(cfg + ":3: engine.flags[1] \"b\\nc\": holds a control character"), std::string::npos) << r.output;
}

// ---------------------------------------------------------------------------------------------------
// 7. The CLI's messages.

TEST(Cli, VersionOfBothPrograms) {
  for (const char* bin : {FR_FASTRESTARTD_BIN, FR_FASTRESTARTCTL_BIN}) {
    auto r = test::run({bin, "--version"});
    EXPECT_EQ(r.exit_code, 0) << bin << ": " << r.output;
    EXPECT_NE(r.output.find(FASTRESTART_VERSION), std::string::npos) << bin << ": " << r.output;
  }
}

TEST(Cli, AMistypedSubcommandIsNamedWithTheValidOnes) {
  auto r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", "/nonexistent.ctl", "stauts"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown subcommand 'stauts' (valid: status, watch, reload"), std::string::npos) << r.output;
}

TEST(Cli, ReloadNoWaitSaysItWasAcceptedAndARollbackSentenceEnds) {
  Model m;
  m.sup().start();
  m.ready();
  auto r = m.ctl({"reload", "--add-flags", "--threads 3", "--no-wait"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("reload accepted (warm)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fastrestartctl status"), std::string::npos) << r.output;
  ASSERT_TRUE(m.sup().wait_for([](const json& j) {
    return j.value("state", "") == "ready" && !j.value("reload_in_progress", true) && j["flags"].dump().find("\"3\"") != std::string::npos;
  }, 60)) << m.sup().log();
  auto bad = m.ctl({"reload", "--add-flags", "--max-model-len 999999"});
  EXPECT_EQ(bad.exit_code, 3) << bad.output;
  EXPECT_NE(bad.output.find("rolled back to the last flags that were ready, and the engine is ready on them again"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(m.sup().stop(SIGTERM), 0);
}

}  // namespace
}  // namespace fr
