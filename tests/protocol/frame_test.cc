#include "protocol/frame.h"
#include "protocol/frame_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace fr::proto {
namespace {

struct Pair {
  UniqueFd a, b;
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    a.reset(sv[0]);
    b.reset(sv[1]);
  }
};

TEST(Frame, RoundTripWithAndWithoutFd) {
  Pair p;
  json body{{"op", "status"}, {"id", 7}, {"s", "ü"}};
  ASSERT_TRUE(write_frame(p.a.get(), body, -1, deadline_in(1)).ok());
  auto f = read_frame(p.b.get(), deadline_in(1));
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->body, body);
  EXPECT_FALSE(f->fd.valid());

  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  ASSERT_TRUE(write_frame(p.a.get(), {{"ok", true}}, pipefd[1], deadline_in(1)).ok());
  auto g = read_frame(p.b.get(), deadline_in(1));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->fd.valid());
  ASSERT_EQ(::write(g->fd.get(), "x", 1), 1);  // it really is the pipe's write end
  char c;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}

TEST(Frame, RejectsBadLengths) {
  for (uint32_t n : {0u, kMaxFrameBytes + 1, 0xffffffffu}) {
    Pair p;
    unsigned char hdr[4] = {static_cast<unsigned char>(n >> 24), static_cast<unsigned char>(n >> 16),
                            static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
    ASSERT_EQ(::write(p.a.get(), hdr, 4), 4);
    auto f = read_frame(p.b.get(), deadline_in(1));
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().code, Errc::kProtocol) << n;
  }
}

TEST(Frame, RejectsNonObjectsAndGarbage) {
  for (std::string payload : {"[1]", "{\"a\":", "\xff\xfe", "42"}) {
    Pair p;
    uint32_t n = static_cast<uint32_t>(payload.size());
    unsigned char hdr[4] = {0, 0, static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
    ASSERT_EQ(::write(p.a.get(), hdr, 4), 4);
    ASSERT_EQ(::write(p.a.get(), payload.data(), n), static_cast<ssize_t>(n));
    auto f = read_frame(p.b.get(), deadline_in(1));
    ASSERT_FALSE(f.ok()) << payload;
    EXPECT_EQ(f.error().code, Errc::kProtocol);
  }
}

TEST(Frame, TruncatedFrameAndCleanCloseAreDistinguished) {
  {
    Pair p;
    p.a.reset();
    auto f = read_frame(p.b.get(), deadline_in(1));
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().code, Errc::kCancelled);
  }
  Pair p;
  unsigned char hdr[4] = {0, 0, 0, 10};
  ASSERT_EQ(::write(p.a.get(), hdr, 4), 4);
  ASSERT_EQ(::write(p.a.get(), "{}", 2), 2);
  p.a.reset();
  auto f = read_frame(p.b.get(), deadline_in(1));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code, Errc::kProtocol);
}

TEST(Frame, TimesOut) {
  Pair p;
  auto f = read_frame(p.b.get(), deadline_in(0.05));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code, Errc::kTimeout);
}

std::string header(uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n)};
}

std::string zeros(int n) {
  std::string s = "[0";
  for (int i = 1; i < n; ++i) s += ",0";
  return s + "]";
}

// docs/protocol.md, "Frame limits and timeouts": nesting and values are refused by name, before parsing.
TEST(Frame, DeepOrValueHeavyPayloadsAreFramingErrorsNamingTheLimit) {
  const std::string deep = "{\"op\":\"status\",\"id\":" + std::string(2'000'000, '[') + std::string(2'000'000, ']') + "}";
  const std::string many = "{\"op\":\"status\",\"id\":" + zeros(1 << 21) + "}";
  for (const auto& [payload, why] : {std::pair{deep, std::string("frame nests deeper than 32 levels")},
                                     std::pair{many, std::string("frame holds more than 2097152 values")}}) {
    Pair p;
    std::thread writer([&] {
      const std::string bytes = header(static_cast<uint32_t>(payload.size())) + payload;
      (void)send_all(p.a.get(), bytes.data(), bytes.size(), {}, deadline_in(30));
    });
    auto f = read_frame(p.b.get(), deadline_in(30));
    writer.join();
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().code, Errc::kProtocol);
    EXPECT_EQ(f.error().message, why);
  }
  // The control socket's limits are smaller.
  auto d = decode_payload("{\"a\":" + zeros(70000) + "}", kControlFrameLimits.json);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message, "frame holds more than 65536 values");
  EXPECT_TRUE(decode_payload("{\"a\":" + zeros(70000) + "}").ok());
}

int open_fds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) n += ::fcntl(fd, F_GETFD) != -1;
  return n;
}

