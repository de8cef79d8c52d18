// fastrestartd's listening socket inside a snapshot (docs/snapshot.md, "The listening socket").
//
// With engine.listen = "supervisor" the engine holds, as fd 3, a TCP listening socket that fastrestartd
// owns and keeps open. CRIU dumps it as an ordinary listening socket and at restore creates a new one and
// binds it to the same address, which fails with EADDRINUSE while fastrestartd listens there. And it has
// no way to take an inet socket from the caller: `--inherit-fd fd[N]:socket:[inode]` is matched only for
// the kinds of file that have a name in CRIU (pipes, unix sockets, regular files), not for inet sockets
// (CRIU 4.2.1's sk-inet.c; a restore with the key still binds, and fails).
//
// So after the dump the images are rewritten: the socket's entry in files.img becomes a unix socket
// entry with the same id and inode, and each descriptor that referred to it (fdinfo-*.img) refers to it
// as one. At restore CRIU finds `socket:[inode]` in its --inherit-fd list and installs, at each of those
// descriptor numbers, a duplicate of the descriptor fastrestartd's helper hands it: fastrestartd's live
// socket, with whatever connections wait in its accept queue. Nothing of the dumped socket is needed:
// its address, options and queue are those of the socket that is handed down.
//
// The CRIU image layout relied on (criu/images/*.proto, stable since CRIU 3.x): a file is two 32-bit
// little-endian magics, then entries, each a 32-bit little-endian length and a protobuf message.
// files.img holds `file_entry` (type = 1, id = 2, isk = 4, usk = 16), fdinfo-*.img `fdinfo_entry`
// (id = 1, flags = 2, type = 3, fd = 4); fd types INETSK = 4, UNIXSK = 5.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fastrestart/result.h"

namespace fr::snapshot {

// "socket:[<inode>]", the name /proc/<pid>/fd shows and CRIU's --inherit-fd key.
std::string socket_name(uint64_t inode);
// The inode of "socket:[<inode>]"; nullopt for anything else.
std::optional<uint64_t> parse_socket_name(const std::string& name);

// Rewrites the images under `images` (a finished `criu dump`) so that the TCP listening socket with
// `inode` is restored from --inherit-fd under the key socket_name(inode). Returns how many descriptors
// (over every process of the tree) referred to it. Errors, with nothing written: the images hold no such
// socket ("the engine did not hold ..."), it is not listening, or an image cannot be read or parsed
// (Errc::kCorrupt naming the file). Each rewritten file is replaced atomically (temporary file, rename).
Result<int> hand_down_listen_socket(const std::string& images, uint64_t inode);

}  // namespace fr::snapshot
