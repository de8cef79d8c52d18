#include "snapshot/listen_image.h"

#include <endian.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "common/atomic_file.h"
#include "common/fd.h"
#include "common/io.h"
#include "common/parse_number.h"

namespace fr::snapshot {
namespace {

// CRIU's values (criu/include/magic.h, images/fdinfo.proto).
constexpr uint32_t kImgCommonMagic = 0x54564319;
constexpr uint64_t kFdInetSk = 4, kFdUnixSk = 5;
constexpr uint64_t kTcpListen = 10, kSockStream = 1;
constexpr size_t kMaxImageBytes = 64 << 20;  // files.img and fdinfo-*.img are small; pages are elsewhere

// One protobuf field as it was read: a varint's value, or the raw bytes of any other wire type.
struct Field {
  uint32_t number = 0;
  uint8_t wire = 0;  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t value = 0;
  std::string bytes;
};
using Message = std::vector<Field>;

bool read_varint(std::string_view& in, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto b = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    out |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

std::optional<Message> parse(std::string_view in) {
  Message m;
  while (!in.empty()) {
    uint64_t key = 0;
    if (!read_varint(in, key)) return std::nullopt;
    Field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint8_t>(key & 7);
    size_t n = 0;
    switch (f.wire) {
      case 0:
        if (!read_varint(in, f.value)) return std::nullopt;
        m.push_back(std::move(f));
        continue;
      case 1: n = 8; break;
      case 5: n = 4; break;
      case 2: {
        uint64_t len = 0;
        if (!read_varint(in, len) || len > in.size()) return std::nullopt;
        n = static_cast<size_t>(len);
        break;
      }
      default: return std::nullopt;
    }
    if (n > in.size()) return std::nullopt;
    f.bytes.assign(in.substr(0, n));
    in.remove_prefix(n);
    m.push_back(std::move(f));
  }
  return m;
}

std::string encode(const Message& m) {
  std::string out;
  for (const auto& f : m) {
    put_varint(out, (static_cast<uint64_t>(f.number) << 3) | f.wire);
    if (f.wire == 0) {
      put_varint(out, f.value);
    } else {
      if (f.wire == 2) put_varint(out, f.bytes.size());
      out += f.bytes;
    }
  }
  return out;
}

const Field* find(const Message& m, uint32_t number) {
  for (const auto& f : m)
    if (f.number == number) return &f;
  return nullptr;
}

Field varint(uint32_t number, uint64_t v) { return {number, 0, v, {}}; }
Field bytes(uint32_t number, std::string b) { return {number, 2, 0, std::move(b)}; }

// An image: its two magics, then its entries.
struct Image {
  std::string header;
  std::vector<std::string> entries;
};

uint32_t le32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return le32toh(v);
}

Result<Image> read_image(const std::string& path) {
  FR_ASSIGN(std::string text, read_file(path, kMaxImageBytes));
  if (text.size() < 8 || le32(text.data()) != kImgCommonMagic)
    return make_error(Errc::kCorrupt, path + ": not a CRIU image (no image magic)");
  Image img;
  img.header = text.substr(0, 8);
  for (size_t at = 8; at < text.size();) {
    if (text.size() - at < 4) return make_error(Errc::kCorrupt, path + ": truncated entry at byte " + std::to_string(at));
    const uint32_t len = le32(text.data() + at);
    at += 4;
    if (len > text.size() - at) return make_error(Errc::kCorrupt, path + ": truncated entry at byte " + std::to_string(at));
    img.entries.push_back(text.substr(at, len));
    at += len;
  }
  return img;
}

Status write_image(const std::string& path, const Image& img) {
  std::string text = img.header;
  for (const auto& e : img.entries) {
    const uint32_t len = htole32(static_cast<uint32_t>(e.size()));
    text.append(reinterpret_cast<const char*>(&len), 4);
    text += e;
  }
  return write_file_atomic(path, text);
}

// The unix socket entry CRIU restores from --inherit-fd: only the id (what fdinfo refers to) and the
// inode (the key's number) matter; the rest are the required fields, carried over where they exist.
std::string unix_entry_for(uint64_t id, uint64_t inode, const Message& isk) {
  const Field* flags = find(isk, 9);
  const Field* fown = find(isk, 13);
  const Field* opts = find(isk, 14);
  Message usk{varint(1, id),         varint(2, inode), varint(3, kSockStream), varint(4, kTcpListen),
              varint(5, flags ? flags->value : 0), varint(6, 0), varint(7, 0), varint(8, 0),
              bytes(9, fown ? fown->bytes : std::string()), bytes(10, opts ? opts->bytes : std::string()),
              bytes(11, "")};
  return encode(Message{varint(1, kFdUnixSk), varint(2, id), bytes(16, encode(usk))});
}

}  // namespace

std::string socket_name(uint64_t inode) { return "socket:[" + std::to_string(inode) + "]"; }

std::optional<uint64_t> parse_socket_name(const std::string& name) {
  constexpr std::string_view kPrefix = "socket:[";
  if (name.size() < kPrefix.size() + 2 || name.compare(0, kPrefix.size(), kPrefix) != 0 || name.back() != ']')
    return std::nullopt;
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - 1);
  return to_u64(digits);  // nullopt past 2^64-1 too, where std::stoull would throw
}

