// libFuzzer target: the CRIU image rewrite of src/snapshot/listen_image.h (hand_down_listen_socket) on
// images/ of a damaged or hostile artifact: files.img and fdinfo-*.img as they lie on disk. The input is up
// to four files, each a 16-bit little-endian length and that many bytes (files.img, then fdinfo-1.img..);
// the socket looked for is socket:[4242]. Never a crash, a hang or an exception; an error writes nothing
// (every file as it was, no temporary left); a rewrite leaves images that parse and hold no such inet
// socket any more (a second rewrite finds none).
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/io.h"
#include "snapshot/listen_image.h"

namespace {

constexpr uint64_t kInode = 4242;

// A directory of this process's own, on tmpfs where there is one (the rewrite fsyncs what it writes).
const std::string& work_dir() {
  static const std::string dir = [] {
    std::string t = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"));
    t += "/fuzz_listen_image.XXXXXX";
    if (!mkdtemp(t.data())) __builtin_trap();
    return t;
  }();
  return dir;
}

// Every file in the directory with its content.
std::map<std::string, std::string> snapshot_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) __builtin_trap();
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    auto text = fr::read_file(dir + "/" + name, 1 << 20);
    if (!text.ok()) __builtin_trap();
    out[name] = *text;
  }
  closedir(d);
  return out;
}

// The names an input may create, and the temporaries a rewrite would leave if it failed half way.
void clear(const std::string& dir) {
  for (const char* name : {"files.img", "fdinfo-1.img", "fdinfo-2.img", "fdinfo-3.img"}) {
    ::unlink((dir + "/" + name).c_str());
    ::unlink((dir + "/" + name + ".tmp").c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Removed when the fuzzer exits normally; a crash leaves it for the post-mortem. Made before the exit
  // handler is registered, so that it is destroyed after the handler ran.
  (void)work_dir();
  atexit([] {
    for (const auto& [name, text] : snapshot_of(work_dir())) ::unlink((work_dir() + "/" + name).c_str());
    ::rmdir(work_dir().c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = work_dir();
  clear(dir);
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> before;
  for (int i = 0; i < 4 && in.size() >= 2; ++i) {
    const size_t n = std::min<size_t>(static_cast<uint8_t>(in[0]) | static_cast<size_t>(static_cast<uint8_t>(in[1])) << 8, in.size() - 2);
    const std::string name = i == 0 ? "files.img" : "fdinfo-" + std::to_string(i) + ".img";
    fr::UniqueFd fd(::open((dir + "/" + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd || !fr::write_full(fd.get(), in.data() + 2, n, name).ok()) __builtin_trap();
    before[name] = std::string(in.substr(2, n));
    in.remove_prefix(2 + n);
  }
  auto r = fr::snapshot::hand_down_listen_socket(dir, kInode);
  if (!r.ok()) {
    if (snapshot_of(dir) != before) __builtin_trap();  // nothing written
    return 0;
  }
  if (*r <= 0) __builtin_trap();
  const auto after = snapshot_of(dir);
  if (after.size() != before.size()) __builtin_trap();  // no temporary left, nothing added
  auto again = fr::snapshot::hand_down_listen_socket(dir, kInode);
  if (again.ok() || again.error().code != fr::Errc::kNotFound) __builtin_trap();
  return 0;
}
