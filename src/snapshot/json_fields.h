// Typed reads from a JSON object whose errors name the field ("manifest.identity.args[2]: expected a
// string"), for the manifest and spec codecs.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
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
  std::string path(const std::string& key) const { return m_where + "." + key; }

 private:
  Result<const nlohmann::json*> get(const std::string& key) const;
  const nlohmann::json& m_j;
  std::string m_where;
};

}  // namespace fr::snapshot
