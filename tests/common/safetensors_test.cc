#include "common/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "common/io.h"
#include "support/harness.h"

namespace fr {
namespace {

// Writes a raw file: 8-byte length, header text, `data_len` bytes of data.
std::string raw_file(const test::TempDir& d, const std::string& header, size_t data_len, uint64_t claimed_len = ~0ull) {
  std::string path = d / "raw.safetensors";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  uint64_t n = claimed_len == ~0ull ? header.size() : claimed_len;
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  EXPECT_TRUE(write_full(fd, len, 8, path).ok());
  EXPECT_TRUE(write_full(fd, header.data(), header.size(), path).ok());
  std::string data(data_len, '\x01');
  EXPECT_TRUE(write_full(fd, data.data(), data.size(), path).ok());
  ::close(fd);
  return path;
}

void expect_rejected(const std::string& header, size_t data_len, const std::string& fragment) {
  test::TempDir d;
  auto path = raw_file(d, header, data_len);
  auto r = read_safetensors_header(path);
  ASSERT_FALSE(r.ok()) << header;
  EXPECT_EQ(r.error().code, Errc::kCorrupt);
  EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(fragment), std::string::npos) << r.error().message;
}

TEST(Safetensors, WriterOutputParsesBack) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 3, 1000, 7);
  auto h = read_safetensors_header(ck.files[0]);
  ASSERT_TRUE(h.ok()) << h.error().message;
  ASSERT_EQ(h->tensors.size(), 3u);
  for (const auto& t : h->tensors) {
    EXPECT_EQ(t.dtype, DType::kF32);
    EXPECT_EQ(t.nbytes(), ck.tensors[t.name].size());
  }
}

TEST(Safetensors, RejectsHostileHeaders) {
  expect_rejected("not json", 0, "not valid JSON");
  expect_rejected("[1,2]", 0, "not a JSON object");
  expect_rejected(R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", 1, "unknown dtype");
  expect_rejected(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "shape x itemsize");
  expect_rejected(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-integer or negative");
  expect_rejected(R"({"w":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}})", 10, "past the end of the data");
  expect_rejected(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", 8, "begin > end");
  expect_rejected(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 8, "overlap");
  expect_rejected(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", 1, "exactly dtype, shape and data_offsets");
  expect_rejected(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,1]}})", 1, "shape");
  expect_rejected(R"({"__metadata__":{"a":1}})", 0, "__metadata__");
}

TEST(Safetensors, RejectsBadLengths) {
  test::TempDir d;
  auto p = raw_file(d, "{}", 0, 1ull << 40);
  auto r = read_safetensors_header(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("exceeds the limit"), std::string::npos) << r.error().message;
  p = raw_file(d, "{}", 0, 1000);
  r = read_safetensors_header(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("past the end of the file"), std::string::npos) << r.error().message;
}

TEST(Safetensors, TruncatedFileIsRejected) {
  test::TempDir d;
  auto ck = test::make_checkpoint(d.path(), 1, 2, 4096, 1);
  ASSERT_EQ(::truncate(ck.files[0].c_str(), 100), 0);
  auto r = read_safetensors_header(ck.files[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(ck.files[0]), std::string::npos);
}

}  // namespace
}  // namespace fr
