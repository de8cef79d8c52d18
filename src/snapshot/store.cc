#include "snapshot/store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <functional>

namespace fr::snapshot {

namespace fs = std::filesystem;

bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
  });
}

Status Store::ensure() const {
  // The parents (the state directory) may not exist yet; the snapshot directory itself must be private.
  std::error_code ec;
  fs::create_directories(fs::path(m_dir).parent_path(), ec);
  if (ec) return make_error(Errc::kIo, "create " + fs::path(m_dir).parent_path().string() + ": " + ec.message());
  if (auto s = ensure_private_dir(m_dir, std::nullopt); !s.ok())
    return make_error(s.error().code, "snapshot directory: " + s.error().message);
  return {};
}

Status Store::check(const std::string& id) const {
  FR_TRY(check_private_dir("snapshot directory", m_dir, std::nullopt));
  if (!id.empty()) FR_TRY(check_private_dir("snapshot", path(id), std::nullopt));
  return {};
}

std::string Store::new_id() const {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y%m%d-%H%M%S", &tm);
  std::string id = b;
  std::error_code ec;
  for (int n = 2; fs::exists(path(id), ec) || fs::exists(m_dir + "/.creating-" + id, ec); ++n)
    id = std::string(b) + "-" + std::to_string(n);
  return id;
}

Result<std::string> Store::begin(const std::string& id) const {
  FR_TRY(ensure());
  const std::string tmp = m_dir + "/.creating-" + id;
  if (::mkdir(tmp.c_str(), 0700) != 0) return sys_error("mkdir " + tmp);
  if (::mkdir((tmp + "/images").c_str(), 0700) != 0) return sys_error("mkdir " + tmp + "/images");
  return tmp;
}

Status Store::commit(const std::string& id) const {
  const std::string tmp = m_dir + "/.creating-" + id;
  if (::rename(tmp.c_str(), path(id).c_str()) != 0) return sys_error("rename " + tmp);
  return {};
}

void Store::abandon(const std::string& id) const {
  std::error_code ec;
  fs::remove_all(m_dir + "/.creating-" + id, ec);
}

std::vector<std::string> Store::ids() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(m_dir, ec)) {
    const std::string id = e.path().filename().string();
    if (valid_id(id) && !e.is_symlink(ec) && e.is_directory(ec)) out.push_back(id);
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

std::vector<Listed> Store::list() const {
  std::vector<Listed> out;
  for (const auto& id : ids()) out.push_back(Listed{id, path(id), read_manifest(path(id))});
  return out;
}

Result<LockFile> Store::lock(const std::string& id) const {
  if (!valid_id(id)) return make_error(Errc::kInvalidArgument, "invalid snapshot id \"" + id + "\"");
  std::error_code ec;
  if (!fs::is_directory(path(id), ec)) return make_error(Errc::kNotFound, "no snapshot " + id + " in " + m_dir);
  auto l = LockFile::acquire(path(id) + "/restore.lock");
  if (!l.ok() && l.error().code == Errc::kBusy)
    return make_error(Errc::kBusy, "snapshot " + id + " is being restored (" + l.error().message + ")");
  return l;
}

Status Store::remove(const std::string& id) const {
  FR_ASSIGN(LockFile held, lock(id));
  // Move it out of sight first, so a concurrent list or restore never sees half an artifact.
  const std::string gone = m_dir + "/.deleting-" + id;
  if (::rename(path(id).c_str(), gone.c_str()) != 0) return sys_error("rename " + path(id));
  std::error_code ec;
  fs::remove_all(gone, ec);
  if (ec) return make_error(Errc::kIo, "remove " + gone + ": " + ec.message());
  return {};
}

uint64_t tree_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec)) n += it->file_size(ec);
  return n;
}

}  // namespace fr::snapshot
