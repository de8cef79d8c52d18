// check_host(): what a start would hit on this machine, found before anything starts (config.h).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/private_dir.h"
#include "common/bounded_json.h"
#include "common/safetensors.h"
#include "supervisor/child.h"
#include "supervisor/config.h"
#include "supervisor/control.h"

namespace fr::supervisor {
namespace {

namespace fs = std::filesystem;

#ifndef FASTRESTART_VERSION
#define FASTRESTART_VERSION "unknown"
#endif

// "k=v, k=v" of a key's config fields.
std::string fields(const std::map<std::string, std::string>& m) {
  std::string out;
  for (const auto& [k, v] : m) out += (out.empty() ? "" : ", ") + k + " = \"" + v + "\"";
  return "{" + out + "}";
}

class HostCheck {
 public:
  explicit HostCheck(Config& c) : m_c(c) {}

  Error fail(std::initializer_list<const char*> keys, const std::string& key, const std::string& what) const {
    return config_error_at(m_c, keys, key, what);
  }

  // The control socket's directory must pass ensure_private_dir() at start: ours, not a symlink, no more open
  // than 0700 (0750 with control.group); absent, it is created (so its parent must exist).
  Status control_socket() const {
    const bool configured = !m_c.control.socket.empty();
    const std::string sock = configured ? m_c.control.socket : default_control_socket(m_c.name);
    const std::string dir = fs::path(sock).parent_path().string();
    auto bad = [&](const std::string& why) {
      return fail({"control.socket", "control"}, "control.socket",
                  (configured ? "" : "the default " + sock + ": ") + "its directory " + dir + " " + why);
    };
    std::optional<gid_t> gid;
    if (!m_c.control.group.empty()) {
      auto g = resolve_group(m_c.control.group);
      if (!g.ok()) return fail({"control.group", "control"}, "control.group", g.error().message);
      gid = *g;
    }
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
      if (errno != ENOENT) return bad(std::string("cannot be read: ") + std::strerror(errno));
      const std::string parent = fs::path(dir).parent_path().string();
      if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return bad("does not exist and cannot be created: " + parent + " is not a directory");
      return {};
    }
    const mode_t want = gid ? 0750 : 0700;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    if (S_ISLNK(st.st_mode)) return bad("is a symlink; fastrestartd refuses it");
    if (!S_ISDIR(st.st_mode)) return bad("is not a directory");
    if (st.st_uid != ::geteuid())
      return bad("is owned by uid " + std::to_string(st.st_uid) + ", not by fastrestartd's (uid " +
                 std::to_string(::geteuid()) + "): put the socket in a directory of its own");
    if ((st.st_mode & 07777) & ~want)
      return bad(std::string("has mode ") + mode + ", more open than " + (gid ? "0750" : "0700") +
                 (st.st_mode & S_IWOTH ? " (world-writable: anyone could replace the socket)" : "") +
                 ": put the socket in a private directory of its own, e.g. /run/fastrestart/" + m_c.name + ".ctl");
    if (gid && st.st_gid != *gid)
      return bad("belongs to group " + std::to_string(st.st_gid) + ", not control.group's " + std::to_string(*gid));
    return {};
  }

  // The files the daemons preload (daemon = "native").
  Status checkpoints() const {
    const auto& w = m_c.weights;
    if (w.mode == WeightsMode::kOff || w.daemon != DaemonKind::kNative) return {};
    for (const auto& p : w.checkpoint) {
      std::error_code ec;
      const auto st = fs::status(p, ec);
      if (ec || !fs::exists(st))
        return fail({"weights.checkpoint", "weights"}, "weights.checkpoint",
                    p + " does not exist" + (ec && ec != std::errc::no_such_file_or_directory ? " (" + ec.message() + ")" : ""));
      if (fs::is_directory(st)) {
        bool any = false;
        for (const auto& e : fs::directory_iterator(p, ec))
          if (e.path().extension() == ".safetensors") any = true;
        if (!any)
          return fail({"weights.checkpoint", "weights"}, "weights.checkpoint",
                      "the directory " + p + " holds no *.safetensors file");
      } else if (::access(p.c_str(), R_OK) != 0) {
        return fail({"weights.checkpoint", "weights"}, "weights.checkpoint", p + ": " + std::strerror(errno));
      }
    }
    return {};
  }

