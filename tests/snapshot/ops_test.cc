// create_snapshot / restore_snapshot with real CRIU and a real engine, and the GPU seam (gpu.h) as a
// recording fake: the driver steps run in the right order around CRIU, a restored process whose CUDA state
// is not "running" is killed and reported, and a refused identity never reaches CRIU.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "snapshot/ops.h"
#include "snapshot/store.h"
#include "supervisor/child.h"
#include "support/harness.h"

namespace fr::snapshot {
namespace {

std::string criu_path() {
  const char* env = std::getenv("FR_CRIU");
  return env ? env : FR_CRIU_BIN;
}

// Plays the driver: the CUDA state of each pid it was told about ("running" -> lock -> "locked" ->
// checkpoint -> "checkpointed" -> restore -> "locked" -> unlock -> `after_unlock`). Pids it never saw have
// state `unknown` (a restored tree's new pids: "checkpointed"), or none when that is empty (no CUDA).
class FakeGpu final : public GpuCheckpointer {
 public:
  std::vector<std::string> calls;
  std::map<pid_t, std::string> states;
  std::string unknown;
  std::string after_unlock = "running";
  std::string uuid = "GPU-00000000-1111-2222-3333-444444444444";
  Result<GpuIdentity> identity() override { return GpuIdentity{"13000", uuid, "Fake"}; }
  Status lock(pid_t p, unsigned) override { return step("lock", p, "locked"); }
  Status checkpoint(pid_t p) override { return step("checkpoint", p, "checkpointed"); }
  Status restore(pid_t p) override { return step("restore", p, "locked"); }
  Status unlock(pid_t p) override { return step("unlock", p, after_unlock); }
  Result<std::string> state(pid_t p) override {
    auto it = states.find(p);
    if (it != states.end()) return it->second;
    if (unknown.empty()) return make_error(Errc::kCuda, "cuCheckpointProcessGetState: CUDA_ERROR_NOT_INITIALIZED");
    return states[p] = unknown;
  }

 private:
  Status step(const char* name, pid_t p, const std::string& next) {
    calls.push_back(name);
    states[p] = next;
    return {};
  }
};

class Ops : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "CRIU needs root";
    if (::access(criu_path().c_str(), X_OK) != 0) GTEST_SKIP() << "no criu at " << criu_path() << " (scripts/build-criu.sh)";
    auto g = test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "16M"});
    ASSERT_EQ(g.exit_code, 0) << g.output;
    m_spec.argv = {FR_TINYENGINE_BIN, "serve", m_dir / "model", "--port", std::to_string(m_port)};
    m_spec.port = m_port;
    supervisor::SpawnSpec s;
    s.argv = m_spec.argv;
    s.new_pid_namespace = true;
    auto child = supervisor::spawn_child(s);
    ASSERT_TRUE(child.ok()) << child.error().message;
    m_engine = child->pid;
    m_output = std::move(child->output);
    for (int i = 0; i < 200 && !answers(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(answers());
  }
  void TearDown() override {
    for (pid_t p : {m_engine, m_restored})
      if (p > 0) {
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
      }
  }
  bool answers() {
    return test::run({"/usr/bin/curl", "-sf", "http://127.0.0.1:" + std::to_string(m_port) + "/health"}).exit_code == 0;
  }
  CreateRequest create_request() {
    struct stat st{};
    ::fstat(m_output.get(), &st);
    return CreateRequest{m_engine, m_dir / "snaps", criu_path(), m_spec, "pipe:[" + std::to_string(st.st_ino) + "]",
                         "test", "a", ""};
  }
  RestoreRequest restore_request() {
    RestoreRequest r;
    r.dir = m_dir / "snaps";
    r.criu = criu_path();
    r.spec = m_spec;
    return r;
  }
  void engine_reaped() {
    int st = 0;
    ASSERT_EQ(::waitpid(m_engine, &st, 0), m_engine);  // the dump ended it
    m_engine = -1;
  }
  // A snapshot of the engine as a GPU engine (the driver reports it running), the engine reaped after.
  void create_as_gpu_engine() {
    FakeGpu gpu;
    gpu.states[m_engine] = "running";
    ASSERT_TRUE(create_snapshot(create_request(), gpu).ok());
    engine_reaped();
  }

  test::TempDir m_dir;
  uint16_t m_port = test::free_port();
  EngineSpec m_spec;
  pid_t m_engine = -1, m_restored = -1;
  UniqueFd m_output;
};

