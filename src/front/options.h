// What fastrestart-front is started with (docs/front.md; fastrestartd passes the front.* keys of its
// config as these flags).
#pragma once

#include <cstddef>
#include <string>

namespace fr::front {

struct FrontOptions {
  std::string upstream;              // the engine's endpoint, "host:port" (IPv4 or [IPv6])
  double hold_s = 30;                // front.hold_s: how long a request waits for the engine to answer again
  size_t max_held_requests = 1024;   // front.max_held_requests: held at once; one more is answered 503
  size_t max_body_bytes = 1 << 20;   // front.max_body_bytes: a larger request body is answered 413
  size_t max_response_bytes = 16 << 20;  // front.max_response_bytes: a larger buffered answer is 503
  std::string status_file;           // the counters as JSON, rewritten (atomically) when they change
  double stop_grace_s = 10;          // SIGTERM: how long requests in flight may still finish
  size_t max_idle_connections = 0;   // front.max_idle_connections: kept-alive connections to the engine; 0: one per request
};

}  // namespace fr::front
