// fr_attach_bench: times fastrestart::attach as an engine sees it (H200 benchmark, docs/bench-notes.md).
//
// An engine has created its CUDA context long before it attaches, so this program opens the device
// first (timed separately as context_s) and then attaches `--repeat` times in zero_copy mode, once with
// --verify (the GPU digest of the mapped pool) and once in copy mode. Prints one JSON object.
//
// With --write-test it instead attaches zero_copy and writes one byte through the first tensor's
// read-only mapping from a kernel: exit 3 and "refused" when the write fails (the expected outcome),
// exit 4 if it succeeded. Run it as its own process; the CUDA context is unusable after a refused write.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cuda/device.h"
#include "cuda/kernels.h"
#include "engine_loader/device.h"
#include "fastrestart/engine_loader.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

json timings(const fastrestart::Timings& t) {
  return {{"connect_s", t.connect_s}, {"request_s", t.request_s}, {"map_s", t.map_s},
          {"copy_s", t.copy_s},       {"verify_s", t.verify_s},   {"total_s", t.total_s}};
}

int die(const std::string& what, const fr::Error& e) {
  std::cout << json{{"error", what + ": " + e.to_string()}}.dump() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fr_attach_bench: time attach/verify/copy of a fastrestart-weightd entry on cuda:0"};
  std::string socket_dir;
  std::vector<std::string> files, cfg;
  int repeat = 5;
  bool write_test = false;
  app.add_option("--socket-dir", socket_dir)->required();
  app.add_option("--config", cfg, "key=value (repeat)");
  app.add_option("--repeat", repeat);
  app.add_flag("--write-test", write_test);
  app.add_option("files", files)->required();
  CLI11_PARSE(app, argc, argv);

  fastrestart::Key key{files, {}};
  for (const auto& kv : cfg) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) return die("--config", fr::Error{fr::Errc::kInvalidArgument, kv});
    key.config[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  fastrestart::Options o;
  o.socket_dir = socket_dir;
  o.device = "cuda:0";
  o.fallback = false;

  auto t0 = Clock::now();
  auto dev = fr::cuda::Device::open_ordinal(0);  // retains the primary context, as torch would have
  if (!dev.ok()) return die("open cuda:0", dev.error());
  auto api = fr::loader::make_cuda_device(0);
  if (!api.ok()) return die("open cuda:0", api.error());
  json out{{"context_s", since(t0)}, {"gpu", (*dev)->name()}, {"gpu_uuid", (*dev)->uuid()}};

  if (write_test) {
    auto r = fastrestart::attach(key, o);
    if (!r.ok() || !r->hit) return die("attach", r.ok() ? fr::Error{fr::Errc::kNotFound, r->reason} : r.error());
    const auto& t = r->weights->tensors().front();
    auto k = (*dev)->kernels();
    if (!k.ok()) return die("kernels", k.error());
    auto st = (*k)->write_byte(reinterpret_cast<CUdeviceptr>(t.data), 0x7F, nullptr);
    out["write_through_read_only"] = st.ok() ? "succeeded" : "refused: " + st.error().to_string();
    std::cout << out.dump() << std::endl;
    std::_Exit(st.ok() ? 4 : 3);  // no teardown in a poisoned context
  }

  json runs = json::array();
  std::vector<double> totals, maps;
  for (int i = 0; i < repeat; ++i) {
    auto r = fastrestart::attach(key, o);
    if (!r.ok()) return die("attach", r.error());
    if (!r->hit) return die("attach", fr::Error{fr::Errc::kNotFound, "miss: " + r->reason});
    if (i == 0) {
      out["tensors"] = r->weights->tensors().size();
      out["pool_bytes"] = r->weights->pool_bytes();
      out["digest"] = r->weights->digest();
    }
    runs.push_back(timings(r->timings));
    totals.push_back(r->timings.total_s);
    maps.push_back(r->timings.map_s);
  }
  std::sort(totals.begin(), totals.end());
  std::sort(maps.begin(), maps.end());
  out["attach"] = runs;
  out["attach_first_total_s"] = runs[0]["total_s"];
  out["attach_median_total_s"] = totals[totals.size() / 2];
  out["attach_median_map_s"] = maps[maps.size() / 2];

  o.verify = true;
  for (int i = 0; i < 2; ++i) {  // the first run loads the digest module into the context
    auto r = fastrestart::attach(key, o);
    if (!r.ok()) return die("attach --verify", r.error());
    out[i == 0 ? "verify_first" : "verify"] = timings(r->timings);
  }
  o.verify = false;
  o.mode = fastrestart::Mode::kCopy;
  auto r = fastrestart::attach(key, o);
  if (!r.ok()) return die("attach copy", r.error());
  out["copy"] = timings(r->timings);
  std::cout << out.dump() << std::endl;
  return 0;
}
