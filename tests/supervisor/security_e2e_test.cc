// fastrestartd's side of docs/reliability.md "Security": where it agrees to put
// its control socket, and that no secret it holds (the engine's environment, secret flags, pushed flags)
// shows in /status, /metrics, fastrestartctl status or its log. The daemon's side: tests/daemon.
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

// A config whose control socket lives at `ctl`; the engine is the tiny engine (never started when the
// socket is refused: fastrestartd checks it first).
std::string write_config(const test::TempDir& d, const std::string& ctl, const std::string& extra = "") {
  return test::FastrestartdConfig(d.path())
      .words("engine", "command", {FR_TINYENGINE_BIN, "serve", "/nonexistent"})
      .text("weights", "mode", "off")
      .control_socket(ctl)
      .append(extra)
      .write();
}

TEST(FastrestartdSecurity, ASymlinkedControlSocketDirectoryIsRefused) {
  test::TempDir d;
  ASSERT_EQ(::mkdir((d / "real").c_str(), 0700), 0);
  ASSERT_EQ(::symlink((d / "real").c_str(), (d / "ctl").c_str()), 0);
  auto r = test::run({FR_FASTRESTARTD_BIN, "--config", write_config(d, d / "ctl/t.ctl")});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is a symlink"), std::string::npos) << r.output;
  EXPECT_FALSE(std::ifstream(d / "real/t.ctl").good()) << "nothing was created behind the link";
}

TEST(FastrestartdSecurity, AGroupOrWorldWritableControlSocketDirectoryIsRefused) {
  for (mode_t mode : {0770, 0777, 0720}) {
    test::TempDir d;
    ASSERT_EQ(::mkdir((d / "ctl").c_str(), 0700), 0);
    ASSERT_EQ(::chmod((d / "ctl").c_str(), mode), 0);
    auto r = test::run({FR_FASTRESTARTD_BIN, "--config", write_config(d, d / "ctl/t.ctl")});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    char want[32];
    std::snprintf(want, sizeof want, "has mode %04o", static_cast<unsigned>(mode));
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  }
}

TEST(FastrestartdSecurity, AnotherUidCannotUseTheControlSocket) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  test::TempDir d;
  const uint16_t port = test::free_port();
  test::FastrestartdConfig c(d.path());
  c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = d / "model", .port = port, .name = ""}).text("weights", "mode", "off");
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", d / "model"}).exit_code, 0);
  const auto sup_owner = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  test::Supervised& sup = *sup_owner;
  ASSERT_TRUE(sup.wait_for([](const json& s) { return s.value("state", "") == "ready"; }, 60)) << sup.log();
  // The directory (0700) keeps nobody out before the socket's own mode and SO_PEERCRED are even asked.
  auto r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", d / "ctl/t.ctl", "status"}, 65534, 65534);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("Permission denied"), std::string::npos) << r.output;
  // With the directory opened up behind fastrestartd's back, the socket mode (0600) still refuses.
  ASSERT_EQ(::chmod((d / "ctl").c_str(), 0711), 0);
  r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", d / "ctl/t.ctl", "restart"}, 65534, 65534);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Permission denied"), std::string::npos) << r.output;
  // And with the socket opened up too, SO_PEERCRED: fastrestartd answers with a refusal and logs it.
  ASSERT_EQ(::chmod((d / "ctl/t.ctl").c_str(), 0666), 0);
  r = test::run({FR_FASTRESTARTCTL_BIN, "--socket", d / "ctl/t.ctl", "restart"}, 65534, 65534);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("peer uid not allowed"), std::string::npos) << r.output;
  bool logged = false;  // the log line may reach the file just after the reply reached the client
  for (int i = 0; i < 500 && !logged; ++i, ::usleep(10000)) logged = sup.log().find("control: refused") != std::string::npos;
  EXPECT_TRUE(logged) << sup.log();
  EXPECT_EQ(sup.log().find("restart_requested"), std::string::npos) << "nobody restarted the engine";
  EXPECT_EQ(sup.stop(SIGTERM), 0) << sup.log();
}

