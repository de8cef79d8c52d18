#include "supervisor/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace fr::supervisor {
namespace {

const std::string kPath = "/etc/fastrestart/llama.toml";

// The smallest valid file on the host backend; tests append the lines they are about.
const std::string kMinimal = R"(
[engine]
command = ["fastrestart-tinyengine", "serve"]
[weights]
backend = "host"
checkpoint = "/models/tiny"
)";

Result<Config> parse(const std::string& text) { return parse_config(text, kPath); }

// Asserts the parse fails with kInvalidArgument and a message starting "<kPath>:<line>: <key>: ", containing
// every one of `parts`.
void expect_error(const std::string& text, int line, const std::string& key,
                  std::initializer_list<std::string> parts = {}) {
  auto r = parse(text);
  ASSERT_FALSE(r.ok()) << "parsed: " << text;
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  const std::string& m = r.error().message;
  std::string prefix = kPath + ":" + std::to_string(line) + ": " + key + ": ";
  EXPECT_EQ(m.rfind(prefix, 0), 0u) << m << "\nexpected prefix: " << prefix;
  for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m << "\nmissing: " << p;
}

// The source tree comes from CMake (FR_SOURCE_DIR): __FILE__ is relative under CCACHE_BASEDIR or -ffile-prefix-map.
std::filesystem::path repo_root() { return FR_SOURCE_DIR; }

// ---- defaults and valid files

TEST(Config, DefaultsMatchTheHeader) {
  auto r = parse(R"(
gpus = [0]
[engine]
command = ["vllm", "serve"]
[weights]
checkpoint = "/models/llama"
)");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Config& c = *r;
  Config d;
  EXPECT_EQ(c.path, kPath);
  EXPECT_EQ(c.name, "llama");
  EXPECT_TRUE(c.engine.flags.empty());
  EXPECT_EQ(c.engine.kind, EngineKind::kGeneric);
  EXPECT_EQ(c.engine.host, "127.0.0.1");
  EXPECT_EQ(c.engine.port, 8000);
  EXPECT_TRUE(c.engine.env.empty());
  EXPECT_EQ(c.engine.stop_grace_s, 30);
  EXPECT_EQ(c.weights.mode, WeightsMode::kZeroCopy);
  EXPECT_EQ(c.weights.daemon, DaemonKind::kNative);
  EXPECT_EQ(c.weights.backend, "cuda");
  EXPECT_EQ(c.weights.reader_threads, 8);
  EXPECT_EQ(c.weights.load_timeout_s, 3600);
  EXPECT_EQ(c.memory.utilization, 0.9);
  EXPECT_TRUE(c.memory.check_free);
  EXPECT_EQ(c.memory.leak_tolerance_mib, 512);
  EXPECT_EQ(c.memory.settle_timeout_s, 30);
  EXPECT_EQ(c.memory.min_share, 0.05);
  EXPECT_EQ(c.readiness.health_path, "/health");
  EXPECT_EQ(c.readiness.request_path, "/v1/completions");
  EXPECT_EQ(c.readiness.prompt, d.readiness.prompt);
  EXPECT_EQ(c.readiness.max_tokens, 1);
  EXPECT_FALSE(c.readiness.expect_text.has_value());
  EXPECT_EQ(c.readiness.startup_timeout_s, 900);
  EXPECT_EQ(c.readiness.hang_after_failures, 3);
  EXPECT_EQ(c.restart.backoff_initial_s, 1);
  EXPECT_EQ(c.restart.backoff_max_s, 60);
  EXPECT_EQ(c.restart.backoff_multiplier, 2);
  EXPECT_EQ(c.restart.crash_loop_limit, 5);
  EXPECT_EQ(c.restart.warm_failures_before_cold, 2);
  EXPECT_EQ(c.restart.start, (std::vector<StartPath>{StartPath::kWarm, StartPath::kCold}));
  EXPECT_EQ(c.control.socket, "");
  EXPECT_EQ(c.http.listen, "127.0.0.1:9400");
  EXPECT_EQ(c.logging.level, "info");
}

