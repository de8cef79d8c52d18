// The supervisor's pieces of the standby path that need no engine: the gate protocol's messages
// (docs/standby.md, "The gate protocol") and the check that a process group listens on a port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/fd.h"
#include "supervisor/engines/engine_kind.h"
#include "supervisor/standby/gate_message.h"
#include "supervisor/standby/model_files.h"
#include "support/harness.h"
#include "supervisor/port_owner.h"

namespace fr::supervisor {
namespace {

TEST(GateMessage, ParkedIsParsed) {
  auto m = parse_gate_message(R"({"op":"parked","v":1,"level":"warmed","pid":4242,"extra":"ignored"})");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->level, "warmed");
  EXPECT_EQ(m->pid, 4242);
}

TEST(GateMessage, EveryMalformedMessageIsNamed) {
  struct Case {
    std::string line, want;
  };
  const Case cases[] = {
      {"parked", "not JSON"},
      {R"({"op":"parked","v":1,"level":"warmed","pid":1,"x":)" + std::string(33, '[') + std::string(33, ']') + "}",
       "it nests deeper than 32 levels"},
      {"[1]", "not a JSON object"},
      {R"({"v":1})", "no \"op\" string"},
      {R"({"op":"ready","v":1,"level":"warmed","pid":1})", "unknown op \"ready\""},
      {R"({"op":"parked","level":"warmed","pid":1})", "no protocol version"},
      {R"({"op":"parked","v":2,"level":"warmed","pid":1})", "protocol version 2, this fastrestartd speaks 1"},
      {R"({"op":"parked","v":1,"pid":1})", "no \"level\" string"},
      {R"({"op":"parked","v":1,"level":"hot","pid":1})", "level must be"},
      {R"({"op":"parked","v":1,"level":"pre_gpu"})", "no \"pid\""},
      {R"({"op":"parked","v":1,"level":"pre_gpu","pid":-3})", "no \"pid\""},
      {R"({"op":"parked","v":1,"level":"pre_gpu","pid":"12"})", "no \"pid\""},
      {std::string(kMaxGateLine, 'x'), "longer than 4096 bytes"},
  };
  for (const auto& c : cases) {
    auto m = parse_gate_message(c.line);
    ASSERT_FALSE(m.ok()) << c.line;
    EXPECT_EQ(m.error().code, Errc::kProtocol);
    EXPECT_EQ(m.error().message.rfind("gate message '", 0), 0u) << m.error().message;
    EXPECT_NE(m.error().message.find(c.want), std::string::npos) << m.error().message << "\nwant: " << c.want;
  }
}

TEST(GateMessage, ControlCharactersInAMessageAreEscapedInTheError) {
  auto m = parse_gate_message("\x1b[2Jparked");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message.find('\x1b'), std::string::npos) << m.error().message;
}

// Found by fuzz_gate: the unknown op went raw into the error (and the log).
TEST(GateMessage, AControlCharacterInAnUnknownOpIsEscapedInTheError) {
  auto m = parse_gate_message("{\"op\":\"pre\x7fu\",\"pid\":4270}");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message.find('\x7f'), std::string::npos) << m.error().message;
  EXPECT_NE(m.error().message.find("unknown op"), std::string::npos) << m.error().message;
}

TEST(GateMessage, AnswersAreOneLineEach) {
  EXPECT_EQ(gate_release_line(), "{\"op\":\"release\"}\n");
  EXPECT_EQ(gate_exit_line(), "{\"op\":\"exit\"}\n");
}

TEST(PortOwner, ListeningInodesReadsOnlyListenersOfThePort) {
  // Port 8000 is 1F40; st 0A is LISTEN, 01 ESTABLISHED.
  const std::string text =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n"
      "   1: 0100007F:1F40 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n"
      "   2: 00000000:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0\n"
      "   3: garbage\n";
  EXPECT_EQ(listening_inodes(text, 8000), (std::set<uint64_t>{111}));
  EXPECT_EQ(listening_inodes(text, 8001), (std::set<uint64_t>{333}));
  EXPECT_TRUE(listening_inodes(text, 9).empty());
  EXPECT_TRUE(listening_inodes("", 8000).empty());
}

// A real child in its own group listens on a port; another group and another port are not it.
TEST(PortOwner, FindsTheMemberOfAGroupThatListens) {
  UniqueFd probe(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(probe.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&a), &len);
  const uint16_t port = ntohs(a.sin_port);
  probe.reset();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in b = a;
    b.sin_port = htons(port);
    if (::bind(s, reinterpret_cast<sockaddr*>(&b), sizeof b) != 0 || ::listen(s, 1) != 0) _exit(2);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    _exit(0);
  }
  ::setpgid(child, child);
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(group_listener(child, port), child);
  EXPECT_EQ(group_listener(child, static_cast<uint16_t>(port + 1)), 0);
  EXPECT_EQ(group_listener(::getpgrp(), port), 0);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(group_listener(child, port), 0);
}

