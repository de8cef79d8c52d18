// Frames of the weight-daemon protocol: a big-endian uint32 length, a JSON object, at most one fd.
// Spec: docs/protocol.md, "Framing" and "File descriptors".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/fd.h"
#include "common/result.h"
#include "common/unix_socket.h"

namespace fr::proto {

using nlohmann::json;

inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMaxFrameBytes = 16u << 20;
// Once a frame's first byte arrived, the rest must arrive within this (docs/protocol.md, "Frame limits").
inline constexpr double kFrameTimeoutS = 10;

// What one frame may carry (docs/protocol.md, "Frame limits and timeouts"). Descriptors are counted as each
// piece of a frame arrives: a peer cannot pile them up in the reader's process until the frame completes.
struct FrameLimits {
  size_t max_fds = 1;
  JsonLimits json = kFrameJsonLimits;
};
// fastrestartd's control socket: requests carry no descriptors and are small.
inline constexpr FrameLimits kControlFrameLimits{0, {kSmallJsonLimits.max_depth, kSmallJsonLimits.max_items, "frame"}};

struct Frame {
  json body;
  UniqueFd fd;  // invalid when the frame carried none
  // Who wrote the frame's bytes, where the reading socket asked for it (pass_sender_credentials): the
  // sender of its first byte. `senders_differ`: some later bytes came from another process.
  MessageSender sender;
  bool senders_differ = false;
};

// Encodes `body` as a frame (header + payload). Errc::kProtocol when it exceeds kMaxFrameBytes.
Result<std::string> encode_frame(const json& body);
// Writes one frame whose payload is already serialized JSON (a cached manifest, say).
Status write_payload(int sock, const std::string& payload, int fd, Deadline deadline);
// Writes one frame; `fd` (>= 0) travels with it.
Status write_frame(int sock, const json& body, int fd, Deadline deadline);
// Reads one frame incrementally (FrameReader: memory follows the bytes that arrived, not the length).
// `deadline` bounds the wait for the first byte; the rest must follow within `frame_timeout_s` of it (and
// by `deadline`), else Errc::kTimeout naming how much arrived. Errc::kProtocol for a bad length, a
// non-object payload, a payload past `limits.json`, a close inside a frame or more than `limits.max_fds`
// descriptors (closed as soon as they pass it); Errc::kCancelled when the peer closed cleanly between frames.
Result<Frame> read_frame(int sock, Deadline deadline, double frame_timeout_s = kFrameTimeoutS, const FrameLimits& limits = {});
// Parses a payload within `limits` (exposed for the fuzzer and the tests).
Result<json> decode_payload(std::string_view payload, const JsonLimits& limits = kFrameJsonLimits);

json error_reply(const Error& e);
// Turns an error reply into an Error (code from its name); ok replies pass through.
Status check_reply(const json& reply);
Errc errc_from_name(std::string_view name);

}  // namespace fr::proto
