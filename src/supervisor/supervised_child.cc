#include "supervisor/supervised_child.h"

#include <spdlog/spdlog.h>

#include "common/control_chars.h"

namespace fr::supervisor {

Status spawn_supervised(Loop& loop, const SpawnSpec& spec, const std::string& log_prefix, LineHandler on_line,
                        SupervisedChild& child) {
  auto s = spawn_child(spec);
  if (!s.ok()) return s.error();
  child.pid = s->pid;
  child.pidfd = std::move(s->pidfd);
  read_child_output(loop, std::move(s->output), log_prefix, std::move(on_line), child);
  return {};
}

void read_child_output(Loop& loop, UniqueFd output, const std::string& log_prefix, LineHandler on_line,
                       SupervisedChild& child) {
  child.reader.reset();  // it polls the fd that the next line closes
  child.output = std::move(output);
  child.reader = std::make_unique<LineReader>(
      loop, child.output.get(),
      [log_prefix, on_line = std::move(on_line)](const std::string& l) {
        spdlog::info("[{}] {}", log_prefix, escape_control_chars(l));  // a child's text: one log line each
        if (on_line) on_line(l);
      },
      [] {});
}

}  // namespace fr::supervisor
