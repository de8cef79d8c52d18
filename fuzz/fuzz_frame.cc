// libFuzzer target: the protocol's decoders must never crash, hang or accept an invalid object, and the
// incremental frame reader must assemble exactly the frames of a stream, whatever the split, holding
// memory that follows the bytes that arrived (docs/protocol.md, "Frame limits and timeouts").
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "json_attacks.h"
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

// The descriptor numbers checked: the lowest ones, where the kernel puts every descriptor received.
int fd_scan_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 256;
  return static_cast<int>(std::min<rlim_t>(r.rlim_cur, 1024));
}

// How many descriptors are open among the lowest fd_scan_limit() numbers: one poll(2) over all of them
// (POLLNVAL marks a number that is not open), not one fcntl(2) per number, so that the check costs a
// microsecond or so rather than a thousand system calls.
int open_descriptors() {
  static const int limit = fd_scan_limit();
  static std::vector<pollfd> p(static_cast<size_t>(limit));
  for (int fd = 0; fd < limit; ++fd) p[static_cast<size_t>(fd)] = {fd, 0, 0};
  if (::poll(p.data(), p.size(), 0) < 0) __builtin_trap();
  int n = 0;
  for (const pollfd& x : p) n += (x.revents & POLLNVAL) == 0;
  return n;
}

// The input as a stream on a socket, in pieces that each carry 0..3 descriptors (the byte before a piece
// says how many): read_frame never hands out more than one, and whatever it returns, every other
// descriptor is closed by the time it does.
//
// All pieces are written before the reader runs, so they must fit in the socket: the kernel queues each
// sendmsg(2) as its own buffer and charges about a kilobyte of overhead for each against the send buffer
// (about 208 KiB by default), so a thousand small pieces fill it long before their bytes would. At most
// kMaxPieces pieces are written (a few KiB of the input: the descriptor rules, not the stream, are what
// is checked here; drive_reader splits the whole input), and a piece the socket still will not take
// ends the stream there rather than waiting for a reader that cannot run (the deadline is now).
constexpr size_t kMaxPieces = 64;

void drive_descriptors(std::string_view s) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  fr::UniqueFd a(sv[0]), b(sv[1]);
  static const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  size_t pos = 0;
  for (size_t piece = 0; pos < s.size() && piece < kMaxPieces; ++piece) {
    const auto k = static_cast<unsigned char>(s[pos]);
    const size_t n = std::min<size_t>(1 + k % 61, s.size() - pos);
    std::vector<int> fds(k % 4, null_fd);
    if (!fr::send_all(a.get(), s.data() + pos, n, fds, fr::Clock::now()).ok()) break;
    pos += n;
  }
  a.reset();
  const int before = open_descriptors();
  // The writer is closed and everything it wrote is queued: read_frame never waits here (its deadlines
  // only bound a peer that stalls).
  for (int i = 0; i < 64; ++i) {
    auto f = fr::proto::read_frame(b.get(), fr::deadline_in(1), 1);
    if (!f.ok()) break;
    if (f->fd && open_descriptors() != before + 1) __builtin_trap();
  }
  if (open_descriptors() != before) __builtin_trap();
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return fr::fuzz::mutate_with_json_attacks(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  drive_reader(s);
  drive_descriptors(s);
  auto j = fr::proto::decode_payload(s);
  if (!j.ok()) return 0;
  // What is accepted is within the limits, so copying it (which recurses per level) is safe.
  if (fr::fuzz::json_depth(*j) > fr::kFrameJsonLimits.max_depth) __builtin_trap();
  const fr::proto::json copy = *j;
  if (copy != *j) __builtin_trap();
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