// The model's files a standby is checked against: every file under the checkpoint, not only its weights.
TEST(ModelFiles, EveryFileUnderTheDirectoryButDotfiles) {
  test::TempDir d;
  std::filesystem::create_directories(d / "m/tokenizer/sub");
  std::filesystem::create_directories(d / "m/.cache/huggingface");
  for (const char* f : {"m/config.json", "m/model.safetensors", "m/tokenizer/tokenizer.json", "m/tokenizer/sub/chat_template.jinja",
                        "m/.lock", "m/.cache/huggingface/download.meta", "single.bin"})
    std::ofstream(d / f) << f;
  std::filesystem::create_symlink(d / "m/config.json", d / "m/linked.json");
  std::filesystem::create_directory_symlink(d / "m/tokenizer", d / "m/tokenizer-link");
  const auto files = model_files({d / "m", d / "single.bin"});
  EXPECT_EQ(files, (std::vector<std::string>{d / "m/config.json", d / "m/linked.json", d / "m/model.safetensors",
                                              d / "m/tokenizer/sub/chat_template.jinja", d / "m/tokenizer/tokenizer.json",
                                              d / "single.bin"}));
}

TEST(ModelFiles, DepthAndCountAreBounded) {
  test::TempDir d;
  std::string dir = d / "m";
  for (int level = 1; level <= 10; ++level) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/f" + std::to_string(level)) << level;
    dir += "/d";
  }
  // f1 is 1 level below the root, f8 is 8: the deepest listed.
  const auto files = model_files({d / "m"});
  ASSERT_EQ(files.size(), 8u) << testing::PrintToString(files);
  EXPECT_NE(std::find(files.begin(), files.end(), d / "m/d/d/d/d/d/d/d/f8"), files.end()) << testing::PrintToString(files);
  ModelFileLimits few;
  few.max_files = 3;
  EXPECT_EQ(model_files({d / "m"}, few).size(), 3u);
}

TEST(ModelFiles, AChangedConfigJsonIsAChangeAndSaysWhich) {
  test::TempDir d;
  std::filesystem::create_directories(d / "m");
  std::ofstream(d / "m/model.safetensors") << "weights";
  std::ofstream(d / "m/config.json") << "{\"a\": 1}";
  const auto was = identify_model_files(model_files({d / "m"}));
  EXPECT_EQ(model_files_change(was, identify_model_files(model_files({d / "m"}))), "");
  std::ofstream(d / "m/config.json") << "{\"a\": 12}";
  const std::string c = model_files_change(was, identify_model_files(model_files({d / "m"})));
  EXPECT_EQ(c.rfind(d / "m/config.json: ", 0), 0u) << c;
  std::ofstream(d / "m/config.json") << "{\"a\": 1}";
  const auto rewritten = identify_model_files(model_files({d / "m"}));
  std::ofstream(d / "m/tokenizer.json") << "{}";
  EXPECT_EQ(model_files_change(rewritten, identify_model_files(model_files({d / "m"}))), d / "m/tokenizer.json" + " appeared");
  std::filesystem::remove(d / "m/model.safetensors");
  EXPECT_EQ(model_files_change(rewritten, identify_model_files(model_files({d / "m"}))), d / "m/model.safetensors" + " is gone");
}

// With weights.checkpoint empty, a vLLM standby is checked against the model its flags name, when that is
// a path on this host (a hub id is not).
TEST(ModelFiles, VllmNamesItsLocalModelPath) {
  test::TempDir d;
  std::filesystem::create_directories(d / "llama");
  auto kind = make_builtin_engine_adapter(EngineKind::kVllm);
  auto local = FlagList::from_words({d / "llama", "--dtype", "bfloat16"}, "flags");
  auto hub = FlagList::from_words({"meta-llama/Llama-3.1-8B"}, "flags");
  auto by_flag = FlagList::from_words({"--model", d / "llama"}, "flags");
  ASSERT_TRUE(local.ok() && hub.ok() && by_flag.ok());
  EXPECT_EQ(kind->local_model_path(*local), d / "llama");
  EXPECT_EQ(kind->local_model_path(*by_flag), d / "llama");
  EXPECT_EQ(kind->local_model_path(*hub), "");
  auto generic = make_builtin_engine_adapter(EngineKind::kGeneric);
  EXPECT_EQ(generic->local_model_path(*local), "");
}

}  // namespace
}  // namespace fr::supervisor
