// The rewrite that makes CRIU restore fastrestartd's listening socket from --inherit-fd, on images
// written here in CRIU's layout (the end-to-end tests run it on real dumps); and the manifest's field.
#include "snapshot/listen_image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "snapshot/manifest.h"
#include "support/harness.h"

namespace fr::snapshot {
namespace {

// A protobuf writer and reader of just what CRIU's file and fdinfo entries use.
std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) out.push_back(static_cast<char>((v & 0x7f) | 0x80)), v >>= 7;
  out.push_back(static_cast<char>(v));
  return out;
}
std::string vfield(uint32_t n, uint64_t v) { return varint(uint64_t{n} << 3) + varint(v); }
std::string bfield(uint32_t n, const std::string& b) { return varint((uint64_t{n} << 3) | 2) + varint(b.size()) + b; }

// Field number -> varint value, or -> bytes, of one message (the last occurrence wins).
struct Decoded {
  std::map<uint32_t, uint64_t> v;
  std::map<uint32_t, std::string> b;
};
Decoded decode(const std::string& s) {
  Decoded d;
  size_t at = 0;
  auto read = [&] {
    uint64_t v = 0;
    for (int shift = 0; at < s.size(); shift += 7) {
      const auto c = static_cast<uint8_t>(s[at++]);
      v |= uint64_t{c & 0x7fu} << shift;
      if (!(c & 0x80)) break;
    }
    return v;
  };
  while (at < s.size()) {
    const uint64_t key = read();
    if ((key & 7) == 0) {
      d.v[static_cast<uint32_t>(key >> 3)] = read();
    } else {
      const size_t n = read();
      d.b[static_cast<uint32_t>(key >> 3)] = s.substr(at, n);
      at += n;
    }
  }
  return d;
}

constexpr uint32_t kCommonMagic = 0x54564319;

void write_image(const std::string& path, uint32_t magic, const std::vector<std::string>& entries) {
  std::string text(8, '\0');
  std::memcpy(text.data(), &kCommonMagic, 4);
  std::memcpy(text.data() + 4, &magic, 4);
  for (const auto& e : entries) {
    const uint32_t n = static_cast<uint32_t>(e.size());
    text.append(reinterpret_cast<const char*>(&n), 4);
    text += e;
  }
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> read_entries(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> out;
  for (size_t at = 8; at + 4 <= text.size();) {
    uint32_t n;
    std::memcpy(&n, text.data() + at, 4);
    out.push_back(text.substr(at + 4, n));
    at += 4 + n;
  }
  return out;
}

std::string inet_entry(uint32_t id, uint32_t ino, uint32_t state) {
  const std::string fown = vfield(1, 0) + vfield(2, 0) + vfield(3, 0) + vfield(4, 0) + vfield(5, 0);
  const std::string opts = vfield(1, 4096) + vfield(2, 8192) + vfield(3, 0) + vfield(4, 0) + vfield(5, 0) + vfield(6, 0);
  const std::string isk = vfield(1, id) + vfield(2, ino) + vfield(3, 2) + vfield(4, 1) + vfield(5, 6) + vfield(6, state) +
                          vfield(7, 8000) + vfield(8, 0) + vfield(9, 02) + vfield(10, 0) + vfield(11, 0x0100007f) +
                          vfield(12, 0) + bfield(13, fown) + bfield(14, opts);
  return vfield(1, 4) + vfield(2, id) + bfield(4, isk);
}
std::string reg_entry(uint32_t id) { return vfield(1, 1) + vfield(2, id) + bfield(3, vfield(1, id) + bfield(3, "/x")); }
std::string fdinfo(uint32_t id, uint32_t type, uint32_t fd) { return vfield(1, id) + vfield(2, 0) + vfield(3, type) + vfield(4, fd); }

// A tree of two processes (two fdinfo images): the listener on fd 3 of both and on fd 7 of the first, a
// connected socket and a regular file beside it.
class ListenImage : public ::testing::Test {
 protected:
  void SetUp() override {
    write_image(path("files.img"), 0x56303138, {reg_entry(1), inet_entry(25, 777, 10), inet_entry(26, 888, 1)});
    write_image(path("fdinfo-2.img"), 0x56213732, {fdinfo(1, 1, 0), fdinfo(25, 4, 3), fdinfo(26, 4, 5), fdinfo(25, 4, 7)});
    write_image(path("fdinfo-3.img"), 0x56213732, {fdinfo(25, 4, 3)});
  }
  std::string path(const std::string& name) const { return m_dir / name; }
  test::TempDir m_dir;
};

TEST_F(ListenImage, TheListenerBecomesAnInheritableSocketAtEveryDescriptor) {
  auto n = hand_down_listen_socket(m_dir.path(), 777);
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(*n, 3);
  const auto files = read_entries(path("files.img"));
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], reg_entry(1));
  EXPECT_EQ(files[2], inet_entry(26, 888, 1)) << "another inet socket is left as it was";
  const Decoded fe = decode(files[1]);
  EXPECT_EQ(fe.v.at(1), 5u) << "UNIXSK";
  EXPECT_EQ(fe.v.at(2), 25u);
  ASSERT_TRUE(fe.b.count(16)) << "a unix_sk_entry";
  const Decoded usk = decode(fe.b.at(16));
  EXPECT_EQ(usk.v.at(1), 25u);
  EXPECT_EQ(usk.v.at(2), 777u) << "the inode, which CRIU's key socket:[777] names";
  EXPECT_EQ(usk.v.at(4), 10u) << "TCP_LISTEN";
  for (uint32_t f : {3u, 5u, 6u, 7u, 8u}) EXPECT_TRUE(usk.v.count(f)) << "required field " << f;
  for (uint32_t f : {9u, 10u, 11u}) EXPECT_TRUE(usk.b.count(f)) << "required field " << f;
  EXPECT_EQ(usk.b.at(11), "");

  const auto first = read_entries(path("fdinfo-2.img"));
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first[0], fdinfo(1, 1, 0));
  EXPECT_EQ(first[1], fdinfo(25, 5, 3));
  EXPECT_EQ(first[2], fdinfo(26, 4, 5));
  EXPECT_EQ(first[3], fdinfo(25, 5, 7));
  EXPECT_EQ(read_entries(path("fdinfo-3.img")), std::vector<std::string>{fdinfo(25, 5, 3)});
  EXPECT_FALSE(std::filesystem::exists(path("files.img.tmp")));
}

