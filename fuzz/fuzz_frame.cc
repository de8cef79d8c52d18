// libFuzzer target: the protocol's decoders must never crash, hang or accept an invalid object.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "protocol/frame.h"
#include "protocol/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
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
