// fastrestart-front's server (docs/front.md): clients' HTTP/1.1 connections held across an engine's death.
//
// Contract
// - run_front(listen_fd, options) accepts clients on `listen_fd` (a listening TCP socket, the front's to
//   use; its owner, fastrestartd, may hold another copy: connections wait in its queue while no front runs)
//   and forwards each complete request to options.upstream, on a connection of its own per attempt
//   (Connection: close), or with options.max_idle_connections > 0 on a kept-alive one from a pool of at most
//   that many idle ones, each closed after 1 s idle.
//   Client connections keep alive (HTTP/1.1); pipelined requests are answered in order, one at a time.
// - A request whose engine cannot be reached, or dies before the answer has started to reach the client, is
//   held (its bytes kept) and sent again as it was, with a short backoff, until the engine answers or
//   options.hold_s has passed since it was first held (then 503 naming front.hold_s). Non-streamed answers
//   are buffered whole (up to max_response_bytes) before the client gets a byte, so for them an engine's
//   death is always "not started". A text/event-stream answer is passed on event by event; an engine's
//   death after its head continues a continuable stream on the next engine (splice.h: the client is held
//   and reads one stream, counted continued), and ends any other with an error event naming why and
//   "data: [DONE]" (counted stream_interrupted and not_continued by reason).
// - Requests the front can tell are bad never reach the engine: malformed HTTP 400, a body over
//   max_body_bytes 413, a head over 32 KiB 431 (the connection is closed after these), a body that is not
//   application/json or not JSON 400 (the connection stays).
// - Runs until SIGTERM or SIGINT: it stops accepting, lets requests in flight finish for stop_grace_s,
//   answers the rest 503, and returns 0. Errors before serving (the upstream address, the socket) are
//   returned; nothing is thrown.
#pragma once

#include "fastrestart/result.h"
#include "front/options.h"

namespace fr::front {

Result<int> run_front(int listen_fd, const FrontOptions& options);

}  // namespace fr::front