TEST(Config, FullFileSetsEveryKey) {
  auto r = parse(R"(
gpus = [1, "GPU-5c8a9f2e-1d3b-4e6f-8a9b-0c1d2e3f4a5b"]
[model]
name = "llama-8b"
[engine]
command = ["vllm", "serve"]
flags = ["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "128"]
kind = "vllm"
host = "0.0.0.0"
port = 8001
env = { HF_HOME = "/var/cache/hf", VLLM_LOGGING_LEVEL = "INFO" }
working_dir = "/srv"
stop_grace_s = 12.5
[weights]
mode = "copy"
daemon = "native"
checkpoint = ["/models/a", "/models/b.safetensors"]
key = { arch = "llama", dtype = "bfloat16" }
backend = "cuda"
daemon_path = "/opt/fr/bin/fastrestart-weightd"
socket_dir = "/run/fr"
reader_threads = 16
load_timeout_s = 600
[memory]
utilization = 0.85
check_free = false
leak_tolerance_mib = 0
settle_timeout_s = 10
min_share = 0.1
[readiness]
health_path = "/healthz"
request_path = ""
model = "llama"
prompt = "Hi"
max_tokens = 2
expect_text = " Paris"
startup_timeout_s = 300
poll_interval_s = 0.5
check_interval_s = 2
check_timeout_s = 1
hang_after_failures = 4
[restart]
backoff_initial_s = 0
backoff_max_s = 300
backoff_multiplier = 1.5
reset_after_s = 60
crash_loop_limit = 10
crash_loop_window_s = 120
warm_failures_before_cold = 0
start = ["cold"]
[control]
socket = "/run/fr/llama.ctl"
group = "ops"
state_dir = "/var/lib/fr/llama"
[http]
listen = "[::1]:9500"
[logging]
level = "debug"
)");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Config& c = *r;
  EXPECT_EQ(c.name, "llama-8b");
  EXPECT_EQ(c.gpus, (std::vector<std::string>{"1", "GPU-5c8a9f2e-1d3b-4e6f-8a9b-0c1d2e3f4a5b"}));
  EXPECT_EQ(c.engine.flags.words().size(), 3u);
  EXPECT_EQ(c.engine.kind, EngineKind::kVllm);
  EXPECT_EQ(c.engine.host, "0.0.0.0");
  EXPECT_EQ(c.engine.port, 8001);
  EXPECT_EQ(c.engine.env.at("HF_HOME"), "/var/cache/hf");
  EXPECT_EQ(c.engine.working_dir, "/srv");
  EXPECT_EQ(c.engine.stop_grace_s, 12.5);
  EXPECT_EQ(c.weights.mode, WeightsMode::kCopy);
  EXPECT_EQ(c.weights.checkpoint, (std::vector<std::string>{"/models/a", "/models/b.safetensors"}));
  EXPECT_EQ(c.weights.key.at("dtype"), "bfloat16");
  EXPECT_EQ(c.weights.daemon_path, "/opt/fr/bin/fastrestart-weightd");
  EXPECT_EQ(c.weights.socket_dir, "/run/fr");
  EXPECT_EQ(c.weights.reader_threads, 16);
  EXPECT_EQ(c.weights.load_timeout_s, 600);
  EXPECT_EQ(c.memory.utilization, 0.85);
  EXPECT_FALSE(c.memory.check_free);
  EXPECT_EQ(c.memory.leak_tolerance_mib, 0);
  EXPECT_EQ(c.memory.settle_timeout_s, 10);
  EXPECT_EQ(c.memory.min_share, 0.1);
  EXPECT_EQ(c.readiness.health_path, "/healthz");
  EXPECT_EQ(c.readiness.request_path, "");
  EXPECT_EQ(c.readiness.model, "llama");
  EXPECT_EQ(c.readiness.prompt, "Hi");
  EXPECT_EQ(c.readiness.max_tokens, 2);
  EXPECT_EQ(c.readiness.expect_text, " Paris");
  EXPECT_EQ(c.readiness.poll_interval_s, 0.5);
  EXPECT_EQ(c.readiness.hang_after_failures, 4);
  EXPECT_EQ(c.restart.backoff_initial_s, 0);
  EXPECT_EQ(c.restart.backoff_multiplier, 1.5);
  EXPECT_EQ(c.restart.crash_loop_limit, 10);
  EXPECT_EQ(c.restart.warm_failures_before_cold, 0);
  EXPECT_EQ(c.restart.start, std::vector<StartPath>{StartPath::kCold});
  EXPECT_EQ(c.control.socket, "/run/fr/llama.ctl");
  EXPECT_EQ(c.control.group, "ops");
  EXPECT_EQ(c.control.state_dir, "/var/lib/fr/llama");
  EXPECT_EQ(c.http.listen, "[::1]:9500");
  EXPECT_EQ(c.logging.level, "debug");
}

// weights.host_arenas: a host-memory daemon beside the CUDA daemons; meaningless (an error naming the key)
// with the host backend, whose daemon keeps host arenas already, or without native daemons.
TEST(Config, HostArenasRunBesideTheCudaDaemonsOnly) {
  auto c = parse("gpus = [0]\n[engine]\ncommand = [\"e\"]\n[weights]\ncheckpoint = \"/m\"\nhost_arenas = true\n");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c->weights.host_arenas);
  EXPECT_FALSE(Config{}.weights.host_arenas) << "off by default";
  expect_error(kMinimal + "host_arenas = true\n", 7, "weights.host_arenas", {"weights.backend = \"cuda\""});
  expect_error(kMinimal + "daemon = \"none\"\nhost_arenas = true\n", 8, "weights.host_arenas",
               {"weights.daemon = \"native\""});
}

