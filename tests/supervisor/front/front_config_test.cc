// engine.listen = "front" and the [front] keys (docs/config.md, docs/front.md "Running it"): parsing, the
// errors that name the file and the field, the reload's refusal of a front change, where the engine serves,
// and the front's command line.
#include <gtest/gtest.h>

#include <string>

#include "supervisor/config.h"
#include "supervisor/front/front_process.h"

namespace fr::supervisor {
namespace {

const std::string kFrontPath = "/etc/fastrestart/front.toml";

const std::string kFrontHead = R"([engine]
command = ["fastrestart-tinyengine", "serve"]
listen = "front"
port = 8000
[weights]
mode = "off"
)";

Result<Config> parse_front(const std::string& text) { return parse_config(text, kFrontPath); }

// The parse fails naming "<file>:<line>: <key>: " and holding each of `parts`.
void expect_front_error(const std::string& text, int line, const std::string& key, std::initializer_list<std::string> parts = {}) {
  auto r = parse_front(text);
  ASSERT_FALSE(r.ok()) << "parsed: " << text;
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  const std::string& m = r.error().message;
  const std::string prefix = kFrontPath + ":" + std::to_string(line) + ": " + key + ": ";
  EXPECT_EQ(m.rfind(prefix, 0), 0u) << m << "\nexpected prefix: " << prefix;
  for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m << "\nmissing: " << p;
}

TEST(FrontConfig, DefaultsAndEveryKey) {
  auto d = parse_front(kFrontHead);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->engine.listen, EngineListen::kFront);
  EXPECT_STREQ(engine_listen_name(EngineListen::kFront), "front");
  EXPECT_EQ(d->front.hold_s, 30);
  EXPECT_EQ(d->front.max_held_requests, 1024);
  EXPECT_EQ(d->front.max_body_bytes, 1u << 20);
  EXPECT_EQ(d->front.max_response_bytes, 16u << 20);
  EXPECT_EQ(d->front.stop_grace_s, 10);
  EXPECT_EQ(d->front.path, "");
  EXPECT_EQ(d->front.upstream_port, 0);

  auto r = parse_front(kFrontHead + R"([front]
hold_s = 12.5
max_held_requests = 7
max_body_bytes = 4096
max_response_bytes = 8388608
stop_grace_s = 3
path = "/opt/fr/fastrestart-front"
upstream_port = 18001
)");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->front.hold_s, 12.5);
  EXPECT_EQ(r->front.max_held_requests, 7);
  EXPECT_EQ(r->front.max_body_bytes, 4096u);
  EXPECT_EQ(r->front.max_response_bytes, 8388608u);
  EXPECT_EQ(r->front.stop_grace_s, 3);
  EXPECT_EQ(r->front.path, "/opt/fr/fastrestart-front");
  EXPECT_EQ(r->front.upstream_port, 18001);
}

TEST(FrontConfig, BadValuesNameTheFileAndTheField) {
  const std::string h = kFrontHead + "[front]\n";  // [front] is line 7; the key line 8
  expect_front_error(h + "hold_s = 0\n", 8, "front.hold_s", {"> 0"});
  expect_front_error(h + "hold_s = \"30\"\n", 8, "front.hold_s");
  expect_front_error(h + "max_held_requests = 0\n", 8, "front.max_held_requests", {"got 0"});
  expect_front_error(h + "max_body_bytes = -1\n", 8, "front.max_body_bytes", {"got -1"});
  expect_front_error(h + "max_response_bytes = 0\n", 8, "front.max_response_bytes", {"got 0"});
  expect_front_error(h + "stop_grace_s = -2\n", 8, "front.stop_grace_s");
  expect_front_error(h + "max_idle_connections = -1\n", 8, "front.max_idle_connections", {"got -1"});
  expect_front_error(h + "path = \"fastrestart-front\"\n", 8, "front.path");
  expect_front_error(h + "upstream_port = 70000\n", 8, "front.upstream_port", {"0..65535"});
  expect_front_error(h + "upstream_port = 8000\n", 8, "front.upstream_port", {"engine.port"});
  expect_front_error(h + "hold = 3\n", 8, "front.hold", {"unknown key", "hold_s"});
  expect_front_error("[engine]\ncommand = [\"x\"]\nlisten = \"fronts\"\n", 3, "engine.listen", {"engine", "supervisor", "front"});
}

// [front] with another listen mode is an error, not ignored: the front would not run.
TEST(FrontConfig, FrontKeysNeedListenFront) {
  const std::string engine_mode = "[engine]\ncommand = [\"x\"]\nlisten = \"supervisor\"\n[weights]\nmode = \"off\"\n";
  expect_front_error(engine_mode + "[front]\nhold_s = 5\n", 7, "front.hold_s",
                     {"applies to engine.listen = \"front\" only", "got engine.listen = \"supervisor\""});
  expect_front_error("[engine]\ncommand = [\"x\"]\n[weights]\nmode = \"off\"\n[front]\n", 5, "[front]",
                     {"got engine.listen = \"engine\""});
}

