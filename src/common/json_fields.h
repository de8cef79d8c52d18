// Reading optional fields of a JSON status object into typed members, and writing optional members, for
// the status codecs (status/status.h, protocol/daemon_status.h). An absent or null field keeps the member's
// default (an older or newer peer may leave fields out); a present field of the wrong type is an error that
// names it by its full path ("status.engine.pid: not an integer"). Nothing here throws.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace fr::json_fields {

using nlohmann::json;

inline Error bad(const std::string& where, const std::string& what) {
  return make_error(Errc::kInvalidArgument, where + ": " + what);
}

inline Status read(const json& v, const std::string& where, std::string& out) {
  if (!v.is_string()) return bad(where, "not a string");
  out = v.get<std::string>();
  return {};
}
inline Status read(const json& v, const std::string& where, bool& out) {
  if (!v.is_boolean()) return bad(where, "not a boolean");
  out = v.get<bool>();
  return {};
}
inline Status read(const json& v, const std::string& where, double& out) {
  if (!v.is_number()) return bad(where, "not a number");
  out = v.get<double>();
  return {};
}
inline Status read(const json& v, const std::string& where, int64_t& out) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
    return bad(where, "not an integer");
  out = v.get<int64_t>();
  return {};
}
inline Status read(const json& v, const std::string& where, uint64_t& out) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    return bad(where, "not an unsigned integer");
  out = v.get<uint64_t>();
  return {};
}
// Any JSON: the parts whose shape belongs to another component (an engine kind's report, the snapshot block).
inline Status read(const json& v, const std::string&, json& out) {
  out = v;
  return {};
}
template <class T>
Status read(const json& v, const std::string& where, std::optional<T>& out) {
  T t{};
  FR_TRY(read(v, where, t));
  out = std::move(t);
  return {};
}
template <class T>
Status read(const json& v, const std::string& where, std::vector<T>& out) {
  if (!v.is_array()) return bad(where, "not an array");
  out.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    T t{};
    FR_TRY(read(v[i], where + "[" + std::to_string(i) + "]", t));
    out.push_back(std::move(t));
  }
  return {};
}
template <class T>
Status read(const json& v, const std::string& where, std::map<std::string, T>& out) {
  if (!v.is_object()) return bad(where, "not an object");
  out.clear();
  for (const auto& [k, x] : v.items()) {
    T t{};
    FR_TRY(read(x, where + "." + k, t));
    out.emplace(k, std::move(t));
  }
  return {};
}

// j[key] into out when present and not null; `where` names j.
template <class T>
Status field(const json& j, const char* key, const std::string& where, T& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  return read(*it, where + "." + key, out);
}

// The same for a field a row has no meaning without: absent or null is "<where>.<key>: missing".
template <class T>
Status required(const json& j, const char* key, const std::string& where, T& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return bad(where + "." + key, "missing");
  return read(*it, where + "." + key, out);
}

inline Status object(const json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "not an object");
  return {};
}

// fields()' steps: one key/member pair, then the rest.
inline Status read_pairs(const json&, const std::string&) { return {}; }
template <class T, class... Rest>
Status read_pairs(const json& j, const std::string& where, const char* key, T& out, Rest&&... rest) {
  FR_TRY(field(j, key, where, out));
  return read_pairs(j, where, std::forward<Rest>(rest)...);
}

// The object j and its fields, given as key/member pairs: fields(j, w, "pid", s.pid, "name", s.name) is
// object(j, w) then field() for each pair in order, stopping at the first error. One list of keys per
// struct, read in the order the wire writes them.
template <class... Pairs>
Status fields(const json& j, const std::string& where, Pairs&&... pairs) {
  FR_TRY(object(j, where));
  return read_pairs(j, where, std::forward<Pairs>(pairs)...);
}

// The same for the object j[key], when present and not null (absent or null: nothing is read).
template <class... Pairs>
Status child_fields(const json& j, const char* key, const std::string& where, Pairs&&... pairs) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  return fields(*it, where + "." + key, std::forward<Pairs>(pairs)...);
}

// Writing: an optional as its value or null on the wire; and keys, given as key/optional pairs, each
// written only when its optional holds a value (absent on the wire otherwise).
template <class T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
inline void set_if(json&) {}
template <class T, class... Rest>
void set_if(json& j, const char* key, const std::optional<T>& v, const Rest&... rest) {
  if (v) j[key] = *v;
  set_if(j, rest...);
}

}  // namespace fr::json_fields
