// fastrestartd with engine.kind = "vllm": the real supervisor and fastrestartctl against the stand-in `vllm`
// of tests/supervisor/vllm_standin (the vLLM reproduction of python/tests/fake_vllm with its stand-in engine:
// behaves like the documented vLLM 0.31 CLI and records every command line; not vLLM). What is and is not covered: docs/vllm.md, "What was run".
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/harness.h"

namespace fr {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

void write_bytes(const std::string& path, char fill, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << std::string(n, fill);
}

struct Options {
  std::string daemon = "vllm-preload";
  std::string extra_flags;     // TOML array items, appended
  std::string weights_extra;   // more keys in [weights]
  std::string engine_extra;    // more keys in [engine]
  std::string env;             // [engine.env] body
  std::string command;         // engine.command's TOML array items; empty: the stand-in's `serve`
};

// fastrestartd supervising the stand-in on a fake GPU 0 (FASTRESTART_FAKE_NVML: 100 GiB, 1 GiB used).
class Vllmd {
 public:
  explicit Vllmd(const Options& o = {}) : m_port(test::free_port()) {
    ::mkdir((m_dir / "model").c_str(), 0755);
    write_bytes(m_dir / "model/model-00001-of-00001.safetensors", 'a', 4096);
    std::ofstream(m_dir / "nvml.json") << R"({"0": {"total": 107374182400, "used": 1073741824, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "name": "Fake GPU"}})";
    std::ofstream f(m_dir / "model.toml");
    f << "gpus = [0]\n[model]\nname = \"v\"\n[engine]\nkind = \"vllm\"\n"
      << "command = [" << (o.command.empty() ? "\"" FR_VLLM_STANDIN "\", \"serve\"" : o.command) << "]\n"
      << "flags = [\"" << model() << "\", \"--host\", \"127.0.0.1\", \"--port\", \"" << m_port
      << "\", \"--served-model-name\", \"v\", \"--tensor-parallel-size\", \"1\", \"--dtype\", \"bfloat16\", "
      << "\"--max-num-seqs\", \"8\", \"--standin-startup-delay\", \"0.1\"" << o.extra_flags << "]\n"
      << "port = " << m_port << "\nstop_grace_s = 5\n" << o.engine_extra
      << "[engine.env]\n" << o.env
      << "[weights]\ndaemon = \"" << o.daemon << "\"\nsocket_dir = \"" << (m_dir / "run") << "\"\nwatch_interval_s = 0.2\n"
      << o.weights_extra
      << "[memory]\nutilization = 0.8\n"
      << "[readiness]\nstartup_timeout_s = 30\npoll_interval_s = 0.05\ncheck_interval_s = 0.5\n"
      << "[restart]\nbackoff_initial_s = 0.1\nbackoff_max_s = 0.2\ncrash_loop_limit = 5\n"
      << "[control]\nsocket = \"" << (m_dir / "ctl/v.ctl") << "\"\nstate_dir = \"" << (m_dir / "state") << "\"\n"
      << "[http]\nlisten = \"none\"\n";
    f.close();
    m_pid = test::spawn_logged({FR_FASTRESTARTD_BIN, "--config", m_dir / "model.toml", "--log-level", "debug"},
                               m_dir / "fastrestartd.log",
                               {{"FASTRESTART_FAKE_NVML", m_dir / "nvml.json"}, {"VLLM_STANDIN_LOG", m_dir / "standin.jsonl"}});
  }
  ~Vllmd() {
    if (m_pid > 0) stop();
  }
  int stop() {
    ::kill(m_pid, SIGTERM);
    int st = 0;
    ::waitpid(m_pid, &st, 0);
    m_pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  std::string model() const { return m_dir / "model"; }
  std::string config() const { return m_dir / "model.toml"; }
  test::RunResult ctl(std::vector<std::string> args) {
    std::vector<std::string> argv{FR_FASTRESTARTCTL_BIN, "--socket", m_dir / "ctl/v.ctl"};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run(argv);
  }
  json status() {
    auto r = ctl({"status", "--json"});
    auto j = json::parse(r.output, nullptr, false);
    return j.is_discarded() ? json::object() : j;
  }
  bool wait_status(const std::function<bool(const json&)>& pred, double timeout_s = 30) {
    auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < end) {
      json s = status();
      if (!s.empty() && pred(s)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  bool wait_ready(int ready_starts = 1) {
    return wait_status([&](const json& s) {
      return s.value("state", "") == "ready" && static_cast<int>(events("start", "serve").size()) >= ready_starts;
    });
  }
  // The stand-in's records, in order.
  std::vector<json> events(const std::string& event = "", const std::string& cmd = "") const {
    std::ifstream f(m_dir / "standin.jsonl");
    std::vector<json> out;
    for (std::string line; std::getline(f, line);) {
      auto j = json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      if ((event.empty() || j["event"] == event) && (cmd.empty() || j["cmd"] == cmd)) out.push_back(j);
    }
    return out;
  }
  std::string log() const {
    std::ifstream f(m_dir / "fastrestartd.log");
    return {std::istreambuf_iterator<char>(f), {}};
  }
  std::string complete() {
    auto r = test::run({"/usr/bin/curl", "-s", "http://127.0.0.1:" + std::to_string(m_port) + "/v1/completions", "-d",
                        R"({"prompt": "x", "model": "v", "max_tokens": 1})"});
    auto j = json::parse(r.output, nullptr, false);
    return j.is_discarded() ? r.output : j["choices"][0].value("text", "");
  }
  const test::TempDir& dir() const { return m_dir; }

 private:
  test::TempDir m_dir;
  uint16_t m_port;
  pid_t m_pid = -1;
};

std::vector<std::string> argv_of(const json& e) { return e["argv"].get<std::vector<std::string>>(); }

// The value after `flag` in argv, or "".
std::string arg(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) return argv[i + 1];
  return {};
}

TEST(VllmPreload, StartsThePreloadWithTheModelAndParallelFlagsThenServeStrict) {
  Vllmd d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto preloads = d.events("start", "preload");
  auto serves = d.events("start", "serve");
  ASSERT_EQ(preloads.size(), 1u);
  ASSERT_EQ(serves.size(), 1u);
  auto p = argv_of(preloads[0]);
  const std::string port = arg(p, "--weight-cache-health-port");
  EXPECT_EQ(p, (std::vector<std::string>{"preload", "--model", d.model(), "--tensor-parallel-size", "1", "--dtype", "bfloat16",
                                         "--max-num-seqs", "8", "--weight-cache-health-host", "127.0.0.1",
                                         "--weight-cache-health-port", port, "--weight-cache-socket-dir", d.dir() / "run"}));
  EXPECT_EQ(preloads[0]["env"]["CUDA_VISIBLE_DEVICES"], "0");
  auto s = argv_of(serves[0]);
  EXPECT_EQ(arg(s, "--load-format"), "ipc_cache");
  auto extra = json::parse(arg(s, "--model-loader-extra-config"));
  EXPECT_EQ(extra["fallback"], false) << "the first start after the preload is strict";
  EXPECT_EQ(extra["mode"], "zero_copy");
  EXPECT_EQ(extra["socket_dir"], d.dir() / "run");
  // vLLM counts the daemon's weights inside its own budget: the whole budget goes to the engine.
  EXPECT_EQ(arg(s, "--gpu-memory-utilization"), "0.800000");
  EXPECT_EQ(serves[0]["env"]["CUDA_VISIBLE_DEVICES"], "0");
  EXPECT_GT(serves[0]["time"].get<double>(), preloads[0]["time"].get<double>() + 0.3) << "serve waited for /health";
  auto st = d.status();
  EXPECT_EQ(st["last_start"]["path"], "warm") << st.dump();
  EXPECT_EQ(st["engine"]["vllm"]["version"]["value"], "0.31.0");
  EXPECT_EQ(st["engine"]["vllm"]["weight_cache"]["value"], "hit");
  EXPECT_EQ(st["engine"]["vllm"]["model_runner"]["value"], "V2") << "from vLLM's \"Using V2 Model Runner\" line";
  EXPECT_EQ(st["metrics"]["attaches"]["hit"], 1);
  bool listed = false;
  for (const auto& dm : st["daemons"]) listed |= dm["kind"] == "vllm-preload" && dm["state"] == "ready";
  EXPECT_TRUE(listed) << st["daemons"].dump();
  auto table = d.ctl({"status"});
  EXPECT_NE(table.output.find("version 0.31.0, model runner V2"), std::string::npos) << table.output;
}

TEST(VllmPreload, LaterStartsUseTheConfiguredFallbackAndKeepThePreload) {
  Options o;
  o.weights_extra = "fallback = false\n";
  Vllmd d(o);
  ASSERT_TRUE(d.wait_ready()) << d.log();
  pid_t engine = d.status()["engine"]["pid"];
  ::kill(engine, SIGKILL);
  ASSERT_TRUE(d.wait_ready(2)) << d.log();
  ASSERT_TRUE(d.wait_status([](const json& s) { return s["restarts"].value("crash", 0) == 1 && s["state"] == "ready"; }));
  EXPECT_EQ(d.events("start", "preload").size(), 1u) << "an engine crash keeps the preload";
  auto second = argv_of(d.events("start", "serve")[1]);
  EXPECT_EQ(json::parse(arg(second, "--model-loader-extra-config"))["fallback"], false) << "configured: false";
}

TEST(VllmPreload, ConfiguredFallbackTrueAfterTheFirstStart) {
  Vllmd d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  EXPECT_EQ(d.ctl({"restart"}).exit_code, 0);
  ASSERT_TRUE(d.wait_ready(2)) << d.log();
  auto second = argv_of(d.events("start", "serve")[1]);
  EXPECT_EQ(json::parse(arg(second, "--model-loader-extra-config"))["fallback"], true);
  EXPECT_EQ(d.status()["last_start"]["path"], "warm");
}

TEST(VllmPreload, SigtermStopsTheEngineBeforeThePreload) {
  Vllmd d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  EXPECT_EQ(d.stop(), 0);
  auto serve_exit = d.events("exit", "serve"), preload_exit = d.events("exit", "preload");
  ASSERT_EQ(serve_exit.size(), 1u);
  ASSERT_EQ(preload_exit.size(), 1u);
  EXPECT_LT(serve_exit[0]["time"].get<double>(), preload_exit[0]["time"].get<double>());
}

// vLLM's key covers only headers (#59647): the stand-in, like vLLM, would serve the old bytes. fastrestartd
// sees the file's identity change and reloads the preload, so the engine serves the new bytes.
TEST(VllmPreload, ACheckpointRewrittenInPlaceReloadsThePreloadAndTheEngine) {
  Vllmd d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  const std::string before = d.complete();
  write_bytes(d.model() + "/model-00001-of-00001.safetensors", 'b', 4096);  // same layout, other weights
  ASSERT_TRUE(d.wait_status([&](const json& s) {
    return s["state"] == "ready" && d.events("start", "serve").size() == 2;
  })) << d.log();
  auto ev = d.events();
  std::vector<std::string> order;
  for (const auto& e : ev) order.push_back(e["event"].get<std::string>() + " " + e["cmd"].get<std::string>());
  EXPECT_EQ(order, (std::vector<std::string>{"start preload", "start serve", "exit serve", "exit preload", "start preload",
                                             "start serve"}));
  auto second = argv_of(d.events("start", "serve")[1]);
  EXPECT_EQ(json::parse(arg(second, "--model-loader-extra-config"))["fallback"], false) << "strict again after a reload";
  EXPECT_NE(d.complete(), before) << "the new bytes are served";
  EXPECT_NE(d.log().find("checkpoint changed under the same path"), std::string::npos);
}

// A preload that cannot start (here: a quantization its loader refuses) is a daemon failure: the engine
// starts anyway and loads from disk with engine.flags' own --load-format, never through ipc_cache: vLLM's
// ipc_cache loader raises UnsupportedQuantForIPCError even with fallback, so every engine start would fail
// too (a crash loop; the stand-in refuses that quantization as vLLM does). Status names why the preload died.
TEST(VllmPreload, APreloadThatDiesWhileLoadingLeavesTheEngineToLoadFromDiskWithItsOwnLoadFormat) {
  Options o;
  o.env = "VLLM_STANDIN_PRELOAD_FAIL = \"vllm.model_executor.model_loader.weight_cache.protocol.UnsupportedQuantForIPCError: quantization 'x'\"\n";
  // Not a secret: the stand-in's failure message, which the status must show (every other env value is scrubbed).
  o.engine_extra = "public_env = [\"VLLM_STANDIN_PRELOAD_FAIL\"]\n";
  o.extra_flags = R"(, "--load-format", "safetensors", "--model-loader-extra-config", "{\"state_timeout_s\": 60}")";
  Vllmd d(o);
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto st = d.status();
  EXPECT_EQ(st["last_start"]["path"], "cold");
  json preload;
  for (const auto& dm : st["daemons"])
    if (dm["kind"] == "vllm-preload") preload = dm;
  EXPECT_EQ(preload["state"], "failed") << st["daemons"].dump();
  EXPECT_NE(preload["error"].get<std::string>().find("UnsupportedQuantForIPCError"), std::string::npos) << preload.dump();
  EXPECT_EQ(arg(argv_of(d.events("start", "preload")[0]), "--load-format"), "safetensors");
  auto serve = argv_of(d.events("start", "serve")[0]);
  EXPECT_EQ(arg(serve, "--load-format"), "safetensors") << "engine.flags' load format, not ipc_cache";
  EXPECT_EQ(std::count(serve.begin(), serve.end(), "--load-format"), 1);
  EXPECT_EQ(std::count(serve.begin(), serve.end(), "--model-loader-extra-config"), 0)
      << "the ipc_cache loader's keys would fail vLLM's default loader";
  EXPECT_EQ(d.events("start", "serve").size(), 1u) << "no crash loop";
  EXPECT_NE(d.log().find("vllm preload is not serving; the engine loads from disk with --load-format safetensors"), std::string::npos);
}

// Keys the ipc_cache loader does not take fail every vLLM start ("Unexpected extra config keys"): the
// config check refuses them first, naming file:line and vLLM's message.
TEST(VllmConfig, AnExtraConfigKeyTheIpcCacheLoaderRefusesIsAnError) {
  test::TempDir dir;
  std::string cfg = dir / "m.toml";
  std::ofstream(cfg) << "gpus = [0]\n[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\n"
                        "flags = [\"m\", \"--model-loader-extra-config\", \"{\\\"num_threads\\\": 8}\"]\n"
                        "[weights]\ndaemon = \"vllm-preload\"\n";
  auto r = test::run({FR_FASTRESTARTD_BIN, "--check", "--config", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(cfg + ":5: engine.flags: --model-loader-extra-config: vLLM would fail every start: "
                                "\"Unexpected extra config keys for load format ipc_cache: ['num_threads']\""),
            std::string::npos)
      << r.output;
}

TEST(VllmLint, AReloadWithARemovedFlagIsRefusedBeforeAnythingRestarts) {
  Vllmd d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto r = d.ctl({"reload", "--add-flags", "--tokenizer-mode slow"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--tokenizer-mode slow: vLLM 0.31.0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("reported by the engine"), std::string::npos) << r.output;
  EXPECT_EQ(d.events("start", "serve").size(), 1u) << "nothing restarted";
  EXPECT_EQ(d.status()["flags"].dump().find("slow"), std::string::npos);
}

TEST(VllmLint, AConfigFileReloadWithARemovedFlagIsRefusedEveryTime) {
  // systemctl reload (fastrestartctl reload without flags) re-reads the file: one with a flag vLLM would
  // refuse does not load, names file:line, and keeps the running config, on every reload (a refused file
  // must not read as "unchanged" the second time).
  Vllmd d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  std::string text;
  {
    std::ifstream in(d.config());
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string anchor = "\"--max-num-seqs\", \"8\"";
  ASSERT_NE(text.find(anchor), std::string::npos) << text;
  text.replace(text.find(anchor), anchor.size(), anchor + ", \"--tokenizer-mode\", \"slow\"");
  std::ofstream(d.config(), std::ios::trunc) << text;
  for (int i = 0; i < 2; ++i) {
    auto r = d.ctl({"reload"});
    EXPECT_EQ(r.exit_code, 1) << "reload " << i + 1 << ": " << r.output;
    EXPECT_NE(r.output.find("keeping the running config: " + d.config() + ":7: engine.flags: --tokenizer-mode slow: vLLM 0.31.0"),
              std::string::npos) << "reload " << i + 1 << ": " << r.output;
  }
  EXPECT_EQ(d.events("start", "serve").size(), 1u) << "nothing restarted";
  EXPECT_EQ(d.status()["flags"].dump().find("slow"), std::string::npos);
}

TEST(VllmLint, CheckNamesTheFlagTheVersionAndWhatAPushWouldDo) {
  Vllmd d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto bad = d.ctl({"check", "--add-flags", "--enable-mamba-fine-grained-prefix-cache"});
  EXPECT_EQ(bad.exit_code, 4) << bad.output;
  EXPECT_NE(bad.output.find("--enable-mamba-fine-grained-prefix-cache: vLLM 0.31.0: renamed; use --enable-mamba-shared-prefix-checkpoint"),
            std::string::npos) << bad.output;
  auto warm = d.ctl({"check", "--add-flags", "--max-num-seqs 4"});
  EXPECT_EQ(warm.exit_code, 0) << warm.output;
  EXPECT_NE(warm.output.find("a push would: restart the engine (warm)"), std::string::npos) << warm.output;
  auto cold = d.ctl({"check", "--add-flags", "--dtype float16"});
  EXPECT_EQ(cold.exit_code, 0) << cold.output;
  EXPECT_NE(cold.output.find("changes what the weight daemons hold: --dtype"), std::string::npos) << cold.output;
  auto warn = d.ctl({"check", "--add-flags", "--quantization fp8"});
  EXPECT_EQ(warn.exit_code, 0) << "a behaviour change is a warning: " << warn.output;
  EXPECT_NE(warn.output.find("warning: --quantization fp8: since vLLM 0.31.0"), std::string::npos) << warn.output;
  EXPECT_EQ(d.events("start", "serve").size(), 1u) << "check changes nothing";
}

TEST(VllmLint, AWeightFlagPushReloadsThePreloadCold) {
  Vllmd d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto r = d.ctl({"reload", "--add-flags", "--dtype float16", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output << d.log();
  EXPECT_EQ(json::parse(r.output)["cold_reload"], true);
  auto preloads = d.events("start", "preload");
  ASSERT_EQ(preloads.size(), 2u);
  EXPECT_EQ(arg(argv_of(preloads[1]), "--dtype"), "float16") << "the preload gets the new dtype";
}

struct ExitCase {
  const char* flags;
  const char* engine_extra;
  const char* cause;
};
void PrintTo(const ExitCase& c, std::ostream* os) { *os << c.cause; }
class VllmExits : public ::testing::TestWithParam<ExitCase> {};

TEST_P(VllmExits, AreClassifiedFromVllmsOwnWords) {
  Options o;
  o.daemon = "none";
  o.extra_flags = GetParam().flags;
  o.engine_extra = GetParam().engine_extra;
  Vllmd d(o);
  const std::string cause = GetParam().cause;
  ASSERT_TRUE(d.wait_status([&](const json& s) { return s["restarts"].value(cause, 0) >= 1; })) << d.log();
  EXPECT_EQ(d.status()["last_exit"]["cause"], cause);
}

INSTANTIATE_TEST_SUITE_P(
    Vllm, VllmExits,
    ::testing::Values(
        ExitCase{R"(, "--standin-fail", "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.")", "", "kv_cache_memory"},
        ExitCase{R"(, "--standin-fail", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")", "", "cuda_oom"},
        ExitCase{R"(, "--standin-fail", "ValueError: Free memory on device (6.9/79.1 GiB) on startup is less than desired GPU memory utilization (0.8, 63.3 GiB).")", "", "memory_utilization"},
        // Checked against 0.30 (configured), the flag passes our check; the 0.31 stand-in refuses it.
        ExitCase{R"(, "--enable-mamba-fine-grained-prefix-cache")", "vllm_version = \"0.30.0\"\n", "bad_flags"},
        ExitCase{R"(, "--standin-crash-after-requests", "1")", "", "crash"}),
    [](const auto& p) { return std::string(p.param.cause) + std::to_string(p.index); });

// engine.listen = "supervisor" (docs/vllm.md, "The port"): vLLM binds its own port and does not read
// LISTEN_FDS, so it runs through python3 -m fastrestart_vllm.launch, which hands vLLM's socket factory the
// socket fastrestartd passes (and uvicorn's Config that socket's backlog). A completion sent right after kill -9 waits in the queue and is answered by the next
// engine; the stand-in run as plain `vllm serve` instead fails at its own bind, which fastrestartd names.
TEST(VllmListen, ThroughTheLauncherARequestSentDuringARestartIsAnswered) {
  const std::string python_dir = FR_PYTHON_BUILD_DIR;
  if (::access((python_dir + "/fastrestart/listen.py").c_str(), R_OK) != 0)
    GTEST_SKIP() << "the Python binding is not built (" << python_dir << ")";
  Options o;
  o.daemon = "none";
  o.engine_extra = "listen = \"supervisor\"\n";
  o.command = R"("/usr/bin/python3", "-m", "fastrestart_vllm.launch", "serve")";
  o.env = "PYTHONPATH = \"" + std::string(FR_SOURCE_DIR) + "/python/tests/fake_vllm:" + python_dir + "\"\n";
  Vllmd d(o);
  ASSERT_TRUE(d.wait_ready()) << d.log();
  const std::string before = d.complete();
  ASSERT_FALSE(before.empty()) << d.log();
  const pid_t engine = d.status()["engine"]["pid"];
  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  EXPECT_EQ(d.complete(), before) << d.log();  // sent while no engine runs: waits, then the next one answers
  const json s = d.status();
  EXPECT_NE(s["engine"].value("pid", 0), engine);
  EXPECT_EQ(s["restarts"].value("crash", 0), 1) << s.dump();
  const std::string log = d.log();
  EXPECT_NE(log.find("fastrestart-vllm: serving on the socket fastrestartd passed"), std::string::npos) << log;
  EXPECT_EQ(log.find("Address already in use"), std::string::npos) << log;
}

TEST(VllmListen, PlainVllmServeFailsAtItsOwnBindAndFastrestartdNamesTheOption) {
  Options o;
  o.daemon = "none";
  o.engine_extra = "listen = \"supervisor\"\n";
  Vllmd d(o);
  ASSERT_TRUE(d.wait_status([](const json& s) { return s["restarts"].value("crash", 0) >= 1; })) << d.log();
  const std::string detail = d.status()["last_exit"].value("detail", "");
  EXPECT_NE(detail.find("engine.listen = \"supervisor\" is set but the engine binds port"), std::string::npos) << detail;
  EXPECT_NE(detail.find("Address already in use"), std::string::npos) << detail;
}

TEST(VllmReport, TheModelRunnerFallbackIsShown) {
  Options o;
  o.daemon = "none";
  o.extra_flags = R"(, "--standin-runner-v1")";
  Vllmd d(o);
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto v = d.status()["engine"]["vllm"];
  EXPECT_EQ(v["model_runner"]["value"], "V1");
  EXPECT_NE(v["model_runner"]["line"].get<std::string>().find("custom logits processors"), std::string::npos);
}

// vLLM's own shard-loading bar (data/vllm.toml [[progress]]) becomes the status text while it starts.
TEST(VllmReport, TheShardLoadingBarReachesTheStatusText) {
  Options o;
  o.daemon = "none";
  o.extra_flags = R"(, "--standin-loader-line", "(EngineCore_DP0 pid=1) Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.90it/s]")";
  Vllmd d(o);
  ASSERT_TRUE(d.wait_ready()) << d.log();
  EXPECT_NE(d.log().find("status: Starting the engine ("), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("): load_shards 4/4 shards"), std::string::npos) << d.log();
}

// The loader plugin's result line (python/fastrestart_vllm) reaches status, the table and the metrics.
TEST(VllmReport, TheLoaderResultLineIsShown) {
  Options o;
  o.daemon = "none";
  o.extra_flags = R"(, "--standin-loader-line", "(EngineCore pid=1) fastrestart-loader: v=1 result=hit key=9f1c device=cuda:0 tp=0/1 pp=0/1 dp=0/1 mode=zero_copy tensors=291 bytes=1024 attach_ms=1.9 load_ms=- publish=- publish_ms=- total_ms=35.2 reason=\"\"")";
  Vllmd d(o);
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto st = d.status();
  ASSERT_EQ(st["engine"]["vllm"]["loader"].size(), 1u) << st.dump();
  EXPECT_EQ(st["engine"]["vllm"]["loader"][0]["result"], "hit");
  EXPECT_EQ(st["engine"]["vllm"]["loader"][0]["attach_ms"], "1.9");
  EXPECT_EQ(st["last_start"]["path"], "warm") << "no daemon record: the engine's own word decides";
  EXPECT_EQ(st["metrics"]["attaches"]["hit"], 1);
  auto table = d.ctl({"status"});
  EXPECT_NE(table.output.find("hit cuda:0 attach_ms 1.9"), std::string::npos) << table.output;
}

TEST(VllmConfig, TheExampleConfigsPassTheCheck) {
  for (const char* name : {"vllm-native-tp4.toml", "vllm-preload.toml", "example.toml"}) {
    auto r = test::run({FR_FASTRESTARTD_BIN, "--check", "--syntax-only", "--config", std::string(FR_SOURCE_DIR) + "/config/" + name});
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
  }
}

TEST(VllmConfig, ARemovedFlagInTheConfigIsAnErrorNamingFileLineAndFlag) {
  test::TempDir dir;
  std::string cfg = dir / "m.toml";
  std::ofstream(cfg) << "gpus = [0]\n[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\n"
                        "flags = [\"m\", \"--collect-detailed-traces\", \"model,worker\"]\n[weights]\nmode = \"off\"\n";
  auto r = test::run({FR_FASTRESTARTD_BIN, "--check", "--config", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(cfg + ":5: engine.flags: --collect-detailed-traces model,worker: vLLM 0.31.0"), std::string::npos) << r.output;
  std::ofstream(cfg) << "gpus = [0]\n[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\n"
                        "flags = [\"m\", \"--quantization\", \"fp8\"]\n[weights]\nmode = \"off\"\n";
  auto warn = test::run({FR_FASTRESTARTD_BIN, "--check", "--syntax-only", "--config", cfg});  // no vllm here
  EXPECT_EQ(warn.exit_code, 0) << warn.output;
  EXPECT_NE(warn.output.find(cfg + ": warning: --quantization fp8: since vLLM 0.31.0"), std::string::npos) << warn.output;
  std::ofstream(cfg) << "gpus = [0]\n[engine]\nkind = \"vllm\"\ncommand = [\"vllm\", \"serve\"]\n"
                        "flags = [\"m\", \"--collect-detailed-traces\", \"model,worker\"]\n[weights]\nmode = \"off\"\n";
  auto off = test::run({FR_FASTRESTARTCTL_BIN, "--config", cfg, "check", "--offline"});
  EXPECT_EQ(off.exit_code, 1) << off.output;
  EXPECT_NE(off.output.find("--collect-detailed-traces"), std::string::npos) << off.output;
}

}  // namespace
}  // namespace fr
