#include "protocol/arena.h"

#include "protocol/messages.h"

namespace fr::proto {

bool valid_arena_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxArenaName) return false;
  for (char ch : s) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                    ch == '.' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

Status check_arena_name(std::string_view name, const std::string& where) {
  if (valid_arena_name(name)) return {};
  return make_error(Errc::kInvalidArgument,
                    where + " '" + std::string(name.substr(0, 80)) + "': not 1-64 of A-Z a-z 0-9 _ . -");
}

Status check_arena_wait(double wait_s, const std::string& where) {
  if (wait_s >= 0 && wait_s <= kMaxWaitS) return {};
  return make_error(Errc::kInvalidArgument, where + ": outside 0..86400");
}

namespace {

// The `name` of an arena request (`op` names the request in the error).
Result<std::string> request_name(const json& req, const std::string& op) {
  auto name = req.find("name");
  if (name == req.end()) return make_error(Errc::kInvalidArgument, op + ".name: missing");
  if (!name->is_string() || !valid_arena_name(name->get_ref<const std::string&>()))
    return make_error(Errc::kInvalidArgument, op + ".name: not 1-64 of A-Z a-z 0-9 _ . -");
  return name->get<std::string>();
}

}  // namespace

json to_json(const ArenaLeaseRequest& r) {
  return json{{"op", "arena_lease"}, {"name", r.name}, {"bytes", r.bytes}, {"wait_s", r.wait_s}};
}

Result<ArenaLeaseRequest> arena_lease_from_json(const json& req) {
  ArenaLeaseRequest r;
  FR_ASSIGN(r.name, request_name(req, "arena_lease"));
  auto bytes = req.find("bytes");
  if (bytes == req.end()) return make_error(Errc::kInvalidArgument, "arena_lease.bytes: missing");
  if (!bytes->is_number_unsigned() || bytes->get<uint64_t>() == 0 || bytes->get<uint64_t>() > kMaxArenaBytes)
    return make_error(Errc::kInvalidArgument, "arena_lease.bytes: not an integer in 1.." + std::to_string(kMaxArenaBytes));
  r.bytes = bytes->get<uint64_t>();
  FR_ASSIGN(r.wait_s, get_double(req, "wait_s", "arena_lease", kDefaultArenaWaitS));
  FR_TRY(check_arena_wait(r.wait_s, "arena_lease.wait_s"));
  return r;
}

json to_json(const ArenaLeaseReply& r) {
  json j{{"name", r.name},         {"bytes", r.bytes},     {"pool_bytes", r.pool_bytes}, {"backend", r.backend},
         {"created", r.created},   {"resized", r.resized}, {"zeroed", r.zeroed},         {"waited_s", r.waited_s},
         {"leases", r.leases},     {"generation", r.generation}};
  if (r.previous_bytes) j["previous_bytes"] = *r.previous_bytes;
  j["previous_holder_pid"] = r.previous_holder_pid ? json(*r.previous_holder_pid) : json(nullptr);
  return j;
}

Result<ArenaLeaseReply> arena_lease_reply_from_json(const json& j) {
  const std::string w = "arena_lease reply";
  ArenaLeaseReply r;
  FR_ASSIGN(r.name, get_string(j, "name", w, kMaxArenaName));
  FR_ASSIGN(r.bytes, get_u64(j, "bytes", w));
  FR_ASSIGN(r.pool_bytes, get_u64(j, "pool_bytes", w));
  if (r.pool_bytes < r.bytes) return make_error(Errc::kProtocol, w + ".pool_bytes: smaller than bytes");
  if (j.contains("backend")) {
    FR_ASSIGN(r.backend, get_string(j, "backend", w, 64));
  }
  auto flag = [&](const char* f, bool* out) -> Status {
    auto it = j.find(f);
    if (it == j.end() || !it->is_boolean()) return make_error(Errc::kProtocol, w + "." + f + ": missing or not a boolean");
    *out = it->get<bool>();
    return {};
  };
  FR_TRY(flag("created", &r.created));
  FR_TRY(flag("resized", &r.resized));
  FR_ASSIGN(r.zeroed, get_bool(j, "zeroed", w, false));
  if (auto it = j.find("previous_bytes"); it != j.end() && !it->is_null()) {
    FR_ASSIGN(r.previous_bytes, get_u64(j, "previous_bytes", w));
  }
  auto prev = j.find("previous_holder_pid");
  if (prev == j.end()) return make_error(Errc::kProtocol, w + ".previous_holder_pid: missing");
  if (!prev->is_null()) {
    if (!prev->is_number_integer()) return make_error(Errc::kProtocol, w + ".previous_holder_pid: not an integer or null");
    r.previous_holder_pid = prev->get<int64_t>();
  }
  auto waited = j.find("waited_s");
  if (waited == j.end() || !waited->is_number()) return make_error(Errc::kProtocol, w + ".waited_s: missing or not a number");
  r.waited_s = waited->get<double>();
  FR_ASSIGN(r.leases, get_u64(j, "leases", w));
  FR_ASSIGN(r.generation, get_u64(j, "generation", w));
  return r;
}

json to_json(const ArenaReleaseRequest& r) { return json{{"op", "arena_release"}, {"name", r.name}}; }

Result<ArenaReleaseRequest> arena_release_from_json(const json& j) {
  ArenaReleaseRequest r;
  FR_ASSIGN(r.name, request_name(j, "arena_release"));
  return r;
}

json to_json(const ArenaReleaseReply& r) { return json{{"name", r.name}, {"freed_bytes", r.freed_bytes}}; }

}  // namespace fr::proto
