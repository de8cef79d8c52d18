// The table of start paths (paths.h). A row per path; nothing else names them.
#include "supervisor/start/paths.h"

#include <vector>

#include "supervisor/snapshots/snapshots.h"
#include "supervisor/standby/standby.h"

namespace fr::supervisor {
namespace {

std::unique_ptr<Part> make_snapshots(const PartHosts& h) { return std::make_unique<Snapshots>(h.snapshots, h.restore, h.basics, h.stats); }
std::unique_ptr<Part> make_standby(const PartHosts& h) { return std::make_unique<Standby>(h.standby, h.basics, h.gpus); }

constexpr StartPathRow kRows[] = {
    {StartPath::kSnapshot, "snapshot", snapshot_start_path, make_snapshots},
    {StartPath::kWarm, "warm", warm_start_path, nullptr},
    {StartPath::kCold, "cold", cold_start_path, nullptr},
    {StartPath::kStandby, "standby", standby_start_path, make_standby},
};

}  // namespace

std::span<const StartPathRow> start_path_rows() { return kRows; }

std::span<const char* const> start_path_names() {
  static const std::vector<const char*> names = [] {
    std::vector<const char*> out;
    for (const auto& r : kRows) out.push_back(r.name);
    return out;
  }();
  return names;
}

const char* start_path_name(StartPath p) {
  for (const auto& r : kRows)
    if (r.path == p) return r.name;
  return "cold";
}

const StartPathImpl& start_path(StartPath id) {
  for (const auto& r : kRows)
    if (r.path == id) return r.decide();
  return cold_start_path();
}

}  // namespace fr::supervisor
