// A real fastrestartd (the soak and the security tests): started, SIGKILLed and restarted by the test, and
// spoken to over its control socket (frames of docs/protocol.md) and its HTTP listener.
#pragma once

#include <sys/types.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "fastrestart/result.h"

namespace fr::test {

using nlohmann::json;

class Supervised {
 public:
  // `config`: the TOML file; `control`: its control socket; `log`: where fastrestartd writes.
  Supervised(std::string binary, std::string config, std::string control, std::string log);
  ~Supervised();  // SIGTERM and wait, if still running

  void start();
  // Sends `sig` and waits; returns the exit code (128 + signal).
  int stop(int sig);
  pid_t pid() const { return m_pid; }

  // One request over the control socket and its reply.
  Result<json> request(const json& req, double timeout_s = 30);
  // The status ("status" of {"op":"status"}), or an empty object when it cannot be had.
  json status();
  // Polls the status until pred holds; the last status seen goes to *last. False on timeout.
  bool wait_for(const std::function<bool(const json&)>& pred, double timeout_s, json* last = nullptr);
  // READY with an engine other than `not_pid` whose last start is that engine (a restart is over); the
  // status then goes to *last. False on timeout.
  bool wait_ready(json* last, pid_t not_pid = 0, double timeout_s = 90);
  // wait_ready that fails the test (EXPECT, with the log) when it times out; returns the status then.
  json expect_ready(pid_t not_pid = 0);
  // Waits (90 s) for a parked standby other than `not_pid`, failing the test (EXPECT) when none comes;
  // returns the status then.
  json expect_parked(pid_t not_pid = 0);
  std::string log() const;
  const std::string& control() const { return m_control; }

 private:
  std::string m_binary, m_config, m_control, m_log;
  pid_t m_pid = -1;
};

// The entry of `path` in a status's start_paths (or its last_start's attempts), or an empty object.
json find_start_path(const json& attempts, const std::string& path);

// HTTP against an engine or fastrestartd: {status, body}; status 0 when no answer came.
struct HttpAnswer {
  int status = 0;
  std::string body;
};
HttpAnswer http_get(uint16_t port, const std::string& path, double timeout_s = 5);
HttpAnswer http_post(uint16_t port, const std::string& path, const json& body, double timeout_s = 10);

}  // namespace fr::test
