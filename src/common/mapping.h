// Mapping: sole owner of an mmap'ed region; munmaps on destruction. Move-only.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <utility>

#include "common/result.h"

namespace fr {

class Mapping {
 public:
  Mapping() = default;
  Mapping(void* p, size_t n) : m_p(p), m_n(n) {}
  Mapping(Mapping&& o) noexcept : m_p(std::exchange(o.m_p, nullptr)), m_n(std::exchange(o.m_n, 0)) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      reset();
      m_p = std::exchange(o.m_p, nullptr);
      m_n = std::exchange(o.m_n, 0);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { reset(); }

  // Maps `len` bytes of `fd` from offset 0 with `prot` (PROT_READ, PROT_READ|PROT_WRITE), MAP_SHARED.
  static Result<Mapping> map_fd(int fd, size_t len, int prot, const char* what);

  void* data() const { return m_p; }
  std::byte* bytes() const { return static_cast<std::byte*>(m_p); }
  size_t size() const { return m_n; }
  void reset() {
    if (m_p && m_n) ::munmap(m_p, m_n);
    m_p = nullptr;
    m_n = 0;
  }

 private:
  void* m_p = nullptr;
  size_t m_n = 0;
};

}  // namespace fr
