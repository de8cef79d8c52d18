// The CUDA forward (--device cuda:0). Every test skips, saying why, on a machine without a GPU or in a
// build without the CUDA toolkit; the GPU run executes them.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine_process.h"
#include "support/harness.h"
#include "tinyengine/checkpoint.h"
#include "tinyengine/cuda_model.h"
#include "tinyengine/loader.h"

namespace fr::te::test {
namespace {

const std::string kPrompt = "The quick brown fox";

// Why the CUDA forward cannot run here, or "" when it can.
std::string why_no_gpu() {
  static const std::string reason = [] {
    float one = 1.0f;
    TensorSet host;
    host.tensors["x"] = TensorView{DType::kF32, {1}, &one, 4};
    auto r = upload_to_cuda(host, 0);
    return r.ok() ? std::string() : r.error().to_string();
  }();
  return reason;
}
#define SKIP_WITHOUT_GPU()                                                    \
  do {                                                                        \
    if (!why_no_gpu().empty()) GTEST_SKIP() << "no CUDA forward here: " << why_no_gpu(); \
  } while (0)

struct Host {
  CheckpointInfo info;
  DiskLoad disk;
};
Host load_host(const std::string& dir) {
  auto info = inspect_checkpoint(dir);
  EXPECT_TRUE(info.ok());
  auto disk = load_from_disk(*info);
  EXPECT_TRUE(disk.ok());
  return {*info, std::move(*disk)};
}

std::shared_ptr<CudaModel> on_gpu(const Host& h, TensorSet& keep) {
  auto up = upload_to_cuda(h.disk.set, 0);
  EXPECT_TRUE(up.ok()) << up.error().to_string();
  keep = std::move(*up);
  auto m = bind_cuda_model(h.info.config, keep.lookup(), 0);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return *m;
}

bool same(const Generation& a, const Generation& b) {
  if (a.steps.size() != b.steps.size()) return false;
  for (size_t i = 0; i < a.steps.size(); ++i)
    if (a.steps[i].token != b.steps[i].token || std::memcmp(&a.steps[i].logprob, &b.steps[i].logprob, 4) != 0)
      return false;
  return true;
}

void expect_matches_cpu(DType dtype) {
  fr::test::TempDir d;
  GenOptions o;
  o.config.dtype = dtype;
  ASSERT_TRUE(generate_checkpoint(o, d.path()).ok());
  Host h = load_host(d.path());
  auto cpu = Model::bind(h.info.config, h.disk.set.lookup());
  ASSERT_TRUE(cpu.ok());
  TensorSet keep;
  auto gpu = on_gpu(h, keep);
  const auto c = cpu->generate(tokenize(kPrompt), 16, 0);
  const auto g1 = gpu->generate(tokenize(kPrompt), 16, 0);
  const auto g2 = gpu->generate(tokenize(kPrompt), 16, 0);
  ASSERT_TRUE(g1.error.empty()) << g1.error;
  EXPECT_TRUE(same(g1, g2));  // deterministic on the GPU
  ASSERT_EQ(g1.steps.size(), c.steps.size());
  for (size_t i = 0; i < c.steps.size(); ++i) {
    EXPECT_EQ(g1.steps[i].token, c.steps[i].token) << i;
    EXPECT_NEAR(g1.steps[i].logprob, c.steps[i].logprob, 1e-3) << i;
  }
}

TEST(TinyEngineCuda, MatchesTheCpuForwardAndIsDeterministicF32) {
  SKIP_WITHOUT_GPU();
  expect_matches_cpu(DType::kF32);
}

TEST(TinyEngineCuda, MatchesTheCpuForwardAndIsDeterministicBF16) {
  SKIP_WITHOUT_GPU();
  expect_matches_cpu(DType::kBF16);
}

TEST(TinyEngineCuda, ChangingAnyReadWeightChangesTheAnswer) {
  SKIP_WITHOUT_GPU();
  fr::test::TempDir d;
  ASSERT_TRUE(generate_checkpoint(GenOptions{}, d.path()).ok());
  Host h = load_host(d.path());
  TensorSet keep;
  const auto prompt = tokenize(kPrompt);
  const auto base = on_gpu(h, keep)->generate(prompt, 4, 0);
  for (const auto& spec : tensor_specs(h.info.config)) {
    std::byte* p = h.disk.mutable_data(spec.name);
    const int64_t row = spec.shape.size() == 2 ? spec.shape[1] : spec.numel();
    int64_t i = spec.numel() / 2;
    if (spec.name == "tok_emb") i = prompt[1] * row + 3;
    if (spec.name == "pos_emb") i = 2 * row + 3;
    float v;
    std::memcpy(&v, p + i * 4, 4);
    const float changed = v + 0.5f;
    std::memcpy(p + i * 4, &changed, 4);
    TensorSet k2;
    const auto g = on_gpu(h, k2)->generate(prompt, 4, 0);
    EXPECT_FALSE(same(base, g)) << spec.name << "[" << i << "] changed nothing on the GPU";
    std::memcpy(p + i * 4, &v, 4);
  }
}

TEST(TinyEngineCuda, ServesOnTheDeviceWithTheCpuTokens) {
  SKIP_WITHOUT_GPU();
  Engine cpu(tiny_checkpoint(), {});
  Engine gpu(tiny_checkpoint(), {"--device", "cuda:0"});
  ASSERT_TRUE(cpu.wait_ready()) << cpu.log();
  ASSERT_TRUE(gpu.wait_ready(60)) << gpu.log();
  auto [st, c] = gpu.post("/v1/completions", completion_request(kPrompt, 12));
  ASSERT_EQ(st, 200) << c.dump();
  EXPECT_EQ(answer_of(c).tokens, answer_of(cpu.post("/v1/completions", completion_request(kPrompt, 12)).second).tokens);
  auto stats = gpu.get("/stats").second;
  EXPECT_EQ(stats["device"].get<std::string>().rfind("cuda:0", 0), 0u) << stats.dump();
  EXPECT_TRUE(stats["load"]["phases"].contains("upload_s")) << stats.dump();
}

// A fastrestart-weightd with the CUDA backend on GPU 0; SIGTERM and reap on destruction.
class CudaDaemon {
 public:
  explicit CudaDaemon(const std::string& dir) : m_dir(dir) {
    m_pid = fork();
    if (m_pid == 0) {
      int fd = ::open((dir + "/weightd.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(fr::test::weightd().c_str(), "fastrestart-weightd", "--backend", "cuda", "--gpu", "0", "--socket-dir",
            dir.c_str(), nullptr);
      _exit(127);
    }
  }
  ~CudaDaemon() {
    kill(m_pid, SIGTERM);
    waitpid(m_pid, nullptr, 0);
  }
  bool wait_socket(double timeout_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      if (DIR* d = opendir(m_dir.c_str())) {
        bool found = false;
        while (dirent* e = readdir(d)) found |= std::string(e->d_name).rfind("weightd-GPU-", 0) == 0 &&
                                               std::string(e->d_name).find(".sock") != std::string::npos;
        closedir(d);
        if (found) return true;
      }
      if (waitpid(m_pid, nullptr, WNOHANG) == m_pid) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  std::string m_dir;
  pid_t m_pid = -1;
};

TEST(TinyEngineCuda, PublishThenAttachThroughTheCudaBackend) {
  SKIP_WITHOUT_GPU();
  fr::test::TempDir tmp;
  const std::string sockets = tmp / "run";
  ::mkdir(sockets.c_str(), 0700);
  CudaDaemon daemon(sockets);
  ASSERT_TRUE(daemon.wait_socket(60)) << "fastrestart-weightd --backend cuda did not start";
  const std::vector<std::string> args = {"--device", "cuda:0", "--load-format", "fastrestart",
                                         "--fastrestart-socket-dir", sockets};
  Answer cold_answer;
  {
    Engine cold(tiny_checkpoint(), args);
    ASSERT_TRUE(cold.wait_ready(60)) << cold.log();
    auto stats = cold.get("/stats").second;
    EXPECT_EQ(stats["load"]["path"], "fallback") << stats.dump();
    EXPECT_EQ(stats["load"]["published"], true) << stats.dump();
    cold_answer = answer_of(cold.post("/v1/completions", completion_request(kPrompt, 12)).second);
    cold.signal(SIGTERM);
    EXPECT_EQ(cold.wait_exit(10), 0);
  }
  Engine warm(tiny_checkpoint(), args);
  ASSERT_TRUE(warm.wait_ready(60)) << warm.log();
  auto stats = warm.get("/stats").second;
  EXPECT_EQ(stats["load"]["path"], "attach") << stats.dump();
  EXPECT_EQ(stats["load"]["mode"], "zero_copy");
  EXPECT_EQ(answer_of(warm.post("/v1/completions", completion_request(kPrompt, 12)).second), cold_answer);
}

}  // namespace
}  // namespace fr::te::test

namespace fr::te::test {
namespace {

TEST(TinyEngineCuda, WithoutAGpuDeviceCudaFailsToStartWithTheReason) {
  if (why_no_gpu().empty()) GTEST_SKIP() << "a GPU is present";
  Engine e(tiny_checkpoint(), {"--device", "cuda:0"});
  EXPECT_EQ(e.wait_exit(10), 1) << e.log();
  EXPECT_NE(e.log().find(why_no_gpu().substr(why_no_gpu().find(':') + 2)), std::string::npos) << e.log();
}

TEST(TinyEngineCuda, BadDeviceIsUsage) {
  auto r = fr::test::run({tinyengine_bin(), "serve", tiny_checkpoint(), "--device", "gpu0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace fr::te::test
