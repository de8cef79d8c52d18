// How many restores pay back a snapshot's creation (`fastrestartctl snapshot inspect`), from measured
// times: each restore saves (normal start - restore); the creation cost create_s once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fr::snapshot {

struct BreakEven {
  std::optional<int64_t> restores;  // nullopt: unknown or never (see note)
  std::string note;                 // why there is no number
};

// `restore_s` and `normal_s` are mean measured times to ready (0: not measured yet).
BreakEven break_even(double create_s, double restore_s, double normal_s, const std::string& normal_path);

}  // namespace fr::snapshot
