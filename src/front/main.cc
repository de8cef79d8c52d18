// fastrestart-front: holds clients' HTTP connections across an engine's death (docs/front.md,
// docs/man/fastrestart-front.1.md). Takes its listening socket as fd 3 (LISTEN_FDS, as fastrestartd with
// engine.listen = "front" or a systemd socket unit passes it).
#include <csignal>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "fastrestart/listen_socket.h"
#include "front/front.h"

int main(int argc, char** argv) {
  fr::front::FrontOptions o;
  CLI::App app{"fastrestart-front: holds clients' requests across an engine's restart"};
  app.add_option("--upstream", o.upstream, "the engine's endpoint, host:port (an IP address)")->required();
  app.add_option("--hold-s", o.hold_s, "seconds a request waits for the engine to answer again (front.hold_s)")
      ->capture_default_str();
  app.add_option("--max-held-requests", o.max_held_requests, "requests held at once (front.max_held_requests)")
      ->capture_default_str();
  app.add_option("--max-body-bytes", o.max_body_bytes, "largest request body; larger: 413 (front.max_body_bytes)")
      ->capture_default_str();
  app.add_option("--max-response-bytes", o.max_response_bytes,
                 "largest buffered answer; larger: 503 (front.max_response_bytes)")
      ->capture_default_str();
  app.add_option("--max-idle-connections", o.max_idle_connections,
                 "kept-alive connections to the engine between requests; 0: a new one per request "
                 "(front.max_idle_connections)")
      ->capture_default_str();
  app.add_option("--status-file", o.status_file, "write the counters here as JSON when they change");
  app.add_option("--stop-grace-s", o.stop_grace_s, "at SIGTERM, seconds requests in flight may still finish")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::signal(SIGPIPE, SIG_IGN);
  auto fd = fastrestart::inherited_listen_socket(fastrestart::kListenFdName);
  if (!fd) {
    std::fprintf(stderr, "fastrestart-front: %s\n", fd.error().message.c_str());
    return 2;
  }
  if (*fd < 0) {
    std::fprintf(stderr,
                 "fastrestart-front: no listening socket was passed (LISTEN_FDS, LISTEN_PID, fd 3, name "
                 "fastrestart-engine): start it from fastrestartd (engine.listen = \"front\") or a socket unit\n");
    return 2;
  }
  auto rc = fr::front::run_front(*fd, o);
  if (!rc) {
    std::fprintf(stderr, "fastrestart-front: %s\n", rc.error().message.c_str());
    return 2;
  }
  return *rc;
}
