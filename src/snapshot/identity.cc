#include "snapshot/identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "common/fd.h"
#include "common/secrets.h"
#include "snapshot/json_fields.h"

namespace fr::snapshot {

using nlohmann::json;

json to_json(const EngineSpec& s) {
  return {{"argv", s.argv}, {"env", s.env}, {"files", s.files}, {"host", s.host}, {"port", s.port},
          {"prompt", s.prompt}, {"model", s.model}, {"oracle_tokens", s.oracle_tokens},
          {"secret_flags", s.secret_flags}, {"public_env", s.public_env}};
}

Result<EngineSpec> spec_from_json(const json& j, const std::string& where) {
  Fields f(j, where);
  EngineSpec s;
  FR_ASSIGN(s.argv, f.strings("argv"));
  if (s.argv.empty()) return f.fail("argv", "must not be empty");
  FR_ASSIGN(s.env, f.string_map("env"));
  FR_ASSIGN(s.files, f.strings("files"));
  FR_ASSIGN(s.host, f.str("host"));
  FR_ASSIGN(int64_t port, f.integer("port"));
  if (port < 1 || port > 65535) return f.fail("port", "must be in 1..65535");
  s.port = static_cast<int>(port);
  FR_ASSIGN(s.prompt, f.str("prompt"));
  FR_ASSIGN(s.model, f.str("model"));
  FR_ASSIGN(int64_t n, f.integer("oracle_tokens"));
  if (n < 1 || n > 256) return f.fail("oracle_tokens", "must be in 1..256");
  s.oracle_tokens = static_cast<int>(n);
  if (j.contains("secret_flags")) {
    FR_ASSIGN(s.secret_flags, f.strings("secret_flags"));
  }
  if (j.contains("public_env")) {
    FR_ASSIGN(s.public_env, f.strings("public_env"));
  }
  return s;
}

namespace {

json file_json(const FileIdentity& f) {
  return {{"path", f.path}, {"dev", f.dev}, {"ino", f.ino}, {"size", f.size}, {"mtime_ns", f.mtime_ns},
          {"ctime_ns", f.ctime_ns}};
}

Result<FileIdentity> file_from_json(const json& j, const std::string& where) {
  FileIdentity id;
  FR_TRY(Fields(j, where).read("path", id.path, "dev", id.dev, "ino", id.ino, "size", id.size, "mtime_ns", id.mtime_ns,
                               "ctime_ns", id.ctime_ns));
  return id;
}

std::string quoted(const std::string& s) { return json(s).dump(); }

}  // namespace

json to_json(const Identity& id) {
  json files = json::array();
  for (const auto& f : id.files) files.push_back(file_json(f));
  return {{"kernel_release", id.kernel_release},
          {"criu_version", id.criu_version},
          {"cuda", id.cuda},
          {"gpu", {{"driver_version", id.gpu.driver_version}, {"uuid", id.gpu.uuid}, {"name", id.gpu.name}}},
          {"executable", id.executable},
          {"executable_hash", id.executable_hash},
          {"files", files},
          {"args", id.args},
          {"env", id.env},
          {"arg_hashes", id.arg_hashes}};
}

Result<Identity> identity_from_json(const json& j, const std::string& where) {
  Fields f(j, where);
  Identity id;
  FR_TRY(f.read("kernel_release", id.kernel_release, "criu_version", id.criu_version, "cuda", id.cuda));
  FR_ASSIGN(const json* gpu, f.child("gpu", json::value_t::object));
  FR_TRY(Fields(*gpu, f.path("gpu")).read("driver_version", id.gpu.driver_version, "uuid", id.gpu.uuid, "name",
                                          id.gpu.name));
  FR_TRY(f.read("executable", id.executable, "executable_hash", id.executable_hash));
  FR_ASSIGN(const json* files, f.child("files", json::value_t::array));
  for (size_t i = 0; i < files->size(); ++i) {
    FR_ASSIGN(FileIdentity fi, file_from_json((*files)[i], f.path("files[" + std::to_string(i) + "]")));
    id.files.push_back(std::move(fi));
  }
  FR_TRY(f.read("args", id.args, "env", id.env));
  if (j.contains("arg_hashes")) {
    FR_ASSIGN(id.arg_hashes, f.string_map("arg_hashes"));
  }
  return id;
}

Result<std::string> hash_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_error("open " + path);
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> st(XXH64_createState(), XXH64_freeState);
  XXH64_reset(st.get(), 0);
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("read " + path);
    if (n == 0) break;
    XXH64_update(st.get(), buf.data(), static_cast<size_t>(n));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64_digest(st.get())));
  return std::string(hex);
}