  // The tiny engine asks with a key it derives from its checkpoint (src/tinyengine/loader.cc, key_config):
  // a weights.key that differs is a preload no start ever attaches (the daemon would hold a second copy
  // once the engine publishes its own).
  Status weights_key() const {
    const auto& w = m_c.weights;
    if (w.mode == WeightsMode::kOff || w.daemon != DaemonKind::kNative || w.key.empty() || w.checkpoint.empty()) return {};
    if (fs::path(m_c.engine.command[0]).filename() != "fastrestart-tinyengine") return {};
    std::string first;
    for (const auto& p : w.checkpoint) {
      std::error_code ec;
      if (fs::is_directory(p, ec)) {
        std::vector<std::string> files;
        for (const auto& e : fs::directory_iterator(p, ec))
          if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
        std::sort(files.begin(), files.end());
        if (!files.empty()) first = files[0];
      } else {
        first = p;
      }
      if (!first.empty()) break;
    }
    auto h = read_safetensors_header(first);
    if (!h.ok()) return fail({"weights.checkpoint", "weights"}, "weights.checkpoint", h.error().message);
    auto it = h->metadata.find("tinyengine.config");
    if (it == h->metadata.end())
      return fail({"weights.checkpoint", "weights"}, "weights.checkpoint",
                  first + " is not a tiny-engine checkpoint (no \"tinyengine.config\" in its metadata)");
    const auto cfg = parse_json_or_discarded(it->second, kSmallJsonLimits);
    const std::string dtype = cfg.is_object() ? cfg.value("dtype", "") : "";
    const std::map<std::string, std::string> want = {{"arch", "tinyengine"},
                                                     {"dtype", dtype},
                                                     {"engine", std::string("fastrestart-tinyengine ") + FASTRESTART_VERSION},
                                                     {"tp_size", "1"},
                                                     {"tp_rank", "0"}};
    if (w.key == want) return {};
    return fail({"weights.key", "weights"}, "weights.key",
                fields(w.key) + " is not the key fastrestart-tinyengine asks with for this checkpoint, " + fields(want) +
                    ": no start would attach the preload; set weights.key to exactly that (or leave it out: the "
                    "engine's first start then loads from disk and publishes)");
  }

  // engine.command[0] as spawn_child() will exec it (find_program: $PATH for a bare name).
  Status engine_program() {
    std::string& prog = m_c.engine.command[0];
    if (prog.find('/') != std::string::npos) {
      const fs::path p = fs::path(prog).is_relative() && !m_c.engine.working_dir.empty()
                             ? fs::path(m_c.engine.working_dir) / prog
                             : fs::path(prog);
      if (::access(p.c_str(), X_OK) != 0)
        return fail({"engine.command", "engine"}, "engine.command",
                    in_quotes_(prog) + " cannot be executed: " + std::strerror(errno));
      return {};
    }
    if (find_program(prog) != prog) return {};
    // fastrestart's own programs (the tiny engine) are also found beside fastrestartd, as weightd is.
    if (prog.starts_with("fastrestart-")) {
      const std::string found = find_companion(prog, prog.substr(std::string("fastrestart-").size()));
      if (found != prog) {
        prog = found;
        return {};
      }
    }
    const char* path = std::getenv("PATH");
    return fail({"engine.command", "engine"}, "engine.command",
                in_quotes_(prog) + " is not on $PATH (" + (path ? path : "unset") +
                    (prog.starts_with("fastrestart-") ? ") nor beside fastrestartd" : ")") +
                    ": give its absolute path, or add its directory to fastrestartd's PATH (systemd: Environment=PATH=...)");
  }

  // engine.listen = "front": the front's program (front.path, else beside fastrestartd, else $PATH).
  Status front_program() {
    if (m_c.engine.listen != EngineListen::kFront) return {};
    if (!m_c.front.path.empty()) {
      if (::access(m_c.front.path.c_str(), X_OK) != 0)
        return fail({"front.path", "front"}, "front.path", in_quotes_(m_c.front.path) + " cannot be executed: " + std::strerror(errno));
      return {};
    }
    const std::string found = find_companion("fastrestart-front", "front");
    if (found.find('/') != std::string::npos && ::access(found.c_str(), X_OK) == 0) return {};
    const char* path = std::getenv("PATH");
    return fail({"engine.listen", "engine"}, "engine.listen",
                std::string("\"front\" needs fastrestart-front, which is neither beside fastrestartd nor on $PATH (") +
                    (path ? path : "unset") + "): install it (the fastrestart package has it) or set front.path");
  }

 private:
  static std::string in_quotes_(const std::string& s) { return "\"" + s + "\""; }
  Config& m_c;
};

}  // namespace

Error config_error_at(const Config& c, std::initializer_list<const char*> keys, const std::string& key,
                      const std::string& what) {
  int64_t line = 1;
  for (const char* k : keys)
    if (auto it = c.key_lines.find(k); it != c.key_lines.end()) {
      line = it->second;
      break;
    }
  return make_error(Errc::kInvalidArgument, c.path + ":" + std::to_string(line) + ": " + key + ": " + what);
}

Status check_host(Config& c) {
  HostCheck h(c);
  FR_TRY(h.control_socket());
  FR_TRY(h.checkpoints());
  FR_TRY(h.engine_program());
  FR_TRY(h.front_program());
  FR_TRY(h.weights_key());
  return {};
}

}  // namespace fr::supervisor
