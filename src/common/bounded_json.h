// JSON from a peer, parsed only after a linear scan bounded its nesting and its number of values
// (docs/reliability.md, "Limits on what a peer sends"). nlohmann's parser is iterative, but copying and
// destroying a value recurse once per level: a few megabytes of '[' would overflow the stack of whoever
// copies the result. Each value also costs tens of bytes parsed, so a frame of tiny values would grow
// about twentyfold in memory; the value count bounds that.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/result.h"

namespace fr {

struct JsonLimits {
  size_t max_depth = 32;      // arrays and objects nested at most this deep
  size_t max_items = 65536;   // values (object keys included) at most
  const char* what = "message";  // names the input in errors: "<what> nests deeper than 32 levels"
};

// Daemon protocol frames (up to 16 MiB): a manifest of tens of thousands of tensors fits many times over.
inline constexpr JsonLimits kFrameJsonLimits{32, size_t{1} << 21, "frame"};
// Small channels: fastrestartd's control socket, the standby gate, the snapshot exchange, readiness
// reports, HTTP request bodies.
inline constexpr JsonLimits kSmallJsonLimits{32, 65536, "message"};

// The scan alone: Errc::kProtocol naming the limit passed. Malformed text passes (the parser rejects it).
Status check_json_bounds(std::string_view text, const JsonLimits& limits);
// Scan, then parse: Errc::kProtocol for a limit passed or text that is not JSON ("<what> is not valid JSON").
Result<nlohmann::json> parse_json_bounded(std::string_view text, const JsonLimits& limits);
// For callers that treat every unusable input alike: the value, or a discarded one (is_discarded()) when the
// text is not JSON or passes `limits`.
nlohmann::json parse_json_or_discarded(std::string_view text, const JsonLimits& limits = kSmallJsonLimits);

}  // namespace fr
