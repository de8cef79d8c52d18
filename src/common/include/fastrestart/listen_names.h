// The names fastrestartd gives, in LISTEN_FDNAMES, the sockets it passes an engine (docs/listen-socket.md),
// and the variable naming their accept queue's length:
// the one definition that fastrestartd (src/supervisor) and the engine's helpers (fastrestart/listen_socket.h
// and its C ABI) both use. The Python helper (python/fastrestart/listen.py) keeps a copy of its own, being
// pure Python, as does the vLLM launcher (python/fastrestart_vllm/launch.py) of the variable;
// tests/common/listen_names_test.cc holds those copies equal to these.
#pragma once

namespace fastrestart {

// The listening socket on the engine's port (engine.listen = "supervisor"), passed as fd 3.
inline constexpr const char* kListenFdName = "fastrestart-engine";
// The engine's private endpoint (readiness.endpoint = "private"), passed as fd 4 beside it.
inline constexpr const char* kProbeFdName = "fastrestart-probe";
// The environment variable in which fastrestartd tells an engine it passes a socket to the accept queue's
// configured length (engine.listen_backlog). A server that calls listen(2) again on the socket (uvicorn:
// 2048) sets a new length for the socket's whole life, which the next engine would read back from the
// socket; the vLLM launcher listens with this value instead (docs/vllm.md, "The launcher").
inline constexpr const char* kListenBacklogEnv = "FASTRESTART_LISTEN_BACKLOG";

}  // namespace fastrestart
