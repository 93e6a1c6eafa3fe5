#include "services/gateway/routing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace herd::gateway {

absl::StatusOr<RoutePolicy> ParseRoutePolicy(const std::string& name) {
  if (name == "least_loaded") return RoutePolicy::kLeastLoaded;
  if (name == "prefix") return RoutePolicy::kPrefix;
  return absl::InvalidArgumentError(absl::StrCat("--route_policy '", name, "': use least_loaded or prefix"));
}

const char* RouteReasonName(RouteReason r) {
  switch (r) {
    case RouteReason::kLeastLoaded:
      return "least_loaded";
    case RouteReason::kPrefix:
      return "prefix";
    case RouteReason::kPrefixOverloaded:
      return "prefix_overloaded";
  }
  return "least_loaded";
}

namespace {

// a before b in least-loaded order.
bool LessLoaded(const RouteCandidate& a, const RouteCandidate& b) {
  if (a.load != b.load) return a.load < b.load;
  if (a.kv_cells_held != b.kv_cells_held) return a.kv_cells_held < b.kv_cells_held;
  return a.address < b.address;
}

}  // namespace

RouteDecision ChooseWorker(RoutePolicy policy, const std::vector<RouteCandidate>& c, int64_t max_extra_load,
                           int64_t prefix_tokens_per_load) {
  RouteDecision d;
  size_t least = 0;
  int64_t longest = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (LessLoaded(c[i], c[least])) least = i;
    longest = std::max(longest, c[i].prefix_tokens);
  }
  d.index = least;
  if (policy == RoutePolicy::kLeastLoaded || longest == 0) return d;
  const int64_t min_load = c[least].load;
  const int64_t limit = min_load + std::max<int64_t>(0, max_extra_load);
  const int64_t per_load = std::max<int64_t>(0, prefix_tokens_per_load);
  const auto score = [&](const RouteCandidate& x) { return x.prefix_tokens - per_load * (x.load - min_load); };
  size_t best = least;
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i].load > limit) continue;
    const int64_t si = score(c[i]), sb = score(c[best]);
    if (si > sb || (si == sb && LessLoaded(c[i], c[best]))) best = i;
  }
  d.index = best;
  if (c[best].prefix_tokens < longest) {
    d.reason = RouteReason::kPrefixOverloaded;
  } else {
    d.reason = RouteReason::kPrefix;
  }
  return d;
}

}  // namespace herd::gateway