// Descriptors are counted as the pieces of one frame arrive: the second one ends the frame there, and the
// ones received are closed, though the frame never completes.
TEST(Frame, DescriptorsPastTheLimitEndTheFrameAsTheyArrive) {
  Pair p, q;
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const int before = open_fds();
  const std::string head = header(100) + "{";
  ASSERT_TRUE(send_all(p.a.get(), head.data(), head.size(), {pipefd[0]}, deadline_in(1)).ok());
  ASSERT_TRUE(send_all(p.a.get(), " ", 1, {pipefd[0], pipefd[1]}, deadline_in(1)).ok());
  // 97 bytes are still missing: a reader that waited for them would time out instead.
  auto f = read_frame(p.b.get(), deadline_in(30), /*frame_timeout_s=*/30);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code, Errc::kProtocol);
  EXPECT_EQ(f.error().message, "frame carried 3 descriptors; at most 1 allowed");
  EXPECT_EQ(open_fds(), before);
  // The control socket's limits allow none.
  ASSERT_TRUE(send_all(q.a.get(), head.data(), head.size(), {pipefd[0]}, deadline_in(1)).ok());
  auto g = read_frame(q.b.get(), deadline_in(30), 30, kControlFrameLimits);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().message, "frame carried 1 descriptors; at most 0 allowed");
  EXPECT_EQ(open_fds(), before);
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}

TEST(Frame, ErrorRepliesRoundTrip) {
  auto s = check_reply(error_reply(make_error(Errc::kBusy, "lock held")));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::kBusy);
  EXPECT_EQ(s.error().message, "lock held");
  EXPECT_TRUE(check_reply({{"ok", true}}).ok());
  EXPECT_FALSE(check_reply({{"x", 1}}).ok());
}

// The reader holds what arrived (doubling from one chunk), never what a length claims.
TEST(FrameReader, MemoryFollowsTheBytesThatArrivedNotTheClaimedLength) {
  FrameReader r;
  const std::string hdr = {'\x01', '\x00', '\x00', '\x00'};  // 16 MiB claimed
  auto h = r.next();
  ASSERT_EQ(h.size(), 4u);
  std::copy(hdr.begin(), hdr.end(), h.begin());
  ASSERT_TRUE(r.commit(4).ok());
  EXPECT_EQ(r.length(), 16u << 20);
  EXPECT_EQ(r.held_bytes(), 0u);
  auto b = r.next();
  EXPECT_EQ(b.size(), kReadChunkBytes);
  EXPECT_LE(r.held_bytes(), kReadChunkBytes);
  b[0] = '{';
  auto done = r.commit(1);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done);
  EXPECT_LE(r.held_bytes(), kReadChunkBytes);
  // Feed 1 MiB: the buffer stays within twice what arrived plus one chunk.
  size_t got = 1;
  while (got < (1u << 20)) {
    auto n = r.next();
    std::fill(n.begin(), n.end(), ' ');
    got += n.size();
    ASSERT_TRUE(r.commit(n.size()).ok());
    EXPECT_LE(r.held_bytes(), 2 * got + kReadChunkBytes);
  }
}

TEST(FrameReader, AssemblesFramesFedOneByteAtATimeAndRejectsBadLengths) {
  auto frame = encode_frame({{"op", "status"}, {"pad", std::string(200000, 'x')}});
  ASSERT_TRUE(frame.ok());
  FrameReader r;
  size_t i = 0;
  for (bool done = false; !done; ++i) {
    auto n = r.next();
    ASSERT_FALSE(n.empty());
    n[0] = (*frame)[i];
    auto c = r.commit(1);
    ASSERT_TRUE(c.ok());
    done = *c;
  }
  EXPECT_EQ(i, frame->size());
  auto body = decode_payload(r.take());
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["op"], "status");
  EXPECT_FALSE(r.started());

  for (uint32_t bad : {0u, kMaxFrameBytes + 1, 0xffffffffu}) {
    FrameReader z;
    auto n = z.next();
    for (int k = 0; k < 4; ++k) n[static_cast<size_t>(k)] = static_cast<char>(bad >> (24 - 8 * k));
    auto c = z.commit(4);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().code, Errc::kProtocol);
    EXPECT_TRUE(z.next().empty());
  }
}

TEST(Frame, AFrameThatStopsArrivingTimesOutNamingWhatArrived) {
  Pair p;
  const char part[] = {0, 0, 0, 50, '{', '"'};
  ASSERT_EQ(::write(p.a.get(), part, sizeof part), static_cast<ssize_t>(sizeof part));
  auto f = read_frame(p.b.get(), deadline_in(60), /*frame_timeout_s=*/0.2);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code, Errc::kTimeout);
  EXPECT_NE(f.error().message.find("6 of 54 bytes"), std::string::npos) << f.error().message;
}

}  // namespace
}  // namespace fr::proto
