// The standby gate (fastrestart/standby.h, docs/standby.md "The gate protocol"): one parked line out, one
// reply line in, over the socket fastrestartd passed in FASTRESTART_STANDBY_FD.
#include "fastrestart/standby.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/bounded_json.h"
#include "common/fd.h"
#include "common/parse_number.h"
#include "protocol/messages.h"

namespace fastrestart {
namespace {

using fr::proto::json;

constexpr size_t kMaxMessage = 4096;  // with the newline

const char* env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

using fr::bad_env;

// The fd in FASTRESTART_STANDBY_FD, checked to be an open stream socket.
Result<int> standby_fd() {
  const std::string v = env_or_empty(kStandbyFdEnv);
  FR_ASSIGN(const int fd, fr::parse_env_int<int>(kStandbyFdEnv, v, 0, INT_MAX, "not a file descriptor number"));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return bad_env(kStandbyFdEnv, v, std::string("not an open file descriptor (") + std::strerror(errno) + ")");
  int type = 0;
  socklen_t len = sizeof type;
  if (!S_ISSOCK(st.st_mode) || ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    return bad_env(kStandbyFdEnv, v, "not a stream socket");
  return fd;
}

// The supervisor is gone (or discarded this standby): a standby never outlives it.
[[noreturn]] void exit_now() {
  std::fflush(nullptr);
  ::_exit(0);
}

bool peer_gone(int err) { return err == EPIPE || err == ECONNRESET; }

Status write_line(int fd, const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (peer_gone(errno)) exit_now();
      return fr::sys_error(std::string("standby gate: write to ") + kStandbyFdEnv);
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

// One line, read a byte at a time so nothing past the newline is consumed. Exits on end of file.
Result<std::string> read_line(int fd) {
  std::string line;
  for (;;) {
    char c;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (peer_gone(errno)) exit_now();
      return fr::sys_error(std::string("standby gate: read from ") + kStandbyFdEnv);
    }
    if (n == 0) exit_now();
    if (c == '\n') return line;
    line += c;
    if (line.size() >= kMaxMessage)
      return Error{Errc::kProtocol, "standby gate: message over " + std::to_string(kMaxMessage) + " bytes: " +
                                        line.substr(0, 64) + "..."};
  }
}

}  // namespace

bool is_standby() { return *env_or_empty(kStandbyFdEnv) != '\0'; }

Result<GateResult> standby_gate(std::string_view level) {
  if (level != "pre_gpu" && level != "warmed")
    return Error{Errc::kInvalidArgument, "standby gate: level \"" + std::string(level) + "\": expected pre_gpu or warmed"};
  if (!is_standby()) return GateResult::kPassed;
  const std::string configured = env_or_empty(kStandbyLevelEnv);
  if (configured != "pre_gpu" && configured != "warmed") return bad_env(kStandbyLevelEnv, configured, "expected pre_gpu or warmed");
  if (configured != level) return GateResult::kPassed;
  FR_ASSIGN(const int fd, standby_fd());

  const json parked = {{"op", "parked"}, {"v", 1}, {"level", configured}, {"pid", ::getpid()}};
  FR_TRY(write_line(fd, parked.dump() + "\n"));
  FR_ASSIGN(const std::string line, read_line(fd));
  const json msg = fr::parse_json_or_discarded(line, fr::kSmallJsonLimits);
  const auto bad = [&](const std::string& why) { return Error{Errc::kProtocol, "standby gate: " + why + ": " + line}; };
  if (msg.is_discarded()) return bad("not JSON");
  if (!msg.is_object()) return bad("not a JSON object");
  const auto op = msg.find("op");
  if (op == msg.end() || !op->is_string()) return bad("no \"op\" string");
  if (*op == "exit") exit_now();
  if (*op != "release") return bad("unknown op");
  fr::UniqueFd{fd}.reset();
  ::unsetenv(kStandbyFdEnv);
  ::unsetenv(kStandbyLevelEnv);
  return GateResult::kReleased;
}

}  // namespace fastrestart
