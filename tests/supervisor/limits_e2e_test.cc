// fastrestartd's control socket against what a permitted peer may send (docs/reliability.md, "Limits on
// what a peer sends"): each limit is answered by name, and fastrestartd (with its engine) lives on.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/unix_socket.h"
#include "protocol/frame.h"
#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

// The tiny engine never starts (no model): the control socket serves regardless.
std::string limits_config(const test::TempDir& d) {
  return test::FastrestartdConfig(d.path())
      .words("engine", "command", {FR_TINYENGINE_BIN, "serve", "/nonexistent"})
      .text("weights", "mode", "off")
      .write();
}

std::string frame_header(uint32_t n) {
  return {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n)};
}

// Sends `bytes` (with `fds` on the first) on a new connection and returns the reply. fastrestartd may close
// the connection before all was sent (EPIPE, ECONNRESET on our side): its reply is still there to read.
json raw_request(const std::string& ctl, const std::string& bytes, const std::vector<int>& fds = {}) {
  auto fd = connect_unix(ctl, deadline_in(10));
  EXPECT_TRUE(fd.ok());
  if (!fd.ok()) return json();
  (void)send_all(fd->get(), bytes.data(), bytes.size(), fds, deadline_in(30));
  auto f = proto::read_frame(fd->get(), deadline_in(30));
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
  if (!f.ok()) return json();
  auto end = proto::read_frame(fd->get(), deadline_in(30));  // then the close
  EXPECT_FALSE(end.ok());
  return f->body;
}

TEST(FastrestartdLimits, TheControlSocketRefusesDeepManyValuedAndDescriptorCarryingFrames) {
  test::TempDir d;
  test::Supervised sup(FR_FASTRESTARTD_BIN, limits_config(d), d / "ctl/t.ctl", d / "d.log");
  sup.start();
  ASSERT_TRUE(sup.wait_for([](const json& s) { return !s.empty(); }, 60)) << sup.log();

  // The frame that killed fastrestartd with SIGSEGV: a request whose id nests two million deep.
  const std::string deep = "{\"op\":\"status\",\"id\":" + std::string(2'000'000, '[') + std::string(2'000'000, ']') + "}";
  auto r = raw_request(sup.control(), frame_header(static_cast<uint32_t>(deep.size())) + deep);
  EXPECT_EQ(r["error"]["code"], "protocol") << r.dump();
  EXPECT_EQ(r["error"]["message"], "frame nests deeper than 32 levels") << r.dump();
  ASSERT_EQ(::kill(sup.pid(), 0), 0) << sup.log();
  EXPECT_FALSE(sup.status().empty()) << sup.log();

  std::string many = "{\"op\":\"status\",\"id\":[0";
  for (int i = 0; i < 70000; ++i) many += ",0";
  many += "]}";
  r = raw_request(sup.control(), frame_header(static_cast<uint32_t>(many.size())) + many);
  EXPECT_EQ(r["error"]["message"], "frame holds more than 65536 values") << r.dump();

  // Control requests carry no descriptors: the first one ends the frame, closed at once. The descriptors
  // sent are of a file of the test's own, so the check counts exactly them.
  const std::filesystem::path marker = std::filesystem::path(d.path()) / "sent-descriptor";
  { std::ofstream(marker) << "x"; }
  UniqueFd sent_fd(::open(marker.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(sent_fd.valid());
  // The count can see such a descriptor at all: the test's own is one (else the check below is vacuous).
  ASSERT_EQ(test::fds_open_on(::getpid(), marker), 1);
  const std::string status_req = "{\"op\":\"status\"}";
  r = raw_request(sup.control(), frame_header(static_cast<uint32_t>(status_req.size())) + status_req,
                  {sent_fd.get(), sent_fd.get()});
  EXPECT_EQ(r["error"]["code"], "protocol") << r.dump();
  EXPECT_EQ(r["error"]["message"], "frame carried 2 descriptors; at most 0 allowed") << r.dump();
  // The reply was sent after the descriptors were closed; the wait only covers /proc's view catching up.
  int held = test::fds_open_on(sup.pid(), marker);
  for (int i = 0; i < 3000 && held > 0; ++i, ::usleep(10000)) held = test::fds_open_on(sup.pid(), marker);
  EXPECT_EQ(held, 0) << "fastrestartd still holds " << held << " of the descriptors sent";
  EXPECT_FALSE(sup.status().empty()) << sup.log();
}

}  // namespace
}  // namespace fr