TEST(Config, WeightsOffNeedsNoCheckpointOrGpu) {
  auto r = parse("[engine]\ncommand = [\"x\"]\n[weights]\nmode = \"off\"\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->gpus.empty());
}

TEST(Config, RelativeCheckpointIsResolvedAgainstTheFile) {
  auto r = parse_config("[engine]\ncommand = [\"x\"]\n[weights]\nbackend = \"host\"\ncheckpoint = \"../models/m\"\n",
                        "/etc/fastrestart/conf/m.toml");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->weights.checkpoint, std::vector<std::string>{"/etc/fastrestart/models/m"});
}

TEST(Config, SnapshotWithOneGpuAndCopyIsValid) {
  auto r = parse(R"(
gpus = ["0"]
[engine]
command = ["x"]
[weights]
mode = "copy"
checkpoint = "/m"
[restart]
start = ["snapshot", "warm", "cold"]
)");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->restart.start.front(), StartPath::kSnapshot);
}

TEST(Config, SnapshotSectionAndItsDefaults) {
  auto d = parse(kMinimal);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->snapshot.criu, "criu");
  EXPECT_EQ(d->snapshot.oracle_tokens, 4);
  EXPECT_EQ(d->snapshot.timeout_s, 600);
  auto r = parse(kMinimal + "[snapshot]\ndir = \"/var/lib/snaps\"\ncriu = \"/usr/local/sbin/criu\"\n"
                            "helper_path = \"/usr/bin/fastrestart-snapshot\"\noracle_tokens = 8\ntimeout_s = 120\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->snapshot.dir, "/var/lib/snaps");
  EXPECT_EQ(r->snapshot.criu, "/usr/local/sbin/criu");
  EXPECT_EQ(r->snapshot.oracle_tokens, 8);
  EXPECT_EQ(r->snapshot.timeout_s, 120);
}

TEST(ConfigError, SnapshotKeysAreChecked) {
  expect_error(kMinimal + "[snapshot]\noracle_tokens = 0\n", 8, "snapshot.oracle_tokens", {"1..64", "got 0"});
  expect_error(kMinimal + "[snapshot]\ndir = \"snaps\"\n", 8, "snapshot.dir");
  expect_error(kMinimal + "[snapshot]\ncriu_path = \"/x\"\n", 8, "snapshot.criu_path", {"unknown"});
}

TEST(Config, StandbyKeysAndDefaults) {
  auto d = parse(kMinimal);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->standby.level, StandbyLevel::kPreGpu);
  EXPECT_EQ(d->standby.reserve_mib, 0u);
  EXPECT_EQ(d->standby.park_timeout_s, 900);
  EXPECT_EQ(d->standby.max_failures, 3);
  auto r = parse(kMinimal + "[restart]\nstart = [\"standby\", \"warm\", \"cold\"]\n[standby]\nlevel = \"warmed\"\n"
                            "reserve_mib = 742\npark_timeout_s = 60\nmax_failures = 5\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->restart.start.front(), StartPath::kStandby);
  EXPECT_EQ(r->standby.level, StandbyLevel::kWarmed);
  EXPECT_EQ(r->standby.reserve_mib, 742u);
  EXPECT_EQ(r->standby.park_timeout_s, 60);
  EXPECT_EQ(r->standby.max_failures, 5);
  EXPECT_STREQ(start_path_name(StartPath::kStandby), "standby");
  EXPECT_STREQ(standby_level_name(StandbyLevel::kWarmed), "warmed");
}

TEST(ConfigError, StandbyKeysAreChecked) {
  expect_error(kMinimal + "[standby]\nlevel = \"hot\"\n", 8, "standby.level", {"pre_gpu", "warmed"});
  expect_error(kMinimal + "[standby]\nmax_failures = 0\n", 8, "standby.max_failures");
  expect_error(kMinimal + "[standby]\npark_timeout_s = 0\n", 8, "standby.park_timeout_s");
  expect_error(kMinimal + "[standby]\nreserve_mib = -1\n", 8, "standby.reserve_mib");
  expect_error(kMinimal + "[standby]\nreserve_mib = 512\n", 8, "standby.reserve_mib", {"warmed", "pre_gpu"});
  expect_error(kMinimal + "[standby]\nlevels = \"warmed\"\n", 8, "standby.levels", {"unknown"});
  expect_error(kMinimal + "[restart]\nstart = [\"standby\", \"standby\"]\n", 8, "restart.start[1]", {"listed twice"});
}

