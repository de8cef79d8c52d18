// Snapshots without the weights, the helper's side: the manifest's `weights` codec and the check that an
// engine really released the daemon's pools (verify_released) before anything is checkpointed.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "snapshot/exchange.h"
#include "snapshot/manifest.h"
#include "support/harness.h"

namespace fr::snapshot {
namespace {

using nlohmann::json;

json manifest_json(const json& weights) {
  Manifest m;
  m.id = "x";
  m.host = "127.0.0.1";
  m.port = 8000;
  m.oracle = {"p", "", 1, {1}, "a", {-1.0}};
  json j = to_json(m);
  j["weights"] = weights;
  return j;
}

json entry() {
  return {{"fingerprint", "9f1c"}, {"digest", "0c4e"}, {"device", "host"}, {"daemon_socket", "/run/w.sock"},
          {"key", json::object()}, {"base", 4096}, {"bytes", 8192}, {"mapped", false}};
}

TEST(WeightsManifest, ReadsBackAndOlderManifestsHaveNone) {
  const json w{{"excluded", true}, {"exchange", "/s/.engine.sock"}, {"entries", json::array({entry()})}};
  auto m = manifest_from_json(manifest_json(w), "m.json: ");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->weights, w);
  json old = manifest_json(nullptr);
  old.erase("weights");
  auto o = manifest_from_json(old, "m.json: ");
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_TRUE(o->weights.is_null());
}

TEST(WeightsManifest, ErrorsNameTheField) {
  json bad_entry = entry();
  bad_entry["base"] = "0x1000";
  auto m = manifest_from_json(
      manifest_json({{"excluded", true}, {"exchange", "/s"}, {"entries", json::array({bad_entry})}}), "m.json: ");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("m.json: manifest.weights.entries[0].base"), std::string::npos) << m.error().message;
  m = manifest_from_json(manifest_json({{"excluded", true}, {"exchange", "/s"}, {"entries", json::array()}}), "");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("manifest.weights.excluded"), std::string::npos) << m.error().message;
  m = manifest_from_json(manifest_json({{"excluded", false}, {"exchange", "rel.sock"}, {"entries", json::array()}}), "");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("manifest.weights.exchange"), std::string::npos) << m.error().message;
}

// A pool as the host daemon shares it: a memfd of that name, mapped here. Released as the engine does it.
TEST(VerifyReleased, NamesAPoolStillMappedOrOpenAndPassesOnceReleased) {
  const size_t n = 1 << 16;
  int fd = ::memfd_create("fastrestart-pool", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(n)), 0);
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  json released = json::array({{{"fingerprint", "9f1c"}, {"device", "host"}, {"mapped", false},
                                {"base", reinterpret_cast<uintptr_t>(p)}, {"bytes", n}}});
  auto s = verify_released(::getpid(), released);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("still maps a weight pool"), std::string::npos) << s.error().message;
  ::close(fd);
  // Mapped over with an inaccessible reservation: no memfd left; the range is still ours.
  ASSERT_NE(::mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0), MAP_FAILED);
  EXPECT_TRUE(verify_released(::getpid(), released).ok());
  // An engine that says a pool is still mapped, or a released range that is accessible, is refused.
  released[0]["mapped"] = true;
  s = verify_released(::getpid(), released);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("still mapped"), std::string::npos) << s.error().message;
  released[0]["mapped"] = false;
  ASSERT_EQ(::mprotect(p, n, PROT_READ), 0);
  s = verify_released(::getpid(), released);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("still accessible"), std::string::npos) << s.error().message;
  ::munmap(p, n);
}

TEST(VerifyReleased, HoldingThePoolOpenIsRefused) {
  int fd = ::memfd_create("fastrestart-pool", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto s = verify_released(::getpid(), json::array());
  ::close(fd);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("holds a weight pool open"), std::string::npos) << s.error().message;
}

json arena_entry() {
  return {{"name", "kv"}, {"device", "host"}, {"daemon_socket", "/run/w.sock"}, {"base", 1 << 20}, {"bytes", 1 << 16},
          {"mapped", false}, {"seconds", 0.001}};
}

TEST(WeightsManifest, ArenasReadBackAndOneStillMappedIsRefused) {
  json w{{"excluded", true}, {"exchange", "/s/.engine.sock"}, {"entries", json::array({entry()})},
         {"arenas", json::array({arena_entry()})}};
  auto m = manifest_from_json(manifest_json(w), "m.json: ");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->weights["arenas"], w["arenas"]);
  w["arenas"][0]["mapped"] = true;
  m = manifest_from_json(manifest_json(w), "m.json: ");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("manifest.weights.arenas[0].mapped"), std::string::npos) << m.error().message;
  w["arenas"][0] = arena_entry();
  w["arenas"][0].erase("name");
  m = manifest_from_json(manifest_json(w), "m.json: ");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("manifest.weights.arenas[0].name"), std::string::npos) << m.error().message;
}

// A KV arena is checked as a pool is: reported unmapped, and its host range inaccessible.
TEST(VerifyReleased, AnArenaStillMappedOrAccessibleIsNamed) {
  const size_t n = 1 << 16;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  json arenas = json::array({arena_entry()});
  arenas[0]["base"] = reinterpret_cast<uintptr_t>(p);
  arenas[0]["bytes"] = n;
  auto s = verify_released(::getpid(), json::array(), arenas);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("KV arena 'kv' released, but its range is still accessible"), std::string::npos)
      << s.error().message;
  // The host backend standing in for a GPU ("host:<name>", as under fastrestartd) is a host range too.
  arenas[0]["device"] = "host:GPU-0";
  EXPECT_FALSE(verify_released(::getpid(), json::array(), arenas).ok());
  arenas[0]["device"] = "host";
  ASSERT_EQ(::mprotect(p, n, PROT_NONE), 0);
  EXPECT_TRUE(verify_released(::getpid(), json::array(), arenas).ok());
  arenas[0]["mapped"] = true;
  s = verify_released(::getpid(), json::array(), arenas);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("the engine reports KV arena 'kv' still mapped"), std::string::npos) << s.error().message;
  ::munmap(p, n);
}

TEST(Exchange, AnEngineWithoutTheSocketDoesNotAnswer) {
  test::TempDir dir;
  auto r = exchange(dir.path() + "/none.sock", "prepare", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("does not answer the snapshot exchange at " + dir.path() + "/none.sock"),
            std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace fr::snapshot
