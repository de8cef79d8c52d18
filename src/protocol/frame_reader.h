// FrameReader: assembles one frame (docs/protocol.md, "Framing" and "Frame limits and timeouts") from bytes
// that arrive in pieces of any size. Memory follows the bytes that arrived, never the length a peer claims:
// the payload buffer grows by doubling from kReadChunkBytes, so it holds at most twice what arrived plus one
// chunk. A pure state machine (no I/O), so the fuzzer can drive it with any split of any input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/result.h"

namespace fr::proto {

inline constexpr size_t kReadChunkBytes = 64u << 10;

class FrameReader {
 public:
  // Where the next bytes go: never empty while no frame is complete; at most what the frame still lacks
  // (the 4-byte length first, then up to one growth step of the payload). Valid until the next commit().
  std::span<char> next();
  // `n` bytes (<= next().size()) were written to next(). True when the frame is complete (take() it).
  // Errc::kProtocol for a length of 0 or above kMaxFrameBytes; the reader is then unusable.
  Result<bool> commit(size_t n);
  // The complete payload; resets the reader for the next frame.
  std::string take();

  bool started() const { return m_got > 0; }            // a byte of the current frame has arrived
  size_t received() const { return m_got; }             // bytes of the current frame, length included
  size_t held_bytes() const { return m_payload.size(); }  // memory held for the payload
  uint32_t length() const { return m_len; }              // the payload length, once the header is in

 private:
  unsigned char m_hdr[4] = {};
  size_t m_got = 0;       // bytes of this frame so far (header + payload)
  uint32_t m_len = 0;     // 0 until the header is complete
  bool m_failed = false;
  std::string m_payload;  // grows; the first m_got - 4 bytes are real
};

}  // namespace fr::proto
