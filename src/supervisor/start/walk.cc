#include "supervisor/start/walk.h"

#include <algorithm>
#include <string>

namespace fr::supervisor {

WalkBegin walk_begin(const std::vector<StartPath>& order, std::optional<StartPath> requested) {
  WalkBegin b;
  if (!requested) return b;
  auto it = std::find(order.begin(), order.end(), *requested);
  if (it == order.end()) return b;
  b.first = static_cast<size_t>(it - order.begin());
  b.skipped.assign(order.begin(), it);
  return b;
}

StartRefusal requested_refusal(StartPath requested) {
  return {"requested", std::string("this start was requested on the path ") + start_path_name(requested)};
}

}  // namespace fr::supervisor
