// The names fastrestartd gives, in LISTEN_FDNAMES, the sockets it passes an engine (docs/listen-socket.md):
// the one definition that fastrestartd (src/supervisor) and the engine's helpers (fastrestart/listen_socket.h
// and its C ABI) both use. The Python helper (python/fastrestart/listen.py) keeps a copy of its own, being
// pure Python; tests/common/listen_names_test.cc holds that copy equal to these.
#pragma once

namespace fastrestart {

// The listening socket on the engine's port (engine.listen = "supervisor"), passed as fd 3.
inline constexpr const char* kListenFdName = "fastrestart-engine";
// The engine's private endpoint (readiness.endpoint = "private"), passed as fd 4 beside it.
inline constexpr const char* kProbeFdName = "fastrestart-probe";

}  // namespace fastrestart
