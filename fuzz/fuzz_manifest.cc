// libFuzzer target: a snapshot's manifest.json as fastrestartd and the snapshot helper read it
// (src/snapshot/manifest.h, manifest_from_text; docs/snapshot.md, "Artifact"). The artifact lies on disk
// and may be damaged or written by someone else. Never a crash, a hang or an exception; an error is
// Errc::kCorrupt naming the file; what is accepted writes back (to_json) and reads again the same.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "json_attacks.h"
#include "snapshot/manifest.h"

using namespace fr::snapshot;

// Deep nesting, tiny values, brackets in strings (fuzz/json_attacks.h) one mutation in eight.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fr::fuzz::mutate_with_json_attacks(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = manifest_from_text(text, "/snapshots/x/manifest.json");
  if (!m.ok()) {
    if (m.error().code != fr::Errc::kCorrupt || m.error().message.rfind("/snapshots/x/manifest.json: ", 0) != 0)
      __builtin_trap();
    return 0;
  }
  if (m->format != kManifestFormat || m->port < 1 || m->port > 65535) __builtin_trap();
  const nlohmann::json j = to_json(*m);
  auto back = manifest_from_text(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "again");
  if (!back.ok()) {
    // Only a string that is not UTF-8 may change on the way (replaced): the written manifest must then
    // still read, and read the same, when it was valid.
    try {
      (void)j.dump();
    } catch (const nlohmann::json::exception&) {
      return 0;
    }
    __builtin_trap();
  }
  if (back.ok() && to_json(*back) != j) {
    try {
      (void)j.dump();
    } catch (const nlohmann::json::exception&) {
      return 0;
    }
    __builtin_trap();
  }
  return 0;
}
