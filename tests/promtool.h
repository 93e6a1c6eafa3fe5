// Checks Prometheus exposition text with `promtool check metrics` (Debian's prometheus
// package, installed by tools/setup.sh): metric names, types, HELP lines and the
// naming conventions (no _total suffix on gauges, ...).
#pragma once
#include <string>

#include "absl/status/status.h"

namespace herd::testing {

/// OK when promtool accepts `text`; FAILED_PRECONDITION with promtool's output when it
/// reports problems; NOT_FOUND when promtool is not installed.
absl::Status PromtoolCheckMetrics(const std::string& text);

}  // namespace herd::testing
