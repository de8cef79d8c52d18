// fastrestart-snapshot: the helper fastrestartd runs for snapshot create and restore (docs/snapshot.md).
// It is a process of its own so that CUDA (the driver's checkpoint API) and CRIU never run inside
// fastrestartd. Exit codes: 0 done, 1 failed (the reason is in --result and on stderr), 2 usage.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "common/io.h"
#include "snapshot/criu.h"
#include "snapshot/manifest.h"
#include "snapshot/ops.h"

namespace {

using nlohmann::json;
using namespace fr::snapshot;

constexpr int kOk = 0, kFail = 1, kUsage = 2;

fr::Result<EngineSpec> load_spec(const std::string& path) {
  FR_ASSIGN(std::string text, fr::read_file(path, 4 << 20));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return fr::make_error(fr::Errc::kInvalidArgument, path + ": not valid JSON");
  return spec_from_json(j, path + ": spec");
}

// The result goes to a file (stdout is the engine's log pipe on restore).
int finish(const std::string& result_path, json result) {
  const bool ok = result.value("ok", false);
  if (!ok) std::fprintf(stderr, "fastrestart-snapshot: %s\n", result.value("error", std::string("failed")).c_str());
  if (!result_path.empty()) {
    const std::string tmp = result_path + ".tmp";
    const std::string text = result.dump() + "\n";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || !fr::write_full(fd, text.data(), text.size(), tmp).ok() || ::rename(tmp.c_str(), result_path.c_str()) != 0)
      std::fprintf(stderr, "fastrestart-snapshot: cannot write %s\n", result_path.c_str());
    if (fd >= 0) ::close(fd);
  } else {
    std::cout << result.dump(2) << "\n";
  }
  return ok ? kOk : kFail;
}

json failure(const fr::Error& e) { return {{"ok", false}, {"error", e.message}, {"code", fr::errc_name(e.code)}}; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fastrestart-snapshot: create and restore engine snapshots for fastrestartd (docs/snapshot.md)"};
  app.require_subcommand(1);
  std::string dir, criu = "criu", spec_path, id, result, stdout_pipe, listen_socket;
  int pid = -1, listen_fd = -1;
  double oracle_timeout = 60;

  auto* create = app.add_subcommand("create", "checkpoint and dump a running engine into a new artifact");
  create->add_option("--dir", dir, "snapshot directory")->required();
  create->add_option("--criu", criu, "path of criu (>= 4.1)");
  create->add_option("--pid", pid, "the engine (PID 1 of its PID namespace)")->required();
  create->add_option("--spec", spec_path, "engine spec JSON written by fastrestartd")->required();
  create->add_option("--stdout-pipe", stdout_pipe, "pipe:[inode] of the engine's stdout");
  create->add_option("--listen-socket", listen_socket,
                     "socket:[inode] of fastrestartd's listening socket, which the engine holds (docs/listen-socket.md)");
  create->add_option("--id", id, "artifact id (default: the UTC time)");
  create->add_option("--result", result, "write the result JSON here (default: stdout)");

  auto* restore = app.add_subcommand("restore", "restore an artifact as a child of this process's parent");
  restore->add_option("--dir", dir, "snapshot directory")->required();
  restore->add_option("--criu", criu, "path of criu (>= 4.1)");
  restore->add_option("--spec", spec_path, "engine spec JSON written by fastrestartd")->required();
  restore->add_option("--id", id, "artifact id (default: the newest)");
  restore->add_option("--listen-fd", listen_fd,
                      "descriptor of fastrestartd's listening socket, handed to the restored engine (docs/listen-socket.md)");
  restore->add_option("--oracle-timeout", oracle_timeout, "seconds for the oracle request");
  restore->add_option("--result", result, "write the result JSON here (default: stdout)");

  auto* check = app.add_subcommand("check", "print criu's version, or why it cannot be used");
  check->add_option("--criu", criu, "path of criu");

  auto* cuda = app.add_subcommand("cuda", "one step of the driver's checkpoint API on a process");
  std::string step;
  cuda->add_option("step", step, "lock | checkpoint | restore | unlock | state")
      ->required()
      ->check(CLI::IsMember({"lock", "checkpoint", "restore", "unlock", "state"}));
  cuda->add_option("--pid", pid, "the process")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  }
  auto gpu = make_gpu_checkpointer();

  if (check->parsed()) {
    auto c = probe_criu(criu);
    if (!c.ok()) return finish("", failure(c.error()));
    return finish("", {{"ok", true}, {"criu", c->path}, {"version", c->version}});
  }
  if (cuda->parsed()) {
    fr::Status s;
    if (step == "lock") s = gpu->lock(pid, 30'000);
    else if (step == "checkpoint") s = gpu->checkpoint(pid);
    else if (step == "restore") s = gpu->restore(pid);
    else if (step == "unlock") s = gpu->unlock(pid);
    if (!s.ok()) return finish("", failure(s.error()));
    auto st = gpu->state(pid);
    if (!st.ok()) return finish("", failure(st.error()));
    return finish("", {{"ok", true}, {"state", *st}});
  }
  auto spec = load_spec(spec_path);
  if (!spec.ok()) return finish(result, failure(spec.error()));
  if (create->parsed()) {
    CreateRequest r{pid, dir, criu, *spec, stdout_pipe, FASTRESTART_VERSION, id, listen_socket};
    auto m = create_snapshot(r, *gpu);
    if (!m.ok()) return finish(result, failure(m.error()));
    return finish(result, {{"ok", true}, {"manifest", to_json(*m)}});
  }
  RestoreRequest r;
  r.dir = dir;
  r.id = id;
  r.criu = criu;
  r.spec = *spec;
  r.oracle_timeout_s = oracle_timeout;
  if (listen_fd >= 0) {
    struct stat st {};
    if (::fstat(listen_fd, &st) != 0 || !S_ISSOCK(st.st_mode))
      return finish(result, failure(fr::make_error(fr::Errc::kInvalidArgument,
                                                   "--listen-fd " + std::to_string(listen_fd) + " is not an open socket")));
    ::fcntl(listen_fd, F_SETFD, FD_CLOEXEC);  // only CRIU gets it, through run_program's keep list
    r.listen_fd = listen_fd;
  }
  auto restored = restore_snapshot(r, *gpu);
  if (!restored.ok()) return finish(result, failure(restored.error()));
  return finish(result, {{"ok", true}, {"pid", restored->pid}, {"id", restored->id}, {"timings", restored->timings}});
}