// Secrets reach fastrestartd three ways: the engine's environment ([engine] env), secret flags in the
// config (--api-key), and flags pushed by a reload (--hf-token=...). None may show where others look.
TEST(FastrestartdSecurity, NoSecretInStatusMetricsCtlOrLog) {
  test::TempDir d;
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", d / "model"}).exit_code, 0);
  const uint16_t port = test::free_port(), http = test::free_port();
  test::FastrestartdConfig c(d.path());
  c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = d / "model", .port = port, .wrapper = {FR_STRIP_SECRET_FLAGS},
                 .flags = {"--api-key", "sk-flagsecret1"}})
      .set("engine", "env", "{HF_TOKEN = \"hf_envsecret2\", DB_PASSWORD = \"envsecret3\"}")
      .text("weights", "mode", "off").text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05)
      .http(http);
  const auto sup_owner = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  test::Supervised& sup = *sup_owner;
  ASSERT_TRUE(sup.wait_for([](const json& s) { return s.value("state", "") == "ready"; }, 60)) << sup.log();
  auto push = test::run({FR_FASTRESTARTCTL_BIN, "--socket", d / "ctl/t.ctl", "reload", "--add-flags", "--hf-token=hf_pushsecret4"});
  EXPECT_EQ(push.exit_code, 0) << push.output;
  ASSERT_TRUE(sup.wait_for([](const json& s) { return s.value("state", "") == "ready"; }, 60)) << sup.log();

  const std::vector<std::pair<std::string, std::string>> places = {
      {"/status", test::http_get(http, "/status").body},
      {"/metrics", test::http_get(http, "/metrics").body},
      {"fastrestartctl status --json", test::run({FR_FASTRESTARTCTL_BIN, "--socket", d / "ctl/t.ctl", "status", "--json"}).output},
      {"fastrestartctl status", test::run({FR_FASTRESTARTCTL_BIN, "--socket", d / "ctl/t.ctl", "status"}).output},
      {"fastrestartctl reload", push.output},
      {"the log", sup.log()},
  };
  for (const auto& [where, text] : places) {
    EXPECT_FALSE(text.empty()) << where;
    for (const char* secret : {"sk-flagsecret1", "hf_envsecret2", "envsecret3", "hf_pushsecret4"})
      EXPECT_EQ(text.find(secret), std::string::npos) << secret << " shows in " << where << ":\n" << text;
  }
  // The status says a flag was there, without its value.
  const std::string flags = json::parse(places[0].second, nullptr, false).value("flags", json::array()).dump();
  EXPECT_NE(flags.find("\"--api-key\",\"<redacted>\""), std::string::npos) << flags;
  EXPECT_NE(flags.find("\"--hf-token=<redacted>\""), std::string::npos) << flags;
  // The pushed flags persist (they must, to survive a restart) where only we can read them.
  struct stat st {};
  ASSERT_EQ(::stat((d / "state/flags.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((d / "state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(sup.stop(SIGTERM), 0) << sup.log();
}

// A datagram socket standing in for systemd's notify socket: every message fastrestartd sends (READY=1,
// STATUS=...) is read on a thread (a full queue would block sd_notify) and kept.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) {
    m_fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    m_bound = ::bind(m_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    m_reader = std::thread([this] {
      char buf[8192];
      while (!m_stop) {
        pollfd p{m_fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        ssize_t n = ::recv(m_fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) continue;
        std::lock_guard lock(m_mu);
        m_text.append(buf, static_cast<size_t>(n)).append("\n");
      }
    });
  }
  ~NotifySocket() {
    m_stop = true;
    m_reader.join();
    ::close(m_fd);
  }
  bool bound() const { return m_bound; }
  std::string text() {
    std::lock_guard lock(m_mu);
    return m_text;
  }

 private:
  int m_fd = -1;
  bool m_bound = false;
  std::atomic<bool> m_stop{false};
  std::mutex m_mu;
  std::string m_text;
  std::thread m_reader;
};

// Every input that carries a secret (multi-value and dash-leading --api-key values, --apikey=, a flag the
// config marks secret, every engine.env value, a pushed flag, a refused push, a push that fails and rolls
// back), against every output (status over the socket and HTTP, /metrics, fastrestartctl, replies, the log
// with the engine's own output that prints its arguments and environment, STATUS=, the state directory).
TEST(FastrestartdSecurity, ASecretPlantedInAnyInputShowsInNoOutput) {
  test::TempDir d;
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", d / "model"}).exit_code, 0);
  const uint16_t port = test::free_port(), http = test::free_port();
  test::FastrestartdConfig c(d.path());
  c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = d / "model", .port = port, .wrapper = {FR_ECHO_SECRETS_ENGINE},
                 .flags = {"--api-key", "-sk-dash-one1", "sk-multi-two2", "--apikey=sk-apikey3", "--custom-opt", "cust-secret4"}})
      .words("engine", "secret_flags", {"--custom-opt"})
      .set("engine", "env", "{HF_TOKEN = \"hf_envsecret5\", SECRET_B = \"envsecret6\"}")
      .text("weights", "mode", "off").text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05)
      .number("restart", "backoff_initial_s", 0.1)
      .http(http);
  NotifySocket notify(d / "notify.sock");
  ASSERT_TRUE(notify.bound());
  ::setenv("NOTIFY_SOCKET", (d / "notify.sock").c_str(), 1);
  const auto sup_owner = test::start_fastrestartd(FR_FASTRESTARTD_BIN, c);
  test::Supervised& sup = *sup_owner;
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(sup.wait_for([](const json& s) { return s.value("state", "") == "ready"; }, 60)) << sup.log();
  const std::string ctl = d / "ctl/t.ctl";
  // A push that is taken: a new --hf-token and more --api-keys values.
  auto taken = test::run({FR_FASTRESTARTCTL_BIN, "--socket", ctl, "reload", "--add-flags",
                          "--hf-token=hf_push7 --api-keys sk-push8 sk-push9"});
  EXPECT_EQ(taken.exit_code, 0) << taken.output;
  ASSERT_TRUE(sup.wait_for([](const json& s) { return s.value("state", "") == "ready"; }, 60)) << sup.log();
  // A push that is refused: its value holds a control character, and the refusal names the word.
  auto refused = sup.request({{"op", "reload"}, {"flags", {"--api-key", "sk-ctl\x01" "bad10"}}});
  ASSERT_TRUE(refused.ok()) << refused.error().message;
  EXPECT_FALSE(refused->value("ok", true)) << refused->dump();
  // A push whose engine fails to start: rolled back, with the engine's output (its arguments) in the log.
  auto failed = test::run({FR_FASTRESTARTCTL_BIN, "--socket", ctl, "reload", "--add-flags",
                           "--api-key sk-crash11 --no-such-flag"});
  EXPECT_NE(failed.exit_code, 0) << failed.output;
  ASSERT_TRUE(sup.wait_for([](const json& s) { return s.value("state", "") == "ready"; }, 60)) << sup.log();
  // The engine printed them all: the log would hold them but for the scrubbing.
  const std::vector<std::string> secrets = {"sk-dash-one1", "sk-multi-two2", "sk-apikey3", "cust-secret4",
                                            "hf_envsecret5", "envsecret6", "hf_push7", "sk-push8", "sk-push9",
                                            "bad10", "sk-crash11"};

  std::vector<std::pair<std::string, std::string>> places = {
      {"/status", test::http_get(http, "/status").body},
      {"/metrics", test::http_get(http, "/metrics").body},
      {"fastrestartctl status --json", test::run({FR_FASTRESTARTCTL_BIN, "--socket", ctl, "status", "--json"}).output},
      {"fastrestartctl status", test::run({FR_FASTRESTARTCTL_BIN, "--socket", ctl, "status"}).output},
      {"the taken push's reply", taken.output},
      {"the refused push's reply", refused->dump()},
      {"the failed push's reply", failed.output},
  };
  EXPECT_EQ(sup.stop(SIGTERM), 0) << sup.log();
  places.emplace_back("the log", sup.log());
  places.emplace_back("STATUS=", notify.text());
  for (const auto& e : std::filesystem::recursive_directory_iterator(d / "state")) {
    // flags.json holds the pushed flags in clear: the next start runs the engine with them (0600, below).
    if (!e.is_regular_file() || e.path().filename() == "flags.json") continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    places.emplace_back(e.path().string(), text.str() + " ");
  }
  EXPECT_NE(sup.log().find("engine args: "), std::string::npos) << sup.log();
  EXPECT_NE(notify.text().find("STATUS="), std::string::npos) << notify.text();
  for (const auto& [where, text] : places) {
    EXPECT_FALSE(text.empty()) << where;
    for (const auto& secret : secrets)
      EXPECT_EQ(text.find(secret), std::string::npos) << secret << " shows in " << where << ":\n" << text;
  }
  struct stat st {};
  ASSERT_EQ(::stat((d / "state/flags.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace fr
