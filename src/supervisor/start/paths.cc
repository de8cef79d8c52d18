// The table of start paths (paths.h): paths.def's lines, expanded here into the declarations of each
// path's functions and the rows. Nothing else names the paths.
#include "supervisor/start/paths.h"

#include <vector>

namespace fr::supervisor {

#define FR_START_PATH(name, decide, make) \
  const StartPathImpl& decide();          \
  std::unique_ptr<Part> make(const PartHosts& hosts);
#include "supervisor/start/paths.def"
#undef FR_START_PATH

namespace {

constexpr StartPathRow kRows[] = {
#define FR_START_PATH(name, decide, make) {StartPath(name), decide, make},
#include "supervisor/start/paths.def"
#undef FR_START_PATH
};

constexpr bool in_table(StartPath p) {
  for (const auto& r : kRows)
    if (r.path == p) return true;
  return false;
}
static_assert(in_table(StartPath::kSnapshot) && in_table(StartPath::kWarm) && in_table(StartPath::kCold) &&
                  in_table(StartPath::kStandby),
              "a path the Supervisor names (config.h's StartPath constants) is not in paths.def");

}  // namespace

std::unique_ptr<Part> no_part(const PartHosts&) { return nullptr; }

std::span<const StartPathRow> start_path_rows() { return kRows; }

std::span<const char* const> start_path_names() {
  static const std::vector<const char*> names = [] {
    std::vector<const char*> out;
    for (const auto& r : kRows) out.push_back(r.path.name());
    return out;
  }();
  return names;
}

std::optional<StartPath> start_path_named(std::string_view name) {
  for (const auto& r : kRows)
    if (name == r.path.name()) return r.path;
  return std::nullopt;
}

const StartPathImpl& start_path(StartPath id) {
  for (const auto& r : kRows)
    if (r.path == id) return r.decide();
  return cold_start_path();
}

}  // namespace fr::supervisor
