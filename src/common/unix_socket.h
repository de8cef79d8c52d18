// Unix-domain stream sockets: listen, connect with a deadline, peer credentials, and sending or receiving
// bytes with file descriptors attached (SCM_RIGHTS). See docs/protocol.md, "Transport".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/result.h"

namespace fr {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline deadline_in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Binds and listens on `path` (which must not exist) and sets the socket file's mode (0600 or 0660).
Result<UniqueFd> listen_unix(const std::string& path, mode_t mode);
// Connects to `path`, retrying while the socket is absent or refuses (a daemon still starting), until
// `deadline`. The error says whether the socket was missing, refused or not permitted.
Result<UniqueFd> connect_unix(const std::string& path, Deadline deadline);

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
Result<PeerCred> peer_cred(int sock);
// True when `pid` (a connected peer) has `gid` as its primary or a supplementary group (/proc/<pid>/status).
bool peer_in_group(const PeerCred& peer, gid_t gid);

// Sends all of `data`; `fds` (at most kMaxFdsPerFrame) ride on the first byte. MSG_NOSIGNAL: a closed peer
// is an error, never SIGPIPE.
Status send_all(int sock, const void* data, size_t n, const std::vector<int>& fds, Deadline deadline);
// Receives exactly `n` bytes (n > 0), collecting any descriptors that arrive into `fds` (CLOEXEC).
// Errc::kCancelled when the peer closed before the first byte (a clean end of stream).
Status recv_exact(int sock, void* data, size_t n, std::vector<UniqueFd>* fds, Deadline deadline);
// Receives 1..n bytes (n > 0) as soon as any arrived; returns how many. Errc::kCancelled when the peer closed.
Result<size_t> recv_some(int sock, void* data, size_t n, std::vector<UniqueFd>* fds, Deadline deadline);

}  // namespace fr
