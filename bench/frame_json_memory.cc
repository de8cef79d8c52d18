// Peak memory of one 16 MiB frame payload of tiny values (`{"id":[0,0,...]}`) parsed the way frames were
// before the value limit (nlohmann::json::parse, unbounded) and through decode_payload (docs/protocol.md,
// "Frame limits and timeouts"). Each runs in a child process of its own; the figure is the child's peak
// resident set (ru_maxrss) less that of a child that does nothing (the text, shared with the parent). Results: docs/bench-notes.md, "Frame JSON memory".
// Usage: fr_frame_json_memory [MiB]   (default 16)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "protocol/frame.h"

namespace {

// Runs `f` in a child; returns the child's peak RSS in KiB.
template <class F>
long peak_kib_of(F f) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    f();
    std::fflush(stdout);
    ::_exit(0);
  }
  int st = 0;
  rusage ru{};
  if (::wait4(pid, &st, 0, &ru) != pid) return -1;
  return ru.ru_maxrss;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 16;
  std::string text = "{\"id\":[0";
  while (text.size() + 3 < (mib << 20)) text += ",0";
  text += "]}";
  const long base = peak_kib_of([] {});
  const long unbounded = peak_kib_of([&] {
    auto j = nlohmann::json::parse(text, nullptr, false);
    std::printf("unbounded: %zu values parsed\n", j.is_discarded() ? size_t{0} : j["id"].size());
  });
  const long bounded = peak_kib_of([&] {
    auto j = fr::proto::decode_payload(text);
    std::printf("decode_payload: %s\n", j.ok() ? "accepted" : j.error().message.c_str());
  });
  std::printf("payload %zu bytes (%.1f MiB)\n", text.size(), static_cast<double>(text.size()) / (1 << 20));
  std::printf("peak RSS, KiB: baseline (the text, forked) %ld, unbounded parse %ld, decode_payload %ld\n", base, unbounded, bounded);
  std::printf("held beyond the text: unbounded %.1f MiB (%.1fx the text), decode_payload %.1f MiB\n",
              static_cast<double>(unbounded - base) / 1024, static_cast<double>(unbounded - base) * 1024 / static_cast<double>(text.size()),
              static_cast<double>(bounded - base) / 1024);
  return 0;
}