TEST(Config, EngineListenKeysAndDefaults) {
  auto d = parse(kMinimal);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->engine.listen, EngineListen::kEngine);
  EXPECT_EQ(d->engine.listen_backlog, 4096);
  auto r = parse(R"(
[engine]
command = ["fastrestart-tinyengine", "serve"]
listen = "supervisor"
listen_backlog = 128
[weights]
backend = "host"
checkpoint = "/models/tiny"
)");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->engine.listen, EngineListen::kSupervisor);
  EXPECT_EQ(r->engine.listen_backlog, 128);
  EXPECT_STREQ(engine_listen_name(EngineListen::kSupervisor), "supervisor");
}

TEST(ConfigError, EngineListenKeysAreChecked) {
  const std::string head = "[engine]\ncommand = [\"x\"]\n";
  const std::string tail = "[weights]\nmode = \"off\"\n";
  expect_error(head + "listen = \"systemd\"\n" + tail, 3, "engine.listen", {"engine", "supervisor"});
  expect_error(head + "listen_backlog = 0\n" + tail, 3, "engine.listen_backlog", {"got 0"});
  expect_error(head + "listen_backlog = 70000\n" + tail, 3, "engine.listen_backlog");
}

// readiness.endpoint (docs/listen-socket.md, "The private endpoint"): public by default; private only
// where fastrestartd owns the listening socket (the endpoint is passed beside it).
TEST(Config, ReadinessEndpoint) {
  auto d = parse(kMinimal);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->readiness.endpoint, ReadinessEndpoint::kPublic);
  auto r = parse("[engine]\ncommand = [\"x\"]\nlisten = \"supervisor\"\n[weights]\nmode = \"off\"\n"
                 "[readiness]\nendpoint = \"private\"\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->readiness.endpoint, ReadinessEndpoint::kPrivate);
  EXPECT_STREQ(readiness_endpoint_name(ReadinessEndpoint::kPrivate), "private");
  const std::string head = "[engine]\ncommand = [\"x\"]\n[weights]\nmode = \"off\"\n[readiness]\n";
  expect_error(head + "endpoint = \"loopback\"\n", 6, "readiness.endpoint", {"public", "private"});
  expect_error(head + "endpoint = \"private\"\n", 6, "readiness.endpoint", {"needs engine.listen = \"supervisor\""});
}

