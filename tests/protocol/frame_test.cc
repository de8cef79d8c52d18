#include "protocol/frame.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

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

TEST(Frame, ErrorRepliesRoundTrip) {
  auto s = check_reply(error_reply(make_error(Errc::kBusy, "lock held")));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, Errc::kBusy);
  EXPECT_EQ(s.error().message, "lock held");
  EXPECT_TRUE(check_reply({{"ok", true}}).ok());
  EXPECT_FALSE(check_reply({{"x", 1}}).ok());
}

}  // namespace
}  // namespace fr::proto
