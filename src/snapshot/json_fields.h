// Typed reads from a JSON object whose errors name the field ("manifest.identity.args[2]: expected a
// string"), for the manifest and spec codecs.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "fastrestart/result.h"

namespace fr::snapshot {

class Fields {
 public:
  Fields(const nlohmann::json& j, std::string where) : m_j(j), m_where(std::move(where)) {}
  Status object() const;
  Error fail(const std::string& key, const std::string& what) const;
  Result<std::string> str(const std::string& key) const;
  Result<int64_t> integer(const std::string& key) const;
  Result<uint64_t> unsigned_int(const std::string& key) const;
  Result<double> number(const std::string& key) const;
  Result<bool> boolean(const std::string& key) const;
  Result<std::vector<std::string>> strings(const std::string& key) const;
  Result<std::map<std::string, std::string>> string_map(const std::string& key) const;
  Result<const nlohmann::json*> child(const std::string& key, nlohmann::json::value_t type) const;
  // The field at `key`, of any type ("missing" when absent; "expected an object" when this is none).
  Result<const nlohmann::json*> get(const std::string& key) const;
  std::string path(const std::string& key) const { return m_where + "." + key; }

  // Several required fields at once, as key/member pairs, each read by its member's type (the readers
  // above), in order, stopping at the first error: read("path", id.path, "dev", id.dev).
  template <class T, class... Rest>
  Status read(const std::string& key, T& out, Rest&&... rest) const {
    FR_ASSIGN(out, typed(key, &out));
    if constexpr (sizeof...(Rest) > 0) return read(std::forward<Rest>(rest)...);
    return {};
  }

  // Each element of the array at `key`, which must be an object: visit(element's Fields) for each, in
  // order, stopping at the first error. Errors name "<key>[i]".
  template <class Visit>
  Status each_object(const std::string& key, Visit visit) const {
    FR_ASSIGN(const nlohmann::json* list, child(key, nlohmann::json::value_t::array));
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string at = key + "[" + std::to_string(i) + "]";
      if (!(*list)[i].is_object()) return fail(at, "expected an object");
      FR_TRY(visit(Fields((*list)[i], path(at))));
    }
    return {};
  }

 private:
  Result<std::string> typed(const std::string& key, std::string*) const { return str(key); }
  Result<int64_t> typed(const std::string& key, int64_t*) const { return integer(key); }
  Result<uint64_t> typed(const std::string& key, uint64_t*) const { return unsigned_int(key); }
  Result<double> typed(const std::string& key, double*) const { return number(key); }
  Result<bool> typed(const std::string& key, bool*) const { return boolean(key); }
  Result<std::vector<std::string>> typed(const std::string& key, std::vector<std::string>*) const { return strings(key); }
  Result<std::map<std::string, std::string>> typed(const std::string& key, std::map<std::string, std::string>*) const {
    return string_map(key);
  }
  const nlohmann::json& m_j;
  std::string m_where;
};

}  // namespace fr::snapshot
