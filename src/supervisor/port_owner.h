// Who listens on a TCP port, for the standby (that it has not bound the engine's port before its release,
// docs/standby.md, "The gate protocol") and for the instance claims (who listens on it at all,
// instance_claims.h): beside both, so neither reaches into the other's folder. Reads /proc/net/tcp and
// /proc/net/tcp6 (this network namespace) for listening sockets on the port, then the processes'
// /proc/<pid>/fd for them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>

namespace fr::supervisor {

// The socket inodes listening on `port` (any address, IPv4 or IPv6), from the text of /proc/net/tcp{,6}.
std::set<uint64_t> listening_inodes(const std::string& proc_net_tcp_text, uint16_t port);

// The pid of a member of group `pgid` that holds a socket listening on `port`, or 0 when none does.
// `ours`: the inode of the socket fastrestartd hands down (engine.listen = "supervisor"), which every
// standby holds and which is not a listener of its own; 0: none.
pid_t group_listener(pid_t pgid, uint16_t port, uint64_t ours = 0);

// The pid of any process that holds a socket listening on `port`, or 0 when none does or when the holder's
// /proc/<pid>/fd cannot be read (another user's process); *listening says whether a socket listens at all.
pid_t port_listener(uint16_t port, bool* listening = nullptr);

}  // namespace fr::supervisor
