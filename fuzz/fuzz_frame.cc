// libFuzzer target: the protocol's decoders must never crash, hang or accept an invalid object, and the
// incremental frame reader must assemble exactly the frames of a stream, whatever the split, holding
// memory that follows the bytes that arrived (docs/protocol.md, "Frame limits and timeouts").
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "protocol/frame.h"
#include "protocol/frame_reader.h"
#include "protocol/messages.h"

namespace {

// The input as a byte stream fed in pieces whose sizes come from the stream itself (so the fuzzer
// explores the splits): every complete frame must be the bytes that followed its length.
void drive_reader(std::string_view s) {
  fr::proto::FrameReader r;
  size_t pos = 0, step = 1;
  while (pos < s.size()) {
    auto buf = r.next();
    if (buf.empty()) __builtin_trap();  // never empty while no frame is complete and none failed
    const size_t n = std::min({buf.size(), s.size() - pos, step});
    std::memcpy(buf.data(), s.data() + pos, n);
    const size_t start = pos - r.received();
    pos += n;
    step = 1 + static_cast<unsigned char>(s[pos - 1]) * 37;
    auto done = r.commit(n);
    if (!done.ok()) return;  // a bad length: the stream cannot be resynchronised
    if (r.held_bytes() > 2 * r.received() + fr::proto::kReadChunkBytes) __builtin_trap();
    if (*done) {
      const uint32_t len = r.length();
      std::string payload = r.take();
      if (payload.size() != len || payload != s.substr(start + 4, len)) __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  drive_reader(s);
  auto j = fr::proto::decode_payload(s);
  if (!j.ok()) return 0;
  (void)fr::proto::check_reply(*j);
  if (j->contains("key")) {
    auto k = fr::proto::key_from_json((*j)["key"], "key");
    if (k.ok()) {
      // Round trip: what we accept we can encode and decode to the same value.
      auto back = fr::proto::key_from_json(fr::proto::to_json(*k), "key");
      if (!back.ok() || !(*back == *k)) __builtin_trap();
    }
  }
  if (j->contains("manifest")) {
    auto m = fr::proto::manifest_from_json((*j)["manifest"], "manifest");
    if (m.ok())
      for (const auto& t : m->tensors)
        if (t.offset + t.nbytes > m->data_bytes || m->data_bytes > m->pool_bytes) __builtin_trap();
  }
  (void)fr::proto::encode_frame(*j);
  return 0;
}
