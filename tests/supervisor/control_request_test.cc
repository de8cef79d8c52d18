// Control requests are validated before the supervisor acts (src/supervisor/control_request.h). The
// wrong-type cases crashed fastrestartd before (an exception on the loop thread); fuzz_control guards them.
#include "supervisor/control_request.h"

#include <gtest/gtest.h>

#include "supervisor/flag_words.h"

namespace fr::supervisor {
namespace {

using nlohmann::json;

std::string error_of(const json& j) {
  auto r = parse_control_request(j);
  return r.ok() ? std::string("(accepted)") : r.error().message;
}

TEST(ControlRequest, WhatFastrestartctlSendsIsAccepted) {
  auto r = parse_control_request(json::parse(R"({"op":"reload","wait":false,"flags":"--a 1 --b 'x y'","mode":"add"})"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->op, "reload");
  EXPECT_FALSE(r->wait);
  EXPECT_EQ(r->mode, PushKind::kAdd);
  EXPECT_EQ(r->flags->words(), (std::vector<std::string>{"--a", "1", "--b", "x y"}));
  auto s = parse_control_request(json{{"op", "status"}, {"client", "newer"}});
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->flags.has_value());
  EXPECT_TRUE(s->wait);
}

TEST(ControlRequest, WrongTypesNameTheField) {
  EXPECT_EQ(error_of(json::array()), "request: expected an object, got array");
  EXPECT_EQ(error_of(json::object()), "op: missing");
  EXPECT_EQ(error_of(json{{"op", 5}}), "op: expected a string, got number");
  EXPECT_EQ(error_of(json{{"op", "reload"}, {"wait", "yes"}}), "wait: expected a boolean, got string");
  EXPECT_EQ(error_of(json{{"op", "reload"}, {"mode", 1}}), "mode: expected \"replace\", \"add\" or \"remove\", got 1");
  EXPECT_EQ(error_of(json{{"op", "reload"}, {"flags", {"--a", 2}}}), "flags[1]: expected a string, got number");
  EXPECT_EQ(error_of(json{{"op", "reload"}, {"flags", json::object()}}),
            "flags: expected a string or an array of strings, got object");
  EXPECT_NE(error_of(json{{"op", "reload"}, {"flags", "--a 'unterminated"}}).find("flags: "), std::string::npos);
  EXPECT_EQ(error_of(json{{"op", std::string(65, 'x')}}), "op: longer than 64 bytes");
}

TEST(ControlRequest, RoundTripsThroughJson) {
  ControlRequest r;
  r.op = "reload";
  r.flags = testing::flags_of({"--x=1", ""});
  r.mode = PushKind::kRemove;
  r.wait = false;
  auto back = parse_control_request(to_json(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->flags, r.flags);
  EXPECT_EQ(back->mode, r.mode);
  EXPECT_EQ(back->wait, r.wait);
}

}  // namespace
}  // namespace fr::supervisor
