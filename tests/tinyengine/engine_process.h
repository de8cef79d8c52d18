// Test support: the real fastrestart-tinyengine binary as a child process on an ephemeral port, and a
// small checkpoint fixture.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace fr::te::test {

std::string tinyengine_bin();

// Runs `fastrestart-tinyengine serve <model> --port 0 --port-file ... <args...>` in its own process group,
// output to a log file. The destructor SIGKILLs the group (workers included) and reaps.
// How to start it beyond the flags: variables set on top of the test's environment, and a fixed port (0:
// `--port 0`). File descriptors the test leaves open without FD_CLOEXEC are inherited.
struct EngineStart {
  std::map<std::string, std::string> env;
  int port = 0;
};

class Engine {
 public:
  Engine(const std::string& model, const std::vector<std::string>& args, const EngineStart& start = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  pid_t pid() const { return m_pid; }
  // Waits for the port file; false if the process exited first or on timeout.
  bool wait_port(double timeout_s = 10);
  // Waits for /health 200.
  bool wait_ready(double timeout_s = 10);
  int port() const { return m_port; }
  httplib::Client client(double read_timeout_s = 10) const;
  // Sends a signal to the engine only (not its group).
  void signal(int sig) const;
  // Exit code, 128 + signal, or nullopt while still running after `timeout_s`.
  std::optional<int> wait_exit(double timeout_s);
  std::string log() const;

  // GET path -> (status, parsed JSON body); status -1 on a transport error.
  std::pair<int, nlohmann::json> get(const std::string& path, double timeout_s = 10) const;
  std::pair<int, nlohmann::json> post(const std::string& path, const nlohmann::json& body, double timeout_s = 10) const;

 private:
  std::string m_dir, m_log, m_port_file;
  pid_t m_pid = -1;
  int m_port = 0;
  std::optional<int> m_exit;
};

// A tiny checkpoint written once per test binary (deterministic), shared by the tests.
const std::string& tiny_checkpoint();
// The same with GenOptions::printable: greedy answers in printable ASCII, which round-trip as text.
const std::string& printable_checkpoint();

// A completion's token ids and log-probabilities.
struct Answer {
  std::vector<int> tokens;
  std::vector<double> logprobs;
  bool operator==(const Answer&) const = default;
};
Answer answer_of(const nlohmann::json& completion);
nlohmann::json completion_request(const std::string& prompt, int max_tokens = 8);

}  // namespace fr::te::test
