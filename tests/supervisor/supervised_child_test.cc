// spawn_supervised and read_child_output against real children (/bin/sh) and real pipes on a real loop: each
// line of stdout and stderr reaches the log with its prefix and then the caller's handler, a respawn into the
// same record replaces it, a failed spawn leaves it as it was.
#include "supervisor/supervised_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <string>
#include <vector>

namespace fr::supervisor {
namespace {

// spdlog's default logger writes into a string while this lives (the supervisor logs through the default).
class CapturedLog {
 public:
  CapturedLog() : m_previous(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(m_text);
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_pattern("%v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(m_previous); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  std::string text() const { return m_text.str(); }

 private:
  std::ostringstream m_text;
  std::shared_ptr<spdlog::logger> m_previous;
};

SpawnSpec shell(const std::string& script) {
  SpawnSpec s;
  s.argv = {"/bin/sh", "-c", script};
  return s;
}

// A handler that collects lines and stops the loop at the line `last`.
LineHandler collect(Loop& loop, std::vector<std::string>& into, const std::string& last) {
  return [&loop, &into, last](const std::string& l) {
    into.push_back(l);
    if (l == last) loop.stop();
  };
}

// Runs the loop until a handler stops it; 10 s at most, so a missing line fails the test instead of hanging it.
void run(Loop& loop) {
  Timer give_up(loop);
  give_up.start(10, [&loop] { loop.stop(); });
  loop.run();
}

int reap(pid_t pid) {
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

TEST(SupervisedChild, LogsEveryLineWithItsPrefixThenPassesItOn) {
  CapturedLog log;
  Loop loop;
  SupervisedChild child;
  std::vector<std::string> lines;
  // `exec sleep` keeps the pid alive, so its process group can be checked after the last line.
  auto s = spawn_supervised(loop, shell("echo out; echo err >&2; echo end; exec sleep 30"), "weightd[0]",
                            collect(loop, lines, "end"), child);
  ASSERT_TRUE(s.ok()) << s.error().message;
  run(loop);
  EXPECT_EQ(lines, (std::vector<std::string>{"out", "err", "end"}));
  EXPECT_NE(log.text().find("[weightd[0]] out\n[weightd[0]] err\n[weightd[0]] end\n"), std::string::npos) << log.text();
  ASSERT_GT(child.pid, 0);
  EXPECT_EQ(::getpgid(child.pid), child.pid);  // it leads its own process group
  EXPECT_TRUE(child.output.valid());
  signal_group(child.pid, child.pidfd.get(), SIGKILL);
  int status = reap(child.pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST(SupervisedChild, ALineHandlerIsOptional) {
  CapturedLog log;
  Loop loop;
  SupervisedChild child;
  ASSERT_TRUE(spawn_supervised(loop, shell("echo quiet"), "engine", nullptr, child).ok());
  EXPECT_EQ(reap(child.pid), 0);
  // The reader flushes at EOF; a short run of the loop delivers the line without a handler to stop it.
  Timer stop(loop);
  stop.start(0.2, [&loop] { loop.stop(); });
  loop.run();
  EXPECT_NE(log.text().find("[engine] quiet\n"), std::string::npos) << log.text();
}

TEST(SupervisedChild, ARespawnIntoTheSameRecordReplacesIt) {
  CapturedLog log;
  Loop loop;
  SupervisedChild child;
  std::vector<std::string> first, second;
  ASSERT_TRUE(spawn_supervised(loop, shell("echo one; echo end"), "weightd", collect(loop, first, "end"), child).ok());
  run(loop);
  const pid_t first_pid = child.pid;
  EXPECT_EQ(reap(first_pid), 0);
  ASSERT_TRUE(spawn_supervised(loop, shell("echo two; echo end"), "weightd", collect(loop, second, "end"), child).ok());
  run(loop);
  EXPECT_NE(child.pid, first_pid);
  EXPECT_EQ(reap(child.pid), 0);
  EXPECT_EQ(first, (std::vector<std::string>{"one", "end"}));
  EXPECT_EQ(second, (std::vector<std::string>{"two", "end"}));
}

TEST(SupervisedChild, AFailedSpawnNamesTheProgramAndLeavesTheRecordAsItWas) {
  CapturedLog log;
  Loop loop;
  SupervisedChild child;
  std::vector<std::string> lines;
  auto first = spawn_supervised(loop, shell("echo end; exec sleep 30"), "engine", collect(loop, lines, "end"), child);
  ASSERT_TRUE(first.ok());
  run(loop);
  const pid_t pid = child.pid;
  const int fd = child.output.get();
  const LineReader* reader = child.reader.get();

  SpawnSpec missing;
  missing.argv = {"/nonexistent/fastrestart-test-program"};
  auto s = spawn_supervised(loop, missing, "engine", nullptr, child);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("/nonexistent/fastrestart-test-program"), std::string::npos) << s.error().message;
  EXPECT_EQ(child.pid, pid);
  EXPECT_EQ(child.output.get(), fd);
  EXPECT_EQ(child.reader.get(), reader);
  signal_group(pid, child.pidfd.get(), SIGKILL);
  reap(pid);
}

// A restored engine writes to its restore helper's pipe: the same reader over a pipe we made ourselves. The
// last line has no newline; EOF delivers it.
TEST(SupervisedChild, ReadsAPipeItDidNotSpawn) {
  CapturedLog log;
  Loop loop;
  SupervisedChild child;
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  UniqueFd write_end(p[1]);
  std::vector<std::string> lines;
  read_child_output(loop, UniqueFd(p[0]), "engine", collect(loop, lines, "b"), child);
  ASSERT_EQ(::write(write_end.get(), "a\nb", 3), 3);
  write_end.reset();
  run(loop);
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(child.output.get(), p[0]);
  EXPECT_EQ(child.pid, -1);  // the caller's to set
  EXPECT_NE(log.text().find("[engine] a\n[engine] b\n"), std::string::npos) << log.text();
}

// A child reaped before the loop has read its last lines (SIGCHLD first): drain() hands them on at once,
// without the loop and without an EOF (a worker it forked still holds the pipe open), so its exit can be
// classified by its dying words.
TEST(SupervisedChild, DrainHandsOnTheLastLinesOfAReapedChildAtOnce) {
  CapturedLog log;
  Loop loop;
  SupervisedChild child;
  std::vector<std::string> lines;
  auto s = spawn_supervised(loop, shell("sleep 30 & echo starting; echo 'ValueError: dying words' >&2; exit 1"),
                            "engine", [&lines](const std::string& l) { lines.push_back(l); }, child);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const int status = reap(child.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  EXPECT_TRUE(lines.empty());  // the loop never ran
  child.reader->drain();
  EXPECT_EQ(lines, (std::vector<std::string>{"starting", "ValueError: dying words"}));
  child.reader->drain();  // nothing new: nothing handed on twice
  EXPECT_EQ(lines.size(), 2u);
  signal_group(child.pid, -1, SIGKILL);  // the worker (`sleep 30`) still in its group
}

// The same with dying words that end without a newline: drain() hands them on too, as one line.
TEST(SupervisedChild, DrainHandsOnALastLineWithoutItsNewline) {
  CapturedLog log;
  Loop loop;
  SupervisedChild child;
  std::vector<std::string> lines;
  auto s = spawn_supervised(loop, shell("sleep 30 & echo starting; printf 'CUDA error: out of memory' >&2; exit 1"),
                            "engine", [&lines](const std::string& l) { lines.push_back(l); }, child);
  ASSERT_TRUE(s.ok()) << s.error().message;
  (void)reap(child.pid);
  child.reader->drain();
  EXPECT_EQ(lines, (std::vector<std::string>{"starting", "CUDA error: out of memory"}));
  child.reader->drain();
  EXPECT_EQ(lines.size(), 2u);
  signal_group(child.pid, -1, SIGKILL);
}

}  // namespace
}  // namespace fr::supervisor
