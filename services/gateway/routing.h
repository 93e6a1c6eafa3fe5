// Choosing a worker for a request: least-loaded, or prefix-aware (cache-aware routing in
// the spirit of SGLang's router and llm-d's precise prefix-cache scorer): prefer the
// worker whose KV cache already holds the longest prefix of the prompt, unless that
// worker is busier than the least-loaded one by more than a slack, so a hot prefix
// cannot pile every request onto one worker.
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
  int64_t kv_cells_held = 0;  // cells running sequences and cached prompt prefixes hold
  int64_t prefix_tokens = 0;  // leading prompt tokens its prefix cache is expected to supply
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

/// Default of --route_prefix_tokens_per_load: the cached prompt tokens that outweigh one
/// more sequence (active or queued) on a worker. With it and the default slack of 8, a
/// tenant's 400-token prefix keeps its requests on its worker until that worker runs 8
/// more sequences than the least loaded (serve_bench cluster mode: misses fell from 9-31
/// per level with a flat slack of 4 to 2-12), while a 16-token common opening is not
/// worth one extra sequence (a restarted worker, cold, gets traffic again at once).
inline constexpr int64_t kRoutePrefixTokensPerLoad = 50;

/// Picks one of `c` (non-empty).
///  kLeastLoaded: least load, then fewest KV cells held, then address. Counting the
///  cached prefixes' cells sends a new prefix to the worker with the most cache room,
///  which spreads tenants over the workers: a worker holding more prefixes than its pool
///  keeps evicts them, and every later request for one is a cold prefill.
///  kPrefix: among candidates with load <= min load + max_extra_load, the one with the
///  highest prefix_tokens - prefix_tokens_per_load * (load - min load) (a cache hit traded
///  against the wait behind more sequences), then as kLeastLoaded. max_extra_load >= 0
///  (0: prefix only breaks ties between equally loaded workers); prefix_tokens_per_load
///  >= 0 (0: the longest prefix within the slack, whatever the load). A full worker
///  (load at its max_sequences) is not passed over as such: with short completions a
///  queued request waits less than a cold prefill of its prefix takes (serve_bench
///  cluster mode, C=16: 19 decisions against the prefix and p90 TTFT 1110 ms with that
///  rule, 12 and 748 ms without it).
RouteDecision ChooseWorker(RoutePolicy policy, const std::vector<RouteCandidate>& c, int64_t max_extra_load,
                           int64_t prefix_tokens_per_load = kRoutePrefixTokensPerLoad);

}  // namespace herd::gateway
