#include "fastrestart/result.h"

#include <cerrno>
#include <cstring>

namespace fr {

const char* errc_name(Errc c) {
  switch (c) {
    case Errc::kInvalidArgument: return "invalid_argument";
    case Errc::kNotFound: return "not_found";
    case Errc::kPermissionDenied: return "permission_denied";
    case Errc::kBusy: return "busy";
    case Errc::kProtocol: return "protocol";
    case Errc::kUnsupported: return "unsupported";
    case Errc::kTimeout: return "timeout";
    case Errc::kIo: return "io";
    case Errc::kCuda: return "cuda";
    case Errc::kCorrupt: return "corrupt";
    case Errc::kCancelled: return "cancelled";
    case Errc::kInternal: return "internal";
  }
  return "internal";
}

Error sys_error(const std::string& what, int err) {
  return Error{Errc::kIo, what + ": " + std::strerror(err)};
}
Error sys_error(const std::string& what) { return sys_error(what, errno); }

}  // namespace fr
