// fastrestartd's side of docs/reliability.md "Security": where it agrees to put
// its control socket, and that no secret it holds (the engine's environment, secret flags, pushed flags)
// shows in /status, /metrics, fastrestartctl status or its log. The daemon's side: tests/daemon.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>

#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

// A config whose control socket lives at `ctl`; the engine is the tiny engine (never started when the
// socket is refused: fastrestartd checks it first).
std::string write_config(const test::TempDir& d, const std::string& ctl, const std::string& extra = "") {
  std::string cfg = d / "t.toml";
  std::ofstream(cfg) << "[engine]\ncommand = [\"" << FR_TINYENGINE_BIN << "\", \"serve\", \"/nonexistent\"]\n"
                     << "[weights]\nmode = \"off\"\n[control]\nsocket = \"" << ctl << "\"\nstate_dir = \"" << (d / "state")
                     << "\"\n[http]\nlisten = \"none\"\n" << extra;
  return cfg;
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
  std::string cfg = d / "t.toml";
  std::ofstream(cfg) << "[engine]\ncommand = [\"" << FR_TINYENGINE_BIN << "\", \"serve\", \"" << (d / "model")
                     << "\"]\nflags = [\"--port\", \"" << port << "\"]\nport = " << port << "\n[weights]\nmode = \"off\"\n"
                     << "[control]\nsocket = \"" << (d / "ctl/t.ctl") << "\"\nstate_dir = \"" << (d / "state") << "\"\n"
                     << "[http]\nlisten = \"none\"\n";
  ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", d / "model"}).exit_code, 0);
  test::Supervised sup(FR_FASTRESTARTD_BIN, cfg, d / "ctl/t.ctl", d / "d.log");
  sup.start();
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
  std::string cfg = d / "t.toml";
  std::ofstream(cfg) << "[model]\nname = \"t\"\n[engine]\ncommand = [\"" << FR_STRIP_SECRET_FLAGS << "\", \""
                     << FR_TINYENGINE_BIN << "\", \"serve\", \"" << (d / "model") << "\"]\n"
                     << "flags = [\"--port\", \"" << port << "\", \"--served-model-name\", \"t\", \"--api-key\", \"sk-flagsecret1\"]\n"
                     << "port = " << port << "\nenv = {HF_TOKEN = \"hf_envsecret2\", DB_PASSWORD = \"envsecret3\"}\n"
                     << "[weights]\nmode = \"off\"\n[readiness]\nmodel = \"t\"\npoll_interval_s = 0.05\n"
                     << "[control]\nsocket = \"" << (d / "ctl/t.ctl") << "\"\nstate_dir = \"" << (d / "state") << "\"\n"
                     << "[http]\nlisten = \"127.0.0.1:" << http << "\"\n";
  test::Supervised sup(FR_FASTRESTARTD_BIN, cfg, d / "ctl/t.ctl", d / "d.log");
  sup.start();
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

}  // namespace
}  // namespace fr
