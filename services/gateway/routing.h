// Choosing a worker for a request: least-loaded, or prefix-aware (cache-aware routing in
// the spirit of SGLang's router and llm-d's precise prefix-cache scorer): prefer the
// worker whose KV cache already holds the longest prefix of the prompt, unless that
// worker is full (its sequence slots taken: the request would queue) while another has
// room, or busier than the least-loaded one by more than a slack, so a hot prefix cannot
// pile every request onto one worker.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::gateway {

/// --route_policy.
enum class RoutePolicy { kLeastLoaded, kPrefix };

/// "least_loaded" | "prefix" -> RoutePolicy. INVALID_ARGUMENT naming --route_policy otherwise.
absl::StatusOr<RoutePolicy> ParseRoutePolicy(const std::string& name);

/// One eligible worker as the router sees it.
struct RouteCandidate {
  std::string address;
  int64_t load = 0;           // active + queued sequences at its last Info + sessions opened since
  int64_t kv_cells_used = 0;  // cells running sequences hold
  int64_t prefix_tokens = 0;  // leading prompt tokens its prefix cache is expected to supply
  int64_t capacity = 0;       // its sequence slots (WorkerInfo.max_sequences); 0 = unknown
};

/// Why a worker was chosen (the label of herd_gateway_route_decisions_total).
enum class RouteReason {
  kLeastLoaded,       // policy least_loaded, or no candidate holds any prefix of the prompt
  kPrefix,            // the longest cached prefix among workers within the load slack
  kPrefixOverloaded,  // a longer prefix sits on a worker beyond the slack: balanced instead
};
const char* RouteReasonName(RouteReason r);

struct RouteDecision {
  size_t index = 0;  // into the candidates
  RouteReason reason = RouteReason::kLeastLoaded;
};

/// Picks one of `c` (non-empty).
///  kLeastLoaded: least load, then fewest KV cells used, then address.
///  kPrefix: among the candidates with room (load < capacity, or capacity unknown; all
///  of them when none has room) and load <= their min load + max_extra_load, the one
///  with the most prefix_tokens, then as kLeastLoaded. max_extra_load >= 0 (0: prefix
///  only breaks ties between equally loaded workers). A full worker is passed over
///  because a request there waits for a whole sequence to finish, far longer than the
///  prefill a cached prefix saves.
RouteDecision ChooseWorker(RoutePolicy policy, const std::vector<RouteCandidate>& c, int64_t max_extra_load);

}  // namespace herd::gateway