TEST_F(Ops, DriverStepsWrapCriuAndARestoredProcessAnswers) {
  FakeGpu gpu;
  gpu.states[m_engine] = "running";
  auto m = create_snapshot(create_request(), gpu);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(gpu.calls, (std::vector<std::string>{"lock", "checkpoint"}));
  EXPECT_TRUE(m->identity.cuda);
  EXPECT_EQ(m->identity.gpu.name, "Fake");
  engine_reaped();
  EXPECT_FALSE(answers());

  // The restored tree has new pids, which the driver knows as checkpointed.
  FakeGpu after;
  after.unknown = "checkpointed";
  auto restored = restore_snapshot(restore_request(), after);
  ASSERT_TRUE(restored.ok()) << restored.error().message;
  m_restored = restored->pid;
  EXPECT_EQ(after.calls, (std::vector<std::string>{"restore", "unlock"}));
  EXPECT_TRUE(answers());
}

TEST_F(Ops, ACudaStateOtherThanRunningKillsTheRestoredProcess) {
  create_as_gpu_engine();
  FakeGpu failing;
  failing.unknown = "checkpointed";
  failing.after_unlock = "failed";
  auto restored = restore_snapshot(restore_request(), failing);
  ASSERT_FALSE(restored.ok());
  EXPECT_NE(restored.error().message.find("is failed, not running"), std::string::npos) << restored.error().message;
  EXPECT_NE(restored.error().message.find("the restored engine was killed"), std::string::npos);
  EXPECT_FALSE(answers());
  // The lock was released: the artifact can be restored again.
  EXPECT_TRUE(Store(m_dir / "snaps").lock("a").ok());
}

TEST_F(Ops, AnotherGpuIsRefusedBeforeCriuRuns) {
  create_as_gpu_engine();
  FakeGpu other;
  other.unknown = "checkpointed";
  other.uuid = "GPU-99999999-1111-2222-3333-444444444444";
  auto restored = restore_snapshot(restore_request(), other);
  ASSERT_FALSE(restored.ok());
  EXPECT_NE(restored.error().message.find("identity.gpu.uuid"), std::string::npos) << restored.error().message;
  EXPECT_FALSE(std::filesystem::exists(m_dir / "snaps/a/images/restore.log"));  // CRIU never ran
}

TEST_F(Ops, ACpuEngineSkipsTheDriver) {
  FakeGpu gpu;  // knows no process: the driver has no state for a CPU engine
  auto m = create_snapshot(create_request(), gpu);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE(gpu.calls.empty());
  EXPECT_FALSE(m->identity.cuda);
  engine_reaped();
}

// A create told that the engine holds fastrestartd's listening socket refuses, before anything stops,
// an engine that does not: its images could not be given the socket back. The engine keeps serving.
TEST_F(Ops, AnEngineWithoutTheNamedListeningSocketIsRefusedAndKeepsServing) {
  FakeGpu gpu;
  gpu.states[m_engine] = "running";
  CreateRequest r = create_request();
  r.listen_socket = "socket:[4242]";
  auto m = create_snapshot(r, gpu);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("the engine does not hold fastrestartd's listening socket socket:[4242]"),
            std::string::npos) << m.error().message;
  EXPECT_TRUE(gpu.calls.empty()) << "nothing was locked or checkpointed";
  EXPECT_TRUE(answers());
  EXPECT_TRUE(Store(m_dir / "snaps").ids().empty());
  r.listen_socket = "pipe:[1]";
  m = create_snapshot(r, gpu);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("invalid listening socket \"pipe:[1]\""), std::string::npos) << m.error().message;
  EXPECT_TRUE(answers());
}

// A restore given a listening socket refuses, before CRIU runs, an artifact made without one.
TEST_F(Ops, AnArtifactWithoutASocketIsRefusedWhenOneIsHanded) {
  FakeGpu gpu;
  ASSERT_TRUE(create_snapshot(create_request(), gpu).ok());
  engine_reaped();
  RestoreRequest r = restore_request();
  r.listen_fd = 0;  // any descriptor: the refusal comes before it is used
  auto restored = restore_snapshot(r, gpu);
  ASSERT_FALSE(restored.ok());
  EXPECT_NE(restored.error().message.find("snapshot a was made with the engine binding its own port"), std::string::npos)
      << restored.error().message;
  EXPECT_FALSE(std::filesystem::exists(m_dir / "snaps/a/images/restore.log"));  // CRIU never ran
}

}  // namespace
}  // namespace fr::snapshot