// A restored snapshot gets fastrestartd's socket like any other start (docs/listen-socket.md, "Snapshots").
TEST(Config, SnapshotWithTheSupervisorsListeningSocketIsValid) {
  auto r = parse("[engine]\ncommand = [\"x\"]\nlisten = \"supervisor\"\n[weights]\nmode = \"off\"\n"
                 "[restart]\nstart = [\"snapshot\", \"warm\"]\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->engine.listen, EngineListen::kSupervisor);
  EXPECT_EQ(r->restart.start.front(), StartPath::kSnapshot);
}

TEST(Config, SnapshotWithoutGpuIsValidForCpuEngines) {
  auto r = parse(kMinimal + "mode = \"copy\"\n[restart]\nstart = [\"snapshot\", \"warm\"]\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
}

TEST(Config, HttpListenNoneIsAccepted) {
  auto r = parse(kMinimal + "[http]\nlisten = \"none\"\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->http.listen, "none");
}

TEST(Config, EnumNames) {
  EXPECT_STREQ(engine_kind_name(EngineKind::kVllm), "vllm");
  EXPECT_STREQ(engine_kind_name(EngineKind::kGeneric), "generic");
  EXPECT_STREQ(weights_mode_name(WeightsMode::kZeroCopy), "zero_copy");
  EXPECT_STREQ(weights_mode_name(WeightsMode::kCopy), "copy");
  EXPECT_STREQ(weights_mode_name(WeightsMode::kOff), "off");
  EXPECT_STREQ(start_path_name(StartPath::kSnapshot), "snapshot");
  EXPECT_STREQ(start_path_name(StartPath::kWarm), "warm");
  EXPECT_STREQ(start_path_name(StartPath::kCold), "cold");
}

TEST(Config, ShippedExamplesParse) {
  int n = 0;  // every config/*.toml, so an example added later is covered too
  for (const auto& e : std::filesystem::directory_iterator(repo_root() / "config")) {
    if (e.path().extension() != ".toml") continue;
    ++n;
    auto r = load_config(e.path().string());
    EXPECT_TRUE(r.ok()) << e.path() << ": " << r.error().message;
  }
  EXPECT_GE(n, 2) << "no examples under " << (repo_root() / "config");
}

TEST(Config, DocsShowTheExample) {
  auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string example = read(repo_root() / "config/example.toml");
  ASSERT_FALSE(example.empty());
  EXPECT_NE(read(repo_root() / "docs/config.md").find(example), std::string::npos)
      << "docs/config.md must end with config/example.toml verbatim";
}

// ---- load_config

TEST(Config, LoadReadsTheFile) {
  std::string path = ::testing::TempDir() + "/fr-config-test-" + std::to_string(getpid()) + ".toml";
  std::ofstream(path) << kMinimal;
  auto r = load_config(path);
  std::remove(path.c_str());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->path, path);
  EXPECT_EQ(r->name, "fr-config-test-" + std::to_string(getpid()));
}

TEST(Config, LoadMissingFileNamesThePath) {
  auto r = load_config("/nonexistent/fr.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/nonexistent/fr.toml"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("No such file"), std::string::npos) << r.error().message;
}

// ---- errors: each names file:line and the key

TEST(ConfigError, FirstErrorInTheFileIsReported) {
  expect_error(kMinimal + "[readiness]\nmax_tokens = 0\nhealth_path = \"x\"\n", 8, "readiness.max_tokens");
}

TEST(ConfigError, SyntaxNamesTheLine) {
  auto r = parse("[engine]\ncommand = [\"x\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(r.error().message.rfind(kPath + ":", 0), 0u) << r.error().message;
  EXPECT_NE(r.error().message.find("TOML syntax"), std::string::npos) << r.error().message;
}

// toml++ calls it "unescaped control characters" (the newline it reads inside the string).
TEST(ConfigError, AnUnterminatedStringSaysSo) {
  auto r = parse(kMinimal + "[readiness]\nprompt = \"The capital of France\nmax_tokens = 1\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind(kPath + ":8: TOML syntax: unterminated string", 0), 0u) << r.error().message;
  EXPECT_EQ(r.error().message.find("control characters"), std::string::npos) << r.error().message;
  auto literal = parse(kMinimal + "[readiness]\nprompt = 'The capital\n");
  ASSERT_FALSE(literal.ok());
  EXPECT_NE(literal.error().message.find(":8: TOML syntax: unterminated string"), std::string::npos) << literal.error().message;
}

TEST(ConfigError, AnEmptyPromptIsAnErrorUnlessReadinessIsHealthOnly) {
  expect_error(kMinimal + "[readiness]\nprompt = \"\"\n", 8, "readiness.prompt", {"must not be empty", "400"});
  EXPECT_TRUE(parse(kMinimal + "[readiness]\nprompt = \"\"\nrequest_path = \"\"\n").ok());
}

TEST(ConfigError, AGpuUuidWithTheHostBackendIsAnError) {
  expect_error("gpus = [\"GPU-5c2f0a1b-1234-5678-9abc-def012345678\"]\n" + kMinimal, 1, "gpus",
               {"GPU-5c2f0a1b-1234-5678-9abc-def012345678", "weights.backend = \"host\""});
}

TEST(ConfigError, UnknownSection) {
  expect_error(kMinimal + "[engines]\nport = 1\n", 7, "engines", {"unknown section", "[engine]"});
}

TEST(ConfigError, UnknownKey) {
  expect_error(kMinimal + "[memory]\nutilisation = 0.5\n", 8, "memory.utilisation", {"unknown key", "utilization"});
}

TEST(ConfigError, GpusInsideASectionGetsAHint) {
  expect_error(kMinimal + "gpus = [0]\n", 7, "weights.gpus", {"top-level key"});
}

TEST(ConfigError, SectionThatIsNotATable) {
  expect_error("engine = 5\n" + kMinimal.substr(kMinimal.find("[weights]")), 1, "engine",
               {"must be a table", "integer 5"});
}

TEST(ConfigError, WrongType) {
  expect_error(R"(
[engine]
command = ["x"]
port = "8000"
)",
               4, "engine.port", {"expected an integer", "string \"8000\""});
}

TEST(ConfigError, IntegerWrittenAsFloat) {
  expect_error(kMinimal + "reader_threads = 8.0\n", 7, "weights.reader_threads", {"expected an integer", "float 8"});
}

TEST(ConfigError, PortOutOfRange) {
  expect_error("[engine]\ncommand = [\"x\"]\nport = 70000\n", 3, "engine.port", {"1..65535", "70000"});
}

TEST(ConfigError, CommandMissing) {
  expect_error("[engine]\nport = 8000\n[weights]\nmode = \"off\"\n", 1, "engine.command", {"required"});
}

TEST(ConfigError, CommandEmpty) {
  expect_error("[engine]\ncommand = []\n", 2, "engine.command", {"must not be empty"});
}

TEST(ConfigError, CommandElementNotAString) {
  expect_error("[engine]\ncommand = [\"vllm\",\n  5]\n", 3, "engine.command[1]", {"expected a string", "integer 5"});
}

TEST(ConfigError, KindNotAllowed) {
  expect_error("[engine]\ncommand = [\"x\"]\nkind = \"sglang\"\n", 3, "engine.kind",
               {"\"generic\", \"vllm\"", "\"sglang\""});
}

TEST(ConfigError, EnvValueNotAString) {
  expect_error("[engine]\ncommand = [\"x\"]\nenv = { A = 1 }\n", 3, "engine.env.A", {"expected a string"});
}

TEST(ConfigError, EnvReservedName) {
  expect_error("[engine]\ncommand = [\"x\"]\n[engine.env]\nNOTIFY_SOCKET = \"/x\"\n", 4, "engine.env.NOTIFY_SOCKET",
               {"never passed"});
}

TEST(ConfigError, EnvCudaVisibleDevices) {
  expect_error("[engine]\ncommand = [\"x\"]\nenv = { CUDA_VISIBLE_DEVICES = \"0\" }\n", 3,
               "engine.env.CUDA_VISIBLE_DEVICES", {"gpus"});
}

TEST(ConfigError, StopGraceNotPositive) {
  expect_error("[engine]\ncommand = [\"x\"]\nstop_grace_s = 0\n", 3, "engine.stop_grace_s", {"> 0", "got 0"});
}

TEST(ConfigError, WorkingDirRelative) {
  expect_error("[engine]\ncommand = [\"x\"]\nworking_dir = \"srv\"\n", 3, "engine.working_dir",
               {"absolute", "\"srv\""});
}

TEST(ConfigError, GpuUuidMalformed) {
  expect_error("gpus = [\"GPU-1234\"]\n" + kMinimal, 1, "gpus[0]", {"GPU UUID", "\"GPU-1234\""});
}

TEST(ConfigError, GpuIndexNegative) { expect_error("gpus = [0, -1]\n" + kMinimal, 1, "gpus[1]", {">= 0", "-1"}); }

TEST(ConfigError, GpuListedTwice) { expect_error("gpus = [0, \"0\"]\n" + kMinimal, 1, "gpus[1]", {"twice"}); }

TEST(ConfigError, GpusNotAnArray) {
  expect_error("gpus = 0\n" + kMinimal, 1, "gpus", {"expected an array", "integer 0"});
}

TEST(ConfigError, WeightsModeNotAllowed) {
  expect_error(kMinimal + "mode = \"mmap\"\n", 7, "weights.mode", {"\"zero_copy\", \"copy\", \"off\"", "\"mmap\""});
}

TEST(ConfigError, DaemonNotAllowed) {
  expect_error(kMinimal + "daemon = \"nvidia\"\n", 7, "weights.daemon", {"\"native\", \"none\""});
}

TEST(ConfigError, BackendNotAllowed) {
  expect_error("[engine]\ncommand = [\"x\"]\n[weights]\nbackend = \"rocm\"\n", 4, "weights.backend",
               {"\"cuda\", \"host\"", "\"rocm\""});
}

TEST(ConfigError, CheckpointWrongType) {
  expect_error("[engine]\ncommand = [\"x\"]\n[weights]\nbackend = \"host\"\ncheckpoint = 3\n", 5, "weights.checkpoint",
               {"a path or an array of paths"});
}

TEST(ConfigError, ReaderThreadsOutOfRange) {
  expect_error(kMinimal + "reader_threads = 65\n", 7, "weights.reader_threads", {"1..64", "65"});
}

TEST(ConfigError, CheckpointRequired) {
  expect_error("gpus = [0]\n[engine]\ncommand = [\"x\"]\n[weights]\nmode = \"copy\"\n", 5, "weights.checkpoint",
               {"required", "\"copy\"", "mode = \"off\""});
}

TEST(ConfigError, CudaNeedsAGpu) {
  expect_error("[engine]\ncommand = [\"x\"]\n[weights]\ncheckpoint = \"/m\"\nbackend = \"cuda\"\n", 5, "gpus",
               {"at least one GPU", "\"host\""});
}

TEST(ConfigError, UtilizationOutOfRange) {
  expect_error(kMinimal + "[memory]\nutilization = 1.5\n", 8, "memory.utilization", {"(0, 1]", "1.5"});
  expect_error(kMinimal + "[memory]\nutilization = 0\n", 8, "memory.utilization", {"(0, 1]", "got 0"});
  expect_error(kMinimal + "[memory]\nutilization = 0.5\nmin_share = 0.5\n", 9, "memory.min_share",
               {"below memory.utilization (0.5)", "got 0.5"});
}

TEST(ConfigError, NotFinite) {
  expect_error(kMinimal + "[memory]\nsettle_timeout_s = nan\n", 8, "memory.settle_timeout_s", {"finite"});
}

TEST(ConfigError, CheckFreeNotBoolean) {
  expect_error(kMinimal + "[memory]\ncheck_free = \"yes\"\n", 8, "memory.check_free", {"boolean", "\"yes\""});
}

TEST(ConfigError, LeakToleranceNegative) {
  expect_error(kMinimal + "[memory]\nleak_tolerance_mib = -1\n", 8, "memory.leak_tolerance_mib", {">= 0", "-1"});
}

TEST(ConfigError, HealthPathWithoutSlash) {
  expect_error(kMinimal + "[readiness]\nhealth_path = \"health\"\n", 8, "readiness.health_path",
               {"start with '/'", "\"health\""});
}

TEST(ConfigError, RequestPathWithoutSlash) {
  expect_error(kMinimal + "[readiness]\nrequest_path = \"v1/completions\"\n", 8, "readiness.request_path",
               {"empty", "'/'", "\"v1/completions\""});
}

TEST(ConfigError, MaxTokensZero) {
  expect_error(kMinimal + "[readiness]\nmax_tokens = 0\n", 8, "readiness.max_tokens", {">= 1, got 0"});
}

TEST(ConfigError, HangAfterFailuresZero) {
  expect_error(kMinimal + "[readiness]\nhang_after_failures = 0\n", 8, "readiness.hang_after_failures", {"got 0"});
}

TEST(ConfigError, PollIntervalNegative) {
  expect_error(kMinimal + "[readiness]\npoll_interval_s = -0.5\n", 8, "readiness.poll_interval_s", {"> 0", "-0.5"});
}

TEST(ConfigError, BackoffMaxBelowInitial) {
  expect_error(kMinimal + "[restart]\nbackoff_initial_s = 10\nbackoff_max_s = 5\n", 9, "restart.backoff_max_s",
               {"backoff_initial_s (10)", "got 5"});
}

TEST(ConfigError, BackoffMultiplierBelowOne) {
  expect_error(kMinimal + "[restart]\nbackoff_multiplier = 0.5\n", 8, "restart.backoff_multiplier", {">= 1", "0.5"});
}

TEST(ConfigError, CrashLoopLimitZero) {
  expect_error(kMinimal + "[restart]\ncrash_loop_limit = 0\n", 8, "restart.crash_loop_limit", {"got 0"});
}

TEST(ConfigError, WarmFailuresNegative) {
  expect_error(kMinimal + "[restart]\nwarm_failures_before_cold = -1\n", 8, "restart.warm_failures_before_cold",
               {"-1"});
}

TEST(ConfigError, StartEmpty) {
  expect_error(kMinimal + "[restart]\nstart = []\n", 8, "restart.start", {"at least one"});
}

TEST(ConfigError, StartUnknownPath) {
  expect_error(kMinimal + "[restart]\nstart = [\"warm\", \"hot\"]\n", 8, "restart.start[1]",
               {"\"snapshot\", \"warm\", \"cold\"", "\"hot\""});
}

TEST(ConfigError, StartDuplicate) {
  expect_error(kMinimal + "[restart]\nstart = [\"warm\", \"warm\"]\n", 8, "restart.start[1]",
               {"\"warm\" listed twice"});
}

TEST(ConfigError, SnapshotNeedsAtMostOneGpu) {
  expect_error(
      "gpus = [0, 1]\n[engine]\ncommand = [\"x\"]\n[weights]\nmode = \"off\"\n[restart]\nstart = [\"snapshot\"]\n", 7,
      "restart.start", {"at most one GPU", "lists 2"});
}

// A preload key is the whole checkpoint under one key: no rank of a tensor-parallel engine asks for it.
TEST(ConfigError, APreloadKeyOfATensorParallelRankIsRefused) {
  expect_error(kMinimal + "key = {tp_size = \"2\", tp_rank = \"0\"}\n", 7, "weights.key", {"tp_size = \"2\"", "remove [weights] key"});
  EXPECT_TRUE(parse(kMinimal + "key = {tp_size = \"1\"}\n").ok());
  auto two = parse("gpus = [\"0\", \"1\"]\n[engine]\ncommand = [\"x\"]\n[weights]\nbackend = \"host\"\ncheckpoint = \"/m\"\n");
  ASSERT_TRUE(two.ok()) << two.error().message;  // host daemons host-0 and host-1; the ranks publish their shards
  EXPECT_EQ(two->gpus.size(), 2u);
}

// zero_copy engines are snapshottable: they release the daemon's pools before the dump (docs/snapshot.md).
TEST(Config, SnapshotAcceptsZeroCopy) {
  auto c = parse("gpus = [0]\n[engine]\ncommand = [\"x\"]\n[weights]\ncheckpoint = \"/m\"\n[restart]\nstart = [\"snapshot\"]\n");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->weights.mode, WeightsMode::kZeroCopy);
}

TEST(ConfigError, ControlSocketRelative) {
  expect_error(kMinimal + "[control]\nsocket = \"llama.ctl\"\n", 8, "control.socket", {"absolute", "\"llama.ctl\""});
}

TEST(ConfigError, ControlSocketTooLong) {
  expect_error(kMinimal + "[control]\nsocket = \"/" + std::string(120, 's') + "\"\n", 8, "control.socket",
               {"107 bytes", "121"});
}

TEST(ConfigError, HttpListenMalformed) {
  expect_error(kMinimal + "[http]\nlisten = \"9400\"\n", 8, "http.listen", {"host:port", "\"none\"", "\"9400\""});
  expect_error(kMinimal + "[http]\nlisten = \"127.0.0.1:0\"\n", 8, "http.listen", {"1..65535"});
}

TEST(ConfigError, LogLevelNotAllowed) {
  expect_error(kMinimal + "[logging]\nlevel = \"verbose\"\n", 8, "logging.level",
               {"\"trace\", \"debug\", \"info\", \"warn\", \"error\"", "\"verbose\""});
}

TEST(ConfigError, ModelNameUnsafe) {
  expect_error(kMinimal + "[model]\nname = \"../etc\"\n", 8, "model.name", {"\"../etc\""});
}

TEST(ConfigError, DefaultNameUnusable) {
  auto r = parse_config(kMinimal, "/etc/fastrestart/my model.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/etc/fastrestart/my model.toml:1: model.name: "), std::string::npos)
      << r.error().message;
}

// ---- a re-read config against the running one (docs/config.md, "Reload")

// Where the engine serves changes only with a restart of fastrestartd: each changed field is named with
// its old and new value; the rest of [engine] is not its business.
TEST(ConfigAddressChange, NamesEachMovedFieldAndSaysARestartAppliesIt) {
  auto running = parse("[engine]\ncommand = [\"x\"]\nport = 8000\nlisten = \"supervisor\"\n[weights]\nmode = \"off\"\n");
  ASSERT_TRUE(running.ok()) << running.error().message;
  const EngineConfig& was = running->engine;
  EngineConfig next = was;
  next.flags = *FlagList::from_words({"--x"}, "flags");
  next.stop_grace_s = 5;
  EXPECT_EQ(address_change(was, next), "");
  next.port = 8001;
  EXPECT_EQ(address_change(was, next),
            "engine.port 8000 -> 8001: where the engine serves changes only with a restart of fastrestartd "
            "(systemctl restart), not by a reload; the engine keeps serving as before");
  next.host = "::1";
  next.listen = EngineListen::kEngine;
  const std::string all = address_change(was, next);
  EXPECT_EQ(all.rfind("engine.host \"127.0.0.1\" -> \"::1\", engine.port 8000 -> 8001, engine.listen \"supervisor\" -> "
                      "\"engine\": ", 0), 0u) << all;
  next = was;
  next.listen_backlog = 16;  // the socket fastrestartd holds was listen()ed with the old one
  EXPECT_NE(address_change(was, next).find("engine.listen_backlog 4096 -> 16"), std::string::npos);
  EngineConfig own = was;
  own.listen = EngineListen::kEngine;
  EngineConfig own_next = own;
  own_next.listen_backlog = 16;  // unused while the engine binds its port
  EXPECT_EQ(address_change(own, own_next), "");
}

}  // namespace
}  // namespace fr::supervisor
