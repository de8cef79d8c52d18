// fr_cuda_helper: the "other process" of the GPU tests (vmm_share_test.cc), always a fresh exec.
//
//   import-digest FD POOL_BYTES DATA_BYTES   map FD read-only, print the GPU digest (16 hex digits)
//   write-ro FD POOL_BYTES                    map read-only and write byte 0 from a kernel
//   write-rw FD POOL_BYTES VALUE              map writable and write byte 0 = VALUE from a kernel
//   export SOCK BYTES SEED                    allocate a pool through the CUDA backend, fill it with
//                                             cuda_test_util's random_bytes(BYTES, SEED), send
//                                             "<digest> <pool_bytes>" with the pool fd on SOCK, then exit
//                                             once SOCK delivers a byte (or closes)
// Exit codes: 0 done; 2 usage; 3 the write was refused (write-ro's expected outcome); 4 a CUDA or
// system error (printed).
#include <cstdio>
#include <cstring>
#include <string>

#include "common/digest.h"
#include "common/fd.h"
#include "common/unix_socket.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "cuda_test_util.h"
#include "daemon/backend.h"
#include "engine_loader/device.h"

namespace {

int fail(const fr::Error& e) {
  std::printf("error: %s\n", e.to_string().c_str());
  return 4;
}

uint64_t num(const char* s) { return std::stoull(s); }

int write_byte(int fd, uint64_t pool_bytes, bool read_only, uint8_t value) {
  auto dev = fr::loader::make_cuda_device(0);
  if (!dev.ok()) return fail(dev.error());
  fr::UniqueFd owned(fd);
  auto m = read_only ? (*dev)->map_read_only(std::move(owned), pool_bytes)
                     : (*dev)->map_writable(std::move(owned), pool_bytes);
  if (!m.ok()) return fail(m.error());
  auto cu = fr::cuda::Device::open_ordinal(0);  // same primary context as `dev`
  if (!cu.ok()) return fail(cu.error());
  auto k = (*cu)->kernels();
  if (!k.ok()) return fail(k.error());
  auto st = (*k)->write_byte(reinterpret_cast<CUdeviceptr>((*m)->base()), value, nullptr);
  if (!st.ok()) {
    std::printf("write refused: %s\n", st.error().to_string().c_str());
    std::fflush(stdout);
    // The context is now poisoned; leave without running destructors that would call into it.
    std::_Exit(3);
  }
  std::printf("write done\n");
  return 0;
}

int import_digest(int fd, uint64_t pool_bytes, uint64_t data_bytes) {
  auto dev = fr::loader::make_cuda_device(0);
  if (!dev.ok()) return fail(dev.error());
  auto m = (*dev)->map_read_only(fr::UniqueFd(fd), pool_bytes);
  if (!m.ok()) return fail(m.error());
  auto d = (*dev)->digest(**m, data_bytes);
  if (!d.ok()) return fail(d.error());
  std::printf("%s\n", fr::digest_hex(*d).c_str());
  return 0;
}

int export_pool(int sock, uint64_t bytes, uint64_t seed) {
  auto backend = fr::daemon::make_cuda_backend("0");
  if (!backend.ok()) return fail(backend.error());
  auto pool = (*backend)->allocate(bytes);
  if (!pool.ok()) return fail(pool.error());
  auto up = (*pool)->make_uploader();
  if (!up.ok()) return fail(up.error());
  auto data = fr::cuda_test::random_bytes(bytes, seed);
  for (uint64_t off = 0; off < bytes;) {
    size_t n = std::min<uint64_t>((*up)->max_chunk(), bytes - off);
    auto buf = (*up)->acquire(off, n);
    if (!buf.ok()) return fail(buf.error());
    std::memcpy(*buf, data.data() + off, n);
    if (auto st = (*up)->submit(off, n); !st.ok()) return fail(st.error());
    off += n;
  }
  if (auto st = (*up)->finish(); !st.ok()) return fail(st.error());
  auto d = (*pool)->digest(bytes);
  if (!d.ok()) return fail(d.error());
  auto fd = (*pool)->share_fd();
  if (!fd.ok()) return fail(fd.error());
  std::string msg = fr::digest_hex(*d) + " " + std::to_string((*pool)->size());
  msg.resize(64, ' ');
  if (auto st = fr::send_all(sock, msg.data(), msg.size(), {fd->get()}, fr::deadline_in(30)); !st.ok())
    return fail(st.error());
  char b;
  (void)::read(sock, &b, 1);
  return 0;  // everything (mapping, allocation, context) is released on the way out
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "import-digest" && argc == 5) return import_digest(static_cast<int>(num(argv[2])), num(argv[3]), num(argv[4]));
  if (mode == "write-ro" && argc == 4) return write_byte(static_cast<int>(num(argv[2])), num(argv[3]), true, 0xEE);
  if (mode == "write-rw" && argc == 5)
    return write_byte(static_cast<int>(num(argv[2])), num(argv[3]), false, static_cast<uint8_t>(num(argv[4])));
  if (mode == "export" && argc == 5) return export_pool(static_cast<int>(num(argv[2])), num(argv[3]), num(argv[4]));
  std::fprintf(stderr, "usage: fr_cuda_helper import-digest|write-ro|write-rw|export ...\n");
  return 2;
}
