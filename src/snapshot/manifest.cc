#include "snapshot/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "common/atomic_file.h"
#include "common/bounded_json.h"
#include "common/fd.h"
#include "common/io.h"
#include "snapshot/json_fields.h"
#include "snapshot/listen_image.h"

namespace fr::snapshot {

using nlohmann::json;

namespace {
constexpr size_t kMaxManifestBytes = 16 << 20;
// A manifest nests a few levels (weights.entries[i].key); its entries are one per weight set or arena.
constexpr JsonLimits kManifestJsonLimits{32, size_t{1} << 21, "manifest"};
}

json to_json(const Manifest& m) {
  return {{"format", m.format},
          {"id", m.id},
          {"fastrestart_version", m.fastrestart_version},
          {"created_unix", m.created_unix},
          {"create_s", m.create_s},
          {"image_bytes", m.image_bytes},
          {"stdout_pipe", m.stdout_pipe},
          {"listen_socket", m.listen_socket},
          {"host", m.host},
          {"port", m.port},
          {"identity", to_json(m.identity)},
          {"oracle", to_json(m.oracle)},
          {"weights", m.weights},
          {"timings", m.timings}};
}

Result<Manifest> manifest_from_json(const json& j, const std::string& where) {
  Fields f(j, where + "manifest");
  Manifest m;
  FR_ASSIGN(int64_t format, f.integer("format"));
  if (format != kManifestFormat)
    return f.fail("format", "is " + std::to_string(format) + ", this build reads format " + std::to_string(kManifestFormat));
  m.format = static_cast<int>(format);
  FR_TRY(f.read("id", m.id, "fastrestart_version", m.fastrestart_version, "created_unix", m.created_unix, "create_s",
                m.create_s, "image_bytes", m.image_bytes, "stdout_pipe", m.stdout_pipe));
  if (!m.stdout_pipe.empty() && m.stdout_pipe.rfind("pipe:[", 0) != 0)
    return f.fail("stdout_pipe", "expected \"pipe:[<inode>]\" or \"\"");
  // Absent in manifests written before snapshots could hold fastrestartd's socket: read as "".
  if (auto l = j.find("listen_socket"); l != j.end()) {
    FR_ASSIGN(m.listen_socket, f.str("listen_socket"));
    if (!m.listen_socket.empty() && !parse_socket_name(m.listen_socket))
      return f.fail("listen_socket", "expected \"socket:[<inode>]\" or \"\"");
  }
  FR_ASSIGN(m.host, f.str("host"));
  FR_ASSIGN(int64_t port, f.integer("port"));
  if (port < 1 || port > 65535) return f.fail("port", "must be in 1..65535");
  m.port = static_cast<int>(port);
  FR_ASSIGN(const json* id, f.child("identity", json::value_t::object));
  FR_ASSIGN(m.identity, identity_from_json(*id, f.path("identity")));
  FR_ASSIGN(const json* oracle, f.child("oracle", json::value_t::object));
  FR_ASSIGN(m.oracle, oracle_from_json(*oracle, f.path("oracle")));
  // Absent in manifests written before snapshots could leave the weights out: read as null.
  if (auto w = j.find("weights"); w != j.end() && !w->is_null()) {
    FR_ASSIGN(const json* weights, f.child("weights", json::value_t::object));
    Fields wf(*weights, f.path("weights"));
    FR_ASSIGN(bool excluded, wf.boolean("excluded"));
    FR_ASSIGN(std::string exchange, wf.str("exchange"));
    if (exchange.empty() || exchange[0] != '/') return wf.fail("exchange", "expected an absolute socket path");
    bool any_entry = false;
    auto check_entry = [&](const Fields& ef) -> Status {
      any_entry = true;
      for (const char* k : {"fingerprint", "digest", "device", "daemon_socket"}) FR_TRY(ef.str(k));
      FR_TRY(ef.unsigned_int("base"));
      FR_TRY(ef.unsigned_int("bytes"));
      return {};
    };
    FR_TRY(wf.each_object("entries", check_entry));
    if (excluded != any_entry) return wf.fail("excluded", "must be true exactly when entries is not empty");
    // The KV arenas the engine unmapped (absent before arenas): named, on a device, at an address.
    if (auto a = weights->find("arenas"); a != weights->end()) {
      auto check_arena = [](const Fields& ef) -> Status {
        for (const char* k : {"name", "device", "daemon_socket"}) FR_TRY(ef.str(k));
        FR_TRY(ef.unsigned_int("base"));
        FR_TRY(ef.unsigned_int("bytes"));
        FR_ASSIGN(bool mapped, ef.boolean("mapped"));
        if (mapped) return ef.fail("mapped", "an arena the snapshot holds mapped cannot be restored");
        return {};
      };
      FR_TRY(wf.each_object("arenas", check_arena));
    }
    m.weights = *weights;
  }
  FR_ASSIGN(const json* timings, f.child("timings", json::value_t::object));
  m.timings = *timings;
  return m;
}

Status write_manifest(const std::string& dir, const Manifest& m) {
  return write_file_atomic(dir + "/manifest.json", to_json(m).dump(2) + "\n");
}

Result<Manifest> read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  FR_ASSIGN(std::string text, read_file(path, kMaxManifestBytes));
  return manifest_from_text(text, path);
}

Result<Manifest> manifest_from_text(std::string_view text, const std::string& path) {
  // Bounded like a frame (docs/reliability.md, "Limits on what a peer sends"): the manifest's weights and
  // timings are copied, a recursion per level, so a value nested thousands deep would overflow the stack
  // of fastrestartd, which reads every artifact of its snapshot directory.
  auto j = parse_json_bounded(text, kManifestJsonLimits);
  if (!j.ok()) return make_error(Errc::kCorrupt, path + ": " + j.error().message);
  auto m = manifest_from_json(*j, path + ": ");
  if (!m.ok()) return make_error(Errc::kCorrupt, m.error().message);
  return m;
}

}  // namespace fr::snapshot
