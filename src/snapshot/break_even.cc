#include "snapshot/break_even.h"

#include <cmath>

namespace fr::snapshot {

BreakEven break_even(double create_s, double restore_s, double normal_s, const std::string& normal_path) {
  if (restore_s <= 0 || normal_s <= 0) return {std::nullopt, "needs one measured snapshot restore and one warm or cold start"};
  if (normal_s <= restore_s) return {std::nullopt, "a snapshot restore is not faster than a " + normal_path + " start here"};
  return {static_cast<int64_t>(std::ceil(create_s / (normal_s - restore_s))), ""};
}

}  // namespace fr::snapshot
