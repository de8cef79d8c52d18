#include "snapshot/json_fields.h"

namespace fr::snapshot {

using nlohmann::json;

Status Fields::object() const {
  if (!m_j.is_object()) return make_error(Errc::kInvalidArgument, m_where + ": expected an object");
  return {};
}

Error Fields::fail(const std::string& key, const std::string& what) const {
  return make_error(Errc::kInvalidArgument, path(key) + ": " + what);
}

Result<const json*> Fields::get(const std::string& key) const {
  FR_TRY(object());
  auto it = m_j.find(key);
  if (it == m_j.end()) return fail(key, "missing");
  return &*it;
}

// The field at `key` as a T, when `is` holds for it; else "expected <what>".
template <class T>
static Result<T> scalar(const Fields& f, const std::string& key, bool (*is)(const json&), const char* what) {
  FR_ASSIGN(const json* v, f.get(key));
  if (!is(*v)) return f.fail(key, std::string("expected ") + what);
  return v->get<T>();
}

Result<std::string> Fields::str(const std::string& key) const {
  return scalar<std::string>(*this, key, [](const json& v) { return v.is_string(); }, "a string");
}

Result<int64_t> Fields::integer(const std::string& key) const {
  return scalar<int64_t>(*this, key, [](const json& v) { return v.is_number_integer(); }, "an integer");
}

Result<uint64_t> Fields::unsigned_int(const std::string& key) const {
  return scalar<uint64_t>(*this, key, [](const json& v) {
    return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  }, "an unsigned integer");
}

Result<double> Fields::number(const std::string& key) const {
  return scalar<double>(*this, key, [](const json& v) { return v.is_number(); }, "a number");
}

Result<bool> Fields::boolean(const std::string& key) const {
  return scalar<bool>(*this, key, [](const json& v) { return v.is_boolean(); }, "a boolean");
}

Result<std::vector<std::string>> Fields::strings(const std::string& key) const {
  FR_ASSIGN(const json* v, get(key));
  if (!v->is_array()) return fail(key, "expected an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) return fail(key + "[" + std::to_string(i) + "]", "expected a string");
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

Result<std::map<std::string, std::string>> Fields::string_map(const std::string& key) const {
  FR_ASSIGN(const json* v, get(key));
  if (!v->is_object()) return fail(key, "expected an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [k, x] : v->items()) {
    if (!x.is_string()) return fail(key + "." + k, "expected a string");
    out[k] = x.get<std::string>();
  }
  return out;
}

Result<const json*> Fields::child(const std::string& key, json::value_t type) const {
  FR_ASSIGN(const json* v, get(key));
  if (v->type() != type) return fail(key, type == json::value_t::array ? "expected an array" : "expected an object");
  return v;
}

}  // namespace fr::snapshot
