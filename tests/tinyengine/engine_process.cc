#include "engine_process.h"

#include "support/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "tinyengine/checkpoint.h"

namespace fr::te::test {
namespace {

using Clock = std::chrono::steady_clock;

std::string make_temp_dir() {
  std::string tmpl = "/tmp/tinyengine-test-XXXXXX";
  if (!::mkdtemp(tmpl.data())) std::abort();
  return tmpl;
}

}  // namespace

std::string tinyengine_bin() { return fr::test::binary(FR_TINYENGINE_BIN, "fastrestart-tinyengine"); }

Engine::Engine(const std::string& model, const std::vector<std::string>& args, const EngineStart& start)
    : m_dir(make_temp_dir()) {
  m_log = m_dir + "/engine.log";
  m_port_file = m_dir + "/port";
  std::vector<std::string> argv = {tinyengine_bin(), "serve", model, "--port", std::to_string(start.port),
                                   "--port-file", m_port_file};
  argv.insert(argv.end(), args.begin(), args.end());
  m_pid = ::fork();
  if (m_pid == 0) {
    ::setpgid(0, 0);
    int fd = ::open(m_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& [k, v] : start.env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::setpgid(m_pid, m_pid);
}

Engine::~Engine() {
  if (m_pid > 0) {
    ::kill(-m_pid, SIGKILL);
    if (!m_exit) ::waitpid(m_pid, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(m_dir, ec);
}

bool Engine::wait_port(double timeout_s) {
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < until) {
    std::ifstream f(m_port_file);
    if (f >> m_port && m_port > 0) return true;
    if (wait_exit(0)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool Engine::wait_ready(double timeout_s) {
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  if (!m_port && !wait_port(timeout_s)) return false;
  while (Clock::now() < until) {
    if (get("/health", 2).first == 200) return true;
    if (wait_exit(0)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

httplib::Client Engine::client(double read_timeout_s) const {
  httplib::Client c("127.0.0.1", m_port);
  c.set_connection_timeout(std::chrono::milliseconds(2000));
  c.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(read_timeout_s)));
  return c;
}

void Engine::signal(int sig) const { ::kill(m_pid, sig); }

std::optional<int> Engine::wait_exit(double timeout_s) {
  if (m_exit) return m_exit;
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int st = 0;
    if (::waitpid(m_pid, &st, WNOHANG) == m_pid) {
      m_exit = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return m_exit;
    }
    if (Clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string Engine::log() const {
  std::ifstream f(m_log);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::pair<int, nlohmann::json> Engine::get(const std::string& path, double timeout_s) const {
  auto c = client(timeout_s);
  auto r = c.Get(path.c_str());
  if (!r) return {-1, nullptr};
  return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
}

std::pair<int, nlohmann::json> Engine::post(const std::string& path, const nlohmann::json& body, double timeout_s) const {
  auto c = client(timeout_s);
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r) return {-1, nullptr};
  return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
}

// A checkpoint generated on first use in this test process, removed at its exit.
static std::string generated_for_this_process(const GenOptions& o) {
  static std::vector<std::string> dirs;
  static const bool cleanup = std::atexit([] {
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }) == 0;
  (void)cleanup;
  std::string dir = make_temp_dir();
  if (!generate_checkpoint(o, dir)) std::abort();
  dirs.push_back(dir);
  return dir;
}

const std::string& tiny_checkpoint() {
  static const std::string path = [] {
    GenOptions o;
    o.seed = 7;
    return generated_for_this_process(o);
  }();
  return path;
}

const std::string& printable_checkpoint() {
  static const std::string path = [] {
    GenOptions o;
    o.seed = 7;
    o.printable = true;
    return generated_for_this_process(o);
  }();
  return path;
}

Answer answer_of(const nlohmann::json& completion) {
  Answer a;
  const auto& c = completion.at("choices").at(0);
  a.tokens = c.at("token_ids").get<std::vector<int>>();
  if (c.contains("logprobs") && !c["logprobs"].is_null())
    a.logprobs = c["logprobs"].at("token_logprobs").get<std::vector<double>>();
  return a;
}

nlohmann::json completion_request(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"logprobs", 1}};
}

}  // namespace fr::te::test
