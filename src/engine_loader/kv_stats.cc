#include "fastrestart/kv_stats.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace fastrestart {
namespace {

bool kv_reason_word(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  return true;
}

std::string kv_random_id() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))  // no entropy yet: still distinct per process
    v = (static_cast<uint64_t>(::getpid()) << 32) ^ static_cast<uint64_t>(std::time(nullptr)) ^ reinterpret_cast<uintptr_t>(&v);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string kv_stats_text(const KvStats& s, const std::string& id) {
  auto word = [](const std::string& w) { return kv_reason_word(w) ? w : std::string("unknown"); };
  std::string out = "fastrestart-kv: id=" + id + " location=" + word(s.location) + " header=" + word(s.header) +
                    " blocks=" + std::to_string(s.blocks) + " block_tokens=" + std::to_string(s.block_tokens) +
                    " recovered=" + std::to_string(s.recovered);
  for (const auto& [reason, n] : s.dropped)
    if (kv_reason_word(reason)) out += " dropped." + reason + "=" + std::to_string(n);
  out += " requests=" + std::to_string(s.requests) + " query_tokens=" + std::to_string(s.query_tokens) +
         " hit_tokens=" + std::to_string(s.hit_tokens);
  return out;
}

KvStatsReporter::KvStatsReporter(std::string path) : m_path(std::move(path)), m_id(kv_random_id()) {
  if (m_path.empty())
    if (const char* e = std::getenv(kKvStatsFileEnv); e && *e) m_path = e;
}

Status KvStatsReporter::write(const KvStats& stats) const {
  if (m_path.empty()) return {};
  const std::string tmp = m_path + ".tmp." + std::to_string(::getpid());
  const std::string text = line(stats) + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fr::sys_error("open " + tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return fr::sys_error("write " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), m_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return fr::sys_error("rename " + tmp + " to " + m_path, err);
  }
  return {};
}

}  // namespace fastrestart
