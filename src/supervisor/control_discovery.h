// Finding fastrestartd instances without being told which: fastrestartctl with no --socket/--config/--name
// (docs/supervisor.md, "Which instance"). Like systemctl, the common case of one instance needs no target.
#pragma once

#include <string>
#include <vector>

namespace fr::supervisor {

// The directories default control sockets live in, in this order and without duplicates: /run/fastrestart,
// $XDG_RUNTIME_DIR/fastrestart, /tmp/fastrestart-<uid> (default_socket_dir() for root and for this user).
std::vector<std::string> control_socket_dirs();

// The *.ctl sockets in `dirs` that a fastrestartd answers on (a connection is accepted); stale socket files
// and directories we cannot read are skipped. Sorted.
std::vector<std::string> live_control_sockets(const std::vector<std::string>& dirs);

}  // namespace fr::supervisor