Result<Identity> collect_identity(const EngineSpec& spec, const std::string& criu_version) {
  Identity id;
  utsname u{};
  ::uname(&u);
  id.kernel_release = u.release;
  id.criu_version = criu_version;
  id.executable = spec.argv.at(0);
  FR_ASSIGN(id.executable_hash, hash_file(id.executable));
  for (const std::string& path : spec.files) {
    FR_ASSIGN(FileIdentity fi, identify_file(path));
    id.files.push_back(std::move(fi));
  }
  id.args.assign(spec.argv.begin() + 1, spec.argv.end());
  id.env = spec.env;
  const auto hidden = map_secret_values(id.args, [](std::string_view) { return std::string(); }, spec.secret_flags);
  for (size_t i = 0; i < id.args.size(); ++i) {
    const std::string& arg = id.args[i];
    if (hidden[i] != arg) continue;  // a secret is no file to hash, and its path would be written in clear
    std::string path = arg;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) path = arg.substr(arg.find('=') + 1);
    if (path.empty() || path[0] != '/') continue;
    if (std::find(spec.files.begin(), spec.files.end(), path) != spec.files.end()) continue;
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxArgFileBytes)
      continue;
    FR_ASSIGN(id.arg_hashes[path], hash_file(path));
  }
  hide_secrets(id, spec.secret_flags, spec.public_env);
  return id;
}

void hide_secrets(Identity& id, const std::vector<std::string>& secret_flags, const std::vector<std::string>& public_env) {
  auto digest = [](std::string_view v) { return is_secret_digest(v) ? std::string(v) : secret_digest(v); };
  id.args = map_secret_values(id.args, digest, secret_flags);
  for (auto& [k, v] : id.env)
    if (std::find(public_env.begin(), public_env.end(), k) == public_env.end()) v = digest(v);
}

std::optional<std::string> first_difference(const Identity& recorded, const Identity& current,
                                            const std::vector<std::string>& secret_flags,
                                            const std::vector<std::string>& public_env) {
  Identity a = recorded, b = current;
  hide_secrets(a, secret_flags, public_env);
  hide_secrets(b, secret_flags, public_env);
  auto differ = [](const std::string& field, const std::string& was, const std::string& now) {
    return "identity." + field + ": recorded " + quoted(was) + ", now " + quoted(now);
  };
  if (a.kernel_release != b.kernel_release) return differ("kernel_release", a.kernel_release, b.kernel_release);
  if (a.criu_version != b.criu_version) return differ("criu_version", a.criu_version, b.criu_version);
  if (a.cuda) {
    if (a.gpu.driver_version != b.gpu.driver_version)
      return differ("gpu.driver_version", a.gpu.driver_version, b.gpu.driver_version);
    if (a.gpu.uuid != b.gpu.uuid) return differ("gpu.uuid", a.gpu.uuid, b.gpu.uuid);
    if (a.gpu.name != b.gpu.name) return differ("gpu.name", a.gpu.name, b.gpu.name);
  }
  if (a.executable != b.executable) return differ("executable", a.executable, b.executable);
  if (a.executable_hash != b.executable_hash)
    return differ("executable_hash", a.executable_hash, b.executable_hash) + " (" + a.executable + " changed)";
  if (a.files.size() != b.files.size())
    return differ("files", std::to_string(a.files.size()) + " file(s)", std::to_string(b.files.size()) + " file(s)");
  for (size_t i = 0; i < a.files.size(); ++i) {
    const auto &x = a.files[i], &y = b.files[i];
    const std::string f = "files[" + std::to_string(i) + "]";
    if (x.path != y.path) return differ(f + ".path", x.path, y.path);
    if (x.dev != y.dev || x.ino != y.ino)
      return differ(f + ".inode", std::to_string(x.dev) + ":" + std::to_string(x.ino),
                    std::to_string(y.dev) + ":" + std::to_string(y.ino)) + " (" + x.path + " was replaced)";
    if (x.size != y.size) return differ(f + ".size", std::to_string(x.size), std::to_string(y.size));
    if (x.mtime_ns != y.mtime_ns) return differ(f + ".mtime_ns", std::to_string(x.mtime_ns), std::to_string(y.mtime_ns));
    if (x.ctime_ns != y.ctime_ns)
      return differ(f + ".ctime_ns", std::to_string(x.ctime_ns), std::to_string(y.ctime_ns)) + " (" + x.path +
             " was rewritten)";
  }
  if (a.args != b.args) {
    for (size_t i = 0; i < std::max(a.args.size(), b.args.size()); ++i) {
      std::string x = i < a.args.size() ? a.args[i] : "(none)", y = i < b.args.size() ? b.args[i] : "(none)";
      if (x != y) return differ("args[" + std::to_string(i) + "]", x, y);
    }
  }
  for (const auto& [path, hash] : a.arg_hashes) {
    auto it = b.arg_hashes.find(path);
    const std::string field = "arg_hashes[" + path + "]";
    if (it == b.arg_hashes.end()) return differ(field, hash, "(not a readable file)");
    if (it->second != hash) return differ(field, hash, it->second) + " (" + path + " changed)";
  }
  for (const auto& [path, hash] : b.arg_hashes)
    if (!a.arg_hashes.count(path)) return differ("arg_hashes[" + path + "]", "(not a file then)", hash);
  if (a.env != b.env) {
    for (const auto& [k, v] : a.env) {
      auto it = b.env.find(k);
      if (it == b.env.end()) return differ("env." + k, v, "(unset)");
      if (it->second != v) return differ("env." + k, v, it->second);
    }
    for (const auto& [k, v] : b.env)
      if (!a.env.count(k)) return differ("env." + k, "(unset)", v);
  }
  return std::nullopt;
}

}  // namespace fr::snapshot
