#include "daemon/preload.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "common/digest.h"
#include "common/fd.h"
#include "common/io.h"

namespace fr::daemon {

Result<PreloadPlan> plan_preload(const std::vector<std::string>& files, const std::vector<std::string>& select,
                                 std::optional<DType> dtype) {
  if (files.empty()) return make_error(Errc::kInvalidArgument, "preload: no checkpoint files given");
  PreloadPlan plan;
  std::set<std::string> wanted(select.begin(), select.end());
  std::set<std::string> seen;
  std::vector<proto::TensorSpec> specs;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    FR_ASSIGN(FileIdentity id, identify_file(files[fi]));
    FR_ASSIGN(SafetensorsHeader h, read_safetensors_header(id.path));
    for (const auto& t : h.tensors) {
      if (!wanted.empty() && !wanted.count(t.name)) continue;
      if (!seen.insert(t.name).second)
        return make_error(Errc::kInvalidArgument, h.path + ": tensor '" + t.name + "' also appears in an earlier file");
      if (dtype && t.dtype != *dtype)
        return make_error(Errc::kInvalidArgument, h.path + ": tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                                                      ", not the requested " + dtype_name(*dtype));
      specs.push_back(proto::TensorSpec{t.name, t.dtype, t.shape});
      plan.sources.emplace_back(fi, t.begin);
    }
    plan.identities.push_back(std::move(id));
    plan.headers.push_back(std::move(h));
  }
  for (const auto& w : wanted)
    if (!seen.count(w)) return make_error(Errc::kNotFound, "preload: tensor '" + w + "' is in none of the files");
  if (specs.size() > proto::kMaxTensors) return make_error(Errc::kInvalidArgument, "preload: too many tensors");
  plan.data_bytes = proto::layout_tensors(specs, &plan.slots);
  std::sort(plan.identities.begin(), plan.identities.end(),
            [](const FileIdentity& a, const FileIdentity& b) { return a.path < b.path; });
  return plan;
}

namespace {

constexpr uint64_t kTaskBytes = 64ull << 20;  // a multiple of kDigestChunkBytes

struct Task {
  uint64_t begin, end;
};

// Fills buf (the pool bytes [t.begin, t.end)) from the files, zeroing the alignment gaps.
Status fill_task(const PreloadPlan& plan, const std::vector<UniqueFd>& fds, const Task& t, std::byte* buf) {
  // First slot that ends after t.begin.
  auto it = std::upper_bound(plan.slots.begin(), plan.slots.end(), t.begin,
                             [](uint64_t off, const proto::TensorSlot& s) { return off < s.offset + s.nbytes; });
  uint64_t pos = t.begin;
  for (; it != plan.slots.end() && it->offset < t.end; ++it) {
    uint64_t a = std::max(it->offset, t.begin), b = std::min(it->offset + it->nbytes, t.end);
    if (a > pos) std::memset(buf + (pos - t.begin), 0, a - pos);
    if (b > a) {
      const auto& [fi, foff] = plan.sources[static_cast<size_t>(it - plan.slots.begin())];
      FR_TRY(pread_full(fds[fi].get(), buf + (a - t.begin), b - a, foff + (a - it->offset), plan.headers[fi].path));
    }
    pos = std::max(pos, b);
  }
  if (pos < t.end) std::memset(buf + (pos - t.begin), 0, t.end - pos);
  return {};
}

// True when every page of [off, off+n) of `fd` is in the page cache (mincore on a throwaway mapping).
bool resident(int fd, uint64_t off, uint64_t n) {
  if (n == 0) return true;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t a = off / page * page;
  const size_t len = static_cast<size_t>(off + n - a);
  void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(a));
  if (p == MAP_FAILED) return false;
  std::vector<unsigned char> v((len + page - 1) / page);
  bool all = ::mincore(p, len, v.data()) == 0;
  for (size_t i = 0; all && i < v.size(); ++i) all = v[i] & 1;
  ::munmap(p, len);
  return all;
}

// The file segments of task t: (slot index, pool begin, pool end).
template <typename Fn>
void for_each_segment(const PreloadPlan& plan, const Task& t, Fn&& fn) {
  auto it = std::upper_bound(plan.slots.begin(), plan.slots.end(), t.begin,
                             [](uint64_t off, const proto::TensorSlot& s) { return off < s.offset + s.nbytes; });
  for (; it != plan.slots.end() && it->offset < t.end; ++it) {
    uint64_t a = std::max(it->offset, t.begin), b = std::min(it->offset + it->nbytes, t.end);
    if (b > a) fn(static_cast<size_t>(it - plan.slots.begin()), a, b);
  }
}

}  // namespace

