#include "protocol/frame_reader.h"

#include <algorithm>

#include "protocol/frame.h"

namespace fr::proto {

std::span<char> FrameReader::next() {
  if (m_failed) return {};
  if (m_got < 4) return {reinterpret_cast<char*>(m_hdr) + m_got, 4 - m_got};
  const size_t have = m_got - 4;
  if (have == m_len) return {};
  if (have == m_payload.size()) {
    // Grow by doubling, never past the claimed length: what a peer must send to make us hold memory.
    const size_t step = std::max(kReadChunkBytes, m_payload.size());
    m_payload.resize(std::min<size_t>(m_len, m_payload.size() + step));
  }
  return {m_payload.data() + have, m_payload.size() - have};
}

Result<bool> FrameReader::commit(size_t n) {
  if (m_failed) return make_error(Errc::kProtocol, "frame reader used after a framing error");
  m_got += n;
  if (m_got < 4) return false;
  if (m_len == 0) {
    const uint32_t len = (uint32_t{m_hdr[0]} << 24) | (uint32_t{m_hdr[1]} << 16) | (uint32_t{m_hdr[2]} << 8) | m_hdr[3];
    if (len == 0 || len > kMaxFrameBytes) {
      m_failed = true;
      return make_error(Errc::kProtocol, "frame length " + std::to_string(len) + " outside 1.." + std::to_string(kMaxFrameBytes));
    }
    m_len = len;
  }
  return m_got - 4 == m_len;
}

std::string FrameReader::take() {
  std::string out = std::move(m_payload);
  out.resize(m_got >= 4 ? m_got - 4 : 0);
  *this = FrameReader{};
  return out;
}

}  // namespace fr::proto