TEST(FrontConfig, ThePrivateEndpointWorksWithTheFront) {
  auto r = parse_front(kFrontHead + "[readiness]\nendpoint = \"private\"\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->readiness.endpoint, ReadinessEndpoint::kPrivate);
}

// The engine serves on fastrestartd's loopback socket; engine.host:engine.port is the front's.
TEST(FrontConfig, WhereTheEngineServes) {
  auto c = parse_front("[engine]\ncommand = [\"x\"]\nlisten = \"front\"\nhost = \"0.0.0.0\"\nport = 8000\n[weights]\nmode = \"off\"\n");
  ASSERT_TRUE(c.ok()) << c.error().message;
  c->front.bound_upstream_port = 41234;
  EXPECT_EQ(engine_serve_host(*c), "127.0.0.1");
  EXPECT_EQ(engine_serve_port(*c), 41234);
  c->engine.listen = EngineListen::kSupervisor;
  EXPECT_EQ(engine_serve_host(*c), "0.0.0.0");
  EXPECT_EQ(engine_serve_port(*c), 8000);
}

// A reload that changes [front] is refused, naming each key; engine.listen_backlog is fixed as with "supervisor".
TEST(FrontConfig, AReloadThatChangesTheFrontIsRefused) {
  FrontConfig a, b;
  EXPECT_EQ(front_change(a, b), "");
  b.hold_s = 60;
  b.max_held_requests = 8;
  const std::string why = front_change(a, b);
  EXPECT_NE(why.find("front.hold_s 30 -> 60"), std::string::npos) << why;
  EXPECT_NE(why.find("front.max_held_requests 1024 -> 8"), std::string::npos) << why;
  EXPECT_NE(why.find("restart of fastrestartd"), std::string::npos) << why;
  b = a;
  b.bound_upstream_port = 5;  // not a key: the running socket's port, never a change
  EXPECT_EQ(front_change(a, b), "");

  EngineConfig e1, e2;
  e1.listen = e2.listen = EngineListen::kFront;
  e2.listen_backlog = 16;
  EXPECT_NE(address_change(e1, e2).find("engine.listen_backlog 4096 -> 16"), std::string::npos);
  e2 = e1;
  e2.listen = EngineListen::kSupervisor;
  EXPECT_NE(address_change(e1, e2).find("engine.listen \"front\" -> \"supervisor\""), std::string::npos);
}

TEST(FrontConfig, TheFrontsCommandLine) {
  auto c = parse_front(kFrontHead + "[front]\nhold_s = 2.5\nmax_held_requests = 9\nmax_body_bytes = 100\n"
                                    "max_response_bytes = 200\nstop_grace_s = 4\nmax_idle_connections = 7\n"
                                    "path = \"/opt/front\"\n");
  ASSERT_TRUE(c.ok()) << c.error().message;
  c->front.bound_upstream_port = 4321;
  const std::vector<std::string> want{"/opt/front", "--upstream", "127.0.0.1:4321", "--hold-s", "2.5",
                                      "--max-held-requests", "9", "--max-body-bytes", "100",
                                      "--max-response-bytes", "200", "--stop-grace-s", "4",
                                      "--max-idle-connections", "7", "--status-file", "/state/front.status.json"};
  EXPECT_EQ(front_argv(*c, "/state/front.status.json"), want);
}

TEST(FrontConfig, TheFrontsStatusFileIsRead) {
  status::FrontRequestsStatus r;
  int64_t pid = 0;
  uint64_t conns = 0;
  ASSERT_TRUE(read_front_counters(
      R"({"pid": 42, "connections": 3, "requests": {"received": 10, "answered": 7, "held": 2, "held_now": 1,
          "resent": 4, "continued": 0, "rejected": {"400": 1}, "failed": {"client_gone": 1, "stopping": 0}}})",
      r, &pid, &conns));
  EXPECT_EQ(pid, 42);
  EXPECT_EQ(conns, 3u);
  EXPECT_EQ(r.received, 10u);
  EXPECT_EQ(r.answered, 7u);
  EXPECT_EQ(r.held, 2u);
  EXPECT_EQ(r.held_now, 1u);
  EXPECT_EQ(r.resent, 4u);
  EXPECT_EQ(r.rejected.at("400"), 1u);
  EXPECT_EQ(r.failed.at("client_gone"), 1u);
  EXPECT_FALSE(read_front_counters("{\"pid\": 1}", r, &pid, &conns));
  EXPECT_FALSE(read_front_counters("not json", r, &pid, &conns));
}

}  // namespace
}  // namespace fr::supervisor
