// A strict checker for the Prometheus text exposition format 0.0.4, used by the health tests so the
// /metrics grammar is verified even where promtool is not installed.
#pragma once

#include <string>
#include <vector>

namespace fr::health::testing {

// Every problem found, each as "line N: what"; empty when `text` is valid. Checks: HELP/TYPE syntax, one
// TYPE and HELP per family before its samples, contiguous families, metric and label name syntax, label
// value escaping, float values, no duplicate series, counters ending in _total, and per histogram series:
// le ascending, counts non-decreasing, a final +Inf bucket, _sum present, _count equal to the +Inf bucket.
std::vector<std::string> check_exposition(const std::string& text);

}  // namespace fr::health::testing
