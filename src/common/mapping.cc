#include "common/mapping.h"

#include <string>

namespace fr {

Result<Mapping> Mapping::map_fd(int fd, size_t len, int prot, const char* what) {
  if (len == 0) return Mapping{};
  void* p = ::mmap(nullptr, len, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return sys_error(std::string("mmap ") + what);
  return Mapping{p, len};
}

}  // namespace fr
