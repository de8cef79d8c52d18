#include "common/host_device.h"

namespace fr {

Result<std::string> host_device_uuid(std::string_view name) {
  if (name.empty()) return std::string("host");
  auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  };
  bool valid = name.size() <= 32 && name != "." && name != "..";
  for (char c : name) valid = valid && ok(c);
  if (!valid)
    return make_error(Errc::kInvalidArgument, "host device name '" + std::string(name).substr(0, 40) +
                                                  "': expected 1-32 characters of A-Z a-z 0-9 _ . -");
  return "host-" + std::string(name);
}

}  // namespace fr
