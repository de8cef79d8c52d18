// The start path "example", added as docs/start-paths.md shows (one folder and one line in the table): the
// page's diff is this folder's files and line and still applies to the table; fastrestartd built with them
// starts its engine through the path and shows it in status and /metrics; the shipped fastrestartd,
// without the line, refuses the name.
#include <signal.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "support/fastrestartd_config.h"
#include "support/harness.h"
#include "support/supervised.h"

namespace fr {
namespace {

using nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// One file of a unified diff: whether it is new, and its hunks' lines by their mark.
struct FileDiff {
  bool added = false;
  std::vector<std::string> plus, minus, before;  // before: the context and removed lines, in order
};

// The page's ```diff block, by file (b/ path).
std::map<std::string, FileDiff> page_diff(const std::string& page) {
  const std::string open = "```diff\n";
  const size_t a = page.find(open);
  const size_t b = a == std::string::npos ? a : page.find("\n```", a + open.size());
  if (b == std::string::npos) return {};
  std::map<std::string, FileDiff> files;
  FileDiff* cur = nullptr;
  bool in_hunk = false, from_null = false;
  for (const std::string& l : lines_of(page.substr(a + open.size(), b - a - open.size() + 1))) {
    if (l.rfind("diff --git ", 0) == 0) {
      cur = nullptr;
      in_hunk = false;
    } else if (!in_hunk && l.rfind("--- ", 0) == 0) {
      from_null = l == "--- /dev/null";
    } else if (!in_hunk && l.rfind("+++ b/", 0) == 0) {
      cur = &files[l.substr(6)];
      cur->added = from_null;
    } else if (cur && l.rfind("@@ ", 0) == 0) {
      in_hunk = true;
    } else if (cur && in_hunk && !l.empty() && l[0] == '+') {
      cur->plus.push_back(l.substr(1));
    } else if (cur && in_hunk && !l.empty() && l[0] == '-') {
      cur->minus.push_back(l.substr(1));
      cur->before.push_back(l.substr(1));
    } else if (cur && in_hunk && !l.empty() && l[0] == ' ') {
      cur->before.push_back(l.substr(1));
    }
  }
  return files;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST(ExamplePath, ThePagesDiffIsThisFolderAndOneLineOfTheTable) {
  const auto files = page_diff(read_file(FR_SOURCE_DIR "/docs/start-paths.md"));
  ASSERT_EQ(files.size(), 3u) << "docs/start-paths.md: its ```diff block should touch three files";
  const std::string table = "src/supervisor/start/paths.def";
  for (const char* name : {"path.cc", "part.cmake"}) {
    const std::string path = std::string("src/supervisor/example/") + name;
    ASSERT_TRUE(files.count(path)) << "the diff does not add " << path;
    const FileDiff& f = files.at(path);
    EXPECT_TRUE(f.added) << path << " should be a new file";
    EXPECT_TRUE(f.minus.empty()) << path;
    EXPECT_EQ(joined(f.plus), read_file(std::string(FR_EXAMPLE_DIR "/") + name))
        << path << " in the page differs from tests/supervisor/start/example_path/" << name;
  }
  ASSERT_TRUE(files.count(table)) << "the diff does not change " << table;
  const FileDiff& t = files.at(table);
  EXPECT_FALSE(t.added);
  EXPECT_TRUE(t.minus.empty()) << "the diff removes lines of the table";
  EXPECT_EQ(joined(t.plus), read_file(FR_EXAMPLE_DIR "/paths.def.line")) << "the diff adds more than the path's line";
  // The lines around the new one are still the table's, in that order: the diff applies to the tree.
  const std::string actual = "\n" + read_file(FR_SOURCE_DIR "/" + table);
  EXPECT_NE(actual.find("\n" + joined(t.before)), std::string::npos)
      << "the diff's context is no longer in " << table << ": regenerate the page's diff";
}

class ExamplePathRun : public ::testing::Test {
 protected:
  test::FastrestartdConfig config(const std::string& start) {
    const std::string run = m_dir / "run";
    test::FastrestartdConfig c(m_dir.path());
    c.tiny_engine({.binary = FR_TINYENGINE_BIN, .model = m_dir / "model", .port = m_port,
                   .flags = {"--load-format", "fastrestart", "--fastrestart-socket-dir", run, "--shutdown-grace", "2"}})
        .number("engine", "stop_grace_s", 3)
        .host_weights(m_dir / "model", run)
        .text("readiness", "model", "t").number("readiness", "poll_interval_s", 0.05)
        .number("restart", "backoff_initial_s", 0.05).number("restart", "backoff_max_s", 0.2)
        .set("restart", "start", start)
        .http(m_http);
    return c;
  }
  void SetUp() override {
    ASSERT_EQ(test::run({FR_TINYENGINE_BIN, "gen", "--out", m_dir / "model", "--size", "4M"}).exit_code, 0);
    m_port = test::free_port();
    m_http = test::free_port();
  }

  test::TempDir m_dir;
  uint16_t m_port = 0, m_http = 0;
};

TEST_F(ExamplePathRun, FastrestartdWithTheLineStartsTheEngineThroughThePath) {
  auto sup = test::start_fastrestartd(FR_EXAMPLE_FASTRESTARTD_BIN, config("[\"example\", \"cold\"]"));
  json st = sup->expect_ready();
  for (int round = 0; round < 2; ++round) {
    const json example = test::find_start_path(st["start_paths"], "example");
    EXPECT_EQ(example.value("outcome", ""), "started") << st["start_paths"].dump();
    EXPECT_EQ(st["start_paths"].size(), 1u) << "the walk should stop at the first path: " << st["start_paths"].dump();
    if (round == 1) break;
    const pid_t engine = st["engine"]["pid"];
    ASSERT_EQ(::kill(engine, SIGKILL), 0);
    st = sup->expect_ready(engine);
  }
  const std::string metrics = test::http_get(m_http, "/metrics").body;
  EXPECT_NE(metrics.find("fastrestart_start_path_total{path=\"example\",outcome=\"started\",reason=\"\"} 2"),
            std::string::npos) << metrics;
}

TEST_F(ExamplePathRun, TheShippedFastrestartdRefusesThePathNamingTheField) {
  const test::FastrestartdConfig c = config("[\"example\"]");
  const std::string file = c.write();
  const test::RunResult r = test::run({FR_FASTRESTARTD_BIN, "--check", "--syntax-only", "--config", file});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("restart.start[0]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"standby\""), std::string::npos) << "the error should list the paths: " << r.output;
  EXPECT_NE(r.output.find("\"example\""), std::string::npos) << r.output;
  // The example's build accepts the same file.
  const test::RunResult ok = test::run({FR_EXAMPLE_FASTRESTARTD_BIN, "--check", "--syntax-only", "--config", file});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

}  // namespace
}  // namespace fr