Result<uint64_t> run_preload(const PreloadPlan& plan, Pool& pool, Progress& progress,
                             const std::atomic<bool>& cancel, int threads, const TestReadHold& test_hold) {
  std::vector<UniqueFd> fds;
  for (const auto& h : plan.headers) {
    UniqueFd fd(::open(h.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return sys_error("open " + h.path);
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    fds.push_back(std::move(fd));
  }
  std::vector<Task> tasks;
  for (uint64_t off = 0; off < plan.data_bytes; off += kTaskBytes)
    tasks.push_back({off, std::min(off + kTaskBytes, plan.data_bytes)});

  const bool device_digest = pool.digest_on_device();
  std::atomic<bool> direct_ok{device_digest};  // cleared once the backend says it cannot upload from files
  DigestBuilder digest(device_digest ? 0 : plan.data_bytes);
  std::atomic<size_t> next{0};
  std::mutex err_mu;
  std::optional<Error> first_error;
  auto fail = [&](Error e) {
    std::lock_guard lk(err_mu);
    if (!first_error) first_error = std::move(e);
  };
  auto failed = [&] {
    std::lock_guard lk(err_mu);
    return first_error.has_value();
  };

  auto reader = [&] {
    auto up = pool.make_uploader();
    if (!up.ok()) return fail(up.error());
    Uploader& u = **up;
    for (size_t i; (i = next.fetch_add(1)) < tasks.size();) {
      if (cancel) return fail(make_error(Errc::kCancelled, "preload cancelled"));
      if (failed()) return;
      const Task& t = tasks[i];
      if (test_hold.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(test_hold.delay_ms));
      while (!test_hold.gate.empty() && ::access(test_hold.gate.c_str(), F_OK) != 0 && !cancel)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (cancel) return fail(make_error(Errc::kCancelled, "preload cancelled"));
      const size_t n = t.end - t.begin;
      // Page-cached data goes to the GPU without a CPU copy: one pass over host memory (the DMA) instead of
      // three (pread's copy, the hash, the DMA). Data still on disk is read with pread as below.
      if (direct_ok) {
        bool all_resident = true;
        for_each_segment(plan, t, [&](size_t si, uint64_t a, uint64_t) {
          const auto& [fi, foff] = plan.sources[si];
          all_resident = all_resident && resident(fds[fi].get(), foff + (a - plan.slots[si].offset),
                                                  std::min<uint64_t>(t.end, plan.slots[si].offset + plan.slots[si].nbytes) - a);
        });
        if (all_resident) {
          bool done = true;
          Status st;
          for_each_segment(plan, t, [&](size_t si, uint64_t a, uint64_t b) {
            if (!done || !st.ok()) return;
            const auto& [fi, foff] = plan.sources[si];
            auto r = u.upload_file_range(fds[fi].get(), foff + (a - plan.slots[si].offset), a, b - a);
            if (!r.ok()) st = r.error();
            else if (!*r) done = false;
          });
          if (!st.ok()) return fail(st.error());
          if (done) {
            progress.done_bytes += n;
            continue;
          }
          direct_ok = false;  // not supported here: stage this task and the rest
        }
      }
      auto buf = u.acquire(t.begin, n);
      if (!buf.ok()) return fail(buf.error());
      if (auto s = fill_task(plan, fds, t, *buf); !s.ok()) return fail(s.error());
      for (uint64_t c = 0; !device_digest && c < n; c += kDigestChunkBytes)
        digest.set((t.begin + c) / kDigestChunkBytes, hash_chunk(*buf + c, std::min<uint64_t>(kDigestChunkBytes, n - c)));
      if (auto s = u.submit(t.begin, n); !s.ok()) return fail(s.error());
      progress.done_bytes += n;
    }
    if (auto s = u.finish(); !s.ok()) fail(s.error());
  };
  const int k = std::max(1, std::min<int>(threads, static_cast<int>(tasks.size())));
  std::vector<std::thread> pool_threads;
  for (int i = 0; i < k; ++i) pool_threads.emplace_back(reader);
  for (auto& th : pool_threads) th.join();
  if (first_error) return *first_error;

  for (const auto& id : plan.identities) {
    FR_ASSIGN(FileIdentity now, identify_file(id.path));
    if (!(now == id)) return make_error(Errc::kCorrupt, id.path + ": the file changed while it was being loaded");
  }
  if (device_digest) return pool.digest(plan.data_bytes);
  return digest.finish();
}

}  // namespace fr::daemon