TEST_F(ListenImage, ASocketTheImagesDoNotHoldIsAnErrorAndNothingIsWritten) {
  const auto before = read_entries(path("fdinfo-2.img"));
  auto n = hand_down_listen_socket(m_dir.path(), 999);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().code, Errc::kNotFound);
  EXPECT_NE(n.error().message.find("the images hold no socket:[999]"), std::string::npos) << n.error().message;
  EXPECT_EQ(read_entries(path("fdinfo-2.img")), before);
}

TEST_F(ListenImage, ASocketThatIsNotListeningIsRefused) {
  auto n = hand_down_listen_socket(m_dir.path(), 888);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().message.find("socket:[888] is not a listening socket in the images (state 1)"), std::string::npos)
      << n.error().message;
  EXPECT_EQ(read_entries(path("files.img"))[2], inet_entry(26, 888, 1));
}

TEST_F(ListenImage, ACorruptImageIsNamed) {
  std::ofstream(path("fdinfo-3.img"), std::ios::binary) << std::string("\x19\x43\x56\x54\x32\x37\x21\x56\xff\x00\x00\x00", 12);
  auto n = hand_down_listen_socket(m_dir.path(), 777);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().code, Errc::kCorrupt);
  EXPECT_NE(n.error().message.find(path("fdinfo-3.img") + ": truncated entry"), std::string::npos) << n.error().message;
  EXPECT_EQ(decode(read_entries(path("files.img"))[1]).v.at(1), 4u) << "files.img was not rewritten";
  std::ofstream(path("files.img"), std::ios::binary) << "not an image";
  n = hand_down_listen_socket(m_dir.path(), 777);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().message.find("not a CRIU image"), std::string::npos) << n.error().message;
}

TEST(SocketName, RoundTripsAndRejectsOtherNames) {
  EXPECT_EQ(socket_name(1442420), "socket:[1442420]");
  EXPECT_EQ(parse_socket_name("socket:[1442420]"), 1442420u);
  for (const char* bad : {"", "socket:[]", "socket:[12", "pipe:[12]", "socket:[1x]", "socket:[123456789012345678901]",
                          "socket:[99999999999999999999]", "socket:[-1]", "socket:[ 1]"})
    EXPECT_FALSE(parse_socket_name(bad)) << bad;
}

TEST(ManifestListenSocket, IsReadBackAbsentAsEmptyAndValidated) {
  Manifest m;
  m.id = "a";
  m.fastrestart_version = "0.1.0";
  m.host = "127.0.0.1";
  m.port = 8000;
  m.identity.kernel_release = "6.18";
  m.identity.criu_version = "4.2.1";
  m.identity.executable = "/bin/engine";
  m.identity.executable_hash = "00";
  m.oracle = {"The capital of France is", "t", 4, {41, 32, 80, 97}, ") Pa", {-3.38, -1.5, -0.25, -0.125}};
  m.listen_socket = "socket:[77]";
  nlohmann::json j = to_json(m);
  auto back = manifest_from_json(j, "m: ");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->listen_socket, "socket:[77]");
  j.erase("listen_socket");  // a manifest written before the field existed
  back = manifest_from_json(j, "m: ");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->listen_socket, "");
  j["listen_socket"] = "pipe:[3]";
  back = manifest_from_json(j, "m: ");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("manifest.listen_socket: expected \"socket:[<inode>]\" or \"\""), std::string::npos)
      << back.error().message;
}

}  // namespace
}  // namespace fr::snapshot