Result<int> hand_down_listen_socket(const std::string& images, uint64_t inode) {
  const std::string files_path = images + "/files.img";
  FR_ASSIGN(Image files, read_image(files_path));
  std::set<uint64_t> ids;
  for (auto& entry : files.entries) {
    auto fe = parse(entry);
    if (!fe) return make_error(Errc::kCorrupt, files_path + ": an entry is not a valid protobuf message");
    const Field* type = find(*fe, 1);
    const Field* id = find(*fe, 2);
    const Field* isk_field = find(*fe, 4);
    if (!type || type->value != kFdInetSk || !id || !isk_field) continue;
    auto isk = parse(isk_field->bytes);
    if (!isk) return make_error(Errc::kCorrupt, files_path + ": an inet socket entry is not a valid protobuf message");
    const Field* ino = find(*isk, 2);
    if (!ino || ino->value != inode) continue;
    const Field* state = find(*isk, 6);
    if (!state || state->value != kTcpListen)
      return make_error(Errc::kInvalidArgument, socket_name(inode) + " is not a listening socket in the images (state " +
                                                    (state ? std::to_string(state->value) : std::string("?")) + ")");
    ids.insert(id->value);
    entry = unix_entry_for(id->value, inode, *isk);
  }
  if (ids.empty())
    return make_error(Errc::kNotFound, "the images hold no " + socket_name(inode) +
                                           ": the engine did not have fastrestartd's listening socket open");

  // Every descriptor of every process that referred to the socket: all fdinfo images, rewritten in
  // memory first so that nothing is written when one of them cannot be read.
  std::vector<std::pair<std::string, Image>> changed;
  int descriptors = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(images, ec)) {
    const std::string name = e.path().filename();
    if (name.rfind("fdinfo-", 0) != 0 || name.size() < 11 || name.compare(name.size() - 4, 4, ".img") != 0) continue;
    FR_ASSIGN(Image img, read_image(e.path()));
    bool touched = false;
    for (auto& entry : img.entries) {
      auto fd = parse(entry);
      if (!fd) return make_error(Errc::kCorrupt, e.path().string() + ": an entry is not a valid protobuf message");
      const Field* id = find(*fd, 1);
      if (!id || !ids.count(id->value)) continue;
      for (auto& f : *fd)
        if (f.number == 3 && f.wire == 0 && f.value == kFdInetSk) f.value = kFdUnixSk, touched = true, ++descriptors;
      entry = encode(*fd);
    }
    if (touched) changed.emplace_back(e.path(), std::move(img));
  }
  if (ec) return make_error(Errc::kIo, "cannot list " + images + ": " + ec.message());
  if (descriptors == 0)
    return make_error(Errc::kNotFound, "no descriptor in the images refers to " + socket_name(inode));
  for (const auto& [path, img] : changed) FR_TRY(write_image(path, img));
  FR_TRY(write_image(files_path, files));
  return descriptors;
}

}  // namespace fr::snapshot
