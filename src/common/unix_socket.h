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

// Who sent the bytes one recvmsg returned, as the kernel attached them to those bytes (not to the
// connection): SCM_CREDENTIALS once the receiver set SO_PASSCRED, SCM_PIDFD once it set SO_PASSPIDFD
// (Linux 6.5). The kernel never joins bytes of two senders in one recvmsg, and a sender can name no pid,
// uid or gid but its own (without CAP_SYS_ADMIN / CAP_SETUID), so these name the process that wrote them.
struct MessageSender {
  bool has_cred = false;  // SCM_CREDENTIALS arrived
  pid_t pid = 0;          // 0: the sender is in a pid namespace the receiver cannot see
  uid_t uid = 0;
  gid_t gid = 0;
  bool has_pidfd = false;  // SCM_PIDFD arrived (a descriptor, or the kernel's error in its place)
  UniqueFd pidfd;          // invalid when the kernel could not make one (the sender had been reaped)
};
// As above, also filling `sender` from the message's credentials (left empty when none came).
Result<size_t> recv_some(int sock, void* data, size_t n, std::vector<UniqueFd>* fds, Deadline deadline,
                         MessageSender* sender);
// Sets SO_PASSCRED on `sock` (a listening socket passes it to the connections it accepts) and, where the
// kernel has it, SO_PASSPIDFD. Returns whether SO_PASSPIDFD is on.
Result<bool> pass_sender_credentials(int sock);
// The pid a pidfd refers to (its /proc fdinfo "Pid:" line); -1 once the process was reaped, 0 when it is
// in a pid namespace this process cannot see.
Result<pid_t> pidfd_pid(int pidfd);

}  // namespace fr
