#include "supervisor/classify.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

namespace fr::supervisor {
namespace {

int exited(int code) { return code << 8; }
int signaled(int sig) { return sig; }

ExitCause cause(int status, std::deque<std::string> lines = {}, bool oom = false, bool requested = false) {
  ExitFacts f;
  f.wait_status = status;
  f.last_lines = &lines;
  f.oom_kill_recorded = oom;
  f.requested = requested;
  return classify_exit(f).cause;
}

TEST(Classify, Basics) {
  EXPECT_EQ(cause(exited(1)), ExitCause::kCrash);
  EXPECT_EQ(cause(signaled(SIGSEGV)), ExitCause::kCrash);
  EXPECT_EQ(cause(exited(0)), ExitCause::kUnexpectedExit0);
  EXPECT_EQ(cause(exited(0), {}, false, true), ExitCause::kRequested);
  EXPECT_EQ(cause(signaled(SIGTERM), {}, false, true), ExitCause::kRequested);
}

TEST(Classify, OutputNamesCudaOomAndVllmsMemoryCheck) {
  EXPECT_EQ(cause(exited(1), {"Traceback (most recent call last):",
                              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."}),
            ExitCause::kCudaOom);
  EXPECT_EQ(cause(exited(1), {"ValueError: Free memory on device (1.06/79.19 GiB) on startup is less than desired GPU "
                              "memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization"}),
            ExitCause::kMemoryUtilization);
  EXPECT_EQ(cause(exited(1), {"all good", "exiting"}), ExitCause::kCrash);
}

TEST(Classify, KernelOomNeedsTheCgroupRecord) {
  EXPECT_EQ(cause(signaled(SIGKILL), {}, true), ExitCause::kKernelOom);
  EXPECT_EQ(cause(signaled(SIGKILL), {}, false), ExitCause::kCrash);
}

TEST(Classify, OurKillsAreNamedForWhyWeKilled) {
  ExitFacts f;
  f.wait_status = signaled(SIGKILL);
  f.killed_for_hang = true;
  f.requested = true;
  EXPECT_EQ(classify_exit(f).cause, ExitCause::kHung);
  f.killed_for_hang = false;
  f.killed_for_timeout = true;
  EXPECT_EQ(classify_exit(f).cause, ExitCause::kStartTimeout);
  EXPECT_NE(classify_exit(f).detail.find("signal 9"), std::string::npos);
}

// An engine that stopped answering because it was shutting down, and exited by itself before the hang's
// SIGKILL landed, is classified by its own exit.
TEST(Classify, AnEngineThatExitedBeforeTheHangKillIsClassifiedByItsOwnExit) {
  ExitFacts f;
  f.killed_for_hang = true;  // (the supervisor does not count its hang kill as requested)
  f.wait_status = 0;         // exit code 0
  EXPECT_EQ(classify_exit(f).cause, ExitCause::kUnexpectedExit0);
  f.wait_status = 3 << 8;
  EXPECT_EQ(classify_exit(f).cause, ExitCause::kCrash);
  f.wait_status = signaled(SIGKILL);
  EXPECT_EQ(classify_exit(f).cause, ExitCause::kHung);
}

// engine.listen = "supervisor" with an engine that binds the port itself: its words, in the forms Python,
// uvicorn and C programs print them, become one detail naming the option.
TEST(Classify, AnEngineBindingTheHandedDownPortIsNamed) {
  for (const std::string line : {"OSError: [Errno 98] Address already in use",
                                  "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
                                  "bind: EADDRINUSE"}) {
    const std::deque<std::string> lines{"starting", line, "Traceback follows"};
    auto d = listen_conflict_detail(&lines, 8000);
    ASSERT_TRUE(d.has_value()) << line;
    EXPECT_EQ(d->rfind("engine.listen = \"supervisor\" is set but the engine binds port 8000 itself (\"" + line + "\")", 0), 0u) << *d;
    EXPECT_NE(d->find("LISTEN_FDS"), std::string::npos) << *d;
  }
  const std::deque<std::string> other{"CUDA out of memory", "exit"};
  EXPECT_FALSE(listen_conflict_detail(&other, 8000).has_value());
  EXPECT_FALSE(listen_conflict_detail(nullptr, 8000).has_value());
}

}  // namespace
}  // namespace fr::supervisor
