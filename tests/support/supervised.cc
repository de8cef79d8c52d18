#include "support/supervised.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/unix_socket.h"
#include "support/harness.h"
#include "protocol/frame.h"

namespace fr::test {

Supervised::Supervised(std::string binary, std::string config, std::string control, std::string log)
    : m_binary(std::move(binary)), m_config(std::move(config)), m_control(std::move(control)), m_log(std::move(log)) {}

Supervised::~Supervised() {
  if (m_pid > 0) stop(SIGTERM);
}

void Supervised::start() {
  m_pid = spawn_logged({m_binary, "--config", m_config, "--log-level", "debug"}, m_log);
}

int Supervised::stop(int sig) {
  if (m_pid <= 0) return -1;
  ::kill(m_pid, sig);
  int st = 0;
  while (::waitpid(m_pid, &st, 0) < 0 && errno == EINTR) {
  }
  m_pid = -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Result<json> Supervised::request(const json& req, double timeout_s) {
  const auto deadline = deadline_in(timeout_s);
  FR_ASSIGN(auto fd, connect_unix(m_control, deadline));
  FR_TRY(proto::write_frame(fd.get(), req, -1, deadline));
  FR_ASSIGN(auto f, proto::read_frame(fd.get(), deadline));
  return std::move(f.body);
}

json Supervised::status() {
  auto r = request({{"op", "status"}}, 10);
  if (!r.ok() || !r->value("ok", false) || !r->contains("status")) return json::object();
  return (*r)["status"];
}

bool Supervised::wait_ready(json* last, pid_t not_pid, double timeout_s) {
  return wait_for([&](const json& j) {
    return j.value("state", "") == "ready" && j["engine"].is_object() && j["engine"].value("pid", 0) != not_pid &&
           j["last_start"].is_object() && j["last_start"].value("pid", 0) == j["engine"].value("pid", 0);
  }, timeout_s, last);
}

json Supervised::expect_ready(pid_t not_pid) {
  json s;
  EXPECT_TRUE(wait_ready(&s, not_pid)) << log();
  return s;
}

json Supervised::expect_parked(pid_t not_pid) {
  json s;
  EXPECT_TRUE(wait_for([&](const json& j) {
    return j["standby"].is_object() && j["standby"].value("state", "") == "parked" && j["standby"].value("pid", 0) != not_pid;
  }, 90, &s)) << log();
  return s;
}

json find_start_path(const json& attempts, const std::string& path) {
  for (const auto& a : attempts)
    if (a.value("path", "") == path) return a;
  return json::object();
}

bool Supervised::wait_for(const std::function<bool(const json&)>& pred, double timeout_s, json* last) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  do {
    json s = status();
    if (last) *last = s;
    if (!s.empty() && pred(s)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

std::string Supervised::log() const {
  std::ifstream f(m_log);
  return {std::istreambuf_iterator<char>(f), {}};
}

namespace {

httplib::Client client(uint16_t port, double timeout_s) {
  httplib::Client c("127.0.0.1", port);
  const auto sec = static_cast<time_t>(timeout_s);
  const auto usec = static_cast<time_t>((timeout_s - static_cast<double>(sec)) * 1e6);
  c.set_connection_timeout(sec, usec);
  c.set_read_timeout(sec, usec);
  c.set_keep_alive(false);
  return c;
}

}  // namespace

HttpAnswer http_get(uint16_t port, const std::string& path, double timeout_s) {
  auto c = client(port, timeout_s);
  auto r = c.Get(path);
  return r ? HttpAnswer{r->status, r->body} : HttpAnswer{};
}

HttpAnswer http_post(uint16_t port, const std::string& path, const json& body, double timeout_s) {
  auto c = client(port, timeout_s);
  auto r = c.Post(path, body.dump(), "application/json");
  return r ? HttpAnswer{r->status, r->body} : HttpAnswer{};
}

}  // namespace fr::test
