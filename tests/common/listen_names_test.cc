// The Python helpers are pure Python and keep their own copy of the LISTEN_FDNAMES names: they must stay
// the C++ definition's (fastrestart/listen_names.h), or an engine in Python would look for a socket under a
// name fastrestartd never gives.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "fastrestart/listen_names.h"

namespace fr {
namespace {

std::string source_file(const std::string& relative) {
  std::ifstream in(std::string(FR_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `name = "<value>"` at the start of a line of `text`.
bool assigns(const std::string& text, const std::string& name, const std::string& value) {
  const std::string line = name + " = \"" + value + "\"";
  for (size_t at = text.find(line); at != std::string::npos; at = text.find(line, at + 1))
    if (at == 0 || text[at - 1] == '\n') return true;
  return false;
}

TEST(ListenNames, ThePythonHelperUsesTheNamesFastrestartdGives) {
  const std::string listen = source_file("python/fastrestart/listen.py");
  ASSERT_FALSE(listen.empty()) << "python/fastrestart/listen.py not read";
  EXPECT_TRUE(assigns(listen, "FDNAME", fastrestart::kListenFdName)) << "FDNAME in python/fastrestart/listen.py";
  EXPECT_TRUE(assigns(listen, "PROBE_FDNAME", fastrestart::kProbeFdName)) << "PROBE_FDNAME in python/fastrestart/listen.py";
}

TEST(ListenNames, ThePythonTestsStartEnginesAsFastrestartdDoes) {
  const std::string support = source_file("python/tests/listen_support.py");
  ASSERT_FALSE(support.empty()) << "python/tests/listen_support.py not read";
  EXPECT_TRUE(assigns(support, "FDNAME", fastrestart::kListenFdName)) << "FDNAME in python/tests/listen_support.py";
  EXPECT_TRUE(assigns(support, "PROBE_FDNAME", fastrestart::kProbeFdName)) << "PROBE_FDNAME in python/tests/listen_support.py";
}

TEST(ListenNames, TheVllmLauncherReadsTheBacklogVariableFastrestartdSets) {
  const std::string launch = source_file("python/fastrestart_vllm/launch.py");
  ASSERT_FALSE(launch.empty()) << "python/fastrestart_vllm/launch.py not read";
  EXPECT_TRUE(assigns(launch, "BACKLOG_ENV", fastrestart::kListenBacklogEnv)) << "BACKLOG_ENV in python/fastrestart_vllm/launch.py";
}

}  // namespace
}  // namespace fr
